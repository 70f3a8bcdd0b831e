#include "core/command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace jobkit::detail {

command_result run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
                           const std::vector<std::string>* environment) {
  command_result result;
  if (argv.empty()) return result;
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return result;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // The child starts with no signal blocked and the usual ones at their defaults, whatever the
  // calling thread blocks or the process ignores (Python ignores SIGPIPE).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&defaults, signal);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> variables;
  if (environment != nullptr) {
    for (const auto& v : *environment) variables.push_back(const_cast<char*>(v.c_str()));
    variables.push_back(nullptr);
  }
  pid_t child = 0;
  const int spawned = ::posix_spawnp(&child, args[0], &actions, &attributes, args.data(),
                                     environment != nullptr ? variables.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(out[1]);
  ::close(err[1]);
  if (spawned != 0) {
    result.err = std::strerror(spawned);
    ::close(out[0]);
    ::close(err[0]);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool out_open = true;
  bool err_open = true;
  bool killed = false;
  char buffer[65536];
  while (out_open || err_open) {
    pollfd fds[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(child, killed ? SIGKILL : SIGTERM);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(i == 0 ? out[0] : err[0], buffer, sizeof buffer);
      auto& text = i == 0 ? result.out : result.err;
      if (n > 0 && text.size() < (std::size_t{16} << 20)) text.append(buffer, static_cast<std::size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR)) (i == 0 ? out_open : err_open) = false;
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  for (int waited = 0; ::waitpid(child, &status, killed ? WNOHANG : 0) == 0; ++waited) {
    // SIGTERM first (srun ends its step), SIGKILL a second later.
    if (waited == 20) ::kill(child, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  result.status = killed ? 124 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string first_line(std::string_view text) {
  const auto line = text.substr(0, text.find('\n'));
  return line.empty() ? std::string("(no message)") : std::string(line);
}

}  // namespace jobkit::detail
