#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "jobkit/error.hpp"

namespace jobkit::detail {

class pmix_session;

/// Where a collective was called from and which one it is, sent with every frame so that ranks
/// meeting at different collectives are reported instead of paired.
struct op_context {
  std::string name;  ///< "barrier", "broadcast", ...
  std::string site;  ///< "file.cpp:42"
  std::chrono::milliseconds timeout;
};

/// One rank's bytes.
struct rank_bytes {
  int rank;
  std::vector<std::byte> bytes;
};

/// The data path of the control-plane collectives: a tree of TCP connections, node-local ranks
/// under their node leader and node leaders in a binomial tree under rank 0, built once from
/// endpoints exchanged through one PMIx collecting fence. Every wait has a deadline and uses
/// poll(2); a closed connection or an abort from any rank fails the operation on every rank.
/// Not thread-safe: one collective at a time, called in the same order on every rank.
class tcp_tree {
 public:
  /// @throws jobkit::error when the endpoint exchange or a connection fails or times out
  tcp_tree(pmix_session& pmix, int rank, int world_size, int node_rank,
           std::chrono::milliseconds timeout);
  ~tcp_tree();
  tcp_tree(const tcp_tree&) = delete;
  tcp_tree& operator=(const tcp_tree&) = delete;

  /// Every rank's bytes, gathered up the tree, then the whole set sent down to every rank.
  /// Entries are in rank order. Ranks that contribute nothing pass an empty span.
  std::vector<rank_bytes> all_gather(std::span<const std::byte> mine, const op_context& op);

 private:
  struct link;
  std::vector<rank_bytes> gather_up(std::span<const std::byte> mine, const op_context& op);
  /// Sends an abort to every neighbour but origin_rank, closes the links, throws.
  [[noreturn]] void fail(const std::string& message, int origin_rank, errc code = errc::peer_failure);
  [[noreturn]] void lost(const link& l, const std::string& why, const op_context& op);
  std::string describe(int rank) const;

  int rank_;
  std::uint64_t sequence_ = 0;
  std::vector<std::string> hosts_;  // per rank
  std::vector<int> parent_;
  std::vector<std::vector<int>> subtree_;  // ranks under each child link, for timeout reports
  std::vector<link> children_;
  std::vector<link> parent_link_;  // empty on rank 0
  int listen_fd_ = -1;
};

}  // namespace jobkit::detail
