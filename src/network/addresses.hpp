#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace jobkit::detail {

/// JOBKIT_SOCKET_IFNAME, with the syntax of NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: a comma
/// separated list of interface name prefixes; a leading '^' excludes the listed interfaces
/// instead, and '=' (after an optional '^') makes the names exact instead of prefixes.
struct interface_filter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
};
/// @throws jobkit::error (invalid_environment) naming the variable and its value when empty
interface_filter parse_interface_filter(std::string_view variable, std::string_view value);
bool interface_matches(const interface_filter& filter, std::string_view interface_name);

/// One address of an interface of this host.
struct interface_address {
  std::string interface;
  std::string numeric;  ///< "198.18.0.1", "fd00::1"
  bool loopback = false;
  bool ipv6 = false;
};
/// Every address of every interface that is up, in the kernel's order (getifaddrs); IPv6
/// link-local addresses are left out (they need a scope to be reached).
std::vector<interface_address> host_addresses();

/// The addresses a rank publishes for its peers, IPv4 first:
///  - every rank on one host: 127.0.0.1;
///  - JOBKIT_SOCKET_IFNAME set: the addresses of the interfaces it selects;
///  - else every non-loopback address, except those of docker* and virbr* bridges.
/// @throws jobkit::error (invalid_environment) when nothing is left, naming the variable and
/// the interfaces found
std::vector<interface_address> choose_endpoint_addresses(const environment& env, bool single_host,
                                                         const std::vector<interface_address>& available);

}  // namespace jobkit::detail
