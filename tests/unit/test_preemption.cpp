// The stop agreement without a launcher: one rank of the world and in-process groups (threads as
// ranks), real signals raised in this process; time_left and requeue outside a Slurm job.
#include "jobkit/preemption.hpp"

#include <signal.h>

#include <atomic>
#include <cstdlib>

#include "../catch.hpp"
#include "support.hpp"
#include "transport/inprocess.hpp"

using test_support::contains;
using test_support::on_ranks;

namespace {
std::atomic<int> custom_handler_calls{0};
extern "C" void custom_handler(int) { custom_handler_calls.fetch_add(1); }
}  // namespace

TEST_CASE("no signal, no stop") {
  jobkit::stop_guard stop;
  for (int i = 0; i < 5; ++i) CHECK_FALSE(stop.stop_requested());
  CHECK(stop.cause().reason == jobkit::stop_reason::none);
  CHECK(jobkit::to_string(stop.cause()) == "none");
}

TEST_CASE("a stop signal stops at the next check and stays stopped") {
  jobkit::stop_guard stop;
  CHECK_FALSE(stop.stop_requested());
  ::raise(SIGUSR1);
  CHECK(stop.stop_requested());
  CHECK(stop.cause() == jobkit::stop_cause{jobkit::stop_reason::signal, SIGUSR1, 0, {}});
  CHECK(jobkit::to_string(stop.cause()) == "SIGUSR1 on rank 0");
  CHECK(stop.stop_requested());
}

TEST_CASE("a signal from before the guard does not count") {
  {
    jobkit::stop_guard earlier;
    ::raise(SIGUSR2);
  }
  jobkit::stop_guard stop;
  CHECK_FALSE(stop.stop_requested());
}

TEST_CASE("check_every: the calls in between do not look") {
  jobkit::stop_guard stop({.check_every = 3});
  CHECK_FALSE(stop.stop_requested());  // call 1 agrees
  ::raise(SIGTERM);
  CHECK_FALSE(stop.stop_requested());  // 2
  CHECK_FALSE(stop.stop_requested());  // 3
  CHECK(stop.stop_requested());        // 4 agrees
  CHECK(stop.cause().signal == SIGTERM);
}

TEST_CASE("every rank of a group agrees, at the same call") {
  auto groups = jobkit::detail::make_inprocess_groups(3, "localhost");
  std::atomic<int> ready{0};
  const auto outcomes = on_ranks(groups, [&](jobkit::group& g) {
    jobkit::stop_guard stop({}, g);
    ++ready;
    while (ready.load() < 3) {
    }
    CHECK_FALSE(stop.stop_requested());
    if (g.rank() == 2) ::raise(SIGUSR1);
    // Rank 2 raised before its second call; the agreement waits for it, so all see it there.
    const bool second = stop.stop_requested();
    return std::pair{second, stop.cause()};
  });
  for (const auto& o : outcomes) {
    REQUIRE(o.error.empty());
    CHECK(o.value->first);
    CHECK(o.value->second.signal == SIGUSR1);
  }
  CHECK(outcomes[0].value->second == outcomes[1].value->second);
  CHECK(outcomes[1].value->second == outcomes[2].value->second);
}

TEST_CASE("the previous signal disposition comes back after the last guard") {
  struct sigaction mine{};
  mine.sa_handler = custom_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction before{};
  ::sigaction(SIGUSR2, &mine, &before);
  {
    jobkit::stop_guard outer;
    {
      jobkit::stop_guard inner;
    }
    ::raise(SIGUSR2);  // still the guard's: recorded, not the custom handler
    CHECK(custom_handler_calls.load() == 0);
    CHECK(outer.stop_requested());
  }
  ::raise(SIGUSR2);
  CHECK(custom_handler_calls.load() == 1);
  ::sigaction(SIGUSR2, &before, nullptr);
}

TEST_CASE("bad stop options name themselves") {
  CHECK_THROWS_WITH(jobkit::stop_guard({.check_every = 0}), Catch::Contains("check_every=0"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.time_margin = std::chrono::seconds(-1)}), Catch::Contains("time_margin"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.signals = {SIGKILL}}), Catch::Contains("cannot be caught"));
  CHECK_THROWS_WITH(jobkit::stop_guard({.timeout = std::chrono::milliseconds(-5)}), Catch::Contains("stop_guard"));
}

TEST_CASE("time_left and requeue outside a Slurm job") {
  ::unsetenv("SLURM_JOB_ID");
  CHECK_FALSE(jobkit::time_left());
  try {
    jobkit::requeue();
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    CHECK(contains(e.what(), "SLURM_JOB_ID is not set"));
  }
  ::setenv("SLURM_JOB_ID", "12x", 1);
  CHECK_THROWS_WITH(jobkit::time_left(), Catch::Contains("SLURM_JOB_ID='12x' is not a Slurm job id"));
  CHECK_THROWS_WITH(jobkit::requeue(), Catch::Contains("SLURM_JOB_ID='12x'"));
  ::unsetenv("SLURM_JOB_ID");
}

TEST_CASE("stop causes read well") {
  CHECK(jobkit::to_string(jobkit::stop_reason::time_limit) == "time_limit");
  CHECK(jobkit::to_string(jobkit::stop_cause{jobkit::stop_reason::time_limit, 0, -1, std::chrono::seconds(42)}) ==
        "42 s left, below the margin");
  CHECK(jobkit::to_string(jobkit::stop_cause{jobkit::stop_reason::signal, SIGTERM, 3, {}}) == "SIGTERM on rank 3");
}
