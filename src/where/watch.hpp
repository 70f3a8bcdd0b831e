#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::where {

/// The step's report by itself: while a process is in a watched call (its group's rank 0 asks for
/// it: watch_scope), a thread of its own looks once a second at how long each such call has waited;
/// past the call's threshold (settings.hpp: report_after) it runs `jobkit where JOB.STEP` once for
/// that call and logs its report to stderr, naming the call as the caller described it. Any number
/// of threads may be in watched calls at once. The thread starts at the first watched call; a
/// forked child starts its own, and watches none of its parent's calls. It never touches the call:
/// the report runs beside it, and a report that fails says why in one line. The watch knows nothing
/// of the record (record.hpp): the caller tells it what to name.

/// What a watched call tells the watch: its name and call site, this process's rank in the world
/// (the report's prefix), and when to report (zero: never).
struct watched_call {
  std::string_view call;
  std::string_view site;
  int rank = 0;
  std::chrono::milliseconds report_after{0};
};

/// A call watched from its start to its end; nothing when report_after is zero, and nothing past
/// the calls the watch holds at once (16).
class watch_scope {
 public:
  explicit watch_scope(const watched_call& call) noexcept;
  ~watch_scope();
  watch_scope(const watch_scope&) = delete;
  watch_scope& operator=(const watch_scope&) = delete;

 private:
  int slot_ = -1;  // -1: not watched
  std::uint64_t generation_ = 0;
};

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
