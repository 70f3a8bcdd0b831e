#include "jobkit/checkpoints.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>

#include "checkpoints/crc32c.hpp"
#include "checkpoints/manifest.hpp"
#include "checkpoints/memory_tier.hpp"
#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/failure.hpp"
#include "core/json.hpp"
#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/helpers.hpp"
#include "jobkit/log.hpp"
#include "jobkit/runtime.hpp"
#include "log/library_log.hpp"
#include "preemption/slurm_api.hpp"
#include "progress/tracker.hpp"
#include "recovery/events.hpp"

namespace jobkit {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view step_prefix = "step-";
constexpr std::size_t step_digits = 12;
constexpr std::string_view manifest_name = "manifest.json";
constexpr std::uintmax_t max_manifest_bytes = std::uintmax_t{1} << 30;

/// (path relative to the part, size, CRC-32C) of one file of a part.
using part_file = std::tuple<std::string, std::uint64_t, std::uint32_t>;
/// (error, host, files, step, held, free): what a rank tells rank 0 when it commits; with the
/// memory tier, a node's lowest rank adds the bytes its committed memory steps hold and the free
/// bytes of their file system.
using part_report =
    std::tuple<std::string, std::string, std::vector<part_file>, std::int64_t, std::uint64_t, std::uint64_t>;

std::string part_name(int rank) { return fmt::format("rank-{}", rank); }

/// Every rank's error text, or empty: throws the same jobkit::error on every rank when any is set.
void agree(const std::vector<std::string>& errors, std::string_view what) {
  std::string all;
  for (const auto& e : errors) {
    if (!e.empty()) all += fmt::format("{}{}", all.empty() ? "" : "; ", e);
  }
  if (!all.empty()) throw error(errc::io, fmt::format("{}: {}", what, all));
}

void fsync_path(const fs::path& path, bool directory) {
  detail::descriptor fd(::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    const int code = errno;
    throw error(errc::io, fmt::format("cannot flush '{}' to storage: {}", path.string(), detail::errno_text(code)),
                code);
  }
}

/// The size and CRC-32C of an open file, read to its end.
std::pair<std::uint64_t, std::uint32_t> checksum(int fd, const fs::path& file) {
  std::vector<std::byte> buffer(std::size_t{1} << 20);
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
  const int code = detail::read_each(fd, buffer, [&](std::span<const std::byte> piece) {
    crc = detail::crc32c(piece, crc);
    size += piece.size();
  });
  if (code != 0) {
    throw error(errc::io, fmt::format("cannot read '{}': {}", file.string(), detail::errno_text(code)), code);
  }
  return {size, crc};
}

/// A descriptor of `file` opened for reading, for detail::descriptor to own.
int open_for_reading(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int code = errno;
    throw error(errc::io, fmt::format("cannot open '{}': {}", file.string(), detail::errno_text(code)), code);
  }
  return fd;
}

/// Flushes one file to storage and returns its size and CRC-32C, read back.
part_file flush_file(const fs::path& file, const fs::path& part) {
  detail::descriptor fd(open_for_reading(file));
  if (::fsync(fd.get()) != 0) {
    const int code = errno;
    throw error(errc::io, fmt::format("cannot flush '{}' to storage: {}", file.string(), detail::errno_text(code)),
                code);
  }
  const auto [size, crc] = checksum(fd.get(), file);
  return {fs::relative(file, part).generic_string(), size, crc};
}

/// Flushes every file and directory of a part, the part and its parent; lists its files.
std::vector<part_file> flush_part(const fs::path& part) {
  std::error_code ec;
  if (!fs::is_directory(part, ec)) throw error(errc::io, fmt::format("its part '{}' is missing", part.string()));
  std::vector<part_file> files;
  std::vector<fs::path> directories{part};
  for (auto it = fs::recursive_directory_iterator(part); it != fs::recursive_directory_iterator(); ++it) {
    const auto status = it->symlink_status();
    if (fs::is_directory(status)) {
      directories.push_back(it->path());
    } else if (fs::is_regular_file(status)) {
      files.push_back(flush_file(it->path(), part));
    } else {
      throw error(errc::io, fmt::format("'{}' is not a regular file or directory", it->path().string()));
    }
  }
  for (const auto& d : directories) fsync_path(d, true);
  fsync_path(part.parent_path(), true);
  std::sort(files.begin(), files.end());
  return files;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  ::gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

/// Writes `text` to `path` through a temporary file, flushed, renamed into place.
void write_durably(const fs::path& path, std::string_view text) {
  const auto temporary = fs::path(path.string() + ".tmp");
  {
    detail::descriptor fd(::open(temporary.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644));
    int code = fd.get() < 0 ? errno : detail::write_file_all(fd.get(), text.data(), text.size());
    if (code == 0 && ::fsync(fd.get()) != 0) code = errno;
    if (code != 0) {
      throw error(errc::io, fmt::format("cannot write '{}': {}", temporary.string(), detail::errno_text(code)), code);
    }
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int code = errno;
    throw error(errc::io, fmt::format("cannot rename '{}': {}", temporary.string(), detail::errno_text(code)), code);
  }
}

/// Renames a directory tree out of the way (so no partial tree is ever left under a step's
/// name) and returns the new name, for remove_trees; an empty path if it could not be renamed.
fs::path retire(const fs::path& directory, std::string_view attempt) {
  const auto doomed = fs::path(fmt::format("{}.removing.{}", directory.string(), attempt));
  std::error_code ec;
  fs::rename(directory, doomed, ec);
  if (ec) {
    detail::library_log(log_level::warning, "checkpoints: cannot remove '{}': {}", directory.string(), ec.message());
    return {};
  }
  return doomed;
}

void remove_trees(const std::vector<fs::path>& retired) {
  for (const auto& doomed : retired) {
    std::error_code ec;
    if (!doomed.empty()) fs::remove_all(doomed, ec);
    if (ec)
      detail::library_log(log_level::warning, "checkpoints: cannot remove '{}': {}", doomed.string(), ec.message());
  }
}

std::vector<std::int64_t> complete_steps(const fs::path& root) {
  std::vector<std::int64_t> steps;
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto step = parse_checkpoint_step_name(entry.path().filename().string());
    std::error_code ec;
    if (step && fs::is_regular_file(entry.path() / manifest_name, ec)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

/// The committed memory steps of a job's memory directory, oldest first.
std::vector<std::int64_t> memory_steps(const fs::path& job_directory) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(job_directory, ec)) {
    if (const auto step = parse_checkpoint_step_name(entry.path().filename().string())) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::uint64_t bytes_of(const std::vector<part_file>& files) {
  std::uint64_t total = 0;
  for (const auto& f : files) total += std::get<1>(f);
  return total;
}

/// Makes the memory directory (sticky and open to all, as /tmp, when this creates it), sweeps what
/// ended jobs left there, makes this job's directory (this user's only) with its record of the
/// job's end, and removes what other attempts of this job left unfinished in it.
void prepare_memory(const detail::memory_tier& tier, const identity& id, std::string_view stage_tag) {
  std::error_code ec;
  if (!fs::is_directory(tier.directory, ec)) {
    fs::create_directories(tier.directory, ec);
    if (ec) {
      throw error(errc::io,
                  fmt::format("cannot create the memory directory '{}': {}", tier.directory.string(), ec.message()));
    }
    fs::permissions(tier.directory, fs::perms::all | fs::perms::sticky_bit, ec);
  }
  const auto removed = detail::sweep_memory(
      tier.directory, id.job_id.empty() ? "nojob" : id.job_id, ::getuid(), std::chrono::system_clock::now(),
      [silent = false](const std::string& job) mutable -> std::optional<bool> {
        // A controller busy for a moment (a loaded machine: squeue past 5 s, "Socket timed out") is
        // asked once more a second later: a tier left behind holds the node's memory. One that did
        // not answer twice (or no squeue) is not asked about the sweep's other directories.
        if (silent) return std::nullopt;
        std::optional<bool> ended;
        detail::command_result answer;
        for (int attempt = 0; attempt < 2 && !ended && (attempt == 0 || answer.status != 127); ++attempt) {
          if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
          answer = detail::run_bounded({"squeue", "-h", "-j", job, "-o", "%T"}, std::chrono::seconds(5));
          ended = detail::job_ended_from_squeue(answer.status, answer.out, answer.err);
        }
        if (!ended) {
          silent = true;
          detail::library_log(log_level::info,
                              "checkpoints: Slurm cannot tell whether job {} has ended (squeue -j {}: {}): the "
                              "memory tiers of other jobs go by their recorded end (5 min past it) in this sweep",
                              job, job,
                              answer.status == 124
                                  ? std::string("no answer in 5 s")
                                  : fmt::format("exit status {}, {}", answer.status, detail::first_line(answer.err)));
        }
        return ended;
      });
  for (const auto& path : removed) {
    detail::library_log(log_level::info, "checkpoints: removed '{}', the memory tier of a job that has ended",
                        path.string());
  }
  fs::create_directories(tier.job_directory, ec);
  fs::permissions(tier.job_directory, fs::perms::owner_all, ec);
  if (ec || !fs::is_directory(tier.job_directory)) {
    throw error(errc::io, fmt::format("cannot create '{}' (JOBKIT_CHECKPOINT_MEMORY): {}", tier.job_directory.string(),
                                      ec.message()));
  }
  std::optional<std::chrono::system_clock::time_point> end;
  try {
    end = detail::slurm_job_end_time();
  } catch (const error&) {
  }
  write_durably(tier.job_directory / ".job", detail::job_record(end));
  for (const auto& entry : fs::directory_iterator(tier.job_directory)) {
    const auto name = entry.path().filename().string();
    const auto partial = name.find(".partial.");
    const bool other_attempt = partial != std::string::npos && name.substr(partial + 9) != stage_tag;
    if (other_attempt || name.find(".fetch.") != std::string::npos || name.find(".removing.") != std::string::npos) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

/// Removes a directory tree, renaming it out of the way first.
void remove_tree(const fs::path& directory, std::string_view attempt) { remove_trees({retire(directory, attempt)}); }

}  // namespace

std::string checkpoint_step_name(std::int64_t step) { return fmt::format("{}{:0{}}", step_prefix, step, step_digits); }

std::optional<std::int64_t> parse_checkpoint_step_name(std::string_view name) noexcept {
  if (name.size() != step_prefix.size() + step_digits || !name.starts_with(step_prefix)) return std::nullopt;
  const auto digits = name.substr(step_prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::int64_t step = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return step;
}

checkpoints::checkpoints(fs::path root, checkpoint_options options, std::source_location site)
    : root_(std::move(root)), options_(options) {
  if (options_.keep < 0) {
    throw error(errc::invalid_argument, fmt::format("checkpoints: keep={} is negative", options_.keep));
  }
  if (options_.shared_every < 1) {
    throw error(errc::invalid_argument,
                fmt::format("checkpoints: shared_every={} is not a positive number", options_.shared_every));
  }
  if (options_.memory_keep < 1 || options_.memory_keep > 2) {
    throw error(errc::invalid_argument, fmt::format("checkpoints: memory_keep={} is not 1 or 2", options_.memory_keep));
  }
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints")};
  const auto& id = current_identity();
  attempt_ = fmt::format("{}.r{}", id.job_id.empty() ? "nojob" : id.job_id, id.restart_count);
  // A step of its own too: `jobkit run` restarts a failed step inside the same job attempt, and a
  // save that the failed step left unfinished must count as another attempt's (retired, never
  // written into again).
  stage_tag_ = id.step_id.empty() ? attempt_ : fmt::format("{}.s{}", attempt_, id.step_id);
  auto& g = world();

  std::string problem;
  std::string memory_text;
  std::optional<std::uint64_t> limit_variable;
  try {
    if (const auto memory = detail::memory_directory_from(options_.memory, detail::process_environment())) {
      memory_text = memory->string();
      if (options_.memory_limit == 0) limit_variable = detail::memory_limit_from(detail::process_environment());
    }
  } catch (const std::exception& e) {
    problem = fmt::format("{}: {}", detail::describe_self(), e.what());
  }
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) {
    problem += fmt::format("{}{}: cannot create root='{}': {}", problem.empty() ? "" : "; ", detail::describe_self(),
                           root_.string(), ec.message());
  }
  agree(g.all_gather(problem, call, site), "checkpoints");

  const int fs_rank = fs_local_rank(root_, call);
  const auto placed =
      g.all_gather(std::tuple<std::string, int, std::string>{id.hostname, fs_rank, memory_text}, call, site);
  const bool shared =
      std::all_of(placed.begin(), placed.end(), [&, r = 0](const auto& p) mutable { return std::get<1>(p) == r++; });
  committer_of_.resize(placed.size());
  for (std::size_t r = 0; r < placed.size(); ++r) {
    if (shared) continue;  // rank 0 commits for everyone
    const auto first = std::find_if(placed.begin(), placed.end(), [&](const auto& p) {
      return std::get<0>(p) == std::get<0>(placed[r]) && std::get<1>(p) == 0;
    });
    if (first == placed.end()) {
      throw error(errc::invalid_environment,
                  fmt::format("checkpoints: no rank on host {} has fs_local_rank 0 for root='{}' (FS_LOCAL_RANK?)",
                              std::get<0>(placed[r]), root_.string()));
    }
    committer_of_[r] = static_cast<int>(first - placed.begin());
  }
  committer_ = committer_of_[static_cast<std::size_t>(id.rank)] == id.rank;

  for (std::size_t r = 1; r < placed.size(); ++r) {
    if (std::get<2>(placed[r]) != std::get<2>(placed[0])) {
      throw error(errc::invalid_environment,
                  fmt::format("checkpoints under '{}': the memory tier differs between ranks: rank 0 has "
                              "JOBKIT_CHECKPOINT_MEMORY='{}', rank {} '{}' (checkpoint_options::memory included)",
                              root_.string(), std::get<2>(placed[0]), r, std::get<2>(placed[r])));
    }
  }
  problem.clear();
  if (!memory_text.empty()) {
    auto tier = std::make_shared<detail::memory_tier>();
    tier->directory = memory_text;
    tier->job_directory = tier->directory / detail::memory_job_directory_name(id.job_id, root_);
    if (options_.memory_limit != 0) {
      tier->limit = options_.memory_limit;
      tier->limit_source = fmt::format("checkpoint_options::memory_limit={}", tier->limit);
    } else if (limit_variable) {
      tier->limit = *limit_variable;
      tier->limit_source = fmt::format("JOBKIT_CHECKPOINT_MEMORY_LIMIT={}", tier->limit);
    }
    for (const auto& p : placed) tier->hosts.push_back(std::get<0>(p));
    tier->partners = detail::memory_partners(tier->hosts);
    tier->leader = std::find(tier->hosts.begin(), tier->hosts.end(), id.hostname) - tier->hosts.begin() == id.rank;
    if (tier->leader) {
      try {
        prepare_memory(*tier, id, stage_tag_);
      } catch (const std::exception& e) {
        problem = fmt::format("{}: {}", detail::describe_self(), e.what());
      }
    }
    memory_ = std::move(tier);
  }

  std::vector<fs::path> retired;
  if (committer_) {
    try {
      retired = retire_unwanted(false, false);
    } catch (const std::exception& e) {
      problem += fmt::format("{}{}: {}", problem.empty() ? "" : "; ", detail::describe_self(), e.what());
    }
  }
  agree(g.all_gather(problem, call, site), fmt::format("checkpoints under '{}'", root_.string()));
  remove_trees(retired);
}

fs::path checkpoints::memory_directory() const { return memory_ ? memory_->job_directory : fs::path{}; }

fs::path checkpoints::staging(std::int64_t step) const {
  return root_ / fmt::format("{}.partial.{}", checkpoint_step_name(step), stage_tag_);
}

fs::path checkpoints::part(std::int64_t step) const {
  if (memory_ && memory_->staged && memory_->staged->step == step) return memory_->staged->directory;
  return root_ / checkpoint_step_name(step) / part_name(current_identity().rank);
}

/// Renames away the unfinished saves of this job's earlier attempts (with `own_attempt`, also of
/// this attempt: after a commit, a begin() without commit()) and returns them for remove_trees,
/// with the leftovers of interrupted removals; with `old_steps`, also the oldest complete steps
/// beyond `keep`. Saves of other jobs may be in progress: they are left alone.
std::vector<fs::path> checkpoints::retire_unwanted(bool own_attempt, bool old_steps) const {
  const auto& id = current_identity();
  const std::string job_attempts = fmt::format("{}.r", id.job_id.empty() ? "nojob" : id.job_id);
  std::vector<fs::path> retired;
  for (const auto& entry : fs::directory_iterator(root_)) {
    const auto name = entry.path().filename().string();
    if (name.find(".removing.") != std::string::npos) {
      retired.push_back(entry.path());
      continue;
    }
    const auto partial = name.find(".partial.");
    if (partial == std::string::npos || !parse_checkpoint_step_name(name.substr(0, partial))) continue;
    const auto attempt = name.substr(partial + 9);
    if (attempt.starts_with(job_attempts) && (own_attempt || attempt != stage_tag_)) {
      retired.push_back(retire(entry.path(), attempt_));
    }
  }
  const auto steps = old_steps ? complete_steps(root_) : std::vector<std::int64_t>{};
  for (std::size_t i = 0; options_.keep > 0 && i + static_cast<std::size_t>(options_.keep) < steps.size(); ++i) {
    retired.push_back(retire(root_ / checkpoint_step_name(steps[i]), attempt_));
  }
  return retired;
}

std::optional<std::int64_t> checkpoints::latest(std::source_location site) {
  const auto started = std::chrono::steady_clock::now();
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::latest")};
  detail::memory_tier* const tier = memory_.get();
  // (step, world size, ranks whose parts it holds): a node's committed memory steps
  using held_step = std::tuple<std::int64_t, int, std::vector<int>>;
  // (error, committer, complete steps on its file system, its node's memory steps)
  using listing = std::tuple<std::string, bool, std::vector<std::int64_t>, std::vector<held_step>>;
  listing mine{"", committer_, {}, {}};
  if (committer_) {
    try {
      std::get<2>(mine) = complete_steps(root_);
    } catch (const std::exception& e) {
      std::get<0>(mine) = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
  }
  if (tier && tier->leader) {
    for (const auto& [step, held] : detail::memory_inventory(tier->job_directory)) {
      std::vector<int> ranks;
      for (const auto& [rank, files] : held.parts) ranks.push_back(rank);
      std::get<3>(mine).emplace_back(step, held.world_size, std::move(ranks));
    }
  }
  auto& g = world();
  const auto all = g.gather(mine, {.root = 0, .timeout = call.timeout}, site);
  // (error, the root's newest step, the memory's newest whole step or -1, each rank's sources)
  using answer = std::tuple<std::string, std::optional<std::int64_t>, std::int64_t, std::vector<std::vector<int>>>;
  answer decided{"", std::nullopt, -1, {}};
  if (g.rank() == 0) {
    std::optional<std::set<std::int64_t>> everywhere;
    for (const auto& [problem, committer, steps, memory] : all) {
      if (!problem.empty()) std::get<0>(decided) += (std::get<0>(decided).empty() ? "" : "; ") + problem;
      if (!committer) continue;
      std::set<std::int64_t> here_too(steps.begin(), steps.end());
      if (!everywhere) {
        everywhere = std::move(here_too);
      } else {
        std::erase_if(*everywhere, [&](std::int64_t s) { return !here_too.contains(s); });
      }
    }
    if (everywhere && !everywhere->empty()) std::get<1>(decided) = *everywhere->rbegin();
    if (tier) {
      const int size = g.size();
      std::map<std::int64_t, std::vector<std::vector<int>>> holders;  // step -> rank -> leaders holding it
      for (std::size_t leader = 0; leader < all.size(); ++leader) {
        for (const auto& [step, world_size, ranks] : std::get<3>(all[leader])) {
          if (world_size != size) continue;
          auto& of_step = holders[step];
          of_step.resize(static_cast<std::size_t>(size));
          for (const int r : ranks) {
            if (r >= 0 && r < size) of_step[static_cast<std::size_t>(r)].push_back(static_cast<int>(leader));
          }
        }
      }
      for (auto it = holders.rbegin(); it != holders.rend(); ++it) {
        if (std::any_of(it->second.begin(), it->second.end(), [](const auto& h) { return h.empty(); })) continue;
        if (std::get<1>(decided) && *std::get<1>(decided) > it->first) break;  // the root's is newer
        std::get<2>(decided) = it->first;
        // Each rank's sources: its own node first, then the others, each read by one of its ranks.
        std::map<std::string, std::vector<int>> ranks_of;
        for (int r = 0; r < size; ++r) ranks_of[tier->hosts[static_cast<std::size_t>(r)]].push_back(r);
        auto& sources = std::get<3>(decided);
        sources.resize(static_cast<std::size_t>(size));
        for (int r = 0; r < size; ++r) {
          const auto& own = tier->hosts[static_cast<std::size_t>(r)];
          for (const int leader : it->second[static_cast<std::size_t>(r)]) {
            const auto& host = tier->hosts[static_cast<std::size_t>(leader)];
            const auto& there = ranks_of[host];
            const int reader = host == own ? r : there[static_cast<std::size_t>(r) % there.size()];
            auto& list = sources[static_cast<std::size_t>(r)];
            if (host == own) {
              list.insert(list.begin(), reader);
            } else {
              list.push_back(reader);
            }
          }
        }
        break;
      }
    }
  }
  decided = g.broadcast(decided, {.root = 0, .timeout = call.timeout}, site);
  if (!std::get<0>(decided).empty()) {
    throw error(errc::io, fmt::format("checkpoints under '{}': cannot list: {}", root_.string(), std::get<0>(decided)));
  }
  if (!tier) {
    const auto found = std::get<1>(decided);
    if (found) {
      // A restore: a checkpoint phase until the next step boundary (docs/progress.md).
      detail::progress_restore_begin();
      if (g.rank() == 0) {
        const auto& self = current_identity();
        detail::record_event("checkpoint_loaded", self.rank, self.hostname,
                             fmt::format(R"("checkpoint_step":{},"source":"shared")", *found));
      }
    }
    return found;
  }

  tier->staged.reset();
  const auto root_step = std::get<1>(decided);
  const auto step = std::get<2>(decided);
  const auto& sources = std::get<3>(decided);
  const auto& id = current_identity();
  const int me = g.rank();
  std::string kind = "shared";
  if (step >= 0) {
    const auto memory_step = tier->job_directory / checkpoint_step_name(step);
    const auto fetch = tier->job_directory / fmt::format("{}.fetch.{}", checkpoint_step_name(step), stage_tag_);
    std::map<int, std::vector<part_file>> here;  // this node's parts of the step
    {
      auto inventory = detail::memory_inventory(tier->job_directory);
      if (const auto it = inventory.find(step); it != inventory.end()) here = std::move(it->second.parts);
    }
    const auto size = static_cast<std::size_t>(g.size());
    std::vector<std::size_t> next(size, 0);
    std::vector<char> done(size, 0);
    std::vector<int> lacking;
    for (;;) {
      for (std::size_t r = 0; r < size; ++r) {
        if (!done[r] && next[r] >= sources[r].size()) lacking.push_back(static_cast<int>(r));
      }
      if (!lacking.empty() || std::all_of(done.begin(), done.end(), [](char d) { return d != 0; })) break;
      std::vector<std::pair<int, int>> copies;
      for (std::size_t r = 0; r < size; ++r) {
        const int from = done[r] ? -1 : sources[r][next[r]];
        if (from >= 0 && tier->hosts[static_cast<std::size_t>(from)] != tier->hosts[r]) {
          copies.emplace_back(from, static_cast<int>(r));
        }
      }
      std::string damaged;  // what this rank found wrong with its source of this round
      const auto mine_index = static_cast<std::size_t>(me);
      const int source = done[mine_index] ? -1 : sources[mine_index][next[mine_index]];
      const auto own_part = memory_step / part_name(me);
      if (source >= 0 && tier->hosts[static_cast<std::size_t>(source)] == id.hostname) {
        const auto it = here.find(me);
        damaged =
            it == here.end() ? "its node's manifest lists no files of it" : detail::check_part(own_part, it->second);
        if (damaged.empty()) tier->staged = detail::memory_tier::staged_part{step, own_part, it->second};
      }
      try {
        for (const auto index : detail::copies_of(me, copies)) {
          const auto [from, to] = copies[index];
          auto& pair = tier->pair(from, to, call.timeout);
          if (from == me) {
            const auto it = here.find(to);
            const auto e = detail::send_part(pair, memory_step / part_name(to),
                                             it == here.end() ? std::vector<part_file>{} : it->second, call.timeout);
            if (!e.empty()) {
              detail::library_log(log_level::warning, "checkpoints: step {}: sending rank {}'s part: {}", step, to, e);
            }
          } else {
            std::vector<part_file> files;
            const auto limit = tier->limit != 0 ? tier->limit : std::numeric_limits<std::uint64_t>::max() / 2;
            damaged = detail::receive_part(pair, fetch / part_name(me), limit, call.timeout, &files);
            if (damaged.empty()) {
              std::error_code ec;
              fs::create_directories(memory_step, ec);
              fs::remove_all(own_part, ec);
              fs::rename(fetch / part_name(me), own_part, ec);
              if (ec) {
                damaged = fmt::format("cannot move it to '{}': {}", own_part.string(), ec.message());
              } else {
                tier->staged = detail::memory_tier::staged_part{step, own_part, files};
              }
            }
          }
        }
      } catch (const error& e) {
        throw error(e.code(), fmt::format("checkpoints under '{}': fetching step {} from memory: {}", root_.string(),
                                          step, e.what()));
      }
      if (source >= 0 && !damaged.empty()) {
        tier->staged.reset();
        const auto& host = tier->hosts[static_cast<std::size_t>(source)];
        detail::library_log(
            log_level::warning,
            "checkpoints: step {}: rank {}'s part in the memory of node {} ({}) is damaged or "
            "incomplete, not used: {}; {}",
            step, me, host, host == id.hostname ? "its own node" : "its partner's copy", damaged,
            next[mine_index] + 1 < sources[mine_index].size() ? "trying its next copy" : "it has no other copy");
      }
      const auto outcomes = g.all_gather(std::pair<bool, bool>{source >= 0, damaged.empty()}, call, site);
      for (std::size_t r = 0; r < size; ++r) {
        if (!outcomes[r].first) continue;
        if (outcomes[r].second) {
          done[r] = 1;
        } else {
          ++next[r];
        }
      }
    }
    if (lacking.empty()) {
      kind = tier->hosts[static_cast<std::size_t>(
                 sources[static_cast<std::size_t>(me)][next[static_cast<std::size_t>(me)]])] == id.hostname
                 ? "memory"
                 : "partner";
    } else {
      tier->staged.reset();
      if (me == 0) {
        detail::library_log(log_level::warning,
                            "checkpoints: step {} is not whole in memory: no complete, checksummed copy of the part "
                            "of rank {}; every rank loads {} from the root '{}'",
                            step, detail::rank_ranges(lacking),
                            root_step ? fmt::format("step {}", *root_step) : std::string("nothing"), root_.string());
      }
    }
  }
  const auto chosen = tier->staged ? std::optional<std::int64_t>(step) : root_step;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const auto each = g.gather(std::pair<std::string, double>{chosen ? kind : "none", seconds},
                             {.root = 0, .timeout = call.timeout}, site);
  if (me == 0 && chosen) {
    std::map<std::string, std::vector<int>> by_kind{{"memory", {}}, {"partner", {}}, {"shared", {}}};
    double slowest = 0;
    for (std::size_t r = 0; r < each.size(); ++r) {
      by_kind[each[r].first].push_back(static_cast<int>(r));
      slowest = std::max(slowest, each[r].second);
    }
    detail::library_log(log_level::info,
                        "checkpoints: step {} staged in {:.3f} s: from memory ranks {}, from a partner's copy ranks "
                        "{}, from the root ranks {}",
                        *chosen, slowest, detail::rank_ranges(by_kind["memory"]),
                        detail::rank_ranges(by_kind["partner"]), detail::rank_ranges(by_kind["shared"]));
    std::string source;
    for (const auto& [kind_of, ranks] : by_kind) {
      if (!ranks.empty()) source += (source.empty() ? "" : "+") + kind_of;
    }
    detail::record_event(
        "checkpoint_loaded", id.rank, id.hostname,
        fmt::format(R"("checkpoint_step":{},"source":{},"memory":{},"partner":{},"shared":{},)"
                    R"("seconds":{:.3f})",
                    *chosen, detail::json_string(source), detail::json_string(detail::rank_ranges(by_kind["memory"])),
                    detail::json_string(detail::rank_ranges(by_kind["partner"])),
                    detail::json_string(detail::rank_ranges(by_kind["shared"])), slowest));
  }
  if (chosen) detail::progress_restore_begin();
  return chosen;
}

void checkpoints::verify(std::int64_t step, std::source_location site) {
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::verify")};
  const auto& id = current_identity();
  const auto directory = root_ / checkpoint_step_name(step);
  std::string problems;
  if (memory_ && memory_->staged && memory_->staged->step == step) {  // as latest() staged it
    problems = detail::check_part(memory_->staged->directory, memory_->staged->files);
    if (!problems.empty()) problems = fmt::format("{}: {}", detail::describe_self(), problems);
    agree(world().all_gather(problems, call, site),
          fmt::format("checkpoint step {} in the memory tier '{}' is damaged", step, memory_->job_directory.string()));
    return;
  }
  try {
    const auto manifest = directory / manifest_name;
    std::error_code ec;
    const auto bytes = fs::file_size(manifest, ec);
    if (ec) throw error(errc::io, fmt::format("cannot read '{}': {}", manifest.string(), ec.message()));
    if (bytes > max_manifest_bytes) {
      throw error(errc::io, fmt::format("'{}' holds {} bytes, more than a manifest may ({})", manifest.string(), bytes,
                                        max_manifest_bytes));
    }
    std::string text(bytes, '\0');
    detail::descriptor fd(open_for_reading(manifest));
    if (const int code = detail::pread_file_all(fd.get(), text.data(), text.size(), 0)) {
      throw error(errc::io, fmt::format("cannot read '{}': {}", manifest.string(), detail::errno_text(code)), code);
    }
    for (const auto& part : detail::parse_manifest_parts(text)) {
      if (part.rank != id.rank) continue;
      const auto file = directory / part.file;
      detail::descriptor fd_of_file(open_for_reading(file));
      const auto [size, crc] = checksum(fd_of_file.get(), file);
      if (size != part.size || crc != part.crc32c) {
        problems += fmt::format("{}'{}' has {} bytes and CRC-32C {:08x}, the manifest says {} and {:08x}",
                                problems.empty() ? "" : "; ", file.string(), size, crc, part.size, part.crc32c);
      }
    }
  } catch (const std::exception& e) {
    problems = e.what();
  }
  if (!problems.empty()) problems = fmt::format("{}: {}", detail::describe_self(), problems);
  agree(world().all_gather(problems, call, site),
        fmt::format("checkpoint step {} under '{}' is damaged", step, root_.string()));
}

fs::path checkpoints::begin(std::int64_t step) {
  if (step < 0) throw error(errc::invalid_argument, fmt::format("checkpoints::begin: step={} is negative", step));
  detail::progress_save_begin();  // a checkpoint phase until its commit ends (docs/progress.md)
  std::error_code ec;
  const bool memory_only = memory_ && memory_->saves % static_cast<std::uint64_t>(options_.shared_every) != 0;
  const auto stage_of = [&](std::int64_t s) {
    return memory_only ? memory_->job_directory / fmt::format("{}.partial.{}", checkpoint_step_name(s), stage_tag_)
                       : staging(s);
  };
  if (pending_ && *pending_ != step) fs::remove_all(stage_of(*pending_) / part_name(current_identity().rank), ec);
  const auto directory = stage_of(step) / part_name(current_identity().rank);
  fs::remove_all(directory, ec);
  fs::create_directories(directory, ec);
  if (ec) {
    throw error(errc::io,
                fmt::format("checkpoints::begin({}): cannot create '{}': {}", step, directory.string(), ec.message()));
  }
  pending_ = step;
  return directory;
}

void checkpoints::commit(std::source_location site) { commit_step(pending_, site); }

void checkpoints::commit(std::int64_t step, std::source_location site) { commit_step(step, site); }

bool checkpoints::requeue(const stop_cause& cause, std::source_location site) {
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::requeue")};
  auto& g = world();
  // A save begun and not committed on any rank: refused on every rank alike.
  const auto mine = pending_ ? fmt::format("rank {} began step {} and did not commit it", g.rank(), *pending_) : "";
  std::string begun;
  for (const auto& e : g.all_gather(mine, call, site)) {
    if (!e.empty()) begun += (begun.empty() ? "" : "; ") + e;
  }
  if (!begun.empty()) {
    throw error(errc::invalid_argument,
                fmt::format("checkpoints::requeue under '{}': {}: commit before the requeue", root_.string(), begun));
  }
  // On rank 0 only: Slurm's answer, recorded for the batch script and logged once; "" when requeued.
  const auto failure = g.compute_and_broadcast(
      [&] {
        std::string why;
        try {
          jobkit::requeue();
        } catch (const error& e) {
          why = e.what();
        }
        const auto stop = cause.reason == stop_reason::none ? std::string("no stop agreed") : to_string(cause);
        const auto outcome = why.empty() ? std::string("requeued") : "not requeued: " + why;
        try {
          write_durably(root_ / (".stopped-" + attempt_), fmt::format("{}; {}\n", stop, outcome));
        } catch (const error& e) {
          detail::library_log(log_level::warning, "checkpoints: the batch script will not see the stop: {}", e.what());
        }
        const auto job = current_identity().job_id;
        if (why.empty()) {
          detail::library_log(log_level::info, "stopped ({}) at a committed checkpoint: job {} requeued", stop, job);
        } else {
          detail::library_log(log_level::warning, "stopped ({}) at a committed checkpoint: job {} {}", stop, job,
                              outcome);
        }
        return why;
      },
      0, call, site);
  return failure.empty();
}

void checkpoints::commit_step(std::optional<std::int64_t> begun, const std::source_location& site) {
  struct save_ended {
    ~save_ended() { detail::progress_save_end(); }
  } const ended;  // however the commit ends
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::commit")};
  const auto& id = current_identity();
  auto& g = world();
  const std::int64_t step = begun.value_or(-1);
  detail::memory_tier* const tier = memory_.get();
  const bool to_root = !tier || tier->saves % static_cast<std::uint64_t>(options_.shared_every) == 0;
  if (tier) ++tier->saves;
  const auto memory_stage =
      tier ? tier->job_directory / fmt::format("{}.partial.{}", checkpoint_step_name(step), stage_tag_) : fs::path{};
  const auto written = (to_root ? staging(step) : memory_stage) / part_name(id.rank);

  part_report mine{"", id.hostname, {}, step, 0, 0};
  if (step < 0) {
    std::get<0>(mine) = fmt::format("{}: commit() without begin()", detail::describe_self());
  } else {
    try {
      std::get<2>(mine) = flush_part(written);
    } catch (const std::exception& e) {
      std::get<0>(mine) = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
  }
  if (tier && tier->leader) {
    for (const auto s : memory_steps(tier->job_directory)) {
      std::get<4>(mine) += detail::bytes_under(tier->job_directory / checkpoint_step_name(s));
    }
    std::get<5>(mine) = detail::free_bytes(tier->job_directory);
  }
  const auto reports = g.gather(mine, {.root = 0, .timeout = call.timeout}, site);

  // Rank 0 decides and hands every committer the manifest of its file system, and every node's
  // lowest rank the manifest of what its memory directory holds of the step.
  using order = std::tuple<std::string, std::string, std::string>;  // (error, manifest, memory manifest)
  std::vector<order> orders;
  if (g.rank() == 0) {
    std::string problems;
    for (std::size_t r = 0; r < reports.size(); ++r) {
      const auto& problem = std::get<0>(reports[r]);
      if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + problem;
      if (const auto theirs = std::get<3>(reports[r]); problem.empty() && theirs != step) {
        problems +=
            fmt::format("{}rank {} commits step {}, rank 0 step {}", problems.empty() ? "" : "; ", r, theirs, step);
      }
    }
    std::map<std::string, std::map<int, std::vector<part_file>>> held_by;  // host -> parts it keeps
    if (tier && problems.empty()) {
      std::map<std::string, std::uint64_t> needed;
      for (std::size_t r = 0; r < reports.size(); ++r) {
        const auto& files = std::get<2>(reports[r]);
        held_by[tier->hosts[r]][static_cast<int>(r)] = files;
        needed[tier->hosts[r]] += bytes_of(files);
        if (const int p = tier->partners[r]; p >= 0) {
          held_by[tier->hosts[static_cast<std::size_t>(p)]][static_cast<int>(r)] = files;
          needed[tier->hosts[static_cast<std::size_t>(p)]] += bytes_of(files);
        }
      }
      for (std::size_t c = 0; c < reports.size(); ++c) {
        const auto& host = tier->hosts[c];
        if (std::find(tier->hosts.begin(), tier->hosts.end(), host) - tier->hosts.begin() != static_cast<long>(c)) {
          continue;
        }
        const auto held = std::get<4>(reports[c]);
        const auto limit = tier->limit != 0 ? tier->limit : (std::get<5>(reports[c]) + held) / 2;
        if (held + needed[host] > limit) {
          const auto source = tier->limit != 0 ? tier->limit_source
                                               : fmt::format(
                                                     "the default limit {} (half of what its file system has "
                                                     "free, with what the tier holds there)",
                                                     limit);
          problems += fmt::format(
              "{}it does not fit in the memory tier of node {} ('{}'): its ranks' parts and its partners' copies "
              "need {} bytes, with {} bytes of earlier steps kept there until this one is whole, over {}",
              problems.empty() ? "" : "; ", host, tier->job_directory.string(), needed[host], held, source);
        }
      }
    }
    orders.resize(reports.size(), {problems, "", ""});
    if (problems.empty()) {
      const int nodes = static_cast<int>(std::set<int>(committer_of_.begin(), committer_of_.end()).size());
      for (std::size_t c = 0; to_root && c < reports.size(); ++c) {
        if (committer_of_[c] != static_cast<int>(c)) continue;
        std::string parts;
        for (std::size_t r = 0; r < reports.size(); ++r) {
          if (committer_of_[r] != static_cast<int>(c)) continue;
          for (const auto& [file, size, crc] : std::get<2>(reports[r])) {
            parts += fmt::format("{}\n{}", parts.empty() ? "" : ",",
                                 detail::manifest_line({static_cast<int>(r), std::get<1>(reports[r]),
                                                        part_name(static_cast<int>(r)) + "/" + file, size, crc}));
          }
        }
        std::get<1>(orders[c]) = fmt::format(
            "{{\"format\":\"jobkit-checkpoint\",\"version\":1,\"step\":{},\"job_id\":{},\"restart_count\":{},"
            "\"world_size\":{},\"file_systems\":{},\"committed_at\":\"{}\",\"parts\":[{}\n]}}\n",
            step, detail::json_string(id.job_id), id.restart_count, id.world_size, nodes, utc_now(), parts);
      }
      for (std::size_t c = 0; tier && c < reports.size(); ++c) {
        const auto& host = tier->hosts[c];
        if (std::find(tier->hosts.begin(), tier->hosts.end(), host) - tier->hosts.begin() == static_cast<long>(c)) {
          std::get<2>(orders[c]) = detail::memory_manifest(step, id.world_size, id.job_id, held_by[host]);
        }
      }
    }
  }
  const auto [problem, manifest, memory_manifest] = g.scatter(orders, {.root = 0, .timeout = call.timeout}, site);
  if (!problem.empty()) {
    // A refused step is dropped on every rank, its parts and the root's staging with them: nothing
    // of it stays half-written, in memory or on the root (where no later job would remove it).
    std::error_code ec;
    fs::remove_all(written, ec);
    pending_.reset();
    if (to_root) {
      g.barrier(call, site);  // every part removed before its directory is
      if (committer_ && step >= 0 && fs::exists(staging(step), ec)) remove_tree(staging(step), attempt_);
    }
    throw error(errc::io,
                fmt::format("checkpoint step {} under '{}' was not committed: {}", step, root_.string(), problem));
  }

  // The memory tier: this rank's part in its node's memory, and a copy on its partner's node.
  if (tier) {
    std::vector<std::string> failures;
    const auto& files = std::get<2>(mine);
    const auto in_memory = memory_stage / part_name(id.rank);
    if (to_root) {
      if (auto e = detail::copy_part(written, in_memory, files); !e.empty()) failures.push_back(std::move(e));
    }
    std::vector<std::pair<int, int>> copies;
    for (std::size_t r = 0; r < tier->partners.size(); ++r) {
      if (tier->partners[r] >= 0) copies.emplace_back(static_cast<int>(r), tier->partners[r]);
    }
    try {
      for (const auto index : detail::copies_of(id.rank, copies)) {
        const auto [from, to] = copies[index];
        auto& pair = tier->pair(from, to, call.timeout);
        if (from == id.rank) {
          if (auto e = detail::send_part(pair, in_memory, files, call.timeout); !e.empty()) failures.push_back(e);
        } else {
          const auto limit = tier->limit != 0 ? tier->limit : std::numeric_limits<std::uint64_t>::max() / 2;
          auto e = detail::receive_part(pair, memory_stage / part_name(from), limit, call.timeout);
          if (!e.empty()) {
            failures.push_back(fmt::format("the copy of rank {}'s part from {} did not arrive whole: {}", from,
                                           tier->hosts[static_cast<std::size_t>(from)], e));
          }
        }
      }
    } catch (const std::exception& e) {
      failures.push_back(e.what());
    }
    std::string failed;
    for (const auto& f : failures) failed += (failed.empty() ? "" : "; ") + f;
    if (!failed.empty()) failed = fmt::format("{}: {}", detail::describe_self(), failed);
    const auto all = g.all_gather(failed, call, site);
    if (std::any_of(all.begin(), all.end(), [](const auto& e) { return !e.empty(); })) {
      if (tier->leader) remove_tree(memory_stage, attempt_);
      pending_.reset();
      agree(all, fmt::format("checkpoint step {} under '{}' was not committed: its memory tier", step, root_.string()));
    }
  }

  std::string failed;
  std::vector<fs::path> retired;
  if (committer_ && to_root) {
    try {
      const auto from = staging(step);
      write_durably(from / manifest_name, manifest);
      fsync_path(from, true);
      const auto to = root_ / checkpoint_step_name(step);
      std::error_code ec;
      if (fs::exists(to, ec)) retired.push_back(retire(to, attempt_));
      if (::rename(from.c_str(), to.c_str()) != 0) {
        const int code = errno;
        throw error(errc::io,
                    fmt::format("cannot rename '{}' to '{}': {}", from.string(), to.string(), detail::errno_text(code)),
                    code);
      }
      fsync_path(root_, true);
    } catch (const std::exception& e) {
      failed = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
    // Before the others return: none of them may begin() a save that this would take for stale.
    if (failed.empty()) {
      try {
        const auto unwanted = retire_unwanted(true, false);
        retired.insert(retired.end(), unwanted.begin(), unwanted.end());
      } catch (const std::exception& e) {
        detail::library_log(log_level::warning, "checkpoints: cleaning '{}' after step {}: {}", root_.string(), step,
                            e.what());
      }
    }
  }
  if (tier && tier->leader) {
    try {
      write_durably(memory_stage / manifest_name, memory_manifest);
      const auto to = tier->job_directory / checkpoint_step_name(step);
      std::error_code ec;
      if (fs::exists(to, ec)) retired.push_back(retire(to, attempt_));
      if (::rename(memory_stage.c_str(), to.c_str()) != 0) {
        const int code = errno;
        throw error(
            errc::io,
            fmt::format("cannot rename '{}' to '{}': {}", memory_stage.string(), to.string(), detail::errno_text(code)),
            code);
      }
    } catch (const std::exception& e) {
      failed += fmt::format("{}{}: {}", failed.empty() ? "" : "; ", detail::describe_self(), e.what());
    }
  }
  pending_.reset();
  agree(g.all_gather(failed, call, site),
        fmt::format("checkpoint step {} under '{}' may be incomplete on some file system", step, root_.string()));
  // Only now that the step is complete everywhere: an old step may still be the latest elsewhere.
  if (committer_ && to_root) {
    try {
      const auto old = retire_unwanted(false, true);
      retired.insert(retired.end(), old.begin(), old.end());
    } catch (const std::exception& e) {
      detail::library_log(log_level::warning, "checkpoints: removing old steps under '{}': {}", root_.string(),
                          e.what());
    }
  }
  if (tier && tier->leader) {  // superseded memory steps: the newest memory_keep stay
    const auto steps = memory_steps(tier->job_directory);
    for (std::size_t i = 0; i + static_cast<std::size_t>(options_.memory_keep) < steps.size(); ++i) {
      retired.push_back(retire(tier->job_directory / checkpoint_step_name(steps[i]), attempt_));
    }
  }
  remove_trees(retired);
}

}  // namespace jobkit
