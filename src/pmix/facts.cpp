#include "pmix/facts.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/host_list.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

node_position place_in_node_list(std::string_view node_list, std::string_view hostname) {
  std::vector<std::string_view> nodes;
  for (std::string_view rest = node_list; !rest.empty();) {
    const auto comma = rest.find(',');
    nodes.push_back(rest.substr(0, comma));
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  const auto found = std::find(nodes.begin(), nodes.end(), hostname);
  if (hostname.empty() || found == nodes.end() || std::count(nodes.begin(), nodes.end(), hostname) != 1 ||
      std::count(nodes.begin(), nodes.end(), std::string_view()) != 0) {
    throw error(errc::pmix, fmt::format("the PMIx server reported an inconsistent identity: this node's "
                                        "PMIX_HOSTNAME='{}' is not in the job's node list "
                                        "PMIx_Resolve_nodes='{}' exactly once",
                                        hostname, node_list));
  }
  return {static_cast<int>(found - nodes.begin()), static_cast<int>(nodes.size())};
}

std::optional<std::string> slurm_direct_modex_misrouted(std::optional<std::string_view> step_nodes,
                                                        std::optional<std::string_view> job_nodes) {
  if (!step_nodes || !job_nodes) return std::nullopt;
  std::vector<std::string> step, job;
  try {
    step = expand_host_list("SLURM_STEP_NODELIST", *step_nodes);
    job = expand_host_list("SLURM_JOB_NODELIST", *job_nodes);
  } catch (const error& e) {
    return fmt::format("the step's place in the job's nodes cannot be read ({})", e.what());
  }
  for (std::size_t k = 0; k < step.size(); ++k) {
    if (k >= job.size() || step[k] != job[k]) {
      return fmt::format(
          "node {} of the step (SLURM_STEP_NODELIST={}) is {}, node {} of the job (SLURM_JOB_NODELIST={}) is {}; "
          "Slurm's mpi/pmix sends a direct modex request for a rank on the step's k-th node to the job's k-th node",
          k, *step_nodes, step[k], k, *job_nodes, k < job.size() ? job[k] : std::string("none"));
    }
  }
  return std::nullopt;
}

}  // namespace jobkit::detail
