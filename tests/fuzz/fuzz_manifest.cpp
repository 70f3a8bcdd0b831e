// A checkpoint's manifest.json, read back by checkpoints::verify from a shared file system: any
// bytes either parse into parts that print and parse back to themselves, or are refused with a
// jobkit::error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "checkpoints/manifest.hpp"
#include "jobkit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& part : jobkit::detail::parse_manifest_parts(text)) {
      const auto again = jobkit::detail::parse_manifest_parts(jobkit::detail::manifest_line(part));
      if (again.size() != 1 || !(again.front() == part)) {
        std::fprintf(stderr, "a parsed manifest part does not survive manifest_line and a second parse\n");
        std::abort();
      }
    }
  } catch (const jobkit::error&) {
  }
  return 0;
}
