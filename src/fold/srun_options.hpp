#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace jobkit::fold {

/// The number of tasks an srun command line asks for: its -n/--ntasks, else its -N/--nodes times
/// its --ntasks-per-node; nullopt when it says neither (srun then takes SLURM_NTASKS, or one task
/// per node). Only srun's options count, up to its command: `srun -n4 python train.py -n 8` is 4.
/// `args` starts after "srun".
std::optional<int> srun_task_count(const std::vector<std::string_view>& args);

}  // namespace jobkit::fold
