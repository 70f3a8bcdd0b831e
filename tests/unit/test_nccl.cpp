// <jobkit/nccl.hpp> without a GPU: the device rule on synthetic device counts, the duplicate-GPU
// table, the check over in-process groups, type and reduction mapping, and clean CUDA errors.
#include "jobkit/nccl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "nccl/gpu_api.hpp"
#include "nccl/teardown.hpp"
#include "support.hpp"

using jobkit::nccl::device_choice;

namespace {

using jobkit::detail::nccl_state;
using jobkit::detail::teardown_end;
using test_support::contains;

/// NCCL as a script for the teardown: state() answers `states` in turn (the last one for ever),
/// finalize() answers `finalized`; the clock moves 1 ms at each pause. `calls` is what was called.
struct scripted_nccl final : jobkit::detail::teardown_calls {
  std::vector<nccl_state> states{nccl_state::ready};
  nccl_state finalized = nccl_state::in_progress;
  std::vector<std::string> calls;
  std::chrono::steady_clock::time_point clock{};
  std::size_t looked = 0;

  nccl_state state() override {
    calls.emplace_back("state");
    return states[std::min(looked++, states.size() - 1)];
  }
  nccl_state finalize() override {
    calls.emplace_back("finalize");
    return finalized;
  }
  void destroy() override { calls.emplace_back("destroy"); }
  void abort() override { calls.emplace_back("abort"); }
  std::chrono::steady_clock::time_point now() override { return clock; }
  void pause() override { clock += std::chrono::milliseconds(1); }

  bool called(const std::string& name) const { return std::find(calls.begin(), calls.end(), name) != calls.end(); }
  teardown_end run(bool failure_seen, std::chrono::milliseconds deadline = std::chrono::milliseconds(50)) {
    return jobkit::detail::tear_down(*this, failure_seen, clock + deadline);
  }
};

}  // namespace

static_assert(jobkit::detail::nccl_data_type_of<float>() == ncclFloat32);
static_assert(jobkit::detail::nccl_data_type_of<double>() == ncclFloat64);
static_assert(jobkit::detail::nccl_data_type_of<std::int64_t>() == ncclInt64);
static_assert(jobkit::detail::nccl_data_type_of<__nv_bfloat16>() == ncclBfloat16);

TEST_CASE("device rule: one visible device, or one per local rank, else a clear error", "[nccl]") {
  using jobkit::nccl::select_device;
  CHECK(select_device(1, 0, 4) == 0);  // Slurm bound one GPU to the task
  CHECK(select_device(1, 3, 4) == 0);
  CHECK(select_device(4, 2, 4) == 2);  // every GPU of the node visible
  CHECK(select_device(8, 3, 4) == 3);
  setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  try {
    select_device(2, 0, 4);
    FAIL("2 devices for 4 ranks accepted");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    CHECK(contains(e.what(), "(local rank 0 of 4) sees 2 CUDA devices (CUDA_VISIBLE_DEVICES='0,1')"));
    CHECK(contains(e.what(), "--gpus-per-task=1"));
  }
  unsetenv("CUDA_VISIBLE_DEVICES");
  CHECK_THROWS_WITH(select_device(0, 0, 1), Catch::Contains("sees no CUDA device (CUDA_VISIBLE_DEVICES unset)"));
}

TEST_CASE("duplicate GPUs are reported as a table of the ranks that share one", "[nccl]") {
  std::vector<device_choice> unique{{0, 0, "c1", 0, "GPU-a"}, {1, 1, "c1", 1, "GPU-b"}, {2, 0, "c2", 0, "GPU-a"}};
  CHECK_FALSE(jobkit::nccl::duplicate_devices(unique));  // same UUID text on another host is another GPU
  auto shared = unique;
  shared.push_back({3, 2, "c1", 0, "GPU-a"});
  const auto table = jobkit::nccl::duplicate_devices(shared);
  REQUIRE(table);
  CHECK(contains(*table, "Duplicate GPU detected"));
  CHECK(contains(*table, "host"));
  CHECK(contains(*table, "c1                0          0      0  GPU-a"));
  CHECK(contains(*table, "c1                3          2      0  GPU-a"));
  CHECK_FALSE(contains(*table, "GPU-b"));
  CHECK_FALSE(contains(*table, "c2"));
}

TEST_CASE("the duplicate check runs over a group and fails on every member", "[nccl]") {
  const auto errors = test_support::errors_of(test_support::on_ranks(4, [](jobkit::group& g) {
    const int r = g.rank();
    const std::string uuid = r == 3 ? "GPU-1" : "GPU-" + std::to_string(r);  // ranks 1 and 3 collide
    jobkit::nccl::check_unique_devices(g, {r, r, "c1", r % 2, uuid});
  }));
  for (const auto& e : errors) {
    CHECK(contains(e, "several ranks chose the same GPU"));
    CHECK(contains(e, "GPU-1"));
  }
}

TEST_CASE("reductions NCCL lacks are refused by name", "[nccl]") {
  CHECK(jobkit::nccl::reduction_of(jobkit::reduce_op::max) == ncclMax);
  CHECK(jobkit::nccl::reduction_of(jobkit::reduce_op::avg) == ncclAvg);
  CHECK_THROWS_WITH(jobkit::nccl::reduction_of(jobkit::reduce_op::bxor), "NCCL has no reduction for op=bxor");
}

TEST_CASE("runtime_version is the NCCL that libjobkit loaded", "[nccl]") {
  const int version = jobkit::nccl::runtime_version();
  int linked = 0;
  REQUIRE(ncclGetVersion(&linked) == ncclSuccess);  // this test links NCCL: the same library
  CHECK(version == linked);
  CHECK(version / 10000 == NCCL_MAJOR);
}

TEST_CASE("the GPU libraries bind every call jobkit makes", "[nccl]") {
  // The real ones bind every call jobkit makes (the headers' versions or later).
  CHECK_NOTHROW(jobkit::detail::nccl_api());
  CHECK_NOTHROW(jobkit::detail::cuda_api());
}

TEST_CASE("NCCL errors carry NCCL's own text", "[nccl]") {
  try {
    jobkit::nccl::throw_nccl_error(ncclInvalidArgument, "ncclAllReduce", nullptr);
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::nccl);
    CHECK(e.native_status() == ncclInvalidArgument);
    CHECK(contains(e.what(), std::string("ncclAllReduce failed on rank 0 (")));
    CHECK(contains(e.what(), ncclGetErrorString(ncclInvalidArgument)));
  }
}

TEST_CASE("without a usable GPU: a CUDA error naming the call and the rank, not a crash", "[nccl][nogpu]") {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    WARN("a GPU is visible here: the no-GPU path is not exercised");
    return;
  }
  for (auto attempt : {+[] { jobkit::nccl::visible_devices(); }, +[] { jobkit::nccl::communicator c; }}) {
    try {
      attempt();
      FAIL("no error without a GPU");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::cuda);
      CHECK(e.native_status() != 0);
      CHECK(contains(e.what(), "cudaGetDeviceCount (CUDA_VISIBLE_DEVICES"));
      CHECK(contains(e.what(), "failed on rank 0 ("));
    }
  }
}

TEST_CASE("a single rank's ids need no PMIx: one id, made locally", "[nccl]") {
  const auto ids = jobkit::nccl::share_unique_ids();
  CHECK(ids.size() == 1);
  CHECK_THROWS_WITH(jobkit::nccl::share_unique_ids(0), Catch::Contains("ranks_per_root=0"));
}

TEST_CASE("teardown: a healthy communicator is finalised, polled until done, then destroyed", "[nccl][teardown]") {
  scripted_nccl nccl;
  nccl.states = {nccl_state::ready, nccl_state::in_progress, nccl_state::in_progress, nccl_state::ready};
  CHECK(nccl.run(false) == teardown_end::destroyed);
  CHECK(nccl.calls == std::vector<std::string>{"state", "finalize", "state", "state", "state", "destroy"});
  CHECK(nccl.clock == std::chrono::steady_clock::time_point{} + std::chrono::milliseconds(2));
}

TEST_CASE("teardown: after a failure it aborts at once, exception in flight or not", "[nccl][teardown]") {
  scripted_nccl nccl;
  CHECK(nccl.run(true) == teardown_end::aborted_after_failure);
  CHECK(nccl.calls == std::vector<std::string>{"abort"});
}

TEST_CASE("teardown: an asynchronous error, before or during the finalisation, aborts", "[nccl][teardown]") {
  scripted_nccl before;
  before.states = {nccl_state::failed};
  CHECK(before.run(false) == teardown_end::aborted_on_error);
  CHECK(before.calls == std::vector<std::string>{"state", "abort"});

  scripted_nccl during;
  during.states = {nccl_state::ready, nccl_state::in_progress, nccl_state::failed};
  CHECK(during.run(false) == teardown_end::aborted_on_error);
  CHECK(during.called("finalize"));
  CHECK_FALSE(during.called("destroy"));
  CHECK(during.calls.back() == "abort");

  scripted_nccl refused;
  refused.finalized = nccl_state::failed;
  CHECK(refused.run(false) == teardown_end::aborted_on_error);
  CHECK(refused.calls == std::vector<std::string>{"state", "finalize", "abort"});
}

TEST_CASE("teardown: a finalisation that never completes (a dead peer) is aborted at the deadline",
          "[nccl][teardown]") {
  scripted_nccl nccl;
  nccl.states = {nccl_state::ready, nccl_state::in_progress};
  const auto start = nccl.clock;
  CHECK(nccl.run(false, std::chrono::milliseconds(50)) == teardown_end::aborted_at_deadline);
  CHECK_FALSE(nccl.called("destroy"));  // ncclCommDestroy would wait for the node, untimed (2.31)
  CHECK(nccl.calls.back() == "abort");
  CHECK(nccl.clock - start == std::chrono::milliseconds(50));  // bounded by the deadline, not more
}

TEST_CASE("teardown: a call still in progress is waited for before finalising, within the same deadline",
          "[nccl][teardown]") {
  scripted_nccl settles;
  settles.states = {nccl_state::in_progress, nccl_state::in_progress, nccl_state::ready};
  CHECK(settles.run(false) == teardown_end::destroyed);
  CHECK(std::count(settles.calls.begin(), settles.calls.end(), "state") >= 3);

  scripted_nccl stuck;
  stuck.states = {nccl_state::in_progress};
  CHECK(stuck.run(false, std::chrono::milliseconds(20)) == teardown_end::aborted_at_deadline);
  CHECK_FALSE(stuck.called("finalize"));
  CHECK(stuck.calls.back() == "abort");
}
