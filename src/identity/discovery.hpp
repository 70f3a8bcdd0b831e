#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"
#include "jobkit/identity.hpp"

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

/// What the PMI-2 server (Slurm's mpi/pmi2) reported for this process.
struct pmi2_facts {
  int rank = 0;
  int world_size = 1;
  std::string job_id;                          ///< PMI2_Job_GetId (Slurm: "job.step")
  std::optional<std::string> process_mapping;  ///< PMI_process_mapping as served
  std::string mapping_problem;                 ///< why process_mapping is absent
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

/// JOBKIT_IDENTITY: which source to trust ("auto" discovers and cross-checks them all).
enum class source_request { automatic, pmix, pmi2, slurm, torchrun, defaults };
source_request requested_source(const environment& env);

/// A PMIx server advertises itself through PMIX_RANK and PMIX_NAMESPACE in the environment of
/// the processes it launched, so its presence is known before PMIx_Init.
bool pmix_server_advertised(const environment& env);

/// A PMI-2 server (Slurm's mpi/pmi2, srun --mpi=pmi2) advertises itself through PMI_FD, PMI_RANK
/// and PMI_SIZE.
bool pmi2_server_advertised(const environment& env);

/// A decimal count: digits only, no sign, fits in an int.
/// @throws jobkit::error naming the variable and its value
int parse_count(std::string_view name, std::string_view value);

/// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE, e.g. "2(x3),1" -> {2, 2, 2, 1}.
/// @throws jobkit::error naming the variable and its value
std::vector<int> parse_tasks_per_node(std::string_view name, std::string_view value);

/// Environment-only checks that must pass before PMIx_Init: the launcher variables are well formed
/// and agree with PMIX_RANK, so several processes spawned inside one task never connect as one rank.
void check_environment_before_pmix(const environment& env);

class pmix_session;
class pmi2_session;

/// This process's identity, discovered once: JOBKIT_IDENTITY says which sources to use; with a
/// PMIx server advertised (or requested), `pmix` is connected and PMIx is the truth; else with a
/// PMI-2 server advertised (or requested), `pmi2` is connected and PMI-2 is the truth.
/// @throws jobkit::error (invalid_environment) when the environment is malformed or contradicts
/// PMIx or PMI-2; (pmix) when PMIx or PMI-2 fails
identity discover_identity(const environment& env, std::optional<pmix_session>& pmix,
                           std::optional<pmi2_session>& pmi2);

/// The identity of this process. With pmix (or pmi2) set, it is the truth and every other source
/// found in the environment must agree with it; otherwise the first source found in the
/// documented order.
/// @throws jobkit::error (invalid_environment) naming the variables and values at fault
identity resolve_identity(const environment& env, const pmix_facts* pmix, std::string hostname,
                          const pmi2_facts* pmi2 = nullptr);

}  // namespace jobkit::detail
