#pragma once

// The device rule of <jobkit/nccl.hpp> without CUDA: built into every libjobkit, so that the
// Python module (jobkit.select_device) has it in builds with -Dcuda=disabled too.

#include <string>

#include "jobkit/export.hpp"

namespace jobkit::nccl {

/// Declared for users in <jobkit/nccl.hpp> (exported: in builds with NCCL, part of the API);
/// defined once, in nccl/device_rule.cpp.
JOBKIT_API int select_device(int visible_count, int local_rank, int local_world_size);

/// What decided the devices a task sees, for device errors: "CUDA_VISIBLE_DEVICES='0,1'" or
/// "CUDA_VISIBLE_DEVICES unset", followed by ", SLURM_STEP_GPUS='0,1,2,3'" when Slurm set it.
std::string visible_devices_variable();

}  // namespace jobkit::nccl
