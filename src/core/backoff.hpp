#pragma once

// The pauses between tries of something that may succeed later (a file another node creates, a
// value not put yet, a listener without room, a child not ended yet): doubling from a first
// pause up to a cap, with jitter where many ranks retry at once.

#include <chrono>

namespace jobkit::detail {

/// Capped doubling back-off:
///   backoff pauses(std::chrono::milliseconds(5), std::chrono::milliseconds(100));
///   while (!ready()) std::this_thread::sleep_for(pauses.next());
class backoff {
 public:
  using duration = std::chrono::microseconds;
  /// A factor of each pause, so that ranks retrying at once spread out.
  enum class jitter { none, half_to_one_and_a_half };

  backoff(duration first, duration cap, jitter spread = jitter::none) noexcept
      : pause_(first), cap_(cap), spread_(spread) {}

  /// The pause to take now: first, then each one doubled, at most cap; with
  /// jitter::half_to_one_and_a_half, times a random factor in [0.5, 1.5) (the doubling and the cap
  /// apply before it).
  duration next();

 private:
  duration pause_, cap_;
  jitter spread_;
};

/// A random factor in [0.5, 1.5) (a per-thread generator seeded from std::random_device).
double jitter_factor();

/// The one pause before a retry: sleeps `pause`, cut short at `deadline` (not at all once it has
/// passed).
void pause_until(backoff::duration pause, std::chrono::steady_clock::time_point deadline);
/// The same, for a wait that a signal may abandon: in slices of poll(2) of 250 ms at most, each
/// followed by interruption_point() (a signal ends a slice early), which may throw.
void interruptible_pause_until(backoff::duration pause, std::chrono::steady_clock::time_point deadline);

}  // namespace jobkit::detail
