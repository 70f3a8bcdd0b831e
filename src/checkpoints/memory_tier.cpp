#include "checkpoints/memory_tier.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <set>

#include "checkpoints/crc32c.hpp"
#include "checkpoints/manifest.hpp"
#include "core/fnv1a.hpp"
#include "core/json.hpp"
#include "core/posix_io.hpp"
#include "jobkit/checkpoints.hpp"
#include "jobkit/error.hpp"
#include "jobkit/log.hpp"
#include "log/library_log.hpp"

namespace jobkit::detail {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view job_prefix = "jobkit-ckpt-";
constexpr std::size_t max_files = 1'000'000;
constexpr std::uintmax_t max_manifest_bytes = std::uintmax_t{1} << 30;

bool safe_relative(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.size() > 4096) return false;
  const fs::path p(name);
  return std::none_of(p.begin(), p.end(), [](const fs::path& piece) { return piece == ".." || piece == "."; });
}

/// Size and CRC-32C of `file`, read to its end; an error text in the third member, else "".
std::tuple<std::uint64_t, std::uint32_t, std::string> sum_file(const fs::path& file) {
  descriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return {0, 0, fmt::format("cannot open '{}': {}", file.string(), errno_text(errno))};
  std::vector<std::byte> buffer(std::size_t{1} << 20);
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
  const int code = read_each(fd.get(), buffer, [&](std::span<const std::byte> piece) {
    crc = crc32c(piece, crc);
    size += piece.size();
  });
  if (code != 0) return {size, crc, fmt::format("cannot read '{}': {}", file.string(), errno_text(code))};
  return {size, crc, ""};
}

/// The buffer a copy of `files` needs: `chunk` bytes, or its largest file's size when smaller.
std::size_t chunk_for(const std::vector<part_file>& files, std::size_t chunk) {
  std::uint64_t largest = 0;
  for (const auto& file : files) largest = std::max(largest, std::get<1>(file));
  return static_cast<std::size_t>(std::min<std::uint64_t>(std::max<std::uint64_t>(largest, 1), chunk));
}

std::string differs(const fs::path& file, std::uint64_t size, std::uint32_t crc, std::uint64_t want_size,
                    std::uint32_t want_crc) {
  if (size == want_size && crc == want_crc) return "";
  return fmt::format("'{}' has {} bytes and CRC-32C {:08x}, the manifest says {} and {:08x}", file.string(), size, crc,
                     want_size, want_crc);
}

std::string join(const std::vector<std::string>& texts) {
  std::string all;
  for (const auto& t : texts) {
    if (!t.empty()) all += (all.empty() ? "" : "; ") + t;
  }
  return all;
}

}  // namespace

std::optional<fs::path> memory_directory_from(const fs::path& option, const environment& env) {
  if (!option.empty()) {
    if (!option.is_absolute()) {
      throw error(errc::invalid_argument,
                  fmt::format("checkpoints: memory='{}' is not an absolute path", option.string()));
    }
    return option;
  }
  const auto value = env.get("JOBKIT_CHECKPOINT_MEMORY");
  if (!value || value->empty()) return std::nullopt;
  if (value->front() != '/') {
    throw error(errc::invalid_environment,
                fmt::format("JOBKIT_CHECKPOINT_MEMORY='{}' is not an absolute path (a node-local directory, "
                            "e.g. /dev/shm/jobkit)",
                            *value));
  }
  return fs::path(*value);
}

std::optional<std::uint64_t> memory_limit_from(const environment& env) {
  const auto value = env.get("JOBKIT_CHECKPOINT_MEMORY_LIMIT");
  if (!value || value->empty()) return std::nullopt;
  std::uint64_t bytes = 0;
  const auto* end = value->data() + value->size();
  const auto [stop, ec] = std::from_chars(value->data(), end, bytes);
  if (ec != std::errc{} || stop != end || bytes == 0) {
    throw error(errc::invalid_environment,
                fmt::format("JOBKIT_CHECKPOINT_MEMORY_LIMIT='{}' is not a positive whole number of bytes", *value));
  }
  return bytes;
}

std::string memory_job_directory_name(std::string_view job, const fs::path& root) {
  return fmt::format("{}{}-{:016x}", job_prefix, job.empty() ? "nojob" : job,
                     fnv1a(fnv1a_basis, fs::absolute(root).lexically_normal().string()));
}

std::optional<std::string> job_of_memory_directory_name(std::string_view name) {
  if (!name.starts_with(job_prefix) || name.size() < job_prefix.size() + 18) return std::nullopt;
  const auto hash = name.substr(name.size() - 16);
  if (name[name.size() - 17] != '-' || hash.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return std::nullopt;
  }
  const auto job = name.substr(job_prefix.size(), name.size() - 17 - job_prefix.size());
  if (job.empty() || job.find('/') != std::string_view::npos) return std::nullopt;
  return std::string(job);
}

std::vector<int> memory_partners(const std::vector<std::string>& hosts) {
  std::vector<std::string> nodes;                 // in the order of their first rank
  std::map<std::string, std::vector<int>> ranks;  // host -> its ranks, ascending
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (!ranks.contains(hosts[r])) nodes.push_back(hosts[r]);
    ranks[hosts[r]].push_back(static_cast<int>(r));
  }
  std::vector<int> partners(hosts.size(), -1);
  if (nodes.size() < 2) return partners;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    const auto& mine = ranks[nodes[n]];
    const auto& next = ranks[nodes[(n + 1) % nodes.size()]];
    for (std::size_t i = 0; i < mine.size(); ++i) partners[static_cast<std::size_t>(mine[i])] = next[i % next.size()];
  }
  return partners;
}

std::vector<int> copy_rounds(const std::vector<std::pair<int, int>>& copies) {
  std::map<int, std::set<int>> busy;  // rank -> its rounds
  std::vector<int> rounds;
  for (const auto& [from, to] : copies) {
    int round = 0;
    while (busy[from].contains(round) || busy[to].contains(round)) ++round;
    busy[from].insert(round);
    busy[to].insert(round);
    rounds.push_back(round);
  }
  return rounds;
}

std::vector<std::size_t> copies_of(int rank, const std::vector<std::pair<int, int>>& copies) {
  const auto rounds = copy_rounds(copies);
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].first == rank || copies[i].second == rank) mine.push_back(i);
  }
  std::sort(mine.begin(), mine.end(),
            [&](std::size_t a, std::size_t b) { return std::pair(rounds[a], a) < std::pair(rounds[b], b); });
  return mine;
}

std::string send_part(group& pair, const fs::path& part, const std::vector<part_file>& files,
                      std::chrono::milliseconds timeout, std::size_t chunk) {
  const rooted_options from_me{.root = pair.rank(), .timeout = timeout};
  pair.broadcast(files, from_me);
  const auto refused = pair.broadcast(std::string(), rooted_options{.root = 1 - pair.rank(), .timeout = timeout});
  if (!refused.empty()) return "";  // the receiver names it
  std::vector<std::string> problems;
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(chunk_for(files, chunk));
  for (const auto& [name, size, crc] : files) {
    const auto file = part / name;
    descriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    int code = fd.get() < 0 ? errno : 0;
    for (std::uint64_t offset = 0; offset < size;) {
      const auto piece = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - offset));
      if (code == 0) code = pread_file_all(fd.get(), buffer.get(), piece, static_cast<off_t>(offset));
      if (code != 0) std::memset(buffer.get(), 0, piece);
      pair.broadcast_into(std::span<std::byte>(buffer.get(), piece), from_me);
      offset += piece;
    }
    if (code != 0) problems.push_back(fmt::format("cannot read '{}': {}", file.string(), errno_text(code)));
  }
  return join(problems);
}

std::string receive_part(group& pair, const fs::path& into, std::uint64_t max_bytes, std::chrono::milliseconds timeout,
                         std::vector<part_file>* received, std::size_t chunk) {
  const rooted_options from_sender{.root = 1 - pair.rank(), .timeout = timeout};
  const auto files = pair.broadcast(std::vector<part_file>{}, from_sender);
  std::string refused;
  std::uint64_t total = 0;
  if (files.size() > max_files) refused = fmt::format("it lists {} files, more than {}", files.size(), max_files);
  for (const auto& [name, size, crc] : files) {
    if (!refused.empty()) break;
    if (!safe_relative(name)) refused = fmt::format("file {} is not inside the part", json_string(name));
    total += std::min<std::uint64_t>(size, max_bytes + 1);
    if (total > max_bytes) refused = fmt::format("its files hold more than the {} bytes allowed here", max_bytes);
  }
  std::error_code ec;
  fs::remove_all(into, ec);
  if (refused.empty()) {
    fs::create_directories(into, ec);
    if (ec) refused = fmt::format("cannot create '{}': {}", into.string(), ec.message());
  }
  pair.broadcast(refused, rooted_options{.root = pair.rank(), .timeout = timeout});
  if (!refused.empty()) return refused;

  std::vector<std::string> problems;
  const auto buffer = std::make_unique_for_overwrite<std::byte[]>(chunk_for(files, chunk));
  for (const auto& [name, size, want_crc] : files) {
    const auto file = into / name;
    fs::create_directories(file.parent_path(), ec);
    descriptor fd(::open(file.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    int code = fd.get() < 0 ? errno : 0;
    std::uint32_t crc = 0;
    for (std::uint64_t offset = 0; offset < size;) {
      const auto piece =
          std::span<std::byte>(buffer.get(), static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - offset)));
      pair.broadcast_into(piece, from_sender);
      crc = crc32c(piece, crc);
      if (code == 0) code = write_file_all(fd.get(), piece.data(), piece.size());
      offset += piece.size();
    }
    if (code != 0) {
      problems.push_back(fmt::format("cannot write '{}': {}", file.string(), errno_text(code)));
    } else if (crc != want_crc) {
      problems.push_back(
          fmt::format("'{}' arrived with CRC-32C {:08x}, the manifest says {:08x}", name, crc, want_crc));
    }
  }
  auto all = join(problems);
  if (!all.empty()) fs::remove_all(into, ec);
  if (all.empty() && received) *received = files;
  return all;
}

std::string check_part(const fs::path& part, const std::vector<part_file>& files) {
  std::vector<std::string> problems;
  for (const auto& [name, want_size, want_crc] : files) {
    const auto file = part / name;
    const auto [size, crc, failed] = sum_file(file);
    problems.push_back(failed.empty() ? differs(file, size, crc, want_size, want_crc) : failed);
  }
  return join(problems);
}

std::string copy_part(const fs::path& from, const fs::path& to, const std::vector<part_file>& files) {
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::create_directories(to, ec);
  if (ec) return fmt::format("cannot create '{}': {}", to.string(), ec.message());
  std::vector<std::string> problems;
  std::vector<std::byte> buffer(std::size_t{1} << 20);
  for (const auto& [name, want_size, want_crc] : files) {
    const auto source = from / name;
    const auto target = to / name;
    fs::create_directories(target.parent_path(), ec);
    descriptor in(::open(source.c_str(), O_RDONLY | O_CLOEXEC));
    descriptor out(::open(target.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    if (in.get() < 0 || out.get() < 0) {
      problems.push_back(
          fmt::format("cannot copy '{}' to '{}': {}", source.string(), target.string(), errno_text(errno)));
      continue;
    }
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    int written = 0;
    const int code = read_each(in.get(), buffer, [&](std::span<const std::byte> piece) {
      crc = crc32c(piece, crc);
      size += piece.size();
      if (written == 0) written = write_file_all(out.get(), piece.data(), piece.size());
    });
    if (code != 0 || written != 0) {
      problems.push_back(fmt::format("cannot copy '{}' to '{}': {}", source.string(), target.string(),
                                     errno_text(code != 0 ? code : written)));
    } else {
      problems.push_back(differs(source, size, crc, want_size, want_crc));
    }
  }
  auto all = join(problems);
  if (!all.empty()) fs::remove_all(to, ec);
  return all;
}

std::string memory_manifest(std::int64_t step, int world_size, std::string_view job,
                            const std::map<int, std::vector<part_file>>& parts) {
  std::string lines;
  for (const auto& [rank, files] : parts) {
    for (const auto& [name, size, crc] : files) {
      lines += fmt::format("{}\n{}", lines.empty() ? "" : ",",
                           manifest_line({rank, "", fmt::format("rank-{}/{}", rank, name), size, crc}));
    }
  }
  return fmt::format(
      "{{\"format\":\"jobkit-memory-checkpoint\",\"version\":1,\"step\":{},\n\"world_size\":{},\n\"job_id\":{},"
      "\"parts\":[{}\n]}}\n",
      step, world_size, json_string(job), lines);
}

memory_step parse_memory_manifest(std::string_view text) {
  memory_step step;
  constexpr std::string_view key = "\n\"world_size\":";
  const auto at = text.find(key);
  if (!text.starts_with(R"({"format":"jobkit-memory-checkpoint","version":1,)") || at == std::string_view::npos) {
    throw error(errc::io, "not a memory checkpoint manifest of this jobkit");
  }
  const auto* first = text.data() + at + key.size();
  const auto [end, ec] = std::from_chars(first, text.data() + text.size(), step.world_size);
  if (ec != std::errc{} || step.world_size <= 0) throw error(errc::io, "its world_size is not a positive number");
  for (const auto& part : parse_manifest_parts(text)) {
    const auto prefix = fmt::format("rank-{}/", part.rank);
    if (part.rank >= step.world_size || !part.file.starts_with(prefix) ||
        !safe_relative(part.file.substr(prefix.size()))) {
      throw error(errc::io, fmt::format("file {} is not inside rank {}'s part", json_string(part.file), part.rank));
    }
    step.parts[part.rank].emplace_back(part.file.substr(prefix.size()), part.size, part.crc32c);
  }
  return step;
}

std::map<std::int64_t, memory_step> memory_inventory(const fs::path& job_directory) {
  std::map<std::int64_t, memory_step> steps;
  std::error_code ec;
  if (!fs::is_directory(job_directory, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(job_directory, ec)) {
    const auto name = entry.path().filename().string();
    const auto step = parse_checkpoint_step_name(name);
    const auto manifest = entry.path() / "manifest.json";
    if (!step || !fs::is_regular_file(manifest, ec)) continue;
    try {
      const auto bytes = fs::file_size(manifest);
      if (bytes > max_manifest_bytes) throw error(errc::io, fmt::format("it holds {} bytes", bytes));
      std::string text(bytes, '\0');
      descriptor fd(::open(manifest.c_str(), O_RDONLY | O_CLOEXEC));
      if (fd.get() < 0) throw error(errc::io, errno_text(errno));
      if (const int code = pread_file_all(fd.get(), text.data(), text.size(), 0))
        throw error(errc::io, errno_text(code));
      steps.emplace(*step, parse_memory_manifest(text));
    } catch (const std::exception& e) {
      library_log(log_level::warning, "checkpoints: memory step '{}' is left out: its manifest: {}",
                  entry.path().string(), e.what());
    }
  }
  return steps;
}

std::uint64_t bytes_under(const fs::path& directory) {
  std::uint64_t total = 0;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return 0;
  for (auto it = fs::recursive_directory_iterator(directory, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) total += it->file_size(size_ec);
  }
  return total;
}

std::uint64_t free_bytes(const fs::path& directory) {
  struct statvfs info {};
  if (::statvfs(directory.c_str(), &info) != 0) return 0;
  return static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
}

std::optional<bool> job_ended_from_squeue(int status, std::string_view out, std::string_view err) {
  if (status != 0) {
    if (err.find("Invalid job id") != std::string_view::npos) return true;
    return std::nullopt;
  }
  auto state = out.substr(0, out.find('\n'));
  while (!state.empty() && (state.back() == ' ' || state.back() == '\r')) state.remove_suffix(1);
  if (state.empty()) return true;
  static const std::set<std::string_view> final_states = {"BOOT_FAIL",     "CANCELLED", "COMPLETED",
                                                          "DEADLINE",      "FAILED",    "NODE_FAIL",
                                                          "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"};
  return final_states.contains(state);
}

std::string job_record(std::optional<std::chrono::system_clock::time_point> end) {
  if (!end) return "end unknown\n";
  return fmt::format("end {}\n", std::chrono::duration_cast<std::chrono::seconds>(end->time_since_epoch()).count());
}

std::vector<fs::path> sweep_memory(const fs::path& memory_directory, std::string_view own_job, uid_t user,
                                   std::chrono::system_clock::time_point now,
                                   const std::function<std::optional<bool>(const std::string&)>& ended) {
  std::vector<fs::path> removed;
  std::error_code ec;
  int asked = 0;
  for (const auto& entry : fs::directory_iterator(memory_directory, ec)) {
    const auto name = entry.path().filename().string();
    const auto job = job_of_memory_directory_name(name);
    struct stat info {};
    if (!job || *job == own_job || ::lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
        info.st_uid != user) {
      continue;
    }
    if (++asked > 16) break;
    auto gone = ended(*job);
    if (!gone) {
      descriptor fd(::open((entry.path() / ".job").c_str(), O_RDONLY | O_CLOEXEC));
      char text[64] = {};
      long long seconds = 0;
      if (fd.get() >= 0 && ::pread(fd.get(), text, sizeof text - 1, 0) > 4 &&
          std::string_view(text).starts_with("end ")) {
        const std::string_view digits(text + 4);
        const auto [end, parse_ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seconds);
        if (parse_ec == std::errc{} && end != digits.data()) {
          gone = std::chrono::system_clock::time_point(std::chrono::seconds(seconds)) + std::chrono::minutes(5) < now;
        }
      }
    }
    if (gone.value_or(false)) {
      std::error_code remove_ec;
      fs::remove_all(entry.path(), remove_ec);
      if (remove_ec) {
        library_log(log_level::warning, "checkpoints: cannot remove ended job {}'s memory tier '{}': {}", *job,
                    entry.path().string(), remove_ec.message());
      } else {
        removed.push_back(entry.path());
      }
    }
  }
  return removed;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  std::string text;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += fmt::format("{}{}", text.empty() ? "" : ",", ranks[i]);
    if (j > i) text += fmt::format("-{}", ranks[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace jobkit::detail
