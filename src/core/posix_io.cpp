#include "core/posix_io.hpp"

#include <fcntl.h>
#include <linux/tcp.h>  // its tcp_info has tcpi_notsent_bytes, glibc 2.36's does not
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <system_error>

#include "core/embedder.hpp"
#include "core/timeout.hpp"

namespace jobkit::detail {

std::string errno_text(int error_number) { return std::generic_category().message(error_number); }

const char* signal_abbreviation(int signal) noexcept {
#if defined(__GLIBC__) && !__GLIBC_PREREQ(2, 32)
  // Linux's standard signals on x86-64 and arm64 (signal(7)), as glibc 2.32's sigabbrev_np names them.
  static constexpr const char* names[] = {nullptr,  "HUP",  "INT",    "QUIT", "ILL",   "TRAP", "ABRT", "BUS",
                                          "FPE",    "KILL", "USR1",   "SEGV", "USR2",  "PIPE", "ALRM", "TERM",
                                          "STKFLT", "CHLD", "CONT",   "STOP", "TSTP",  "TTIN", "TTOU", "URG",
                                          "XCPU",   "XFSZ", "VTALRM", "PROF", "WINCH", "POLL", "PWR",  "SYS"};
  return signal > 0 && signal < static_cast<int>(std::size(names)) ? names[signal] : nullptr;
#else
  return ::sigabbrev_np(signal);
#endif
}

descriptor::~descriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int descriptor::close() noexcept {
  const int result = ::close(fd_);
  fd_ = -1;
  return result == 0 ? 0 : errno;
}

int remaining_ms(steady_clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - steady_clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, INT_MAX));
}

int write_file_all(int fd, const void* data, std::size_t size) noexcept {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

int read_each(int fd, std::span<std::byte> buffer, const std::function<void(std::span<const std::byte>)>& each) {
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n > 0) {
      each(buffer.first(static_cast<std::size_t>(n)));
    } else if (n == 0) {
      return 0;
    } else if (errno != EINTR) {
      return errno;
    }
  }
}

int pread_file_all(int fd, void* data, std::size_t size, off_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return 0;
}

/// Linux's TCP_ESTABLISHED (net/tcp_states.h; <linux/tcp.h> does not have it).
constexpr std::uint8_t tcp_established = 1;

std::optional<std::chrono::milliseconds> link_silence(int fd, std::chrono::milliseconds limit) {
  tcp_info info{};
  socklen_t length = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 || info.tcpi_state != tcp_established) {
    return std::nullopt;
  }
  // Owed: data in flight, or a keepalive probe of an idle link. Not a probe of a closed window
  // (data waits unsent): the peer's host answered that window, its process does not read.
  const bool owed = info.tcpi_unacked > 0 || (info.tcpi_probes > 0 && info.tcpi_notsent_bytes == 0);
  const std::chrono::milliseconds quiet{info.tcpi_last_ack_recv};
  if (!owed || quiet < limit) return std::nullopt;
  return quiet;
}

void set_link_options(int fd, std::chrono::milliseconds silence_limit) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof one);
  // Not TCP_USER_TIMEOUT: it also ends a link whose peer only stopped reading (a receive window
  // closed for that long), which is a late rank, not a lost node.
  const int probes =
      static_cast<int>(std::min<long long>(std::chrono::ceil<std::chrono::seconds>(silence_limit).count(), 127));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void wait_ready(int fd, short events, steady_clock::time_point deadline) {
  // Waits of a quarter of the limit at most (250 ms at the most), to look at the link meanwhile.
  const auto limit = lost_node_timeout();
  const auto slice = std::min<std::chrono::milliseconds>(limit / 4, std::chrono::milliseconds(250));
  while (true) {
    pollfd p{fd, events, 0};
    const int wait = std::min<long long>(remaining_ms(deadline), slice.count());
    const int ready = ::poll(&p, 1, wait);
    if (ready > 0) return;
    if (ready == 0) {
      interruption_point();
      if (steady_clock::now() >= deadline) throw socket_timeout{};
      if (const auto quiet = link_silence(fd, limit)) {
        throw socket_closed{"no answer from its host for " + std::to_string(quiet->count()) + " ms", ETIMEDOUT};
      }
      continue;
    }
    if (errno != EINTR) throw socket_closed{errno_text(errno), errno};
    interruption_point();
  }
}

void send_all(int fd, iovec* parts, int count, steady_clock::time_point deadline) {
  while (count > 0 && parts->iov_len == 0) {
    ++parts;
    --count;
  }
  while (count > 0) {
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(std::min(count, IOV_MAX));
    const ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_ready(fd, POLLOUT, deadline);
        continue;
      }
      if (errno == EINTR) continue;
      throw socket_closed{errno_text(errno), errno};
    }
    auto sent = static_cast<std::size_t>(n);
    while (count > 0 && sent >= parts->iov_len) {
      sent -= parts->iov_len;
      ++parts;
      --count;
    }
    if (count > 0) {
      parts->iov_base = static_cast<char*>(parts->iov_base) + sent;
      parts->iov_len -= sent;
    }
  }
}

void receive_all(int fd, void* data, std::size_t size, steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw socket_closed{"connection closed"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline);
    } else if (errno != EINTR) {
      throw socket_closed{errno_text(errno), errno};
    }
  }
}

std::size_t receive_some(int fd, void* data, std::size_t size) {
  while (true) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) throw socket_closed{"connection closed"};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw socket_closed{errno_text(errno), errno};
  }
}

}  // namespace jobkit::detail
