#pragma once

#include <vector>

namespace jobkit::detail {

/// The shape of a group's tree: the first member of each node leads it and the node's other
/// members hang under their leader; the leaders form a binomial tree under group rank 0 (the
/// i-th leader's parent is the leader at i with its lowest set bit cleared). Depth: 1 + log2 of
/// the number of nodes.
/// node_of_member[g]: the node of group rank g. Returns the parent of each group rank, -1 for 0.
std::vector<int> tree_parents(const std::vector<int>& node_of_member);

/// One rank's view of the tree.
struct tree_position {
  int parent = -1;                         ///< group rank, -1 at the root
  std::vector<int> children;               ///< group ranks, ascending
  std::vector<std::vector<int>> subtrees;  ///< per child: every group rank under it, itself included
  std::vector<int> child_of;               ///< per group rank: index of the child whose subtree holds it, or -1
};
tree_position position_in_tree(const std::vector<int>& parents, int rank);

}  // namespace jobkit::detail
