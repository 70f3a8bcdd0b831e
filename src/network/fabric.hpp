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
#include "network/acceptor.hpp"
#include "network/addresses.hpp"
#include "network/connector.hpp"
#include "network/handshake.hpp"
#include "network/host_watch.hpp"
#include "rendezvous/endpoint_directory.hpp"
#include "rendezvous/rendezvous.hpp"

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
/// The settings of a launched rank: addresses from the host's interfaces and JOBKIT_SOCKET_IFNAME,
/// and the key of this process's turn (take_endpoint_turn: called once per process's fabric).
fabric_settings settings_for(const identity& self);
/// The interfaces and addresses behind settings_for(self).addresses.
std::vector<interface_address> endpoint_interfaces(const identity& self);

/// This process's listening socket and the way to every rank's, composed of three parts: the
/// endpoint_directory (the only PMIx traffic of the data path), the acceptor (the listening
/// socket and its handshakes) and the connector (connections to the others), with a host_watch
/// while a group's creation waits. Where the launcher says where every rank runs (rendezvous::placement: PMIx), each
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
  tcp_fabric(rendezvous& rv, const identity& self, const time_bound& bound, fabric_settings settings);
  ~tcp_fabric();
  tcp_fabric(const tcp_fabric&) = delete;
  tcp_fabric& operator=(const tcp_fabric&) = delete;

  int rank() const noexcept { return rank_; }
  /// The port this rank listens on.
  int port() const { return acceptor_.port(); }
  /// Where every rank runs: the launcher's placement, or the endpoints exchanged by the fence.
  const job_placement& placement() const noexcept { return directory_.placement(); }
  /// The node (its name) of world rank `r`.
  const std::string& host_of(int r) const { return directory_.host_of(r); }
  /// Endpoints are read on demand (no fence): the world's first exchange that every rank joins
  /// proves that every rank has published its endpoint, and settle() says so.
  bool on_demand() const noexcept { return directory_.on_demand(); }
  /// From now on an endpoint that the launcher does not serve within settings.silence_limit
  /// means that its node is lost: every rank has published its own.
  void settle() noexcept { directory_.settle(); }
  bool settled() const noexcept { return directory_.settled(); }
  int world_size() const noexcept { return world_size_; }
  /// "/jobkit-<job>.<step>": how the names of this step's shared memory segments begin.
  const std::string& segment_prefix() const noexcept { return segment_prefix_; }
  /// Connections dropped because they did not prove membership.
  std::uint64_t dropped_connections() const noexcept { return acceptor_.dropped(); }

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
  /// `timeout`: the call's whole timeout, of which `deadline` is the end (for the message).
  std::vector<int> accept(const std::vector<int>& peers, const std::string& key, steady_clock::time_point deadline,
                          std::chrono::milliseconds timeout,
                          const std::function<void(std::size_t, int, const std::string&)>& tell = {});

 private:
  std::string describe_members(const std::string& key) const;
  /// Why the first of `missing` (world ranks) is lost, once a second passed: its node served
  /// no endpoint, is silent, or refuses its port (the process is gone).
  std::optional<host_watch::verdict> lost_among(const std::vector<int>& missing, host_watch& watch,
                                                steady_clock::time_point start, steady_clock::time_point deadline);

  int rank_;
  int world_size_;
  // This rank's logger, with the identity of the runtime that owns this fabric (which need not be
  // the process's runtime in use: a program may make a second one).
  logger log_;
  fabric_settings settings_;
  secret_bytes secret_{};
  std::string segment_prefix_;
  acceptor acceptor_;
  endpoint_directory directory_;
  connector connector_;
  std::map<std::string, int> created_;              // member list -> groups created with it
  std::map<std::string, std::string> key_members_;  // group key -> its members, for messages
};

}  // namespace jobkit::detail
