// Every rank prints who it is; the main rank also logs how the step is laid out.
//
//   ./build/examples/jobkit-hello                         single-rank defaults
//   srun --mpi=pmix -N3 -n7 ./build/examples/jobkit-hello  one line per rank
#include <jobkit/jobkit.hpp>

int main() {
  try {
    const auto& me = jobkit::current_identity();
    jobkit::log::info("{} ranks on {} nodes, identity from {}", me.world_size, me.num_nodes,
                      jobkit::to_string(me.source));
    fmt::print("{}\n", jobkit::rank_prefixed_message(jobkit::to_string(me)));
  } catch (const jobkit::error& e) {
    fmt::print(stderr, "jobkit-hello: {}\n", e.what());
    return 2;
  }
}
