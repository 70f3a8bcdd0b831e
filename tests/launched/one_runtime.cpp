// The rank program of tests/launched/one_runtime.sh: a program with its own jobkit::runtime that
// goes through every part of the library that logs or reaches the process's runtime (the free
// functions, the helpers, checkpoints, time_left's warning, jobkit::log, rank_prefixed_message).
// None may start a second PMIx client: default_runtime() is the program's runtime, and once that
// runtime has ended, PMIx (counting its PMIx_Init and PMIx_Finalize calls) is finalised, which it
// is not when anything in the library made a PMIx_Init of its own.
//
//   one_runtime_check CHECKPOINT_DIR
//
// Prints "ok rank R" when every check passed, else a "FAIL rank R: ..." line and exits 1.
#include <pmix.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "jobkit/jobkit.hpp"
#include "test_support.hpp"

namespace {

int failures = 0;
int me = -1;

void check(bool passed, const std::string& what) {
  if (passed) return;
  std::printf("FAIL rank %d: %s\n", me, what.c_str());
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: one_runtime_check CHECKPOINT_DIR\n");
    return 2;
  }
  // time_left warns when libslurm cannot answer: with Slurm's end time unknown to the step
  // (Slurm 22.05 sets no SLURM_JOB_END_TIME; 23.02 and later do) and a libslurm that is not there.
  unsetenv("SLURM_JOB_END_TIME");
  setenv("JOBKIT_LIBSLURM", "/nonexistent/before/libslurm.so.37", 1);
  const int status = report_errors([&] {
    // Before any runtime: the library's warning goes to stderr as a single-rank process's, and
    // starts nothing.
    check(!jobkit::time_left().has_value(), "time_left() knew the time left without libslurm");
    check(!PMIx_Initialized(), "time_left's warning, before any runtime, initialised PMIx");
    setenv("JOBKIT_LIBSLURM", "/nonexistent/during/libslurm.so.37", 1);  // a new setting: asked again
    {
      jobkit::runtime rt;
      const auto& id = rt.identity();
      me = id.rank;
      check(rt.connected_to_pmix(), "the program's runtime is not connected to PMIx");
      check(&jobkit::default_runtime() == &rt, "default_runtime() is not the program's runtime");
      check(&jobkit::current_identity() == &id, "current_identity() is not the program's runtime's");
      check(&jobkit::world() == &rt.world(), "world() is not the program's runtime's world");

      jobkit::log::info("one runtime: rank {} of {}", id.rank, id.world_size);  // default_logger()
      jobkit::log::warn("one runtime: a warning of rank {}", id.rank);
      check(jobkit::rank_prefixed_message("x") == "[rank: " + std::to_string(id.rank) + "] x",
            "rank_prefixed_message() does not carry this rank");
      check(jobkit::all_reduce(1, jobkit::reduce_op::sum) == id.world_size, "all_reduce over world()");
      jobkit::zero_first([] {});
      check(jobkit::once_per_node([] { return 1; }).has_value() == (id.local_rank == 0), "once_per_node");
      check(!jobkit::time_left().has_value(), "time_left() knew the time left without libslurm");

      jobkit::checkpoints saved(argv[1], {.keep = 1});
      for (std::int64_t step = 1; step <= 2; ++step) {  // the second commit removes the first step
        std::ofstream(saved.begin(step) / "part") << step;
        saved.commit();
      }
      check(saved.latest() == 2, "the latest checkpoint is not step 2");
      jobkit::barrier();
      int initialised = PMIx_Initialized() ? 1 : 0;
      check(initialised == 1, "PMIx is not initialised while the program's runtime lives");
    }
    // The program's runtime ended: its PMIx_Finalize was the last.
    check(!PMIx_Initialized(),
          "PMIx is still initialised after the program's runtime ended: "
          "something in the library made a PMIx_Init of its own");
    return 0;
  });
  if (status != 0) return status;
  if (failures != 0) return 1;
  std::printf("ok rank %d\n", me);
  return 0;
}
