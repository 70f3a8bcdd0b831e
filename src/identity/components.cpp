#include "identity/components.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <map>
#include <numeric>
#include <vector>

#include "core/host_list.hpp"
#include "identity/discovery.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

[[noreturn]] void reject(const std::string& message) { throw error(errc::invalid_environment, message); }

/// Slurm's het jobs have at most a few hundred components (MaxHetJobComponents); more is not a job.
constexpr int max_components = 4096;

/// A variable Slurm sets per component under two names: _HET_GROUP_<n> since 20.02, and the
/// older _PACK_GROUP_<n> (the only one a `srun A : B` step gets, on 22.05 and 24.11 alike).
std::optional<std::pair<std::string, std::string>> find_per_component(const environment& env, std::string_view stem,
                                                                      int n) {
  for (const auto* infix : {"_HET_GROUP_", "_PACK_GROUP_"}) {
    auto name = fmt::format("{}{}{}", stem, infix, n);
    if (auto value = env.get(name)) return std::pair{std::move(name), std::string(*value)};
  }
  return std::nullopt;
}

std::pair<std::string, std::string> per_component(const environment& env, std::string_view stem, int n) {
  if (auto found = find_per_component(env, stem, n)) return *found;
  reject(
      fmt::format("{}_HET_GROUP_{} and {}_PACK_GROUP_{} are not set, but this is component {} of a heterogeneous "
                  "job of {} (SLURM_HET_SIZE)",
                  stem, n, stem, n, n, env.get("SLURM_HET_SIZE").value_or(env.get("SLURM_PACK_SIZE").value_or(""))));
}

}  // namespace

std::optional<het_component> het_component_of(const environment& env, int rank, int node_rank) {
  std::string size_name = "SLURM_HET_SIZE";
  auto size_text = env.get(size_name);
  if (!size_text) size_text = env.get(size_name = "SLURM_PACK_SIZE");
  if (!size_text) return std::nullopt;
  // Variables inherited from another job (a job submitted from a heterogeneous job's batch
  // script keeps its environment) describe that job, not this one: its leader is not this job.
  const auto leader = find_per_component(env, "SLURM_JOB_ID", 0);
  if (const auto job = env.get("SLURM_JOB_ID"); leader && job && leader->second != *job) return std::nullopt;
  const int components = parse_count(size_name, *size_text);
  if (components < 1 || components > max_components) {
    reject(fmt::format("{}='{}' must be between 1 and {}", size_name, *size_text, max_components));
  }
  const auto step_text = env.get("SLURM_STEP_NODELIST");
  const auto layout_text = env.get("SLURM_STEP_TASKS_PER_NODE");
  if (!step_text || !layout_text) {
    reject(
        fmt::format("{}='{}' says this is a heterogeneous job, but SLURM_STEP_NODELIST and "
                    "SLURM_STEP_TASKS_PER_NODE are not both set",
                    size_name, *size_text));
  }
  const auto step_nodes = expand_host_list("SLURM_STEP_NODELIST", *step_text);
  const auto layout = parse_tasks_per_node("SLURM_STEP_TASKS_PER_NODE", *layout_text);
  if (step_nodes.size() != layout.size()) {
    reject(fmt::format("SLURM_STEP_NODELIST='{}' names {} nodes but SLURM_STEP_TASKS_PER_NODE='{}' lists {}",
                       *step_text, step_nodes.size(), *layout_text, layout.size()));
  }
  if (node_rank < 0 || static_cast<std::size_t>(node_rank) >= step_nodes.size()) {
    reject(fmt::format("node rank {} is outside SLURM_STEP_NODELIST='{}'", node_rank, *step_text));
  }

  // Every node of the job belongs to one component; the lists share one bound.
  std::map<std::string, int, std::less<>> component_of;
  std::vector<std::pair<std::string, std::string>> lists;  // (variable, value) per component
  std::vector<std::vector<std::string>> expanded;          // their names
  std::size_t budget = max_listed_hosts;
  for (int g = 0; g < components; ++g) {
    lists.push_back(per_component(env, "SLURM_JOB_NODELIST", g));
    expanded.push_back(expand_host_list(lists.back().first, lists.back().second, budget));
    budget -= expanded.back().size();
    for (const auto& node : expanded.back()) {
      if (auto [it, added] = component_of.emplace(node, g); !added && it->second != g) {
        reject(fmt::format("node {} is in two components' node lists: {}='{}' and {}='{}'", it->first,
                           lists[static_cast<std::size_t>(it->second)].first,
                           lists[static_cast<std::size_t>(it->second)].second, lists.back().first,
                           lists.back().second));
      }
    }
  }
  std::vector<int> step_component(step_nodes.size());
  for (std::size_t i = 0; i < step_nodes.size(); ++i) {
    const auto found = component_of.find(step_nodes[i]);
    if (found == component_of.end()) {
      reject(
          fmt::format("node {} of SLURM_STEP_NODELIST='{}' is in none of the components' node lists "
                      "(SLURM_JOB_NODELIST_HET_GROUP_0 to {})",
                      step_nodes[i], *step_text, components - 1));
    }
    step_component[i] = found->second;
  }

  // A step numbers its ranks component after component, in component order.
  het_component c;
  c.index = step_component[static_cast<std::size_t>(node_rank)];
  c.num_components = components;
  long offset = 0;  // at most a million nodes of at most INT_MAX tasks: no overflow in a long
  long size = 0;
  std::vector<std::string> nodes;
  for (std::size_t i = 0; i < step_nodes.size(); ++i) {
    if (step_component[i] < c.index) offset += layout[i];
    if (step_component[i] == c.index) {
      size += layout[i];
      nodes.push_back(step_nodes[i]);
    }
  }
  if (rank < offset || rank >= offset + size) {
    reject(
        fmt::format("rank {} on node {} (component {} of SLURM_STEP_NODELIST='{}', SLURM_STEP_TASKS_PER_NODE='{}') "
                    "is not among that component's ranks {} to {}",
                    rank, step_nodes[static_cast<std::size_t>(node_rank)], c.index, *step_text, *layout_text, offset,
                    offset + size - 1));
  }
  if (offset + size > INT_MAX)
    reject(fmt::format("SLURM_STEP_TASKS_PER_NODE='{}' adds up to more than {} tasks", *layout_text, INT_MAX));
  c.rank = static_cast<int>(rank - offset);
  c.size = static_cast<int>(size);
  // The component's own list when the step has all its nodes (the usual case), else the names.
  const auto i = static_cast<std::size_t>(c.index);
  c.nodes = expanded[i] == nodes ? lists[i].second : fmt::format("{}", fmt::join(nodes, ","));
  return c;
}

}  // namespace jobkit::detail
