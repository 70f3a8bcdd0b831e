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

/// One stream being folded: where it comes from, its engine, where it goes.
struct stream {
  int from;
  int to;
  fold::folder folder;
  bool open = true;
  bool writable = true;  // false once its reader went away: the step goes on, its output is dropped

  void flush() {
    auto& text = folder.output();
    if (writable && !text.empty() && detail::write_file_all(to, text.data(), text.size()) != 0) writable = false;
    text.clear();
  }
};

// The signals srun gets from this process (the terminal's and Slurm's stop signals).
constexpr int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/// A signal srun gets by itself is not sent again: a terminal's (the kernel sends it to the whole
/// foreground process group, srun included) and a slurmstepd's (Slurm signals every process of the
/// batch step).
bool srun_lacks_it(const detail::forwarded_signal& record) {
  if (record.code == SI_KERNEL) return false;
  if (record.code != SI_USER && record.code != SI_QUEUE) return true;
  std::ifstream comm("/proc/" + std::to_string(record.sender) + "/comm");
  std::string name;
  return !(std::getline(comm, name) && name == "slurmstepd");
}

/// The command fold runs (srun) and how it ended, once reaped.
struct command_run {
  detail::child_process& child;
  detail::signal_forwarder& forwarding;
  std::optional<int> status;  // child_process::try_reap's, once reaped

  void reap() {
    if (!status) status = child.try_reap();
  }
};

/// Ends fold by signal `number` (one that the child can no longer be given: it has exited, while
/// its streams stay open in a process it left behind) after writing what is held.
[[noreturn]] void end_by(int number, std::vector<stream>& streams) {
  const auto now = fold::clock::now();
  for (auto& s : streams) {
    if (s.open) s.folder.finish(now);
    s.flush();
  }
  ::signal(number, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, number);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(number);
  std::_Exit(128 + number);  // not reached: the default action of every forwarded signal ends the process
}

/// Reads the streams until each ends, folding, and until the command (if any) has exited and been
/// reaped. A signal goes to the command while it runs, its streams closed or not; once it has
/// exited, a signal ends fold itself, as it would without its handler.
void pump(std::vector<stream>& streams, command_run* run) {
  std::vector<char> buffer(1 << 16);
  while (true) {
    std::vector<pollfd> fds;
    for (const auto& s : streams) fds.push_back({s.open ? s.from : -1, POLLIN, 0});
    if (run != nullptr) {
      fds.push_back({run->status ? -1 : run->child.end_fd(), POLLIN, 0});
      fds.push_back({run->forwarding.fd(), POLLIN, 0});
    }
    bool any_open = false;
    std::optional<fold::clock::time_point> next;
    for (const auto& s : streams) {
      any_open = any_open || s.open;
      const auto due = s.folder.next_deadline();
      if (due && (!next || *due < *next)) next = due;
    }
    if (!any_open && (run == nullptr || run->status)) return;
    int wait_ms = next ? detail::remaining_ms(*next) : -1;
    // Without a pidfd (kernels before 5.3) the command's end is looked for every 100 ms.
    if (run != nullptr && !run->status && run->child.end_fd() < 0 && (wait_ms < 0 || wait_ms > 100)) wait_ms = 100;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      throw error(errc::io, std::string("fold: poll: ") + std::strerror(errno));
    }
    const auto now = fold::clock::now();
    if (run != nullptr) {
      run->reap();  // first: a signal that comes after the command's end is fold's own
      if (run->status) {
        if (const auto record = run->forwarding.take()) end_by(record->number, streams);
      } else {
        run->forwarding.deliver(run->child);
      }
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      auto& s = streams[i];
      if (s.open && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = ::read(s.from, buffer.data(), buffer.size());
        if (n > 0) {
          s.folder.add(std::string_view(buffer.data(), static_cast<std::size_t>(n)), now);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          s.open = false;
          s.folder.finish(now);
        }
      } else if (s.open) {
        s.folder.tick(now);
      }
      s.flush();
    }
  }
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

  detail::signal_forwarder forwarding(forwarded, srun_lacks_it);
  ::signal(SIGPIPE, SIG_IGN);
  detail::child_process child(command, {.capture_output = true});
  if (!child.started()) throw usage_error{"fold: cannot run '" + command.front() + "': " + child.start_error()};

  std::vector<stream> streams;
  streams.push_back({child.out_fd(), STDOUT_FILENO, fold::folder(stream_options(parsed, size))});
  streams.push_back({child.err_fd(), STDERR_FILENO, fold::folder(stream_options(parsed, size))});
  command_run run{child, forwarding, std::nullopt};
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
  std::vector<stream> streams;
  streams.push_back({STDIN_FILENO, STDOUT_FILENO, fold::folder(options)});
  pump(streams, nullptr);
  return 0;
}

}  // namespace jobkit::cli
