#include "core/bounded_call.hpp"

#include <algorithm>

namespace jobkit::detail {

bool checked_wait(std::unique_lock<std::mutex>& lock, std::condition_variable& signal,
                  std::chrono::steady_clock::time_point deadline, const std::function<bool()>& done,
                  const std::function<void()>& while_waiting) {
  constexpr auto look_every = std::chrono::milliseconds(50);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    const auto until = while_waiting ? std::min(deadline, std::chrono::steady_clock::now() + look_every) : deadline;
    signal.wait_until(lock, until, done);
    if (!done() && while_waiting) {
      lock.unlock();
      while_waiting();
      lock.lock();
    }
  }
  return done();
}

}  // namespace jobkit::detail
