#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/shared_library.hpp"

namespace jobkit::detail {

// The two calls of Slurm's C API jobkit makes (slurm_get_rem_time, slurm_requeue), from the
// libslurm found at run time, so that jobkit neither links libslurm nor ties itself to one Slurm
// release. libslurm is never loaded into the caller's process: libslurm's slurm_init() ends its
// process (fatal(): exit(1)) when it finds no Slurm configuration, and retries for a minute when
// SLURM_CONF names a missing file. Each call forks a child that opens libslurm (dlopen), checks
// its soname, calls slurm_init and the function, reports over a pipe and ends; the child is
// killed at slurm_call_deadline. One call sends one request to slurmctld. Thread-safe.
//
// The library: JOBKIT_LIBSLURM (read at every call), else libslurm.so, else libslurm.so.45 down
// to .37. Its soname (DT_SONAME, read from the loaded library) decides the ABI: libslurm.so.37
// to .44 (Slurm 21.08 to 25.11) take a job id (uint32_t), libslurm.so.45 (Slurm 26.05) a
// slurm_step_id_t. Any other soname, or none, is refused before any call.

/// How long one libslurm call may take, in its child process, before the child is killed.
inline constexpr std::chrono::seconds slurm_call_deadline{10};

/// The newest libslurm soname whose ABI jobkit knows (Slurm 26.05), and the oldest it accepts.
inline constexpr int newest_known_libslurm = 45;
inline constexpr int oldest_known_libslurm = 37;

/// libslurm for the shared-library opener (core/shared_library.hpp; library_candidates lists the
/// names, in order): JOBKIT_LIBSLURM alone when it is set (then *chosen is true), else the
/// development link and the known sonames, newest first; RTLD_NOW | RTLD_GLOBAL (Slurm's plugins,
/// auth/munge and others, resolve libslurm's symbols when it loads them).
library_request libslurm_request(bool* chosen = nullptr);

/// What one libslurm call gave.
struct slurm_answer {
  /// libslurm answered: `value` holds its result.
  bool answered = false;
  /// slurm_get_rem_time: seconds left (negative: Slurm does not know). slurm_requeue: 0 on
  /// success (a job already pending included), else Slurm's error code.
  long value = 0;
  /// Not answered: why (the library refused, libslurm's exit status, the deadline, with the tail
  /// of what libslurm printed). Answered with an error: Slurm's text for it.
  std::string message;
};

/// slurm_get_rem_time(job) through libslurm, in a child process.
slurm_answer slurm_remaining_seconds(std::uint32_t job_id, std::chrono::milliseconds deadline = slurm_call_deadline);
/// slurm_requeue(job, 0) through libslurm, in a child process.
slurm_answer slurm_requeue(std::uint32_t job_id, std::chrono::milliseconds deadline = slurm_call_deadline);

/// SLURM_JOB_ID as a Slurm job id; nullopt when unset.
/// @throws jobkit::error (invalid_environment) naming the variable when it is not a job id
std::optional<std::uint32_t> slurm_job_id();

/// SLURM_JOB_END_TIME (seconds since the epoch, set in every step by Slurm 23.02 and later);
/// nullopt when unset.
/// @throws jobkit::error (invalid_environment) naming the variable when it is not a positive
///         decimal number of seconds
std::optional<std::chrono::system_clock::time_point> slurm_job_end_time();

}  // namespace jobkit::detail
