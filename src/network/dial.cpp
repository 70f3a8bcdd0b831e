#include "network/dial.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "core/posix_io.hpp"

namespace jobkit::detail {

dial begin_dial(const std::string& address, int port, std::chrono::milliseconds silence_limit) {
  dial d;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const auto service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    d.error = EINVAL;
    d.why = gai_strerror(rc);
    return d;
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    d.error = errno;
    d.why = errno_text(d.error);
    ::freeaddrinfo(found);
    return d;
  }
  set_link_options(fd, silence_limit);  // non-blocking from here on
  const int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  const int connect_errno = errno;
  ::freeaddrinfo(found);
  if (rc == 0) {
    d.fd = fd;
    d.connected = true;
  } else if (connect_errno == EINPROGRESS) {
    d.fd = fd;
  } else {
    ::close(fd);
    d.error = connect_errno;
    d.why = errno_text(connect_errno);
  }
  return d;
}

int dial_outcome(int fd) {
  int e = 0;
  socklen_t length = sizeof e;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &length) != 0) return errno;
  return e;
}

}  // namespace jobkit::detail
