#include "core/backoff.hpp"

#include <poll.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "core/embedder.hpp"
#include "core/posix_io.hpp"

namespace jobkit::detail {

double jitter_factor() {
  thread_local std::mt19937 generator{std::random_device{}()};
  // Below 1.5 even where generate_canonical rounds up to the top of the range.
  return std::min(std::uniform_real_distribution<double>(0.5, 1.5)(generator), std::nextafter(1.5, 0.0));
}

backoff::duration backoff::next() {
  const duration pause = std::min(pause_, cap_);
  pause_ = std::min(pause_ * 2, cap_);
  if (spread_ == jitter::none) return pause;
  return duration(static_cast<duration::rep>(jitter_factor() * static_cast<double>(pause.count())));
}

void pause_until(backoff::duration pause, std::chrono::steady_clock::time_point deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now < deadline) std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
}

void interruptible_pause_until(backoff::duration pause, std::chrono::steady_clock::time_point deadline) {
  const auto until =
      std::min<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now() + pause, deadline);
  while (std::chrono::steady_clock::now() < until) {
    ::poll(nullptr, 0, std::min(remaining_ms(until), 250));  // a slice (docs of interruption_point)
    interruption_point();
  }
}

}  // namespace jobkit::detail
