#include <jobkit/jobkit.hpp>

// The installed <jobkit/config.hpp> is the one found, and CMake's jobkit_HAS_NCCL agrees with it.
static_assert(JOBKIT_HAS_NCCL == CONSUMER_EXPECT_NCCL, "JOBKIT_HAS_NCCL is not what jobkit was built with");
static_assert(JOBKIT_HAS_NCCL == CONSUMER_CMAKE_HAS_NCCL, "jobkit_HAS_NCCL disagrees with <jobkit/config.hpp>");

int main() {
  try {
    const auto& me = jobkit::current_identity();
    jobkit::log::info("cmake consumer built against jobkit {}", JOBKIT_VERSION_STRING);
    fmt::print("{}\n", jobkit::to_json(me));
  } catch (const jobkit::error& e) {
    fmt::print(stderr, "consumer: {}\n", e.what());
    return 2;
  }
}
