#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::where {

/// What `jobkit where`'s agent reads of a node's processes in /proc, and the rule of when it asks
/// a Python rank for its stack. A process may have written anything there (its environment, its
/// name, its memfds' names): every parser below takes any bytes, reads a bounded part, and throws
/// nothing but std::bad_alloc (the fuzz target fuzz-where feeds them).

/// The memfd `import jobkit` has Python's faulthandler dump every thread's stack into, named
/// `jobkit-where-stack:N` with N the signal the dump is registered on (python/jobkit/_where.py).
inline constexpr std::string_view stack_name = "jobkit-where-stack";

/// Up to `limit` bytes of a file (a /proc file, whose size is not known before it is read);
/// empty when it cannot be read.
std::string read_small_file(const std::string& path, std::size_t limit);

/// A process's rank in step JOB.STEP on node, from its environment (/proc/PID/environ, NUL
/// separated): SLURM_PROCID when SLURM_JOB_ID, SLURM_STEP_ID and SLURMD_NODENAME match (the nodes
/// of a dev cluster may share one process namespace); nullopt otherwise.
std::optional<int> rank_in_step(std::string_view environ, std::string_view job, std::string_view step,
                                std::string_view node);

/// /proc/PID/stat's fields that the agent reads: the name (between the first '(' and the last ')'),
/// the state letter and the parent; nullopt for text that is not a stat line.
struct process_stat {
  std::string name;
  char state = '?';
  int ppid = 0;
};
std::optional<process_stat> parse_stat(std::string_view stat);

/// "S (sleeping)" for /proc's state letter.
std::string state_name(char state);
/// What /proc says of a process: "sleep S (sleeping) in hrtimer_nanosleep" (the name, the state,
/// where the kernel has it sleep: /proc/PID/wchan, "0" or empty for none); "gone" without a stat.
std::string state_text(const std::optional<process_stat>& stat, std::string_view wchan);

/// Whether a process catches `signal`: its bit (signal - 1) in the hex mask of the SigCgt line of
/// /proc/PID/status. nullopt when the text has no such line (at most 64 hex digits: 256 signals).
std::optional<bool> catches(std::string_view status, int signal);

/// What a /proc/PID/fd link's target is to `jobkit where`: the record (record.hpp), a stack file
/// with the signal its name gives (nullopt: a name without one, or one out of range), or neither.
struct fd_target {
  enum kind_t { other, record, stack } kind = other;
  std::optional<int> signal;
};
fd_target parse_fd_target(std::string_view target);

/// A process's record and Python stack file, as /proc/PID/fd/N paths (empty where it has none), and
/// the signal the stack file names.
struct process_files {
  std::string record;
  std::string stack;
  std::optional<int> stack_signal;
};
process_files find_files(int pid);

/// The processes of step JOB.STEP on node, but `self`.
struct task_process {
  int pid;
  int ppid;
  int rank;
};
std::vector<task_process> step_processes(const std::string& job, const std::string& step, const std::string& node,
                                         int self);

/// state_text of a running process.
std::string proc_state(int pid);

/// Whether the agent sends a process the signal for its Python stack: only the signal its stack file
/// names, and only when the process catches it (SigCgt of `status`, its /proc/PID/status): a
/// real-time signal it does not catch ends it. `signal` is 0 when none is sent, and `refused` then
/// says why ("signal 41 not caught by pid 1234; no stack taken").
struct stack_plan {
  int signal = 0;
  std::string refused;
};
stack_plan plan_stack(int pid, std::optional<int> named_signal, std::string_view status);

}  // namespace jobkit::where
