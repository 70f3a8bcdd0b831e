// The on-node medium of the tree protocol and the routes on one node, without links: threads of one
// process as the members of one node, meeting in a segment without the fabric (no sockets, no
// setup connections): the node exchange (each reading the others' parts, or the last arriver
// finishing), the node broadcast as mail, a leader gathering for a group that spans nodes, and the
// failures each names.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <latch>
#include <memory>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "../catch.hpp"
#include "core/embedder.hpp"
#include "owned_exchange.hpp"
#include "support.hpp"
#include "transport/frame.hpp"
#include "transport/routes.hpp"
#include "transport/tree_node.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::outcome;
using test_support::owned_exchange;

namespace {

/// One member: its share of the group's context, its tree_node, and what tcp_tree would do with an
/// abort (its node's only).
struct member final : abort_spreader {
  tree_context context;
  std::unique_ptr<tree_node> node;
  /// What a route runs on here: the segment, no links.
  route_media media() { return {context, node.get(), nullptr}; }
  void spread_abort(const std::string& message, int origin, jobkit::errc code) noexcept override {
    if (context.broken.empty()) context.broken = message;
    node->post_abort(origin, code, message);
  }
};

std::string segment_name(int test) { return fmt::format("/jobkit-test-tree-node-{}-{}", ::getpid(), test); }

/// Runs fn(member) on one thread per member of a group of `size` ranks all on one node, after the
/// leader created the segment and every member mapped it; what each got.
template <class F, class T = std::invoke_result_t<F&, member&>>
std::vector<outcome<T>> on_node(int size, const std::string& name, F fn) {
  std::vector<outcome<T>> outcomes(static_cast<std::size_t>(size));
  std::latch created(1), mapped(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto& out = outcomes[static_cast<std::size_t>(r)];
      member m;
      m.context.members.resize(static_cast<std::size_t>(size));
      std::iota(m.context.members.begin(), m.context.members.end(), 0);
      m.context.hosts.assign(static_cast<std::size_t>(size), "n0");
      m.context.rank = r;
      m.context.spreader = &m;
      m.node = std::make_unique<tree_node>(m.context, m.context.members, r);
      try {
        if (r == 0) {
          m.node->create(name);
          created.count_down();
        } else {
          created.wait();
          m.node->attach(name);
        }
        mapped.arrive_and_wait();
        m.node->start_watching();
        out.value.emplace(fn(m));
      } catch (const jobkit::error& e) {
        out.error = e.what();
        out.code = e.code();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// The exchange `name` of this rank (an all_gather unless said otherwise): its contribution is `bytes`.
owned_exchange contributing(const std::string& name, std::span<const std::byte> bytes,
                            std::chrono::milliseconds t = 5s) {
  return owned_exchange(exchange_kind::all_gather, name, "test_tree_node.cpp:1", t, bytes);
}

/// A barrier's exchange (it contributes and delivers nothing).
owned_exchange barrier_at(const std::string& site, std::chrono::milliseconds t) {
  return owned_exchange(exchange_kind::barrier, "barrier", site, t);
}

std::vector<std::byte> filled(std::size_t size, int rank) {
  return std::vector<std::byte>(size, static_cast<std::byte>(rank + 1));
}

}  // namespace

TEST_CASE("tree_node: each member reads the others' parts, or past a part the last to arrive finishes; no name left",
          "[transport]") {
  const auto name = segment_name(1);
  for (const std::size_t size : {std::size_t{16}, node_segment::inline_capacity + 1000}) {
    const auto results = on_node(4, name, [&](member& m) {
      m.context.sequence = 1;
      const auto mine = filled(size, m.context.rank);
      auto entries = node_exchange(m.media(), contributing("all_gather", mine));
      m.context.sequence = 2;
      // A barrier delivers nothing.
      if (!node_exchange(m.media(), barrier_at("test_tree_node.cpp:2", 5s)).empty()) entries.clear();
      return entries;
    });
    for (const auto& o : results) {
      INFO(o.error);
      REQUIRE(o.value);
      REQUIRE(o.value->size() == 4);
      for (int r = 0; r < 4; ++r) {
        CHECK((*o.value)[static_cast<std::size_t>(r)].rank == r);
        CHECK((*o.value)[static_cast<std::size_t>(r)].bytes == filled(size, r));
      }
    }
    // The leader unlinked the segment as soon as every member had mapped it.
    CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));
  }
}

TEST_CASE("tree_node: a broadcast goes one way as mail; collectives out of step are named", "[transport]") {
  std::vector<std::string> got(3);  // the broadcast, as each member took it
  const auto results = on_node(3, segment_name(2), [&got](member& m) {
    m.context.sequence = 1;
    const std::string text = "from rank 1";
    auto owned = contributing("broadcast", as_bytes(text));
    exchange& ex = owned.ex;
    ex.kind = exchange_kind::broadcast;
    ex.root = 1;
    if (m.context.rank != 1) ex.mine.reset();
    const auto entries = node_broadcast(m.media(), ex, true);
    if (entries && entries->size() == 1) {
      const auto& e = entries->front();
      got[static_cast<std::size_t>(m.context.rank)] =
          fmt::format("{}: {}", e.rank, std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()));
    }
    m.context.sequence = 2;
    const auto mine = filled(8, m.context.rank);
    node_exchange(m.media(), contributing(m.context.rank == 2 ? "all_reduce" : "all_gather", mine));
    return true;
  });
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(got[r] == "1: from rank 1");
    const auto& o = results[r];
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
    CHECK(contains(o.error, "all_reduce #2"));
    CHECK(contains(o.error, "all_gather #2"));
  }
}

TEST_CASE("tree_node: a leader gathers for a group that spans nodes and publishes; a missing node-mate is named",
          "[transport]") {
  const auto run = [](int late) {
    return on_node(3, segment_name(10 + late), [late](member& m) {
      m.context.sequence = 1;
      const auto mine = filled(node_segment::inline_capacity * (m.context.rank == 2 ? 2 : 0) + 4, m.context.rank);
      const auto owned = contributing("gather", mine, late >= 0 ? 500ms : 5s);
      const exchange& ex = owned;
      if (m.context.rank == late) std::this_thread::sleep_for(1500ms);
      if (!m.node->leader()) return node_mate_by_tree(m.media(), ex);
      int ticks = 0;
      struct no_links final : link_watch {
        int& ticks;
        member& m;
        const exchange& ex;
        no_links(int& t, member& mm, const exchange& e) : ticks(t), m(mm), ex(e) {}
        void tick() override { ++ticks; }
        [[noreturn]] void timed_out(std::vector<int> missing) override { m.context.never_arrived(ex, missing); }
      } links(ticks, m, ex);
      std::vector<rank_bytes> entries{rank_bytes{0, mine}};
      const auto used = m.node->await_mates(ex, steady_clock::now() + ex.timeout, links);
      for (int i = 1; i < 3; ++i) {
        const auto bytes = m.node->contribution(i, used);
        entries.push_back(rank_bytes{i, {bytes.begin(), bytes.end()}});
      }
      const auto everyone = all_entries(entries);
      m.node->publish(ex, entries, everyone);
      return entries;
    });
  };
  SECTION("every node-mate arrives") {
    for (const auto& o : run(-1)) {
      INFO(o.error);
      REQUIRE(o.value);
      REQUIRE(o.value->size() == 3);
      for (int r = 0; r < 3; ++r) {
        const auto size = node_segment::inline_capacity * (r == 2 ? 2 : 0) + 4;
        CHECK((*o.value)[static_cast<std::size_t>(r)].bytes == filled(size, r));
      }
    }
  }
  SECTION("node-mate 2 comes after the deadline") {
    const auto results = run(2);
    for (int r = 0; r < 2; ++r) {
      const auto& o = results[static_cast<std::size_t>(r)];
      INFO(o.error);
      CHECK(o.code == jobkit::errc::timeout);
      CHECK(contains(o.error, "rank(s) 2 never arrived"));
    }
  }
}

TEST_CASE("tree_node: a segment that cannot grow fails every member, naming the cause", "[transport]") {
  // A file size limit makes growing the segment's data region fail (EFBIG; SIGXFSZ ignored) for
  // the member that finishes, as a full /dev/shm would.
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  const auto results = on_node(3, segment_name(4), [&before](member& m) {
    rlimit small = before;
    small.rlim_cur = 256 * 1024;
    ::setrlimit(RLIMIT_FSIZE, &small);
    m.context.sequence = 1;
    const auto mine = filled(1 << 20, m.context.rank);
    return node_exchange(m.media(), contributing("all_gather", mine)).size();
  });
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  int named = 0;
  for (const auto& o : results) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    if (contains(o.error, "cannot grow the shared memory segment")) ++named;
  }
  CHECK(named >= 1);
}

namespace {
/// Set on a member's thread as a Python signal handler sets its flag: outside any blocking call,
/// so nothing returns EINTR. The interruption point must still see it.
thread_local bool handled_signal = false;
void raise_handled_signal() {
  if (!handled_signal) return;
  handled_signal = false;
  throw jobkit::error(jobkit::errc::internal, "interrupted by the hook");
}
}  // namespace

TEST_CASE("tree_node: a signal handled while a member was not blocked ends its wait within a slice", "[transport]") {
  set_interrupt_hook(raise_handled_signal);
  std::atomic<long long> waited_ms{-1};
  const auto results = on_node(3, segment_name(5), [&waited_ms](member& m) {
    m.context.sequence = 1;
    const auto barrier = barrier_at("test_tree_node.cpp:3", 2s);
    if (m.context.rank == 2) std::this_thread::sleep_for(1500ms);  // rank 1 waits for it
    if (m.context.rank == 1) handled_signal = true;
    const auto start = std::chrono::steady_clock::now();
    try {
      return node_exchange(m.media(), barrier).size();
    } catch (const jobkit::error&) {
      if (m.context.rank == 1) {
        waited_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      }
      throw;
    }
  });
  set_interrupt_hook(nullptr);
  INFO(results[1].error);
  CHECK_FALSE(results[1].value);
  CHECK(contains(results[1].error, "interrupted by the hook"));
  // A slice is 100 ms; the late member arrives at 1.5 s (generous slack for a loaded machine).
  CHECK(waited_ms >= 0);
  CHECK(waited_ms < 1200);
}
