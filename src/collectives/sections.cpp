#include "jobkit/detail/sections.hpp"

#include <vector>

#include "jobkit/detail/collective_call.hpp"

namespace jobkit::detail {
namespace {
thread_local std::vector<section_info> sections;
}

section_guard::section_guard(section_kind kind, std::string helper, const std::source_location& site) {
  sections.push_back({kind, helper + " at " + site_text(site)});
}

section_guard::~section_guard() { sections.pop_back(); }

std::optional<section_info> current_section() {
  if (sections.empty()) return std::nullopt;
  return sections.back();
}

}  // namespace jobkit::detail
