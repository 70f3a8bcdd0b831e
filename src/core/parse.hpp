#pragma once

#include <charconv>
#include <climits>
#include <optional>
#include <string_view>

namespace jobkit::detail {

/// Takes an unsigned decimal number (digits only: no sign, no blank) off the front of `rest`.
/// Its value, or nullopt with `rest` unchanged when `rest` does not begin with a digit or the
/// number exceeds INT_MAX.
inline std::optional<int> take_decimal(std::string_view& rest) {
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  long long value = 0;
  if (digits == 0 || digits > 10) return std::nullopt;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + digits, value);
  if (ec != std::errc{} || value > INT_MAX) return std::nullopt;
  rest.remove_prefix(digits);
  return static_cast<int>(value);
}

}  // namespace jobkit::detail
