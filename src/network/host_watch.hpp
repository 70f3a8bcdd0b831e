#pragma once

// While a rank waits for connections (a group's creation), tells a rank whose node stopped
// answering from one that is only late: one TCP connection to each missing rank's listening
// port, opened after a second of waiting and probed by the kernel once a second
// (set_link_options). The peer's kernel answers it even while the peer computes elsewhere; when
// the peer's process accepts it, it drops it as a connection that never proved membership.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/posix_io.hpp"
#include "network/handshake.hpp"

namespace jobkit::detail {

class host_watch {
 public:
  using time_point = steady_clock::time_point;

  /// A rank whose node is lost (silent or unreachable) or whose process is gone (its node
  /// refuses connections to its port).
  struct verdict {
    int peer;
    std::string why;  // "its node c3 answered no connection for 8 s", ...
  };

  /// How long a rank may be missing before it is watched: one that connects within it needs no watch.
  static constexpr std::chrono::seconds grace{1};

  /// endpoint_of(rank): its endpoint, or nullptr when not known (the rank is not watched).
  host_watch(std::function<const endpoint*(int)> endpoint_of, std::chrono::milliseconds limit, time_point start)
      : endpoint_of_(std::move(endpoint_of)), limit_(limit), start_(start) {}
  ~host_watch();
  host_watch(const host_watch&) = delete;
  host_watch& operator=(const host_watch&) = delete;

  /// Watches the ranks in `missing` (world ranks), stops watching the others, and returns the
  /// first verdict. Never blocks.
  std::optional<verdict> check(const std::vector<int>& missing, time_point now);

 private:
  struct watch {
    int fd = -1;
    bool connected = false;
    time_point since{};  // when the connection attempt began
    std::size_t address = 0;
  };
  void close(watch& w) noexcept;
  std::optional<verdict> advance(int peer, watch& w, time_point now);

  std::function<const endpoint*(int)> endpoint_of_;
  std::chrono::milliseconds limit_;
  time_point start_;
  std::map<int, watch> watches_;
  std::map<int, time_point> retry_at_;
};

}  // namespace jobkit::detail
