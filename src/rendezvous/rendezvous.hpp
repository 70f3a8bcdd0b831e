#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/timeout.hpp"

namespace jobkit::detail {

/// Where the launcher placed every rank of the job.
struct job_placement {
  std::vector<std::string> nodes;  ///< node names, in the launcher's node order (identity's node_rank)
  std::vector<int> node_of;        ///< per world rank: its index in nodes
  std::vector<int> local_rank_of;  ///< per world rank: its place among its node's ranks, in rank order
};

/// How the ranks of a job first find each other. Either each rank puts values, one fence over all
/// ranks makes them visible, then any rank's value can be read (every launcher); or, where the
/// launcher says where every rank runs (placement()), each rank puts and commits its values and
/// any rank reads them when it needs them (await), with no fence: a PMIx direct modex. The PMIx
/// session implements it for launched jobs; the tests' memory_rendezvous does for ranks that are threads of
/// one process (unit tests). Data here is visible only to the ranks of the job, so secrets may
/// travel through it.
class rendezvous {
 public:
  virtual ~rendezvous() = default;
  /// Every rank's node and local rank, when this rendezvous serves await() (PMIx: from the job
  /// data, PMIx_Resolve_nodes and PMIx_Resolve_peers, no traffic); empty where only a fence makes
  /// values visible (PMI-2), where the launcher's answer is incomplete, or where it would not answer
  /// a direct get (Slurm: a step not on the job's first nodes, pmix/facts.hpp).
  virtual std::optional<job_placement> placement() { return std::nullopt; }
  /// Makes this rank's puts readable by await() on every rank, without a fence (PMIx_Commit).
  virtual void commit();
  /// A key that `rank` put and committed, waiting until it has (a rank that has not yet started
  /// is waited for): one request, answered by `rank`'s node. While it waits, `while_waiting`
  /// runs every 50 ms, as in fence. Only where placement() is set.
  /// @throws jobkit::timeout_error when no answer came within timeout, jobkit::error when the
  /// launcher refused
  virtual std::vector<std::byte> await(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                       const std::function<void()>& while_waiting = {});
  /// Publishes bytes under a key. Keys must be fresh (PMIx 4.2 may return stale values for a
  /// re-put key).
  virtual void put(const std::string& key, std::span<const std::byte> bytes) = 0;
  /// Waits until every rank has fenced (a barrier across all ranks), then every earlier put is
  /// visible. While it waits, `while_waiting` runs every 50 ms; an exception from it ends the wait.
  /// It waits until `bound`'s deadline (a call's, of which the fence is one part), and a timeout
  /// names the call's timeout.
  /// @throws jobkit::timeout_error at the deadline
  virtual void fence(const time_bound& bound, const std::function<void()>& while_waiting = {}) = 0;
  /// A key that `rank` put before the last fence. @throws jobkit::error when it is missing,
  /// jobkit::timeout_error when no answer came within timeout (a fence that returned does not
  /// prove that every rank put its keys: Slurm 24.11, see pmix_session::get_all). While it waits,
  /// `while_waiting` runs every 50 ms, as in fence.
  virtual std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                     const std::function<void()>& while_waiting = {}) = 0;
  /// The key of every rank from 0 to world_size - 1, in rank order, each put before the last fence.
  /// This one reads them one by one; the PMIx session asks for all of them at once.
  /// @throws jobkit::error when one is missing, jobkit::timeout_error naming the ranks whose value
  /// did not come within timeout
  virtual std::vector<std::vector<std::byte>> get_all(const std::string& key, int world_size,
                                                      std::chrono::milliseconds timeout);
  /// After a failed fence: which ranks could be asked whether they put `key` (under Slurm 22.05,
  /// only those of this node answer while a fence is pending), and which of them have not.
  struct roll_call {
    std::vector<int> asked, absent;
  };
  virtual roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) = 0;
};

}  // namespace jobkit::detail
