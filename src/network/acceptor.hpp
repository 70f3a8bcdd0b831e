#pragma once

// This rank's listening socket and the handshakes of the connections that arrive on it: each
// must prove within the handshake timeout that it comes from a rank of the step (see
// transport/handshake.hpp); strangers (port scanners, other users' processes, a rank of another
// step, a host watch) are dropped, counted and reported at DEBUG with their address, while the
// real ranks get in. Proven connections wait, by group and rank, until their group takes them.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/posix_io.hpp"
#include "jobkit/log.hpp"
#include "network/handshake.hpp"

namespace jobkit::detail {

class acceptor {
 public:
  /// Listens on loopback when `addresses` is 127.0.0.1 alone, else on every address (IPv6 too
  /// when one of them is). @throws jobkit::error when the socket cannot listen
  acceptor(const std::vector<std::string>& addresses, const secret_bytes& secret, int world_size,
           std::chrono::milliseconds handshake_timeout, std::chrono::milliseconds silence_limit, const logger& log);
  ~acceptor();
  acceptor(const acceptor&) = delete;
  acceptor& operator=(const acceptor&) = delete;

  int port() const noexcept { return port_; }
  /// Connections dropped because they did not prove membership.
  std::uint64_t dropped() const noexcept { return dropped_; }

  /// The proven connection of world rank `rank` for group `key`, now the caller's; -1 when none came yet.
  int take(const std::string& key, int rank);
  /// The groups for which `rank`'s proven connections wait (not yet taken).
  std::vector<std::string> waiting_groups(int rank) const;
  /// Accepts and advances handshakes until `until` or until something arrived (then earlier).
  void wait(steady_clock::time_point until);

 private:
  struct pending;
  void take_new_connections();
  /// Reads what a pending connection sent; true when it is done (admitted or dropped).
  bool advance(pending& p);
  void drop(pending& p, const std::string& why);

  const secret_bytes& secret_;
  int world_size_;
  std::chrono::milliseconds handshake_timeout_;
  std::chrono::milliseconds silence_limit_;
  const logger& log_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<pending> pending_;
  std::uint64_t dropped_ = 0;
  bool paused_ = false;  // out of file descriptors: accept again at resume_
  steady_clock::time_point resume_{};
  std::map<std::pair<std::string, int>, int> waiting_;  // (group key, world rank) -> socket
};

}  // namespace jobkit::detail
