#pragma once

#include <string>
#include <string_view>

#include "jobkit/error.hpp"

namespace jobkit::detail {

/// "rank 3 (c1)": how every message names a rank.
std::string rank_label(int world_rank, std::string_view host);

/// Throws the exception of a category: timeout_error for errc::timeout, else jobkit::error.
[[noreturn]] void raise(errc code, const std::string& message, int native_status = 0);

}  // namespace jobkit::detail
