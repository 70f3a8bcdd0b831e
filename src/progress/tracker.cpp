#include "jobkit/progress.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/json.hpp"
#include "core/mutex_held.hpp"
#include "core/parse.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "log/library_log.hpp"
#include "progress/tracker.hpp"
#include "recovery/events.hpp"
#include "where/record.hpp"

namespace jobkit {
namespace detail {
namespace {

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double steady_seconds() noexcept { return static_cast<double>(steady_ns()) / 1e9; }

/// Seconds since this process started (/proc/self/stat's start time against /proc/uptime).
std::optional<double> process_age() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command's name may hold blanks
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) {
      std::ifstream uptime_file("/proc/uptime");
      double uptime = 0;
      if (!(uptime_file >> uptime)) return std::nullopt;
      const double started = std::stod(field) / static_cast<double>(::sysconf(_SC_CLK_TCK));
      return std::max(0.0, uptime - started);
    }
  }
  return std::nullopt;
}

/// This rank and its host: the runtime's, else Slurm's (a program that marks before any runtime).
std::pair<int, std::string> who() {
  auto id = identity_in_use();
  if (id.source == identity_source::defaults) {
    if (const auto procid = process_environment().get("SLURM_PROCID")) {
      auto rest = std::string_view(*procid);
      if (const auto n = take_decimal(rest); n && rest.empty()) id.rank = *n;
    }
    char host[256] = {};
    if (id.hostname.empty() && ::gethostname(host, sizeof host - 1) == 0) id.hostname = host;
  }
  return {id.rank, id.hostname};
}

struct tracker {
  progress_settings settings;
  bound_learner learner;
  std::optional<recovery_settings> recovery;
  learned_progress written;  ///< what progress-bound.json holds (rank 0's)
  double reported_activity = -1;
  bool watching = false;
  std::vector<double> last_scores;
  std::vector<torch_collective> torch;  ///< progress_torch_collectives'
};

/// The state: under `tracker_lock`, which a fork takes (atfork): a child tracks nothing.
pthread_mutex_t tracker_lock = PTHREAD_MUTEX_INITIALIZER;
enum class tracking { unread, off, on, refused };
tracking state_ = tracking::unread;
std::string refusal_;
tracker* tracker_ = nullptr;  // never freed: the detached watcher may read it until the process ends
std::atomic<bool> active_{false};
std::atomic<bool> off_{false};  // settled off: a mark returns at once
std::atomic<std::int64_t> collective_ns_{0};

struct tracker_held : detail::mutex_held {
  tracker_held() noexcept : mutex_held(tracker_lock) {}
};

void before_fork() noexcept { ::pthread_mutex_lock(&tracker_lock); }
void after_fork_in_parent() noexcept { ::pthread_mutex_unlock(&tracker_lock); }
void after_fork_in_child() noexcept {
  // No watcher runs in the child, and the parent's steps are not its own.
  state_ = tracking::off;
  active_.store(false);
  off_.store(true);
  ::pthread_mutex_unlock(&tracker_lock);
}

std::optional<learned_progress> carried_from(const std::optional<recovery_settings>& recovery) {
  if (!recovery) return std::nullopt;
  std::ifstream in(recovery->dir / "progress-bound.json");
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_bound_file(text);
}

/// Under `tracker_lock`: the tracker once the settings are read, or nullptr when off.
/// @throws jobkit::error (invalid_environment) when they were refused
tracker* tracker_of_process() {
  if (state_ == tracking::unread) {
    static const bool registered = ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
    try {
      const auto settings = progress_settings_from(process_environment());
      if (!settings.enabled || !registered) {
        state_ = tracking::off;
        off_.store(true);
      } else {
        std::optional<recovery_settings> recovery;
        try {
          recovery = recovery_settings_of_process();
        } catch (const error&) {
          // A malformed JOBKIT_RECOVERY_ATTEMPT: no event is written (events.hpp); hangs are logged.
        }
        const auto carried = carried_from(recovery).value_or(learned_progress{});
        tracker_ = new tracker{settings, bound_learner(settings, carried), recovery, carried, -1, false, {}, {}};
        state_ = tracking::on;
        active_.store(true);
      }
    } catch (const error& e) {
      state_ = tracking::refused;
      refusal_ = e.what();
    }
  }
  if (state_ == tracking::refused) throw error(errc::invalid_environment, refusal_);
  return state_ == tracking::on ? tracker_ : nullptr;
}

std::string where_text(const std::optional<where::record_view>& record, std::int64_t now_ns) {
  if (record && record->in_call) {
    return fmt::format("in {} at {} (a group of {}) for {:.0f} s", record->call, record->site, record->group_size,
                       static_cast<double>(now_ns - record->since_ns) / 1e9);
  }
  if (record && !record->last_call.empty()) {
    return fmt::format("outside any jobkit call (the last one was {} at {})", record->last_call, record->last_site);
  }
  return "outside any jobkit call";
}

std::int64_t system_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void report_hang(const tracker& t, const progress_view& v, const std::vector<torch_collective>& in_torch_calls) {
  const auto [rank, host] = who();
  const auto record = where::read_own_record();
  const auto now_ns = system_ns();
  const bool in_jobkit = record && record->in_call;
  // torch's collectives as last read (up to a poll late): one that began before the last progress
  // is not what the rank waits in now.
  const double since_activity = steady_seconds() - v.activity;
  const torch_collective* torch = nullptr;
  for (const auto& c : in_torch_calls) {
    if (!in_jobkit && static_cast<double>(now_ns - c.since_ns) / 1e9 <= since_activity + 0.1) {
      torch = &c;
      break;
    }
  }
  const bool in_torch = torch != nullptr;
  const auto place = in_torch ? fmt::format("in {} at {} for {:.0f} s (torch's flight recorder)", torch->call,
                                            torch->site.empty() ? "an unknown site" : torch->site,
                                            static_cast<double>(now_ns - torch->since_ns) / 1e9)
                              : where_text(record, now_ns);
  const bool in_call = in_jobkit || in_torch;
  std::string fields = fmt::format(R"("idle_seconds":{:.1f},"bound_seconds":{:.1f},"phase":{},"steps":{},"in_call":{})",
                                   v.idle, v.bound, json_string(to_string(v.phase)), v.steps, in_call);
  if (in_jobkit) fields += fmt::format(R"(,"call":{},"site":{})", json_string(record->call), json_string(record->site));
  if (in_torch) fields += fmt::format(R"(,"call":{},"site":{})", json_string(torch->call), json_string(torch->site));
  fields += fmt::format(R"(,"where":{})", json_string(place));
  const bool recorded = t.recovery && record_event("hang", rank, host, fields);
  library_log(log_level::warning,
              "no progress for {:.1f} s, past this rank's {} bound of {:.1f} s (after {} steps): {}{}", v.idle,
              to_string(v.phase), v.bound, v.steps, place,
              recorded ? "; recorded in JOBKIT_RECOVERY_DIR/events.jsonl"
                       : "; `jobkit where` shows every rank's place (docs/progress.md)");
}

void write_bound_file(const recovery_settings& recovery, const std::string& text) {
  const auto path = recovery.dir / "progress-bound.json";
  const auto temporary = recovery.dir / fmt::format(".progress-bound.json.{}", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = write_file_all(fd, text.data(), text.size()) == 0;
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) ::unlink(temporary.c_str());
}

/// The watcher thread's life: joined at the process's exit (an atexit handler, which runs
/// before the destructors of the statics the watcher uses, made before it: the environment, the
/// logger), never running while they are destroyed. Never destroyed itself; a forked child, which
/// has no watcher, leaves it alone.
struct watcher_life {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::vector<std::thread> threads;    // this process's watchers (more than one only after a reset: tests)
  std::vector<std::thread> inherited;  // a forked child's copies of its parents' (no such threads)
  pid_t owner = 0;
};

watcher_life& life() {
  static auto* const l = new watcher_life;  // NOLINT(cppcoreguidelines-owning-memory): lives until exit
  return *l;
}

void stop_watcher_at_exit() noexcept {
  auto& l = life();
  if (l.owner != ::getpid()) return;
  {
    const std::lock_guard lock(l.mutex);
    l.stop = true;
  }
  l.wake.notify_all();
  for (auto& thread : l.threads) {
    if (thread.joinable()) thread.join();
  }
}

void watch_loop(tracker* t) noexcept {
  auto& l = life();
  for (;;) {
    {
      std::unique_lock lock(l.mutex);
      if (l.wake.wait_for(lock, std::chrono::seconds(1), [&] { return l.stop; })) return;
    }
    try {
      std::optional<progress_view> hang;
      std::vector<torch_collective> torch;
      std::optional<std::string> bound_file;
      {
        const tracker_held h;
        if (state_ != tracking::on || tracker_ != t) return;
        const auto v = t->learner.view(steady_seconds());
        if (v.hung() && v.activity != t->reported_activity) {
          t->reported_activity = v.activity;
          hang = v;
          torch = t->torch;
        }
        const auto& learned = t->learner.learned();
        if (t->recovery && changed_materially(t->written, learned)) {
          t->written = learned;
          bound_file =
              bound_file_text(learned, t->learner.step_bound(), t->learner.checkpoint_bound(), t->learner.steps());
        }
      }
      if (hang) report_hang(*t, *hang, torch);
      if (bound_file && who().first == 0) write_bound_file(*t->recovery, *bound_file);
    } catch (...) {
      // Out of memory for a line: the next second tries again.
    }
  }
}

void start_watching(tracker& t) {
  if (t.watching) return;
  t.watching = true;
  // Started with every signal blocked: a signal for the process is never handled on the watcher.
  sigset_t all;
  sigset_t previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  try {
    auto& l = life();
    if (l.owner != ::getpid()) {
      // A forked child's copy of its parent's watchers: no such thread runs here, so they are
      // neither joined nor detached, only put where nothing destroys them.
      for (auto& thread : l.threads) l.inherited.push_back(std::move(thread));
      l.threads.clear();
      l.owner = ::getpid();
    }
    // An earlier tracker's watcher (after a reset: the tests) returns at its next wake, seeing
    // another tracker; it is joined at exit with this one.
    l.threads.emplace_back(watch_loop, &t);
    static const bool registered = std::atexit(stop_watcher_at_exit) == 0;
    (void)registered;
  } catch (const std::system_error&) {
    library_log(log_level::warning, "progress: no thread for the hang watcher; hangs are not reported");
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

template <typename Change>
void change_tracker(Change change) noexcept {
  if (!active_.load(std::memory_order_relaxed)) return;
  try {
    const tracker_held h;
    if (state_ == tracking::on && tracker_->learner.marked()) change(*tracker_);
  } catch (...) {
  }
}

}  // namespace

void progress_mark(mark_source source) {
  if (off_.load(std::memory_order_relaxed)) return;
  bool first = false;
  {
    const tracker_held h;
    auto* t = tracker_of_process();
    if (t == nullptr) return;
    const auto pending = collective_ns_.load(std::memory_order_relaxed);
    first = !t->learner.marked();
    if (t->learner.mark(source, steady_seconds(), static_cast<double>(pending) / 1e9)) {
      collective_ns_.fetch_sub(pending, std::memory_order_relaxed);
    }
    if (first) start_watching(*t);
  }
  if (first) {
    const auto [rank, host] = who();
    const auto age = process_age();
    if (rank == 0 && age) record_event("first_step_done", rank, host, fmt::format(R"("seconds":{:.3f})", *age));
  }
}

void progress_long_step(std::chrono::milliseconds bound) {
  if (bound.count() < 0) {
    throw error(errc::invalid_argument, fmt::format("long_step: a bound of {} ms is negative", bound.count()));
  }
  const tracker_held h;
  auto* t = tracker_of_process();
  if (t != nullptr) t->learner.long_step(static_cast<double>(bound.count()) / 1e3);
}

void progress_save_begin() noexcept {
  change_tracker([](tracker& t) { t.learner.save_begin(steady_seconds()); });
}
void progress_save_end() noexcept {
  change_tracker([](tracker& t) { t.learner.save_end(steady_seconds()); });
}
void progress_restore_begin() noexcept {
  change_tracker([](tracker& t) { t.learner.restore_begin(steady_seconds()); });
}

collective_wait::collective_wait() noexcept {
  if (active_.load(std::memory_order_relaxed)) began_ns_ = steady_ns();
}

collective_wait::~collective_wait() {
  if (began_ns_ >= 0) collective_ns_.fetch_add(steady_ns() - began_ns_, std::memory_order_relaxed);
}

void progress_torch_collectives(const std::vector<torch_collective>& in_progress) noexcept {
  if (!active_.load(std::memory_order_relaxed)) return;
  try {
    std::vector<torch_collective> kept(
        in_progress.begin(),
        in_progress.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(in_progress.size(), 16)));
    const tracker_held h;
    if (state_ == tracking::on) tracker_->torch = std::move(kept);
  } catch (...) {  // out of memory for the strings: the place stays unknown
  }
}

void progress_torch_waits(const std::vector<std::pair<std::int64_t, std::int64_t>>& waits) noexcept {
  // The system clock's waits on the learner's (steady) clock, by their offset now.
  const double offset = steady_seconds() - static_cast<double>(system_ns()) / 1e9;
  change_tracker([&](tracker& t) {
    for (const auto& [begin, end] : waits) {
      t.learner.subtract_wait(static_cast<double>(begin) / 1e9 + offset, static_cast<double>(end) / 1e9 + offset);
    }
  });
}

bool progress_tracking() noexcept {
  if (off_.load(std::memory_order_relaxed)) return false;
  try {
    const tracker_held h;
    return tracker_of_process() != nullptr;
  } catch (...) {
    return false;
  }
}

bool progress_exchange_due(long agreement) noexcept {
  if (!active_.load(std::memory_order_relaxed)) return false;
  const tracker_held h;
  if (state_ != tracking::on) return false;
  const int every = tracker_->settings.straggler_every;
  return every > 0 && agreement > 0 && agreement % every == 0;
}

progress_share progress_share_of_rank() {
  const auto host = who().second;
  const tracker_held h;
  if (state_ != tracking::on) return {-1.0, 0.0, 0.0, host};
  const auto& l = tracker_->learner;
  return {l.median_compute().value_or(-1.0), l.learned().longest_step, l.learned().longest_checkpoint, host};
}

void progress_take_shares(const std::vector<progress_share>& shares, int rank, long agreement) {
  std::vector<std::optional<double>> medians;
  learned_progress merged;
  for (const auto& [median, step, checkpoint, host] : shares) {
    medians.push_back(median >= 0 ? std::optional<double>(median) : std::nullopt);
    merged.longest_step = std::max(merged.longest_step, step);
    merged.longest_checkpoint = std::max(merged.longest_checkpoint, checkpoint);
  }
  double threshold = 0;
  double resolution = 0;
  std::int64_t steps = 0;
  {
    const tracker_held h;
    if (state_ != tracking::on) return;
    tracker_->learner.merge(merged);
    threshold = tracker_->settings.straggler_threshold;
    resolution = tracker_->settings.straggler_resolution;
    steps = tracker_->learner.steps();
  }
  const auto scores = straggler_scores(medians, resolution);
  if (rank >= 0 && static_cast<std::size_t>(rank) < scores.size()) {
    where::record_score(scores[static_cast<std::size_t>(rank)], threshold, agreement);
  }
  if (rank != 0) return;
  {
    const tracker_held h;
    if (state_ == tracking::on) tracker_->last_scores = scores;
  }
  std::string named;
  std::string listed;
  for (std::size_t r = 0; r < scores.size(); ++r) {
    if (scores[r] >= threshold) continue;
    const auto& host = std::get<3>(shares[r]);
    named += fmt::format("{}rank {} ({}) scored {:.2f}", named.empty() ? "" : ", ", r, host, scores[r]);
    listed += fmt::format(R"({}{{"rank":{},"host":{},"score":{:.3f}}})", listed.empty() ? "" : ",", r,
                          json_string(host), scores[r]);
  }
  if (named.empty()) {
    library_log(log_level::debug, "progress: no straggler at step {} (scores of {} ranks, threshold {})", steps,
                scores.size(), threshold);
    return;
  }
  library_log(log_level::warning,
              "straggler: {} (its median compute time per step against the median of all ranks'; below {} "
              "flags one; docs/progress.md)",
              named, threshold);
  std::string all;
  if (scores.size() <= 256) {
    for (std::size_t r = 0; r < scores.size(); ++r) all += fmt::format("{}{:.3f}", r == 0 ? "" : ",", scores[r]);
  }
  const auto [me, host] = who();
  record_event(
      "straggler", me, host,
      fmt::format(R"("steps":{},"threshold":{},"stragglers":[{}],"scores":[{}])", steps, threshold, listed, all));
}

std::vector<double> progress_last_scores() {
  const tracker_held h;
  return state_ == tracking::on ? tracker_->last_scores : std::vector<double>{};
}

}  // namespace detail

void progress() { detail::progress_mark(detail::mark_source::explicit_call); }

void long_step(std::chrono::milliseconds bound) { detail::progress_long_step(bound); }

}  // namespace jobkit
