#include "core/names.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "core/fnv1a.hpp"

namespace jobkit::detail {

std::string job_step_tag(const identity& id, int pid) {
  if (id.job_id.empty()) return fmt::format("pid{}", pid);
  std::string tag = id.step_id.empty() ? id.job_id : id.job_id + "." + id.step_id;
  for (char& c : tag) {
    const bool safe =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!safe) c = '_';
  }
  return tag;
}

std::string workspace_directory_name(std::string_view purpose, const identity& id, const std::vector<int>& world_ranks,
                                     int pid) {
  auto name = fmt::format("jobkit-{}-{}", purpose, job_step_tag(id, pid));
  if (static_cast<int>(world_ranks.size()) == id.world_size) return name;
  std::uint64_t hash = fnv1a_basis;  // over the ranks' bytes, lowest first
  for (const int r : world_ranks) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash = fnv1a(hash, static_cast<unsigned char>((static_cast<std::uint32_t>(r) >> shift) & 0xffU));
    }
  }
  return fmt::format("{}-g{:016x}", name, hash);
}

std::string segment_name(const identity& id, int world_rank, int pid) {
  return fmt::format("/jobkit-{}-{}", job_step_tag(id, pid), world_rank);
}

}  // namespace jobkit::detail
