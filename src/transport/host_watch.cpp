#include "transport/host_watch.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

namespace jobkit::detail {

namespace {

/// After a watch ended without a verdict (the peer's process accepted and dropped it).
constexpr std::chrono::seconds pause{1};

int socket_error(int fd) {
  int e = 0;
  socklen_t length = sizeof e;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &length) != 0) return errno;
  return e;
}

}  // namespace

host_watch::~host_watch() {
  for (auto& [peer, w] : watches_) close(w);
}

void host_watch::close(watch& w) noexcept {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  w.connected = false;
}

std::optional<host_watch::verdict> host_watch::check(const std::vector<int>& missing, time_point now) {
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (std::find(missing.begin(), missing.end(), it->first) == missing.end()) {
      close(it->second);
      it = watches_.erase(it);
    } else {
      ++it;
    }
  }
  if (now < start_ + grace) return std::nullopt;
  for (const int peer : missing) {
    auto& w = watches_[peer];
    if (auto v = advance(peer, w, now)) return v;
  }
  return std::nullopt;
}

std::optional<host_watch::verdict> host_watch::advance(int peer, watch& w, time_point now) {
  const endpoint* known = endpoint_of_(peer);
  if (known == nullptr) return std::nullopt;
  const auto& e = *known;
  const auto seconds = std::chrono::duration<double>(limit_).count();
  const auto silent = [&](const std::string& how) {
    return verdict{peer, fmt::format("its node {} {} (JOBKIT_LOST_NODE_TIMEOUT={} s): the node is lost or cut off",
                                     e.host, how, seconds)};
  };
  if (w.fd < 0) {
    if (const auto r = retry_at_.find(peer); r != retry_at_.end() && now < r->second) return std::nullopt;
    if (e.addresses.empty()) return std::nullopt;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const auto service = std::to_string(e.port);
    if (::getaddrinfo(e.addresses[w.address % e.addresses.size()].c_str(), service.c_str(), &hints, &found) != 0)
      return std::nullopt;
    w.fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (w.fd >= 0) {
      set_link_options(w.fd, limit_);
      if (::connect(w.fd, found->ai_addr, found->ai_addrlen) == 0) w.connected = true;
      w.since = now;
    }
    ::freeaddrinfo(found);
    if (w.fd < 0) return std::nullopt;
  }
  pollfd p{w.fd, static_cast<short>(w.connected ? 0 : POLLOUT), 0};
  const bool event = ::poll(&p, 1, 0) > 0;
  if (!w.connected) {
    if (!event) {
      if (now - w.since >= limit_) return silent(fmt::format("answered no connection to its port for {} s", seconds));
      return std::nullopt;
    }
    const int err = socket_error(w.fd);
    if (err == 0) {
      w.connected = true;
      return std::nullopt;
    }
    close(w);
    ++w.address;
    retry_at_[peer] = now + pause;
    if (err == ECONNREFUSED) {
      return verdict{peer, fmt::format("its node {} refused a connection to its port {}: the process exited or closed "
                                       "its data path",
                                       e.host, e.port)};
    }
    if (err == EHOSTUNREACH || err == ENETUNREACH || err == ETIMEDOUT) {
      return silent(fmt::format("is unreachable ({})", errno_text(err)));
    }
    return std::nullopt;
  }
  if (event) {  // an error or the end: the peer's kernel answered (reset) unless the probes timed out
    const int err = socket_error(w.fd);
    close(w);
    retry_at_[peer] = now + pause;
    if (err == ETIMEDOUT) return silent(fmt::format("answered nothing for {} s", seconds));
    return std::nullopt;
  }
  if (const auto quiet = link_silence(w.fd, limit_)) {
    return silent(fmt::format("answered nothing for {} ms", quiet->count()));
  }
  return std::nullopt;
}

}  // namespace jobkit::detail
