#include "transport/inprocess.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/failure.hpp"

namespace jobkit::detail {
namespace {

struct failure {
  errc code;
  std::string message;
};

[[noreturn]] void raise(const failure& f) { detail::raise(f.code, f.message); }

/// The rendezvous of the ranks of one in-process group. The last rank to arrive runs the
/// exchange for everyone, with rank 0's fold and finish.
class hub {
 public:
  explicit hub(int size) : arrivals_(static_cast<std::size_t>(size)), results_(static_cast<std::size_t>(size)) {}

  std::vector<rank_bytes> run(int rank, const exchange& ex) {
    std::unique_lock lock(mutex_);
    if (failure_) raise(*failure_);
    arrivals_[static_cast<std::size_t>(rank)] = &ex;
    const auto round = round_;
    if (++arrived_ == static_cast<int>(arrivals_.size())) {
      complete();
    } else {
      const auto deadline = std::chrono::steady_clock::now() + ex.timeout;
      if (!done_.wait_until(lock, deadline, [&] { return round_ != round || failure_; })) {
        std::vector<int> missing;
        for (std::size_t r = 0; r < arrivals_.size(); ++r) {
          if (!arrivals_[r]) missing.push_back(static_cast<int>(r));
        }
        failure_ =
            failure{errc::timeout, fmt::format("{} at {} timed out after {} ms on rank {}: rank(s) {} never arrived",
                                               ex.name, ex.site, ex.timeout.count(), rank, fmt::join(missing, ", "))};
        done_.notify_all();
      }
    }
    if (round_ == round) raise(*failure_);
    return std::move(results_[static_cast<std::size_t>(rank)]);
  }

  void check() {
    std::lock_guard lock(mutex_);
    if (failure_) raise(*failure_);
  }

  void abort(const std::string& message) {
    if (arrivals_.size() == 1) return;  // nobody to tell: a single rank stays usable
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = failure{errc::peer_failure, message.empty() ? "aborted (no reason given)" : message};
    done_.notify_all();
  }

 private:
  void complete() {
    const exchange& root = *arrivals_.front();
    for (std::size_t r = 1; r < arrivals_.size(); ++r) {
      const auto& other = *arrivals_[r];
      if (other.name != root.name) {
        failure_ = failure{errc::peer_failure,
                           fmt::format("collectives out of step: rank {} is in {} at {} while rank 0 is in {} at {}", r,
                                       other.name, other.site, root.name, root.site)};
        done_.notify_all();
        return;
      }
    }
    std::vector<rank_bytes> entries;
    for (std::size_t r = 0; r < arrivals_.size(); ++r) {
      if (const auto& mine = arrivals_[r]->mine) {
        entries.push_back(rank_bytes{static_cast<int>(r), {mine->begin(), mine->end()}});
      }
    }
    try {
      if (root.fold && !entries.empty()) entries = {root.fold(entries)};
      if (root.finish) entries = root.finish(entries);
    } catch (const std::exception& e) {
      const auto* known = dynamic_cast<const error*>(&e);
      failure_ = failure{known ? known->code() : errc::peer_failure,
                         fmt::format("{} at {} failed on rank 0: {}", root.name, root.site, e.what())};
      done_.notify_all();
      return;
    } catch (...) {
      failure_ = failure{errc::peer_failure, fmt::format("{} at {} failed on rank 0: an exception that is not a "
                                                         "std::exception",
                                                         root.name, root.site)};
      done_.notify_all();
      return;
    }
    for (auto& result : results_) result.clear();
    for (std::size_t r = 0; r < results_.size(); ++r) {
      for (const auto& entry : entries) {
        if (root.receives(static_cast<int>(r), entry.rank)) results_[r].push_back(entry);
      }
    }
    std::fill(arrivals_.begin(), arrivals_.end(), nullptr);
    arrived_ = 0;
    ++round_;
    done_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<const exchange*> arrivals_;
  std::vector<std::vector<rank_bytes>> results_;
  int arrived_ = 0;
  std::uint64_t round_ = 0;
  std::optional<failure> failure_;
};

class inprocess_transport final : public transport {
 public:
  inprocess_transport(std::shared_ptr<hub> shared, int rank) : hub_(std::move(shared)), rank_(rank) {}
  std::vector<rank_bytes> run(const exchange& ex) override {
    if (!ex.into_buffer()) return hub_->run(rank_, ex);
    run_into_buffer(ex);
    return {};
  }
  void check_peers(const std::string&) override { hub_->check(); }
  void abort(const std::string& message) noexcept override {
    try {
      hub_->abort(message);
    } catch (...) {
    }
  }

 private:
  /// The kinds over buffers as an all_gather of each member's buffer size, and its piece when it
  /// contributes one.
  void run_into_buffer(const exchange& ex) {
    const std::uint64_t size = ex.buffer.size();
    std::vector<std::byte> mine(sizeof size);
    std::memcpy(mine.data(), &size, sizeof size);
    if (const auto piece = ex.contribution_of(rank_)) mine.insert(mine.end(), piece->begin(), piece->end());
    exchange sizes_and_pieces(exchange_kind::all_gather, ex.name, ex.site, ex.timeout);
    sizes_and_pieces.mine = mine;
    const auto entries = hub_->run(rank_, sizes_and_pieces);
    std::uint64_t first = 0;
    std::memcpy(&first, entries.front().bytes.data(), sizeof first);
    for (const auto& e : entries) {
      std::uint64_t theirs = 0;
      std::memcpy(&theirs, e.bytes.data(), sizeof theirs);
      if (theirs != first) {
        throw error(errc::invalid_argument,
                    fmt::format("{} at {}: rank {} passed a buffer of {} bytes but rank {} one of {} bytes", ex.name,
                                ex.site, entries.front().rank, first, e.rank, theirs));
      }
    }
    for (const auto& e : entries) {
      if (!ex.contributes_piece(e.rank) || ex.piece_size() == 0) continue;
      std::memcpy(ex.buffer.data() + ex.piece_offset(e.rank), e.bytes.data() + sizeof size, ex.piece_size());
    }
  }

  std::shared_ptr<hub> hub_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<group_state>> make_inprocess_group_states(int size, const std::string& hostname) {
  auto shared = std::make_shared<hub>(size);
  std::vector<int> ranks(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  std::vector<std::shared_ptr<group_state>> groups;
  for (int r = 0; r < size; ++r) {
    auto state = std::make_shared<group_state>();
    state->link = std::make_unique<inprocess_transport>(shared, r);
    state->world_ranks = ranks;
    state->hosts.assign(static_cast<std::size_t>(size), hostname);
    state->rank = r;
    groups.emplace_back(std::move(state));
  }
  return groups;
}

std::shared_ptr<group_state> make_single_rank_group_state(int world_rank, const std::string& hostname) {
  auto state = std::make_shared<group_state>();
  state->link = std::make_unique<inprocess_transport>(std::make_shared<hub>(1), 0);
  state->world_ranks = {world_rank};
  state->hosts = {hostname};
  state->make_subgroup = [world_rank, hostname](const std::vector<int>&, std::chrono::milliseconds) {
    return make_single_rank_group_state(world_rank, hostname);
  };
  return state;
}

}  // namespace jobkit::detail
