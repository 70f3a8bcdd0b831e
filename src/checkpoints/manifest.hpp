#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// One part file as a checkpoint's manifest.json names it.
struct manifest_part {
  int rank = 0;
  std::string host;
  std::string file;  ///< relative to the step directory: "rank-3/weights.bin"
  std::uint64_t size = 0;
  std::uint32_t crc32c = 0;
  friend bool operator==(const manifest_part&, const manifest_part&) = default;
};

/// The manifest line of one part, as commit writes it (no trailing comma or newline).
std::string manifest_line(const manifest_part& part);

/// The parts of a manifest that commit wrote: one part per line, in the form manifest_line
/// gives. Reads only what jobkit writes; the file is not trusted: any other form is an error.
/// @throws jobkit::error (io) naming the line and what is wrong with it
std::vector<manifest_part> parse_manifest_parts(std::string_view text);

}  // namespace jobkit::detail
