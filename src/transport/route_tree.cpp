// The tree: every member's contribution goes up to group rank 0 (a node-mate's through its node's
// segment to its leader, a leader's subtree over its TCP link to its parent), folded on the way
// when the exchange folds; group rank 0 finishes the result, and it comes back down the same way.

#include <algorithm>

#include "transport/routes.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

/// A leader's contributions: its own, its node-mates' (through the segment) and its children's
/// (over the links, taken as they arrive while it waits for the node).
std::vector<rank_bytes> gather_up(const route_media& m, const exchange& ex) {
  std::vector<rank_bytes> entries;
  if (ex.mine) entries.push_back(rank_bytes{m.context.rank, {ex.mine->begin(), ex.mine->end()}});
  tree_links::gather wait(*m.links, ex, ex.deadline, entries);
  if (m.node_leader()) {
    auto& node = *m.node;
    const auto used = node.await_mates(ex, ex.deadline, wait);
    const auto& mates = node.mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      if (node.part(static_cast<int>(i)).has_payload == 0) continue;
      const auto bytes = node.contribution(static_cast<int>(i), used);
      entries.push_back(rank_bytes{mates[i], {bytes.begin(), bytes.end()}});
    }
  }
  wait.finish();
  return entries;
}

}  // namespace

std::vector<rank_bytes> node_mate_by_tree(const route_media& m, const exchange& ex) {
  auto& node = *m.node;
  node.check(ex, false);
  const auto contribution = ex.contribution_of(m.context.rank);
  const auto mine = contribution.value_or(std::span<const std::byte>{});
  if (contribution && !ex.into_buffer()) m.context.check_size(mine.size(), ex);
  node.contribute(ex, ex.deadline, mine, contribution.has_value());
  node.wait_for_result(ex, ex.deadline);
  if (!ex.into_buffer()) return node.read_result(ex);
  node.read_buffer(ex);
  return {};
}

std::vector<rank_bytes> tree_exchange(const route_media& m, const exchange& ex) {
  if (m.node_mate()) return node_mate_by_tree(m, ex);
  auto& context = m.context;
  auto& links = *m.links;
  auto entries = gather_up(m, ex);
  if (ex.fold && !entries.empty()) {
    entries = context.user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  std::vector<std::byte> everyone;  // what every child receives when the result goes to everyone
  if (!links.root()) {
    entries = links.up_and_back(ex, ex.deadline, entries, everyone);
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    if (ex.finish) entries = context.user_step(ex, [&] { return ex.finish(entries); });
    if (ex.to_everyone() && (links.children() > 0 || m.node_leader())) everyone = all_entries(entries);
  }
  if (m.node_leader()) m.node->publish(ex, entries, everyone);
  links.send_down(ex, ex.deadline, entries, everyone);
  return received(ex, context.rank, std::move(entries));
}

}  // namespace jobkit::detail
