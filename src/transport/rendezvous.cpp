#include "transport/rendezvous.hpp"

#include <algorithm>

#include "jobkit/error.hpp"

namespace jobkit::detail {

bool wait_checking(std::unique_lock<std::mutex>& lock, std::condition_variable& signal,
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

std::vector<std::vector<std::byte>> rendezvous::get_all(const std::string& key, int world_size,
                                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::vector<std::byte>> values;
  values.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    values.push_back(get(r, key, std::max(left, std::chrono::milliseconds(0))));
  }
  return values;
}

void rendezvous::commit() {
  throw error(errc::internal, "this launcher's rendezvous makes values visible only through a fence");
}

std::vector<std::byte> rendezvous::await(int, const std::string&, std::chrono::milliseconds,
                                         const std::function<void()>&) {
  throw error(errc::internal, "this launcher's rendezvous makes values visible only through a fence");
}

}  // namespace jobkit::detail
