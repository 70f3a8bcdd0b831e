// The buffer tree (broadcast_into and all_gather_into, src/transport/route_buffer_tree.cpp): buffer to
// buffer across pretend nodes and in shared memory; a size that differs, out of step and a late rank named.
#include <chrono>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "../catch.hpp"
#include "support.hpp"
#include "transport_support.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::late_rank_2;
using test_support::on_tcp_ranks;

TEST_CASE("bulk exchanges over the tree: buffer to buffer across nodes and in shared memory", "[transport]") {
  const std::vector<int> nodes{0, 0, 1, 2, 2, 0, 1};  // leaders 0, 2 and 3; cyclic node-mates
  const auto value = [](int from, std::size_t k) { return static_cast<std::uint32_t>(from * 1'000'003 + k); };
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    std::vector<int> ok;
    // Empty, inline in a slot, and several 1 MiB chunks with an odd tail, from a leader and a node-mate.
    for (const std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{700'001}}) {
      for (const int root : {0, 4, 6}) {
        std::vector<std::uint32_t> buffer(count, 0);
        if (g.rank() == root) {
          for (std::size_t k = 0; k < count; ++k) buffer[k] = value(root, k);
        }
        g.broadcast_into(buffer, root);
        bool same = true;
        for (std::size_t k = 0; k < count; ++k) same = same && buffer[k] == value(root, k);
        ok.push_back(same);
      }
      const std::size_t piece = count / 7 + 1;
      std::vector<std::uint32_t> mine(piece), all(piece * 7);
      for (std::size_t k = 0; k < piece; ++k) mine[k] = value(g.rank(), k);
      g.all_gather_into(mine, all);
      bool same = true;
      for (int r = 0; r < 7; ++r) {
        for (std::size_t k = 0; k < piece; ++k)
          same = same && all[static_cast<std::size_t>(r) * piece + k] == value(r, k);
      }
      ok.push_back(same);
    }
    ok.push_back(g.all_reduce(1, jobkit::reduce_op::sum));  // value collectives stay in step
    return ok;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7});
  }
}

TEST_CASE("bulk exchanges: a size that differs on one rank fails every rank, naming it", "[transport]") {
  for (const int odd : {1, 2}) {  // a node-mate of the leader, then another node's leader
    const auto results = on_tcp_ranks({0, 0, 1}, [&](tcp_fabric&, jobkit::group& g) {
      std::vector<char> buffer(g.rank() == odd ? 101 : 100);
      g.broadcast_into(buffer, 0);
      return true;
    });
    for (const auto& o : results) {
      INFO(o.error);
      CHECK_FALSE(o.value);
      CHECK(o.code == jobkit::errc::invalid_argument);
      CHECK(contains(o.error, fmt::format("rank {} (", odd)));
      CHECK(contains(o.error, "passed a buffer of 101 bytes but rank 0 ("));
    }
  }
}

TEST_CASE("bulk exchanges: out of step with a value collective, and a late rank, are named", "[transport]") {
  const auto results = on_tcp_ranks({0, 0, 1}, [](tcp_fabric&, jobkit::group& g) {
    std::vector<char> buffer(64);
    if (g.rank() == 1) {
      g.barrier();
    } else {
      g.broadcast_into(buffer, 0);
    }
    return true;
  });
  for (const auto& o : results) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "collectives out of step"));
    CHECK(contains(o.error, "barrier"));
    CHECK(contains(o.error, "broadcast_into(root 0)"));
  }
  const auto late = late_rank_2(
      {0, 1, 1},
      [](jobkit::group& g) {
        std::vector<int> all(3);
        g.all_gather_into(std::vector<int>{g.rank()}, all, {.timeout = 500ms});
      },
      "all_gather_into at");
  CHECK(contains(late, "rank(s) 2 never arrived"));
}
