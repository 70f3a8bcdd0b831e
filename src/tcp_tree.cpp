#include "tcp_tree.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include "jobkit/error.hpp"
#include "pmix_session.hpp"

namespace jobkit::detail {
namespace {

using clock = std::chrono::steady_clock;

constexpr std::uint32_t frame_magic = 0x4a4b5431;  // "JKT1"
enum class frame_type : std::uint32_t { up = 1, down = 2, abort = 3, hello = 4 };

struct frame_header {
  std::uint32_t magic;
  std::uint32_t type;
  std::uint64_t sequence;
  std::uint32_t origin;  // rank that wrote the frame (abort: the rank that failed first)
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
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
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

void write_all(int fd, const void* data, std::size_t size, clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(fd, POLLOUT, deadline);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      throw link_closed{n == 0 ? "connection closed" : std::strerror(errno)};
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
  std::string head(reinterpret_cast<const char*>(&h), sizeof h);
  head.append(name.substr(0, h.name_size));
  head.append(site.substr(0, h.site_size));
  write_all(fd, head.data(), head.size(), deadline);
  write_all(fd, payload.data(), payload.size(), deadline);
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

/// The reason and origin rank an abort frame carries.
struct abort_notice {
  std::string reason;
  int origin;
};

std::optional<abort_notice> abort_in(const frame& f) {
  if (f.header.type != static_cast<std::uint32_t>(frame_type::abort)) return std::nullopt;
  return abort_notice{std::string(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()),
                      static_cast<int>(f.header.origin)};
}

void set_socket_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

[[noreturn]] void bootstrap_failure(const std::string& what) {
  throw error(errc::internal, fmt::format("data path bootstrap: {}", what));
}

// Rank records travel as "rank node port host".
std::vector<std::byte> to_bytes(const std::string& text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

// A set of rank_bytes as one payload: [u32 count] then per entry [u32 rank][u64 size][bytes].
void append_entries(std::vector<std::byte>& out, const std::vector<rank_bytes>& entries) {
  auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  const auto count = static_cast<std::uint32_t>(entries.size());
  put(&count, sizeof count);
  for (const auto& e : entries) {
    const auto r = static_cast<std::uint32_t>(e.rank);
    const std::uint64_t n = e.bytes.size();
    put(&r, sizeof r);
    put(&n, sizeof n);
    put(e.bytes.data(), e.bytes.size());
  }
}

std::vector<rank_bytes> parse_entries(std::span<const std::byte> in) {
  std::size_t at = 0;
  auto take = [&](void* p, std::size_t n) {
    if (at + n > in.size()) throw link_closed{"truncated payload"};
    std::memcpy(p, in.data() + at, n);
    at += n;
  };
  std::uint32_t count = 0;
  take(&count, sizeof count);
  std::vector<rank_bytes> entries(count);
  for (auto& e : entries) {
    std::uint32_t r = 0;
    std::uint64_t n = 0;
    take(&r, sizeof r);
    take(&n, sizeof n);
    if (at + n > in.size()) throw link_closed{"truncated payload"};
    e.rank = static_cast<int>(r);
    e.bytes.assign(in.begin() + static_cast<std::ptrdiff_t>(at),
                   in.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return entries;
}

}  // namespace

struct tcp_tree::link {
  int fd = -1;
  int peer = -1;
};

tcp_tree::tcp_tree(pmix_session& pmix, int rank, int world_size, int node_rank,
                   std::chrono::milliseconds timeout)
    : rank_(rank) {
  const auto deadline = clock::now() + timeout;
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) bootstrap_failure(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t addr_len = sizeof addr;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    bootstrap_failure(fmt::format("listen: {}", std::strerror(errno)));
  }
  char host[HOST_NAME_MAX + 1] = {};
  ::gethostname(host, sizeof host - 1);

  const std::string key = "jobkit.tcp_tree.endpoint";
  pmix.put(key, to_bytes(fmt::format("{} {} {} {}", rank, node_rank, ntohs(addr.sin_port), host)));
  pmix.commit_and_fence(timeout);

  std::map<int, std::vector<int>> ranks_of_node;
  std::vector<int> ports(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    const auto bytes = pmix.get_bytes(r, key);
    std::istringstream in(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    int published_rank = -1, node = -1;
    std::string host_of_rank;
    if (!(in >> published_rank >> node >> ports[static_cast<std::size_t>(r)] >> host_of_rank) ||
        published_rank != r) {
      bootstrap_failure(fmt::format("rank {} published a malformed endpoint", r));
    }
    hosts_.push_back(std::move(host_of_rank));
    ranks_of_node[node].push_back(r);
  }

  // Node leaders (lowest rank of each node) form a binomial tree rooted at rank 0's node;
  // the other ranks of a node hang under their leader.
  std::vector<int> leaders;
  for (const auto& [node, ranks] : ranks_of_node) leaders.push_back(ranks.front());
  std::sort(leaders.begin(), leaders.end());
  parent_.assign(static_cast<std::size_t>(world_size), -1);
  for (std::size_t i = 1; i < leaders.size(); ++i) {
    parent_[static_cast<std::size_t>(leaders[i])] = leaders[i & (i - 1)];
  }
  for (const auto& [node, ranks] : ranks_of_node) {
    for (std::size_t i = 1; i < ranks.size(); ++i) parent_[static_cast<std::size_t>(ranks[i])] = ranks[0];
  }

  // Children in rank order, each with the ranks of its subtree.
  std::vector<int> child_ranks;
  for (int r = 0; r < world_size; ++r) {
    if (parent_[static_cast<std::size_t>(r)] == rank_) child_ranks.push_back(r);
  }
  subtree_.resize(child_ranks.size());
  for (int r = 0; r < world_size; ++r) {
    for (int a = r; a != -1; a = parent_[static_cast<std::size_t>(a)]) {
      if (parent_[static_cast<std::size_t>(a)] != rank_) continue;
      const auto child = std::find(child_ranks.begin(), child_ranks.end(), a) - child_ranks.begin();
      subtree_[static_cast<std::size_t>(child)].push_back(r);
      break;
    }
  }

  if (const int parent = parent_[static_cast<std::size_t>(rank_)]; parent >= 0) {
    const auto& parent_host = hosts_[static_cast<std::size_t>(parent)];
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const auto service = std::to_string(ports[static_cast<std::size_t>(parent)]);
    if (const int rc = ::getaddrinfo(parent_host.c_str(), service.c_str(), &hints, &found); rc != 0) {
      bootstrap_failure(fmt::format("cannot resolve {} (rank {}): {}", parent_host, parent, gai_strerror(rc)));
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int rc = ::connect(fd, found->ai_addr, found->ai_addrlen);
    ::freeaddrinfo(found);
    if (rc != 0) {
      ::close(fd);
      bootstrap_failure(fmt::format("cannot connect to rank {} at {}:{}: {}", parent, parent_host, service,
                                    std::strerror(errno)));
    }
    set_socket_options(fd);
    parent_link_.push_back(link{fd, parent});
    try {
      send_frame(fd, frame_type::hello, 0, rank_, "", "", {}, deadline);
    } catch (const link_closed& e) {
      bootstrap_failure(fmt::format("hello to rank {}: {}", parent, e.why));
    } catch (const link_timeout&) {
      bootstrap_failure(fmt::format("hello to rank {} timed out", parent));
    }
  }

  set_socket_options(listen_fd_);
  children_.resize(child_ranks.size());
  for (std::size_t accepted = 0; accepted < child_ranks.size(); ++accepted) {
    try {
      wait_for(listen_fd_, POLLIN, deadline);
    } catch (const link_timeout&) {
      std::vector<std::string> missing;
      for (std::size_t i = 0; i < children_.size(); ++i) {
        if (children_[i].fd < 0) missing.push_back(describe(child_ranks[i]));
      }
      throw timeout_error(fmt::format("data path bootstrap: no connection from {} within {} ms",
                                      fmt::join(missing, ", "), timeout.count()));
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      --accepted;
      continue;
    }
    set_socket_options(fd);
    frame hello;
    try {
      hello = receive_frame(fd, deadline);
    } catch (...) {
      ::close(fd);
      bootstrap_failure("a peer connected but sent no hello");
    }
    const auto it = std::find(child_ranks.begin(), child_ranks.end(), static_cast<int>(hello.header.origin));
    if (hello.header.type != static_cast<std::uint32_t>(frame_type::hello) || it == child_ranks.end() ||
        children_[static_cast<std::size_t>(it - child_ranks.begin())].fd >= 0) {
      ::close(fd);
      bootstrap_failure(fmt::format("unexpected connection claiming rank {}", hello.header.origin));
    }
    children_[static_cast<std::size_t>(it - child_ranks.begin())] = link{fd, *it};
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
}

tcp_tree::~tcp_tree() {
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd >= 0) ::close(l.fd);
    }
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string tcp_tree::describe(int rank) const {
  return fmt::format("rank {} ({})", rank, hosts_[static_cast<std::size_t>(rank)]);
}

void tcp_tree::fail(const std::string& message, int origin_rank, errc code) {
  // Tell every neighbour, so the failure reaches every rank instead of a deadline. Then close
  // gracefully: a close with unread data sends a reset, which can destroy the abort in flight.
  const auto deadline = clock::now() + std::chrono::milliseconds(200);
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      if (l.peer != origin_rank) {
        try {
          send_frame(l.fd, frame_type::abort, sequence_, origin_rank, "abort", "",
                     to_bytes(message), deadline);
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
  if (code == errc::timeout) throw timeout_error(message);
  throw error(code, message);
}

void tcp_tree::lost(const link& l, const std::string& why, const op_context& op) {
  // The peer may have sent an abort just before closing: its reason is the one to report.
  try {
    if (auto abort = abort_in(receive_frame(l.fd, clock::now() + std::chrono::milliseconds(100)))) {
      fail(abort->reason, abort->origin);
    }
  } catch (const link_closed&) {
  } catch (const link_timeout&) {
  }
  fail(fmt::format("{} closed its connection ({}) during {} at {}: the process died or exited",
                   describe(l.peer), why, op.name, op.site),
       l.peer);
}

std::vector<rank_bytes> tcp_tree::gather_up(std::span<const std::byte> mine, const op_context& op) {
  const auto deadline = clock::now() + op.timeout;
  std::vector<rank_bytes> entries;
  entries.push_back(rank_bytes{rank_, {mine.begin(), mine.end()}});

  std::vector<bool> done(children_.size(), false);
  std::size_t pending = children_.size();
  std::vector<pollfd> fds;
  while (pending > 0) {
    fds.clear();
    for (std::size_t i = 0; i < children_.size(); ++i) {
      fds.push_back(pollfd{done[i] ? -1 : children_[i].fd, POLLIN, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      std::vector<int> missing;
      for (std::size_t i = 0; i < children_.size(); ++i) {
        if (!done[i]) missing.insert(missing.end(), subtree_[i].begin(), subtree_[i].end());
      }
      std::sort(missing.begin(), missing.end());
      const auto message = fmt::format(
          "{} at {} timed out after {} ms on rank {}: rank(s) {} never arrived (at least one of "
          "them is late, stuck or in another collective)",
          op.name, op.site, op.timeout.count(), rank_, fmt::join(missing, ", "));
      fail(message, rank_, errc::timeout);
    }
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (done[i] || fds[i].revents == 0) continue;
      const auto& child = children_[i];
      frame f;
      std::vector<rank_bytes> under;
      try {
        f = receive_frame(child.fd, deadline);
        if (auto abort = abort_in(f)) fail(abort->reason, abort->origin);
        if (f.header.sequence != sequence_ || f.name != op.name || f.site != op.site) {
          fail(fmt::format(
                   "collectives out of step: {} is in {} #{} at {} while rank {} is in {} #{} at {}",
                   describe(child.peer), f.name, f.header.sequence, f.site, rank_, op.name, sequence_,
                   op.site),
               rank_);
        }
        under = parse_entries(f.payload);
      } catch (const link_closed& e) {
        lost(child, e.why, op);
      } catch (const link_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(child.peer), op.name, op.site),
             child.peer);
      }
      std::move(under.begin(), under.end(), std::back_inserter(entries));
      done[i] = true;
      --pending;
    }
  }
  return entries;
}

std::vector<rank_bytes> tcp_tree::all_gather(std::span<const std::byte> mine, const op_context& op) {
  ++sequence_;
  auto entries = gather_up(mine, op);
  const auto deadline = clock::now() + op.timeout;
  std::vector<std::byte> payload;
  if (!parent_link_.empty()) {
    const auto& parent = parent_link_.front();
    append_entries(payload, entries);
    try {
      send_frame(parent.fd, frame_type::up, sequence_, rank_, op.name, op.site, payload, deadline);
      frame f = receive_frame(parent.fd, deadline);
      if (auto abort = abort_in(f)) fail(abort->reason, abort->origin);
      payload = std::move(f.payload);
      entries = parse_entries(payload);
    } catch (const link_closed& e) {
      lost(parent, e.why, op);
    } catch (const link_timeout&) {
      const auto message = fmt::format(
          "{} at {} timed out after {} ms on rank {} waiting for the result from {}: some rank "
          "outside this rank's subtree never arrived",
          op.name, op.site, op.timeout.count(), rank_, describe(parent.peer));
      fail(message, rank_, errc::timeout);
    }
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    append_entries(payload, entries);
  }
  for (const auto& child : children_) {
    try {
      send_frame(child.fd, frame_type::down, sequence_, rank_, op.name, op.site, payload, deadline);
    } catch (const link_closed& e) {
      lost(child, e.why, op);
    } catch (const link_timeout&) {
      fail(fmt::format("{} stopped reading during {} at {}", describe(child.peer), op.name, op.site),
           child.peer);
    }
  }
  return entries;
}

}  // namespace jobkit::detail
