#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "core/environment.hpp"

namespace jobkit::where {

/// Whether `jobkit where` is on in this process: the one rule for all its parts, the record of the
/// jobkit call in progress (record.hpp), the step's own report (watch.hpp, and torch's collectives'
/// in python/jobkit/_torch_where.py) and the Python stack dump `import jobkit` registers
/// (python/jobkit/_where.py); the Python module reads it through `_jobkit.where_enabled`. On in a
/// Slurm step (SLURM_JOB_ID and SLURM_STEP_ID set: `jobkit where` finds a step's processes by both,
/// and the step's own report asks about JOB.STEP) unless JOBKIT_WHERE=0. Read once, at the first
/// use in the process.
bool enabled() noexcept;
bool enabled_in(const detail::environment& env);

/// The signal a Python rank registers its stack dump on: JOBKIT_WHERE_SIGNAL (a number from 1 to
/// SIGRTMAX), else SIGRTMIN+6 (nothing else in Python, torch or Slurm uses it). The rank names it
/// in its stack file (proc.hpp: `jobkit-where-stack:N`), and `jobkit where` sends that one.
int stack_signal();
int stack_signal_in(const detail::environment& env);

/// When a call that still waits has the step report where every rank is (watch.hpp), where it
/// reports at all (reports()): JOBKIT_WHERE_REPORT_AFTER seconds (parse_timeout's rule; 0: never),
/// else a quarter of the call's deadline but at least 10 s; zero (never) when that is not before
/// the deadline.
/// @throws jobkit::error (invalid_environment) naming the variable and the value when malformed
std::chrono::milliseconds report_after(std::chrono::milliseconds deadline);
/// report_after's rule for one value of the variable (nullopt: unset).
std::chrono::milliseconds report_after_rule(std::optional<std::string_view> value, std::chrono::milliseconds deadline);
/// Whether the step reports by itself at all: enabled() and JOBKIT_WHERE_REPORT_AFTER is not 0;
/// for jobkit's calls (their group's rank 0) and torch's (_torch_where.py starts no thread otherwise).
/// @throws jobkit::error (invalid_environment) as report_after, where on or off: a malformed value
/// fails every call
bool reports();

}  // namespace jobkit::where
