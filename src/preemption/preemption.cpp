#include "jobkit/preemption.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/error.hpp"
#include "jobkit/log.hpp"
#include "log/library_log.hpp"
#include "preemption/slurm_api.hpp"
#include "progress/tracker.hpp"

namespace jobkit {
namespace {

// How many stop signals arrived, and the last one. Lock-free, so the handler may write them.
std::atomic<std::uint64_t> signals_received{0};
std::atomic<int> last_signal{0};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void record_stop_signal(int signal) {
  last_signal.store(signal);
  signals_received.fetch_add(1);
}

/// The handlers installed, per signal: how many guards want it, and the disposition before.
struct installed_handlers {
  std::mutex lock;
  std::map<int, std::pair<int, struct sigaction>> installed;
};

installed_handlers& handlers() {
  static installed_handlers instance;
  return instance;
}

void release_handlers(installed_handlers& h, const std::vector<int>& signals) {
  for (int signal : signals) {
    auto it = h.installed.find(signal);
    if (it == h.installed.end() || --it->second.first > 0) continue;
    ::sigaction(signal, &it->second.second, nullptr);
    h.installed.erase(it);
  }
}

std::string signal_name(int signal) {
  if (const char* abbrev = detail::signal_abbreviation(signal)) return fmt::format("SIG{}", abbrev);
  return fmt::format("signal {}", signal);
}

/// (signal, group rank that received it, time-limit flag, seconds left): the vote of one rank.
using vote = std::tuple<int, int, int, std::int64_t>;

vote combine(const vote& earlier, const vote& later) {
  const auto& [signal, rank, late, left] = earlier;
  if (signal != 0) return {signal, rank, late | std::get<2>(later), left};
  return {std::get<0>(later), std::get<1>(later), late | std::get<2>(later), left};
}

/// Every JOBKIT_STRAGGLER_EVERY-th agreement of a guard over the world: one small all_gather of
/// each rank's median compute time and learned bounds (docs/progress.md, "Stragglers").
void exchange_progress(group& members, long agreement, const std::source_location& site) {
  if (!detail::progress_exchange_due(agreement)) return;
  if (members.size() != detail::identity_in_use().world_size) return;
  const auto shares = members.all_gather(detail::progress_share_of_rank(), {}, site);
  detail::progress_take_shares(shares, members.rank(), agreement);
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
  baseline_ = signals_received.load();
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  std::vector<int> done;
  for (int signal : options_.signals) {
    auto& [users, previous] = h.installed[signal];
    if (users == 0 && ::sigaction(signal, &action, &previous) != 0) {
      const int code = errno;
      h.installed.erase(signal);
      release_handlers(h, done);
      throw error(errc::internal,
                  fmt::format("stop_guard: sigaction({}): {}", signal_name(signal), detail::errno_text(code)), code);
    }
    ++users;
    done.push_back(signal);
  }
}

stop_guard::~stop_guard() {
  auto& h = handlers();
  std::scoped_lock hold(h.lock);
  release_handlers(h, options_.signals);
}

bool stop_guard::stop_requested(std::source_location site) {
  // Each call is a step boundary, the highest kind (docs/progress.md).
  detail::progress_mark(detail::mark_source::stop_agreement);
  if (cause_.reason != stop_reason::none) return true;
  if (calls_++ % options_.check_every != 0) return false;
  exchange_progress(members_, (calls_ - 1) / options_.check_every + 1, site);
  const bool signalled = signals_received.load() != baseline_;
  vote mine{signalled ? last_signal.load() : 0, signalled ? members_.rank() : -1, 0, 0};
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
  // A job without a time limit ends in a year (Slurm's stand-in for INFINITE).
  constexpr std::chrono::seconds no_limit{300L * 24 * 3600};
  const auto job = detail::slurm_job_id();
  // First the end time Slurm put in the step's environment: no libslurm, no slurmctld, a snapshot
  // from the step's launch.
  if (const auto end = detail::slurm_job_end_time()) {
    const auto left = std::chrono::floor<std::chrono::seconds>(*end - std::chrono::system_clock::now());
    if (left >= no_limit) return std::nullopt;
    return std::max(std::chrono::seconds(0), left);
  }
  if (!job) return std::nullopt;
  using clock = std::chrono::steady_clock;
  struct cache {
    std::mutex lock;
    std::optional<clock::time_point> asked;
    std::optional<clock::time_point> end;
    /// The library (JOBKIT_LIBSLURM) and configuration (SLURM_CONF) of a libslurm call that gave
    /// no answer: not asked again while they stay the same.
    std::optional<std::string> failed_with;
  };
  static cache known;
  const auto setting = [](const char* name) {
    const char* value = std::getenv(name);
    return value ? fmt::format("{}='{}'", name, value) : fmt::format("{} unset", name);
  };
  const auto libslurm_setting = setting("JOBKIT_LIBSLURM") + ", " + setting("SLURM_CONF");
  std::scoped_lock hold(known.lock);
  if (known.failed_with == libslurm_setting) return std::nullopt;
  const auto now = clock::now();
  if (!known.asked || now - *known.asked >= max_age || known.failed_with) {
    known.asked = now;
    known.end.reset();
    known.failed_with.reset();
    const auto answer = detail::slurm_remaining_seconds(*job);
    if (!answer.answered) {
      known.failed_with = libslurm_setting;
      detail::library_log(log_level::warning,
                          "time_left: the time left of job {} is unknown, and libslurm is not asked again with {}: {}",
                          *job, libslurm_setting, answer.message);
    } else if (answer.value >= 0 && std::chrono::seconds(answer.value) < no_limit) {
      known.end = now + std::chrono::seconds(answer.value);
    }
  }
  if (!known.end) return std::nullopt;
  return std::max(std::chrono::seconds(0), std::chrono::duration_cast<std::chrono::seconds>(*known.end - now));
}

void requeue() {
  const auto job = detail::slurm_job_id();
  if (!job) throw error(errc::invalid_environment, "requeue: not in a Slurm job (SLURM_JOB_ID is not set)");
  const auto answer = detail::slurm_requeue(*job);
  if (!answer.answered) throw error(errc::scheduler, fmt::format("requeue of job {}: {}", *job, answer.message));
  if (answer.value != 0) {
    throw error(errc::scheduler,
                fmt::format("requeue of job {}: Slurm refused: {} (a job submitted with --no-requeue, an "
                            "interactive allocation and a cluster with JobRequeue=0 cannot be requeued)",
                            *job, answer.message),
                static_cast<int>(answer.value));
  }
}

}  // namespace jobkit
