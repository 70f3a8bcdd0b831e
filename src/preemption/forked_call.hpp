#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace jobkit::detail {

/// What a call made in a child process gave.
struct forked_result {
  /// The child wrote its whole report (report_size bytes) before it ended.
  bool reported = false;
  std::string report;
  /// The deadline passed first: the child was killed (SIGKILL).
  bool timed_out = false;
  /// The child's exit status when it exited (exit() included, e.g. a library's fatal error); -1 otherwise.
  int exit_status = -1;
  /// The signal that ended the child (SIGKILL at the deadline included); 0 otherwise.
  int signal = 0;
  /// The last bytes (at most output_tail_bytes) the child wrote on its stdout and stderr, unprintable
  /// bytes replaced by '?'.
  std::string output;
  /// Why no child could be started (pipe or fork failed); empty when one was.
  std::string start_error;
};

inline constexpr std::size_t output_tail_bytes = 1024;

/// The work a child does: it fills `report` (report_size bytes, zeroed) and returns. It runs in a
/// child made by fork() of a possibly multi-threaded process, so it must not take a lock that
/// another thread of the parent may hold, except malloc's and the dynamic loader's (glibc resets
/// them in the child). It must not throw.
using forked_work = void (*)(const void* context, void* report) noexcept;

/// Runs `work` in a child process and waits for its report, at most until `deadline` passes; the
/// caller's process is never ended and never waits longer than the deadline (plus at most ~1 s to
/// reap a killed child).
///
/// In the child: stdin is /dev/null and stdout and stderr go to a pipe read by the parent (so a
/// library's messages, and the parent's unflushed stdio buffers, never reach the caller's
/// output); SIGCHLD's disposition is the default and no signal is blocked; no core is dumped; it
/// is killed when the calling thread ends. `work` runs on a thread of its own there, and an exit()
/// (a library's fatal error) ends the child at once with _exit(), so neither the caller's atexit
/// handlers and static destructors nor its thread's thread_local destructors run in the child.
/// After the report the child ends with _exit(0).
///
/// In the parent: reads with poll() (EINTR restarts it with the time left), kills the child
/// (through a pidfd where the kernel has them, so never another process) when the deadline
/// passes, and always reaps it: a child that does not die within a second of SIGKILL is reaped
/// by a detached thread (core/child_process, adopted: the reaping every child of jobkit's has). A caller's SIGCHLD
/// handler that reaps every child (or SIGCHLD ignored) only loses the exit status.
forked_result run_forked(forked_work work, const void* context, std::size_t report_size,
                         std::chrono::milliseconds deadline);

}  // namespace jobkit::detail
