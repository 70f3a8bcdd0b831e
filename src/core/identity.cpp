#include "jobkit/identity.hpp"

#include <fmt/format.h>

#include "core/json.hpp"

namespace jobkit {
using detail::json_string;

std::string_view to_string(identity_source source) noexcept {
  switch (source) {
    case identity_source::pmix: return "pmix";
    case identity_source::pmi2: return "pmi2";
    case identity_source::slurm: return "slurm";
    case identity_source::torchrun: return "torchrun";
    case identity_source::defaults: return "default";
  }
  return "unknown";
}

std::string to_string(const identity& id) {
  std::string line = fmt::format("rank {}/{} local {}/{} node {}/{} host {}", id.rank, id.world_size, id.local_rank,
                                 id.local_world_size, id.node_rank, id.num_nodes, id.hostname);
  if (!id.job_id.empty()) line += fmt::format(" job {}", id.job_id);
  if (!id.step_id.empty()) line += fmt::format(" step {}", id.step_id);
  if (id.restart_count > 0) line += fmt::format(" restart {}", id.restart_count);
  if (!id.array_job_id.empty()) line += fmt::format(" array {}_{}", id.array_job_id, id.array_task_id);
  if (id.num_components > 1) {
    line += fmt::format(" component {}/{} rank {}/{} on {}", id.component, id.num_components, id.component_rank,
                        id.component_size, id.component_nodes);
  }
  return line + fmt::format(" ({})", to_string(id.source));
}

std::string to_json(const identity& id) {
  return fmt::format(R"({{"rank":{},"world_size":{},"local_rank":{},"local_world_size":{},"node_rank":{},)"
                     R"("num_nodes":{},"hostname":{},"job_id":{},"step_id":{},"restart_count":{},"array_job_id":{},)"
                     R"("array_task_id":{},"component":{},"num_components":{},"component_rank":{},"component_size":{},)"
                     R"("component_nodes":{},"source":{}}})",
                     id.rank, id.world_size, id.local_rank, id.local_world_size, id.node_rank, id.num_nodes,
                     json_string(id.hostname), json_string(id.job_id), json_string(id.step_id), id.restart_count,
                     json_string(id.array_job_id), id.array_task_id < 0 ? "null" : std::to_string(id.array_task_id),
                     id.component, id.num_components, id.component_rank, id.component_size,
                     json_string(id.component_nodes), json_string(to_string(id.source)));
}

}  // namespace jobkit
