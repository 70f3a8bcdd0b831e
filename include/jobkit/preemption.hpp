#pragma once

// Pre-emption, time limits and requeue: a stop that every rank agrees on at the same step, the
// job's remaining time from the scheduler, and a requeue of this job (of this task of an array).
// See jobkit/checkpoints.hpp for a checkpoint directory that is never half-written.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/export.hpp"

namespace jobkit {

/// Why the ranks agreed to stop.
enum class stop_reason {
  none,        ///< no stop requested
  signal,      ///< a rank received one of stop_options::signals
  time_limit,  ///< the job has less than stop_options::time_margin left
};

/// "none", "signal" or "time_limit".
JOBKIT_API std::string_view to_string(stop_reason reason) noexcept;

/// What the ranks agreed on; the same on every member.
struct stop_cause {
  stop_reason reason = stop_reason::none;
  int signal = 0;  ///< stop_reason::signal: the signal of the lowest group rank that received one
  int rank = -1;   ///< stop_reason::signal: that group rank
  /// stop_reason::time_limit: the time left that group rank 0 saw
  std::chrono::seconds time_left{0};

  friend bool operator==(const stop_cause&, const stop_cause&) = default;
};

/// "SIGTERM on rank 3", "12 s left, below the margin", "none".
JOBKIT_API std::string to_string(const stop_cause& cause);

struct stop_options {
  /// The signals that request a stop. Slurm sends SIGTERM on pre-emption (after SIGCONT; SIGKILL
  /// follows after the partition's GraceTime), the signal of `sbatch --signal=SIG@SECONDS` before
  /// the time limit, and whatever `scancel --signal=SIG` names.
  std::vector<int> signals = {SIGTERM, SIGUSR1, SIGUSR2, SIGINT};
  /// Stop once the job has less than this left before its time limit (jobkit::time_left, asked
  /// by group rank 0 only). Zero: the time limit is not watched.
  std::chrono::seconds time_margin{0};
  /// Only every check_every-th call of stop_requested() talks to the other ranks; the calls in
  /// between return the last agreement without waiting. At least 1.
  int check_every = 1;
  /// The deadline of the agreement (zero: JOBKIT_TIMEOUT).
  std::chrono::milliseconds timeout{0};
};

/// Catches the stop signals for its lifetime and turns them into an agreement: called by every
/// member at the same step boundary, stop_requested() returns the same answer on every member.
///
/// The signal handler only records the signal (async-signal-safe); nothing else runs inside it.
/// The agreement is one small all_reduce over the members, bounded by the deadline, so a rank
/// that died or hangs makes the others fail instead of wait. Once true, stop_requested() stays
/// true. A guard sees the signals that arrive during its lifetime; several guards (e.g. one per
/// group) each see them. The signal dispositions from before the first guard come back when the
/// last one is destroyed. Not copyable or movable.
///
///     jobkit::stop_guard stop({.time_margin = std::chrono::minutes(5)});
///     for (; step < steps; ++step) {
///       train(step);
///       if (stop.stop_requested()) { save(step); break; }
///     }
class JOBKIT_API stop_guard {
 public:
  /// @throws jobkit::error (invalid_argument) on a bad option
  explicit stop_guard(stop_options options = {}, group members = world());
  ~stop_guard();
  stop_guard(const stop_guard&) = delete;
  stop_guard& operator=(const stop_guard&) = delete;

  /// Collective over the members (every check_every-th call). True on every member once any
  /// member received a stop signal before its call, or the time left fell below the margin.
  /// @throws jobkit::error when a member fails; jobkit::timeout_error past the deadline
  bool stop_requested(std::source_location site = std::source_location::current());
  /// The agreed cause; reason none until stop_requested() returned true.
  const stop_cause& cause() const noexcept { return cause_; }

 private:
  stop_options options_;
  group members_;
  long calls_ = 0;
  std::uint64_t baseline_ = 0;  ///< stop signals received before this guard
  stop_cause cause_;
};

/// stop_guard::stop_requested() of a process-wide stop_guard over the world with default
/// options, created on the first call. Collective over all ranks.
JOBKIT_API bool stop_requested(std::source_location site = std::source_location::current());

/// The time this job has left before its time limit. From SLURM_JOB_END_TIME when it is set
/// (Slurm 23.02 and later; no libslurm needed; its value at the step's launch, so a later
/// `scontrol update TimeLimit` is not seen). Else from Slurm (slurm_get_rem_time, one request to
/// slurmctld, through libslurm in a child process killed after 10 s: see docs/environment.md,
/// JOBKIT_LIBSLURM), kept for `max_age` and counted down in between. Zero once the end has passed.
/// nullopt when it is unknown: outside a Slurm job, a job without a time limit (an end 300 days
/// or more ahead), or libslurm gave no answer (a warning names why; not asked again while
/// JOBKIT_LIBSLURM and SLURM_CONF keep their values). Never ends or stalls the caller, whatever
/// libslurm does.
/// @throws jobkit::error (invalid_environment) when SLURM_JOB_ID or SLURM_JOB_END_TIME is malformed
JOBKIT_API std::optional<std::chrono::seconds> time_left(std::chrono::seconds max_age = std::chrono::seconds(60));

/// Asks Slurm to requeue this job (SLURM_JOB_ID: for an array job, this task only). Slurm then
/// ends the job (SIGTERM to every task, SIGKILL after KillWait) and starts it again once
/// resources allow, with SLURM_RESTART_COUNT one higher. Call it on one rank, after the last
/// checkpoint is committed. A job already requeued (pending) counts as success. libslurm is
/// called in a child process killed after 10 s, as for time_left().
/// @throws jobkit::error (invalid_environment) outside a Slurm job; (scheduler) when Slurm
///         refuses, e.g. a job submitted with --no-requeue, or libslurm gave no answer (none
///         found, a soname jobkit does not know, libslurm exited, e.g. without a Slurm
///         configuration, or the deadline passed: the message names the cause)
JOBKIT_API void requeue();

}  // namespace jobkit
