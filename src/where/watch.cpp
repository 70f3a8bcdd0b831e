#include "where/watch.hpp"

#include <fmt/format.h>
#include <time.h>

#include <mutex>
#include <thread>

#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/posix_io.hpp"

extern char** environ;

namespace jobkit::where {
namespace {

/// The call in progress, as the watching thread sees it; guarded by `lock`. Allocated once and
/// never destroyed: the thread may outlive static destruction at exit.
struct watched {
  std::mutex lock;
  bool in_call = false;
  bool thread_started = false;
  std::uint64_t number = 0;    // calls entered
  std::uint64_t reported = 0;  // the last call reported
  std::string call;
  std::string site;
  int rank = -1;
  int group_rank = -1;
  std::chrono::milliseconds report_after{0};
  std::int64_t since_ns = 0;
};

watched* state_ = new watched;

std::int64_t realtime_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

std::string first_line(std::string_view text) {
  const auto line = text.substr(0, text.find('\n'));
  return line.empty() ? std::string("(no message)") : std::string(line);
}

void report(const std::string& call, const std::string& site, int rank, long waited_s) {
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

void watch_loop() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::string call;
    std::string site;
    int rank = -1;
    long waited_s = 0;
    {
      const std::lock_guard guard(state_->lock);
      auto& s = *state_;
      if (!s.in_call || s.group_rank != 0 || s.report_after.count() <= 0 || s.reported == s.number) continue;
      const auto waited = std::chrono::nanoseconds(realtime_ns() - s.since_ns);
      if (waited < s.report_after) continue;
      s.reported = s.number;
      call = s.call;
      site = s.site;
      rank = s.rank;
      waited_s = static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count());
    }
    try {
      report(call, site, rank, waited_s);
    } catch (...) {
      // Out of memory while reporting: the report is lost, the step goes on.
    }
  }
}

}  // namespace

void watch_enter(std::string_view call, std::string_view site, int rank, int group_rank,
                 std::chrono::milliseconds report_after, std::int64_t since_ns) noexcept {
  if (report_after.count() <= 0) return;
  auto& s = *state_;
  const std::lock_guard guard(s.lock);
  try {
    s.call.assign(call);
    s.site.assign(site);
  } catch (...) {
    return;
  }
  s.in_call = true;
  ++s.number;
  s.rank = rank;
  s.group_rank = group_rank;
  s.report_after = report_after;
  s.since_ns = since_ns;
  if (group_rank != 0 || s.thread_started) return;
  try {
    std::thread(watch_loop).detach();
    s.thread_started = true;
  } catch (...) {
    // No thread: no report by itself; `jobkit where` still answers.
  }
}

void watch_leave() noexcept {
  auto& s = *state_;
  const std::lock_guard guard(s.lock);
  s.in_call = false;
}

void forget_watch_in_child() noexcept {
  // The parent's lock may have been held by another thread at the fork: the child starts afresh
  // (the old state is left, not destroyed).
  state_ = new (std::nothrow) watched;
  if (state_ == nullptr) std::abort();
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

std::string report_text(int rank, std::string_view call, std::string_view site, long waited_s,
                        std::string_view target, int status, std::string_view output, std::string_view error) {
  const std::string prefix = fmt::format("[rank: {}] WARNING: ", rank);
  std::string text;
  if (output.empty()) {
    const auto why = status == 127 ? fmt::format("could not start jobkit ({}; the jobkit command: JOBKIT_CLI, else "
                                                 "jobkit on PATH)",
                                                 first_line(error))
                     : status == 124 ? std::string("jobkit where did not answer within 30 s")
                                     : fmt::format("jobkit where {} failed (exit status {}): {}", target, status,
                                                   first_line(error));
    return fmt::format("{}{} at {} has waited {} s; cannot say where every rank is: {}\n", prefix, call, site,
                       waited_s, why);
  }
  text = fmt::format("{}{} at {} has waited {} s; where every rank is (jobkit where {}):\n", prefix, call, site,
                     waited_s, target);
  for (std::size_t start = 0; start < output.size();) {
    auto end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    text += "  ";
    text.append(output.substr(start, end - start));
    text += '\n';
    start = end + 1;
  }
  if (status != 0 && status != 1) {
    text += fmt::format("  (jobkit where: exit status {}: {})\n", status, first_line(error));
  }
  return text;
}

}  // namespace jobkit::where
