// The one-way broadcast across nodes: the root runs ahead, leaders pass the bytes on, mismatch and
// lateness named, and a leader waiting for a late root still watches its children.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "support.hpp"
#include "transport_support.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::barrier_against_broadcast;
using test_support::check_root_that_left;
using test_support::contains;
using test_support::on_tcp_ranks;
using test_support::wait_for;

TEST_CASE("a broadcast across nodes goes one way: the root runs ahead, leaders pass it on, mismatch and lateness named",
          "[transport]") {
  // Leaders 0 (n0), 1 (n1), 2 (n2) and 6 (n3); leader 6 hangs under leader 2, so bytes are
  // passed on twice; the others are node-mates.
  const std::vector<int> nodes{0, 1, 2, 0, 1, 2, 3, 3};
  const auto text = [](int i) {
    return std::string(static_cast<std::size_t>(i % 9 == 0 ? 9'000 + i : i), 'a' + i % 26);
  };
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    int right = 0;
    // No barrier between them; every 9th is too large for one way and takes the tree.
    for (int i = 0; i < 300; ++i) {
      right += g.broadcast(g.rank() == 0 ? text(i) : std::string(), 0) == text(i);
      if (i % 37 == 0) right += g.all_reduce(1, jobkit::reduce_op::sum) == 8;
      if (i % 53 == 0) {
        std::vector<int> values(5000, g.rank() == 0 ? i : -1);
        g.broadcast_into(values, 0);
        right += values[4999] == i;
      }
    }
    return right;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 300 + 9 + 6);
  }

  // The root posts 5 broadcasts and returns from each while rank 7 (under leader 6, two hops
  // away) has not called any.
  std::atomic<bool> root_done{false};
  bool root_ran_ahead = false;
  const auto ahead = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 7) {
      root_ran_ahead = wait_for(root_done);
    }
    int sum = 0;
    for (int i = 0; i < 5; ++i) sum += g.broadcast(g.rank() == 0 ? i + 1 : 0, 0);
    if (g.rank() == 0) root_done = true;
    return sum;
  });
  for (const auto& o : ahead) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == 15);
  }
  CHECK(root_ran_ahead);

  // One rank in a barrier while the others broadcast: the root, a leader that passes the bytes
  // on, a leaf leader, a node-mate. Every rank learns of it (in this collective or its next),
  // as out of step, not at a deadline.
  for (const int odd : {0, 2, 6, 7}) {
    for (const auto& o : barrier_against_broadcast(nodes, odd)) {
      INFO("odd " << odd << ": " << o.error);
      CHECK_FALSE(o.value);
      CHECK(contains(o.error, "out of step"));
      CHECK(contains(o.error, "broadcast(root 0) #2 at transport_support.hpp:"));
      CHECK(contains(o.error, "barrier #2 at transport_support.hpp:"));
    }
  }

  check_root_that_left(nodes, 0);

  // A late root: the leaders and the node-mates time out, naming it.
  const auto late_root = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 0) std::this_thread::sleep_for(1500ms);
    return g.broadcast(1, {.root = 0, .timeout = 500ms});
  });
  CHECK_FALSE(late_root[0].value);  // the failures reached it, as aborts behind the receipts
  for (int r = 1; r < 8; ++r) {
    const auto& o = late_root[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << o.error);
    CHECK(o.code == jobkit::errc::timeout);
    // The root's node-mate (rank 3) waits for the root itself; the others for the bytes it passes on.
    CHECK(contains(o.error, r == 3 ? "rank(s) 0 never arrived" : "rank 0 or a rank between never arrived"));
  }
}

TEST_CASE("a leader waiting for a late root's broadcast still watches its children", "[transport]") {
  // Rank 6 (a leaf leader under leader 2) calls a barrier while the others broadcast; the root is
  // late. Leader 2 must name the mismatch before the root arrives, not wait for it.
  const std::vector<int> nodes{0, 1, 2, 0, 1, 2, 3, 3};
  std::atomic<bool> leader_failed{false};
  bool failed_before_root = false;
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 0) {
      failed_before_root = wait_for(leader_failed);
    }
    if (g.rank() == 6) {
      g.barrier();
      return 0;
    }
    try {
      g.broadcast(5, 0);
    } catch (const jobkit::error&) {
      if (g.rank() == 2) leader_failed = true;
      throw;
    }
    g.barrier({.timeout = 10s});  // where the ranks that got the bytes learn of it
    return 5;
  });
  CHECK(failed_before_root);
  const auto& leader = results[2];
  INFO(leader.error);
  CHECK(contains(leader.error, "collectives out of step"));
  CHECK(contains(leader.error, "rank 6 (n3) is in barrier #2 at test_transport_broadcast.cpp:"));
  CHECK(contains(leader.error, "broadcast(root 0) #2"));
  for (const auto& o : results) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
  }
}
