// Collective semantics on groups of threads over the real data path (inprocess_groups.hpp, one
// node): results, roots, user callables, failures, deadlines. Across nodes and processes: tests/launched.
#include "jobkit/collectives.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "../catch.hpp"
#include "collectives/group_state.hpp"
#include "core/timeout.hpp"
#include "jobkit/runtime.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using jobkit::group;
using jobkit::reduce_op;
using test_support::contains;
using test_support::on_ranks;

namespace {

/// A group_connector double: counts its calls, fails the first `failures` of them with `code`,
/// and connects the group over a single-rank link otherwise.
class counting_connector final : public jobkit::detail::group_connector {
 public:
  counting_connector(int& calls, int failures, jobkit::errc code) : calls_(calls), failures_(failures), code_(code) {}
  void connect(jobkit::detail::group_state& state, const jobkit::detail::time_bound&) override {
    if (++calls_ <= failures_) throw jobkit::error(code_, "the endpoints never came", 7);
    auto connected = jobkit::detail::make_single_rank_group_state(0, "node-a");
    state.link = std::move(connected->link);
    state.hosts = connected->hosts;
    state.local_ranks = connected->local_ranks;
  }

 private:
  int& calls_;
  int failures_;
  jobkit::errc code_;
};

/// A group_connector double that fails as a library under jobkit might: not with a jobkit::error.
class foreign_failure_connector final : public jobkit::detail::group_connector {
 public:
  explicit foreign_failure_connector(int& calls) : calls_(calls) {}
  void connect(jobkit::detail::group_state&, const jobkit::detail::time_bound&) override {
    ++calls_;
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), "no thread");
  }

 private:
  int& calls_;
};

/// A single-rank group whose data path is pending, set up by a counting_connector.
group pending_group(int& calls, int failures, jobkit::errc code = jobkit::errc::timeout) {
  auto state = std::make_shared<jobkit::detail::group_state>();
  state->world_ranks = {0};
  state->phase = jobkit::detail::group_phase::pending;
  state->pending = std::make_unique<counting_connector>(calls, failures, code);
  return jobkit::detail::group_over(state);
}

}  // namespace

TEST_CASE("a pending group connects in its first collective, once", "[collectives]") {
  int calls = 0;
  auto g = pending_group(calls, 0);
  CHECK(calls == 0);
  g.barrier();
  CHECK(calls == 1);
  CHECK(g.all_reduce(2, reduce_op::sum) == 2);
  g.setup();
  CHECK(calls == 1);
}

TEST_CASE("a setup that fails with another exception fails the group for good too", "[collectives]") {
  int calls = 0;
  auto state = std::make_shared<jobkit::detail::group_state>();
  state->world_ranks = {0};
  state->phase = jobkit::detail::group_phase::pending;
  state->pending = std::make_unique<foreign_failure_connector>(calls);
  auto g = jobkit::detail::group_over(state);
  for (const auto* expected : {"setting up the data path: no thread", "unusable after an earlier failure"}) {
    try {
      g.barrier();
      FAIL("a group whose setup failed ran a collective");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::internal);
      CHECK(contains(e.what(), expected));
    }
  }
  CHECK(calls == 1);
}

TEST_CASE("a group whose setup failed stays failed, naming the first failure", "[collectives]") {
  for (const auto code : {jobkit::errc::timeout, jobkit::errc::peer_failure}) {
    int calls = 0;
    auto g = pending_group(calls, 1, code);
    try {
      g.barrier();
      FAIL("the setup's failure did not reach the caller");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == code);
      CHECK(e.native_status() == 7);
      CHECK((dynamic_cast<const jobkit::timeout_error*>(&e) != nullptr) == (code == jobkit::errc::timeout));
      CHECK(contains(e.what(), "barrier at "));
      CHECK(contains(e.what(), "setting up the data path: the endpoints never came"));
    }
    // Never retried: the setup's fence and key are spent, a retry could not match the other ranks.
    for (int i = 0; i < 2; ++i) {
      try {
        g.broadcast(1);
        FAIL("a failed group ran a collective");
      } catch (const jobkit::error& e) {
        CHECK(e.code() == code);
        CHECK(e.native_status() == 7);
        CHECK(contains(e.what(), "this group is unusable after an earlier failure: barrier at "));
        // The class of its code, as the first time: a timeout_error is caught as one.
        CHECK((dynamic_cast<const jobkit::timeout_error*>(&e) != nullptr) == (code == jobkit::errc::timeout));
        CHECK(contains(e.what(), "the endpoints never came"));
      }
    }
    CHECK(calls == 1);
  }
}

TEST_CASE("a single rank gets identity results without a launcher", "[collectives]") {
  auto& world = jobkit::world();
  REQUIRE(world.size() == 1);
  REQUIRE(world.rank() == 0);
  world.barrier();
  CHECK(jobkit::broadcast(std::string("x")) == "x");
  CHECK(jobkit::gather(2.5) == std::vector<double>{2.5});
  CHECK(jobkit::all_gather(7) == std::vector<int>{7});
  CHECK(jobkit::all_reduce(0.1, reduce_op::sum) == 0.1);
  CHECK(jobkit::scatter(std::vector<std::string>{"only"}) == "only");
  int calls = 0;
  CHECK(jobkit::compute_and_broadcast([&] { return ++calls; }) == 1);
  CHECK(calls == 1);
  CHECK(jobkit::gather_from_all_ranks([] { return 3; }) == std::vector<int>{3});
  CHECK(jobkit::reduce_and_broadcast([] { return 4; }, [](std::vector<int> v) { return v.size(); }) == 1u);
  CHECK_THROWS_AS(jobkit::broadcast(1, 1), jobkit::error);
}

TEST_CASE("broadcast, gather and all_gather deliver the right values to the right ranks", "[collectives]") {
  auto results = on_ranks(4, [](group& g) {
    const auto from_two = g.broadcast(std::string(static_cast<std::size_t>(g.rank()) + 1, 'a' + g.rank()), 2);
    const auto gathered = g.gather(std::vector<int>(static_cast<std::size_t>(g.rank()), g.rank()), 1);
    const auto all = g.all_gather(std::to_string(g.rank() * 10));
    return std::make_tuple(from_two, gathered, all);
  });
  for (int r = 0; r < 4; ++r) {
    const auto& value = results[static_cast<std::size_t>(r)].value;
    REQUIRE(value);
    CHECK(std::get<0>(*value) == "ccc");
    if (r == 1) {
      CHECK(std::get<1>(*value) == std::vector<std::vector<int>>{{}, {1}, {2, 2}, {3, 3, 3}});
    } else {
      CHECK(std::get<1>(*value).empty());
    }
    CHECK(std::get<2>(*value) == std::vector<std::string>{"0", "10", "20", "30"});
  }
}

TEST_CASE("all_reduce is exact, in rank order, identical everywhere", "[collectives]") {
  auto results = on_ranks(5, [](group& g) {
    const std::int64_t big = (std::int64_t{1} << 53) + g.rank();  // beyond float32 and float64 mantissas
    return std::vector<std::int64_t>{g.all_reduce(big, reduce_op::sum),
                                     g.all_reduce(std::int64_t{g.rank() + 1}, reduce_op::prod),
                                     g.all_reduce(std::int64_t{10 - g.rank()}, reduce_op::min),
                                     g.all_reduce(std::int64_t{g.rank()}, reduce_op::max),
                                     g.all_reduce(std::int64_t{0b111} << g.rank(), reduce_op::band),
                                     g.all_reduce(std::int64_t{1} << g.rank(), reduce_op::bor),
                                     g.all_reduce(std::int64_t{3}, reduce_op::bxor)};
  });
  const std::int64_t expected_sum = 5 * (std::int64_t{1} << 53) + 10;
  for (const auto& r : results) {
    REQUIRE(r.value);
    CHECK(*r.value == std::vector<std::int64_t>{expected_sum, 120, 6, 4, 0, 0b11111, 3});
  }

  auto doubles = on_ranks(4, [](group& g) {
    return g.all_reduce(std::vector<double>{0.1 * g.rank(), 1e16, -1e16 * (g.rank() == 3)}, reduce_op::sum);
  });
  std::vector<double> expected{0.0, 1e16, 0.0};
  for (int r = 1; r < 4; ++r) {
    expected[0] += 0.1 * r;
    expected[1] += 1e16;
    expected[2] += -1e16 * (r == 3);
  }
  for (const auto& r : doubles) {
    REQUIRE(r.value);
    CHECK(*r.value == expected);  // bitwise: every rank sums in rank order
  }
}

TEST_CASE("avg is the sum divided by the size, the same bits on every rank", "[collectives]") {
  auto results = on_ranks(3, [](group& g) {
    return std::vector<double>{g.all_reduce(0.1 * (g.rank() + 1), reduce_op::avg),
                               g.all_reduce(std::vector<double>{1.0 * g.rank(), 3.0}, reduce_op::avg).at(0)};
  });
  for (const auto& r : results) {
    REQUIRE(r.value);
    CHECK(r.value->at(0) == (0.1 * 1 + 0.1 * 2 + 0.1 * 3) / 3);  // folded in rank order
    CHECK(r.value->at(1) == 1.0);
  }
}

TEST_CASE("reduce_op's names, one table", "[collectives]") {
  for (const auto op : {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max, reduce_op::band,
                        reduce_op::bor, reduce_op::bxor, reduce_op::avg}) {
    CHECK(jobkit::reduce_op_of(jobkit::to_string(op)) == op);
  }
  CHECK_THROWS_WITH(jobkit::reduce_op_of("mean"),
                    Catch::Contains("op='mean' is not one of sum, prod, min, max, band, bor, bxor, avg"));
  using jobkit::detail::reduced_as;
  CHECK(jobkit::detail::reduce_op_refusal(reduce_op::band, reduced_as::integral).empty());
  CHECK_FALSE(jobkit::detail::reduce_op_refusal(reduce_op::band, reduced_as::floating).empty());
  CHECK_FALSE(jobkit::detail::reduce_op_refusal(reduce_op::avg, reduced_as::integral).empty());
  CHECK(jobkit::detail::reduce_op_refusal(reduce_op::avg, reduced_as::complex).empty());
  CHECK_FALSE(jobkit::detail::reduce_op_refusal(reduce_op::max, reduced_as::complex).empty());
}

TEST_CASE("all_reduce refuses what cannot be reduced, on every rank", "[collectives]") {
  auto bitwise = on_ranks(2, [](group& g) { return g.all_reduce(1.5, reduce_op::bxor); });
  for (const auto& r : bitwise) {
    CHECK(r.code == jobkit::errc::invalid_argument);
    CHECK(contains(r.error, "all_reduce: op=bxor on a floating-point type: bitwise ops"));
  }
  auto average = on_ranks(2, [](group& g) { return g.all_reduce(3, reduce_op::avg); });
  for (const auto& r : average) {
    CHECK(r.code == jobkit::errc::invalid_argument);
    CHECK(contains(r.error, "all_reduce: op=avg on an integral type: avg takes floating-point"));
  }
  auto lengths =
      on_ranks(3, [](group& g) { return g.all_reduce(std::vector<int>(g.rank() == 2 ? 4u : 3u, 1), reduce_op::sum); });
  for (const auto& r : lengths) {
    CHECK_FALSE(r.value);
    INFO(r.error);
    CHECK(contains(r.error, "rank 0 (n0) passed 3 elements but rank 2 (n0) passed 4"));
  }
}

TEST_CASE("scatter gives each rank its own value and checks the count on the root", "[collectives]") {
  auto results = on_ranks(3, [](group& g) {
    std::vector<std::string> values;
    if (g.rank() == 1) values = {"zero", "one", "two"};
    return g.scatter(values, 1);
  });
  CHECK(*results[0].value == "zero");
  CHECK(*results[1].value == "one");
  CHECK(*results[2].value == "two");

  auto wrong = on_ranks(3, [](group& g) { return g.scatter(std::vector<int>{1, 2}, 0); });
  for (const auto& r : wrong) CHECK(contains(r.error, "passed 2 values for a group of 3 ranks"));
}

TEST_CASE("compute_and_broadcast runs fn on the root only; its exception reaches every rank", "[collectives]") {
  std::atomic<int> calls{0};
  auto results = on_ranks(
      4, [&](group& g) { return g.compute_and_broadcast([&] { return std::to_string(++calls) + " from root"; }, 3); });
  CHECK(calls == 1);
  for (const auto& r : results) CHECK(*r.value == "1 from root");

  auto failing = on_ranks(
      4, [](group& g) { return g.compute_and_broadcast([]() -> int { throw std::runtime_error("disk full"); }, 1); });
  CHECK(failing[1].std_exception);  // the root gets its own exception back
  CHECK(failing[1].error == "disk full");
  for (int r : {0, 2, 3}) {
    CHECK(failing[static_cast<std::size_t>(r)].code == jobkit::errc::peer_failure);
    INFO(failing[static_cast<std::size_t>(r)].error);
    CHECK(contains(failing[static_cast<std::size_t>(r)].error, "the callable threw on rank 1 (n0): disk full"));
  }
}

TEST_CASE("gather_from_all_ranks and reduce_and_broadcast with a user reduction", "[collectives]") {
  auto gathered = on_ranks(3, [](group& g) { return g.gather_from_all_ranks([&] { return g.rank() * 1.5; }, 2); });
  CHECK(gathered[0].value->empty());
  CHECK(*gathered[2].value == std::vector<double>{0.0, 1.5, 3.0});

  std::atomic<int> reductions{0};
  auto reduced = on_ranks(4, [&](group& g) {
    return g.reduce_and_broadcast([&] { return std::string(1, 'a' + g.rank()); },
                                  [&](std::vector<std::string> parts) {
                                    ++reductions;
                                    return std::accumulate(parts.rbegin(), parts.rend(), std::string());
                                  });
  });
  CHECK(reductions == 1);
  for (const auto& r : reduced) CHECK(*r.value == "dcba");

  auto throwing = on_ranks(3, [](group& g) {
    return g.reduce_and_broadcast([] { return 1; },
                                  [](std::vector<int>) -> int { throw std::logic_error("bad reduce"); });
  });
  for (const auto& r : throwing) {
    CHECK_FALSE(r.value);
    CHECK(contains(r.error, "bad reduce"));
  }
}

TEST_CASE("different collectives on different ranks are reported with both call sites", "[collectives]") {
  // A broadcast's root goes on without waiting (one way, as MPI_Bcast may): the ranks that wait
  // find the mismatch, and the root finds it in its next collective at the latest.
  auto results = on_ranks(3, [](group& g) {
    if (g.rank() == 0) return g.broadcast(1);
    g.barrier();
    return 0;
  });
  CHECK(results[0].value == 1);
  for (int r : {1, 2}) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO(o.error);
    CHECK(o.code == jobkit::errc::peer_failure);
    CHECK(contains(o.error, "collectives out of step"));
    CHECK(contains(o.error, "in barrier #1 at test_collectives.cpp:"));
    CHECK(contains(o.error, "in broadcast(root 0) #1 at test_collectives.cpp:"));
  }
  // Every rank a root of its own broadcast: each goes on, and the next collective finds it.
  auto roots = on_ranks(2, [](group& g) {
    const int value = g.broadcast(1, g.rank());
    g.barrier();
    return value;
  });
  for (const auto& r : roots) {
    INFO(r.error);
    CHECK(r.code == jobkit::errc::peer_failure);
    CHECK(contains(r.error, "collectives out of step"));
    CHECK(contains(r.error, "is in broadcast(root 1) #1 at test_collectives.cpp:"));
    CHECK(contains(r.error, "is in broadcast(root 0) #1 at test_collectives.cpp:"));
  }
}

TEST_CASE("a rank that never arrives is named in a timeout_error", "[collectives]") {
  const auto start = std::chrono::steady_clock::now();
  auto results = on_ranks(4, [](group& g) {
    if (g.rank() != 3) g.barrier({.timeout = 200ms});
    return 0;
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (int r = 0; r < 3; ++r) {
    CHECK(results[static_cast<std::size_t>(r)].code == jobkit::errc::timeout);
    CHECK(contains(results[static_cast<std::size_t>(r)].error, "rank(s) 3 never arrived"));
    CHECK(contains(results[static_cast<std::size_t>(r)].error, "barrier at test_collectives.cpp:"));
  }
  CHECK(results[3].value);
}

TEST_CASE("bad arguments name themselves", "[collectives]") {
  auto& world = jobkit::world();
  try {
    world.broadcast(1, 5);
    FAIL("root 5 accepted");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_argument);
    CHECK(contains(e.what(), "broadcast: root=5"));
  }
  CHECK_THROWS_WITH(world.barrier({.timeout = -1ms}), Catch::Contains("timeout=-1 ms"));
}

TEST_CASE("rooted collectives take the root in their options", "[collectives]") {
  auto results = on_ranks(4, [](group& g) {
    std::vector<int> got;
    got.push_back(g.broadcast(g.rank() * 10, {.root = 2, .timeout = 5s}));
    const auto gathered = g.gather(g.rank(), {.root = 3});
    got.push_back(static_cast<int>(gathered.size()));
    got.push_back(g.scatter(std::vector<int>{5, 6, 7, 8}, {.root = 1}));
    got.push_back(g.compute_and_broadcast([&] { return g.rank() + 100; }, {.root = 3}));
    got.push_back(static_cast<int>(g.gather_from_all_ranks([&] { return g.rank(); }, {.root = 1}).size()));
    return got;
  });
  for (int r = 0; r < 4; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    INFO(o.error);
    REQUIRE(o.value);
    CHECK(*o.value == std::vector<int>{20, r == 3 ? 4 : 0, 5 + r, 103, r == 1 ? 4 : 0});
  }
}

TEST_CASE("all_reduce with a user operation folds in rank order, on any sendable type", "[collectives]") {
  struct best {
    double loss;
    int rank;
  };
  auto results = on_ranks(5, [](group& g) {
    const auto text =
        g.all_reduce(std::to_string(g.rank()), [](const std::string& a, const std::string& b) { return a + b; });
    const auto lowest = g.all_reduce(best{10.0 - g.rank() % 3, g.rank()},
                                     [](const best& a, const best& b) { return b.loss < a.loss ? b : a; });
    return text + "/" + std::to_string(lowest.rank);
  });
  for (const auto& r : results) CHECK(r.value == "01234/2");  // loss 8.0 first reached by rank 2
  auto throwing = on_ranks(3, [](group& g) {
    return g.all_reduce(g.rank(), [](int, int) -> int { throw std::runtime_error("bad combine"); });
  });
  for (const auto& r : throwing) CHECK(contains(r.error, "bad combine"));
}

TEST_CASE("abort on a group of one tells nobody: the group stays usable", "[collectives]") {
  auto mine = jobkit::world().split(3, 0);
  REQUIRE(mine);
  mine->abort("nothing to undo");
  mine->barrier();
  CHECK(mine->all_reduce(5, reduce_op::sum) == 5);
  CHECK(mine->broadcast(std::string("still"), {.root = 0}) == "still");
}

TEST_CASE("split of a one-rank group, and a negative color", "[collectives]") {
  auto& world = jobkit::world();
  auto mine = world.split(7, 0);
  REQUIRE(mine);
  CHECK(mine->size() == 1);
  CHECK(mine->all_reduce(4, reduce_op::sum) == 4);
  CHECK_FALSE(world.split(-1, 0));
}

TEST_CASE("JOBKIT_TIMEOUT is seconds, positive, and named when wrong", "[collectives]") {
  using jobkit::parse_timeout;
  CHECK(parse_timeout("JOBKIT_TIMEOUT", "90") == 90s);
  CHECK(parse_timeout("JOBKIT_TIMEOUT", "2.5") == 2500ms);
  for (const char* bad : {"", "abc", "0", "-1", "10s", "inf", "nan", "1e300"}) {
    CHECK_THROWS_WITH(parse_timeout("JOBKIT_TIMEOUT", bad),
                      Catch::Contains(std::string("JOBKIT_TIMEOUT='") + bad + "'"));
  }
}

TEST_CASE("a timeout and a duration in seconds keep one rule; only a duration may be 0", "[collectives]") {
  using jobkit::detail::duration_from_seconds;
  using jobkit::detail::timeout_from_seconds;
  CHECK(timeout_from_seconds(2.5) == 2500ms);
  CHECK(timeout_from_seconds(0.0001) == 1ms);  // rounded up
  CHECK(timeout_from_seconds(1e9) == std::chrono::seconds(1'000'000'000));
  CHECK(duration_from_seconds(0) == 0ms);
  CHECK(duration_from_seconds(2.5) == 2500ms);
  CHECK(duration_from_seconds(1e9) == std::chrono::seconds(1'000'000'000));
  CHECK_FALSE(timeout_from_seconds(0));
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const double bad : {-1.0, -inf, nan, inf, 1e300, 1e9 + 1}) {
    INFO(bad);
    CHECK_FALSE(timeout_from_seconds(bad));
    CHECK_FALSE(duration_from_seconds(bad));
  }
}

TEST_CASE("broadcast_into and all_gather_into write into the caller's buffers", "[collectives]") {
  auto results = on_ranks(3, [](group& g) {
    std::vector<double> buffer(5, g.rank() == 1 ? 1.5 : 0.0);
    g.broadcast_into(buffer, 1);
    std::array<int, 6> all{};
    const std::vector<int> mine{g.rank(), 10 * g.rank()};
    g.all_gather_into(mine, all);
    std::array<int, 6> in_place{};
    in_place[static_cast<std::size_t>(2 * g.rank())] = g.rank() + 100;
    g.all_gather_into(std::span(in_place).subspan(static_cast<std::size_t>(2 * g.rank()), 2), in_place);
    return std::make_tuple(buffer, all, in_place);
  });
  for (const auto& r : results) {
    INFO(r.error);
    REQUIRE(r.value);
    CHECK(std::get<0>(*r.value) == std::vector<double>(5, 1.5));
    CHECK(std::get<1>(*r.value) == std::array<int, 6>{0, 0, 1, 10, 2, 20});
    CHECK(std::get<2>(*r.value) == std::array<int, 6>{100, 0, 101, 0, 102, 0});
  }
  const auto single = [] {
    std::vector<char> buffer{'a', 'b'};
    jobkit::broadcast_into(buffer);
    return buffer;
  }();
  CHECK(single == std::vector<char>{'a', 'b'});
}

TEST_CASE("bulk collectives check their sizes, on every rank", "[collectives]") {
  auto results = on_ranks(3, [](group& g) {
    std::vector<char> buffer(g.rank() == 2 ? 8 : 4);
    g.broadcast_into(buffer, 0);
    return true;
  });
  for (const auto& r : results) {
    CHECK_FALSE(r.value);
    INFO(r.error);
    CHECK(r.code == jobkit::errc::invalid_argument);
    CHECK(contains(r.error, "passed a buffer of 4 bytes but rank 2 (n0) one of 8 bytes") !=
          contains(r.error, "rank 2 (n0) passed a buffer of 8 bytes but"));
    CHECK(contains(r.error, "every member must pass the same size"));
  }
  std::vector<int> mine{1, 2}, all(3);
  CHECK_THROWS_WITH(jobkit::all_gather_into(mine, all),
                    Catch::Contains("all holds 12 bytes, not size() * mine = 1 * 8"));
}
