#include "where/watch.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/mutex_held.hpp"
#include "core/posix_io.hpp"

extern char** environ;

namespace jobkit::where {
namespace {

/// The calls watched, as the watching thread sees them: all under `watch_lock`, which a fork takes
/// (atfork), so that a child starts from a state no one was changing.
struct watched_slot {
  bool used = false;
  bool reported = false;
  int rank = 0;
  std::int64_t since_ns = 0;  // CLOCK_MONOTONIC
  std::int64_t after_ms = 0;
  char call[32] = {};
  char site[128] = {};
};
constexpr int slot_count = 16;
pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
watched_slot slots[slot_count];
bool thread_started = false;
std::uint64_t watch_generation = 1;

struct watch_held : detail::mutex_held {
  watch_held() noexcept : mutex_held(watch_lock) {}
};

void watch_before_fork() noexcept { ::pthread_mutex_lock(&watch_lock); }
void watch_after_fork_in_parent() noexcept { ::pthread_mutex_unlock(&watch_lock); }
void watch_after_fork_in_child() noexcept {
  // No thread watches the child, and its parent's calls are not its own.
  for (auto& s : slots) s = watched_slot{};
  thread_started = false;
  ++watch_generation;
  ::pthread_mutex_unlock(&watch_lock);
}

std::int64_t monotonic_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

template <std::size_t N>
void copy_name(char (&to)[N], std::string_view from) noexcept {
  const auto n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

/// A call past its threshold, not reported yet: marked reported and copied out; nullopt when none.
std::optional<watched_slot> take_due() noexcept {
  const watch_held h;
  const auto now = monotonic_ns();
  for (auto& s : slots) {
    if (!s.used || s.reported || now - s.since_ns < s.after_ms * 1'000'000) continue;
    s.reported = true;
    return s;
  }
  return std::nullopt;
}

void watch_loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    while (const auto due = take_due()) {
      const auto waited = std::chrono::nanoseconds(monotonic_ns() - due->since_ns);
      try {
        report_call(due->rank, due->call, due->site,
                    static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()));
      } catch (...) {
        // Out of memory while reporting: the report is lost, the step goes on.
      }
    }
  }
}

}  // namespace

watch_scope::watch_scope(const watched_call& call) noexcept {
  if (call.report_after.count() <= 0) return;
  static const bool registered =
      ::pthread_atfork(watch_before_fork, watch_after_fork_in_parent, watch_after_fork_in_child) == 0;
  (void)registered;
  bool start = false;
  {
    const watch_held h;
    const auto free = std::find_if(std::begin(slots), std::end(slots), [](const watched_slot& s) { return !s.used; });
    if (free == std::end(slots)) return;
    free->used = true;
    free->reported = false;
    free->rank = call.rank;
    free->since_ns = monotonic_ns();
    free->after_ms = call.report_after.count();
    copy_name(free->call, call.call);
    copy_name(free->site, call.site);
    slot_ = static_cast<int>(free - std::begin(slots));
    generation_ = watch_generation;
    start = !thread_started;
    thread_started = true;
  }
  if (!start) return;
  try {
    std::thread(watch_loop).detach();
  } catch (...) {
    // No thread: no report by itself; `jobkit where` still answers.
  }
}

watch_scope::~watch_scope() {
  if (slot_ < 0) return;
  const watch_held h;
  if (generation_ == watch_generation) slots[slot_].used = false;  // else the parent's call, in a child
}

void report_call(int rank, std::string_view call, std::string_view site, long waited_s) {
  const auto& env = detail::process_environment();
  const auto job = env.get("SLURM_JOB_ID");
  const auto step = env.get("SLURM_STEP_ID");
  if (!job || !step) return;
  const std::string target = *job + "." + *step;
  const std::string program = env.get("JOBKIT_CLI").value_or("jobkit");
  const auto environment = report_environment(environ);
  const auto result =
      detail::run_bounded({program, "where", target, "--timeout", "10"}, std::chrono::seconds(30), &environment);
  const auto text = report_text(rank, call, site, waited_s, target, result.status, result.out, result.err);
  (void)detail::write_file_all(2, text.data(), text.size());
}

std::vector<std::string> report_environment(char** variables) {
  std::vector<std::string> kept;
  for (char** v = variables; v != nullptr && *v != nullptr; ++v) {
    const std::string_view entry(*v);
    const bool step_identity = (entry.starts_with("SLURM_") && !entry.starts_with("SLURM_CONF=")) ||
                               entry.starts_with("PMIX_") || entry.starts_with("PMI_");
    if (!step_identity) kept.emplace_back(entry);
  }
  return kept;
}

std::string report_text(int rank, std::string_view call, std::string_view site, long waited_s, std::string_view target,
                        int status, std::string_view output, std::string_view error) {
  const std::string prefix = fmt::format("[rank: {}] WARNING: ", rank);
  if (output.empty()) {
    const auto why = status == 127 ? fmt::format(
                                         "could not start jobkit ({}; the jobkit command: JOBKIT_CLI, else "
                                         "jobkit on PATH)",
                                         detail::first_line(error))
                     : status == 124 ? std::string("jobkit where did not answer within 30 s")
                                     : fmt::format("jobkit where {} failed (exit status {}): {}", target, status,
                                                   detail::first_line(error));
    return fmt::format("{}{} at {} has waited {} s; cannot say where every rank is: {}\n", prefix, call, site, waited_s,
                       why);
  }
  std::string text = fmt::format("{}{} at {} has waited {} s; where every rank is (jobkit where {}):\n", prefix, call,
                                 site, waited_s, target);
  for (std::size_t start = 0; start < output.size();) {
    auto end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    text += "  ";
    text.append(output.substr(start, end - start));
    text += '\n';
    start = end + 1;
  }
  if (status != 0 && status != 1) {
    text += fmt::format("  (jobkit where: exit status {}: {})\n", status, detail::first_line(error));
  }
  return text;
}

}  // namespace jobkit::where
