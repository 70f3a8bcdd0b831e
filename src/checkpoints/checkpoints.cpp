#include "jobkit/checkpoints.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <map>
#include <set>
#include <system_error>
#include <tuple>

#include "checkpoints/crc32c.hpp"
#include "checkpoints/manifest.hpp"
#include "core/failure.hpp"
#include "core/json.hpp"
#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/helpers.hpp"
#include "jobkit/log.hpp"
#include "jobkit/runtime.hpp"
#include "log/library_log.hpp"
#include "progress/tracker.hpp"

namespace jobkit {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view step_prefix = "step-";
constexpr std::size_t step_digits = 12;
constexpr std::string_view manifest_name = "manifest.json";
constexpr std::uintmax_t max_manifest_bytes = std::uintmax_t{1} << 30;

/// (path relative to the part, size, CRC-32C) of one file of a part.
using part_file = std::tuple<std::string, std::uint64_t, std::uint32_t>;
/// What a rank reports at commit: (its error, or empty; its host; its files).
/// (error, host, files, step): what a rank tells rank 0 when it commits.
using part_report = std::tuple<std::string, std::string, std::vector<part_file>, std::int64_t>;

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
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints")};
  const auto& id = current_identity();
  attempt_ = fmt::format("{}.r{}", id.job_id.empty() ? "nojob" : id.job_id, id.restart_count);
  // A step of its own too: `jobkit run` restarts a failed step inside the same job attempt, and a
  // save that the failed step left unfinished must count as another attempt's (retired, never
  // written into again).
  stage_tag_ = id.step_id.empty() ? attempt_ : fmt::format("{}.s{}", attempt_, id.step_id);
  auto& g = world();

  std::string problem;
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec)
    problem = fmt::format("{}: cannot create root='{}': {}", detail::describe_self(), root_.string(), ec.message());
  agree(g.all_gather(problem, call, site), "checkpoints");

  const int fs_rank = fs_local_rank(root_, call);
  const auto placed = g.all_gather(std::pair<std::string, int>{id.hostname, fs_rank}, call, site);
  const bool shared =
      std::all_of(placed.begin(), placed.end(), [&, r = 0](const auto& p) mutable { return p.second == r++; });
  committer_of_.resize(placed.size());
  for (std::size_t r = 0; r < placed.size(); ++r) {
    if (shared) continue;  // rank 0 commits for everyone
    const auto first = std::find_if(placed.begin(), placed.end(),
                                    [&](const auto& p) { return p.first == placed[r].first && p.second == 0; });
    if (first == placed.end()) {
      throw error(errc::invalid_environment,
                  fmt::format("checkpoints: no rank on host {} has fs_local_rank 0 for root='{}' (FS_LOCAL_RANK?)",
                              placed[r].first, root_.string()));
    }
    committer_of_[r] = static_cast<int>(first - placed.begin());
  }
  committer_ = committer_of_[static_cast<std::size_t>(id.rank)] == id.rank;

  problem.clear();
  std::vector<fs::path> retired;
  if (committer_) {
    try {
      retired = retire_unwanted(false, false);
    } catch (const std::exception& e) {
      problem = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
  }
  agree(g.all_gather(problem, call, site), fmt::format("checkpoints under '{}'", root_.string()));
  remove_trees(retired);
}

fs::path checkpoints::staging(std::int64_t step) const {
  return root_ / fmt::format("{}.partial.{}", checkpoint_step_name(step), stage_tag_);
}

fs::path checkpoints::part(std::int64_t step) const {
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
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::latest")};
  // (error, committer, complete steps on its file system)
  using listing = std::tuple<std::string, bool, std::vector<std::int64_t>>;
  listing mine{"", committer_, {}};
  if (committer_) {
    try {
      std::get<2>(mine) = complete_steps(root_);
    } catch (const std::exception& e) {
      std::get<0>(mine) = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
  }
  auto& g = world();
  const auto all = g.gather(mine, {.root = 0, .timeout = call.timeout}, site);
  using answer = std::pair<std::string, std::optional<std::int64_t>>;
  answer decided;
  if (g.rank() == 0) {
    std::optional<std::set<std::int64_t>> everywhere;
    for (const auto& [problem, committer, steps] : all) {
      if (!problem.empty()) decided.first += (decided.first.empty() ? "" : "; ") + problem;
      if (!committer) continue;
      std::set<std::int64_t> here_too(steps.begin(), steps.end());
      if (!everywhere) {
        everywhere = std::move(here_too);
      } else {
        std::erase_if(*everywhere, [&](std::int64_t s) { return !here_too.contains(s); });
      }
    }
    if (everywhere && !everywhere->empty()) decided.second = *everywhere->rbegin();
  }
  decided = g.broadcast(decided, {.root = 0, .timeout = call.timeout}, site);
  if (!decided.first.empty()) {
    throw error(errc::io, fmt::format("checkpoints under '{}': cannot list: {}", root_.string(), decided.first));
  }
  // A restore: a checkpoint phase until the next step boundary (docs/progress.md).
  if (decided.second) detail::progress_restore_begin();
  return decided.second;
}

void checkpoints::verify(std::int64_t step, std::source_location site) {
  const call_options call{detail::timeout_of(options_.timeout, "checkpoints::verify")};
  const auto& id = current_identity();
  const auto directory = root_ / checkpoint_step_name(step);
  std::string problems;
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
  if (pending_ && *pending_ != step) fs::remove_all(staging(*pending_) / part_name(current_identity().rank), ec);
  const auto directory = staging(step) / part_name(current_identity().rank);
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

  part_report mine{"", id.hostname, {}, step};
  if (step < 0) {
    std::get<0>(mine) = fmt::format("{}: commit() without begin()", detail::describe_self());
  } else {
    try {
      std::get<2>(mine) = flush_part(staging(step) / part_name(id.rank));
    } catch (const std::exception& e) {
      std::get<0>(mine) = fmt::format("{}: {}", detail::describe_self(), e.what());
    }
  }
  const auto reports = g.gather(mine, {.root = 0, .timeout = call.timeout}, site);

  // Rank 0 decides and hands every committer the manifest of its file system.
  using order = std::pair<std::string, std::string>;  // (error, manifest)
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
    orders.resize(reports.size(), {problems, ""});
    if (problems.empty()) {
      const int nodes = static_cast<int>(std::set<int>(committer_of_.begin(), committer_of_.end()).size());
      for (std::size_t c = 0; c < reports.size(); ++c) {
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
        orders[c].second = fmt::format(
            "{{\"format\":\"jobkit-checkpoint\",\"version\":1,\"step\":{},\"job_id\":{},\"restart_count\":{},"
            "\"world_size\":{},\"file_systems\":{},\"committed_at\":\"{}\",\"parts\":[{}\n]}}\n",
            step, detail::json_string(id.job_id), id.restart_count, id.world_size, nodes, utc_now(), parts);
      }
    }
  }
  const auto [problem, manifest] = g.scatter(orders, {.root = 0, .timeout = call.timeout}, site);
  if (!problem.empty()) {
    throw error(errc::io,
                fmt::format("checkpoint step {} under '{}' was not committed: {}", step, root_.string(), problem));
  }

  std::string failed;
  std::vector<fs::path> retired;
  if (committer_) {
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
  pending_.reset();
  agree(g.all_gather(failed, call, site),
        fmt::format("checkpoint step {} under '{}' may be incomplete on some file system", step, root_.string()));
  // Only now that the step is complete everywhere: an old step may still be the latest elsewhere.
  if (committer_) {
    try {
      const auto old = retire_unwanted(false, true);
      retired.insert(retired.end(), old.begin(), old.end());
    } catch (const std::exception& e) {
      detail::library_log(log_level::warning, "checkpoints: removing old steps under '{}': {}", root_.string(),
                          e.what());
    }
  }
  remove_trees(retired);
}

}  // namespace jobkit
