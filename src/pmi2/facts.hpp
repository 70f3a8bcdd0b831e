#pragma once

// What the PMI-2 server reports for this process: PMI-free, for identity discovery (src/identity)
// and its tests.

#include <optional>
#include <string>

namespace jobkit::detail {

/// What the PMI-2 server (Slurm's mpi/pmi2) reported for this process.
struct pmi2_facts {
  int rank = 0;
  int world_size = 1;
  std::string job_id;                          ///< PMI2_Job_GetId (Slurm: "job.step")
  std::optional<std::string> process_mapping;  ///< PMI_process_mapping as served
  std::string mapping_problem;                 ///< why process_mapping is absent
};

}  // namespace jobkit::detail
