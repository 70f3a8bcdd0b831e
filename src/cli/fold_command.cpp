// jobkit fold: a step's output with each line or block that many ranks said written once, under the
// ranks that said it. The engine is src/fold/folder.hpp; this file runs srun (or reads a pipe) and
// moves bytes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
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
#include "core/environment.hpp"
#include "core/parse.hpp"
#include "core/posix_io.hpp"
#include "fold/folder.hpp"
#include "fold/labels.hpp"
#include "fold/srun_options.hpp"

extern char** environ;

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

// Signals for srun, and SIGCHLD, arrive through a pipe: the handler writes what pump needs to decide.
constexpr std::array forwarded = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
int signal_pipe[2] = {-1, -1};

struct signal_record {
  int number;
  int code;
  pid_t sender;
};

void on_signal(int number, siginfo_t* info, void*) {
  const int saved = errno;
  const signal_record record{number, info->si_code, info->si_pid};
  [[maybe_unused]] const auto n = ::write(signal_pipe[1], &record, sizeof record);
  errno = saved;
}

/// A signal srun gets by itself is not sent again: a terminal's (the kernel sends it to the whole
/// foreground process group, srun included) and a slurmstepd's (Slurm signals every process of the
/// batch step).
bool srun_has_it(const signal_record& record) {
  if (record.code == SI_KERNEL) return true;
  if (record.code != SI_USER && record.code != SI_QUEUE) return false;
  std::ifstream comm("/proc/" + std::to_string(record.sender) + "/comm");
  std::string name;
  return std::getline(comm, name) && name == "slurmstepd";
}

/// The command fold runs (srun), until it has exited and been reaped.
struct child_process {
  pid_t pid;
  bool running = true;
  int status = 0;  // waitpid's, once it has exited

  /// Reaps it if it has exited (SIGCHLD came, or its record was lost to a full pipe: pump asks at
  /// every wake-up through the pipe).
  void reap() {
    int got = 0;
    if (running && ::waitpid(pid, &got, WNOHANG) == pid) {
      running = false;
      status = got;
    }
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

/// Reads the streams until each ends, folding, and until the child (if any) has exited. A signal
/// goes to the child while it runs, its streams closed or not; once it has exited, a signal ends
/// fold itself, as it would without its handler.
void pump(std::vector<stream>& streams, child_process* child) {
  std::vector<char> buffer(1 << 16);
  while (true) {
    std::vector<pollfd> fds;
    for (const auto& s : streams) fds.push_back({s.open ? s.from : -1, POLLIN, 0});
    if (child != nullptr) fds.push_back({signal_pipe[0], POLLIN, 0});
    bool any_open = false;
    std::optional<fold::clock::time_point> next;
    for (const auto& s : streams) {
      any_open = any_open || s.open;
      const auto due = s.folder.next_deadline();
      if (due && (!next || *due < *next)) next = due;
    }
    if (!any_open && (child == nullptr || !child->running)) return;
    const int wait_ms = next ? detail::remaining_ms(*next) : -1;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      throw error(errc::io, std::string("fold: poll: ") + std::strerror(errno));
    }
    const auto now = fold::clock::now();
    if (child != nullptr && (fds.back().revents & POLLIN) != 0) {
      // Reaped first: a signal that comes after the child's exit is fold's own.
      child->reap();
      signal_record record{};
      while (::read(signal_pipe[0], &record, sizeof record) == sizeof record) {
        if (record.number == SIGCHLD) continue;
        if (!child->running) end_by(record.number, streams);
        if (!srun_has_it(record)) ::kill(child->pid, record.number);
      }
      child->reap();
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

  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(signal_pipe, O_CLOEXEC) != 0) {
    throw error(errc::io, std::string("fold: pipe: ") + std::strerror(errno));
  }
  ::fcntl(signal_pipe[0], F_SETFL, O_NONBLOCK);
  ::fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction action {};
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int number : forwarded) ::sigaction(number, &action, nullptr);
  action.sa_flags |= SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  for (int number : forwarded) sigaddset(&defaults, number);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (auto& part : command) argv.push_back(part.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(out[1]);
  ::close(err[1]);
  if (spawned != 0) {
    throw usage_error{"fold: cannot run '" + command.front() + "': " + std::strerror(spawned)};
  }

  std::vector<stream> streams;
  streams.push_back({out[0], STDOUT_FILENO, fold::folder(stream_options(parsed, size))});
  streams.push_back({err[0], STDERR_FILENO, fold::folder(stream_options(parsed, size))});
  child_process child{pid};
  pump(streams, &child);
  return WIFEXITED(child.status) ? WEXITSTATUS(child.status) : 128 + WTERMSIG(child.status);
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
