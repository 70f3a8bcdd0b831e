// The across-node medium of the tree protocol alone: three node leaders as threads, linked by
// loopback TCP connections made here (no fabric, no handshake, no shared memory): group rank 0
// the root with children 1 and 2. Results up and down, a one-way broadcast with its receipts, and
// an abort or a closed link reaching the other leaders.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "../catch.hpp"
#include "owned_exchange.hpp"
#include "support.hpp"
#include "transport/frame.hpp"
#include "transport/tree_links.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::outcome;
using test_support::owned_exchange;

namespace {

int non_blocking(int fd) {
  REQUIRE(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
  return fd;
}

/// A connected pair of loopback TCP sockets, non-blocking as the fabric's are: {parent's end, child's end}.
std::pair<int, int> loopback_pair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t size = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &size) == 0);
  const int child = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(::connect(child, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const int parent = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  REQUIRE(parent >= 0);
  ::close(listener);
  return {non_blocking(parent), non_blocking(child)};
}

/// One leader: its share of the group's context and its links.
/// One node leader: its links, and what tcp_tree would do with an abort (its links' only).
struct leader final : abort_spreader {
  tree_context context;
  std::unique_ptr<tree_links> links;
  void spread_abort(const std::string& message, int origin, jobkit::errc code) noexcept override {
    if (context.broken.empty()) context.broken = message;
    if (links) links->spread_abort(message, origin, code);
  }
};

/// Runs fn(leader) on three threads: group rank 0 over ranks 1 and 2, each on its own node.
template <class F, class T = std::invoke_result_t<F&, leader&>>
std::vector<outcome<T>> on_leaders(F fn) {
  const auto [to_1, from_0_at_1] = loopback_pair();
  const auto [to_2, from_0_at_2] = loopback_pair();
  std::vector<outcome<T>> outcomes(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto& out = outcomes[static_cast<std::size_t>(r)];
      leader l;
      l.context.members = {0, 1, 2};
      l.context.hosts = {"n0", "n1", "n2"};
      l.context.rank = r;
      l.context.spreader = &l;
      if (r == 0) {
        l.links =
            std::make_unique<tree_links>(l.context, std::nullopt, std::vector<tree_links::link>{{to_1, 1}, {to_2, 2}},
                                         std::vector<std::vector<int>>{{1}, {2}});
      } else {
        const int fd = r == 1 ? from_0_at_1 : from_0_at_2;
        l.links = std::make_unique<tree_links>(l.context, tree_links::link{fd, 0}, std::vector<tree_links::link>{},
                                               std::vector<std::vector<int>>{});
      }
      try {
        out.value.emplace(fn(l));
      } catch (const jobkit::error& e) {
        out.error = e.what();
        out.code = e.code();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// An all_gather named `name` (unless the test sets another kind).
owned_exchange named(const std::string& name, std::span<const std::byte> mine, std::chrono::milliseconds t = 5s) {
  return owned_exchange(exchange_kind::all_gather, name, "test_tree_links.cpp:1", t, mine);
}

std::string text(const rank_bytes& e) {
  return fmt::format("{}:{}", e.rank, std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()));
}

/// The ordinary exchange of a leader with nothing on its node: gathers its subtree's entries, the
/// root finishes, the result comes back down. What this leader received.
std::vector<std::string> gather_and_return(leader& l, const exchange& ex) {
  const auto deadline = steady_clock::now() + ex.timeout;
  std::vector<rank_bytes> entries{rank_bytes{l.context.rank, {ex.mine->begin(), ex.mine->end()}}};
  tree_links::gather wait(*l.links, ex, deadline, entries);
  wait.finish();
  std::vector<std::byte> everyone;
  if (!l.links->root()) {
    entries = l.links->up_and_back(ex, deadline, entries, everyone);
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    everyone = all_entries(entries);
  }
  l.links->send_down(ex, deadline, entries, everyone);
  std::vector<std::string> got;
  for (const auto& e : entries) got.push_back(text(e));
  return got;
}

}  // namespace

TEST_CASE("tree_links: contributions go up to the root and the result comes down to every leader", "[transport]") {
  const auto results = on_leaders([](leader& l) {
    l.context.sequence = 1;
    const auto mine = fmt::format("leader {}", l.context.rank);
    return gather_and_return(l, named("all_gather", as_bytes(mine)));
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<std::string>{"0:leader 0", "1:leader 1", "2:leader 2"});
  }
}

TEST_CASE("tree_links: a broadcast goes down one way and the receipts come back", "[transport]") {
  const auto results = on_leaders([](leader& l) {
    std::vector<std::string> got;
    for (std::uint64_t n = 1; n <= 3; ++n) {
      l.context.sequence = n;
      const auto deadline = steady_clock::now() + 5s;
      const auto mine = fmt::format("broadcast {}", n);
      const auto owned = named("broadcast", as_bytes(mine));
      const exchange& ex = owned;
      tree_links::broadcast b;
      if (l.links->root()) {
        b.one_way = true;
        b.source_site = ex.site;
        b.entries.push_back(rank_bytes{0, {ex.mine->begin(), ex.mine->end()}});
        append_entries(b.everyone, {&b.entries.front()});
      } else {
        b = l.links->receive_broadcast(ex, deadline, [] {});
      }
      l.links->pass_on_broadcast(ex, deadline, b);
      got.push_back(fmt::format("{} {}", b.one_way, text(b.entries.at(0))));
    }
    // The receipts of every broadcast were owed to the root; an ordinary exchange follows them.
    l.context.sequence = 4;
    const auto mine = std::to_string(l.context.rank);
    for (auto& s : gather_and_return(l, named("all_gather", as_bytes(mine)))) got.push_back(s);
    return got;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<std::string>{"true 0:broadcast 1", "true 0:broadcast 2", "true 0:broadcast 3", "0:0",
                                               "1:1", "2:2"});
  }
}

TEST_CASE("tree_links: an abort from one leader and a closed link reach the others, with the cause", "[transport]") {
  SECTION("leader 2 aborts while the others wait") {
    const auto results = on_leaders([](leader& l) {
      l.context.sequence = 1;
      const auto mine = std::to_string(l.context.rank);
      const auto owned = named("all_gather", as_bytes(mine));
      const exchange& ex = owned;
      if (l.context.rank == 2) l.context.fail(ex, "leader 2 gave up", 2);
      return gather_and_return(l, ex);
    });
    for (const auto& o : results) {
      INFO(o.error);
      CHECK_FALSE(o.value);
      CHECK(o.code == jobkit::errc::peer_failure);
      // Named with each leader's own call, once.
      CHECK(contains(o.error, "all_gather at test_tree_links.cpp:1: leader 2 gave up"));
      CHECK_FALSE(contains(o.error, "test_tree_links.cpp:1: all_gather at"));
    }
  }
  SECTION("leader 1 closes its link without a word") {
    const auto results = on_leaders([](leader& l) {
      l.context.sequence = 1;
      if (l.context.rank == 1) {
        l.links.reset();
        return std::vector<std::string>{};
      }
      const auto mine = std::to_string(l.context.rank);
      return gather_and_return(l, named("all_gather", as_bytes(mine)));
    });
    for (int r : {0, 2}) {
      const auto& o = results[static_cast<std::size_t>(r)];
      INFO(o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "closed its connection"));
      CHECK(contains(o.error, "during all_gather"));
    }
  }
}
