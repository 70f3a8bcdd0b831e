#include "core/posix_io.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include "core/embedder.hpp"

namespace jobkit::detail {

std::string errno_text(int error_number) { return std::generic_category().message(error_number); }

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

int write_file_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
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

void wait_ready(int fd, short events, steady_clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready > 0) return;
    if (ready == 0) throw socket_timeout{};
    if (errno != EINTR) throw socket_closed{errno_text(errno)};
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
      throw socket_closed{errno_text(errno)};
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
      throw socket_closed{errno_text(errno)};
    }
  }
}

std::size_t receive_some(int fd, void* data, std::size_t size) {
  while (true) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) throw socket_closed{"connection closed"};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) throw socket_closed{errno_text(errno)};
  }
}

}  // namespace jobkit::detail
