#include "progress/learner.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/parse.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

[[noreturn]] void refuse(std::string_view name, std::string_view value, std::string_view rule) {
  throw error(errc::invalid_environment, fmt::format("{}='{}': {}", name, value, rule));
}

std::optional<double> number_of(std::string_view value) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const double n = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(n)) return std::nullopt;
  return n;
}

/// A span of seconds: timeout_from_seconds's rule (more than 0, finite, at most 1e9).
std::optional<double> seconds_variable(const environment& env, std::string_view name) {
  const auto value = env.get(name);
  if (!value) return std::nullopt;
  const auto n = number_of(*value);
  if (!n || !timeout_from_seconds(*n)) refuse(name, *value, fmt::format("{} (e.g. 300 or 2.5)", timeout_seconds_rule));
  return *n;
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::optional<double> number_after(std::string_view text, std::string_view key) {
  const auto quoted = fmt::format("\"{}\":", key);
  const auto at = text.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  auto rest = text.substr(at + quoted.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const auto end = rest.find_first_of(",}");
  if (end == std::string_view::npos) return std::nullopt;
  const auto n = number_of(rest.substr(0, end));
  if (!n || *n < 0 || *n > longest_seconds) return std::nullopt;
  return n;
}

}  // namespace

progress_settings progress_settings_from(const environment& env) {
  progress_settings s;
  const auto on = env.get("JOBKIT_PROGRESS");
  if (on && *on != "0" && *on != "1") refuse("JOBKIT_PROGRESS", *on, "must be 0 (off) or 1 (on)");
  s.enabled = on ? *on == "1" : env.has("SLURM_JOB_ID") && env.has("SLURM_STEP_ID");
  if (!s.enabled) return s;
  s.set_bound = seconds_variable(env, "JOBKIT_PROGRESS_BOUND");
  if (const auto value = env.get("JOBKIT_PROGRESS_FACTOR")) {
    const auto n = number_of(*value);
    if (!n || *n < 1 || *n > 1000) refuse("JOBKIT_PROGRESS_FACTOR", *value, "must be a number from 1 to 1000 (e.g. 5)");
    s.factor = *n;
  }
  if (const auto n = seconds_variable(env, "JOBKIT_PROGRESS_FLOOR")) s.floor = *n;
  if (const auto n = seconds_variable(env, "JOBKIT_PROGRESS_FIRST_STEP")) s.first_step = *n;
  if (const auto n = seconds_variable(env, "JOBKIT_PROGRESS_CHECKPOINT_FLOOR")) s.checkpoint_floor = *n;
  if (const auto value = env.get("JOBKIT_STRAGGLER_EVERY")) {
    auto rest = std::string_view(*value);
    const auto n = take_decimal(rest);
    if (!n || !rest.empty() || *n > 1'000'000) {
      refuse("JOBKIT_STRAGGLER_EVERY", *value, "must be a whole number of stop agreements from 0 (off) to 1000000");
    }
    s.straggler_every = *n;
  }
  if (const auto value = env.get("JOBKIT_STRAGGLER_THRESHOLD")) {
    const auto n = number_of(*value);
    if (!n || *n <= 0 || *n > 1) refuse("JOBKIT_STRAGGLER_THRESHOLD", *value, "must be a number above 0 and at most 1");
    s.straggler_threshold = *n;
  }
  if (const auto value = env.get("JOBKIT_STRAGGLER_RESOLUTION")) {
    const auto n = number_of(*value);
    if (!n || *n < 0 || *n > 3600) {
      refuse("JOBKIT_STRAGGLER_RESOLUTION", *value, "must be a number of seconds from 0 to 3600 (e.g. 0.001)");
    }
    s.straggler_resolution = *n;
  }
  return s;
}

std::string_view to_string(progress_phase phase) noexcept {
  switch (phase) {
    case progress_phase::first_step: return "first-step";
    case progress_phase::step: return "step";
    case progress_phase::checkpoint: return "checkpoint";
  }
  return "unknown";
}

bound_learner::bound_learner(progress_settings settings, learned_progress carried)
    : settings_(settings), carried_(carried), learned_(carried) {}

bool bound_learner::mark(mark_source source, double now, double collective_seconds) {
  if (source_ && source < *source_) return false;
  if (saving_) return false;  // a save's collectives: the save's bound holds until it ends
  if (!source_) {
    first_mark_ = now;
  } else if (source > *source_) {
    // Another kind of boundary: what was learned measured other intervals.
    source_marks_ = 0;
    learned_.longest_step = std::max(carried_.longest_step, 0.0);
    compute_.clear();
    open_wait_ = 0;
  }
  source_ = source;
  if (restoring_) {
    const double took = std::max(0.0, now - checkpoint_began_);
    learned_.longest_checkpoint = std::max(learned_.longest_checkpoint, took);
    checkpoint_in_interval_ += took;
    restoring_ = false;
  }
  if (source_marks_ >= 1) {
    const double interval = std::max(0.0, now - last_mark_ - checkpoint_in_interval_);
    if (long_step_ <= 0) {
      learned_.longest_step = std::max(learned_.longest_step, interval);
      const double compute = std::max(0.0, interval - collective_seconds - open_wait_);
      compute_.push_back({last_mark_, now, compute});
      const auto window = static_cast<std::size_t>(std::max(settings_.straggler_every, 1));
      while (compute_.size() > window) compute_.pop_front();
    }
  }
  ++source_marks_;
  ++steps_;
  open_wait_ = 0;
  last_mark_ = now;
  activity_ = now;
  checkpoint_in_interval_ = 0;
  long_step_ = 0;
  return true;
}

void bound_learner::save_begin(double now) {
  if (saving_) return;
  if (restoring_) {  // a save right after a restore: the restore ended
    const double took = std::max(0.0, now - checkpoint_began_);
    learned_.longest_checkpoint = std::max(learned_.longest_checkpoint, took);
    checkpoint_in_interval_ += took;
    restoring_ = false;
  }
  saving_ = true;
  checkpoint_began_ = now;
  activity_ = now;
}

void bound_learner::save_end(double now) {
  if (!saving_) return;
  const double took = std::max(0.0, now - checkpoint_began_);
  learned_.longest_checkpoint = std::max(learned_.longest_checkpoint, took);
  checkpoint_in_interval_ += took;
  saving_ = false;
  activity_ = now;
}

void bound_learner::restore_begin(double now) {
  if (saving_ || restoring_) return;
  restoring_ = true;
  checkpoint_began_ = now;
  activity_ = now;
}

void bound_learner::long_step(double seconds) { long_step_ = std::max(long_step_, seconds); }

double bound_learner::step_bound() const {
  double bound =
      settings_.set_bound ? *settings_.set_bound : std::max(settings_.floor, settings_.factor * learned_.longest_step);
  return std::max(bound, long_step_);
}

double bound_learner::checkpoint_bound() const {
  return std::max(settings_.checkpoint_floor, settings_.factor * learned_.longest_checkpoint);
}

progress_view bound_learner::view(double now) const {
  progress_view v;
  v.steps = steps_;
  v.activity = activity_;
  v.idle = std::max(0.0, now - activity_);
  if (saving_ || restoring_) {
    v.phase = progress_phase::checkpoint;
    v.bound = checkpoint_bound();
    return v;
  }
  v.bound = step_bound();
  // The start-up allowance: no hang before first_step seconds after the first mark, and none
  // before the governing kind's first interval is over.
  const double allowance = settings_.first_step - (activity_ - first_mark_);
  const bool starting = source_marks_ < 2 || now - first_mark_ < settings_.first_step;
  if (starting) {
    v.phase = progress_phase::first_step;
    v.bound = std::max(v.bound, source_marks_ < 2 ? settings_.first_step : allowance);
  } else {
    v.phase = progress_phase::step;
  }
  return v;
}

void bound_learner::merge(const learned_progress& other) {
  learned_.longest_step = std::max(learned_.longest_step, other.longest_step);
  learned_.longest_checkpoint = std::max(learned_.longest_checkpoint, other.longest_checkpoint);
}

void bound_learner::subtract_wait(double begin, double end) {
  if (!source_ || !(end > begin)) return;
  for (auto& step : compute_) {
    const double overlap = std::min(end, step.end) - std::max(begin, step.begin);
    if (overlap > 0) step.compute = std::max(0.0, step.compute - overlap);
  }
  if (end > last_mark_) open_wait_ += end - std::max(begin, last_mark_);
}

std::optional<double> bound_learner::median_compute() const {
  if (compute_.empty()) return std::nullopt;
  std::vector<double> values;
  values.reserve(compute_.size());
  for (const auto& step : compute_) values.push_back(step.compute);
  return median_of(std::move(values));
}

std::vector<double> straggler_scores(const std::vector<std::optional<double>>& medians, double resolution) {
  std::vector<double> known;
  for (const auto& m : medians) {
    if (m) known.push_back(std::max(*m, resolution));
  }
  std::vector<double> scores(medians.size(), 1.0);
  if (known.empty()) return scores;
  const double reference = median_of(known);
  for (std::size_t i = 0; i < medians.size(); ++i) {
    if (!medians[i]) continue;
    // A rank that computes nothing measurable is as fast as any: 1 when the reference is 0 too.
    const double own = std::max(*medians[i], resolution);
    scores[i] = own <= 0 ? (reference <= 0 ? 1.0 : 1e9) : reference / own;
  }
  return scores;
}

std::string bound_file_text(const learned_progress& learned, double step_bound, double checkpoint_bound,
                            std::int64_t steps) {
  return fmt::format(
      "{{\"step_seconds\":{:.3f},\"checkpoint_seconds\":{:.3f},\"step_bound_seconds\":{:.3f},"
      "\"checkpoint_bound_seconds\":{:.3f},\"steps\":{}}}\n",
      learned.longest_step, learned.longest_checkpoint, step_bound, checkpoint_bound, steps);
}

std::optional<learned_progress> parse_bound_file(std::string_view text) {
  const auto step = number_after(text, "step_seconds");
  const auto checkpoint = number_after(text, "checkpoint_seconds");
  if (!step || !checkpoint) return std::nullopt;
  return learned_progress{*step, *checkpoint};
}

bool changed_materially(const learned_progress& written, const learned_progress& now) {
  const auto differs = [](double a, double b) { return std::abs(a - b) > 0.1 * std::max(a, b) && a != b; };
  return differs(written.longest_step, now.longest_step) || differs(written.longest_checkpoint, now.longest_checkpoint);
}

}  // namespace jobkit::detail
