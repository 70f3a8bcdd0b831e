#pragma once

// A rendezvous for ranks that are threads of one process (memory_rendezvous.cpp).

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/rendezvous.hpp"

namespace test_support {

/// The values and fences of `size` ranks that share one process.
class memory_rendezvous_store {
 public:
  /// node_of: each rank's node, which makes placement() and await() available; without it only
  /// the fence makes values visible.
  explicit memory_rendezvous_store(int size, std::vector<int> node_of = {})
      : size_(size), node_of_(std::move(node_of)) {}

 private:
  friend class memory_rendezvous;
  int size_;
  std::vector<int> node_of_;
  std::mutex mutex_;
  std::condition_variable fenced_, committed_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::map<std::pair<int, std::string>, std::vector<std::byte>> pending_, visible_;
};

/// One rank's view of a memory_rendezvous_store.
class memory_rendezvous final : public jobkit::detail::rendezvous {
 public:
  memory_rendezvous(std::shared_ptr<memory_rendezvous_store> store, int rank) : store_(std::move(store)), rank_(rank) {}
  void put(const std::string& key, std::span<const std::byte> bytes) override;
  void fence(const jobkit::detail::time_bound& bound, const std::function<void()>& while_waiting = {}) override;
  std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                             const std::function<void()>& while_waiting = {}) override;
  roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) override;
  std::optional<jobkit::detail::job_placement> placement() override;
  void commit() override;
  std::vector<std::byte> await(int rank, const std::string& key, std::chrono::milliseconds timeout,
                               const std::function<void()>& while_waiting = {}) override;
  /// How many values this rank asked for by await, and how many fences it joined (for tests).
  int awaits() const noexcept { return awaits_; }
  int fences() const noexcept { return fences_; }

 private:
  int awaits_ = 0;
  int fences_ = 0;
  std::shared_ptr<memory_rendezvous_store> store_;
  int rank_;
};

}  // namespace test_support
