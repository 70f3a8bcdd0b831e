#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/export.hpp"
#include "jobkit/identity.hpp"

namespace jobkit {

namespace detail {
struct runtime_access;
}  // namespace detail

/// An address of one of this host's network interfaces.
struct network_address {
  std::string interface;  ///< "eth0"
  std::string address;    ///< numeric: "198.18.0.1", "fd00::1"
  friend bool operator==(const network_address&, const network_address&) = default;
};

/// Connection of this process to its launcher. Discovers the identity (the launcher's process
/// management interface first, then the Slurm step environment, then torchrun variables, then
/// single-rank defaults; see docs/environment.md) and holds that connection open for its lifetime.
///
/// The launcher connection is reference-counted, so several runtimes, and MPI_Init/MPI_Finalize,
/// may coexist in one process. The first runtime alive is the process's runtime in use
/// (default_runtime()) while it lives. Move-only.
class JOBKIT_API runtime {
 public:
  /// @throws jobkit::error when the environment is malformed or contradicts PMIx, or PMIx fails.
  runtime();
  ~runtime();
  runtime(runtime&&) noexcept;
  runtime& operator=(runtime&&) noexcept;
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  const jobkit::identity& identity() const noexcept;
  /// True when the identity came from the launcher's PMIx server, which this runtime holds.
  bool connected_to_pmix() const noexcept;

  /// The numeric addresses this rank offers its peers, in the order they try them: 127.0.0.1
  /// when every rank shares one host, else the interfaces JOBKIT_SOCKET_IFNAME selects, else
  /// every non-loopback address (docs/environment.md). For other data paths, e.g. MASTER_ADDR.
  /// @throws jobkit::error (invalid_environment) when none is usable
  std::vector<network_address> data_path_addresses() const;

  /// Every rank of the job. Set up by the first collective: a single rank needs nothing; more
  /// ranks exchange endpoints through the launcher once and connect a TCP tree.
  /// @throws jobkit::error when world_size > 1 and the launcher serves no PMIx
  group& world();
  /// See jobkit::make_group, jobkit::node_group, jobkit::node_leaders_group and
  /// jobkit::component_group.
  group make_group(const std::vector<int>& world_ranks, call_options options = {});
  group& node_group();
  group& node_leaders_group();
  group& component_group();

 private:
  friend struct detail::runtime_access;
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The process's runtime in use: the first jobkit::runtime alive in the process (a program's
/// own), else one created on first use and finalized at normal exit. The free functions below,
/// the helpers, checkpoints, workspaces, NCCL communicators and the library's own log lines all
/// use it, so a program that made its own runtime has one PMIx client, not two.
/// @throws jobkit::error on first use without a runtime in use, as runtime::runtime().
JOBKIT_API runtime& default_runtime();

/// The identity of this process (default_runtime().identity()).
JOBKIT_API const identity& current_identity();

/// @name Seed-compatible getters on the process-wide runtime
/// Without a launcher they return the documented single-rank defaults:
/// rank 0, world size 1, local rank 0, local world size 1, node rank 0, one node.
///@{
JOBKIT_API int rank();
JOBKIT_API int world_size();
JOBKIT_API int local_rank();
JOBKIT_API int local_world_size();
JOBKIT_API int node_rank();
JOBKIT_API int num_nodes();
JOBKIT_API bool is_main_process();
JOBKIT_API bool is_local_main_process();
JOBKIT_API bool is_distributed();
///@}

}  // namespace jobkit
