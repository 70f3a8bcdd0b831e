#pragma once

// An exchange that holds its own call, for the tests that drive a medium of the tree protocol
// (and the routes on one node) without a group (test_tree_node, test_tree_links).

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "transport/exchange.hpp"

namespace test_support {

/// Made in place only (returned as a prvalue): its exchange refers to its call.
struct owned_exchange {
  owned_exchange(jobkit::detail::exchange_kind kind, std::string name, std::string site,
                 std::chrono::milliseconds timeout, std::optional<std::span<const std::byte>> mine = std::nullopt)
      : call(kind, std::move(name), std::move(site), timeout), ex(call) {
    ex.mine = mine;
  }
  owned_exchange(const owned_exchange&) = delete;
  owned_exchange& operator=(const owned_exchange&) = delete;
  operator const jobkit::detail::exchange&() const noexcept { return ex; }

  jobkit::detail::collective_call call;
  jobkit::detail::exchange ex;
};

}  // namespace test_support
