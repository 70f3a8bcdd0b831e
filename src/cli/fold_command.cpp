// jobkit fold: a step's output with each line or block that many ranks said written once, under the
// ranks that said it. The engine is src/fold/folder.hpp; this file runs srun (or reads a pipe) and
// moves bytes.
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "core/child_process.hpp"
#include "core/environment.hpp"
#include "core/parse.hpp"
#include "core/posix_io.hpp"
#include "fold/folder.hpp"
#include "fold/labels.hpp"
#include "fold/srun_options.hpp"
#include "fold_pump.hpp"

namespace jobkit::cli {
namespace {

constexpr std::string_view fold_usage =
    "usage: jobkit fold [options] -- srun [srun options] CMD [ARGS...]\n"
    "       srun --label [srun options] CMD [ARGS...] 2>&1 | jobkit fold [options]\n"
    "\n"
    "Print a step's output with each line (or block: a line and its indented lines, a Python\n"
    "traceback) that several ranks said written once, prefixed with the ranks that said it:\n"
    "  [rank: 0-46] WARNING: tokenizer: padding side not set\n"
    "Ranks come from srun's labels (srun --label; 'jobkit fold -- srun' adds it) or jobkit's own\n"
    "'[rank: N] ' prefix. A block is written once every rank of the step said it, or at most the\n"
    "window after it first appeared; each rank's lines keep their order, stdout stays stdout and\n"
    "stderr stderr. Lines without a label pass through. With '-- srun', SIGINT, SIGTERM, SIGHUP,\n"
    "SIGQUIT, SIGUSR1 and SIGUSR2 go to srun (not a terminal's Ctrl-C, which srun gets itself),\n"
    "and the exit status is srun's (128+N when a signal N killed it).\n"
    "\n"
    "options:\n"
    "  --window MS       the longest a line is held for other ranks to say it (default 1000;\n"
    "                    reading a file, not a pipe: until the end)\n"
    "  --ranks N         the step's number of ranks (default: srun's -n/--ntasks, or -N times\n"
    "                    --ntasks-per-node, else SLURM_NTASKS)\n"
    "  --numbers         also fold lines that differ only in their numbers: 'loss 0.229..0.231'\n"
    "  --held-limit MB   past this much held text, the oldest blocks are written unfolded and\n"
    "                    that is said once (default 256)\n"
    "  --help            show this help\n";

struct fold_args {
  fold::options options;
  bool window_given = false;
  std::optional<int> ranks;
  std::vector<std::string> command;
};

int positive(std::string_view option, std::string_view value, int largest) {
  auto rest = value;
  const auto n = detail::take_decimal(rest);
  if (!n || !rest.empty() || *n == 0 || *n > largest) {
    throw usage_error{"fold: " + std::string(option) + "='" + std::string(value) +
                      "' is not a whole number from 1 to " + std::to_string(largest)};
  }
  return *n;
}

fold_args parse_fold_args(const std::vector<std::string_view>& args) {
  fold_args parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) parsed.command.emplace_back(args[i]);
      if (parsed.command.empty()) throw usage_error{"fold: no command after '--' (see jobkit fold --help)"};
      break;
    }
    if (arg == "--window") {
      parsed.options.window = std::chrono::milliseconds(positive(arg, option_value(args, i, "fold"), 3'600'000));
      parsed.window_given = true;
    } else if (arg == "--ranks") {
      parsed.ranks = positive(arg, option_value(args, i, "fold"), fold::most_tasks);
    } else if (arg == "--held-limit") {
      parsed.options.held_limit = std::size_t(positive(arg, option_value(args, i, "fold"), 1 << 20)) << 20;
    } else if (arg == "--numbers") {
      parsed.options.numbers = true;
    } else {
      throw usage_error{"fold: unknown argument '" + std::string(arg) + "' (see jobkit fold --help)"};
    }
  }
  return parsed;
}

/// The step's number of ranks: --ranks, else srun's options, else SLURM_NTASKS; 0: unknown. And
/// srun's, when its options give it exactly (the width of its labels).
struct step_size {
  int ranks = 0;
  int srun_tasks = 0;
};

step_size step_ranks(const fold_args& parsed, bool runs_srun) {
  step_size size;
  if (runs_srun) {
    const std::vector<std::string_view> srun_args(parsed.command.begin() + 1, parsed.command.end());
    if (const auto tasks = fold::srun_task_count(srun_args)) {
      size.ranks = tasks->count;
      if (tasks->exact) size.srun_tasks = tasks->count;
    }
  }
  if (parsed.ranks) size.ranks = *parsed.ranks;
  if (size.ranks > 0) return size;
  const auto value = detail::process_environment().get("SLURM_NTASKS");
  if (!value) return size;
  auto rest = std::string_view(*value);
  const auto n = detail::take_decimal(rest);
  if (!n || !rest.empty() || *n == 0 || *n > fold::most_tasks) {
    throw usage_error{"fold: SLURM_NTASKS='" + *value + "' is not a number of tasks from 1 to " +
                      std::to_string(fold::most_tasks) + " (give --ranks N)"};
  }
  size.ranks = *n;
  return size;
}

fold::options stream_options(const fold_args& parsed, step_size size) {
  auto options = parsed.options;
  options.ranks = size.ranks;
  options.srun_tasks = size.srun_tasks;
  return options;
}

int run_srun(const fold_args& parsed) {
  auto command = parsed.command;
  const auto slash = command.front().rfind('/');
  const bool runs_srun = command.front().substr(slash == std::string::npos ? 0 : slash + 1) == "srun";
  const auto size = step_ranks(parsed, runs_srun);
  if (runs_srun) command.insert(command.begin() + 1, "--label");

  detail::signal_forwarder forwarding(forwarded_signals, srun_lacks_it);
  ::signal(SIGPIPE, SIG_IGN);
  detail::child_process child(command, {.capture_output = true});
  if (!child.started()) throw usage_error{"fold: cannot run '" + command.front() + "': " + child.start_error()};

  std::vector<fold_stream> streams;
  streams.push_back({child.out_fd(), STDOUT_FILENO, fold::folder(stream_options(parsed, size))});
  streams.push_back({child.err_fd(), STDERR_FILENO, fold::folder(stream_options(parsed, size))});
  command_run run{child, forwarding, std::nullopt, true};
  pump(streams, &run);
  return *run.status;
}

}  // namespace

int run_fold(const std::vector<std::string_view>& args) {
  for (const auto arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      std::fputs(fold_usage.data(), stdout);
      return 0;
    }
  }
  const auto parsed = parse_fold_args(args);
  if (!parsed.command.empty()) return run_srun(parsed);
  // A filter: one stream (srun's stdout, or its stdout and stderr merged). A file written before
  // (`jobkit fold < train.out`) is read far faster than its ranks wrote it: there the window of a
  // live step means nothing, and every block waits for the end unless --window says otherwise.
  ::signal(SIGPIPE, SIG_IGN);
  auto options = stream_options(parsed, step_ranks(parsed, false));
  struct stat input {};
  if (!parsed.window_given && ::fstat(STDIN_FILENO, &input) == 0 && S_ISREG(input.st_mode)) {
    options.window = std::chrono::hours(24);
  }
  std::vector<fold_stream> streams;
  streams.push_back({STDIN_FILENO, STDOUT_FILENO, fold::folder(options)});
  pump(streams, nullptr);
  return 0;
}

}  // namespace jobkit::cli
