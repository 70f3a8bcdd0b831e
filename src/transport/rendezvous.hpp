#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace jobkit::detail {

/// How the ranks of a job first find each other: each rank puts values, one fence over all ranks
/// makes them visible, then any rank's value can be read. The PMIx session implements it for
/// launched jobs; memory_rendezvous does for ranks that are threads of one process (unit tests).
/// Data here is visible only to the ranks of the job, so secrets may travel through it.
class rendezvous {
 public:
  virtual ~rendezvous() = default;
  /// Publishes bytes under a key. Keys must be fresh (PMIx 4.2 may return stale values for a
  /// re-put key).
  virtual void put(const std::string& key, std::span<const std::byte> bytes) = 0;
  /// Waits until every rank has fenced (a barrier across all ranks), then every earlier put is
  /// visible. While it waits, `while_waiting` runs every 50 ms; an exception from it ends the wait.
  /// @throws jobkit::timeout_error after timeout
  virtual void fence(std::chrono::milliseconds timeout, const std::function<void()>& while_waiting = {}) = 0;
  /// A key that `rank` put before the last fence. @throws jobkit::error when it is missing,
  /// jobkit::timeout_error when no answer came within timeout (a fence that returned does not
  /// prove that every rank put its keys: Slurm 24.11, see pmix_session::get_all). While it waits,
  /// `while_waiting` runs every 50 ms, as in fence.
  virtual std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                     const std::function<void()>& while_waiting = {}) = 0;
  /// The key of every rank from 0 to world_size - 1, in rank order, each put before the last fence.
  /// This one reads them one by one; the PMIx session asks for all of them at once.
  /// @throws jobkit::error when one is missing, jobkit::timeout_error naming the ranks whose value
  /// did not come within timeout
  virtual std::vector<std::vector<std::byte>> get_all(const std::string& key, int world_size,
                                                      std::chrono::milliseconds timeout);
  /// After a failed fence: which ranks could be asked whether they put `key` (under Slurm 22.05,
  /// only those of this node answer while a fence is pending), and which of them have not.
  struct roll_call {
    std::vector<int> asked, absent;
  };
  virtual roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) = 0;
};

/// The one wait of every rendezvous call that may run a check meanwhile: waits on `signal` (under
/// `lock`) until `done()` or `deadline`, running `while_waiting` (when set) every 50 ms with the
/// lock released. Returns done(). An exception from while_waiting ends the wait and leaves `lock`
/// released.
bool wait_checking(std::unique_lock<std::mutex>& lock, std::condition_variable& signal,
                   std::chrono::steady_clock::time_point deadline, const std::function<bool()>& done,
                   const std::function<void()>& while_waiting);

/// The values and fences of `size` ranks that share one process.
class memory_rendezvous_store {
 public:
  explicit memory_rendezvous_store(int size) : size_(size) {}

 private:
  friend class memory_rendezvous;
  int size_;
  std::mutex mutex_;
  std::condition_variable fenced_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::map<std::pair<int, std::string>, std::vector<std::byte>> pending_, visible_;
};

/// One rank's view of a memory_rendezvous_store.
class memory_rendezvous final : public rendezvous {
 public:
  memory_rendezvous(std::shared_ptr<memory_rendezvous_store> store, int rank) : store_(std::move(store)), rank_(rank) {}
  void put(const std::string& key, std::span<const std::byte> bytes) override;
  void fence(std::chrono::milliseconds timeout, const std::function<void()>& while_waiting = {}) override;
  std::vector<std::byte> get(int rank, const std::string& key, std::chrono::milliseconds timeout,
                             const std::function<void()>& while_waiting = {}) override;
  roll_call ranks_without(const std::string& key, int world_size, std::chrono::milliseconds probe) override;

 private:
  std::shared_ptr<memory_rendezvous_store> store_;
  int rank_;
};

}  // namespace jobkit::detail
