#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::fold {

/// The number of tasks an srun command line asks for.
struct srun_tasks {
  int count;
  /// srun gets exactly count tasks (-n, or -N N with --ntasks-per-node), not at least count
  /// (-N MIN-MAX): then its labels are exactly as wide as count - 1 (labels.hpp).
  bool exact;
};

/// The tasks an srun command line asks for: its -n/--ntasks, else its -N/--nodes times its
/// --ntasks-per-node; nullopt when it says neither (srun then takes SLURM_NTASKS, or one task per
/// node), or says it in a form read by srun alone (srun judges it). Only srun's options count, up to
/// its command: `srun -n4 python train.py -n 8` is 4. `args` starts after "srun". A count past
/// most_tasks (labels.hpp) is a jobkit::error (invalid_argument) naming the options and values.
std::optional<srun_tasks> srun_task_count(const std::vector<std::string_view>& args);

/// Which of the options `names` (without dashes: "N", "nodelist") an srun command line gives
/// before its command, as written ("-N", "--nodelist"), in their order. `args` starts after "srun".
std::vector<std::string> srun_options_given(const std::vector<std::string_view>& args,
                                            std::initializer_list<std::string_view> names);

}  // namespace jobkit::fold
