#pragma once

// This process's progress tracking (docs/progress.md): the marks the library's calls make (the
// stop agreement, the collectives, checkpoints, jobkit::progress), the learner they feed
// (learner.hpp), and the watcher thread that reports a rank that made no progress past its bound:
// one `hang` event (src/recovery/events.hpp) and one warning line per hang; it ends nothing.
//
// On in a Slurm step unless JOBKIT_PROGRESS=0 (JOBKIT_PROGRESS=1: outside one too); the settings
// are read at the first mark, and a malformed one fails that mark and every later one. The watcher
// starts at the first mark. A forked child tracks nothing (its marks do nothing): the rank is its parent.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "progress/learner.hpp"

namespace jobkit::detail {

/// A step boundary of this rank.
/// @throws jobkit::error (invalid_environment) when a knob is malformed (learner.hpp)
void progress_mark(mark_source source);
/// jobkit::long_step's engine.
void progress_long_step(std::chrono::milliseconds bound);

/// A checkpoint save (checkpoints::begin to the end of its commit) and a restore
/// (checkpoints::latest to the next counted boundary). Never throw; nothing before the first mark.
void progress_save_begin() noexcept;
void progress_save_end() noexcept;
void progress_restore_begin() noexcept;

/// Times one jobkit collective: its wait is not the rank's compute (the straggler scores).
class collective_wait {
 public:
  collective_wait() noexcept;
  ~collective_wait();
  collective_wait(const collective_wait&) = delete;
  collective_wait& operator=(const collective_wait&) = delete;

 private:
  std::int64_t began_ns_ = -1;
};

/// A torch collective in progress, as torch's flight recorder tells it (python/jobkit/_torch_where.py
/// reads it on every rank that tracks progress): its name ("torch gloo:all_reduce"), its caller's
/// file:line ("" unknown) and when it began (system clock, ns).
struct torch_collective {
  std::string call;
  std::string site;
  std::int64_t since_ns = 0;
};
/// The torch collectives this rank has in progress now (oldest first; the first 16 kept; none: an
/// empty list). A hang event where the rank is in no jobkit call names the oldest of them that
/// began after the rank's last progress (older ones are pending since before it: an irecv, another
/// group's work). Never throws.
void progress_torch_collectives(const std::vector<torch_collective>& in_progress) noexcept;
/// Waits in torch's collectives that ended, [begin, end] on the system clock (ns), disjoint: taken
/// off the compute times of the steps they overlap (bound_learner::subtract_wait). Never throws.
void progress_torch_waits(const std::vector<std::pair<std::int64_t, std::int64_t>>& waits) noexcept;
/// Whether this process tracks progress (the settings read, as a first mark reads them); false
/// where they are refused (the marks say why).
bool progress_tracking() noexcept;

/// What a rank tells the others at a straggler exchange: its median compute seconds per step (-1:
/// none yet), its longest step interval and checkpoint phase, its host.
using progress_share = std::tuple<double, double, double, std::string>;
/// Whether the `agreement`-th agreement (1, 2, ...) of a stop agreement over the world exchanges
/// the shares: every JOBKIT_STRAGGLER_EVERY-th, where tracking is on. The same on every rank
/// (the same environment).
bool progress_exchange_due(long agreement) noexcept;
progress_share progress_share_of_rank();
/// Takes every rank's share (index: world rank) of the `agreement`-th stop agreement: each rank
/// merges the learned bounds (their maximum), scores the ranks and keeps its own score in its
/// `jobkit where` record (where::record_score); rank 0 logs the stragglers and records a
/// `straggler` event.
void progress_take_shares(const std::vector<progress_share>& shares, int rank, long agreement);

/// The last scores rank 0 computed (empty before the first exchange, and on other ranks).
std::vector<double> progress_last_scores();

}  // namespace jobkit::detail
