// The rank program of tests/launched/lost_node.sh: ranks that wait in barriers while the script
// makes the last node silent (its packets dropped, its ranks frozen) or stalls it.
//
//   lost_node_check LAST_MS OTHERS_MS ROUNDS [group]
//
// Every rank passes a first barrier (the data path is up), prints "ready" with its pid and node,
// then sleeps: the ranks of the last node LAST_MS, the others OTHERS_MS. Then ROUNDS barriers,
// 10 ms apart, and "done"; with `group`, on a group of every rank made after the sleep (its
// creation waits for the last node's ranks). A rank that fails prints the wall-clock time of its failure (the
// script compares it with the time of the fault; every node shares this machine's clock).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jobkit/jobkit.hpp"
#include "test_support.hpp"

using namespace std::chrono;

namespace {

long long epoch_ms() { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && std::string(argv[4]) == "group")) {
    std::fprintf(stderr, "usage: %s LAST_MS OTHERS_MS ROUNDS [group]\n", argv[0]);
    return 2;
  }
  const long last_ms = std::atol(argv[1]);
  const long others_ms = std::atol(argv[2]);
  const int rounds = std::atoi(argv[3]);
  const bool new_group = argc == 5;
  return report_errors([&] {
    const auto& id = jobkit::current_identity();
    jobkit::barrier();
    const bool last_node = id.node_rank == id.num_nodes - 1;
    std::printf("rank %d (%s) pid %d ready%s\n", id.rank, id.hostname.c_str(), static_cast<int>(::getpid()),
                last_node ? " on the last node" : "");
    std::fflush(stdout);
    std::this_thread::sleep_for(milliseconds(last_node ? last_ms : others_ms));
    try {
      std::optional<jobkit::group> made;
      if (new_group) {
        std::vector<int> everyone(static_cast<std::size_t>(id.world_size));
        std::iota(everyone.begin(), everyone.end(), 0);
        made = jobkit::make_group(everyone);
      }
      for (int i = 0; i < rounds; ++i) {
        if (made) {
          made->barrier();
        } else {
          jobkit::barrier();
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
    } catch (const jobkit::error&) {
      std::printf("rank %d (%s) failed at %lld\n", id.rank, id.hostname.c_str(), epoch_ms());
      std::fflush(stdout);
      throw;
    }
    std::printf("rank %d (%s) done\n", id.rank, id.hostname.c_str());
    return 0;
  });
}
