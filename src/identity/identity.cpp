#include "jobkit/identity.hpp"

#include <fmt/format.h>

namespace jobkit {
namespace {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (ch < 0x20) {
          out += fmt::format("\\u{:04x}", ch);
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string_view to_string(identity_source source) noexcept {
  switch (source) {
    case identity_source::pmix: return "pmix";
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
  return line + fmt::format(" ({})", to_string(id.source));
}

std::string to_json(const identity& id) {
  return fmt::format(R"({{"rank":{},"world_size":{},"local_rank":{},"local_world_size":{},"node_rank":{},)"
                     R"("num_nodes":{},"hostname":{},"job_id":{},"step_id":{},"source":{}}})",
                     id.rank, id.world_size, id.local_rank, id.local_world_size, id.node_rank, id.num_nodes,
                     json_string(id.hostname), json_string(id.job_id), json_string(id.step_id),
                     json_string(to_string(id.source)));
}

}  // namespace jobkit
