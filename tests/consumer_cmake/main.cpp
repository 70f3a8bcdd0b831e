#include <jobkit/jobkit.hpp>

// The installed <jobkit/config.hpp> is the one found, and CMake's jobkit_HAS_NCCL agrees with it.
static_assert(JOBKIT_HAS_NCCL == CONSUMER_EXPECT_NCCL, "JOBKIT_HAS_NCCL is not what jobkit was built with");
static_assert(JOBKIT_HAS_NCCL == CONSUMER_CMAKE_HAS_NCCL, "jobkit_HAS_NCCL disagrees with <jobkit/config.hpp>");

int main() {
  // An error the library throws is caught by its type (jobkit::error's typeinfo is exported), and
  // what the public templates call in the library links (from_bytes's error).
  try {
    (void)jobkit::parse_timeout("CONSUMER_TIMEOUT", "soon");
    return 3;
  } catch (const jobkit::error& e) {
    if (e.code() != jobkit::errc::invalid_argument) return 3;
  }
  try {
    auto bytes = jobkit::to_bytes(std::vector<int>{1, 2});
    bytes.push_back(std::byte{0});
    (void)jobkit::from_bytes<std::vector<int>>(bytes);
    return 4;
  } catch (const jobkit::error&) {
  }
  try {
    const auto& me = jobkit::current_identity();
    jobkit::log::info("cmake consumer built against jobkit {}", JOBKIT_VERSION_STRING);
    fmt::print("{}\n", jobkit::to_json(me));
  } catch (const jobkit::error& e) {
    fmt::print(stderr, "consumer: {}\n", e.what());
    return 2;
  }
}
