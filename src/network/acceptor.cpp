#include "network/acceptor.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "core/embedder.hpp"
#include "core/sha256.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

constexpr std::size_t max_pending_connections = 256;

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "an unknown address";
  char host[NI_MAXHOST] = {}, service[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), length, host, sizeof host, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  return addr.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, service) : fmt::format("{}:{}", host, service);
}

}  // namespace

/// A connection accepted but not yet proven to come from a member.
struct acceptor::pending {
  int fd = -1;
  steady_clock::time_point deadline;
  std::string address;
  nonce_bytes nonce{};
  std::array<std::byte, hello_fixed_size> start_bytes{};
  std::size_t received = 0;
  std::optional<hello_start> start;
  std::string key;
};

acceptor::acceptor(const std::vector<std::string>& addresses, const secret_bytes& secret, int world_size,
                   std::chrono::milliseconds handshake_timeout, std::chrono::milliseconds silence_limit,
                   const logger& log)
    : secret_(secret),
      world_size_(world_size),
      handshake_timeout_(handshake_timeout),
      silence_limit_(silence_limit),
      log_(log) {
  const bool loopback_only = addresses == std::vector<std::string>{"127.0.0.1"};
  const bool any_ipv6 = std::any_of(addresses.begin(), addresses.end(),
                                    [](const std::string& a) { return a.find(':') != std::string::npos; });
  const int family = any_ipv6 ? AF_INET6 : AF_INET;
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw error(errc::internal, fmt::format("data path setup: socket: {}", errno_text(errno)));
  sockaddr_storage addr{};
  socklen_t length = 0;
  if (family == AF_INET6) {
    const int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 peers too
    auto& in6 = reinterpret_cast<sockaddr_in6&>(addr);
    in6.sin6_family = AF_INET6;
    in6.sin6_addr = in6addr_any;
    length = sizeof in6;
  } else {
    auto& in = reinterpret_cast<sockaddr_in&>(addr);
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
    length = sizeof in;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    const auto why = errno_text(errno);
    ::close(fd);
    throw error(errc::internal, fmt::format("data path setup: listen: {}", why));
  }
  set_link_options(fd, silence_limit_);
  listen_fd_ = fd;
  port_ = family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
}

acceptor::~acceptor() {
  for (const auto& [key, fd] : waiting_) ::close(fd);
  for (const auto& p : pending_) ::close(p.fd);
  ::close(listen_fd_);
}

int acceptor::take(const std::string& key, int rank) {
  const auto it = waiting_.find({key, rank});
  if (it == waiting_.end()) return -1;
  const int fd = it->second;
  waiting_.erase(it);
  return fd;
}

std::vector<std::string> acceptor::waiting_groups(int rank) const {
  std::vector<std::string> keys;
  for (const auto& [key, fd] : waiting_) {
    if (key.second == rank) keys.push_back(key.first);
  }
  return keys;
}

void acceptor::drop(pending& p, const std::string& why) {
  ::close(p.fd);
  p.fd = -1;
  ++dropped_;
  log_.debug("data path: dropped a connection from {}: {} ({} dropped so far)", p.address, why, dropped_);
}

void acceptor::take_new_connections() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of file descriptors: the connection waits in the backlog; look again a little later
      // instead of spinning on a listener that stays readable.
      if (errno == EMFILE || errno == ENFILE) {
        if (!paused_) {
          log_.debug("data path: cannot accept a connection: {}; trying again every 50 ms", errno_text(errno));
        }
        paused_ = true;
        resume_ = steady_clock::now() + std::chrono::milliseconds(50);
      }
      return;  // EAGAIN: none left; anything else: the next poll tells
    }
    paused_ = false;
    set_link_options(fd, silence_limit_);
    pending p;
    p.fd = fd;
    p.address = peer_address(fd);
    p.deadline = steady_clock::now() + handshake_timeout_;
    if (pending_.size() >= max_pending_connections) {
      drop(p, fmt::format("{} handshakes are already pending", pending_.size()));
      continue;
    }
    fill_random(p.nonce);
    const auto challenge = encode_challenge({protocol_version, p.nonce});
    try {
      iovec part{const_cast<std::byte*>(challenge.data()), challenge.size()};
      send_all(fd, &part, 1, steady_clock::now());  // a fresh socket's buffer takes 24 bytes at once
    } catch (...) {
      drop(p, "it closed before the challenge");
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

bool acceptor::advance(pending& p) {
  try {
    if (!p.start) {
      p.received += receive_some(p.fd, p.start_bytes.data() + p.received, hello_fixed_size - p.received);
      if (p.received < hello_fixed_size) return false;
      p.start = decode_hello_start(p.start_bytes);
      if (!p.start) {
        drop(p, "it sent something that is not a jobkit hello");
        return true;
      }
      if (p.start->hello.version != protocol_version) {
        drop(p, fmt::format("it speaks jobkit data path protocol {}, this rank {}", p.start->hello.version,
                            protocol_version));
        return true;
      }
      p.key.reserve(p.start->key_size);
      p.received = 0;
    }
    if (p.key.size() < p.start->key_size) {
      char buffer[max_group_key_size];
      const auto n = receive_some(p.fd, buffer, p.start->key_size - p.key.size());
      p.key.append(buffer, n);
      if (p.key.size() < p.start->key_size) return false;
    }
  } catch (const socket_closed& e) {
    drop(p, e.why);
    return true;
  }
  const auto& hello = p.start->hello;
  const auto claimed = static_cast<int>(hello.world_rank);
  if (hello.world_rank >= static_cast<std::uint32_t>(world_size_) ||
      !equal_in_constant_time(hello.mac, hello_mac(secret_, p.nonce, hello.nonce, hello.world_rank, p.key))) {
    drop(p, "its proof of membership is wrong");
    return true;
  }
  if (waiting_.count({p.key, claimed}) != 0) {
    drop(p, fmt::format("rank {} already joined this group", claimed));
    return true;
  }
  const auto welcome = encode_welcome(welcome_mac(secret_, p.nonce, hello.nonce, hello.world_rank, p.key));
  try {
    iovec part{const_cast<std::byte*>(welcome.data()), welcome.size()};
    send_all(p.fd, &part, 1, p.deadline);
  } catch (...) {
    drop(p, fmt::format("rank {} went away during the handshake", claimed));
    return true;
  }
  waiting_[{p.key, claimed}] = p.fd;
  p.fd = -1;
  return true;
}

void acceptor::wait(steady_clock::time_point until) {
  const auto now = steady_clock::now();
  for (auto& p : pending_) {
    if (now >= p.deadline) drop(p, fmt::format("no proof of membership within {} ms", handshake_timeout_.count()));
  }
  std::erase_if(pending_, [](const pending& p) { return p.fd < 0; });
  const bool paused = paused_ && now < resume_;
  if (paused) until = std::min(until, resume_);
  std::vector<pollfd> polled(1, pollfd{paused ? -1 : listen_fd_, POLLIN, 0});
  for (const auto& p : pending_) {
    polled.push_back(pollfd{p.fd, POLLIN, 0});
    until = std::min(until, p.deadline);
  }
  const int ready = ::poll(polled.data(), polled.size(), remaining_ms(until));
  if (ready == 0 || (ready < 0 && errno == EINTR)) interruption_point();
  if (ready <= 0) return;  // a deadline, or EINTR: the caller looks again
  // Pending connections first: take_new_connections appends to pending_.
  for (std::size_t i = 1; i < polled.size(); ++i) {
    if (polled[i].revents != 0) advance(pending_[i - 1]);
  }
  std::erase_if(pending_, [](const pending& p) { return p.fd < 0; });
  if (polled[0].revents != 0 || (paused_ && steady_clock::now() >= resume_)) take_new_connections();
}

}  // namespace jobkit::detail
