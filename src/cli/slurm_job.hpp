#pragma once

// What `jobkit run` asks of Slurm about its own job, through Slurm's commands (each bounded):
// the allocation's nodes, the nodes Slurm sees as unusable, ending a step, and a requeue that
// keeps the job off its bad nodes.

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/child_process.hpp"

namespace jobkit::cli {

/// The nodes of this job's allocation in Slurm's order (SLURM_JOB_NODELIST).
/// @throws usage_error naming SLURM_JOB_ID or SLURM_JOB_NODELIST when unset or malformed
std::vector<std::string> allocation_nodes();

/// The nodes among `nodes` that Slurm reports down, drained, draining, failing or not
/// responding (sinfo), each with its state; nothing when sinfo cannot say (it is then not asked
/// again for a while: the controller may be busy).
std::vector<std::pair<std::string, std::string>> slurm_bad_nodes(const std::vector<std::string>& nodes);

/// Starts ending step `step` of job `job` (scancel --signal=KILL JOB.STEP): a step that hangs, or
/// one still running on a lost node. Not waited for: the controller answers scancel only once
/// every node of the step did or timed out (MessageTimeout, 10 s by default), a lost one too. The
/// caller reaps it (null when it could not start, said on stderr).
std::optional<detail::child_process> start_ending_step(const std::string& job, const std::string& step);

/// Requeues this job held, sets its excluded nodes to `excluded` (Slurm 22.05 and 24.11 refuse
/// ExcNodeList for a running job, and take it for a requeued one, which is pending), and releases
/// it: the next attempt never runs on them. Slurm signals this script meanwhile: the caller keeps
/// its SIGTERM (jobkit run's forwarder records it). Returns what went wrong, empty when all did.
std::string requeue_excluding(const std::string& job, const std::set<std::string>& excluded);

/// When Slurm started pre-empting this job (`scontrol show job`'s PreemptTime, "2026-12-02T06:08:00"),
/// nullopt when it does not (None), or when scontrol cannot say. During the pre-emption's
/// GraceTime Slurm signals the tasks of the job's steps, not its batch script: between steps
/// jobkit run learns of it only here.
std::optional<std::string> preempt_time(const std::string& job);

/// The nodes among `nodes` whose slurmd takes no TCP connection from this node within `limit`
/// (their NodeAddr and Port from `scontrol show node`), each with why: a node lost or cut off
/// since Slurm last heard of it, before a step is started there (srun's own launch would wait
/// MessageTimeout, 10 s by default, and fail). Nothing when scontrol cannot say.
std::vector<std::pair<std::string, std::string>> unreachable_nodes(const std::vector<std::string>& nodes,
                                                                   std::chrono::milliseconds limit);

/// A comma-separated list ("c1,c3").
std::string comma_list(const std::vector<std::string>& nodes);

}  // namespace jobkit::cli
