// The runtime on the real process environment, without a launcher.
#include "jobkit/runtime.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "jobkit/config.hpp"
#include "jobkit/error.hpp"

namespace {

/// Sets variables for one test and removes every launcher variable it might inherit.
class scoped_env {
 public:
  explicit scoped_env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name :
         {"JOBKIT_IDENTITY", "PMIX_RANK", "PMIX_NAMESPACE", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_ID", "SLURM_STEP_ID",
          "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID"}) {
      unsetenv(name);
    }
    for (const auto& [name, value] : vars) {
      setenv(name, value, 1);
      names_.push_back(name);
    }
  }
  ~scoped_env() {
    for (const char* name : names_) unsetenv(name);
  }

 private:
  std::vector<const char*> names_;
};

}  // namespace

TEST_CASE("a runtime without a launcher is a single rank and needs no PMIx server", "[runtime]") {
  scoped_env env({});
  const jobkit::runtime rt;
  CHECK_FALSE(rt.connected_to_pmix());
  CHECK(rt.identity().source == jobkit::identity_source::defaults);
  CHECK(rt.identity().world_size == 1);
  CHECK_FALSE(rt.identity().hostname.empty());
}

TEST_CASE("a runtime reads torchrun variables, and moving it keeps the identity", "[runtime]") {
  scoped_env env(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"NODE_RANK", "1"}});
  jobkit::runtime rt;
  jobkit::runtime moved = std::move(rt);
  CHECK(moved.identity().source == jobkit::identity_source::torchrun);
  CHECK(moved.identity().rank == 3);
  CHECK(moved.identity().node_rank == 1);
}

TEST_CASE("a runtime refuses a malformed environment", "[runtime][errors]") {
  scoped_env env({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}});
  try {
    jobkit::runtime rt;
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_environment);
    CHECK(std::string(e.what()) == "RANK='3' must be less than WORLD_SIZE='2'");
  }
}

TEST_CASE("JOBKIT_IDENTITY=pmix without a PMIx server says how to launch", "[runtime][errors]") {
  scoped_env env({{"JOBKIT_IDENTITY", "pmix"}});
  try {
    jobkit::runtime rt;
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(std::string(e.what()).find("srun --mpi=pmix") != std::string::npos);
  }
}

TEST_CASE("an advertised but unreachable PMIx server is a PMIx error with its status", "[runtime][errors]") {
  scoped_env env({{"PMIX_RANK", "0"}, {"PMIX_NAMESPACE", "nowhere"}});
  try {
    jobkit::runtime rt;
    FAIL("no error");
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::pmix);
    CHECK(e.native_status() != 0);
    CHECK(std::string(e.what()).find("PMIx_Init failed") != std::string::npos);
  }
}

TEST_CASE("the seed getters answer from the process-wide runtime", "[runtime]") {
  scoped_env env(
      {{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}, {"NODE_RANK", "1"}});
  CHECK(jobkit::rank() == 6);
  CHECK(jobkit::world_size() == 8);
  CHECK(jobkit::local_rank() == 2);
  CHECK(jobkit::local_world_size() == 4);
  CHECK(jobkit::node_rank() == 1);
  CHECK(jobkit::num_nodes() == 2);
  CHECK_FALSE(jobkit::is_main_process());
  CHECK_FALSE(jobkit::is_local_main_process());
  CHECK(jobkit::is_distributed());
  CHECK(&jobkit::current_identity() == &jobkit::default_runtime().identity());
}

TEST_CASE("collectives across ranks without a PMIx server say how to launch", "[runtime][errors]") {
  scoped_env env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  jobkit::runtime rt;
  for (auto attempt : {std::function<void()>([&] { rt.world(); }), std::function<void()>([&] { rt.node_group(); }),
                       std::function<void()>([&] {
                         rt.make_group({0, 1});
                       })}) {
    try {
      attempt();
      FAIL("no error");
    } catch (const jobkit::error& e) {
      CHECK(e.code() == jobkit::errc::invalid_environment);
      CHECK(std::string(e.what()).find("identity came from 'torchrun'") != std::string::npos);
      CHECK(std::string(e.what()).find("launch with srun --mpi=pmix") != std::string::npos);
    }
  }
  // A group of this rank alone needs nobody else.
  CHECK(rt.make_group({1}).all_gather(5) == std::vector<int>{5});
  CHECK_THROWS_WITH(rt.node_leaders_group(), Catch::Contains("rank 1 has local rank 1"));
}

TEST_CASE("make_group names the bad rank list", "[runtime][errors]") {
  scoped_env env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "4"}});
  jobkit::runtime rt;
  CHECK_THROWS_WITH(rt.make_group({}), Catch::Contains("world_ranks is empty"));
  CHECK_THROWS_WITH(rt.make_group({0, 4}), Catch::Contains("world_ranks=[0, 4] holds 4, outside 0 to 3"));
  CHECK_THROWS_WITH(rt.make_group({0, 1, 1}), Catch::Contains("holds 1 twice"));
  CHECK_THROWS_WITH(rt.make_group({1, 2}), Catch::Contains("does not hold this rank (0)"));
  CHECK_THROWS_WITH(rt.make_group({0}, {.timeout = std::chrono::milliseconds(-5)}), Catch::Contains("timeout=-5 ms"));
}

TEST_CASE("a single-rank runtime's groups are itself", "[runtime]") {
  scoped_env env({});
  jobkit::runtime rt;
  CHECK(rt.world().size() == 1);
  CHECK(rt.node_group().world_ranks() == std::vector<int>{0});
  CHECK(rt.node_leaders_group().size() == 1);
  CHECK(rt.world().all_reduce(std::vector<int>{1, 2}, jobkit::reduce_op::max) == std::vector<int>{1, 2});
}

TEST_CASE("a program that does not use NCCL never loads NCCL or the CUDA runtime", "[runtime]") {
  // libjobkit binds them at the first NCCL call, not at the process's start.
  scoped_env env({});
  jobkit::runtime rt;
  rt.world().barrier();
  CHECK(rt.world().all_gather(rt.identity().rank) == std::vector<int>{0});
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::vector<std::string> loaded;
  while (std::getline(maps, line)) {
    if (line.find("libnccl") != std::string::npos || line.find("libcudart") != std::string::npos)
      loaded.push_back(line);
  }
  INFO("JOBKIT_HAS_NCCL=" << JOBKIT_HAS_NCCL);
  CHECK(loaded.empty());
}
