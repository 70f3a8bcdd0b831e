// The node broadcast: every member of the group on one node. The source posts its bytes as the
// node's mail and goes on, as MPI_Bcast may; the others take the mail. When the bytes do not fit
// in mail (the source's decision) it posts a notice instead and every member takes the tree.

#include "transport/routes.hpp"

namespace jobkit::detail {

std::optional<std::vector<rank_bytes>> node_broadcast(const route_media& m, const exchange& ex, bool fits) {
  auto& node = *m.node;
  // A source that posted its last broadcast may have left the group already: the others look
  // for the mail before they look at the node.
  if (ex.source() != m.context.rank) return node.take_mail(ex, ex.deadline);
  node.check(ex, false);
  const auto mine = ex.mine.value_or(std::span<const std::byte>{});
  if (!node.post_mail(ex, ex.deadline, mine, fits, ex.site)) return std::nullopt;
  return std::vector<rank_bytes>{rank_bytes{m.context.rank, {mine.begin(), mine.end()}}};
}

}  // namespace jobkit::detail
