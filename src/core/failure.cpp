#include "core/failure.hpp"

#include <fmt/format.h>

namespace jobkit::detail {

std::string rank_label(int world_rank, std::string_view host) {
  if (host.empty()) return fmt::format("rank {}", world_rank);
  return fmt::format("rank {} ({})", world_rank, host);
}

std::string in_call(std::string_view name, std::string_view site, std::string_view what) {
  if (what.find(site.empty() ? name : site) != std::string_view::npos) return std::string(what);
  if (site.empty()) return fmt::format("{}: {}", name, what);
  return fmt::format("{} at {}: {}", name, site, what);
}

void raise(errc code, const std::string& message, int native_status) {
  if (code == errc::timeout) throw timeout_error(message, native_status);
  throw error(code, message, native_status);
}

}  // namespace jobkit::detail
