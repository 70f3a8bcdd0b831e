#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"
#include "jobkit/identity.hpp"
#include "pmi2/facts.hpp"
#include "pmix/facts.hpp"

namespace jobkit::detail {

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
