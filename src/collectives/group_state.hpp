#pragma once

// A group's life: what a jobkit::group holds (group_state), how a pending one connects, and the
// states over the transport's trees. The transport (the layer below) knows none of this: it
// provides the link (transport/transport.hpp) that a connected state runs its exchanges on.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/timeout.hpp"
#include "jobkit/collectives.hpp"
#include "jobkit/error.hpp"
#include "transport/transport.hpp"

namespace jobkit::detail {

class tcp_fabric;
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

/// What a jobkit::group holds.
struct group_state {
  group_phase phase = group_phase::connected;
  std::unique_ptr<group_connector> pending;  // group_phase::pending: what connects it
  std::optional<group_failure> failure;      // group_phase::failed: why
  std::unique_ptr<transport> link;           // group_phase::connected
  std::vector<int> world_ranks;              // group rank -> world rank
  std::vector<std::string> hosts;            // group rank -> hostname, for messages (empty until connected)
  std::vector<int> local_ranks;              // group rank -> local rank on its node (empty until connected)
  int rank = 0;
  /// A group of these world ranks (group::split); empty where no subgroup can be made.
  subgroup_maker make_subgroup;
};

/// The one way to jobkit::group's private constructor (its friend).
struct group_access {
  static group over(std::shared_ptr<group_state> state);
};

/// The group over a state (the runtime's groups, a split, the tests' in-process groups).
inline group group_over(std::shared_ptr<group_state> state) { return group_access::over(std::move(state)); }

/// The state of a group of these world ranks over a new tcp_tree (collective over the members).
/// Its split makes groups with make_subgroup, by default through the same fabric, which must
/// outlive them. The first group of every rank of an unsettled fabric (the world) settles it
/// after its first exchange (tcp_tree::settle_after_first_exchange).
std::shared_ptr<group_state> make_tcp_group_state(tcp_fabric& fabric, const std::vector<int>& members,
                                                  const time_bound& bound, subgroup_maker make_subgroup = {});

/// The state of a group whose only member is this process (world rank `world_rank`): what a
/// single-rank job uses, with no launcher and no sockets. Its split makes groups of one too.
std::shared_ptr<group_state> make_single_rank_group_state(int world_rank, const std::string& hostname);

}  // namespace jobkit::detail
