#pragma once

#include <memory>

#include "jobkit/collectives.hpp"
#include "jobkit/identity.hpp"

namespace jobkit {

class runtime;
namespace detail {
class pmix_session;
/// The runtime's PMIx client, or nullptr without a PMIx server (for jobkit's own one-time
/// exchanges, such as NCCL ids).
pmix_session* pmix_of(runtime& rt) noexcept;
}  // namespace detail

/// Connection of this process to its launcher. Discovers the identity (PMIx first, then the
/// Slurm step environment, then torchrun variables, then single-rank defaults; see
/// docs/environment.md) and holds the PMIx client open for its lifetime.
///
/// PMIx reference-counts PMIx_Init/PMIx_Finalize, so several runtimes, and MPI_Init/MPI_Finalize,
/// may coexist in one process. Move-only.
class runtime {
 public:
  /// @throws jobkit::error when the environment is malformed or contradicts PMIx, or PMIx fails.
  runtime();
  ~runtime();
  runtime(runtime&&) noexcept;
  runtime& operator=(runtime&&) noexcept;
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  const jobkit::identity& identity() const noexcept;
  /// True when the identity came from a PMIx server this runtime is connected to.
  bool connected_to_pmix() const noexcept;

  /// Every rank of the job. Set up by the first collective: a single rank needs nothing; more
  /// ranks exchange endpoints through one PMIx fence and connect a TCP tree.
  /// @throws jobkit::error when world_size > 1 and no PMIx server is connected
  group& world();
  /// See jobkit::make_group, jobkit::node_group and jobkit::node_leaders_group.
  group make_group(const std::vector<int>& world_ranks, call_options options = {});
  group& node_group();
  group& node_leaders_group();

 private:
  friend detail::pmix_session* detail::pmix_of(runtime& rt) noexcept;
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The process-wide runtime, created on first use and finalized at normal exit.
/// @throws jobkit::error on first use, as runtime::runtime().
runtime& default_runtime();

/// The identity of this process (default_runtime().identity()).
const identity& current_identity();

/// @name Seed-compatible getters on the process-wide runtime
/// Without a launcher they return the documented single-rank defaults:
/// rank 0, world size 1, local rank 0, local world size 1, node rank 0, one node.
///@{
int rank();
int world_size();
int local_rank();
int local_world_size();
int node_rank();
int num_nodes();
bool is_main_process();
bool is_local_main_process();
bool is_distributed();
///@}

}  // namespace jobkit
