#include <jobkit/jobkit.hpp>

static_assert(JOBKIT_HAS_NCCL == 0, "the consumer disabled NCCL");

int main() {
  try {
    const auto& me = jobkit::current_identity();
    jobkit::log::info("consumer built against jobkit {}", JOBKIT_VERSION_STRING);
    fmt::print("{}\n", jobkit::to_json(me));
  } catch (const jobkit::error& e) {
    fmt::print(stderr, "consumer: {}\n", e.what());
    return 2;
  }
}
