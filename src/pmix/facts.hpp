#pragma once

// What the PMIx server reports for this process, and where this node is among the job's nodes:
// PMIx-free, for identity discovery (src/identity) and its tests.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// What the PMIx server reported for this process.
struct pmix_facts {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  ///< this node's position among the job's nodes (place_in_node_list), dense
  int num_nodes = 1;
  std::vector<int> local_peers;  ///< PMIX_LOCAL_PEERS as served (PRRTE: not in local-rank order); empty when not served
  std::string nspace;
  /// Where node_rank and num_nodes came from, for messages: "position of PMIX_HOSTNAME='c2' in
  /// PMIx_Resolve_nodes='c2,c3' (PMIX_NODEID=1)" or "PMIX_NODEID=1".
  std::string node_origin;
};

/// This node's place among the job's nodes.
struct node_position {
  int node_rank;
  int num_nodes;
};

/// The one policy for a node's rank under PMIx: its position in the job's node list
/// (PMIx_Resolve_nodes, which lists the nodes that run the job's ranks in the launcher's node
/// order), found by the name the launcher gave this node (PMIX_HOSTNAME). Not PMIX_NODEID: under
/// Open MPI 5's mpirun (PRRTE) that is an index in the daemons' node pool, in which the host of
/// mpirun is node 0 even when it runs no rank, so node ids can have gaps (docs/launchers.md). Under
/// Slurm the position is SLURM_NODEID (the step's node list is in node id order); under PRRTE it is
/// dense and in node id order.
/// @throws jobkit::error (pmix) when the hostname is not in the list exactly once
node_position place_in_node_list(std::string_view node_list, std::string_view hostname);

/// Why Slurm's mpi/pmix cannot serve a direct modex (a PMIx_Get of another rank's key with no
/// fence) in this step, or nullopt where it can. Its slurmstepd sends the request for a rank on the
/// step's k-th node to the job's k-th node (pmixp_dmdx_get takes the step's node index for the
/// job's, Slurm 22.05 to 26.05), so such a get is answered only when the step runs on the job's
/// first nodes in their order: in a step on c2,c3 of the allocation c1-c3 it never is (nor is
/// PMIX_TIMEOUT kept: bench/RESULTS.md, 2026-12-02). A collecting fence is routed right. Reads
/// the two lists the slurmstepd reads: `step_nodes` (SLURM_STEP_NODELIST) and `job_nodes`
/// (SLURM_JOB_NODELIST, else SLURM_NODELIST); nullopt when either is absent (not a Slurm step),
/// the reason when a list cannot be read.
std::optional<std::string> slurm_direct_modex_misrouted(std::optional<std::string_view> step_nodes,
                                                        std::optional<std::string_view> job_nodes);

}  // namespace jobkit::detail
