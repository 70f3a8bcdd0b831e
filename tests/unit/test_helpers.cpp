// Who-runs-what helpers on a single rank (no launcher): results, void callables, exceptions,
// the nesting rule and fs_local_rank's overrides. Multi-rank behaviour: tests/launched/helpers.sh.
#include "jobkit/helpers.hpp"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "../catch.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using test_support::contains;

}  // namespace

TEST_CASE("a single rank runs every helper's callable exactly once", "[helpers]") {
  int calls = 0;
  CHECK(jobkit::main_process_only([&] { return ++calls; }) == 1);
  CHECK(jobkit::master_only([&] { return std::string("m"); }) == "m");
  jobkit::main_process_only([&] { ++calls; });
  CHECK(calls == 2);

  CHECK(jobkit::once_per_node([&] { return ++calls; }) == 3);
  CHECK(jobkit::once_per_node([&] { ++calls; }) == true);

  int posts = 0;
  CHECK(jobkit::run_on_main([&] { return 7; }, [&] { ++posts; }) == 7);
  CHECK(posts == 0);  // the main rank does not run post_fn unless run_post_on_main
  CHECK(jobkit::run_on_main([&] { return 8; }, [&] { ++posts; }, true) == 8);
  CHECK(posts == 1);

  CHECK(jobkit::run_once_per_node([] { return 1; }, [] { return 2; }) == 1);
  CHECK(jobkit::run_once_per_node([] { return 1; }, [] { return 2; }, true) == 2);  // post_fn's result replaces it

  CHECK(jobkit::zero_first([&] { return ++calls; }) == 5);
  CHECK(jobkit::local_zero_first([&] { return ++calls; }) == 6);
  CHECK(jobkit::do_n_at_a_time([&] { return ++calls; }) == 7);
  CHECK(jobkit::do_n_at_a_time([&] { return ++calls; }, 3) == 8);
}

TEST_CASE("helpers take designated-initialiser options; the positional seed forms still work", "[helpers]") {
  int posts = 0;
  CHECK(jobkit::run_on_main([] { return 1; }, [&] { ++posts; }, {.run_post_on_main = true, .timeout = 5s}) == 1);
  CHECK(posts == 1);
  CHECK(jobkit::run_on_main([] { return 2; }, [&] { ++posts; }, {}) == 2);
  CHECK(posts == 1);
  CHECK(jobkit::run_once_per_node([] { return 1; }, [] { return 2; }, {.run_post_on_all = true}) == 2);
  CHECK(jobkit::run_once_per_node([] { return 1; }, [] { return 2; }, {.timeout = 5s}) == 1);
  CHECK(jobkit::do_n_at_a_time([] { return 3; }, {.n = 2, .timeout = 5s}) == 3);
  CHECK_THROWS_WITH(jobkit::do_n_at_a_time([] {}, {.n = 0}), Catch::Contains("do_n_at_a_time: n=0 must be at least 1"));
}

TEST_CASE("every helper applies the one timeout policy: negative is refused, naming the call", "[helpers]") {
  CHECK_THROWS_WITH(jobkit::zero_first([] {}, {.timeout = -5ms}), Catch::Contains("timeout=-5 ms is negative"));
  CHECK_THROWS_WITH(jobkit::run_on_main([] {}, [] {}, {.timeout = -5ms}), Catch::Contains("timeout=-5 ms is negative"));
  CHECK_THROWS_WITH(jobkit::make_group({0}, {.timeout = -5ms}), Catch::Contains("make_group: timeout=-5 ms"));
}

TEST_CASE("an exception from the callable reaches the caller unchanged", "[helpers]") {
  CHECK_THROWS_WITH(jobkit::main_process_only([]() -> int { throw std::runtime_error("no data"); }), "no data");
  CHECK_THROWS_WITH(jobkit::zero_first([]() -> int { throw std::runtime_error("bad download"); }), "bad download");
  CHECK_THROWS_WITH(jobkit::do_n_at_a_time([] { throw std::runtime_error("upload failed"); }), "upload failed");
}

TEST_CASE("do_n_at_a_time refuses n below 1, naming it", "[helpers]") {
  CHECK_THROWS_WITH(jobkit::do_n_at_a_time([] {}, 0), Catch::Contains("do_n_at_a_time: n=0 must be at least 1"));
}

TEST_CASE("nesting: allowed nestings run directly, the others fail at once", "[helpers]") {
  // Inside main_process_only everything nested runs on the main rank, directly.
  CHECK(jobkit::main_process_only([] { return jobkit::zero_first([] { return 4; }); }) == 4);
  CHECK(jobkit::main_process_only([] { return *jobkit::once_per_node([] { return 5; }); }) == 5);
  // A barrier of a single-rank group is reachable.
  jobkit::main_process_only([] { jobkit::barrier(); });
  // once_per_node inside once_per_node runs directly; zero_first inside it would wait for ranks
  // that never come.
  CHECK(**jobkit::once_per_node([] { return jobkit::once_per_node([] { return 6; }); }) == 6);
  try {
    jobkit::once_per_node([] { return jobkit::zero_first([] { return 1; }); });
    FAIL("zero_first inside once_per_node was accepted");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_argument);
    CHECK(contains(e.what(), "zero_first at test_helpers.cpp:"));
    CHECK(contains(e.what(), "is called inside once_per_node at test_helpers.cpp:"));
  }
  CHECK_THROWS_WITH(jobkit::do_n_at_a_time([] { return jobkit::main_process_only([] { return 1; }); }),
                    Catch::Contains("main_process_only at test_helpers.cpp:"));
}

TEST_CASE("fs_local_rank: a single rank is its file system's writer; overrides win", "[helpers]") {
  const auto dir = std::filesystem::temp_directory_path();
  unsetenv("FS_LOCAL_RANK");
  unsetenv("OLMO_SHARED_FS");
  CHECK(jobkit::fs_local_rank(dir) == 0);
  setenv("FS_LOCAL_RANK", "3", 1);
  CHECK(jobkit::fs_local_rank(dir) == 3);
  setenv("FS_LOCAL_RANK", "x1", 1);
  CHECK_THROWS_WITH(jobkit::fs_local_rank(dir), "FS_LOCAL_RANK='x1' is not a non-negative integer");
  unsetenv("FS_LOCAL_RANK");
  setenv("OLMO_SHARED_FS", "1", 1);
  CHECK(jobkit::fs_local_rank(dir) == 0);
  unsetenv("OLMO_SHARED_FS");
}
