#include "tcp_transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <sstream>

#include "jobkit/error.hpp"
#include "pmix_session.hpp"

namespace jobkit::detail {
namespace {

using clock = std::chrono::steady_clock;

constexpr std::uint32_t frame_magic = 0x4a4b5432;  // "JKT2"
enum class frame_type : std::uint32_t { up = 1, down = 2, abort = 3, hello = 4 };

struct frame_header {
  std::uint32_t magic;
  std::uint32_t type;
  std::uint64_t sequence;
  std::uint32_t origin;  // the writer's group rank (hello: world rank; abort: the rank that failed)
  std::uint16_t name_size;
  std::uint16_t site_size;
  std::uint64_t payload_size;
};

struct frame {
  frame_header header{};
  std::string name, site;
  std::vector<std::byte> payload;
};

/// An I/O failure on one link: the caller knows which rank is behind it.
struct link_closed {
  std::string why;
};
struct link_timeout {};

int remaining_ms(clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, INT_MAX));
}

void wait_for(int fd, short events, clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready > 0) return;
    if (ready == 0) throw link_timeout{};
    if (errno != EINTR) throw link_closed{std::strerror(errno)};
  }
}

void write_all(int fd, iovec* parts, int count, clock::time_point deadline) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(count);
    const ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_for(fd, POLLOUT, deadline);
        continue;
      }
      if (errno == EINTR) continue;
      throw link_closed{std::strerror(errno)};
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

void read_all(int fd, void* data, std::size_t size, clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw link_closed{"connection closed"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_for(fd, POLLIN, deadline);
    } else if (errno != EINTR) {
      throw link_closed{std::strerror(errno)};
    }
  }
}

void send_frame(int fd, frame_type type, std::uint64_t sequence, int origin, std::string_view name,
                std::string_view site, std::span<const std::byte> payload, clock::time_point deadline) {
  frame_header h{frame_magic,
                 static_cast<std::uint32_t>(type),
                 sequence,
                 static_cast<std::uint32_t>(origin),
                 static_cast<std::uint16_t>(std::min<std::size_t>(name.size(), UINT16_MAX)),
                 static_cast<std::uint16_t>(std::min<std::size_t>(site.size(), UINT16_MAX)),
                 payload.size()};
  iovec parts[] = {{&h, sizeof h},
                   {const_cast<char*>(name.data()), h.name_size},
                   {const_cast<char*>(site.data()), h.site_size},
                   {const_cast<std::byte*>(payload.data()), payload.size()}};
  write_all(fd, parts, 4, deadline);
}

frame receive_frame(int fd, clock::time_point deadline) {
  frame f;
  read_all(fd, &f.header, sizeof f.header, deadline);
  if (f.header.magic != frame_magic) throw link_closed{"garbled frame (bad magic)"};
  f.name.resize(f.header.name_size);
  f.site.resize(f.header.site_size);
  read_all(fd, f.name.data(), f.name.size(), deadline);
  read_all(fd, f.site.data(), f.site.size(), deadline);
  f.payload.resize(f.header.payload_size);
  read_all(fd, f.payload.data(), f.payload.size(), deadline);
  return f;
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

/// What an abort frame carries: the reason, the rank that failed first, and the error category.
struct abort_notice {
  std::string reason;
  int origin;
  errc code;
};

std::optional<abort_notice> abort_in(const frame& f) {
  if (f.header.type != static_cast<std::uint32_t>(frame_type::abort)) return std::nullopt;
  const int code = std::atoi(f.name.c_str());
  return abort_notice{std::string(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()),
                      static_cast<int>(f.header.origin),
                      code >= 0 && code <= static_cast<int>(errc::internal) ? static_cast<errc>(code)
                                                                            : errc::peer_failure};
}

[[noreturn]] void raise(errc code, const std::string& message) {
  if (code == errc::timeout) throw timeout_error(message);
  throw error(code, message);
}

void set_socket_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

[[noreturn]] void bootstrap_failure(const std::string& what) {
  throw error(errc::internal, fmt::format("data path setup: {}", what));
}

// A set of rank_bytes as one payload: [u32 count] then per entry [u32 rank][u64 size][bytes].
void append_entries(std::vector<std::byte>& out, const std::vector<const rank_bytes*>& entries) {
  auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  std::size_t total = sizeof(std::uint32_t);
  for (const auto* e : entries) total += sizeof(std::uint32_t) + sizeof(std::uint64_t) + e->bytes.size();
  out.reserve(out.size() + total);
  const auto count = static_cast<std::uint32_t>(entries.size());
  put(&count, sizeof count);
  for (const auto* e : entries) {
    const auto r = static_cast<std::uint32_t>(e->rank);
    const std::uint64_t n = e->bytes.size();
    put(&r, sizeof r);
    put(&n, sizeof n);
    put(e->bytes.data(), e->bytes.size());
  }
}

std::vector<rank_bytes> parse_entries(std::span<const std::byte> in) {
  std::size_t at = 0;
  auto take = [&](void* p, std::size_t n) {
    if (n > in.size() - at) throw link_closed{"truncated payload"};
    std::memcpy(p, in.data() + at, n);
    at += n;
  };
  std::uint32_t count = 0;
  take(&count, sizeof count);
  if (count > in.size()) throw link_closed{"garbled payload"};
  std::vector<rank_bytes> entries(count);
  for (auto& e : entries) {
    std::uint32_t r = 0;
    std::uint64_t n = 0;
    take(&r, sizeof r);
    take(&n, sizeof n);
    if (n > in.size() - at) throw link_closed{"truncated payload"};
    e.rank = static_cast<int>(r);
    e.bytes.assign(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return entries;
}

}  // namespace

// ---- tcp_fabric ----

tcp_fabric::tcp_fabric(pmix_session& pmix, const identity& self, std::chrono::milliseconds timeout)
    : rank_(self.rank) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) bootstrap_failure(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t addr_len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    const auto why = std::strerror(errno);
    ::close(listen_fd_);
    bootstrap_failure(fmt::format("listen: {}", why));
  }
  set_socket_options(listen_fd_);

  const std::string key = "jobkit.endpoint";
  const auto record = fmt::format("{} {} {} {} {}", self.rank, self.node_rank, self.local_rank,
                                  ntohs(addr.sin_port), self.hostname);
  try {
    pmix.put(key, as_bytes(record));
    pmix.commit_and_fence(timeout);
    for (int r = 0; r < self.world_size; ++r) {
      const auto bytes = pmix.get_bytes(r, key);
      std::istringstream in(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      int published_rank = -1;
      endpoint e;
      if (!(in >> published_rank >> e.node >> e.local_rank >> e.port >> e.host) || published_rank != r) {
        bootstrap_failure(fmt::format("rank {} published a malformed endpoint", r));
      }
      endpoints_.push_back(std::move(e));
    }
  } catch (...) {
    ::close(listen_fd_);
    throw;
  }
}

tcp_fabric::~tcp_fabric() {
  for (const auto& [key, fd] : waiting_) ::close(fd);
  ::close(listen_fd_);
}

std::string tcp_fabric::next_group_key(const std::vector<int>& members) {
  const auto list = fmt::format("{}", fmt::join(members, ","));
  return fmt::format("{}#{}", list, created_[list]++);
}

int tcp_fabric::connect(int peer, const std::string& key, clock::time_point deadline) {
  const auto& e = endpoints_.at(static_cast<std::size_t>(peer));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const auto service = std::to_string(e.port);
  if (const int rc = ::getaddrinfo(e.host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    bootstrap_failure(fmt::format("cannot resolve {} (rank {}): {}", e.host, peer, gai_strerror(rc)));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) set_socket_options(fd);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  int connect_errno = errno;
  ::freeaddrinfo(found);
  if (rc != 0 && connect_errno == EINPROGRESS) {  // bounded by the deadline, not the kernel's SYN retries
    try {
      wait_for(fd, POLLOUT, deadline);
      socklen_t length = sizeof connect_errno;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &connect_errno, &length);
      rc = connect_errno == 0 ? 0 : -1;
    } catch (const link_timeout&) {
      connect_errno = ETIMEDOUT;
    } catch (const link_closed&) {
    }
  }
  if (rc != 0) {
    if (fd >= 0) ::close(fd);
    bootstrap_failure(fmt::format("cannot connect to rank {} at {}:{}: {}", peer, e.host, service,
                                  std::strerror(connect_errno)));
  }
  try {
    send_frame(fd, frame_type::hello, 0, rank_, key, "", {}, deadline);
  } catch (...) {
    ::close(fd);
    bootstrap_failure(fmt::format("cannot greet rank {} at {}:{}", peer, e.host, service));
  }
  return fd;
}

std::vector<int> tcp_fabric::accept(const std::vector<int>& peers, const std::string& key,
                                    clock::time_point deadline) {
  std::vector<int> fds(peers.size(), -1);
  auto claim_waiting = [&] {
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (const auto it = waiting_.find({key, peers[i]}); fds[i] < 0 && it != waiting_.end()) {
        fds[i] = it->second;
        waiting_.erase(it);
      }
    }
  };
  claim_waiting();
  while (std::count(fds.begin(), fds.end(), -1) > 0) {
    try {
      wait_for(listen_fd_, POLLIN, deadline);
    } catch (const link_timeout&) {
      std::vector<std::string> missing;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (fds[i] >= 0) continue;
        std::string note;
        for (const auto& [waiting_key, fd] : waiting_) {
          if (waiting_key.second == peers[i]) note = fmt::format(", which is creating group [{}] instead", waiting_key.first);
        }
        missing.push_back(fmt::format("rank {} ({}){}", peers[i], endpoints_[static_cast<std::size_t>(peers[i])].host, note));
      }
      for (const int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
      throw timeout_error(fmt::format("creating group [{}] on rank {}: no connection from {}", key, rank_,
                                      fmt::join(missing, "; ")));
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_socket_options(fd);
    frame hello;
    try {
      hello = receive_frame(fd, deadline);
    } catch (...) {
      ::close(fd);
      continue;  // not one of ours, or it died while greeting: its group reports it
    }
    const int peer = static_cast<int>(hello.header.origin);
    if (hello.header.type != static_cast<std::uint32_t>(frame_type::hello) || peer < 0 ||
        peer >= static_cast<int>(endpoints_.size()) || waiting_.count({hello.name, peer}) != 0) {
      ::close(fd);
      continue;
    }
    waiting_[{hello.name, peer}] = fd;
    claim_waiting();
  }
  return fds;
}

// ---- tcp_tree ----

tcp_tree::tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout)
    : members_(members) {
  const auto deadline = clock::now() + timeout;
  const int size = static_cast<int>(members.size());
  const auto& endpoints = fabric.endpoints();
  rank_ = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  for (const int w : members) hosts_.push_back(endpoints.at(static_cast<std::size_t>(w)).host);

  // The first member of each node leads it; leaders form a binomial tree under group rank 0.
  std::vector<int> parent(static_cast<std::size_t>(size), -1);
  std::map<int, int> leader_of_node;
  std::vector<int> leaders;
  for (int g = 0; g < size; ++g) {
    const int node = endpoints[static_cast<std::size_t>(members[static_cast<std::size_t>(g)])].node;
    if (const auto [it, first] = leader_of_node.emplace(node, g); first) {
      leaders.push_back(g);
    } else {
      parent[static_cast<std::size_t>(g)] = it->second;
    }
  }
  for (std::size_t i = 1; i < leaders.size(); ++i) parent[static_cast<std::size_t>(leaders[i])] = leaders[i & (i - 1)];

  std::vector<int> child_ranks;
  for (int g = 0; g < size; ++g) {
    if (parent[static_cast<std::size_t>(g)] == rank_) child_ranks.push_back(g);
  }
  subtree_.resize(child_ranks.size());
  child_of_.assign(static_cast<std::size_t>(size), -1);
  for (int g = 0; g < size; ++g) {
    for (int a = g; a != -1; a = parent[static_cast<std::size_t>(a)]) {
      if (parent[static_cast<std::size_t>(a)] != rank_) continue;
      const auto child = static_cast<int>(std::find(child_ranks.begin(), child_ranks.end(), a) - child_ranks.begin());
      subtree_[static_cast<std::size_t>(child)].push_back(g);
      child_of_[static_cast<std::size_t>(g)] = child;
      break;
    }
  }

  const auto key = fabric.next_group_key(members);
  if (const int p = parent[static_cast<std::size_t>(rank_)]; p >= 0) {
    parent_link_.push_back(link{fabric.connect(members[static_cast<std::size_t>(p)], key, deadline), p});
  }
  std::vector<int> child_world_ranks;
  for (const int g : child_ranks) child_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  try {
    const auto fds = fabric.accept(child_world_ranks, key, deadline);
    for (std::size_t i = 0; i < fds.size(); ++i) children_.push_back(link{fds[i], child_ranks[i]});
  } catch (...) {
    for (const auto& l : parent_link_) ::close(l.fd);
    throw;
  }
}

tcp_tree::~tcp_tree() {
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd >= 0) ::close(l.fd);
    }
  }
}

std::string tcp_tree::describe(int group_rank) const {
  const auto g = static_cast<std::size_t>(group_rank);
  return fmt::format("rank {} ({})", members_[g], hosts_[g]);
}

void tcp_tree::spread_abort(const std::string& given, int origin, errc code) noexcept {
  const std::string message = given.empty() ? "aborted (no reason given)" : given;
  if (broken_.empty()) {
    broken_ = message;
    broken_code_ = code;
  }
  // Tell every neighbour, so the failure reaches every member instead of a deadline. Then close
  // gracefully: a close with unread data sends a reset, which can destroy the abort in flight.
  const auto deadline = clock::now() + std::chrono::milliseconds(200);
  const auto code_text = std::to_string(static_cast<int>(code));
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      if (l.peer != origin) {
        try {
          send_frame(l.fd, frame_type::abort, sequence_, origin, code_text, "", as_bytes(message), deadline);
        } catch (...) {
        }
      }
      ::shutdown(l.fd, SHUT_WR);
    }
  }
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      char discard[4096];
      try {
        while (true) {
          wait_for(l.fd, POLLIN, deadline);
          const ssize_t n = ::recv(l.fd, discard, sizeof discard, 0);
          if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
        }
      } catch (...) {
      }
      ::close(l.fd);
      l.fd = -1;
    }
  }
}

void tcp_tree::fail(const std::string& message, int origin, errc code) {
  spread_abort(message, origin, code);
  raise(code, message);
}

void tcp_tree::abort(const std::string& message) noexcept {
  if (broken_.empty()) spread_abort(message, rank_, errc::peer_failure);
}

void tcp_tree::check_peers(const std::string& during) {
  if (!broken_.empty()) raise(broken_code_, broken_);
  std::vector<pollfd> fds;
  std::vector<const link*> links;
  for (const auto* all : {&children_, &parent_link_}) {
    for (const auto& l : *all) {
      fds.push_back(pollfd{l.fd, POLLRDHUP, 0});
      links.push_back(&l);
    }
  }
  if (::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      exchange context;
      context.name = during;
      lost(*links[i], "connection closed", context);
    }
  }
}

void tcp_tree::lost(const link& l, const std::string& why, const exchange& ex) {
  // The peer may have sent an abort just before closing: its reason is the one to report.
  try {
    if (auto notice = abort_in(receive_frame(l.fd, clock::now() + std::chrono::milliseconds(100)))) {
      fail(notice->reason, notice->origin, notice->code);
    }
  } catch (const link_closed&) {
  } catch (const link_timeout&) {
  }
  fail(fmt::format("{} closed its connection ({}) during {}{}: the process died or exited", describe(l.peer), why,
                   ex.name, ex.site.empty() ? "" : " at " + ex.site),
       l.peer);
}

template <class Step>
std::vector<rank_bytes> tcp_tree::user_step(const exchange& ex, Step&& step) {
  try {
    return step();
  } catch (const std::exception& e) {
    const auto* known = dynamic_cast<const error*>(&e);
    spread_abort(fmt::format("{} at {} failed on {}: {}", ex.name, ex.site, describe(rank_), e.what()), rank_,
                 known ? known->code() : errc::peer_failure);
    throw;
  } catch (...) {
    spread_abort(fmt::format("{} at {} failed on {}: an exception that is not a std::exception", ex.name, ex.site,
                             describe(rank_)),
                 rank_, errc::peer_failure);
    throw;
  }
}

std::vector<rank_bytes> tcp_tree::gather_up(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  std::vector<rank_bytes> entries;
  if (ex.mine) entries.push_back(rank_bytes{rank_, {ex.mine->begin(), ex.mine->end()}});

  std::vector<bool> done(children_.size(), false);
  std::size_t pending = children_.size();
  std::vector<pollfd> fds;
  while (pending > 0) {
    fds.clear();
    for (std::size_t i = 0; i < children_.size(); ++i) fds.push_back(pollfd{done[i] ? -1 : children_[i].fd, POLLIN, 0});
    // The parent sends nothing before it has this rank's contribution, except an abort or its
    // closing: watch it too, so that a failure elsewhere does not wait for a slow child.
    if (!parent_link_.empty()) fds.push_back(pollfd{parent_link_.front().fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      std::vector<int> missing;
      for (std::size_t i = 0; i < children_.size(); ++i) {
        if (done[i]) continue;
        for (const int g : subtree_[i]) missing.push_back(members_[static_cast<std::size_t>(g)]);
      }
      std::sort(missing.begin(), missing.end());
      fail(fmt::format("{} at {} timed out after {} ms on {}: rank(s) {} never arrived (at least one of them "
                       "is late, stuck or in another collective)",
                       ex.name, ex.site, ex.timeout.count(), describe(rank_), fmt::join(missing, ", ")),
           rank_, errc::timeout);
    }
    if (!parent_link_.empty() && fds.back().revents != 0) {
      const auto& parent = parent_link_.front();
      try {
        const frame f = receive_frame(parent.fd, deadline);
        if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
        fail(fmt::format("{} sent {} #{} before {} had contributed to {} #{}", describe(parent.peer), f.name,
                         f.header.sequence, describe(rank_), ex.name, sequence_),
             rank_, errc::internal);
      } catch (const link_closed& e) {
        lost(parent, e.why, ex);
      } catch (const link_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(parent.peer), ex.name, ex.site), parent.peer);
      }
    }
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (done[i] || fds[i].revents == 0) continue;
      const auto& child = children_[i];
      std::vector<rank_bytes> under;
      try {
        const frame f = receive_frame(child.fd, deadline);
        if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
        if (f.header.sequence != sequence_ || f.name != ex.name) {
          fail(fmt::format("collectives out of step: {} is in {} #{} at {} while {} is in {} #{} at {}",
                           describe(child.peer), f.name, f.header.sequence, f.site, describe(rank_), ex.name,
                           sequence_, ex.site),
               rank_);
        }
        under = parse_entries(f.payload);
      } catch (const link_closed& e) {
        lost(child, e.why, ex);
      } catch (const link_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(child.peer), ex.name, ex.site), child.peer);
      }
      std::move(under.begin(), under.end(), std::back_inserter(entries));
      done[i] = true;
      --pending;
    }
  }
  return entries;
}

std::vector<rank_bytes> tcp_tree::run(const exchange& ex) {
  if (!broken_.empty()) {
    raise(broken_code_, fmt::format("{} at {}: this group is unusable after an earlier failure: {}", ex.name,
                                    ex.site, broken_));
  }
  ++sequence_;
  auto entries = gather_up(ex);
  if (ex.fold && !entries.empty()) {
    entries = user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  const auto deadline = clock::now() + ex.timeout;
  std::vector<std::byte> everyone;  // what every child receives when the result goes to everyone
  if (!parent_link_.empty()) {
    const auto& parent = parent_link_.front();
    std::vector<const rank_bytes*> up;
    for (const auto& e : entries) up.push_back(&e);
    std::vector<std::byte> payload;
    append_entries(payload, up);
    try {
      send_frame(parent.fd, frame_type::up, sequence_, rank_, ex.name, ex.site, payload, deadline);
      frame f = receive_frame(parent.fd, deadline);
      if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
      entries = parse_entries(f.payload);
      if (ex.to == delivery::everyone) everyone = std::move(f.payload);
    } catch (const link_closed& e) {
      lost(parent, e.why, ex);
    } catch (const link_timeout&) {
      fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the result from {}: some rank outside "
                       "this rank's subtree never arrived",
                       ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(parent.peer)),
           rank_, errc::timeout);
    }
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    if (ex.finish) entries = user_step(ex, [&] { return ex.finish(entries); });
    if (ex.to == delivery::everyone && !children_.empty()) {
      std::vector<const rank_bytes*> all;
      for (const auto& e : entries) all.push_back(&e);
      append_entries(everyone, all);
    }
  }

  std::vector<std::byte> selected;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto below = [&](const rank_bytes& e) {
      const int rank = ex.to == delivery::one_rank ? ex.target : e.rank;
      return rank >= 0 && rank < static_cast<int>(child_of_.size()) &&
             child_of_[static_cast<std::size_t>(rank)] == static_cast<int>(i);
    };
    if (ex.to != delivery::everyone) {
      std::vector<const rank_bytes*> down;
      for (const auto& e : entries) {
        if (below(e)) down.push_back(&e);
      }
      selected.clear();
      append_entries(selected, down);
    }
    const auto& child = children_[i];
    try {
      send_frame(child.fd, frame_type::down, sequence_, rank_, ex.name, ex.site,
                 ex.to == delivery::everyone ? everyone : selected, deadline);
    } catch (const link_closed& e) {
      lost(child, e.why, ex);
    } catch (const link_timeout&) {
      fail(fmt::format("{} stopped reading during {} at {}", describe(child.peer), ex.name, ex.site), child.peer);
    }
  }

  if (ex.to == delivery::one_rank && ex.target != rank_) return {};
  if (ex.to == delivery::each_own) {
    std::erase_if(entries, [&](const rank_bytes& e) { return e.rank != rank_; });
  }
  return entries;
}

}  // namespace jobkit::detail
