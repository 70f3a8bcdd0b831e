#pragma once

// Progress marks: where a step ends, for the hang watcher and the straggler scores
// (docs/progress.md). A program that uses the stop agreement (jobkit::stop_requested, stop_guard)
// or jobkit's collectives needs none of this: their calls are its step boundaries.

#include <chrono>

#include "jobkit/export.hpp"

namespace jobkit {

/// Marks the end of a step on this rank (not collective; a few hundred nanoseconds). For a program
/// that neither uses the stop agreement nor makes a jobkit collective per step; once a program
/// calls it, jobkit's collectives no longer count as its step boundaries (the stop agreement
/// still does, and then progress() no longer counts). Without progress tracking (outside a Slurm
/// step, or JOBKIT_PROGRESS=0) it does nothing.
/// @throws jobkit::error (invalid_environment) naming the variable and its value when a
///         JOBKIT_PROGRESS* or JOBKIT_STRAGGLER_* variable is malformed
JOBKIT_API void progress();

/// Says that the current step (until the next step boundary) may take up to `bound` without
/// counting as a hang: an evaluation, a long save outside jobkit::checkpoints. That step's
/// interval is not learned.
/// @throws jobkit::error (invalid_argument) when `bound` is negative; as progress()
JOBKIT_API void long_step(std::chrono::milliseconds bound);

}  // namespace jobkit
