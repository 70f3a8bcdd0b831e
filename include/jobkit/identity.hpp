#pragma once

#include <string>
#include <string_view>

#include "jobkit/export.hpp"

namespace jobkit {

/// Where the values of an identity came from, in discovery order.
enum class identity_source {
  pmix,      ///< the PMIx server of the launcher (srun --mpi=pmix, Open MPI's mpirun)
  pmi2,      ///< the PMI-2 server of the launcher (srun --mpi=pmi2, where Slurm has no mpi/pmix)
  slurm,     ///< the Slurm step environment (srun --mpi=none)
  torchrun,  ///< RANK, LOCAL_RANK, WORLD_SIZE, ... (torchrun, composer)
  defaults,  ///< no launcher: the single-rank defaults
};

/// "pmix", "pmi2", "slurm", "torchrun" or "default".
JOBKIT_API std::string_view to_string(identity_source source) noexcept;

/// Who this process is in its job step. A plain value: cheap to copy, compare and print.
struct identity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        ///< index among the step's processes on this node
  int local_world_size = 1;  ///< the step's processes on this node (may differ between nodes)
  int node_rank = 0;         ///< index of this node among the step's nodes
  int num_nodes = 1;
  std::string hostname;
  std::string job_id;   ///< SLURM_JOB_ID, or the PMIx namespace (PMI-2 job id) outside Slurm; empty without a launcher
  std::string step_id;  ///< SLURM_STEP_ID; empty outside a Slurm step
  /// SLURM_RESTART_COUNT: how often Slurm requeued this job (pre-emption, jobkit::requeue); 0
  /// on its first run and outside Slurm.
  int restart_count = 0;
  std::string array_job_id;  ///< SLURM_ARRAY_JOB_ID; empty outside an array job
  int array_task_id = -1;    ///< SLURM_ARRAY_TASK_ID; -1 outside an array job
  /// @name Heterogeneous jobs
  /// The component of a Slurm heterogeneous job this rank is in (docs/launchers.md). Outside one,
  /// component 0 of 1 holds the whole step and component_nodes is empty.
  ///@{
  int component = 0;            ///< Slurm's het group number (srun --het-group=N)
  int num_components = 1;       ///< SLURM_HET_SIZE: the job's components (a step may span fewer)
  int component_rank = 0;       ///< index among the step's ranks of this component
  int component_size = 1;       ///< the step's ranks in this component
  std::string component_nodes;  ///< the step's nodes of this component, a Slurm host list
  ///@}
  identity_source source = identity_source::defaults;

  bool is_main_process() const noexcept { return rank == 0; }
  bool is_local_main_process() const noexcept { return local_rank == 0; }
  /// True when the step has more than one process.
  bool is_distributed() const noexcept { return world_size > 1; }

  friend bool operator==(const identity&, const identity&) = default;
};

/// One readable line: "rank 4/7 local 0/2 node 1/3 host c2 job 17 step 0 (pmix)"; a requeued
/// job adds "restart 2", an array task "array 16_3", a heterogeneous job "component 1/2 rank 2/3
/// on c[2-3]".
JOBKIT_API std::string to_string(const identity& id);

/// One JSON object with the keys rank, world_size, local_rank, local_world_size, node_rank,
/// num_nodes, hostname, job_id, step_id, restart_count, array_job_id and array_task_id (null
/// outside an array job), component, num_components, component_rank, component_size,
/// component_nodes, source.
JOBKIT_API std::string to_json(const identity& id);

}  // namespace jobkit
