#include "core/rank_set.hpp"

#include <algorithm>

namespace jobkit::detail {

void rank_set::insert(int rank) {
  // The first range that ends at or after rank - 1 is the only one rank can join.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), rank - 1,
                             [](const range& r, int value) { return r.last < value; });
  if (it != ranges_.end() && it->first <= rank && rank <= it->last) return;
  ++count_;
  if (it != ranges_.end() && it->last == rank - 1) {
    it->last = rank;
    const auto next = it + 1;
    if (next != ranges_.end() && next->first == rank + 1) {
      it->last = next->last;
      ranges_.erase(next);
    }
    return;
  }
  if (it != ranges_.end() && it->first == rank + 1) {
    it->first = rank;
    return;
  }
  ranges_.insert(it, range{rank, rank});
}

rank_set rank_set::complement(int size) const {
  rank_set missing;
  int next = 0;  // the first rank not yet accounted for
  auto add = [&](int first, int last) {
    if (first > last) return;
    missing.ranges_.push_back(range{first, last});
    missing.count_ += static_cast<std::size_t>(last - first) + 1;
  };
  for (const auto& r : ranges_) {
    if (r.first >= size) break;
    add(next, r.first - 1);
    next = r.last + 1;
  }
  add(next, size - 1);
  return missing;
}

std::string rank_set::to_string() const {
  std::string text;
  for (const auto& r : ranges_) {
    if (!text.empty()) text += ',';
    text += std::to_string(r.first);
    if (r.last != r.first) text += '-' + std::to_string(r.last);
  }
  return text;
}

}  // namespace jobkit::detail
