#pragma once

#include <pmix.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "pmix/facts.hpp"
#include "rendezvous/rendezvous.hpp"

namespace jobkit::detail {

/// One reference on the process's PMIx client: PMIx_Init in the constructor, PMIx_Finalize in the
/// destructor. PMIx counts references, so sessions coexist with each other and with MPI.
class pmix_session final : public rendezvous {
 public:
  /// @throws jobkit::error (pmix) with the PMIx status when no server can be reached
  pmix_session();
  ~pmix_session() override;
  pmix_session(const pmix_session&) = delete;
  pmix_session& operator=(const pmix_session&) = delete;

  const pmix_proc_t& self() const noexcept { return self_; }

  /// Publishes bytes under a key for every rank (PMIx_Put, scope global). Keys must be fresh:
  /// PMIx 4.2 may return stale values for a re-put key.
  void put(const std::string& key, std::span<const std::byte> bytes) override;
  /// PMIx_Commit, then a fence over all ranks that collects the data: a real barrier across nodes
  /// (a fence without data collection is not one under Slurm 22.05), bounded by timeout. The
  /// while_waiting check matters: Slurm 22.05 does not always end a fence when a rank dies.
  /// One of jobkit's fences at a time per process (a process-wide lock). Fences are matched in
  /// call order, so no other user of PMIx in the process (MPI_Init runs several fences under Open
  /// MPI 5) may fence at the same time on another thread: that is the caller's to order.
  void fence(const time_bound& bound, const std::function<void()>& while_waiting = {}) override;
  std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                             const std::function<void()>& while_waiting = {}) override;
  /// Every rank's key. With a shared-memory store, through one PMIx_Get_nb per rank, all in flight
  /// at once: one blocking PMIx_Get after another cost a hand-over to PMIx's progress thread and
  /// back each (measured, 3 nodes x 24 ranks on 2 cores: 6 to 24 ms for the 24 values, 1 to 5 ms
  /// all at once). With the hash store, one after another (see session.cpp). Either way bounded
  /// by timeout: a rank that never answers is named in a timeout_error.
  std::vector<std::vector<std::byte>> get_all(const std::string& key, int world_size,
                                              std::chrono::milliseconds timeout) override;
  /// From the job data (PMIx_Resolve_nodes, then PMIx_Resolve_peers of each node): no traffic
  /// under Slurm and under mpirun's PRRTE (which answers the query it asks first with a line on
  /// its stderr, "Query for unrecognized attribute", then serves it from the job data). Empty,
  /// logged at debug level, when the answer is not one node for every rank, and in a Slurm step
  /// whose nodes are not the job's first nodes (slurm_direct_modex_misrouted: its direct gets would
  /// never be answered).
  std::optional<job_placement> placement() override;
  /// PMIx_Commit: this rank's puts become readable through direct gets.
  void commit() override;
  /// PMIx_Get_nb with no fence (direct modex): the launcher asks `rank`'s node, whose server
  /// answers once `rank` committed the key (Slurm and PRRTE hold the request until then). Under
  /// PMIx 4.2 a rank of this node that has not yet reached its server is answered NOT-FOUND at
  /// once: tried again (5 ms, doubling to 100 ms) until the deadline. Each read is held at most
  /// held_read, then asked again (a node-mate's read of a key its rank's next process committed was
  /// once never answered: one rank, many processes, docs/architecture.md).
  static constexpr std::chrono::milliseconds held_read{5000};
  std::vector<std::byte> await(int rank, const std::string& key, std::chrono::milliseconds timeout,
                               const std::function<void()>& while_waiting = {}) override;
  /// Asks for the key of every other rank of this node at once (PMIx_Get_nb), each bounded by
  /// probe. Other nodes' ranks are not asked: under Slurm 22.05 their servers do not answer while
  /// the fence is pending (measured: nothing within 4 s, even for ranks that had put the key).
  roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) override;

  /// The identity keys the server holds for this process (src/identity decides what to do
  /// with them).
  /// @throws jobkit::error (pmix) when a required key is missing
  pmix_facts query_facts() const;

 private:
  pmix_proc_t self_;
  bool hash_store_ = false;  ///< the server hands this client data through the hash store
};

/// "PMIX_ERR_UNREACH (-25)"-style text for a status.
std::string pmix_status_text(pmix_status_t status);

}  // namespace jobkit::detail
