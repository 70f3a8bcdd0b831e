#include "core/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

extern char** environ;

namespace jobkit::detail {
namespace {

using clock = std::chrono::steady_clock;

/// What a child starts with at the default disposition, whatever this process does with them.
constexpr int default_signals[] = {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

int open_pidfd(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

int status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 127;
}

/// execvp's search, done before fork: the child then calls only execve (async-signal-safe).
std::string program_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) return {};
    dirs.remove_prefix(colon + 1);
  }
}

/// The descriptors the child gets: stdin (/dev/null or this process's), stdout, stderr.
struct child_fds {
  int null_in = -1;
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
};

void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The forwarder's pipe: the handler's only state (one forwarder at a time).
int forward_pipe[2] = {-1, -1};
std::atomic<bool> forwarder_alive{false};

extern "C" void record_forwarded_signal(int number, siginfo_t* info, void*) {
  const int saved = errno;
  const forwarded_signal record{number, info != nullptr ? info->si_code : 0, info != nullptr ? info->si_pid : 0};
  [[maybe_unused]] const auto written = ::write(forward_pipe[1], &record, sizeof record);
  errno = saved;
}

}  // namespace

child_process::child_process(const std::vector<std::string>& argv, const child_options& options) {
  if (argv.empty()) {
    start_error_ = "no command";
    return;
  }
  child_fds fds;
  const auto fail = [&](std::string why) {
    start_error_ = std::move(why);
    close_fd(fds.null_in);
    for (int* fd : {&fds.out[0], &fds.out[1], &fds.err[0], &fds.err[1]}) close_fd(*fd);
  };
  if (options.null_stdin && (fds.null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
    fail("/dev/null: " + errno_text(errno));
    return;
  }
  if (options.capture_output && (::pipe2(fds.out, O_CLOEXEC) != 0 || ::pipe2(fds.err, O_CLOEXEC) != 0)) {
    fail("pipe: " + errno_text(errno));
    return;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> variables;
  if (options.environment != nullptr) {
    for (const auto& v : *options.environment) variables.push_back(const_cast<char*>(v.c_str()));
    variables.push_back(nullptr);
  }
  char** const child_environment = options.environment != nullptr ? variables.data() : environ;

  if (!options.die_with_parent) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (fds.null_in >= 0) posix_spawn_file_actions_adddup2(&actions, fds.null_in, STDIN_FILENO);
    if (options.capture_output) {
      posix_spawn_file_actions_adddup2(&actions, fds.out[1], STDOUT_FILENO);
      posix_spawn_file_actions_adddup2(&actions, fds.err[1], STDERR_FILENO);
    }
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none;
    sigemptyset(&none);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int signal : default_signals) sigaddset(&defaults, signal);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t child = 0;
    const int spawned = ::posix_spawnp(&child, args[0], &actions, &attributes, args.data(), child_environment);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (spawned != 0) {
      fail(errno_text(spawned));
      return;
    }
    pid_ = child;
  } else {
    const std::string program = program_path(argv[0]);
    if (program.empty()) {
      fail(errno_text(ENOENT));
      return;
    }
    int report[2];  // the child's execve errno; closed by a successful execve
    if (::pipe2(report, O_CLOEXEC) != 0) {
      fail("pipe: " + errno_text(errno));
      return;
    }
    // Every signal blocked across fork: no handler of this process runs in the child, which sets
    // the defaults before it unblocks them.
    sigset_t all;
    sigfillset(&all);
    sigset_t previous;
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
      // Only async-signal-safe calls from here: the parent may have other threads.
      struct sigaction fallback {};
      fallback.sa_handler = SIG_DFL;
      for (int signal : default_signals) ::sigaction(signal, &fallback, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
      int error_number = 0;
      // The parent may have died before the death signal was armed.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
      if (fds.null_in >= 0 && ::dup2(fds.null_in, STDIN_FILENO) < 0) error_number = errno;
      if (error_number == 0 && options.capture_output &&
          (::dup2(fds.out[1], STDOUT_FILENO) < 0 || ::dup2(fds.err[1], STDERR_FILENO) < 0)) {
        error_number = errno;
      }
      if (error_number == 0) {
        ::execve(program.c_str(), args.data(), child_environment);
        error_number = errno;
      }
      [[maybe_unused]] const auto written = ::write(report[1], &error_number, sizeof error_number);
      ::_exit(127);
    }
    const int fork_error = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    ::close(report[1]);
    if (child < 0) {
      ::close(report[0]);
      fail("fork: " + errno_text(fork_error));
      return;
    }
    pid_ = child;
    int error_number = 0;
    ssize_t got = 0;
    while ((got = ::read(report[0], &error_number, sizeof error_number)) < 0 && errno == EINTR) {
    }
    ::close(report[0]);
    if (got == static_cast<ssize_t>(sizeof error_number)) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      fail(errno_text(error_number));
      return;
    }
  }
  pidfd_ = open_pidfd(pid_);
  close_fd(fds.null_in);
  close_fd(fds.out[1]);
  close_fd(fds.err[1]);
  out_fd_ = fds.out[0];
  err_fd_ = fds.err[0];
}

child_process child_process::adopt(pid_t pid) noexcept {
  child_process child;
  child.pid_ = pid;
  child.pidfd_ = open_pidfd(pid);
  return child;
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      out_fd_(std::exchange(other.out_fd_, -1)),
      err_fd_(std::exchange(other.err_fd_, -1)),
      end_signal_(other.end_signal_),
      exit_status_(other.exit_status_),
      killed_(other.killed_),
      start_error_(std::move(other.start_error_)) {}

child_process::~child_process() {
  close_outputs();
  if (pid_ > 0) {
    signal(SIGKILL);
    wait_until(clock::now(), std::chrono::milliseconds(0));
  }
  if (pidfd_ >= 0) ::close(pidfd_);
}

void child_process::close_outputs() noexcept {
  close_fd(out_fd_);
  close_fd(err_fd_);
}

void child_process::signal(int number) noexcept {
  if (pid_ <= 0) return;
#ifdef SYS_pidfd_send_signal
  if (pidfd_ >= 0) {
    ::syscall(SYS_pidfd_send_signal, pidfd_, number, nullptr, 0);
    return;
  }
#endif
  ::kill(pid_, number);
}

std::optional<int> child_process::try_reap() noexcept {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  pid_t got = 0;
  while ((got = ::waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (got == 0) return std::nullopt;
  // ECHILD: a SIGCHLD handler of the caller's reaped it (or SIGCHLD is ignored); the status is lost.
  const int result = got == pid_ ? status_of(status) : 127;
  if (got == pid_ && WIFSIGNALED(status)) end_signal_ = WTERMSIG(status);
  if (got == pid_ && WIFEXITED(status)) exit_status_ = WEXITSTATUS(status);
  pid_ = -1;
  return result;
}

void child_process::pause(std::chrono::milliseconds most, signal_forwarder* forwarding) noexcept {
  pollfd fds[2] = {{pidfd_, POLLIN, 0}, {forwarding != nullptr ? forwarding->fd() : -1, POLLIN, 0}};
  // Without a pidfd (kernels before 5.3) the child's end is looked for every 20 ms.
  const auto wait = pidfd_ >= 0 ? most : std::min(most, std::chrono::milliseconds(20));
  ::poll(fds, 2, static_cast<int>(std::max<long long>(0, wait.count())));
  if (forwarding != nullptr) forwarding->deliver(*this);
}

int child_process::wait(signal_forwarder* forwarding) {
  while (true) {
    if (forwarding != nullptr) forwarding->deliver(*this);
    if (const auto status = try_reap()) return *status;
    if (pid_ <= 0) return 127;
    pause(std::chrono::milliseconds(1000), forwarding);
  }
}

int child_process::wait_until(clock::time_point deadline, std::chrono::milliseconds grace, int first) {
  if (pid_ <= 0) return 127;
  enum class stage { running, terminated, killed } now_at = stage::running;
  auto until = deadline;
  while (true) {
    if (const auto status = try_reap()) return now_at == stage::running ? *status : 124;
    if (clock::now() >= until) {
      switch (now_at) {
        case stage::running:
          signal(first);  // SIGTERM: srun ends its step
          killed_ = true;
          now_at = first == SIGKILL ? stage::killed : stage::terminated;
          until = clock::now() + (first == SIGKILL ? std::chrono::milliseconds(1000) : grace);
          continue;
        case stage::terminated:
          signal(SIGKILL);
          now_at = stage::killed;
          until = clock::now() + std::chrono::seconds(1);
          continue;
        case stage::killed: abandon(); return 124;
      }
    }
    pause(std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now()) + std::chrono::milliseconds(1),
          nullptr);
  }
}

void child_process::abandon() noexcept {
  const pid_t pid = std::exchange(pid_, -1);
  try {
    std::thread([pid] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }).detach();
  } catch (const std::system_error&) {
    // No thread: the child stays a zombie until this process ends. Never a wait here.
  }
}

signal_forwarder::signal_forwarder(std::span<const int> signals, filter keep)
    : signals_(signals.begin(), signals.end()), keep_(keep), previous_(signals.size()) {
  if (forwarder_alive.exchange(true)) {
    throw error(errc::internal, "a second signal_forwarder while one is alive");
  }
  if (::pipe2(forward_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int code = errno;
    forwarder_alive.store(false);
    throw error(errc::io, "signal forwarding: pipe: " + errno_text(code), code);
  }
  struct sigaction action {};
  action.sa_sigaction = record_forwarded_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &action, &previous_[i]);
}

signal_forwarder::~signal_forwarder() {
  for (std::size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
  close_fd(forward_pipe[0]);
  close_fd(forward_pipe[1]);
  forwarder_alive.store(false);
}

int signal_forwarder::fd() const noexcept { return forward_pipe[0]; }

void signal_forwarder::deliver(child_process& child) noexcept {
  while (const auto record = take()) {
    if (keep_ == nullptr || keep_(*record)) child.signal(record->number);
  }
}

std::optional<forwarded_signal> signal_forwarder::take() noexcept {
  forwarded_signal record;
  if (::read(forward_pipe[0], &record, sizeof record) != static_cast<ssize_t>(sizeof record)) return std::nullopt;
  return record;
}

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& changes) {
  std::vector<std::string> entries;
  for (char** variable = environ; *variable; ++variable) {
    const std::string_view entry = *variable;
    const auto name = entry.substr(0, entry.find('='));
    const bool changed = std::any_of(changes.begin(), changes.end(), [&](const auto& c) { return c.first == name; });
    if (!changed) entries.emplace_back(entry);
  }
  for (const auto& [name, value] : changes) {
    if (value) entries.push_back(name + "=" + *value);
  }
  return entries;
}

}  // namespace jobkit::detail
