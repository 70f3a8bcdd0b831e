#pragma once

#include <chrono>
#include <string_view>

#include "jobkit/collectives.hpp"

namespace jobkit::detail {

/// The default deadline: JOBKIT_TIMEOUT seconds, else 1800 s.
/// @throws jobkit::error (invalid_environment) naming the variable when it is malformed
std::chrono::milliseconds default_timeout();

/// How long PMIx_Init may take: JOBKIT_PMIX_INIT_TIMEOUT seconds (parse_timeout's rule), else 60 s.
/// @throws jobkit::error (invalid_environment) naming the variable when it is malformed
std::chrono::milliseconds pmix_init_timeout();

/// The one timeout policy of every blocking call: zero means default_timeout(), a positive
/// value is used as it is, a negative one is refused.
/// @throws jobkit::error (invalid_argument) naming `operation` when timeout is negative
std::chrono::milliseconds timeout_of(std::chrono::milliseconds timeout, std::string_view operation);

}  // namespace jobkit::detail
