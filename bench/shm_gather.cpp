// Throughput of jobkit::node_local_gather through shared memory against a plain memcpy of the
// same bytes, in the same process and run. Run on one node:
//   srun --mpi=pmix -N1 -n4 -w c1 build/bench/shm_gather [TOTAL_MIB] [ITERATIONS]
// Every rank contributes TOTAL_MIB / ranks (default 256 MiB in all); the first rank gathers.
// It prints one line per timed gather and, on the first rank, medians:
//   gather: the first rank's time from entering node_local_gather to holding every buffer
//   memcpy to fresh memory: the same number of bytes into newly allocated, untouched pages
//   memcpy to touched memory: the same into a buffer already written once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "jobkit/jobkit.hpp"

using namespace std::chrono;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::byte pattern(int rank, std::size_t i) {
  return static_cast<std::byte>((static_cast<std::size_t>(rank) * 131 + i) & 0xff);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::size_t total = (argc > 1 ? std::stoull(argv[1]) : 256) << 20;
    const int iterations = argc > 2 ? std::stoi(argv[2]) : 5;
    const auto& id = jobkit::current_identity();
    auto& node = jobkit::node_group();
    if (node.size() != id.world_size) {
      std::fprintf(stderr, "run every rank on one node (srun -N1): %d of %d ranks are on %s\n", node.size(),
                   id.world_size, id.hostname.c_str());
      return 2;
    }
    const std::size_t share = total / static_cast<std::size_t>(node.size());
    std::vector<std::byte> mine(share);
    for (std::size_t i = 0; i < share; ++i) mine[i] = pattern(id.rank, i);

    std::vector<double> gather_s;
    for (int it = 0; it < iterations; ++it) {
      node.barrier();
      const auto t0 = steady_clock::now();
      const auto result = jobkit::node_local_gather(mine, node);
      const double seconds = duration<double>(steady_clock::now() - t0).count();
      if (result.route != jobkit::gather_route::shared_memory) {
        std::fprintf(stderr, "route %s, not shared memory\n", std::string(jobkit::to_string(result.route)).c_str());
        return 1;
      }
      if (node.rank() != 0) continue;
      gather_s.push_back(seconds);
      for (int r = 0; r < node.size(); ++r) {
        const auto& got = result.states[static_cast<std::size_t>(r)].payload;
        const int world_rank = node.world_ranks()[static_cast<std::size_t>(r)];
        for (std::size_t i = 0; i < share; i += 4093) {
          if (got.size() != share || got[i] != pattern(world_rank, i)) {
            std::fprintf(stderr, "wrong byte %zu from rank %d\n", i, world_rank);
            return 1;
          }
        }
      }
      std::printf("gather %d: %.1f ms\n", it, seconds * 1e3);
    }
    node.barrier();
    if (node.rank() != 0) return 0;

    // The same bytes, copied by one process: from a source buffer of `total` bytes.
    std::vector<std::byte> source(total);
    for (std::size_t i = 0; i < total; ++i) source[i] = pattern(0, i);
    std::vector<double> fresh_s, touched_s;
    const auto touched = std::make_unique<std::byte[]>(total);  // zeroed: written once
    unsigned checksum = 0;
    for (int it = 0; it < iterations; ++it) {
      auto t0 = steady_clock::now();
      const std::unique_ptr<std::byte[]> fresh(new std::byte[total]);  // not initialised: untouched pages
      std::memcpy(fresh.get(), source.data(), total);
      fresh_s.push_back(duration<double>(steady_clock::now() - t0).count());
      checksum += static_cast<unsigned>(fresh[total / 2]);
      t0 = steady_clock::now();
      std::memcpy(touched.get(), source.data(), total);
      touched_s.push_back(duration<double>(steady_clock::now() - t0).count());
      checksum += static_cast<unsigned>(touched[total / 3]);
    }
    const double mib = static_cast<double>(total) / (1 << 20);
    const auto line = [&](const char* what, double seconds) {
      std::printf("%-26s %8.1f ms  %8.0f MiB/s\n", what, seconds * 1e3, mib / seconds);
    };
    std::printf("%s: %d ranks, %.0f MiB in all (%.1f MiB per rank), median of %d (checksum %u)\n", id.hostname.c_str(),
                node.size(), mib, mib / node.size(), iterations, checksum);
    line("node_local_gather (shm)", median(gather_s));
    line("memcpy to fresh memory", median(fresh_s));
    line("memcpy to touched memory", median(touched_s));
    std::printf("gather / fresh memcpy: %.2fx the time\n", median(gather_s) / median(fresh_s));
    return 0;
  } catch (const std::exception& e) {
    std::printf("rank error: %s\n", e.what());
    return 3;
  }
}
