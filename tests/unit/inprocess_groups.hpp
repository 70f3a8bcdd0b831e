#pragma once

// Groups whose ranks are threads of one process, over the real data path (inprocess_groups.cpp):
// the library's own tree, its node segment and its loopback TCP links, with an in-memory
// rendezvous standing in for PMIx. The unit tests of everything above the transport run on these.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/identity.hpp"
#include "memory_rendezvous.hpp"
#include "network/fabric.hpp"

namespace test_support {

/// Rank `rank`'s identity in a step whose ranks are on these pretend nodes (nodes[r]: rank r's
/// node index), its hostname "n<node>".
jobkit::identity rank_identity(int rank, const std::vector<int>& nodes);

/// A step of threads as ranks on pretend nodes (nodes[r]: rank r's node): the store of its
/// in-memory rendezvous, and a job id of its own (with the pid), so that no two steps share a
/// segment's name, in this process or in another test program running beside it.
struct inprocess_step {
  explicit inprocess_step(const std::vector<int>& nodes);
  /// Rank `rank`'s identity in this step: rank_identity with the step's job id.
  jobkit::identity identity(int rank) const;

  std::vector<int> nodes;
  std::string job;
  std::shared_ptr<memory_rendezvous_store> store;
};

/// What one rank's groups stand on: its rendezvous and its fabric over loopback.
struct rank_fabric {
  rank_fabric(const inprocess_step& step, int rank,
              std::chrono::milliseconds handshake_timeout = std::chrono::seconds(30));
  memory_rendezvous rv;
  jobkit::detail::tcp_fabric fabric;
};

/// The world groups of `size` ranks, group r for the thread that plays rank r: made together (a
/// group's making is collective), then each used on its own thread. nodes[r] is rank r's pretend
/// node (empty: all on node 0); node n's host is "n<n>". Each group keeps its rank's fabric as long
/// as it or a group split from it lives.
/// @throws std::runtime_error naming the rank whose setup failed
std::vector<jobkit::group> inprocess_groups(int size, const std::vector<int>& nodes = {});

}  // namespace test_support
