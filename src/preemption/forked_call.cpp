#include "preemption/forked_call.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "core/child_process.hpp"
#include "core/posix_io.hpp"

namespace jobkit::detail {
namespace {

using clock = std::chrono::steady_clock;

/// Registered last in the child, so it runs first when anything there calls exit(): the parent's
/// atexit handlers and static destructors (a PMIx session's finalize, say) never run in the child,
/// and its stdio buffers, copies of the parent's, are never flushed twice.
extern "C" void end_child_at_once(int status, void*) { ::_exit(status); }

struct child_job {
  forked_work work;
  const void* context;
  char* report;
};

extern "C" void* run_child_job(void* job) {
  const auto& j = *static_cast<const child_job*>(job);
  j.work(j.context, j.report);
  return nullptr;
}

/// A descriptor at 3 or above (0, 1 and 2 are about to be replaced in the child).
int above_stdio(int fd) {
  if (fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD, 3);
  return moved >= 0 ? moved : fd;
}

[[noreturn]] void child_main(forked_work work, const void* context, char* report, std::size_t report_size,
                             int report_fd, int output_fd, pid_t parent) {
  // Ended with the caller's thread (a killed caller leaves no libslurm retrying for a minute).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  report_fd = above_stdio(report_fd);
  output_fd = above_stdio(output_fd);
  if (const int null_fd = ::open("/dev/null", O_RDONLY); null_fd >= 0) {
    ::dup2(null_fd, 0);
    if (null_fd > 2) ::close(null_fd);
  }
  ::dup2(output_fd, 1);
  ::dup2(output_fd, 2);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(SIGCHLD, &default_action, nullptr);
  ::sigaction(SIGPIPE, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const struct rlimit no_core {};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::on_exit(end_child_at_once, nullptr);
  // In a thread of its own: exit() runs the calling thread's thread_local destructors before any
  // handler, and this thread has none of the caller's.
  child_job job{work, context, report};
  pthread_t thread;
  if (::pthread_create(&thread, nullptr, run_child_job, &job) == 0) {
    ::pthread_join(thread, nullptr);
  } else {
    work(context, report);
  }
  ::_exit(write_file_all(report_fd, report, report_size) == 0 ? 0 : 126);
}

/// Reads what is there without waiting; false at end of stream or on an error.
bool drain(int fd, std::string& into) {
  std::byte buffer[4096];
  const int code = read_each(fd, buffer, [&](std::span<const std::byte> piece) {
    into.append(reinterpret_cast<const char*>(piece.data()), piece.size());
    if (into.size() > 8 * output_tail_bytes) into.erase(0, into.size() - output_tail_bytes);
  });
  return code == EAGAIN || code == EWOULDBLOCK;
}

std::string printable(std::string text) {
  if (text.size() > output_tail_bytes) text.erase(0, text.size() - output_tail_bytes);
  for (char& c : text) {
    if ((c < 0x20 || c > 0x7e) && c != '\n') c = '?';
  }
  return text;
}

}  // namespace

forked_result run_forked(forked_work work, const void* context, std::size_t report_size,
                         std::chrono::milliseconds deadline) {
  forked_result result;
  const auto until = clock::now() + deadline;
  int report_pipe[2];
  int output_pipe[2];
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) {
    result.start_error = fmt::format("pipe: {}", errno_text(errno));
    return result;
  }
  descriptor report_in(report_pipe[0]), report_out(report_pipe[1]);
  if (::pipe2(output_pipe, O_CLOEXEC) != 0) {
    result.start_error = fmt::format("pipe: {}", errno_text(errno));
    return result;
  }
  descriptor output_in(output_pipe[0]), output_out(output_pipe[1]);
  std::string report(report_size, '\0');  // before fork: the child allocates nothing for it
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.start_error = fmt::format("fork: {}", errno_text(errno));
    return result;
  }
  if (pid == 0) {
    child_main(work, context, report.data(), report_size, report_pipe[1], output_pipe[1], parent);
  }
  auto child = child_process::adopt(pid);
  report_out.close();
  output_out.close();
  ::fcntl(report_in.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(output_in.get(), F_SETFL, O_NONBLOCK);

  std::string received;
  bool report_open = true, output_open = true, exited = false;
  while (report_open && !exited && received.size() < report_size) {
    const int left = remaining_ms(until);
    if (left == 0) break;
    // A closed output pipe is left out (-1): it would report POLLHUP at every poll.
    const int ended = child.end_fd();
    pollfd watched[3] = {
        {report_in.get(), POLLIN, 0}, {output_open ? output_in.get() : -1, POLLIN, 0}, {ended, POLLIN, 0}};
    // Without a pidfd the child's end is seen by polling waitpid every 50 ms.
    const int ready = ::poll(watched, ended >= 0 ? 3 : 2, ended >= 0 ? left : std::min(left, 50));
    if (ready < 0 && errno != EINTR) break;
    if (watched[0].revents != 0) report_open = drain(report_in.get(), received);
    if (output_open && watched[1].revents != 0) output_open = drain(output_in.get(), result.output);
    if (ended >= 0 ? watched[2].revents != 0 : child.try_reap().has_value()) exited = true;
  }
  // Whatever the child wrote before it ended (or before now) is in the pipes.
  drain(report_in.get(), received);
  drain(output_in.get(), result.output);
  result.output = printable(std::move(result.output));
  if (received.size() >= report_size) {
    result.reported = true;
    result.report = received.substr(0, report_size);
  }
  // Reaped already when waitpid saw its end. Else it is ending (it reported, or closed its
  // pipes, or a pidfd saw its end) or the deadline passed: reaped, killed (SIGKILL) at the
  // deadline, left to a thread when SIGKILL does not end it within a second.
  if (!child.reaped()) child.wait_until(until, std::chrono::milliseconds(0), SIGKILL);
  if (child.killed() && !result.reported) result.timed_out = true;
  result.exit_status = child.exit_status();
  result.signal = child.end_signal();
  return result;
}

}  // namespace jobkit::detail
