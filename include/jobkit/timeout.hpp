#pragma once

// The one spelling of a timeout that jobkit reads from people: seconds, as a decimal number.

#include <chrono>
#include <string_view>

#include "jobkit/export.hpp"

namespace jobkit {

/// Parses a number of seconds ("90", "2.5") as a timeout, for programs that take one from the
/// command line or the environment. @throws jobkit::error (invalid_argument) naming `name`
JOBKIT_API std::chrono::milliseconds parse_timeout(std::string_view name, std::string_view value);

}  // namespace jobkit
