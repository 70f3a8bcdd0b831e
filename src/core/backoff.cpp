#include "core/backoff.hpp"

#include <algorithm>
#include <cmath>
#include <random>

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

}  // namespace jobkit::detail
