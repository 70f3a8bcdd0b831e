#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// The most hosts a host list may expand to (Slurm's largest clusters have tens of thousands).
inline constexpr std::size_t max_listed_hosts = 1'000'000;

/// Slurm's host list syntax, expanded in order: "c[1-3],gpu[08-10]" is c1, c2, c3, gpu08, gpu09,
/// gpu10. A bracket holds numbers and ranges separated by commas; a range keeps the width of its
/// first number ("08" pads to two digits); several brackets in one name expand as their product.
/// `name` is the variable the list came from, for messages.
/// @throws jobkit::error (invalid_environment) naming the variable and its value when the list is
/// malformed, empty, or expands to more than max_listed_hosts names
std::vector<std::string> expand_host_list(std::string_view name, std::string_view value);

}  // namespace jobkit::detail
