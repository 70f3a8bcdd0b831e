#pragma once

// The link a group runs its exchanges on (what a group is, and its life, are collectives':
// src/collectives/group_state.hpp).

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/exchange.hpp"

namespace jobkit::detail {

/// The entries of a result that `member` receives (exchange::receives), in their order.
inline std::vector<rank_bytes> received(const exchange& ex, int member, std::vector<rank_bytes> entries) {
  std::erase_if(entries, [&](const rank_bytes& e) { return !ex.receives(member, e.rank); });
  return entries;
}

/// How the ranks of a group reach each other: tcp_tree, the tree protocol (a single rank's group
/// is a tree of one member).
class transport {
 public:
  virtual ~transport() = default;
  /// Runs one exchange (see detail::exchange) and returns the entries this rank receives, in
  /// rank order (none for the kinds over buffers, whose result is in the buffer).
  /// @throws jobkit::error on every member when any member fails, or when the members' buffer
  ///         sizes differ (naming two of them)
  virtual std::vector<rank_bytes> run(const exchange& ex) = 0;
  /// Ends the current or next exchange on every member with this message; the transport is
  /// unusable afterwards.
  virtual void abort(const std::string& message) noexcept = 0;
  /// Throws, without waiting, when a member is known to be gone (a closed connection), after
  /// passing the failure on to the other members.
  virtual void check_peers(const std::string& during) = 0;
  /// Set, for good, once an exchange failed on this member or a member's abort reached it (the
  /// group is unusable from then on). Shared, so that what watches it (an NCCL communicator's
  /// teardown, src/nccl) may outlive the transport; read from any thread.
  virtual std::shared_ptr<const std::atomic<bool>> failed_flag() const noexcept = 0;
};

}  // namespace jobkit::detail
