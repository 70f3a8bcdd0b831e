#pragma once

// How the library's own code logs: as the process's runtime in use, or before there is one, as a
// single-rank process (unprefixed, to stderr). Never through default_logger(), whose first use
// makes the default runtime: a warning must not start a PMIx client (one runtime per process).

#include <utility>

#include "jobkit/identity.hpp"
#include "jobkit/log.hpp"

namespace jobkit::detail {

/// Set by the process's runtime in use (src/runtime) while it lives; null clears it.
void set_identity_in_use(const identity* id) noexcept;

/// A copy of the identity of the runtime in use, or the single-rank defaults before there is one.
identity identity_in_use();

/// One line of the library's, configured from the environment (JOBKIT_LOG_*); never throws.
template <class... T>
void library_log(log_level level, fmt::format_string<T...> format, T&&... args) noexcept {
  try {
    const logger out(identity_in_use());
    out.log(level, format, std::forward<T>(args)...);
  } catch (...) {
    // Logging must never take the program down (a malformed JOBKIT_LOG_PREFIX, out of memory).
  }
}

}  // namespace jobkit::detail
