#pragma once

#include <string>
#include <string_view>

#include "jobkit/error.hpp"

namespace jobkit::detail {

/// "rank 3 (c1)": how every message names a rank.
std::string rank_label(int world_rank, std::string_view host);

/// How every failure of a call names the call: "barrier at train.py:46: <what>" ("barrier:
/// <what>" without a site). `what` is returned unchanged when it already names the call's site
/// (or, without a site, its name): a message passed on from another rank at the same call site
/// (a helper's own collectives included) does not name it twice.
std::string in_call(std::string_view name, std::string_view site, std::string_view what);

/// Throws the exception of a category: timeout_error for errc::timeout, else jobkit::error.
[[noreturn]] void raise(errc code, const std::string& message, int native_status = 0);

}  // namespace jobkit::detail
