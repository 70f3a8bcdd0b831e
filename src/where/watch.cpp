#include "where/watch.hpp"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/posix_io.hpp"
#include "where/record.hpp"

extern char** environ;

namespace jobkit::where {
namespace {

// The call in progress, as the watching thread sees it: set by group rank 0's calls only, a few
// relaxed stores each (the call's name and site are read back from the record when it reports).
std::atomic<bool> in_call_{false};
std::atomic<std::uint64_t> number_{0};  // watched calls entered
std::atomic<std::int64_t> since_ns_{0};
std::atomic<std::int64_t> report_after_ms_{0};
std::atomic<bool> thread_started_{false};

std::int64_t realtime_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

void report(long waited_s, std::int64_t since_ns) {
  // The call's name and site, from this process's own record (a mapping of its own: no lock
  // shared with the call).
  const auto record = read_record(find_files(::getpid()).record);
  if (!record || !record->in_call || record->since_ns != since_ns) return;  // it ended meanwhile
  report_call(record->rank, record->call, record->site, waited_s);
}

void watch_loop() {
  std::uint64_t reported = 0;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const auto number = number_.load(std::memory_order_acquire);
    if (!in_call_.load(std::memory_order_relaxed) || number == reported) continue;
    const auto since = since_ns_.load(std::memory_order_relaxed);
    const auto waited = std::chrono::nanoseconds(realtime_ns() - since);
    if (waited < std::chrono::milliseconds(report_after_ms_.load(std::memory_order_relaxed))) continue;
    if (number_.load(std::memory_order_acquire) != number) continue;  // another call began meanwhile
    reported = number;
    try {
      report(static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()), since);
    } catch (...) {
      // Out of memory while reporting: the report is lost, the step goes on.
    }
  }
}

}  // namespace

void watch_enter(int group_rank, std::chrono::milliseconds report_after, std::int64_t since_ns) noexcept {
  if (report_after.count() <= 0 || group_rank != 0) return;
  since_ns_.store(since_ns, std::memory_order_relaxed);
  report_after_ms_.store(report_after.count(), std::memory_order_relaxed);
  in_call_.store(true, std::memory_order_relaxed);
  number_.fetch_add(1, std::memory_order_release);
  if (thread_started_.load(std::memory_order_relaxed) || thread_started_.exchange(true)) return;
  try {
    std::thread(watch_loop).detach();
  } catch (...) {
    // No thread: no report by itself; `jobkit where` still answers.
  }
}

void watch_leave() noexcept {
  if (in_call_.load(std::memory_order_relaxed)) in_call_.store(false, std::memory_order_relaxed);
}

void forget_watch_in_child() noexcept {
  in_call_.store(false);
  thread_started_.store(false);
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
