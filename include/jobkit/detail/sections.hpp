#pragma once

// Code that only some ranks run at a time (inside a jobkit/helpers.hpp helper). Collectives of
// groups that include ranks outside the section are refused at once instead of waiting for
// ranks that never come.

#include <optional>
#include <source_location>
#include <string>

#include "jobkit/export.hpp"

namespace jobkit::detail {

enum class section_kind {
  main_only,     ///< run by the main rank alone
  node_leaders,  ///< run by local rank 0 of every node, at the same time
  staggered,     ///< run by every rank, but not at the same time (zero_first, do_n_at_a_time)
};

/// Marks the calling thread as inside a section for its lifetime.
class JOBKIT_API section_guard {
 public:
  section_guard(section_kind kind, std::string helper, const std::source_location& site);
  ~section_guard();
  section_guard(const section_guard&) = delete;
  section_guard& operator=(const section_guard&) = delete;
};

/// The innermost section of the calling thread, if any: its kind and "helper at file:line".
struct section_info {
  section_kind kind;
  std::string where;
};
JOBKIT_API std::optional<section_info> current_section();

}  // namespace jobkit::detail
