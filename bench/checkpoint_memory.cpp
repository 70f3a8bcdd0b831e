// The memory tier of jobkit::checkpoints (docs/checkpoints-memory.md) timed against the same
// checkpoints without it, in one step (bench/memory_tier.sh runs it; bench/RESULTS.md).
//
//   save MIB SAVES ROOT_PLAIN ROOT_TIER MEMORY
//     Every rank saves one file of MIB MiB, SAVES times on each side, the two sides in turn (a
//     save to ROOT_PLAIN without the tier, then one to ROOT_TIER with the tier in MEMORY, every
//     save to the root too: shared_every 1, memory_keep 1, keep 1). A save: begin(step), write
//     the file, commit(); it is timed on every rank from before begin() to after commit()
//     (commit is collective), and the slowest rank's time counts. The write alone (begin, the
//     file written, not yet flushed) is timed too. Rank 0 prints one JSON line per save and one
//     summary line: {"op":"save_summary","mib":..,"shared_every":1,"plain_median_s":..,
//     "tier_median_s":..,"added_median_s":..,"plain_write_median_s":..}
//   save-memory-only MIB SAVES ROOT_PLAIN ROOT_TIER MEMORY
//     The same, the tier's side with shared_every past the last save: after one untimed first
//     save (which goes to the root), every save goes to the memory only, as the saves between
//     two of the root's do; its "tier_median_s" is the time of such a save.
//   restore ROOT MEMORY|none LABEL
//     latest() (and verify(step) when LABEL ends in -verify), then every rank reads its part's files (part(step)) into
//     memory and checks the bytes are the ones its save wrote; timed from before latest() to the last byte read, the
//     slowest rank's time. /proc/self/io's read_bytes (bytes this process made the kernel read
//     from a block device: the root's disk here; tmpfs and sockets count nothing) is summed over
//     the ranks. With MEMORY the tier is on, with none off (the root only). Rank 0 prints:
//     {"op":"restore","label":..,"step":..,"mib":..,"seconds":..,"disk_read_bytes":..,
//      "part_on_root_ranks":..,"exact":true}
// The data of rank r at step s: 64-bit words w[i] = splitmix64(r * 2^40 + s * 2^20 + i).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "jobkit/jobkit.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void fill(std::vector<std::uint64_t>& words, int rank, std::int64_t step) {
  const std::uint64_t base = (static_cast<std::uint64_t>(rank) << 40) + (static_cast<std::uint64_t>(step) << 20);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = splitmix64(base + i);
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void write_all(const fs::path& file, const void* data, std::size_t size) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw jobkit::error(jobkit::errc::io, fmt::format("open {}: {}", file.string(), std::strerror(errno)));
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw jobkit::error(jobkit::errc::io, fmt::format("write {}: {}", file.string(), std::strerror(errno)));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  ::close(fd);
}

/// /proc/self/io's read_bytes: what this process had the kernel read from storage.
std::uint64_t disk_read_bytes() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

jobkit::checkpoint_options options_for(const std::string& memory, int shared_every = 1) {
  jobkit::checkpoint_options o{.keep = 1};
  if (memory != "none") {
    o.memory = memory;
    o.shared_every = shared_every;
    o.memory_keep = 1;
  }
  return o;
}

int run_save(std::size_t mib, int saves, const std::string& root_plain, const std::string& root_tier,
             const std::string& memory, bool memory_only) {
  const auto& me = jobkit::current_identity();
  auto& world = jobkit::world();
  std::vector<std::uint64_t> words(mib * (std::size_t{1} << 20) / sizeof(std::uint64_t));
  jobkit::checkpoints plain(root_plain, options_for("none"));
  const int shared_every = memory_only ? saves + 1 : 1;
  jobkit::checkpoints tier(root_tier, options_for(memory, shared_every));
  if (memory_only) {  // the object's first save goes to the root: untimed
    fill(words, me.rank, 0);
    const auto part = tier.begin(0);
    write_all(part / "data", words.data(), words.size() * sizeof(std::uint64_t));
    tier.commit();
  }
  std::vector<double> plain_s, tier_s, plain_write_s, tier_write_s;
  for (int i = 0; i < saves; ++i) {
    for (const bool with_tier : {false, true}) {
      auto& saved = with_tier ? tier : plain;
      const std::int64_t step = i + 1;
      fill(words, me.rank, step);
      world.barrier();
      const auto t0 = clock_type::now();
      const auto part = saved.begin(step);
      write_all(part / "data", words.data(), words.size() * sizeof(std::uint64_t));
      const double write_s = seconds_since(t0);
      saved.commit();
      const double total_s = seconds_since(t0);
      const double slowest = world.all_reduce(total_s, jobkit::reduce_op::max);
      const double slowest_write = world.all_reduce(write_s, jobkit::reduce_op::max);
      (with_tier ? tier_s : plain_s).push_back(slowest);
      (with_tier ? tier_write_s : plain_write_s).push_back(slowest_write);
      if (me.rank == 0) {
        std::printf("{\"op\":\"save\",\"mib\":%zu,\"tier\":%s,\"step\":%lld,\"seconds\":%.6f,\"write_seconds\":%.6f}\n",
                    mib, with_tier ? "true" : "false", static_cast<long long>(step), slowest, slowest_write);
        std::fflush(stdout);
      }
    }
  }
  if (me.rank == 0) {
    const double p = median(plain_s), t = median(tier_s);
    std::vector<double> added;
    for (std::size_t i = 0; i < plain_s.size(); ++i) added.push_back(tier_s[i] - plain_s[i]);
    std::printf(
        "{\"op\":\"save_summary\",\"mib\":%zu,\"ranks\":%d,\"saves\":%d,\"shared_every\":%d,\"plain_median_s\":%.6f,"
        "\"tier_median_s\":%.6f,\"added_median_s\":%.6f,\"added_of_pairs_median_s\":%.6f,\"plain_write_median_s\":%.6f,"
        "\"tier_write_median_s\":%.6f}\n",
        mib, me.world_size, saves, shared_every, p, t, t - p, median(added), median(plain_write_s),
        median(tier_write_s));
  }
  return 0;
}

int run_restore(const std::string& root, const std::string& memory, const std::string& label) {
  const auto& me = jobkit::current_identity();
  auto& world = jobkit::world();
  jobkit::checkpoints saved(root, options_for(memory));
  world.barrier();
  const auto io0 = disk_read_bytes();
  const auto t0 = clock_type::now();
  const auto step = saved.latest();
  if (!step) throw jobkit::error(jobkit::errc::io, fmt::format("no checkpoint under {}", root));
  // "...-verify": the root's part checked (sizes, CRC-32C) before it is read, as the memory tier
  // checks every byte it restores.
  if (label.ends_with("-verify")) saved.verify(*step);
  const auto part = saved.part(*step);
  const auto file = part / "data";
  const auto size = fs::file_size(file);
  std::vector<std::uint64_t> got(size / sizeof(std::uint64_t));
  {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw jobkit::error(jobkit::errc::io, fmt::format("open {}: {}", file.string(), std::strerror(errno)));
    auto* p = reinterpret_cast<char*>(got.data());
    std::size_t left = got.size() * sizeof(std::uint64_t);
    while (left > 0) {
      const ssize_t n = ::read(fd, p, std::min<std::size_t>(left, std::size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  const double seconds = seconds_since(t0);
  const auto io = disk_read_bytes() - io0;
  bool exact = size == got.size() * sizeof(std::uint64_t);
  const std::uint64_t base = (static_cast<std::uint64_t>(me.rank) << 40) + (static_cast<std::uint64_t>(*step) << 20);
  for (std::size_t i = 0; exact && i < got.size(); ++i) exact = got[i] == splitmix64(base + i);
  const bool on_root = part.string().rfind(fs::path(root).string(), 0) == 0;
  const double slowest = world.all_reduce(seconds, jobkit::reduce_op::max);
  const auto io_sum = world.all_reduce(static_cast<std::uint64_t>(io), jobkit::reduce_op::sum);
  const int root_ranks = world.all_reduce(on_root ? 1 : 0, jobkit::reduce_op::sum);
  const int exact_ranks = world.all_reduce(exact ? 1 : 0, jobkit::reduce_op::sum);
  if (me.rank == 0) {
    std::printf(
        "{\"op\":\"restore\",\"label\":\"%s\",\"step\":%lld,\"mib\":%llu,\"ranks\":%d,\"seconds\":%.6f,"
        "\"disk_read_bytes\":%llu,\"part_on_root_ranks\":%d,\"exact\":%s}\n",
        label.c_str(), static_cast<long long>(*step), static_cast<unsigned long long>(size >> 20), me.world_size,
        slowest, static_cast<unsigned long long>(io_sum), root_ranks, exact_ranks == me.world_size ? "true" : "false");
  }
  return exact_ranks == me.world_size ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 6 && (args[0] == "save" || args[0] == "save-memory-only")) {
      return run_save(std::stoull(args[1]), std::stoi(args[2]), args[3], args[4], args[5], args[0] != "save");
    }
    if (args.size() == 4 && args[0] == "restore") return run_restore(args[1], args[2], args[3]);
    std::fprintf(stderr,
                 "usage: checkpoint_memory save|save-memory-only MIB SAVES ROOT_PLAIN ROOT_TIER MEMORY\n"
                 "       checkpoint_memory restore ROOT MEMORY|none LABEL\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_memory: %s\n", e.what());
    return 1;
  }
}
