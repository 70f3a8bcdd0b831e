#pragma once

// The one message of a lost node, whoever sees it: the fabric when a peer's endpoint, connection
// or watched port gets no answer from its host, the tree's links when a link goes silent.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// A node that answered nothing for the silence limit (JOBKIT_LOST_NODE_TIMEOUT).
struct lost_node {
  std::string node;                 ///< the silent node's name
  std::string_view what;            ///< "answered nothing", "answered no connection to its port", ...
  std::chrono::milliseconds limit;  ///< the silence limit that passed (0: none, e.g. unreachable)
  std::string seen_from;            ///< the node of the rank that saw it (empty: not said)
  std::vector<int> ranks;           ///< the node's ranks in the group concerned (empty: not said)
  std::string detail;               ///< what the layer below said (empty: nothing)
};

/// "its node c3 answered nothing for 8 s (JOBKIT_LOST_NODE_TIMEOUT): the node is lost or cut off
/// from c1 (ranks on c3 in this group: 4, 5)", with "; <detail>" inside the parentheses.
std::string describe(const lost_node& lost);

/// The ranks among `ranks` whose node is `node` (hosts[i] is the node of ranks[i]), in their order.
std::vector<int> ranks_on_node(const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                               std::string_view node);

}  // namespace jobkit::detail
