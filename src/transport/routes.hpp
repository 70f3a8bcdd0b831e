#pragma once

// The routes of the tree protocol, one per file (route_*.cpp), each reading top to bottom: what an
// exchange does on its way, over the group's two media. tree_node is the node's shared segment
// (slots a member signs, words it waits on with a deadline, parts it reads, mail, an abort
// notice); tree_links are the node leaders' TCP links (frames up and down with their checks,
// receipts, aborts). tcp_tree::route_of decides which route an exchange takes, and
// tcp_tree::run_exchange its size fallbacks.

#include <optional>
#include <vector>

#include "transport/transport.hpp"
#include "transport/tree_context.hpp"
#include "transport/tree_links.hpp"
#include "transport/tree_node.hpp"

namespace jobkit::detail {

/// What a route runs on: the group's context and its two media. `node` is null on a member alone
/// on its node; `links` is null on a node-mate (a member of a node but not its leader).
struct route_media {
  tree_context& context;
  tree_node* node;
  tree_links* links;

  bool node_leader() const noexcept { return node && node->leader(); }
  bool node_mate() const noexcept { return node && !node->leader(); }
};

/// Every member on one node, a broadcast: the source posts its bytes as the node's mail and goes
/// on; the others take them (route_node_broadcast.cpp). Empty when they do not fit (`fits`, the
/// source's decision): every member then takes the tree.
std::optional<std::vector<rank_bytes>> node_broadcast(const route_media& m, const exchange& ex, bool fits);

/// Every member on one node, a barrier, all_gather or all_reduce: once every member arrived, each
/// reads the others' parts and folds them itself (in rank order: the same bits on every member);
/// when a contribution is too large for its part, the last to arrive gathers the large ones in the
/// segment's data region, finishes and publishes the result (route_node_exchange.cpp).
std::vector<rank_bytes> node_exchange(const route_media& m, const exchange& ex);

/// A broadcast from group rank 0 of a group that spans nodes, one way: the root sends its bytes
/// down and goes on; each leader sends a receipt up, posts the bytes as its node's mail and passes
/// them on to its children (route_one_way_broadcast.cpp). Empty when they do not fit (`fits`, the
/// root's decision): every member then takes the tree.
std::optional<std::vector<rank_bytes>> one_way_broadcast(const route_media& m, const exchange& ex, bool fits);

/// The tree: every contribution up to group rank 0 (a node's through its leader, folded on the way
/// when the exchange folds), the result back down (route_tree.cpp).
std::vector<rank_bytes> tree_exchange(const route_media& m, const exchange& ex);

/// A node-mate's exchange by the tree (either tree's): its contribution (or its piece of the
/// buffer) up to its leader through the segment, its leader's result back (into its buffer, for
/// the kinds over buffers) (route_tree.cpp).
std::vector<rank_bytes> node_mate_by_tree(const route_media& m, const exchange& ex);

/// The tree's way for the kinds over buffers: node-mates through the segment; between nodes,
/// pieces go up as scatter-gather frames from the buffers and the whole buffer comes down in
/// chunks that each leader forwards to its children as they arrive, straight from and into the
/// members' buffers (route_buffer_tree.cpp).
void buffer_tree(const route_media& m, const exchange& ex);

}  // namespace jobkit::detail
