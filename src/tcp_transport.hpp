#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "jobkit/identity.hpp"
#include "transport.hpp"

namespace jobkit::detail {

class pmix_session;

/// Where a rank listens, learnt once through PMIx.
struct endpoint {
  std::string host;
  int port = 0;
  int node = 0;
  int local_rank = 0;
};

/// This process's listening socket and every rank's endpoint, exchanged in one PMIx put and one
/// collecting fence (the only PMIx traffic of the data path). Groups connect through it; the
/// socket stays open so that later groups need no PMIx at all.
class tcp_fabric {
 public:
  /// @throws jobkit::error when the socket or the exchange fails or times out
  tcp_fabric(pmix_session& pmix, const identity& self, std::chrono::milliseconds timeout);
  ~tcp_fabric();
  tcp_fabric(const tcp_fabric&) = delete;
  tcp_fabric& operator=(const tcp_fabric&) = delete;

  int rank() const noexcept { return rank_; }
  const std::vector<endpoint>& endpoints() const noexcept { return endpoints_; }

  /// A name for the next group with these members, the same on every member as long as members
  /// create their groups in the same order.
  std::string next_group_key(const std::vector<int>& members);
  /// A connection to world rank `peer` that announces this rank as a member of group `key`.
  int connect(int peer, const std::string& key, std::chrono::steady_clock::time_point deadline);
  /// The connections of `peers` (world ranks) to group `key`, in the order of `peers`.
  /// Connections for other groups that arrive meanwhile wait for their own group.
  /// @throws jobkit::timeout_error naming the ranks that did not connect
  std::vector<int> accept(const std::vector<int>& peers, const std::string& key,
                          std::chrono::steady_clock::time_point deadline);

 private:
  int rank_;
  int listen_fd_ = -1;
  std::vector<endpoint> endpoints_;
  std::map<std::pair<std::string, int>, int> waiting_;  // (group key, world rank) -> socket
  std::map<std::string, int> created_;                  // member list -> groups created with it
};

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
  std::string describe(int group_rank) const;

  std::vector<int> members_;
  std::vector<std::string> hosts_;   // per group rank
  int rank_ = 0;                     // group rank
  std::uint64_t sequence_ = 0;
  std::vector<link> children_;
  std::vector<link> parent_link_;    // empty on group rank 0
  std::vector<std::vector<int>> subtree_;  // group ranks under each child
  std::vector<int> child_of_;        // group rank -> index of the child whose subtree has it, or -1
  errc broken_code_ = errc::peer_failure;
  std::string broken_;               // set once the tree failed
};

}  // namespace jobkit::detail
