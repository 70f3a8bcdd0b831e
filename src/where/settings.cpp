#include "where/settings.hpp"

#include <signal.h>

#include <algorithm>
#include <string>

#include "core/parse.hpp"
#include "jobkit/error.hpp"
#include "jobkit/timeout.hpp"

namespace jobkit::where {
namespace {

std::optional<std::string> report_after_value() {
  static const auto value = detail::process_environment().get("JOBKIT_WHERE_REPORT_AFTER");
  return value;
}

}  // namespace

bool enabled_in(const detail::environment& env) {
  const auto where = env.get("JOBKIT_WHERE");
  return !(where && *where == "0") && env.has("SLURM_JOB_ID") && env.has("SLURM_STEP_ID");
}

bool enabled() noexcept {
  static const bool on = [] {
    try {
      return enabled_in(detail::process_environment());
    } catch (...) {  // no memory to read the environment: off
      return false;
    }
  }();
  return on;
}

int stack_signal_in(const detail::environment& env) {
  if (const auto value = env.get("JOBKIT_WHERE_SIGNAL")) {
    auto rest = std::string_view(*value);
    if (const auto n = detail::take_decimal(rest); n && rest.empty() && *n >= 1 && *n <= SIGRTMAX) return *n;
  }
  return SIGRTMIN + 6;
}

int stack_signal() { return stack_signal_in(detail::process_environment()); }

std::chrono::milliseconds report_after_rule(std::optional<std::string_view> value, std::chrono::milliseconds deadline) {
  std::chrono::milliseconds after{};
  if (!value) {
    after = std::max<std::chrono::milliseconds>(deadline / 4, std::chrono::seconds(10));
  } else if (*value == "0") {
    return std::chrono::milliseconds(0);
  } else {
    try {
      after = parse_timeout("JOBKIT_WHERE_REPORT_AFTER", *value);
    } catch (const error& e) {
      throw error(errc::invalid_environment, std::string(e.what()) + " (0: never)");
    }
  }
  return after < deadline ? after : std::chrono::milliseconds(0);
}

std::chrono::milliseconds report_after(std::chrono::milliseconds deadline) {
  return report_after_rule(report_after_value(), deadline);
}

bool reports() {
  using namespace std::chrono;
  const bool never = report_after_rule(report_after_value(), duration_cast<milliseconds>(hours(24 * 365 * 1000))) ==
                     milliseconds(0);  // parsed first: a malformed value fails where on or off
  return !never && enabled();
}

}  // namespace jobkit::where
