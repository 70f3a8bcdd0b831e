#pragma once

// The one way the data path opens a TCP connection: begun without waiting (the link options of
// set_link_options: non-blocking, keepalive), so that every attempt is bounded by its caller,
// never by the kernel's SYN retries. The fabric's connector waits for it with a deadline; the
// host watch looks at it on each of its rounds.

#include <chrono>
#include <string>

namespace jobkit::detail {

/// A connection attempt to a numeric address.
struct dial {
  int fd = -1;             ///< the socket, or -1 when the attempt could not begin or failed at once
  bool connected = false;  ///< it completed at once (loopback may)
  int error = 0;           ///< errno when it failed at once (fd -1), 0 otherwise
  std::string why;         ///< the reason, when fd is -1
};

/// Begins a connection to `address` (numeric, IPv4 or IPv6) port `port`.
dial begin_dial(const std::string& address, int port, std::chrono::milliseconds silence_limit);

/// Once a dial's socket is writable (or has an error): 0 when the connection is made, else its errno.
int dial_outcome(int fd);

}  // namespace jobkit::detail
