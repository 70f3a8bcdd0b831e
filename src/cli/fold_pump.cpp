// The loop that moves a step's output through the fold engine (fold_pump.hpp).
#include "fold_pump.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

namespace jobkit::cli {

void fold_stream::flush() {
  auto& text = folder.output();
  if (writable && !text.empty() && detail::write_file_all(to, text.data(), text.size()) != 0) writable = false;
  text.clear();
}

bool srun_lacks_it(const detail::forwarded_signal& record) {
  if (record.code == SI_KERNEL) return false;
  if (record.code != SI_USER && record.code != SI_QUEUE) return true;
  std::ifstream comm("/proc/" + std::to_string(record.sender) + "/comm");
  std::string name;
  return !(std::getline(comm, name) && name == "slurmstepd");
}

/// Ends fold by signal `number` (one that the child can no longer be given: it has exited, while
/// its streams stay open in a process it left behind) after writing what is held.
namespace {

[[noreturn]] void end_by(int number, std::vector<fold_stream>& streams) {
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

}  // namespace

void pump(std::vector<fold_stream>& streams, command_run* run, const pump_hooks* hooks) {
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
    if (hooks != nullptr && hooks->tick) {
      const auto most = static_cast<int>(hooks->every.count());
      if (wait_ms < 0 || wait_ms > most) wait_ms = most;
    }
    // Without a pidfd (kernels before 5.3) the command's end is looked for every 100 ms.
    if (run != nullptr && !run->status && run->child.end_fd() < 0 && (wait_ms < 0 || wait_ms > 100)) wait_ms = 100;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      throw error(errc::io, std::string("fold: poll: ") + std::strerror(errno));
    }
    const auto now = fold::clock::now();
    if (run != nullptr) {
      run->reap();  // first: a signal that comes after the command's end is fold's own
      if (run->status) {
        if (run->end_on_late_signal) {
          if (const auto record = run->forwarding.take()) end_by(record->number, streams);
        }
      } else {
        run->forwarding.deliver(run->child);
      }
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      auto& s = streams[i];
      if (s.open && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        const ssize_t n = ::read(s.from, buffer.data(), buffer.size());
        if (n > 0) {
          if (hooks != nullptr && hooks->read)
            hooks->read(i, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
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
    if (hooks != nullptr && hooks->tick) hooks->tick();
  }
}

}  // namespace jobkit::cli
