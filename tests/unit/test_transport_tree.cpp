// The tree route: contributions up to group rank 0 and the result back, across pretend nodes and
// through node-mates in shared memory (every collective, splits, large payloads, reduce_into in rank
// order); out of step, a throwing callable and a late node-mate named.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "../catch.hpp"
#include "support.hpp"
#include "transport_support.hpp"

using namespace std::chrono_literals;
using namespace jobkit::detail;
using test_support::contains;
using test_support::on_tcp_ranks;

TEST_CASE("the TCP tree over loopback: every collective, groups and splits", "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1, 1, 2, 2};  // 3 pretend nodes: leaders 0, 3 and 5
  const auto results = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    std::vector<int> got;
    got.push_back(g.all_reduce(g.rank(), jobkit::reduce_op::sum));
    got.push_back(g.broadcast(g.rank() * 10, {.root = 5}));
    const auto gathered = g.all_gather(std::string(static_cast<std::size_t>(g.rank()), 'x'));
    got.push_back(static_cast<int>(gathered.at(6).size()));
    got.push_back(g.scatter(std::vector<int>{10, 11, 12, 13, 14, 15, 16}, 3));
    got.push_back(g.all_reduce(std::string(1, static_cast<char>('a' + g.rank())),
                               [](const std::string& a, const std::string& b) { return a + b; }) == "abcdefg");
    auto half = g.split(g.rank() % 2, -g.rank());  // ordered by descending rank
    got.push_back(half->size());
    got.push_back(half->world_ranks().front());
    got.push_back(half->all_reduce(1, jobkit::reduce_op::sum));
    return got;
  });
  for (int r = 0; r < 7; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << o.error);
    REQUIRE(o.value);
    const int even = r % 2 == 0;
    CHECK(*o.value == std::vector<int>{21, 50, 6, 10 + r, 1, even ? 4 : 3, even ? 6 : 5, even ? 4 : 3});
  }
}

TEST_CASE("node-mates in shared memory: large payloads in both directions, every delivery, no name left",
          "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1, 0};  // rank 4 is rank 0's node-mate, after rank 3 of node 1
  const auto results = on_tcp_ranks(nodes, [](tcp_fabric& fabric, jobkit::group& g) {
    const auto text = [](int r, std::size_t size) { return std::string(size, static_cast<char>('a' + r)); };
    std::vector<std::size_t> got;
    // 100 KiB from each rank: past a slot's 7 KiB, through the data region both ways.
    const auto all = g.all_gather(text(g.rank(), 100 * 1024 + static_cast<std::size_t>(g.rank())));
    for (int r = 0; r < g.size(); ++r) got.push_back(all[static_cast<std::size_t>(r)] == text(r, 100 * 1024 + r));
    got.push_back(g.broadcast(text(2, 3 << 20), {.root = 2}) == text(2, 3 << 20));  // a node-mate's 3 MiB
    const auto gathered = g.gather(text(g.rank(), 9000), {.root = 4});
    got.push_back(g.rank() == 4 ? gathered.size() == 5 && gathered[3] == text(3, 9000) : gathered.empty());
    got.push_back(g.scatter(std::vector<std::string>{"0", "1", "2", "3", std::string(20000, '4')}, {.root = 1}) ==
                  (g.rank() == 4 ? std::string(20000, '4') : std::to_string(g.rank())));
    got.push_back(
        static_cast<std::size_t>(g.all_reduce(std::vector<int>(5000, g.rank()), jobkit::reduce_op::sum)[4999]));
    g.barrier();
    // The segments were unlinked once every node-mate had mapped them: their names are gone
    // while the groups still use them.
    const auto prefix = fabric.segment_prefix().substr(1) + "-";  // this step's, without the leading '/'
    std::size_t named = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
      named += entry.path().filename().string().starts_with(prefix);
    got.push_back(named);
    g.barrier();
    return got;
  });
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<std::size_t>{1, 1, 1, 1, 1, 1, 1, 1, 10, 0});
  }
}

TEST_CASE("node-mates in shared memory: out of step, a throwing callable, a late node-mate", "[transport]") {
  const std::vector<int> nodes{0, 0, 0, 1};
  const auto mismatch = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) return g.broadcast(1, {.root = 0, .timeout = 20s});
    g.barrier({.timeout = 20s});
    return 0;
  });
  for (const auto& o : mismatch) {
    INFO(o.error);
    CHECK(contains(o.error, "collectives out of step: "));
    CHECK(contains(o.error, "rank 2 (n0) is in broadcast(root 0) #2 at test_transport_tree.cpp:"));
    CHECK(contains(o.error, "rank 0 (n0) is in barrier #2 at test_transport_tree.cpp:"));
  }

  const auto thrown = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    return g.compute_and_broadcast([]() -> int { throw jobkit::error(jobkit::errc::io, "disk full"); }, {.root = 1});
  });
  CHECK(thrown[1].error == "disk full");  // the root gets its own exception back
  for (const int r : {0, 2, 3}) {
    CHECK(contains(thrown[static_cast<std::size_t>(r)].error, "the callable threw on rank 1 (n0): disk full"));
  }

  const auto late = on_tcp_ranks(nodes, [](tcp_fabric&, jobkit::group& g) {
    g.barrier();
    if (g.rank() == 2) std::this_thread::sleep_for(1500ms);
    g.barrier({.timeout = 500ms});
    return 0;
  });
  CHECK(late[0].code == jobkit::errc::timeout);
  INFO(late[0].error);
  CHECK(contains(late[0].error, "timed out after 500 ms on rank "));
  CHECK(contains(late[0].error, "(n0): rank(s) 2 never arrived"));
  for (const auto& o : late) CHECK(o.code == jobkit::errc::timeout);
}

TEST_CASE("reduce_into: in place, in rank order across nodes and node-mates; a signature that differs is named",
          "[transport]") {
  // 2x2 integer matrices multiplied: associative but not commutative, so the product shows the order.
  using matrix = std::array<std::int64_t, 4>;
  const auto times = [](const matrix& a, const matrix& b) {
    return matrix{a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2],
                  a[2] * b[1] + a[3] * b[3]};
  };
  const auto of_rank = [](int r) { return matrix{1, r + 1, r % 2, 1}; };
  const std::vector<int> nodes{0, 0, 1, 1, 1, 2};
  const auto results = on_tcp_ranks(nodes, [&](tcp_fabric&, jobkit::group& g) {
    std::vector<matrix> data(1000, of_rank(g.rank()));
    const auto* before = data.data();
    g.reduce_into(std::as_writable_bytes(std::span(data)),
                  [&](std::span<std::byte> acc, std::span<const std::byte> in) {
                    for (std::size_t i = 0; i < acc.size() / sizeof(matrix); ++i) {
                      matrix a;
                      matrix b;
                      std::memcpy(&a, acc.data() + i * sizeof(matrix), sizeof a);
                      std::memcpy(&b, in.data() + i * sizeof(matrix), sizeof b);
                      a = times(a, b);
                      std::memcpy(acc.data() + i * sizeof(matrix), &a, sizeof a);
                    }
                  });
    return std::make_pair(data.data() == before, std::set<matrix>(data.begin(), data.end()));
  });
  matrix product = of_rank(0);
  for (int r = 1; r < static_cast<int>(nodes.size()); ++r) product = times(product, of_rank(r));
  for (const auto& o : results) {
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(o.value->first);
    CHECK(o.value->second == std::set<matrix>{product});
  }
  const auto mismatched = on_tcp_ranks({0, 0, 1}, [](tcp_fabric&, jobkit::group& g) {
    std::vector<float> data(4, 1.0F);
    g.reduce_into(std::as_writable_bytes(std::span(data)), [](std::span<std::byte>, std::span<const std::byte>) {},
                  {.signature = g.rank() == 2 ? "int32[4]" : "float32[4]"});
    return true;
  });
  for (const auto& o : mismatched) {
    INFO(o.error);
    CHECK_FALSE(o.value);
    CHECK(contains(o.error, "rank 2 (n1)"));
    CHECK(contains(o.error, "reduce_into of int32[4]"));
    CHECK(contains(o.error, "reduce_into of float32[4]"));
  }
}
