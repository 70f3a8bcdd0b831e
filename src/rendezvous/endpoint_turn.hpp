#pragma once

// Which turn of its launcher rank a process is: the processes of one rank in one step that open
// the data path one after another (`jobkit once-per-node; jobkit barrier` in one shell, `jobkit
// exec` and the program it starts, a Python script after them) each publish their endpoint under
// a key of their own, so that the n-th of each rank meets the n-th of the others, never an
// earlier process's stale endpoint (the launcher's store keeps what a rank's earlier process put
// under its rank).

#include <cstdint>
#include <string>

#include "core/environment.hpp"
#include "jobkit/identity.hpp"

namespace jobkit::detail {

/// The most turns one rank takes in one step: past it, opening the data path is an error.
inline constexpr std::uint64_t max_endpoint_turns = 1'000'000;

/// What tells this rank's task from an earlier one that held the same job, step and local rank
/// (a controller whose job ids began again; leftovers in a /dev/shm that nothing cleans): a hash of
/// SLURM_TASK_PID (the pid of the task's first process, which every later process of the rank
/// inherits) and srun's port (SLURM_SRUN_COMM_PORT, SLURM_STEP_LAUNCHER_PORT); 0 where none is set.
std::uint64_t task_stamp(const environment& env);

/// The node's counter of turns (POSIX shared memory "/jobkit-turns-<job.step>-n<node>", one slot
/// per local rank: the task's stamp and its count, under an exclusive lock): this process's turn,
/// 1 for a rank's first process (and for the first one of a task whose stamp differs from the
/// slot's); 0 without a launcher's job id (a process of its own: no earlier one to meet).
/// @throws jobkit::error naming the segment when it cannot be opened or locked, is another user's,
/// holds a count past max_endpoint_turns, or cannot grow
std::uint64_t take_endpoint_turn(const identity& self, std::uint64_t stamp);

/// The name of the counter of `self`'s node ("" without a job id).
std::string endpoint_turns_name(const identity& self);

/// The key of a turn's endpoint: "jobkit.endpoint" for turn 0, else "jobkit.endpoint.t<turn>".
std::string endpoint_key(std::uint64_t turn);

}  // namespace jobkit::detail
