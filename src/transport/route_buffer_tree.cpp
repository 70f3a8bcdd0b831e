// The buffer tree, the route of the kinds over buffers (broadcast_into, all_gather_into): the tree's
// way, with the bytes moving between the members' own buffers, the node's segment and the sockets
// without intermediate copies. A node-mate's piece goes up through the segment and its leader's
// whole buffer comes back (node_mate_by_tree); a leader's subtree's pieces go up as one
// scatter-gather frame, and the whole buffer comes down in chunks that each leader forwards to its
// children as they arrive.

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "transport/routes.hpp"

namespace jobkit::detail {

namespace {

/// The group ranks whose pieces a leader's buffer holds once its subtree came in: its own, its
/// node-mates' and those under its children.
std::vector<int> pieces_here(const route_media& m, const exchange& ex) {
  std::vector<int> pieces;
  if (ex.contributes_piece(m.context.rank)) pieces.push_back(m.context.rank);
  if (m.node) {
    const auto& mates = m.node->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      if (ex.contributes_piece(mates[i])) pieces.push_back(mates[i]);
    }
  }
  for (const auto& under : m.links->subtrees()) {
    for (const int g : under) {
      if (ex.contributes_piece(g)) pieces.push_back(g);
    }
  }
  return pieces;
}

}  // namespace

void buffer_tree(const route_media& m, const exchange& ex) {
  if (m.node_mate()) {
    node_mate_by_tree(m, ex);
    return;
  }
  auto& context = m.context;
  auto& links = *m.links;
  auto* node = m.node;
  std::vector<rank_bytes> none;  // the children's pieces go straight into the buffer
  tree_links::gather wait(links, ex, ex.deadline, none);
  std::vector<int> pieces;  // node indexes of the node-mates whose pieces are in the segment
  std::size_t used = 0;     // the bytes of the segment's data region they use
  if (m.node_leader()) {
    used = node->await_mates(ex, ex.deadline, wait);
    const auto& mates = node->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      const int index = static_cast<int>(i);
      const auto& slot = node->slot(index);
      if (slot.buffer_size != ex.buffer.size()) context.sizes_differ(ex, mates[i], slot.buffer_size, ex.buffer.size());
      if (!ex.contributes_piece(mates[i])) continue;
      const auto piece = node->contribution(index, used);
      if (node->part(index).has_payload == 0 || piece.size() != ex.piece_size()) {
        context.corrupt_segment(ex,
                                fmt::format("a piece of {} bytes from {}", piece.size(), context.describe(mates[i])),
                                fmt::format("{} were due", ex.piece_size()));
      }
      if (!piece.empty()) pieces.push_back(index);
    }
  }
  const auto take_pieces = [&] {
    for (const int index : pieces) {
      const auto piece = node->contribution(index, used);
      std::memcpy(ex.buffer.data() + ex.piece_offset(node->mates()[static_cast<std::size_t>(index)]), piece.data(),
                  piece.size());
    }
  };
  // A group on one node whose pieces are in place in the segment: its result is there once they
  // are in, so the node-mates may take it while the leader takes their pieces.
  const bool publish_first = m.node_leader() && node->pieces_in_place() && links.root() && links.subtrees().empty();
  if (!publish_first) take_pieces();
  wait.finish();
  if (!links.root()) links.send_pieces_up(ex, ex.deadline, pieces_here(m, ex));
  links.pass_buffer_down(ex, ex.deadline);
  if (m.node_leader()) node->publish_buffer(ex);
  if (publish_first) take_pieces();
}

}  // namespace jobkit::detail
