#include "core/timeout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/environment.hpp"
#include "jobkit/error.hpp"
#include "jobkit/timeout.hpp"

namespace jobkit {

std::chrono::milliseconds parse_timeout(std::string_view name, std::string_view value) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text.c_str(), &end);
  const auto timeout = detail::timeout_from_seconds(seconds);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !timeout) {
    throw error(errc::invalid_argument,
                fmt::format("{}='{}' is not a positive number of seconds (e.g. 300 or 2.5)", name, value));
  }
  return *timeout;
}

namespace detail {

namespace {

/// A deadline from a variable of seconds: `fallback` when unset, parse_timeout's rule otherwise.
std::chrono::milliseconds timeout_variable(std::string_view name, std::chrono::milliseconds fallback) {
  const auto value = process_environment().get(name);
  if (!value) return fallback;
  try {
    return parse_timeout(name, *value);
  } catch (const error& e) {
    throw error(errc::invalid_environment, e.what());
  }
}

}  // namespace

std::chrono::milliseconds default_timeout() {
  static const auto timeout = timeout_variable("JOBKIT_TIMEOUT", std::chrono::seconds(1800));
  return timeout;
}

std::chrono::milliseconds pmix_init_timeout() {
  return timeout_variable("JOBKIT_PMIX_INIT_TIMEOUT", std::chrono::seconds(60));
}

std::chrono::milliseconds lost_node_limit(std::optional<std::string_view> value) {
  constexpr std::string_view name = "JOBKIT_LOST_NODE_TIMEOUT";
  if (!value) return std::chrono::seconds(8);
  std::chrono::milliseconds limit{};
  try {
    limit = parse_timeout(name, *value);
  } catch (const error& e) {
    throw error(errc::invalid_environment, e.what());
  }
  // The kernel probes an idle link after a second of quiet: a healthy link is quiet for a second
  // and a round trip, so silence can be told from it only past that.
  if (limit < std::chrono::seconds(2)) {
    throw error(errc::invalid_environment,
                fmt::format("{}='{}' is below 2 seconds: the kernel probes an idle link once a second, so a healthy "
                            "link is quiet for up to a second",
                            name, *value));
  }
  return limit;
}

std::chrono::milliseconds lost_node_timeout() {
  static const auto limit = lost_node_limit(process_environment().get("JOBKIT_LOST_NODE_TIMEOUT"));
  return limit;
}

std::optional<std::chrono::milliseconds> duration_from_seconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > longest_seconds) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

std::optional<std::chrono::milliseconds> timeout_from_seconds(double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return duration_from_seconds(seconds);
}

std::chrono::milliseconds timeout_of(std::chrono::milliseconds timeout, std::string_view operation) {
  if (timeout.count() < 0) {
    throw error(errc::invalid_argument, fmt::format("{}: timeout={} ms is negative", operation, timeout.count()));
  }
  return timeout.count() == 0 ? default_timeout() : timeout;
}

std::chrono::milliseconds time_bound::left() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace detail
}  // namespace jobkit
