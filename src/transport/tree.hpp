#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/timeout.hpp"
#include "network/fabric.hpp"
#include "transport/transport.hpp"
#include "transport/tree_context.hpp"
#include "transport/tree_links.hpp"
#include "transport/tree_node.hpp"

namespace jobkit::detail {

/// The data path of a group: the members of a node meet in a shared memory segment under their
/// first member, the node's leader (tree_node); the leaders form a binomial tree of TCP
/// connections under group rank 0 (tree_links). Each exchange takes one route (routes.hpp) over
/// these two media. Every wait has a deadline; a closed connection, a
/// node-mate whose process ended (seen through its pidfd) or an abort from any member fails the
/// exchange on every member. One exchange at a time, in the same order on every member.
class tcp_tree final : public transport, private abort_spreader {
 public:
  /// members: world ranks in group-rank order; the calling rank must be one of them.
  /// @throws jobkit::error when a connection fails or times out
  tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, const time_bound& bound);
  /// The tree of a group whose only member is this process (world rank `world_rank` on `host`):
  /// no segment and no links, so every exchange takes the tree's way on one member.
  tcp_tree(int world_rank, const std::string& host);
  ~tcp_tree() override = default;

  std::vector<rank_bytes> run(const exchange& ex) override;
  void abort(const std::string& message) noexcept override;
  void check_peers(const std::string& during) override;
  std::shared_ptr<const std::atomic<bool>> failed_flag() const noexcept override { return failed_; }
  /// For the world's tree of a fabric that reads endpoints on demand: once this rank's first
  /// exchange that every member joins (any but a one-way broadcast) completes, every rank has
  /// published its endpoint, and the fabric is told so (tcp_fabric::settle). The fabric must
  /// outlive this tree.
  void settle_after_first_exchange(tcp_fabric& fabric);

 private:
  /// Which way an exchange takes, by its kind and the group's shape; the one place that decides,
  /// with run_exchange's size fallbacks. Each route is one file (routes.hpp):
  /// node_broadcast: every member on one node, the root's bytes as mail (one way);
  /// node_exchange: every member on one node, each reads the others' parts (no leader);
  /// one_way_broadcast: a broadcast from group rank 0 down the leaders' tree (one way);
  /// tree: contributions up to group rank 0 (through node leaders), the result back down;
  /// buffer_tree: the tree's way for the kinds over buffers, the bytes moving between the
  /// members' buffers, the node's segment and the sockets.
  enum class route { node_broadcast, node_exchange, one_way_broadcast, tree, buffer_tree };
  route route_of(const exchange& ex) const;
  /// The size rule of both one-way routes, decided by the source alone: whether its bytes fit in
  /// mail. When they do not, the source posts a notice instead and every member takes the tree.
  static bool fits_one_way(const exchange& ex);
  /// Fails on a group that failed before; else starts the next exchange (its sequence number).
  void begin_exchange(const exchange& ex);
  /// Marks the tree unusable and tells every member, on both media.
  void spread_abort(const std::string& message, int origin, errc code) noexcept override;
  /// The group's first failure, recorded as a "failure" event for jobkit run, when it supervises.
  void record_failure(const std::string& message) const noexcept;

  /// run() without settling.
  std::vector<rank_bytes> run_exchange(const exchange& ex);

  tree_context context_;
  std::shared_ptr<std::atomic<bool>> failed_ = std::make_shared<std::atomic<bool>>(false);  // see failed_flag
  tcp_fabric* settling_ = nullptr;     // see settle_after_first_exchange
  std::unique_ptr<tree_node> node_;    // empty when alone on its node
  std::unique_ptr<tree_links> links_;  // empty on a node-mate (not its node's leader)
};

}  // namespace jobkit::detail
