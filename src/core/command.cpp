#include "core/command.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "core/child_process.hpp"
#include "core/posix_io.hpp"

namespace jobkit::detail {

command_result run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
                           const std::vector<std::string>* environment) {
  command_result result;
  if (argv.empty()) return result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  child_process child(argv, {.environment = environment, .null_stdin = true, .capture_output = true});
  if (!child.started()) {
    result.err = child.start_error();
    return result;
  }
  // Both outputs until they close or the deadline passes; then the child's end, bounded by the
  // same deadline whether or not it closed them (a child may close both and go on).
  const int fds_of[2] = {child.out_fd(), child.err_fd()};
  bool open[2] = {true, true};
  char buffer[65536];
  while (open[0] || open[1]) {
    const int left = remaining_ms(deadline);
    if (left <= 0) break;
    pollfd fds[2] = {{open[0] ? fds_of[0] : -1, POLLIN, 0}, {open[1] ? fds_of[1] : -1, POLLIN, 0}};
    if (::poll(fds, 2, left) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds_of[i], buffer, sizeof buffer);
      auto& text = i == 0 ? result.out : result.err;
      if (n > 0 && text.size() < (std::size_t{16} << 20)) text.append(buffer, static_cast<std::size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR)) open[i] = false;
    }
  }
  result.status = child.wait_until(deadline);
  return result;
}

std::string first_line(std::string_view text) {
  const auto line = text.substr(0, text.find('\n'));
  return line.empty() ? std::string("(no message)") : std::string(line);
}

}  // namespace jobkit::detail
