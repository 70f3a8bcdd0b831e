#pragma once

#include <string>
#include <string_view>

namespace jobkit::detail {

/// `text` as a JSON string literal, quotes included; control characters escaped.
std::string json_string(std::string_view text);

}  // namespace jobkit::detail
