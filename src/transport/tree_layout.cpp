#include "transport/tree_layout.hpp"

#include <algorithm>
#include <map>

namespace jobkit::detail {

std::vector<int> tree_parents(const std::vector<int>& node_of_member) {
  const auto size = node_of_member.size();
  std::vector<int> parent(size, -1);
  std::map<int, int> leader_of_node;
  std::vector<int> leaders;
  for (std::size_t g = 0; g < size; ++g) {
    if (const auto [it, first] = leader_of_node.emplace(node_of_member[g], static_cast<int>(g)); first) {
      leaders.push_back(static_cast<int>(g));
    } else {
      parent[g] = it->second;
    }
  }
  for (std::size_t i = 1; i < leaders.size(); ++i) parent[static_cast<std::size_t>(leaders[i])] = leaders[i & (i - 1)];
  return parent;
}

tree_position position_in_tree(const std::vector<int>& parents, int rank) {
  tree_position p;
  const int size = static_cast<int>(parents.size());
  p.parent = parents[static_cast<std::size_t>(rank)];
  for (int g = 0; g < size; ++g) {
    if (parents[static_cast<std::size_t>(g)] == rank) p.children.push_back(g);
  }
  p.subtrees.resize(p.children.size());
  p.child_of.assign(static_cast<std::size_t>(size), -1);
  for (int g = 0; g < size; ++g) {
    for (int a = g; a != -1; a = parents[static_cast<std::size_t>(a)]) {
      if (parents[static_cast<std::size_t>(a)] != rank) continue;
      const auto child =
          static_cast<std::size_t>(std::find(p.children.begin(), p.children.end(), a) - p.children.begin());
      p.subtrees[child].push_back(g);
      p.child_of[static_cast<std::size_t>(g)] = static_cast<int>(child);
      break;
    }
  }
  return p;
}

}  // namespace jobkit::detail
