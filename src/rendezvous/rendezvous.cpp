#include "rendezvous/rendezvous.hpp"

#include <algorithm>

#include "jobkit/error.hpp"

namespace jobkit::detail {

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
