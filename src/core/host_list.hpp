#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// The most hosts jobkit expands from host lists at once (Slurm's largest clusters have about ten
/// thousand nodes), and the longest host name it takes (a DNS name's limit).
inline constexpr std::size_t max_listed_hosts = 100'000;
inline constexpr std::size_t max_host_name = 255;

/// Slurm's host list syntax, expanded in order: "c[1-3],gpu[08-10]" is c1, c2, c3, gpu08, gpu09,
/// gpu10. A bracket holds numbers and ranges separated by commas; a range keeps the width of its
/// first number ("08" pads to two digits); several brackets in one name expand as their product.
/// Sizes are counted before anything is expanded: at most `max_hosts` names (at most
/// max_listed_hosts) of at most max_host_name bytes. `name` is the variable the list came from.
/// @throws jobkit::error (invalid_environment) naming the variable and its value when the list is
/// malformed or empty, or goes past those bounds
std::vector<std::string> expand_host_list(std::string_view name, std::string_view value,
                                          std::size_t max_hosts = max_listed_hosts);

}  // namespace jobkit::detail
