#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pmi2/facts.hpp"
#include "rendezvous/rendezvous.hpp"

namespace jobkit::detail {

/// The rendezvous through the launcher's PMI-2 server (Slurm's mpi/pmi2: srun --mpi=pmi2), for
/// clusters without mpi/pmix. Slurm's client library libpmi2 is opened at run time (dlopen:
/// JOBKIT_LIBPMI2, else libpmi2.so.0, else libpmi2.so), so jobkit does not link it.
///
/// PMI-2 cannot be initialised twice in a process, and has no reference count: the first session
/// calls PMI2_Init (or adopts a PMI-2 that MPI initialised), every later one shares that
/// connection, and PMI2_Finalize runs at process exit (not when jobkit did not initialise it).
///
/// What is bounded: the fence, by its timeout (PMI2_KVS_Fence blocks in a read on the launcher's
/// socket and cannot be cancelled, so it runs on a thread of its own and the caller waits with its
/// deadline; after a fence that timed out or was abandoned the connection is unusable and every
/// later call says so). What is not: PMI2_Init, put, get and the job attributes, which are
/// requests to this node's slurmstepd answered from its memory (they wait only if it hangs).
class pmi2_session final : public rendezvous {
 public:
  /// @throws jobkit::error (pmix) saying why: no libpmi2 could be loaded (and which were tried),
  /// it lacks a function, or PMI2_Init failed
  pmi2_session();
  ~pmi2_session() override;
  pmi2_session(const pmi2_session&) = delete;
  pmi2_session& operator=(const pmi2_session&) = delete;

  /// PMI2_KVS_Put of the value in hex, split across keys of at most 1000 characters (PMI-2's
  /// values are text of at most 1023). Keys are per rank ("key@rank"): Slurm's key space is the
  /// job's.
  void put(const std::string& key, std::span<const std::byte> bytes) override;
  /// PMI2_KVS_Fence: under Slurm's mpi/pmi2 a real barrier across nodes that also makes every
  /// put visible (measured: with rank 0 5 s late, every rank on every node waited 5 s). Bounded by
  /// timeout; while_waiting runs every 50 ms on the calling thread.
  /// A rank that exits before its fence does not end the others' (Slurm does not tell PMI-2
  /// clients): only the deadline does, or srun --kill-on-bad-exit=1 ending the step.
  void fence(const time_bound& bound, const std::function<void()>& while_waiting = {}) override;
  /// PMI2_KVS_Get: a request to the node's slurmstepd, which answers from what the last fence
  /// brought (it does not wait for a rank); timeout and while_waiting are not used.
  std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                             const std::function<void()>& while_waiting = {}) override;
  /// PMI-2 cannot ask anything while a fence is pending: nobody is asked.
  roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) override;

  /// Rank and size from PMI2_Init, the job id and PMI_process_mapping (src/identity decides
  /// what to do with them).
  pmi2_facts query_facts() const;

  struct connection;

 private:
  std::shared_ptr<connection> connection_;
};

}  // namespace jobkit::detail
