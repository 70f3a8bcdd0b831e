#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace jobkit::detail {

/// The default deadline: JOBKIT_TIMEOUT seconds, else 1800 s.
/// @throws jobkit::error (invalid_environment) naming the variable when it is malformed
std::chrono::milliseconds default_timeout();

/// How long PMIx_Init may take: JOBKIT_PMIX_INIT_TIMEOUT seconds (parse_timeout's rule), else 60 s.
/// @throws jobkit::error (invalid_environment) naming the variable when it is malformed
std::chrono::milliseconds pmix_init_timeout();

/// How long a TCP link of the data path may go without any answer from its peer's host while
/// this rank waits on it, before the peer's node counts as lost: JOBKIT_LOST_NODE_TIMEOUT seconds
/// (parse_timeout's rule, at least 2), else 8 s. The kernel probes an idle link every second.
/// @throws jobkit::error (invalid_environment) naming the variable when it is malformed or below 2 s
std::chrono::milliseconds lost_node_timeout();
/// lost_node_timeout's rule for one value of the variable (nullopt: unset).
/// @throws jobkit::error (invalid_environment) naming the variable and the value
std::chrono::milliseconds lost_node_limit(std::optional<std::string_view> value);

/// The longest span of time the rules below take, in seconds (31 years): what a wait with no
/// timeout waits (the Python module's torch-like 0 or None where a span must be given).
inline constexpr double longest_seconds = 1e9;
/// The rule of every span of time given as a number of seconds where 0 means none (a margin, an
/// age, a deadline that never comes): 0 or more, finite and at most 1e9 s (31 years), so that its
/// conversion to any std::chrono duration down to nanoseconds holds. The span in milliseconds,
/// rounded up; nullopt when `seconds` breaks the rule.
std::optional<std::chrono::milliseconds> duration_from_seconds(double seconds);
/// What a refused duration_from_seconds is told, after "NAME=VALUE: ".
inline constexpr std::string_view duration_seconds_rule = "must be 0 or more seconds, finite and at most 1e9";
/// The rule of every timeout given as a number of seconds (a variable, a command's --timeout,
/// parse_timeout, the Python module's timeout=): duration_from_seconds's, and more than 0.
/// The timeout in milliseconds, rounded up; nullopt when `seconds` breaks the rule.
std::optional<std::chrono::milliseconds> timeout_from_seconds(double seconds);
/// What a refused timeout_from_seconds is told, after "NAME=VALUE: ".
inline constexpr std::string_view timeout_seconds_rule = "must be more than 0 seconds, finite and at most 1e9";

/// A call's bound: its timeout, which messages name, and the one deadline it gives, taken once
/// when the call began, which every part of the call (the data path's setup, a split's subgroup,
/// the exchange) waits until and never past. Made from a timeout alone, the deadline is now plus it.
struct time_bound {
  template <class Rep, class Period>
  time_bound(std::chrono::duration<Rep, Period> within)  // NOLINT(google-explicit-constructor): a timeout is a bound
      : timeout(within), deadline(std::chrono::steady_clock::now() + timeout) {}
  time_bound(std::chrono::milliseconds within, std::chrono::steady_clock::time_point until)
      : timeout(within), deadline(until) {}
  /// What is left until the deadline, at least 1 ms (a part that takes a timeout then fails at once).
  std::chrono::milliseconds left() const;

  std::chrono::milliseconds timeout;
  std::chrono::steady_clock::time_point deadline;
};

/// The one timeout policy of every blocking call: zero means default_timeout(), a positive
/// value is used as it is, a negative one is refused.
/// @throws jobkit::error (invalid_argument) naming `operation` when timeout is negative
std::chrono::milliseconds timeout_of(std::chrono::milliseconds timeout, std::string_view operation);

}  // namespace jobkit::detail
