#include "core/lost_node.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace jobkit::detail {

std::string describe(const lost_node& lost) {
  std::string text = fmt::format("its node {} {}", lost.node, lost.what);
  if (lost.limit.count() > 0) {
    text += fmt::format(" for {} s (JOBKIT_LOST_NODE_TIMEOUT)", std::chrono::duration<double>(lost.limit).count());
  }
  text += ": the node is lost or cut off";
  if (!lost.seen_from.empty()) text += fmt::format(" from {}", lost.seen_from);
  std::vector<std::string> notes;
  if (!lost.ranks.empty())
    notes.push_back(fmt::format("ranks on {} in this group: {}", lost.node, fmt::join(lost.ranks, ", ")));
  if (!lost.detail.empty()) notes.push_back(lost.detail);
  if (!notes.empty()) text += fmt::format(" ({})", fmt::join(notes, "; "));
  return text;
}

std::vector<int> ranks_on_node(const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                               std::string_view node) {
  std::vector<int> there;
  for (std::size_t i = 0; i < ranks.size() && i < hosts.size(); ++i) {
    if (hosts[i] == node) there.push_back(ranks[i]);
  }
  return there;
}

}  // namespace jobkit::detail
