#pragma once

// Where every rank listens, learnt through the rendezvous (the room of the data path that knows
// PMIx and PMI-2, through transport/rendezvous.hpp): this rank publishes its endpoint once, and
// reads a peer's only when it first needs it (a direct get, no fence) where the launcher says where
// every rank runs; elsewhere (PMI-2) every endpoint comes through one collecting fence.

#include <chrono>
#include <map>
#include <string>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "jobkit/identity.hpp"
#include "jobkit/log.hpp"
#include "rendezvous/endpoint.hpp"
#include "rendezvous/rendezvous.hpp"

namespace jobkit::detail {

/// Raises `e`, a failure of the data path's setup on `self`, with what the rendezvous can say of
/// the ranks that never arrived: those of this node that never published their endpoint under
/// `key` (the fabric's endpoint_key), or that the missing rank is on another node.
[[noreturn]] void raise_setup_failure(rendezvous& rv, const std::string& key, const identity& self, const error& e);

class endpoint_directory {
 public:
  /// Publishes `mine` under `key` and learns where every rank runs (the launcher's placement, or
  /// every endpoint through one fence that ends by `bound`'s deadline).
  /// @throws jobkit::error when the placement contradicts this rank's identity, or the fence fails
  endpoint_directory(rendezvous& rv, const identity& self, endpoint mine, std::string key, const time_bound& bound,
                     std::chrono::milliseconds silence_limit, const logger& log);

  const job_placement& placement() const noexcept { return placement_; }
  /// The node (its name) of world rank `r`.
  const std::string& host_of(int r) const {
    return placement_.nodes.at(static_cast<std::size_t>(placement_.node_of.at(static_cast<std::size_t>(r))));
  }
  int port() const { return known_.at(rank_).port; }
  bool on_demand() const noexcept { return on_demand_; }
  void settle() noexcept { settled_ = true; }
  bool settled() const noexcept { return settled_; }

  /// The endpoint of `peer` when already read, else nullptr.
  const endpoint* known(int peer) const;
  /// The endpoint of `peer`, read once; nullptr with `why` when it did not come by `until`.
  const endpoint* fetch(int peer, steady_clock::time_point until, std::string& why);
  /// fetch, bounded by the deadline (by the silence limit once settled: then a missing endpoint
  /// names the peer's node as lost). @throws jobkit::error
  const endpoint& endpoint_of(int peer, steady_clock::time_point deadline);
  /// Once settled: the lost-node text for a peer whose endpoint its node did not serve within the
  /// silence limit (fetch's `why` as detail), else empty after reading it.
  std::string unanswered(int peer, steady_clock::time_point deadline);

 private:
  rendezvous& rv_;
  int rank_;
  std::string key_;
  std::chrono::milliseconds silence_limit_;
  bool on_demand_ = false;
  bool settled_ = false;
  job_placement placement_;
  std::map<int, endpoint> known_;  // world rank -> its endpoint, once read
};

}  // namespace jobkit::detail
