#pragma once

// Which turn of its launcher rank a process is: the processes of one rank in one step that open
// the data path one after another (`jobkit once-per-node; jobkit barrier` in one shell, `jobkit
// exec` and the program it starts, a Python script after them) each publish their endpoint under
// a key of their own, so that the n-th of each rank meets the n-th of the others, never an
// earlier process's stale endpoint (the launcher's store keeps what a rank's earlier process put
// under its rank). docs/architecture.md, "One rank, many processes".

#include <cstdint>
#include <string>

#include "core/environment.hpp"
#include "jobkit/identity.hpp"

namespace jobkit::detail {

/// The most turns one rank takes in one step: past it, opening the data path is an error.
inline constexpr std::uint64_t max_endpoint_turns = 1'000'000;

/// The task a process belongs to: the pid of the task's first process, which every later process
/// of the rank descends from (SLURM_TASK_PID; elsewhere the parent's pid, a launcher's daemon or
/// the shell that runs the rank's commands), and a stamp that tells it from an earlier task that
/// held the same job, step and local rank (a controller whose job ids began again): a hash of
/// that pid and srun's port (SLURM_SRUN_COMM_PORT, SLURM_STEP_LAUNCHER_PORT).
struct task_of_process {
  int pid = 0;
  std::uint64_t stamp = 0;
};
/// The task of this process, from `env` (a malformed or missing SLURM_TASK_PID: `parent_pid`).
task_of_process task_of(const environment& env, int parent_pid);

/// One process's turn, taken from its node's count (POSIX shared memory
/// "/jobkit-turns-<job.step>-n<node>", one slot per local rank: its task and its count, under an
/// exclusive lock).
struct endpoint_turn {
  std::uint64_t number = 0;
  /// The key of this turn's endpoint: "jobkit.endpoint" for turn 0, else "jobkit.endpoint.t<turn>".
  std::string key() const;
};

/// This process's turn: 1 for a rank's first process (and for the first of a task whose stamp
/// differs from the slot's); 0, and no count, without a launcher's job id (a process of its own).
/// A process that is its task's first (task.pid is its pid) ends its task's turns when it exits
/// (end_task_turns, from a static object's destructor: not at an exec, which `jobkit exec` hands
/// the same pid on with). The first turn taken on a node in a step removes the counts of this
/// user's steps whose tasks have all ended (a crash, a shell step), at most max_swept of them.
/// @throws jobkit::error naming the count when it cannot be opened or locked, is another user's,
/// holds a count past max_endpoint_turns, or cannot grow
endpoint_turn take_endpoint_turn(const identity& self, const task_of_process& task);
inline constexpr int max_swept = 64;

/// Marks the slot of `local_rank` in the count `name` as ended, and removes the count when no task
/// of it is left (no other slot's task alive and not ended). Never throws.
void end_task_turns(const std::string& name, int local_rank) noexcept;

/// The name of the count of `self`'s node ("" without a job id).
std::string endpoint_turns_name(const identity& self);

}  // namespace jobkit::detail
