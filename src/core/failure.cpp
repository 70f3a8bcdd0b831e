#include "core/failure.hpp"

#include <fmt/format.h>

namespace jobkit::detail {

std::string rank_label(int world_rank, std::string_view host) {
  if (host.empty()) return fmt::format("rank {}", world_rank);
  return fmt::format("rank {} ({})", world_rank, host);
}

std::string in_call(std::string_view name, std::string_view site, std::string_view what) {
  const auto call = site.empty() ? std::string(name) : fmt::format("{} at {}", name, site);
  if (what.find(call) != std::string_view::npos) return std::string(what);
  return fmt::format("{}: {}", call, what);
}

void raise(errc code, const std::string& message, int native_status) {
  if (code == errc::timeout) throw timeout_error(message, native_status);
  throw error(code, message, native_status);
}

}  // namespace jobkit::detail
