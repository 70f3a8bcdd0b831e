// A training step's skeleton with jobkit: a run id decided once, a node-local cache prepared
// once per node, checkpoints written a few ranks at a time, and metrics reduced exactly.
// Launch: srun --mpi=pmix --kill-on-bad-exit=1 jobkit-train-step [STEPS]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "jobkit/jobkit.hpp"

int main(int argc, char** argv) {
  try {
    const int steps = argc > 1 ? std::stoi(argv[1]) : 3;
    const auto& me = jobkit::current_identity();
    const auto run_id = jobkit::compute_and_broadcast(
        [] { return std::to_string(std::chrono::system_clock::now().time_since_epoch().count()); });
    jobkit::once_per_node([&] { jobkit::log::info("node {}: preparing the node-local cache", me.hostname); });
    double loss = 1.0;
    for (int step = 1; step <= steps; ++step) {
      loss *= 0.5 + 0.01 * me.rank;  // stands for a real step's loss
      const double mean = jobkit::all_reduce(loss, jobkit::reduce_op::sum) / me.world_size;
      const auto tokens = jobkit::all_reduce(std::int64_t{1024}, jobkit::reduce_op::sum);
      jobkit::log::info("run {} step {}: mean loss {:.6f}, {} tokens", run_id, step, mean, tokens);
    }
    jobkit::do_n_at_a_time([&] { /* write this rank's checkpoint shard */ });
    jobkit::barrier();
    std::printf("rank %d/%d on %s: run %s finished %d steps\n", me.rank, me.world_size, me.hostname.c_str(),
                run_id.c_str(), steps);
    return 0;
  } catch (const std::exception& e) {
    jobkit::log::error("{}", e.what());
    return 1;
  }
}
