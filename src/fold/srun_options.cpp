#include "fold/srun_options.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "fold/labels.hpp"
#include "jobkit/error.hpp"

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

/// An option's value as srun was given it, and the count read from it.
struct count {
  std::string option;  // as written: "-n", "--ntasks"
  std::string_view value;
  long long least;  // at most most_tasks: a larger one is refused as it is read
  bool exact;       // not a range
};

std::string named(std::string_view option, std::string_view value) {
  return std::string(option) + "='" + std::string(value) + "'";
}

[[noreturn]] void too_many(const std::string& what) {
  throw error(errc::invalid_argument, "fold: srun's " + what + " asks for more than " + std::to_string(most_tasks) +
                                          " tasks, the most jobkit fold reads");
}

/// A count srun reads: digits, for -N also a range ("2-4": two to four nodes, so at least two).
/// nullopt for a form jobkit does not read (0, "1k", text): srun judges it.
std::optional<count> count_of(std::string option, std::string_view value) {
  const auto digits = value.find_first_not_of("0123456789");
  const auto first = value.substr(0, digits);
  const auto rest = digits == std::string_view::npos ? std::string_view{} : value.substr(digits);
  if (first.empty() || (!rest.empty() && (rest.front() != '-' || rest.size() == 1 ||
                                          rest.find_first_not_of("0123456789", 1) != std::string_view::npos))) {
    return std::nullopt;
  }
  long long least = 0;
  for (const char c : first) {
    least = least * 10 + (c - '0');
    if (least > most_tasks) too_many(named(option, value));
  }
  if (least == 0) return std::nullopt;
  return count{std::move(option), value, least, rest.empty()};
}

}  // namespace

/// Calls `each(name, option, value)` for every option of an srun command line before its command:
/// its name without dashes, as written ("-n", "--ntasks") and its value (nullopt: none).
template <class Each>
void for_each_option(const std::vector<std::string_view>& args, Each each) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg.front() != '-') break;  // the command
    std::string_view name;
    std::string option;
    std::optional<std::string_view> value;
    if (arg.substr(0, 2) == "--") {
      const auto eq = arg.find('=');
      name = arg.substr(2, eq == std::string_view::npos ? std::string_view::npos : eq - 2);
      option = "--" + std::string(name);
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
        option = "-" + std::string(name);
        if (j + 1 < arg.size()) {
          value = arg.substr(j + 1);
        } else if (i + 1 < args.size()) {
          value = args[++i];
        }
        break;
      }
    }
    each(name, option, value);
  }
}

std::optional<srun_tasks> srun_task_count(const std::vector<std::string_view>& args) {
  std::optional<count> tasks;
  std::optional<count> nodes;
  std::optional<count> per_node;
  for_each_option(args, [&](std::string_view name, const std::string& option, std::optional<std::string_view> value) {
    if (!value) return;
    if (name == "n" || name == "ntasks") tasks = count_of(option, *value);
    if (name == "N" || name == "nodes") nodes = count_of(option, *value);
    if (name == "ntasks-per-node") per_node = count_of(option, *value);
  });
  if (tasks) return srun_tasks{static_cast<int>(tasks->least), tasks->exact};
  if (!nodes || !per_node) return std::nullopt;
  const auto product = nodes->least * per_node->least;  // each at most most_tasks: no overflow
  if (product > most_tasks) {
    too_many(named(nodes->option, nodes->value) + " times " + named(per_node->option, per_node->value) + " (" +
             std::to_string(product) + ")");
  }
  return srun_tasks{static_cast<int>(product), nodes->exact && per_node->exact};
}

std::vector<std::string> srun_options_given(const std::vector<std::string_view>& args,
                                            std::initializer_list<std::string_view> names) {
  std::vector<std::string> given;
  for_each_option(args, [&](std::string_view name, const std::string& option, std::optional<std::string_view>) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) != names.end()) given.push_back(option);
  });
  return given;
}

}  // namespace jobkit::fold
