#pragma once

// Which component of a Slurm heterogeneous job a rank is in. Neither Slurm 22.05 nor 24.11
// serves it through PMIx (every rank has PMIX_APPNUM=0 and no PMIX_APP_SIZE) or a per-task
// variable, so it comes from the step's layout and the components' node lists
// (docs/launchers.md): Slurm gives each component nodes of its own, and numbers a step's ranks
// component after component.

#include <optional>
#include <string>

#include "core/environment.hpp"

namespace jobkit::detail {

/// This rank's component of a heterogeneous job.
struct het_component {
  int index = 0;           ///< Slurm's het group number (srun --het-group)
  int num_components = 1;  ///< SLURM_HET_SIZE: the job's components (a step may span fewer)
  int rank = 0;            ///< this rank's index among the step's ranks of its component
  int size = 1;            ///< the step's ranks in this component
  std::string nodes;       ///< the step's nodes of this component, a Slurm host list
};

/// The component of the step rank `rank` on the step's node `node_rank` (SLURM_NODEID), or
/// nullopt outside a heterogeneous job (no SLURM_HET_SIZE or SLURM_PACK_SIZE).
/// @throws jobkit::error (invalid_environment) naming the variables and values when they are
/// malformed or do not describe one component for this rank
std::optional<het_component> het_component_of(const environment& env, int rank, int node_rank);

}  // namespace jobkit::detail
