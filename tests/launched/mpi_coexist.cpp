// jobkit and MPI in one process: both hold the PMIx client, which counts references, so either
// may initialise first and finalize in any order.
// usage: mpi_coexist [jobkit-first]
#include <mpi.h>

#include <cstdio>
#include <optional>
#include <string>

#include "jobkit/jobkit.hpp"

int main(int argc, char** argv) {
  const bool jobkit_first = argc > 1 && std::string(argv[1]) == "jobkit-first";
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "FAIL: %s\n", what);
      ++failures;
    }
  };
  try {
    std::optional<jobkit::runtime> early;
    if (jobkit_first) early.emplace();

    MPI_Init(&argc, &argv);
    int rank = -1, size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
      const jobkit::runtime scoped;  // released while MPI still runs
      expect(scoped.connected_to_pmix(), "runtime connected to PMIx");
      expect(scoped.identity().rank == rank, "jobkit rank == MPI rank");
      expect(scoped.identity().world_size == size, "jobkit world size == MPI size");
    }
    expect(jobkit::rank() == rank, "process-wide runtime rank");
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    expect(sum == size, "MPI_Allreduce after a jobkit runtime was released");
    MPI_Finalize();

    if (early) expect(early->identity().rank == rank, "early runtime outlives MPI_Finalize");
    if (failures == 0) std::printf("ok rank %d of %d\n", rank, size);
  } catch (const jobkit::error& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
