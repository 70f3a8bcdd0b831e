#include "nccl/device_rule.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "jobkit/error.hpp"
#include "jobkit/helpers.hpp"

namespace jobkit::nccl {

std::string visible_devices_variable() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::string text = visible ? fmt::format("CUDA_VISIBLE_DEVICES='{}'", visible) : "CUDA_VISIBLE_DEVICES unset";
  if (const char* step_gpus = std::getenv("SLURM_STEP_GPUS")) text += fmt::format(", SLURM_STEP_GPUS='{}'", step_gpus);
  return text;
}

int select_device(int visible_count, int local_rank, int local_world_size) {
  if (visible_count == 1) return 0;
  if (visible_count >= local_world_size && visible_count > 0) return local_rank;
  if (visible_count == 0) {
    throw error(errc::invalid_environment,
                fmt::format("{} sees no CUDA device ({})", detail::describe_self(), visible_devices_variable()));
  }
  throw error(
      errc::invalid_environment,
      fmt::format("{} (local rank {} of {}) sees {} CUDA devices ({}): fewer than its node's ranks and "
                  "more than one, so no device is its own. Bind one GPU per task (srun --gpus-per-task=1) "
                  "or show every task all of the node's GPUs, or pass communicator_options::device",
                  detail::describe_self(), local_rank, local_world_size, visible_count, visible_devices_variable()));
}

}  // namespace jobkit::nccl
