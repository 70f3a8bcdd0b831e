// <jobkit/nccl.hpp> without a GPU: the device rule on synthetic device counts, the duplicate-GPU
// table, the check over in-process groups, type and reduction mapping, and clean CUDA errors.
#include "jobkit/nccl.hpp"

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "nccl/gpu_api.hpp"
#include "support.hpp"

using jobkit::nccl::device_choice;

namespace {

using test_support::contains;

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
