#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/timeout.hpp"
#include "jobkit/error.hpp"
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

struct group_state;
/// Makes the state of a group of these world ranks (group::split), within the bound.
using subgroup_maker = std::function<std::shared_ptr<group_state>(const std::vector<int>&, const time_bound&)>;

/// What sets up a pending group's data path, in its first collective (the world group's: the
/// runtime's endpoint exchange and tree, src/runtime/runtime.cpp).
class group_connector {
 public:
  virtual ~group_connector() = default;
  /// Sets the state's link, hosts and local_ranks, within the bound. @throws jobkit::error
  virtual void connect(group_state& state, const time_bound& bound) = 0;
};

/// Where a group is in its life. Groups made connected stay so; a pending one (the world group)
/// becomes connected in its first collective, or failed for good when that setup fails (its PMIx
/// fence may still be pending and its key is spent: a retry could not match the other ranks).
enum class group_phase { pending, connected, failed };

/// Why a failed group failed: the setup's error, which every later collective repeats.
struct group_failure {
  errc code;
  std::string reason;
  int native_status = 0;
};

/// What a jobkit::group holds. The transport makes it; the group (collectives, the layer above)
/// is made from it.
struct group_state {
  group_phase phase = group_phase::connected;
  std::unique_ptr<group_connector> pending;  // group_phase::pending: what connects it
  std::optional<group_failure> failure;      // group_phase::failed: why
  std::unique_ptr<transport> link;           // group_phase::connected
  std::vector<int> world_ranks;              // group rank -> world rank
  std::vector<std::string> hosts;            // group rank -> hostname, for messages (empty until connected)
  std::vector<int> local_ranks;              // group rank -> local rank on its node (empty until connected)
  int rank = 0;
  /// A group of these world ranks (group::split); empty where the transport cannot make one.
  subgroup_maker make_subgroup;
};

}  // namespace jobkit::detail
