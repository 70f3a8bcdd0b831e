// The who-runs-what helpers under a real launcher. Modes (ARG: a directory on the shared tree):
//   semantics DIR   who ran what, in which order, on an uneven or cyclic layout; fs_local_rank
//   throw-main      main_process_only's fn throws on rank 0
//   throw-node      once_per_node's fn throws on node 1's runner
//   throw-rounds    do_n_at_a_time's fn throws on the last rank
//   nested          a world barrier inside main_process_only
//   long SECONDS    zero_first whose main rank works for SECONDS (longer than Slurm's PMIx timeout)
//   late-setup SECONDS  the control for 'long': rank 0 reaches its first collective SECONDS late
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "jobkit/jobkit.hpp"
#include "test_support.hpp"

using namespace std::chrono;

namespace {

double now_s() { return duration<double>(system_clock::now().time_since_epoch()).count(); }

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("rank %d: WRONG: %s\n", jobkit::rank(), what.c_str());
  }
}

/// Calls helper(work), where work records when it ran on this rank; returns every rank's
/// [start, end) on every rank.
template <class Helper>
std::vector<std::pair<double, double>> timed(Helper helper) {
  double start = 0, end = 0;
  helper([&] {
    start = now_s();
    std::this_thread::sleep_for(milliseconds(150));
    end = now_s();
  });
  return jobkit::all_gather(std::make_pair(start, end));
}

void semantics(const std::string& shared_dir) {
  const auto& id = jobkit::current_identity();
  const auto nodes = jobkit::all_gather(id.node_rank);
  const auto local_ranks = jobkit::all_gather(id.local_rank);

  // main_process_only: runs once, everyone gets the main's value.
  const int ran = jobkit::all_reduce(0, jobkit::reduce_op::sum);
  int here = 0;
  const auto value = jobkit::main_process_only([&] {
    ++here;
    return std::string("from ") + id.hostname;
  });
  expect(jobkit::all_reduce(here, jobkit::reduce_op::sum) == ran + 1, "main_process_only ran more than once");
  expect(value == "from " + jobkit::broadcast(id.hostname, 0), "main_process_only result differs");

  // once_per_node: exactly local rank 0 of every node; others get nothing.
  const auto once = jobkit::once_per_node([&] { return id.node_rank; });
  expect(once.has_value() == (id.local_rank == 0), "once_per_node ran on the wrong rank");
  expect(jobkit::all_reduce(once ? 1 : 0, jobkit::reduce_op::sum) == id.num_nodes, "once_per_node count");

  // run_on_main: post_fn on the others sees what the main rank prepared.
  const auto marker = shared_dir + "/run_on_main." + id.job_id + "." + id.step_id;
  bool saw_marker = true;
  jobkit::run_on_main([&] { std::ofstream(marker) << "ready"; }, [&] { saw_marker = std::ifstream(marker).good(); });
  expect(saw_marker, "run_on_main post_fn ran before the main rank's fn finished");
  jobkit::main_process_only([&] { std::remove(marker.c_str()); });

  // zero_first: every other rank starts after rank 0 ended.
  const auto zero = timed([](auto work) { jobkit::zero_first(work); });
  for (int r = 1; r < id.world_size; ++r) expect(zero[r].first >= zero[0].second, "zero_first: rank started early");

  // local_zero_first: on each node, the others start after local rank 0 ended.
  const auto local = timed([](auto work) { jobkit::local_zero_first(work); });
  for (int r = 0; r < id.world_size; ++r) {
    for (int l = 0; l < id.world_size; ++l) {
      if (nodes[r] == nodes[l] && local_ranks[l] == 0 && r != l) {
        expect(local[r].first >= local[l].second, "local_zero_first: a rank started before its node's first");
      }
    }
  }

  // do_n_at_a_time, default: never two ranks of a node at once; every rank ran.
  const auto rounds = timed([](auto work) { jobkit::do_n_at_a_time(work); });
  auto overlap = [&](int a, int b) { return rounds[a].first < rounds[b].second && rounds[b].first < rounds[a].second; };
  for (int a = 0; a < id.world_size; ++a) {
    for (int b = a + 1; b < id.world_size; ++b) {
      if (nodes[a] == nodes[b]) expect(!overlap(a, b), "do_n_at_a_time: two ranks of one node ran at once");
    }
  }
  // do_n_at_a_time(n = 2): never more than 2 at once.
  const auto pairs = timed([](auto work) { jobkit::do_n_at_a_time(work, 2); });
  for (int a = 0; a < id.world_size; ++a) {
    int concurrent = 0;
    for (int b = 0; b < id.world_size; ++b) {
      if (pairs[b].first <= pairs[a].first && pairs[a].first < pairs[b].second) ++concurrent;
    }
    expect(concurrent <= 2, "do_n_at_a_time(2): more than 2 ranks at once");
  }

  // fs_local_rank: the shared tree has one writer in the step; /tmp (per node) one per node.
  expect(jobkit::fs_local_rank(shared_dir) == id.rank, "fs_local_rank of the shared tree is not the global rank");
  expect(jobkit::fs_local_rank("/tmp") == id.local_rank, "fs_local_rank of /tmp is not the local rank");
  std::printf("rank %d: semantics %s\n", id.rank, failures == 0 ? "ok" : "WRONG");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string arg = argc > 2 ? argv[2] : "";
  return report_errors([&]() -> int {
    const auto& id = jobkit::current_identity();
    if (mode == "semantics") {
      semantics(arg);
      return failures == 0 ? 0 : 1;
    }
    if (mode == "throw-main") {
      jobkit::main_process_only([]() -> int { throw std::runtime_error("tokenizer download failed"); });
    } else if (mode == "throw-node") {
      jobkit::once_per_node([&] {
        if (id.node_rank == 1) throw std::runtime_error("disk full on the node");
      });
      jobkit::barrier();
    } else if (mode == "throw-rounds") {
      jobkit::do_n_at_a_time([&] {
        if (id.rank == id.world_size - 1) throw std::runtime_error("checkpoint upload failed");
      });
    } else if (mode == "nested") {
      jobkit::main_process_only([] { jobkit::barrier(); });
    } else if (mode == "late-setup") {
      if (id.rank == 0) std::this_thread::sleep_for(seconds(std::stoi(arg)));
      jobkit::barrier();
    } else if (mode == "long") {
      const auto t0 = steady_clock::now();
      jobkit::zero_first([&] {
        if (id.rank == 0) std::this_thread::sleep_for(seconds(std::stoi(arg)));
      });
      std::printf("rank %d: zero_first done after %.1f s\n", id.rank,
                  duration<double>(steady_clock::now() - t0).count());
      return 0;
    } else {
      std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    std::printf("rank %d: no failure arrived\n", id.rank);
    return 0;
  });
}
