#pragma once

// Authenticated connections from this rank to another's listening socket: each of the peer's
// addresses in turn, each attempt bounded by the silence limit (a silent host is a lost node),
// and the handshake of transport/handshake.hpp, in which each side proves it is the step's rank.

#include <chrono>
#include <optional>
#include <string>

#include "core/posix_io.hpp"
#include "jobkit/log.hpp"
#include "network/handshake.hpp"

namespace jobkit::detail {

class connector {
 public:
  connector(int rank, std::chrono::milliseconds handshake_timeout, std::chrono::milliseconds silence_limit,
            const logger& log)
      : rank_(rank), handshake_timeout_(handshake_timeout), silence_limit_(silence_limit), log_(log) {}

  /// A connection to world rank `peer`, listening at `e`, for group `key`, proven both ways. A
  /// refused or reset attempt (a listener without room yet) is tried again after a pause that
  /// doubles, with jitter, at most max_attempts times.
  /// @throws jobkit::error naming the peer and every address tried (timeout_error past the deadline)
  int connect(const endpoint& e, int peer, const std::string& key, steady_clock::time_point deadline);

  static constexpr int max_attempts = 8;

 private:
  /// One attempt at one address; `transient`: refused or reset, so that another may succeed.
  std::optional<int> attempt(const endpoint& e, int peer, const std::string& address, const std::string& key,
                             steady_clock::time_point deadline, std::string& why, bool& transient);

  int rank_;
  std::chrono::milliseconds handshake_timeout_;
  std::chrono::milliseconds silence_limit_;
  const logger& log_;
};

}  // namespace jobkit::detail
