// The one-way broadcast: a broadcast from group rank 0 of a group that spans nodes. The root sends
// its bytes down its links and goes on, as MPI_Bcast may; each leader below it sends a receipt up,
// posts the bytes as its node's mail and passes them on to its children, whose receipts it reads
// when they come; each node-mate takes the mail. When the bytes do not fit in mail (the root's
// decision) a notice goes the same way and every member takes the tree.

#include "transport/frame.hpp"
#include "transport/routes.hpp"

namespace jobkit::detail {

std::optional<std::vector<rank_bytes>> one_way_broadcast(const route_media& m, const exchange& ex, bool fits) {
  if (m.node_mate()) return m.node->take_mail(ex, ex.deadline);
  auto* node = m.node;
  auto& links = *m.links;
  if (node) node->check_members(ex, false);
  tree_links::broadcast b;
  if (links.root()) {
    const auto mine = ex.mine.value_or(std::span<const std::byte>{});
    b.one_way = fits;
    b.source_site = ex.site;
    if (b.one_way) {
      b.entries.push_back(rank_bytes{m.context.rank, {mine.begin(), mine.end()}});
      append_entries(b.everyone, {&b.entries.front()});
    }
  } else {
    b = links.receive_broadcast(ex, ex.deadline, [&] {
      if (node) node->check_members(ex, true);
    });
  }
  // The node first, as the ordinary exchange does: measured faster on nodes with more ranks than
  // cores (bench/RESULTS.md, "2026-11-24, 8bb13f0: a one-way broadcast across nodes").
  if (node) {
    const auto bytes = b.one_way ? std::span<const std::byte>(b.entries.front().bytes) : std::span<const std::byte>{};
    node->post_mail(ex, ex.deadline, bytes, b.one_way, b.source_site);
  }
  links.pass_on_broadcast(ex, ex.deadline, b);
  if (!b.one_way) return std::nullopt;
  return std::move(b.entries);
}

}  // namespace jobkit::detail
