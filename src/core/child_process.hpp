#pragma once

// The one way jobkit runs another program: spawned with clean signal state, its stop signals
// forwarded from this process, and always reaped, with a bound when asked. Used by run_bounded
// (core/command), the CLI's step helpers (on-main, once-per-node, ...) and `jobkit fold`.

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace jobkit::detail {

struct child_options {
  /// The child's environment ("NAME=value" entries); null: this process's.
  const std::vector<std::string>* environment = nullptr;
  /// stdin from /dev/null instead of this process's.
  bool null_stdin = false;
  /// stdout and stderr into two pipes that this process reads (out_fd(), err_fd()).
  bool capture_output = false;
  /// SIGKILL to the child when the thread that spawned it ends (PR_SET_PDEATHSIG), so that it never
  /// outlives a CLI process that died. Spawned with fork() + execve(), where posix_spawn() has no
  /// such attribute; without it posix_spawn(), which does not copy the caller's memory (run_bounded
  /// runs inside training processes: `jobkit where`'s watch).
  bool die_with_parent = false;
};

/// This process's environment ("NAME=value" entries, for child_options::environment) with each
/// of `changes` applied: NAME set to its value, or removed when it has none. This process's own
/// stays as it is.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& changes);

/// A child program. It starts with no signal blocked and SIGPIPE, SIGCHLD and the stop signals
/// (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT) at their defaults, whatever this
/// process ignores or handles (Python ignores SIGPIPE). Move-only; a child not yet reaped when its
/// object ends is killed (SIGKILL) and reaped.
class child_process {
 public:
  /// Starts argv[0] (searched on PATH when it has no '/'). Never throws for the child: when it
  /// cannot start, started() is false and start_error() says why ("No such file or directory").
  explicit child_process(const std::vector<std::string>& argv, const child_options& options = {});
  /// A child that this process made with fork() itself (preemption's forked_call, which runs a
  /// function there, not a program): owned, signalled and reaped as a spawned one.
  static child_process adopt(pid_t pid) noexcept;
  ~child_process();
  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&&) = delete;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  bool started() const noexcept { return pid_ > 0; }
  const std::string& start_error() const noexcept { return start_error_; }
  pid_t pid() const noexcept { return pid_; }
  /// The read ends of the captured outputs (-1 unless capture_output), closed with this object.
  int out_fd() const noexcept { return out_fd_; }
  int err_fd() const noexcept { return err_fd_; }

  /// Readable once the child has ended (its pidfd), for a caller's own poll(); -1 where the kernel
  /// has no pidfds (before 5.3): try_reap() then.
  int end_fd() const noexcept { return pidfd_; }
  /// Reaps the child if it has ended: its status (as wait()). Does not wait.
  std::optional<int> try_reap() noexcept;
  /// Whether it has been reaped (or left to a thread that reaps it).
  bool reaped() const noexcept { return pid_ <= 0; }

  /// Sends `number` to the child unless it has been reaped (through its pidfd where the kernel has
  /// them: never to another process that took its pid).
  void signal(int number) noexcept;

  /// Waits for the child's end and reaps it: its exit status, or 128 + N when signal N ended it.
  /// With a forwarder, the signals it records go to the child meanwhile. No bound: for a child
  /// that this process lives for (the step helpers).
  int wait(class signal_forwarder* forwarding = nullptr);

  /// Waits at most until `deadline` for the child's end, whatever it does with its outputs: past
  /// it `first` (SIGTERM: srun then ends its step), SIGKILL `grace` later (at once when `first` is
  /// SIGKILL), and 124 (as timeout(1)) once reaped. Returns within deadline + grace + 1 s: a child
  /// that SIGKILL does not end within a second (stuck in the kernel) is left to a detached thread
  /// to reap.
  int wait_until(std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds grace = std::chrono::seconds(1), int first = SIGTERM);

  /// Once reaped: the signal that ended the child, 0 when it exited (an exit status of 130 and
  /// SIGINT both read 130 from wait).
  int end_signal() const noexcept { return end_signal_; }
  /// Once reaped: its exit status; -1 when a signal ended it, or when its status was lost (a
  /// SIGCHLD handler of the caller's reaped it, or SIGCHLD is ignored).
  int exit_status() const noexcept { return exit_status_; }
  /// Whether wait_until had to signal it.
  bool killed() const noexcept { return killed_; }

 private:
  child_process() = default;
  /// Waits for readiness of the pidfd (or a short pause without one) and of the forwarder's fd.
  void pause(std::chrono::milliseconds most, signal_forwarder* forwarding) noexcept;
  void close_outputs() noexcept;
  /// Leaves a child that did not end to a detached thread that reaps it.
  void abandon() noexcept;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int end_signal_ = 0;
  int exit_status_ = -1;
  bool killed_ = false;
  std::string start_error_;
};

/// A signal the forwarder's handler recorded: its number, si_code and sender.
struct forwarded_signal {
  int number = 0;
  int code = 0;
  pid_t sender = 0;
};

/// Passes signals that this process receives on to a child, for the forwarder's lifetime, then
/// restores the previous dispositions. Its handler is async-signal-safe and keeps errno: it only
/// writes the signal's record into a pipe; the records are sent on in ordinary code (deliver(),
/// child_process::wait), where `keep` may look at the sender (fold: not what srun gets itself). A
/// signal that came before the child started waits in the pipe and is sent with the first
/// delivery. One forwarder at a time in a process: a second one throws jobkit::error (internal).
class signal_forwarder {
 public:
  using filter = bool (*)(const forwarded_signal&);
  explicit signal_forwarder(std::span<const int> signals, filter keep = nullptr);
  ~signal_forwarder();
  signal_forwarder(const signal_forwarder&) = delete;
  signal_forwarder& operator=(const signal_forwarder&) = delete;

  /// Readable while records wait (for a caller's own poll()).
  int fd() const noexcept;
  /// Sends every waiting record that `keep` keeps to the child (none once it is reaped).
  void deliver(child_process& child) noexcept;
  /// The next waiting record, taken without sending it (fold: a signal after srun's end is its
  /// own); nullopt when none waits.
  std::optional<forwarded_signal> take() noexcept;

 private:
  std::vector<int> signals_;
  filter keep_;
  std::vector<struct sigaction> previous_;
};

/// The signals a step helper's command gets from its jobkit process: Slurm's pre-emption and
/// scancel --signal / --signal=SIG@TIME, and a terminal's.
inline constexpr int stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

}  // namespace jobkit::detail
