// What a rank reads from its environment before any launcher answers: the variables of torchrun,
// of Slurm (a heterogeneous job's too) and the one jobkit sets itself (JOBKIT_TORCH_VARIABLES).
// The input is lines, each the value of the next variable of `names` (an empty line leaves it
// unset). An identity that is accepted must be one: every index inside its count.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/environment.hpp"
#include "finding.hpp"
#include "identity/discovery.hpp"
#include "jobkit/error.hpp"

using namespace jobkit::detail;

namespace {

constexpr const char* names[] = {"RANK",
                                 "LOCAL_RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_WORLD_SIZE",
                                 "NODE_RANK",
                                 "GROUP_RANK",
                                 "JOBKIT_TORCH_VARIABLES",
                                 "SLURM_PROCID",
                                 "SLURM_STEP_NUM_TASKS",
                                 "SLURM_LOCALID",
                                 "SLURM_NODEID",
                                 "SLURM_STEP_NUM_NODES",
                                 "SLURM_STEP_TASKS_PER_NODE",
                                 "SLURM_JOB_ID",
                                 "JOBKIT_IDENTITY",
                                 "SLURM_STEP_NODELIST",
                                 "SLURM_HET_SIZE",
                                 "SLURM_JOB_NODELIST_HET_GROUP_0",
                                 "SLURM_JOB_NODELIST_PACK_GROUP_1",
                                 "SLURM_JOB_NODELIST_HET_GROUP_2"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  map_environment env;
  for (const char* name : names) {
    if (text.empty()) break;
    const auto end = text.find('\n');
    const auto value = text.substr(0, end);
    if (!value.empty()) env.set(name, std::string(value));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
  }
  try {
    check_environment_before_pmix(env);
    const auto id = resolve_identity(env, nullptr, "node");
    if (id.world_size < 1 || id.rank < 0 || id.rank >= id.world_size) finding("a rank outside the world");
    if (id.local_world_size < 1 || id.local_rank < 0 || id.local_rank >= id.local_world_size) {
      finding("a local rank outside its node");
    }
    if (id.local_world_size > id.world_size) finding("a node larger than the world");
    if (id.num_nodes < 1 || id.node_rank < 0 || id.node_rank >= id.num_nodes) finding("a node rank outside the nodes");
    if (id.num_nodes > id.world_size) finding("more nodes than ranks");
    if (id.num_components < 1 || id.component < 0 || id.component >= id.num_components) {
      finding("a component outside the job's");
    }
    if (id.component_size < 1 || id.component_size > id.world_size || id.component_rank < 0 ||
        id.component_rank >= id.component_size || id.component_rank > id.rank) {
      finding("a component rank outside its component");
    }
  } catch (const jobkit::error&) {
  }
  return 0;
}
