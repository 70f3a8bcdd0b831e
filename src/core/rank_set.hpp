#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace jobkit::detail {

/// A set of ranks held as sorted, disjoint, non-adjacent ranges, so that "every rank but one" of a
/// step of 100,000 ranks is two ranges. Written as jobkit writes rank sets: "0-16,18-47", "17".
class rank_set {
 public:
  /// Adds a rank (>= 0); adding one already in the set changes nothing.
  void insert(int rank);
  /// The number of ranks in the set.
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// The smallest rank; the set must not be empty.
  [[nodiscard]] int first() const { return ranges_.front().first; }
  /// Calls f(rank) for every rank, in increasing order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& r : ranges_) {
      for (int rank = r.first;; ++rank) {
        f(rank);
        if (rank == r.last) break;
      }
    }
  }
  /// The number of ranges the set is written with (its memory).
  [[nodiscard]] std::size_t ranges() const noexcept { return ranges_.size(); }
  /// The ranks from 0 to size - 1 that are not in the set, found range by range.
  [[nodiscard]] rank_set complement(int size) const;
  /// "0-16,18-47"; a range of two is "3-4"; the empty set is "".
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const rank_set& a, const rank_set& b) { return a.ranges_ == b.ranges_; }

 private:
  struct range {
    int first;
    int last;
    friend bool operator==(const range& a, const range& b) { return a.first == b.first && a.last == b.last; }
  };
  std::vector<range> ranges_;
  std::size_t count_ = 0;
};

}  // namespace jobkit::detail
