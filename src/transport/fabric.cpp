#include "transport/fabric.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/embedder.hpp"
#include "core/environment.hpp"
#include "core/failure.hpp"
#include "core/names.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "jobkit/log.hpp"
#include "transport/addresses.hpp"
#include "transport/frame.hpp"
#include "transport/host_watch.hpp"
#include "transport/sha256.hpp"

namespace jobkit::detail {
namespace {

constexpr std::size_t max_pending_connections = 256;
/// Tries of a connection that was refused or reset (with backoff: at most about 5 s in all).
constexpr int max_connect_attempts = 8;

/// Sleeps until `until`, then an interruption point (after each signal too).
void sleep_until(steady_clock::time_point until) {
  while (steady_clock::now() < until) {
    ::poll(nullptr, 0, remaining_ms(until));
    interruption_point();
  }
}

[[noreturn]] void bootstrap_failure(const std::string& what) {
  throw error(errc::internal, fmt::format("data path setup: {}", what));
}

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

/// A socket listening on loopback (every rank on one host) or on every address.
std::pair<int, int> listen_socket(const fabric_settings& settings) {
  const bool loopback_only = settings.addresses == std::vector<std::string>{"127.0.0.1"};
  const bool any_ipv6 = std::any_of(settings.addresses.begin(), settings.addresses.end(),
                                    [](const std::string& a) { return a.find(':') != std::string::npos; });
  const int family = any_ipv6 ? AF_INET6 : AF_INET;
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) bootstrap_failure(fmt::format("socket: {}", errno_text(errno)));
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
    bootstrap_failure(fmt::format("listen: {}", why));
  }
  set_link_options(fd, settings.silence_limit);
  const int port = family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  return {fd, port};
}

template <std::size_t N>
bool read_exactly(int fd, std::array<std::byte, N>& out, steady_clock::time_point deadline, std::string& why,
                  bool* transient = nullptr) {
  try {
    receive_all(fd, out.data(), N, deadline);
    return true;
  } catch (const socket_closed& e) {
    why = e.why;
    // Closed or reset before a word: the listener had no room for it (its backlog, its pending
    // handshakes or its file limit), worth another try; not a silent host (ETIMEDOUT).
    if (transient) *transient = e.error_number == 0 || e.error_number == ECONNRESET;
  } catch (const socket_timeout&) {
    why = "no answer in time";
  }
  return false;
}

}  // namespace

int endpoint_generation(const environment& env) {
  const auto text = env.get("JOBKIT_ENDPOINT_GENERATION");
  if (!text || text->empty()) return 0;
  int generation = 0;
  const auto* end = text->data() + text->size();
  const auto [stop, ec] = std::from_chars(text->data(), end, generation);
  if (ec != std::errc{} || stop != end || generation < 1 || generation > max_endpoint_generation) {
    throw error(errc::invalid_environment,
                fmt::format("JOBKIT_ENDPOINT_GENERATION='{}' is not a whole number from 1 to {} (jobkit exec and "
                            "jobkit env set it for the program they start; unset it otherwise)",
                            *text, max_endpoint_generation));
  }
  return generation;
}

std::string endpoint_key(const environment& env) {
  constexpr std::string_view base = "jobkit.endpoint";
  const int generation = endpoint_generation(env);
  return generation == 0 ? std::string(base) : fmt::format("{}.{}", base, generation);
}

std::vector<interface_address> endpoint_interfaces(const identity& self) {
  return choose_endpoint_addresses(process_environment(), self.num_nodes == 1, host_addresses());
}

fabric_settings settings_for(const identity& self) {
  fabric_settings settings;
  for (const auto& a : endpoint_interfaces(self)) settings.addresses.push_back(a.numeric);
  settings.silence_limit = lost_node_timeout();
  settings.endpoint_key = endpoint_key(process_environment());
  return settings;
}

/// A connection accepted but not yet proven to come from a member.
struct tcp_fabric::pending {
  int fd = -1;
  steady_clock::time_point deadline;
  std::string address;
  nonce_bytes nonce{};
  std::array<std::byte, hello_fixed_size> start_bytes{};
  std::size_t received = 0;
  std::optional<hello_start> start;
  std::string key;
};

void raise_setup_failure(rendezvous& rv, const std::string& key, const identity& self, const error& e) {
  const auto call = rv.ranks_without(key, self.world_size, std::chrono::seconds(2));
  std::string who;
  if (call.asked.empty()) {
    who = "this launcher's rendezvous (PMI-2) cannot say which rank never arrived";
  } else if (!call.absent.empty()) {
    who = fmt::format("rank(s) {} never reached jobkit (exited or crashed before it, or stuck)",
                      fmt::join(call.absent, ", "));
  } else if (static_cast<int>(call.asked.size()) < self.world_size) {
    who = fmt::format("every rank on {} reached jobkit, so the missing rank is on another node", self.hostname);
  } else {
    who = "every rank had published its endpoint";
  }
  raise(e.code(),
        fmt::format("data path setup on {}: {}; {}; with srun, --kill-on-bad-exit=1 ends the whole step as soon "
                    "as a rank exits with an error",
                    rank_label(self.rank, self.hostname), e.what(), who),
        e.native_status());
}

tcp_fabric::tcp_fabric(rendezvous& rv, const identity& self, std::chrono::milliseconds timeout,
                       fabric_settings settings)
    : rv_(rv),
      rank_(self.rank),
      world_size_(self.world_size),
      log_(self),
      settings_(std::move(settings)),
      segment_prefix_("/jobkit-" + job_step_tag(self, ::getpid())) {
  fill_random(secret_);
  const auto [fd, port] = listen_socket(settings_);
  listen_fd_ = fd;
  endpoint mine;
  mine.node = self.node_rank;
  mine.local_rank = self.local_rank;
  mine.port = port;
  mine.host = self.hostname.empty() ? "unknown" : self.hostname;
  mine.addresses = settings_.addresses;
  mine.secret = secret_;
  try {
    rv.put(settings_.endpoint_key, as_bytes(encode_endpoint(self.rank, mine)));
    const auto asked = steady_clock::now();
    auto placed = rv.placement();
    const auto placement_us = std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::now() - asked);
    // The launcher's placement must be the one this rank's identity came from: otherwise the ranks
    // could build different trees.
    if (placed && (static_cast<int>(placed->node_of.size()) != self.world_size ||
                   placed->node_of[static_cast<std::size_t>(rank_)] != self.node_rank ||
                   placed->local_rank_of[static_cast<std::size_t>(rank_)] != self.local_rank)) {
      const auto i = static_cast<std::size_t>(rank_);
      throw error(
          errc::invalid_environment,
          fmt::format("data path setup on {}: the launcher places {} of {} ranks, this one on node {} at local "
                      "rank {}, but its identity says node {} and local rank {}",
                      rank_label(rank_, self.hostname), placed->node_of.size(), self.world_size,
                      i < placed->node_of.size() ? placed->node_of[i] : -1,
                      i < placed->node_of.size() ? placed->local_rank_of[i] : -1, self.node_rank, self.local_rank));
    }
    if (placed) {
      // Every rank decides alike: the placement is the launcher's, the same on every rank.
      rv.commit();
      log_.debug("data path: endpoints read on demand, {} ranks placed on {} nodes by the launcher (read in {} us)",
                 self.world_size, placed->nodes.size(), placement_us.count());
      on_demand_ = true;
      placement_ = std::move(*placed);
      known_.emplace(rank_, std::move(mine));
      return;
    }
    std::vector<std::vector<std::byte>> records;
    try {
      rv.fence(timeout);
      // A fence that returned does not prove that every rank put its endpoint (Slurm 24.11: see
      // pmix_session::get_all), so a missing record is named like a missing rank at the fence.
      records = rv.get_all(settings_.endpoint_key, self.world_size, timeout);
    } catch (const error& e) {
      raise_setup_failure(rv, settings_.endpoint_key, self, e);
    }
    std::map<int, int> node_index;  // identity's node rank -> index in placement_.nodes
    for (int r = 0; r < self.world_size; ++r) {
      auto e = decode_endpoint(records[static_cast<std::size_t>(r)], r);
      const auto [it, added] = node_index.emplace(e.node, static_cast<int>(placement_.nodes.size()));
      if (added) placement_.nodes.push_back(e.host);
      placement_.node_of.push_back(it->second);
      placement_.local_rank_of.push_back(e.local_rank);
      known_.emplace(r, std::move(e));
    }
    settled_ = true;
  } catch (...) {
    ::close(listen_fd_);
    throw;
  }
}

const endpoint* tcp_fabric::fetch(int peer, steady_clock::time_point until, std::string& why) {
  if (const auto it = known_.find(peer); it != known_.end()) return &it->second;
  if (!on_demand_) {
    why = "its endpoint was not exchanged";
    return nullptr;
  }
  try {
    auto e =
        decode_endpoint(rv_.await(peer, settings_.endpoint_key, std::chrono::milliseconds(remaining_ms(until))), peer);
    const auto at = static_cast<std::size_t>(peer);
    if (e.node != placement_.node_of.at(at) || e.local_rank != placement_.local_rank_of.at(at)) {
      throw error(
          errc::invalid_environment,
          fmt::format("data path setup: rank {} published node {} and local rank {}, the launcher places it "
                      "on node {} ({}) at local rank {}",
                      peer, e.node, e.local_rank, placement_.node_of[at], host_of(peer), placement_.local_rank_of[at]));
    }
    return &known_.emplace(peer, std::move(e)).first->second;
  } catch (const timeout_error& e) {
    why = e.what();
    return nullptr;
  }
}

const endpoint& tcp_fabric::endpoint_of(int peer, steady_clock::time_point deadline) {
  const auto until = settled_ ? std::min(deadline, steady_clock::now() + settings_.silence_limit) : deadline;
  std::string why;
  if (const auto* e = fetch(peer, until, why)) return *e;
  if (settled_ && until < deadline) {
    throw error(errc::peer_failure, fmt::format("data path: {}: its node gave no answer for its endpoint within {} s "
                                                "(JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut off ({})",
                                                rank_label(peer, host_of(peer)),
                                                std::chrono::duration<double>(settings_.silence_limit).count(), why));
  }
  throw timeout_error(fmt::format("data path setup: no endpoint from {}: {}", rank_label(peer, host_of(peer)), why));
}

tcp_fabric::~tcp_fabric() {
  for (const auto& [key, fd] : waiting_) ::close(fd);
  for (const auto& p : pending_) ::close(p.fd);
  ::close(listen_fd_);
}

std::string tcp_fabric::next_group_key(const std::vector<int>& members) {
  const auto list = fmt::format("{}", fmt::join(members, ","));
  sha256 h;
  h.update(as_bytes(list));
  const auto digest = h.finish();
  std::uint64_t short_hash = 0;
  std::memcpy(&short_hash, digest.data(), sizeof short_hash);
  const auto key = fmt::format("{}-{:016x}#{}", members.size(), short_hash, created_[list]++);
  key_members_[key] = members.size() <= 16 ? list
                                           : fmt::format("{} ranks: {}...", members.size(),
                                                         fmt::join(members.begin(), members.begin() + 16, ","));
  return key;
}

std::string tcp_fabric::describe_members(const std::string& key) const {
  const auto it = key_members_.find(key);
  return it == key_members_.end() ? "another group" : fmt::format("group [{}]", it->second);
}

std::optional<int> tcp_fabric::connect_to(const endpoint& e, int peer, const std::string& address,
                                          const std::string& key, steady_clock::time_point deadline, std::string& why,
                                          bool& transient) {
  transient = false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const auto service = std::to_string(e.port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    why = gai_strerror(rc);
    return std::nullopt;
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = errno_text(errno);
    ::freeaddrinfo(found);
    return std::nullopt;
  }
  set_link_options(fd, settings_.silence_limit);
  int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
  int connect_errno = errno;
  ::freeaddrinfo(found);
  if (rc != 0 && connect_errno == EINPROGRESS) {  // bounded by us, not by the kernel's SYN retries
    try {
      wait_ready(fd, POLLOUT, std::min(deadline, steady_clock::now() + settings_.silence_limit));
      socklen_t length = sizeof connect_errno;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &connect_errno, &length);
      rc = connect_errno == 0 ? 0 : -1;
    } catch (const socket_timeout&) {
      connect_errno = ETIMEDOUT;
    } catch (const socket_closed&) {
    }
  }
  if (rc != 0 && connect_errno == ETIMEDOUT && steady_clock::now() < deadline) {
    ::close(fd);
    why =
        fmt::format("its node answered no connection for {} s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut off",
                    std::chrono::duration<double>(settings_.silence_limit).count());
    return std::nullopt;
  }
  auto give_up = [&](std::string reason) -> std::optional<int> {
    ::close(fd);
    why = std::move(reason);
    return std::nullopt;
  };
  if (rc != 0) {
    transient = connect_errno == ECONNREFUSED || connect_errno == ECONNRESET;
    return give_up(errno_text(connect_errno));
  }

  // The peer challenges once it accepts, which may be late: it may be busy elsewhere until then.
  std::array<std::byte, challenge_size> challenge_bytes{};
  if (!read_exactly(fd, challenge_bytes, deadline, why, &transient)) return give_up("no challenge: " + why);
  const auto challenge = decode_challenge(challenge_bytes);
  if (!challenge) return give_up("what answers there is not a jobkit data path");
  if (challenge->version != protocol_version) {
    ::close(fd);
    throw error(errc::invalid_environment,
                fmt::format("data path setup: {} at {} speaks jobkit data path protocol {}, this rank protocol {}: "
                            "every rank of a step must run the same jobkit build",
                            rank_label(peer, e.host), address, challenge->version, protocol_version));
  }
  hello_message hello;
  hello.world_rank = static_cast<std::uint32_t>(rank_);
  hello.group_key = key;
  fill_random(hello.nonce);
  hello.mac = hello_mac(e.secret, challenge->nonce, hello.nonce, hello.world_rank, key);
  auto hello_bytes = encode_hello(hello);
  iovec part{hello_bytes.data(), hello_bytes.size()};
  try {
    send_all(fd, &part, 1, deadline);
  } catch (const socket_closed& c) {
    return give_up("greeting failed: " + c.why);
  } catch (const socket_timeout&) {
    return give_up("greeting timed out");
  }
  std::array<std::byte, welcome_size> welcome_bytes{};
  if (!read_exactly(fd, welcome_bytes, std::min(deadline, steady_clock::now() + settings_.handshake_timeout), why)) {
    return give_up("our proof of membership was refused (" + why + "): a process of another step listens there");
  }
  const auto welcome = decode_welcome(welcome_bytes);
  const auto expected = welcome_mac(e.secret, challenge->nonce, hello.nonce, hello.world_rank, key);
  if (!welcome || !equal_in_constant_time(*welcome, expected)) {
    return give_up("the listener there could not prove it is this step's rank");
  }
  return fd;
}

int tcp_fabric::connect(int peer, const std::string& key, steady_clock::time_point deadline) {
  const auto& e = endpoint_of(peer, deadline);
  std::vector<std::string> failures;
  for (int attempt = 1;; ++attempt) {
    failures.clear();
    bool retry = true;  // only when every address failed in a way that another try may mend
    for (const auto& address : e.addresses) {
      std::string why;
      bool transient = false;
      if (const auto fd = connect_to(e, peer, address, key, deadline, why, transient)) return *fd;
      failures.push_back(fmt::format("{} port {}: {}", address, e.port, why));
      retry = retry && transient;
      if (steady_clock::now() >= deadline) break;
    }
    if (!retry || attempt >= max_connect_attempts) break;
    // A refused or reset connection: the listener had no room yet (a burst of connections
    // beyond its backlog, its file limit). Backoff with jitter, so that a burst spreads out.
    std::array<std::byte, 2> noise{};
    fill_random(noise);
    const auto jitter =
        0.5 + static_cast<double>(std::to_integer<int>(noise[0]) * 256 + std::to_integer<int>(noise[1])) / 65536.0;
    const auto backoff = std::chrono::milliseconds(
        static_cast<long long>(jitter * static_cast<double>(std::min<long long>(1000, 50LL << (attempt - 1)))));
    if (steady_clock::now() + backoff >= deadline) break;
    log_.debug("data path: cannot connect to {} yet ({}); attempt {} of {} in {} ms", rank_label(peer, e.host),
               fmt::join(failures, "; "), attempt + 1, max_connect_attempts, backoff.count());
    sleep_until(steady_clock::now() + backoff);
  }
  const auto message =
      fmt::format("data path setup: cannot connect to {}: {}", rank_label(peer, e.host), fmt::join(failures, "; "));
  if (steady_clock::now() >= deadline) throw timeout_error(message);
  throw error(errc::peer_failure, message);
}

void tcp_fabric::drop(pending& p, const std::string& why) {
  ::close(p.fd);
  p.fd = -1;
  ++dropped_;
  log_.debug("data path: dropped a connection from {}: {} ({} dropped so far)", p.address, why, dropped_);
}

void tcp_fabric::take_new_connections() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of file descriptors: the connection waits in the backlog; look again a little later
      // instead of spinning on a listener that stays readable.
      if (errno == EMFILE || errno == ENFILE) {
        if (!accept_paused_) {
          log_.debug("data path: cannot accept a connection: {}; trying again every 50 ms", errno_text(errno));
        }
        accept_paused_ = true;
        accept_resume_ = steady_clock::now() + std::chrono::milliseconds(50);
      }
      return;  // EAGAIN: none left; anything else: the next poll tells
    }
    accept_paused_ = false;
    set_link_options(fd, settings_.silence_limit);
    pending p;
    p.fd = fd;
    p.address = peer_address(fd);
    p.deadline = steady_clock::now() + settings_.handshake_timeout;
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

bool tcp_fabric::advance(pending& p) {
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

std::vector<int> tcp_fabric::accept(const std::vector<int>& peers, const std::string& key,
                                    steady_clock::time_point deadline,
                                    const std::function<void(std::size_t, int, const std::string&)>& tell) {
  std::vector<int> fds(peers.size(), -1);
  const auto start = steady_clock::now();
  // A rank is watched through its endpoint: those not read yet are read once the watch begins
  // (after host_watch::grace), only once every rank is known to have published its own.
  host_watch watch(
      [this](int peer) -> const endpoint* {
        const auto it = known_.find(peer);
        return it == known_.end() ? nullptr : &it->second;
      },
      settings_.silence_limit, start);
  std::vector<int> missing;
  auto claim_waiting = [&] {
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (const auto it = waiting_.find({key, peers[i]}); fds[i] < 0 && it != waiting_.end()) {
        fds[i] = it->second;
        waiting_.erase(it);
      }
    }
  };
  claim_waiting();
  std::vector<pollfd> polled;
  while (std::count(fds.begin(), fds.end(), -1) > 0) {
    const auto now = steady_clock::now();
    for (auto& p : pending_) {
      if (now >= p.deadline)
        drop(p, fmt::format("no proof of membership within {} ms", settings_.handshake_timeout.count()));
    }
    std::erase_if(pending_, [](const pending& p) { return p.fd < 0; });
    missing.clear();
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (fds[i] < 0) missing.push_back(peers[i]);
    }
    std::optional<host_watch::verdict> lost;
    if (settled_ && now >= start + host_watch::grace) {
      for (const int peer : missing) {
        std::string why;
        if (known_.count(peer) == 0 && !fetch(peer, std::min(deadline, now + settings_.silence_limit), why)) {
          lost = host_watch::verdict{
              peer, fmt::format("its node {} gave no answer for its endpoint within {} s (JOBKIT_LOST_NODE_TIMEOUT): "
                                "the node is lost or cut off ({})",
                                host_of(peer), std::chrono::duration<double>(settings_.silence_limit).count(), why)};
          break;
        }
      }
    }
    if (!lost) lost = watch.check(missing, now);
    if (lost) {
      const int node = placement_.node_of.at(static_cast<std::size_t>(lost->peer));
      std::vector<int> there;
      for (int r = 0; r < world_size_; ++r) {
        if (placement_.node_of[static_cast<std::size_t>(r)] == node) there.push_back(r);
      }
      const auto message = fmt::format("creating {} on {}: {} never connected: {} (its ranks: {})",
                                       describe_members(key), rank_label(rank_, host_of(rank_)),
                                       rank_label(lost->peer, host_of(lost->peer)), lost->why, fmt::join(there, ", "));
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] < 0) continue;
        if (tell) tell(i, fds[i], message);
        ::close(fds[i]);
      }
      throw error(errc::peer_failure, message);
    }
    if (now >= deadline) {
      std::vector<std::string> missing;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (fds[i] >= 0) continue;
        std::string note;
        for (const auto& [waiting_key, fd] : waiting_) {
          if (waiting_key.second == peers[i])
            note = fmt::format(", which is creating {} instead", describe_members(waiting_key.first));
        }
        missing.push_back(rank_label(peers[i], host_of(peers[i])) + note);
      }
      const auto message = fmt::format("creating {} on {}: no connection from {}", describe_members(key),
                                       rank_label(rank_, host_of(rank_)), fmt::join(missing, "; "));
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] < 0) continue;
        if (tell) tell(i, fds[i], message);
        ::close(fds[i]);
      }
      throw timeout_error(message);
    }
    auto wake = std::min(deadline, now + std::chrono::milliseconds(250));  // the next look at the watched hosts
    const bool paused = accept_paused_ && now < accept_resume_;
    if (paused) wake = std::min(wake, accept_resume_);
    polled.assign(1, pollfd{paused ? -1 : listen_fd_, POLLIN, 0});
    for (const auto& p : pending_) {
      polled.push_back(pollfd{p.fd, POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    const int ready = ::poll(polled.data(), polled.size(), remaining_ms(wake));
    if (ready == 0 || (ready < 0 && errno == EINTR)) interruption_point();
    if (ready <= 0) continue;  // a deadline, or EINTR: checked at the top
    // Pending connections first: take_new_connections appends to pending_.
    for (std::size_t i = 1; i < polled.size(); ++i) {
      if (polled[i].revents != 0) advance(pending_[i - 1]);
    }
    std::erase_if(pending_, [](const pending& p) { return p.fd < 0; });
    if (polled[0].revents != 0 || (accept_paused_ && steady_clock::now() >= accept_resume_)) take_new_connections();
    claim_waiting();
  }
  return fds;
}

}  // namespace jobkit::detail
