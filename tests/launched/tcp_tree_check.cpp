// The control-plane data path under a real launcher. Modes:
//   stress N      N all_gathers with sizes varying per rank and operation; every byte checked
//   late S        a barrier that the last rank reaches S seconds late: nobody may leave early
//   die HOW       the last rank dies (exit, kill, abort, term) in the middle of the loop
//   mismatch      rank 0 calls a different collective than the others
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "identity_resolver.hpp"
#include "jobkit/error.hpp"
#include "pmix_session.hpp"
#include "tcp_tree.hpp"

using namespace std::chrono;
using jobkit::detail::op_context;

namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

std::vector<std::byte> payload_of(int rank, std::uint64_t op) {
  const auto size = mix(op * 7919 + static_cast<std::uint64_t>(rank)) % 4001;
  std::vector<std::byte> bytes(size);
  for (std::size_t k = 0; k < size; ++k) {
    bytes[k] = static_cast<std::byte>(mix(op ^ (static_cast<std::uint64_t>(rank) << 40) ^ k));
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "stress";
  const std::string arg = argc > 2 ? argv[2] : "";
  try {
    jobkit::detail::pmix_session pmix;
    const auto facts = pmix.query_facts();
    const int rank = facts.rank, size = facts.world_size;
    jobkit::detail::tcp_tree tree(pmix, rank, size, facts.node_rank, seconds(30));
    const op_context barrier{"barrier", "tcp_tree_check.cpp:barrier", seconds(30)};

    if (mode == "stress") {
      const long iterations = std::stol(arg);
      long bad = 0;
      double first = 0, last = 0;
      auto t0 = steady_clock::now();
      for (long i = 0; i < iterations; ++i) {
        const op_context op{"all_gather", "tcp_tree_check.cpp:stress", seconds(30)};
        const auto got = tree.all_gather(payload_of(rank, static_cast<std::uint64_t>(i)), op);
        if (static_cast<int>(got.size()) != size) ++bad;
        for (int r = 0; r < size && r < static_cast<int>(got.size()); ++r) {
          if (got[static_cast<std::size_t>(r)].rank != r ||
              got[static_cast<std::size_t>(r)].bytes != payload_of(r, static_cast<std::uint64_t>(i))) {
            ++bad;
          }
        }
        if (i + 1 == 1000) first = duration<double, std::micro>(steady_clock::now() - t0).count() / 1000;
        if (i + 1 == iterations - 1000) t0 = steady_clock::now();
      }
      last = duration<double, std::micro>(steady_clock::now() - t0).count() / 1000;
      std::printf("rank %d: %ld operations, %ld bad values, first 1000: %.1f us/op, last 1000: %.1f us/op\n",
                  rank, iterations, bad, first, last);
      return bad == 0 ? 0 : 1;
    }
    if (mode == "late") {
      if (rank == size - 1) std::this_thread::sleep_for(seconds(std::stoi(arg)));
      const auto t0 = steady_clock::now();
      tree.all_gather({}, barrier);
      std::printf("rank %d left the barrier after %.3f s\n", rank,
                  duration<double>(steady_clock::now() - t0).count());
      return 0;
    }
    if (mode == "die") {
      for (int i = 0; i < 100; ++i) {
        if (i == 50 && rank == size - 1) {
          std::fflush(stdout);
          if (arg == "exit") std::exit(1);
          if (arg == "kill") ::kill(::getpid(), SIGKILL);
          if (arg == "abort") std::abort();
          if (arg == "term") ::kill(::getpid(), SIGTERM);
        }
        tree.all_gather(payload_of(rank, static_cast<std::uint64_t>(i)), barrier);
      }
      std::printf("rank %d: finished without noticing the death\n", rank);
      return 0;
    }
    if (mode == "mismatch") {
      const op_context other{"broadcast", "tcp_tree_check.cpp:other", seconds(30)};
      tree.all_gather({}, rank == 0 ? other : barrier);
      std::printf("rank %d: paired different collectives silently\n", rank);
      return 0;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const jobkit::error& e) {
    std::printf("rank error: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
