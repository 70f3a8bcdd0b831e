#include "fold/srun_options.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "core/parse.hpp"

namespace jobkit::fold {
namespace {

// srun's short options that take a value (its getopt string, Slurm 22.05 to 24.11), and its long
// options that take one, without "--". An option not listed takes none.
constexpr std::string_view short_with_value = "AbBcCdDeGiJLmMnNopqSTtwWx";
constexpr std::array<std::string_view, 64> long_with_value = {"account",
                                                              "acctg-freq",
                                                              "bcast",
                                                              "begin",
                                                              "chdir",
                                                              "cluster-constraint",
                                                              "clusters",
                                                              "comment",
                                                              "constraint",
                                                              "container",
                                                              "core-spec",
                                                              "cores-per-socket",
                                                              "cpu-bind",
                                                              "cpu-freq",
                                                              "cpus-per-gpu",
                                                              "cpus-per-task",
                                                              "deadline",
                                                              "delay-boot",
                                                              "dependency",
                                                              "distribution",
                                                              "error",
                                                              "exclude",
                                                              "export",
                                                              "gid",
                                                              "gpu-bind",
                                                              "gpu-freq",
                                                              "gpus",
                                                              "gpus-per-node",
                                                              "gpus-per-socket",
                                                              "gpus-per-task",
                                                              "gres",
                                                              "gres-flags",
                                                              "het-group",
                                                              "hint",
                                                              "input",
                                                              "job-name",
                                                              "jobid",
                                                              "kill-on-bad-exit-wait",
                                                              "licenses",
                                                              "mem",
                                                              "mem-bind",
                                                              "mem-per-cpu",
                                                              "mem-per-gpu",
                                                              "mincpus",
                                                              "mpi",
                                                              "network",
                                                              "nodefile",
                                                              "nodelist",
                                                              "nodes",
                                                              "ntasks",
                                                              "ntasks-per-core",
                                                              "ntasks-per-gpu",
                                                              "ntasks-per-node",
                                                              "ntasks-per-socket",
                                                              "output",
                                                              "partition",
                                                              "prolog",
                                                              "qos",
                                                              "reservation",
                                                              "signal",
                                                              "sockets-per-node",
                                                              "time",
                                                              "uid",
                                                              "wckey"};

std::optional<int> count_of(std::string_view value) {
  // "-N 2-4" asks for two to four nodes: the smallest is what srun gets at least.
  auto rest = value;
  const auto n = detail::take_decimal(rest);
  if (!n || *n == 0 || (!rest.empty() && rest.front() != '-')) return std::nullopt;
  return n;
}

}  // namespace

std::optional<int> srun_task_count(const std::vector<std::string_view>& args) {
  std::optional<int> tasks;
  std::optional<int> nodes;
  std::optional<int> per_node;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg.front() != '-') break;  // the command
    std::string_view name;
    std::optional<std::string_view> value;
    if (arg.substr(0, 2) == "--") {
      const auto eq = arg.find('=');
      name = arg.substr(2, eq == std::string_view::npos ? std::string_view::npos : eq - 2);
      if (eq != std::string_view::npos) {
        value = arg.substr(eq + 1);
      } else if (std::find(long_with_value.begin(), long_with_value.end(), name) != long_with_value.end() &&
                 i + 1 < args.size()) {
        value = args[++i];
      }
    } else {
      // A cluster of short options: "-ln4" is -l -n 4.
      for (std::size_t j = 1; j < arg.size(); ++j) {
        if (short_with_value.find(arg[j]) == std::string_view::npos) continue;
        name = arg.substr(j, 1);
        if (j + 1 < arg.size()) {
          value = arg.substr(j + 1);
        } else if (i + 1 < args.size()) {
          value = args[++i];
        }
        break;
      }
    }
    if (!value) continue;
    if (name == "n" || name == "ntasks") tasks = count_of(*value);
    if (name == "N" || name == "nodes") nodes = count_of(*value);
    if (name == "ntasks-per-node") per_node = count_of(*value);
  }
  if (tasks) return tasks;
  if (nodes && per_node) return *nodes * *per_node;
  return std::nullopt;
}

}  // namespace jobkit::fold
