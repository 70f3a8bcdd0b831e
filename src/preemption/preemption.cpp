#include "jobkit/preemption.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "preemption/slurm_api.hpp"

namespace jobkit {
namespace {

// The first stop signal not yet reported to an agreement. Lock-free, so the handler may write it.
std::atomic<int> pending{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_stop_signal(int signal) {
  int none = 0;
  pending.compare_exchange_strong(none, signal);
}

struct installed_handlers {
  std::mutex lock;
  bool active = false;
  std::map<int, struct sigaction> previous;
};

installed_handlers& handlers() {
  static installed_handlers instance;
  return instance;
}

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return fmt::format("SIG{}", abbrev);
  return fmt::format("signal {}", signal);
}

/// (signal, group rank that received it, time-limit flag, seconds left): the vote of one rank.
using vote = std::tuple<int, int, int, std::int64_t>;

vote combine(const vote& earlier, const vote& later) {
  const auto& [signal, rank, late, left] = earlier;
  if (signal != 0) return {signal, rank, late | std::get<2>(later), left};
  return {std::get<0>(later), std::get<1>(later), late | std::get<2>(later), left};
}

}  // namespace

std::string_view to_string(stop_reason reason) noexcept {
  switch (reason) {
    case stop_reason::none: return "none";
    case stop_reason::signal: return "signal";
    case stop_reason::time_limit: return "time_limit";
  }
  return "unknown";
}

std::string to_string(const stop_cause& cause) {
  switch (cause.reason) {
    case stop_reason::none: return "none";
    case stop_reason::signal: return fmt::format("{} on rank {}", signal_name(cause.signal), cause.rank);
    case stop_reason::time_limit: return fmt::format("{} s left, below the margin", cause.time_left.count());
  }
  return "unknown";
}

stop_guard::stop_guard(stop_options options, group members) : options_(std::move(options)), members_(members) {
  if (options_.check_every < 1) {
    throw error(errc::invalid_argument,
                fmt::format("stop_options: check_every={} must be at least 1", options_.check_every));
  }
  if (options_.time_margin.count() < 0) {
    throw error(errc::invalid_argument,
                fmt::format("stop_options: time_margin={} s is negative", options_.time_margin.count()));
  }
  detail::timeout_of(options_.timeout, "stop_guard");
  for (int signal : options_.signals) {
    if (signal <= 0 || signal >= NSIG || signal == SIGKILL || signal == SIGSTOP) {
      throw error(errc::invalid_argument, fmt::format("stop_options: signal {} cannot be caught", signal));
    }
  }
  auto& h = handlers();
  std::scoped_lock hold(h.lock);
  if (h.active) throw error(errc::invalid_argument, "stop_guard: another stop_guard exists in this process");
  struct sigaction action{};
  action.sa_handler = record_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : options_.signals) {
    struct sigaction old{};
    if (::sigaction(signal, &action, &old) != 0) {
      const int code = errno;
      for (auto& [installed, previous] : h.previous) ::sigaction(installed, &previous, nullptr);
      h.previous.clear();
      throw error(errc::internal,
                  fmt::format("stop_guard: sigaction({}): {}", signal_name(signal), detail::errno_text(code)), code);
    }
    h.previous.emplace(signal, old);
  }
  h.active = true;
}

stop_guard::~stop_guard() {
  auto& h = handlers();
  std::scoped_lock hold(h.lock);
  for (auto& [signal, previous] : h.previous) ::sigaction(signal, &previous, nullptr);
  h.previous.clear();
  h.active = false;
}

int stop_guard::pending_signal() noexcept { return pending.load(); }

bool stop_guard::stop_requested(std::source_location site) {
  if (cause_.reason != stop_reason::none) return true;
  if (calls_++ % options_.check_every != 0) return false;
  vote mine{pending.exchange(0), members_.rank(), 0, 0};
  if (std::get<0>(mine) == 0) std::get<1>(mine) = -1;
  if (members_.rank() == 0 && options_.time_margin.count() > 0) {
    if (const auto left = time_left()) {
      std::get<3>(mine) = static_cast<std::int64_t>(left->count());
      std::get<2>(mine) = *left < options_.time_margin ? 1 : 0;
    }
  }
  const auto agreed = members_.all_reduce(mine, combine, {options_.timeout}, site);
  const auto& [signal, rank, late, left] = agreed;
  if (signal != 0) {
    cause_ = {stop_reason::signal, signal, rank, {}};
  } else if (late != 0) {
    cause_ = {stop_reason::time_limit, 0, -1, std::chrono::seconds(left)};
  }
  return cause_.reason != stop_reason::none;
}

bool stop_requested(std::source_location site) {
  static stop_guard guard;
  return guard.stop_requested(site);
}

std::optional<std::chrono::seconds> time_left(std::chrono::seconds max_age) {
  using clock = std::chrono::steady_clock;
  struct cache {
    std::mutex lock;
    std::optional<clock::time_point> asked;
    std::optional<clock::time_point> end;
  };
  static cache known;
  const auto job = detail::slurm_job_id();
  if (!job) return std::nullopt;
  std::scoped_lock hold(known.lock);
  const auto now = clock::now();
  if (!known.asked || now - *known.asked >= max_age) {
    auto& slurm = detail::slurm_api::get();
    if (!slurm.available()) return std::nullopt;
    known.asked = now;
    known.end.reset();
    // A job without a time limit ends in a year (Slurm's stand-in for INFINITE).
    constexpr long no_limit = 300L * 24 * 3600;
    if (const auto left = slurm.remaining_seconds(*job); left && *left < no_limit) {
      known.end = now + std::chrono::seconds(*left);
    }
  }
  if (!known.end) return std::nullopt;
  return std::max(std::chrono::seconds(0), std::chrono::duration_cast<std::chrono::seconds>(*known.end - now));
}

void requeue() {
  const auto job = detail::slurm_job_id();
  if (!job) throw error(errc::invalid_environment, "requeue: not in a Slurm job (SLURM_JOB_ID is not set)");
  auto& slurm = detail::slurm_api::get();
  if (!slurm.available()) {
    throw error(errc::scheduler, fmt::format("requeue of job {}: {}", *job, slurm.unavailable_reason()));
  }
  std::string message;
  if (const int code = slurm.requeue(*job, message); code != 0) {
    throw error(errc::scheduler,
                fmt::format("requeue of job {}: Slurm refused: {} (a job submitted with --no-requeue, an "
                            "interactive allocation and a cluster with JobRequeue=0 cannot be requeued)",
                            *job, message),
                code);
  }
}

}  // namespace jobkit
