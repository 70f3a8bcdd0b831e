#include "pmix/facts.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "jobkit/error.hpp"

namespace jobkit::detail {

node_position place_in_node_list(std::string_view node_list, std::string_view hostname) {
  std::vector<std::string_view> nodes;
  for (std::string_view rest = node_list; !rest.empty();) {
    const auto comma = rest.find(',');
    nodes.push_back(rest.substr(0, comma));
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  const auto found = std::find(nodes.begin(), nodes.end(), hostname);
  if (hostname.empty() || found == nodes.end() || std::count(nodes.begin(), nodes.end(), hostname) != 1 ||
      std::count(nodes.begin(), nodes.end(), std::string_view()) != 0) {
    throw error(errc::pmix, fmt::format("the PMIx server reported an inconsistent identity: this node's "
                                        "PMIX_HOSTNAME='{}' is not in the job's node list "
                                        "PMIx_Resolve_nodes='{}' exactly once",
                                        hostname, node_list));
  }
  return {static_cast<int>(found - nodes.begin()), static_cast<int>(nodes.size())};
}

}  // namespace jobkit::detail
