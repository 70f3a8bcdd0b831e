// A rendezvous for ranks that are threads of one process (test_transport's N threads as N
// ranks): a test double of the PMIx and PMI-2 sessions, which implement it for launched jobs.
#include "memory_rendezvous.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/bounded_call.hpp"
#include "jobkit/error.hpp"

namespace test_support {

void memory_rendezvous::put(const std::string& key, std::span<const std::byte> bytes) {
  std::lock_guard lock(store_->mutex_);
  store_->pending_[{rank_, key}].assign(bytes.begin(), bytes.end());
}

void memory_rendezvous::fence(const jobkit::detail::time_bound& bound, const std::function<void()>& while_waiting) {
  ++fences_;
  auto& s = *store_;
  const auto deadline = bound.deadline;
  std::unique_lock lock(s.mutex_);
  const auto generation = s.generation_;
  if (++s.arrived_ == s.size_) {
    s.arrived_ = 0;
    ++s.generation_;
    for (auto& [key, value] : s.pending_) s.visible_[key] = std::move(value);
    s.pending_.clear();
    s.fenced_.notify_all();
    return;
  }
  bool fenced = false;
  try {
    fenced = jobkit::detail::checked_wait(
        lock, s.fenced_, deadline, [&] { return s.generation_ != generation; }, while_waiting);
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    --s.arrived_;
    throw;
  }
  if (!fenced) {
    --s.arrived_;
    throw jobkit::timeout_error(
        fmt::format("rank {}: the rendezvous fence timed out after {} ms", rank_, bound.timeout.count()));
  }
}

std::vector<std::byte> memory_rendezvous::get(int rank, const std::string& key, std::chrono::milliseconds,
                                              const std::function<void()>&) {
  std::lock_guard lock(store_->mutex_);
  const auto it = store_->visible_.find({rank, key});
  if (it == store_->visible_.end()) {
    throw jobkit::error(jobkit::errc::internal,
                        fmt::format("rank {} read key '{}' of rank {}, which is not there", rank_, key, rank));
  }
  return it->second;
}

jobkit::detail::rendezvous::roll_call memory_rendezvous::ranks_without(const std::string& key, int world_size,
                                                                       std::chrono::milliseconds) {
  std::lock_guard lock(store_->mutex_);
  roll_call call;
  for (int r = 0; r < world_size; ++r) {
    call.asked.push_back(r);
    if (!store_->pending_.count({r, key}) && !store_->visible_.count({r, key})) call.absent.push_back(r);
  }
  return call;
}

std::optional<jobkit::detail::job_placement> memory_rendezvous::placement() {
  const auto& node_of = store_->node_of_;
  if (node_of.empty()) return std::nullopt;
  jobkit::detail::job_placement p;
  p.node_of = node_of;
  std::map<int, int> count;
  for (const int n : node_of) p.local_rank_of.push_back(count[n]++);
  const int nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  for (int n = 0; n < nodes; ++n) p.nodes.push_back(fmt::format("n{}", n));
  return p;
}

void memory_rendezvous::commit() {
  auto& s = *store_;
  {
    std::lock_guard lock(s.mutex_);
    for (auto it = s.pending_.begin(); it != s.pending_.end();) {
      if (it->first.first != rank_) {
        ++it;
        continue;
      }
      s.visible_[it->first] = std::move(it->second);
      it = s.pending_.erase(it);
    }
  }
  s.committed_.notify_all();
}

std::vector<std::byte> memory_rendezvous::await(int rank, const std::string& key, std::chrono::milliseconds timeout,
                                                const std::function<void()>& while_waiting) {
  ++awaits_;
  auto& s = *store_;
  std::unique_lock lock(s.mutex_);
  const auto there = [&] { return s.visible_.count({rank, key}) != 0; };
  if (!jobkit::detail::checked_wait(lock, s.committed_, std::chrono::steady_clock::now() + timeout, there,
                                    while_waiting)) {
    throw jobkit::timeout_error(
        fmt::format("rank {}: key '{}' of rank {} was not committed within {} ms", rank_, key, rank, timeout.count()));
  }
  return s.visible_.at({rank, key});
}

}  // namespace test_support
