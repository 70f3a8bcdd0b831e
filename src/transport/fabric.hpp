#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/environment.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "jobkit/identity.hpp"
#include "jobkit/log.hpp"
#include "transport/addresses.hpp"
#include "transport/handshake.hpp"
#include "transport/rendezvous.hpp"

namespace jobkit::detail {

/// What a fabric listens on and publishes.
struct fabric_settings {
  /// Numeric addresses published for the peers, tried by them in order (see
  /// choose_endpoint_addresses). 127.0.0.1 alone makes the fabric listen on loopback only.
  std::vector<std::string> addresses;
  /// How long an accepted connection may take to prove its membership before it is dropped.
  std::chrono::milliseconds handshake_timeout{5000};
  /// How long a peer's host may answer nothing (lost_node_timeout()): the bound of one
  /// connection attempt to one address, and the keepalive of every link (set_link_options).
  std::chrono::milliseconds silence_limit{8000};
  /// The rendezvous key this fabric publishes its endpoint under and reads its peers' from.
  std::string endpoint_key = "jobkit.endpoint";
};
/// The endpoint key of a process: "jobkit.endpoint", or "jobkit.endpoint.N" under
/// JOBKIT_ENDPOINT_GENERATION=N (1 to 1000), which `jobkit exec` and `jobkit env` set for the program
/// they hand the step to: their own process already published an endpoint under the same launcher
/// rank, and a second one under the same key would be read as the first (stale, refused connections).
std::string endpoint_key(const environment& env);
/// The generation behind endpoint_key: 0 when JOBKIT_ENDPOINT_GENERATION is unset or empty, else
/// its value (1 to max_endpoint_generation; anything else is an invalid_environment naming it).
inline constexpr int max_endpoint_generation = 1000;
int endpoint_generation(const environment& env);
/// The settings of a launched rank: addresses from the host's interfaces and JOBKIT_SOCKET_IFNAME.
fabric_settings settings_for(const identity& self);
/// The interfaces and addresses behind settings_for(self).addresses.
std::vector<interface_address> endpoint_interfaces(const identity& self);

/// Raises `e`, a failure of the data path's setup on `self`, with what the rendezvous can say of
/// the ranks that never arrived: those of this node that never published their endpoint under
/// `key` (the fabric's endpoint_key), or that the missing rank is on another node.
[[noreturn]] void raise_setup_failure(rendezvous& rv, const std::string& key, const identity& self, const error& e);

/// This process's listening socket and the way to every rank's: the only PMIx traffic of the
/// data path. Where the launcher says where every rank runs (rendezvous::placement: PMIx), each
/// rank puts and commits its endpoint and reads a peer's only when it first connects to it or
/// watches it (one direct get, answered by the peer's node: no fence, nothing proportional to the
/// job); elsewhere (PMI-2) every endpoint comes through one collecting fence. Groups connect
/// through it; the socket stays open so that later groups need no more than the endpoints of
/// their tree neighbours.
///
/// Membership is proven on every connection (see transport/handshake.hpp). Connections that do
/// not prove it (strangers: port scanners, other users' processes, a rank of another step) are
/// handshaken concurrently, each within settings.handshake_timeout, and dropped without
/// disturbing the step; they are counted and reported at debug level with their address.
class tcp_fabric {
 public:
  /// @throws jobkit::error when the socket or the exchange fails or times out
  tcp_fabric(rendezvous& rv, const identity& self, std::chrono::milliseconds timeout, fabric_settings settings);
  ~tcp_fabric();
  tcp_fabric(const tcp_fabric&) = delete;
  tcp_fabric& operator=(const tcp_fabric&) = delete;

  int rank() const noexcept { return rank_; }
  /// The port this rank listens on.
  int port() const { return known_.at(rank_).port; }
  /// Where every rank runs: the launcher's placement, or the endpoints exchanged by the fence.
  const job_placement& placement() const noexcept { return placement_; }
  /// The node (its name) of world rank `r`.
  const std::string& host_of(int r) const {
    return placement_.nodes.at(static_cast<std::size_t>(placement_.node_of.at(static_cast<std::size_t>(r))));
  }
  /// Endpoints are read on demand (no fence): the world's first exchange that every rank joins
  /// proves that every rank has published its endpoint, and settle() says so.
  bool on_demand() const noexcept { return on_demand_; }
  /// From now on an endpoint that the launcher does not serve within settings.silence_limit
  /// means that its node is lost: every rank has published its own.
  void settle() noexcept { settled_ = true; }
  bool settled() const noexcept { return settled_; }
  int world_size() const noexcept { return world_size_; }
  /// "/jobkit-<job>.<step>": how the names of this step's shared memory segments begin.
  const std::string& segment_prefix() const noexcept { return segment_prefix_; }
  /// Connections dropped because they did not prove membership.
  std::uint64_t dropped_connections() const noexcept { return dropped_; }

  /// A name for the next group with these members, the same on every member as long as members
  /// create their groups in the same order.
  std::string next_group_key(const std::vector<int>& members);
  /// An authenticated connection to world rank `peer` for group `key`.
  /// @throws jobkit::error naming the peer and every address tried
  int connect(int peer, const std::string& key, steady_clock::time_point deadline);
  /// The connections of `peers` (world ranks) to group `key`, in the order of `peers`.
  /// Connections for other groups that arrive meanwhile wait for their own group.
  /// Meanwhile the hosts of the ranks that have not connected yet are watched (host_watch): a rank
  /// whose node went silent, or whose process is gone, fails the call within
  /// settings.silence_limit. Before either failure `tell` is called with each connection already
  /// accepted (its index in peers) and the message, so that the peer learns why.
  /// @throws jobkit::timeout_error naming the ranks that did not connect; jobkit::error
  ///         (peer_failure) naming a rank whose node is lost or whose process is gone
  std::vector<int> accept(const std::vector<int>& peers, const std::string& key, steady_clock::time_point deadline,
                          const std::function<void(std::size_t, int, const std::string&)>& tell = {});

 private:
  struct pending;
  /// One attempt; `transient`: refused or reset, so that another attempt may succeed.
  /// The endpoint of `peer`, read once; nullptr with `why` when it did not come by `until`.
  const endpoint* fetch(int peer, steady_clock::time_point until, std::string& why);
  /// fetch, bounded by the deadline (by the silence limit once settled). @throws jobkit::error
  const endpoint& endpoint_of(int peer, steady_clock::time_point deadline);
  std::optional<int> connect_to(const endpoint& e, int peer, const std::string& address, const std::string& key,
                                steady_clock::time_point deadline, std::string& why, bool& transient);
  void take_new_connections();
  /// Reads what a pending connection sent; true when it is done (admitted or dropped).
  bool advance(pending& p);
  void drop(pending& p, const std::string& why);
  std::string describe_members(const std::string& key) const;

  rendezvous& rv_;
  int rank_;
  int world_size_;
  // This rank's logger: not default_logger(), whose identity is the default runtime's, which an
  // explicit jobkit::runtime must not open (a second PMIx session: PMIx counts initialisations,
  // and the explicit runtime's PMIx_Finalize then left the connection unfinalised).
  logger log_;
  bool on_demand_ = false;
  bool settled_ = false;
  job_placement placement_;
  int listen_fd_ = -1;
  fabric_settings settings_;
  secret_bytes secret_{};
  std::map<int, endpoint> known_;  // world rank -> its endpoint, once read
  std::string segment_prefix_;
  std::vector<pending> pending_;
  std::uint64_t dropped_ = 0;
  bool accept_paused_ = false;  // out of file descriptors: accept again at accept_resume_
  steady_clock::time_point accept_resume_{};
  std::map<std::pair<std::string, int>, int> waiting_;  // (group key, world rank) -> socket
  std::map<std::string, int> created_;                  // member list -> groups created with it
  std::map<std::string, std::string> key_members_;      // group key -> its members, for messages
};

}  // namespace jobkit::detail
