#pragma once

// `jobkit run`'s decisions, without I/O: what a failed step's output says of its fault (the
// evidence), which node the evidence blames, which nodes the next step runs on, and the job's
// record of bad nodes. src/cli/run_command.cpp runs the steps; docs/recovery.md says the rules.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// The longest line the evidence reads, and the most nodes it keeps per kind (a hostile or
/// broken program may print anything, any number of times).
inline constexpr std::size_t evidence_line_limit = 16384;
inline constexpr std::size_t evidence_node_limit = 4096;

/// What one step's output said of its failure, line by line.
struct step_evidence {
  /// Nodes named lost by jobkit (src/core/lost_node: "its node c3 answered nothing ...: the node
  /// is lost or cut off from c1"), each with the nodes that named it.
  std::map<std::string, std::set<std::string>> lost;
  /// Nodes of ranks that jobkit's survivors saw die ("rank 3 (c2) closed its connection ...: the
  /// process died or exited"), with how many lines said so.
  std::map<std::string, int> dead;
  /// Nodes where srun reports a task that failed ("srun: error: c2: task 3: Exited with exit code
  /// 9", "...: tasks 2-3: Killed"), in the order srun said it: the first one failed first.
  std::vector<std::string> failed_tasks;
  /// Nodes where srun could not start the step's tasks ("srun: error: Task launch for StepId=7.1
  /// failed on node c4: Communication connection failure": its slurmd answers srun nothing).
  std::set<std::string> launch_failed;

  /// Reads one line of the step's output (srun's label, if any, is skipped).
  void add_line(std::string_view line);
};

/// The node the evidence pins a failure on, and why; empty when it pins none.
struct blame {
  std::string node;
  std::string why;
};

/// The lost nodes the evidence blames: those named by a node that nobody named lost (two nodes
/// frozen: both, each named by the healthy ones); where every node that named one was named too (a
/// partition: each side names the other), the one named by more nodes than any other (the larger
/// side wins; a tie blames none). Empty when no node was named lost (a crash is blamed only when it
/// repeats on a node: crash_node, repeated_crash).
std::vector<blame> lost_nodes_of(const step_evidence& evidence);

/// The nodes where the step could not start (launch_failed), each blamed at once: a node whose
/// slurmd does not take a step from the batch host is no place for the next one.
std::vector<blame> unlaunched_nodes_of(const step_evidence& evidence);

/// The node where the step's first failure was: the node whose dead ranks jobkit's survivors named
/// most, else srun's first failed task's node; empty when neither says.
std::string crash_node(const step_evidence& evidence);

/// A node blamed for crashes: the crash nodes of the job's failed steps so far, oldest first; a
/// node that is the crash node of two of them is blamed. A crash that repeats on different nodes
/// blames none (the program's).
std::optional<blame> repeated_crash(const std::vector<std::string>& crash_nodes);

/// A node Slurm reports as unusable: one `sinfo -h -N -o '%N %T'` line's state (down, drained,
/// draining, fail, failing, not responding: a trailing '*').
bool slurm_state_is_bad(std::string_view state);

/// One bad node of the job's record: the node, when (Unix seconds) and why.
struct bad_node {
  std::string node;
  std::int64_t when = 0;
  std::string why;
};

/// The record's file format, one node per line: "NODE<TAB>WHEN<TAB>WHY". Parsing is bounded
/// (at most evidence_node_limit lines of at most evidence_line_limit bytes) and skips lines that
/// break the format (a record written by hand), never throwing.
std::string format_bad_nodes(const std::vector<bad_node>& nodes);
std::vector<bad_node> parse_bad_nodes(std::string_view text);

/// The nodes the next step runs on: the first `wanted` of `allocation` (in its order) that are
/// neither bad nor unusable in Slurm's view; fewer when there are not enough (the caller decides:
/// a smaller step, a requeue).
std::vector<std::string> choose_nodes(const std::vector<std::string>& allocation, const std::set<std::string>& bad,
                                      std::size_t wanted);

/// The value of `name` in one line of Slurm's "KEY=VALUE KEY=VALUE" output (`scontrol show ...
/// -o`), up to the next blank or newline; empty when absent. A key matches only whole (at the
/// line's start or after a blank, followed by '=').
std::string scontrol_field(std::string_view line, std::string_view name);

/// A node's slurmd as `scontrol show node -o` names it.
struct slurmd_address {
  std::string node;     ///< NodeName
  std::string address;  ///< NodeAddr (a host name or a numeric address)
  int port = 0;         ///< Port, 1-65535
};
/// Every line of `scontrol show node -o`'s output with a NodeName, a NodeAddr and a Port of 1 to
/// 65535, in order; other lines are left out. Bounded: at most evidence_node_limit lines of at most
/// evidence_line_limit bytes are read, fields of at most 255 bytes kept.
std::vector<slurmd_address> slurmd_addresses(std::string_view shown);

/// `scontrol show job -o`'s PreemptTime ("2026-12-02T06:08:00"): nullopt when absent, None,
/// Unknown, or longer than 64 bytes.
std::optional<std::string> preempt_time_of(std::string_view shown);

/// Whether the restarts make no progress: `newest` holds, per failed step of this job in order,
/// the newest whole checkpoint when it ended (-1: none). True when the last `limit` failures all
/// ended with the same newest checkpoint as the failure before them.
bool no_progress(const std::vector<std::int64_t>& newest, int limit);

}  // namespace jobkit::detail
