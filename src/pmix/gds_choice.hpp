#pragma once

// Which PMIx store PMIx_Init asks its server for (PMIX_GDS_MODULE), chosen for the length of one
// PMIx_Init (src/pmix/session.cpp).

#include <optional>
#include <string>

namespace jobkit::detail {

/// PMIx_Init picks the store through which its server hands it the job's data and the other ranks'
/// values from PMIX_GDS_MODULE, the list the launcher offers (Slurm 22.05: "ds21,ds12,hash"). With
/// a shared-memory store (ds21, ds12), each node's server creates and zero-fills two 4 MiB files in
/// its spool directory when the step's first client asks for its job data, and every client of the
/// node waits for it: measured on the dev cluster, PMIx_Init took 40 ms alone, 8 ms with "hash",
/// which has the server send the job data in its reply instead. But with "hash" every other rank's
/// value is a request to the server (3 nodes x 24 ranks: 16-24 ms for the endpoint records, against
/// 1-5 ms read in place), a cost that grows with the job while the saving is fixed. So by default
/// (JOBKIT_PMIX_GDS=auto) jobkit asks for "hash" where the launcher offers it and the Slurm step has
/// at most small_step_ranks ranks (SLURM_STEP_NUM_TASKS); "hash" asks for it whatever the size,
/// "launcher" never. Never by default under mpirun (OMPI_COMM_WORLD_SIZE set): with "hash", Open
/// MPI 4.1's mpirun hands every rank the node-level keys of every node, and a job-level
/// PMIX_LOCAL_PEERS read gives the last node's (measured: ranks 0,1 on c2 read "2,3", c3's;
/// docs/launchers.md). The
/// variable is changed for the duration of PMIx_Init only and only where the launcher set it (an
/// in-place replacement, never a new entry), and not at all when PMIx is already initialised in this
/// process (by MPI, say).
class gds_choice {
 public:
  /// Reads JOBKIT_PMIX_GDS and, where it asks for "hash" and the launcher offers it, sets
  /// PMIX_GDS_MODULE to "hash". @throws jobkit::error (invalid_environment) when JOBKIT_PMIX_GDS is
  /// not one of auto, hash, launcher
  gds_choice();
  /// Whether this PMIx_Init asks the server for the hash store.
  bool hash() const noexcept { return hash_; }
  static constexpr long small_step_ranks = 16;
  /// Leaves the variable as PMIx_Init found it: a PMIx_Init still running on another thread may
  /// read it, and setenv must not race with its getenv.
  void keep() noexcept { original_.reset(); }
  ~gds_choice();
  gds_choice(const gds_choice&) = delete;
  gds_choice& operator=(const gds_choice&) = delete;

 private:
  std::optional<std::string> original_;
  bool hash_ = false;
};

}  // namespace jobkit::detail
