#include "network/host_watch.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "core/lost_node.hpp"
#include "network/dial.hpp"

namespace jobkit::detail {

namespace {

/// After a watch ended without a verdict (the peer's process accepted and dropped it).
constexpr std::chrono::seconds pause{1};

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
  const auto silent = [&](std::string_view what, std::string detail = {}, bool waited = true) {
    return verdict{peer, describe(lost_node{.node = e.host,
                                            .what = what,
                                            .limit = waited ? limit_ : std::chrono::milliseconds(0),
                                            .seen_from = {},
                                            .ranks = {},
                                            .detail = std::move(detail)})};
  };
  int failed_at_once = 0;
  if (w.fd < 0) {
    if (const auto r = retry_at_.find(peer); r != retry_at_.end() && now < r->second) return std::nullopt;
    if (e.addresses.empty()) return std::nullopt;
    const auto d = begin_dial(e.addresses[w.address % e.addresses.size()], e.port, limit_);
    if (d.fd < 0 && d.error != ECONNREFUSED && d.error != EHOSTUNREACH && d.error != ENETUNREACH) return std::nullopt;
    w.fd = d.fd;
    w.connected = d.connected;
    w.since = now;
    failed_at_once = d.fd < 0 ? d.error : 0;
  }
  pollfd p{w.fd, static_cast<short>(w.connected ? 0 : POLLOUT), 0};
  const bool event = failed_at_once != 0 || ::poll(&p, 1, 0) > 0;
  if (!w.connected) {
    if (!event) {
      if (now - w.since >= limit_) return silent("answered no connection to its port");
      return std::nullopt;
    }
    const int err = failed_at_once != 0 ? failed_at_once : dial_outcome(w.fd);
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
    if (err == ETIMEDOUT) return silent("answered no connection to its port", errno_text(err));
    if (err == EHOSTUNREACH || err == ENETUNREACH) return silent("is unreachable", errno_text(err), false);
    return std::nullopt;
  }
  if (event) {  // an error or the end: the peer's kernel answered (reset) unless the probes timed out
    const int err = dial_outcome(w.fd);
    close(w);
    retry_at_[peer] = now + pause;
    if (err == ETIMEDOUT) return silent("answered nothing");
    return std::nullopt;
  }
  if (link_silence(w.fd, limit_)) return silent("answered nothing");
  return std::nullopt;
}

}  // namespace jobkit::detail
