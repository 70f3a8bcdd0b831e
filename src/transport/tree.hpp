#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <span>

#include "transport/fabric.hpp"
#include "transport/transport.hpp"

namespace jobkit::detail {

struct protocol_violation;

/// The data path of a group: a tree of TCP connections, the members of a node under their first
/// member and those node leaders in a binomial tree under group rank 0. Every wait has a deadline
/// and uses poll(2); a closed connection or an abort from any member fails the exchange on every
/// member. One exchange at a time, in the same order on every member.
class tcp_tree final : public transport {
 public:
  /// members: world ranks in group-rank order; the calling rank must be one of them.
  /// @throws jobkit::error when a connection fails or times out
  tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout);
  ~tcp_tree() override;

  std::vector<rank_bytes> run(const exchange& ex) override;
  void abort(const std::string& message) noexcept override;
  void check_peers(const std::string& during) override;

 private:
  struct link {
    int fd = -1;
    int peer = -1;  // group rank
  };
  std::vector<rank_bytes> gather_up(const exchange& ex);
  /// Runs fold or finish; an exception reaches every member as an abort and is rethrown here.
  template <class Step>
  std::vector<rank_bytes> user_step(const exchange& ex, Step&& step);
  /// Sends an abort to every neighbour but the one at origin, closes the links, marks the tree
  /// unusable.
  void spread_abort(const std::string& message, int origin, errc code) noexcept;
  [[noreturn]] void fail(const std::string& message, int origin, errc code = errc::peer_failure);
  [[noreturn]] void lost(const link& l, const std::string& why, const exchange& ex);
  [[noreturn]] void broke_protocol(const link& l, const protocol_violation& v, const exchange& ex);
  /// Fails the group when a payload exceeds what one frame may carry.
  void check_size(std::span<const std::byte> payload, const exchange& ex);
  std::string describe(int group_rank) const;

  std::vector<int> members_;
  std::vector<std::string> hosts_;  // per group rank
  int rank_ = 0;                    // group rank
  std::uint64_t sequence_ = 0;
  std::vector<link> children_;
  std::vector<link> parent_link_;          // empty on group rank 0
  std::vector<std::vector<int>> subtree_;  // group ranks under each child
  std::vector<int> child_of_;              // group rank -> index of the child whose subtree has it, or -1
  errc broken_code_ = errc::peer_failure;
  std::string broken_;  // set once the tree failed
};

using subgroup_maker = std::function<group(const std::vector<int>&, std::chrono::milliseconds)>;
/// A group of these world ranks over a new tcp_tree (collective over the members). Its split
/// makes groups with make_subgroup, by default through the same fabric, which must outlive them.
group make_tcp_group(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout,
                     subgroup_maker make_subgroup = {});

}  // namespace jobkit::detail
