#pragma once

// The pure parts of progress tracking (docs/progress.md): its settings from the environment, the
// learned bound of a rank's step, the straggler scores and the carried bound's file. No clock, no
// thread, no I/O: times are seconds on any steady clock the caller chooses (tracker.hpp's).

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/environment.hpp"

namespace jobkit::detail {

/// The knobs (docs/environment.md, "Recovery"). Seconds as doubles.
struct progress_settings {
  bool enabled = false;                 ///< JOBKIT_PROGRESS: 1 on, 0 off; unset: on in a Slurm step
  std::optional<double> set_bound;      ///< JOBKIT_PROGRESS_BOUND: a set step bound, no learning
  double factor = 5.0;                  ///< JOBKIT_PROGRESS_FACTOR: bound = factor x longest interval
  double floor = 60.0;                  ///< JOBKIT_PROGRESS_FLOOR: the learned step bound's least value
  double first_step = 600.0;            ///< JOBKIT_PROGRESS_FIRST_STEP: start-up allowance after the first mark
  double checkpoint_floor = 300.0;      ///< JOBKIT_PROGRESS_CHECKPOINT_FLOOR: the checkpoint bound's least value
  int straggler_every = 20;             ///< JOBKIT_STRAGGLER_EVERY: stop agreements between two exchanges; 0 off
  double straggler_threshold = 0.75;    ///< JOBKIT_STRAGGLER_THRESHOLD: a score below it names a straggler
  double straggler_resolution = 0.001;  ///< JOBKIT_STRAGGLER_RESOLUTION: a median compute time below it counts as it
};

/// The settings from `env`.
/// @throws jobkit::error (invalid_environment) naming the variable and its value when one is malformed
progress_settings progress_settings_from(const environment& env);

/// What counts as a step boundary, lowest first: once a higher kind is seen, lower ones no longer count.
enum class mark_source { collective = 0, explicit_call = 1, stop_agreement = 2 };

/// What the bound is about now.
enum class progress_phase { first_step, step, checkpoint };
/// "first-step", "step", "checkpoint".
std::string_view to_string(progress_phase phase) noexcept;

/// What is carried to the next step of the job (progress-bound.json) and merged over ranks.
struct learned_progress {
  double longest_step = 0;        ///< the longest step interval seen (seconds)
  double longest_checkpoint = 0;  ///< the longest checkpoint phase seen (seconds)
  friend bool operator==(const learned_progress&, const learned_progress&) = default;
};

/// What the watcher needs at one instant.
struct progress_view {
  progress_phase phase = progress_phase::first_step;
  double idle = 0;         ///< seconds since the last progress (a boundary, or a checkpoint phase's start or end)
  double bound = 0;        ///< seconds of idleness that make a hang, in this phase
  std::int64_t steps = 0;  ///< boundaries counted so far (every kind that counted)
  double activity = 0;     ///< when the last progress was: one hang is reported per value
  bool hung() const noexcept { return idle > bound; }
};

/// One rank's learner: its boundaries, checkpoint phases and the bound they give.
///
/// The step bound is settings.set_bound when set, else max(floor, factor x longest step interval,
/// the carried one included). From the first mark until the governing kind's second boundary, and
/// for first_step seconds after the first mark whatever happens, no hang is reported before
/// first_step seconds of idleness have passed since the first mark. A checkpoint phase (a save:
/// save_begin to save_end; a restore: restore_begin to the next counted boundary) has its own bound,
/// max(checkpoint_floor, factor x longest checkpoint phase), and its time is not a step's. A
/// long_step(s) makes the current interval's bound at least s, and that interval is not learned.
class bound_learner {
 public:
  explicit bound_learner(progress_settings settings, learned_progress carried = {});

  /// A boundary at `now`; `collective_seconds`: the time spent waiting in jobkit collectives since
  /// the previous boundary. False when it does not count (a lower kind than one seen, or inside a save).
  bool mark(mark_source source, double now, double collective_seconds);
  void save_begin(double now);
  void save_end(double now);
  void restore_begin(double now);
  void long_step(double seconds);

  progress_view view(double now) const;
  double step_bound() const;
  double checkpoint_bound() const;
  const learned_progress& learned() const noexcept { return learned_; }
  /// Merges what the other ranks learned (the maximum of each).
  void merge(const learned_progress& other);
  /// A wait in a collective the library does not run itself (torch's, as its flight recorder
  /// times them: python/jobkit/_torch_where.py), from `begin` to `end` on the caller's clock,
  /// reported after the fact: it is taken off the compute time of every recent step it overlaps
  /// (the window of median_compute) and of the step in progress. The caller reports disjoint waits.
  void subtract_wait(double begin, double end);
  /// The median compute time per step (interval minus collective waits) over the last
  /// straggler_every intervals; nullopt before any.
  std::optional<double> median_compute() const;
  std::int64_t steps() const noexcept { return steps_; }
  bool marked() const noexcept { return source_.has_value(); }

 private:
  progress_settings settings_;
  learned_progress carried_;
  learned_progress learned_;
  std::optional<mark_source> source_;
  int source_marks_ = 0;  ///< boundaries of the governing kind
  std::int64_t steps_ = 0;
  double first_mark_ = 0;
  double last_mark_ = 0;
  double activity_ = 0;
  double checkpoint_in_interval_ = 0;
  double long_step_ = 0;
  bool saving_ = false;
  bool restoring_ = false;
  double checkpoint_began_ = 0;
  /// A counted step of the window: its interval on the caller's clock and its compute time.
  struct step_span {
    double begin = 0;
    double end = 0;
    double compute = 0;
  };
  std::deque<step_span> compute_;
  double open_wait_ = 0;  ///< subtract_wait's part in the step in progress
};

/// The straggler scores (NVRx's form): median over ranks of the per-rank medians / each rank's
/// median; 1 for a rank without a median (none measured), < 1 for a slower rank. A median (and the
/// reference) below `resolution` seconds counts as `resolution`: compute times per step that short
/// are a rank's scheduling noise, and ranks that all compute less than it all score 1.
std::vector<double> straggler_scores(const std::vector<std::optional<double>>& medians, double resolution);

/// progress-bound.json's text, and its reading (nullopt when it is not one: a restarted step then
/// learns from zero).
std::string bound_file_text(const learned_progress& learned, double step_bound, double checkpoint_bound,
                            std::int64_t steps);
std::optional<learned_progress> parse_bound_file(std::string_view text);

/// Whether `now` differs materially (by more than 10 %) from what was written.
bool changed_materially(const learned_progress& written, const learned_progress& now);

}  // namespace jobkit::detail
