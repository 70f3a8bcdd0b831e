#include "network/addresses.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "jobkit/error.hpp"

namespace jobkit::detail {

interface_filter parse_interface_filter(std::string_view variable, std::string_view value) {
  interface_filter filter;
  std::string_view rest = value;
  if (rest.starts_with('^')) {
    filter.exclude = true;
    rest.remove_prefix(1);
  }
  if (rest.starts_with('=')) {
    filter.exact = true;
    rest.remove_prefix(1);
  }
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const auto name = rest.substr(0, comma);
    if (!name.empty()) filter.names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (filter.names.empty()) {
    throw error(errc::invalid_environment,
                fmt::format("{}='{}' names no interface (e.g. eth0, ib, ^docker, =eth1)", variable, value));
  }
  return filter;
}

bool interface_matches(const interface_filter& filter, std::string_view interface_name) {
  const bool listed = std::any_of(filter.names.begin(), filter.names.end(), [&](const std::string& name) {
    return filter.exact ? interface_name == name : interface_name.starts_with(name);
  });
  return listed != filter.exclude;
}

std::vector<interface_address> host_addresses() {
  std::vector<interface_address> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (const ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    interface_address entry;
    entry.interface = a->ifa_name;
    entry.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (a->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (!::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) continue;
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      if (!::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text)) continue;
      entry.ipv6 = true;
    } else {
      continue;
    }
    entry.numeric = text;
    found.push_back(std::move(entry));
  }
  ::freeifaddrs(list);
  return found;
}

std::vector<interface_address> choose_endpoint_addresses(const environment& env, bool single_host,
                                                         const std::vector<interface_address>& available) {
  const auto variable = env.get("JOBKIT_SOCKET_IFNAME");
  if (single_host && !variable) {
    const auto lo = std::find_if(available.begin(), available.end(),
                                 [](const interface_address& a) { return a.numeric == "127.0.0.1"; });
    return {{lo == available.end() ? "lo" : lo->interface, "127.0.0.1", true, false}};
  }
  std::optional<interface_filter> filter;
  if (variable) filter = parse_interface_filter("JOBKIT_SOCKET_IFNAME", *variable);
  static const interface_filter bridges{.exclude = true, .exact = false, .names = {"docker", "virbr"}};
  std::vector<const interface_address*> chosen;
  for (const auto& a : available) {
    if (filter ? interface_matches(*filter, a.interface) : (!a.loopback && interface_matches(bridges, a.interface))) {
      chosen.push_back(&a);
    }
  }
  std::stable_sort(chosen.begin(), chosen.end(), [](const auto* a, const auto* b) { return !a->ipv6 && b->ipv6; });
  if (chosen.empty()) {
    std::vector<std::string> seen;
    for (const auto& a : available) seen.push_back(fmt::format("{} {}", a.interface, a.numeric));
    throw error(errc::invalid_environment,
                variable ? fmt::format("JOBKIT_SOCKET_IFNAME='{}' selects no interface address of this host (it has: "
                                       "{})",
                                       *variable, fmt::join(seen, ", "))
                         : fmt::format("this host has no usable non-loopback address for the data path between "
                                       "nodes (it has: {}); set JOBKIT_SOCKET_IFNAME",
                                       fmt::join(seen, ", ")));
  }
  std::vector<interface_address> unique;
  for (const auto* a : chosen) {
    const bool seen = std::any_of(unique.begin(), unique.end(), [&](const auto& u) { return u.numeric == a->numeric; });
    if (unique.size() < 16 && !seen) unique.push_back(*a);
  }
  return unique;
}

}  // namespace jobkit::detail
