#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::where {

/// The step's report by itself: while a process is in a jobkit call as its group's rank 0, a
/// thread of its own looks once a second at how long the call has waited; past the call's
/// threshold (JOBKIT_WHERE_REPORT_AFTER, by default a quarter of its deadline: detail::report_after)
/// it runs `jobkit where JOB.STEP` once for that call and logs its report to stderr, naming the
/// call as the record has it. The thread
/// starts at the first such call; a forked child starts its own. It never touches the call: the
/// report runs beside it, and a report that fails says why in one line.

/// A call of this process begins (enter's first level, once the record holds it) or ends.
/// since_ns: the record's. Only group rank 0's calls are watched: a few relaxed stores.
void watch_enter(int group_rank, std::chrono::milliseconds report_after, std::int64_t since_ns) noexcept;
void watch_leave() noexcept;
/// After fork, in the child: no thread watches it, and no lock is held.
void forget_watch_in_child() noexcept;

/// Runs `jobkit where` on this step (SLURM_JOB_ID.SLURM_STEP_ID) and logs its report under a
/// header naming the call that has waited; nothing outside a Slurm step. Blocks up to 30 s: the
/// watch thread's, and jobkit.torch's for torch's own collectives (python/jobkit/_torch_where.py).
void report_call(int rank, std::string_view call, std::string_view site, long waited_s);

// The report's parts, apart for the tests.

/// The environment the report's `jobkit where` runs in: this one without the step's identity
/// (SLURM_* but SLURM_CONF, PMIX_*, PMI_*): it is not a rank of the step, and srun would read
/// the step's task counts and binding from it.
std::vector<std::string> report_environment(char** variables);

/// The lines logged: a header naming the call and the wait, then the report, each line indented.
/// rank: the world rank of the process that reports; output/status: jobkit where's.
std::string report_text(int rank, std::string_view call, std::string_view site, long waited_s, std::string_view target,
                        int status, std::string_view output, std::string_view error);

}  // namespace jobkit::where
