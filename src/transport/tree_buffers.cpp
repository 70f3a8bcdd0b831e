// tcp_tree's buffer tree, the route of the kinds over buffers (broadcast_into, all_gather_into):
// the bytes move between the members' own buffers, the node's segment and the sockets without
// intermediate copies; the node's part is tree_node's, the links' part tree_links'.

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "transport/tree.hpp"

namespace jobkit::detail {

std::vector<int> tcp_tree::pieces_here(const exchange& ex) const {
  std::vector<int> pieces;  // the contributors of this subtree, whose pieces this buffer holds now
  if (ex.contributes_piece(context_.rank)) pieces.push_back(context_.rank);
  if (node_) {
    const auto& mates = node_->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      if (ex.contributes_piece(mates[i])) pieces.push_back(mates[i]);
    }
  }
  for (const auto& under : links_->subtrees()) {
    for (const int g : under) {
      if (ex.contributes_piece(g)) pieces.push_back(g);
    }
  }
  return pieces;
}

void tcp_tree::run_buffer_tree(const exchange& ex) {
  const auto deadline = steady_clock::now() + ex.timeout;
  std::vector<rank_bytes> none;  // the children's pieces go straight into the buffer
  tree_links::gather wait(*links_, ex, deadline, none);
  std::vector<int> pieces;  // node indexes of the node-mates whose pieces are in the segment
  std::size_t used = 0;     // the bytes of the segment's data region they use
  if (node_leader()) {
    used = node_->await_mates(ex, deadline, wait);
    const auto& mates = node_->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      const int index = static_cast<int>(i);
      const auto& slot = node_->slot(index);
      if (slot.buffer_size != ex.buffer.size()) context_.sizes_differ(ex, mates[i], slot.buffer_size, ex.buffer.size());
      if (!ex.contributes_piece(mates[i])) continue;
      const auto piece = node_->contribution(index, used);
      if (node_->part(index).has_payload == 0 || piece.size() != ex.piece_size()) {
        context_.corrupt_segment(ex,
                                 fmt::format("a piece of {} bytes from {}", piece.size(), context_.describe(mates[i])),
                                 fmt::format("{} were due", ex.piece_size()));
      }
      if (!piece.empty()) pieces.push_back(index);
    }
  }
  const auto take_pieces = [&] {
    for (const int index : pieces) {
      const auto piece = node_->contribution(index, used);
      std::memcpy(ex.buffer.data() + ex.piece_offset(node_->mates()[static_cast<std::size_t>(index)]), piece.data(),
                  piece.size());
    }
  };
  // A group on one node whose pieces are in place in the segment: its result is there once they
  // are in, so the node-mates may take it while the leader takes their pieces.
  const bool publish_first = node_leader() && node_->pieces_in_place() && links_->root() && links_->subtrees().empty();
  if (!publish_first) take_pieces();
  wait.finish();
  if (!links_->root()) links_->send_pieces_up(ex, deadline, pieces_here(ex));
  links_->pass_buffer_down(ex, deadline);
  if (node_leader()) node_->publish_buffer(ex);
  if (publish_first) take_pieces();
}

}  // namespace jobkit::detail
