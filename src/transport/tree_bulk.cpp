// tcp_tree's bulk exchanges (broadcast_into, all_gather_into): the bytes move between the
// members' own buffers, the node's segment and the sockets without intermediate copies; the
// node's part is tree_node's, the links' part tree_links'.

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "transport/tree.hpp"

namespace jobkit::detail {

std::vector<int> tcp_tree::bulk_pieces(const bulk_exchange& bx) const {
  std::vector<int> pieces;  // the contributors of this subtree, whose pieces this buffer holds now
  if (bx.contributes(context_.rank)) pieces.push_back(context_.rank);
  if (node_) {
    const auto& mates = node_->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      if (bx.contributes(mates[i])) pieces.push_back(mates[i]);
    }
  }
  for (const auto& under : links_->subtrees()) {
    for (const int g : under) {
      if (bx.contributes(g)) pieces.push_back(g);
    }
  }
  return pieces;
}

void tcp_tree::run_bulk(const bulk_exchange& bx) {
  const auto& ex = bx.base;
  begin_exchange(ex);
  if (node_mate()) return node_->bulk_as_mate(bx);
  const auto deadline = steady_clock::now() + ex.timeout;
  tree_links::gather wait(*links_, bx, deadline);
  std::vector<int> pieces;  // node indexes of the node-mates whose pieces are in the segment
  std::size_t used = 0;     // the bytes of the segment's data region they use
  if (node_leader()) {
    used = node_->await_mates(ex, deadline, wait, &bx);
    const auto& mates = node_->mates();
    for (std::size_t i = 1; i < mates.size(); ++i) {
      const int index = static_cast<int>(i);
      const auto& slot = node_->slot(index);
      if (slot.bulk_size != bx.buffer.size()) context_.sizes_differ(ex, mates[i], slot.bulk_size, bx.buffer.size());
      if (!bx.contributes(mates[i])) continue;
      const auto piece = node_->contribution(index, used);
      if (node_->part(index).has_payload == 0 || piece.size() != bx.piece_size()) {
        context_.fail(
            ex,
            fmt::format("{} found a piece of {} bytes from {} in the node's shared memory during {} at {}, where {} "
                        "were due: a bug, memory corruption, or two jobkit builds in one step",
                        context_.describe(context_.rank), piece.size(), context_.describe(mates[i]), ex.name, ex.site,
                        bx.piece_size()),
            context_.rank, errc::internal);
      }
      if (!piece.empty()) pieces.push_back(index);
    }
  }
  const auto take_pieces = [&] {
    for (const int index : pieces) {
      const auto piece = node_->contribution(index, used);
      std::memcpy(bx.buffer.data() + bx.offset(node_->mates()[static_cast<std::size_t>(index)]), piece.data(),
                  piece.size());
    }
  };
  // A group on one node whose pieces are in place in the segment: its result is there once they
  // are in, so the node-mates may take it while the leader takes their pieces.
  const bool publish_first = node_leader() && node_->pieces_in_place() && links_->root() && links_->subtrees().empty();
  if (!publish_first) take_pieces();
  wait.finish();
  if (!links_->root()) links_->send_up_bulk(bx, deadline, bulk_pieces(bx));
  links_->pass_down_bulk(bx, deadline);
  if (node_leader()) node_->publish_buffer(bx);
  if (publish_first) take_pieces();
}

}  // namespace jobkit::detail
