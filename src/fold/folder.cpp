#include "fold/folder.hpp"

#include <algorithm>

#include "fold/labels.hpp"

namespace jobkit::fold {
namespace {

constexpr std::size_t block_overhead = 400;  // bytes counted per held block or loose line: its bookkeeping
constexpr std::size_t longest_line = std::size_t{1} << 20;  // bytes; a longer line is cut, its label kept
constexpr std::string_view traceback_start = "Traceback (most recent call last):";

bool indented(std::string_view text) { return !text.empty() && (text.front() == ' ' || text.front() == '\t'); }

}  // namespace

folder::folder(options opts) : options_(opts) {}

void folder::add(std::string_view bytes, clock::time_point now) {
  while (!bytes.empty()) {
    if (just_cut_) {
      // A line cut at longest_line goes on under its label; a newline right at the cut ends nothing.
      just_cut_ = false;
      if (bytes.front() == '\n') {
        partial_.clear();
        bytes.remove_prefix(1);
        continue;
      }
    }
    const auto end = bytes.find('\n');
    const auto piece = bytes.substr(0, end);
    const auto room = longest_line - partial_.size();
    if (piece.size() >= room) {
      partial_.append(piece.substr(0, room));
      bytes.remove_prefix(room);
      line(partial_, now);
      const auto labelled = parse_label(partial_, options_.srun_tasks);
      partial_.resize(labelled ? static_cast<std::size_t>(labelled->text.data() - partial_.data()) : 0);
      just_cut_ = true;
      continue;
    }
    if (end == std::string_view::npos) {
      partial_.append(piece);
      break;
    }
    if (partial_.empty()) {
      line(piece, now);
    } else {
      partial_.append(piece);
      line(partial_, now);
      partial_.clear();
    }
    bytes.remove_prefix(end + 1);
  }
  tick(now);
}

void folder::line(std::string_view text, clock::time_point now) {
  const auto labelled = parse_label(text, options_.srun_tasks);
  const auto number = lines_++;
  if (!labelled) {
    held_bytes_ += text.size() + block_overhead;
    loose_.push_back({std::string(text), now, number});
  } else {
    rank_line(labelled->rank, labelled->text, number, now);
  }
  // The limit holds at every line, not only at the end of a read: a read brings many lines.
  if (held_bytes_ > options_.held_limit) write_due(now, false);
}

void folder::rank_line(int rank, std::string_view body, std::uint64_t number, clock::time_point now) {
  largest_rank_ = std::max(largest_rank_, rank);
  auto& state = ranks_[rank];
  if (state.open_lines > 0) {
    if (state.traceback || indented(body)) {
      state.open += '\n';
      state.open.append(body);
      held_bytes_ += 1 + body.size();
      ++state.open_lines;
      state.open_last = now;
      // A traceback ends at its first line that is not indented: its exception.
      if ((state.traceback && !indented(body)) || state.open_lines >= options_.block_lines) close(rank, state);
      return;
    }
    close(rank, state);
  }
  state.open.assign(body);
  held_bytes_ += body.size() + block_overhead;
  state.open_lines = 1;
  state.traceback = body == traceback_start;
  state.open_first = state.open_last = now;
  state.open_first_line = number;
  if (options_.block_lines <= 1) close(rank, state);
}

void folder::close(int rank, rank_state& state) {
  block closed{nullptr, state.open_first, state.open_first_line, {}, 0};
  held_bytes_ -= state.open.size() + block_overhead;
  std::string key;
  if (options_.numbers) {
    auto split = split_numbers(state.open);
    key = std::move(split.shape);
    closed.numbers = std::move(split.numbers);
  } else {
    key = std::move(state.open);
  }
  closed.held = key.size() + block_overhead;
  for (const auto& n : closed.numbers) closed.held += n.size();
  held_bytes_ += closed.held;
  auto& text = *texts_.try_emplace(std::move(key)).first;
  ++text.second.occurrences;
  index(text);  // a head of other ranks is no longer free
  closed.text = &text;
  state.open.clear();
  state.open_lines = 0;
  state.traceback = false;
  state.queue.push_back(std::move(closed));
  if (state.queue.size() == 1) make_head(rank, state.queue.front());
}

void folder::make_head(int rank, const block& head) {
  auto& text = head.text->second;
  if (text.heads.empty() || head.first_line < text.first_line) {
    text.first = head.first;
    text.first_line = head.first_line;
  }
  text.heads.insert(rank);
  if (options_.numbers) widen(text.ranges, head.numbers);
  if (text.heads.size() == static_cast<std::size_t>(expected_ranks())) full_ = head.text;
  index(*head.text);
}

void folder::index(entry& e) {
  auto& text = e.second;
  if (text.indexed) {
    heads_.erase({text.indexed_line, &e});
    if (text.indexed_free) free_heads_.erase({text.indexed_line, &e});
  }
  text.indexed = !text.heads.empty();
  if (!text.indexed) return;
  text.indexed_line = text.first_line;
  text.indexed_free = text.occurrences == text.heads.size();
  heads_.insert({text.indexed_line, &e});
  if (text.indexed_free) free_heads_.insert({text.indexed_line, &e});
}

clock::time_point folder::open_deadline(const rank_state& state) const {
  return state.open_last + (state.traceback ? options_.window : options_.gap);
}

int folder::expected_ranks() const { return options_.ranks > 0 ? std::max(options_.ranks, largest_rank_ + 1) : 0; }

folder::choice folder::pick(clock::time_point now, bool everything) const {
  const auto expected = static_cast<std::size_t>(expected_ranks());
  const entry* chosen = nullptr;
  if (full_ != nullptr && expected > 0 && full_->second.heads.size() == expected) chosen = full_;
  const entry* oldest = heads_.empty() ? nullptr : heads_.begin()->second;
  if (chosen == nullptr && oldest != nullptr && (everything || now - oldest->second.first >= options_.window)) {
    // The oldest head is due. If ranks also hold it further back, the oldest head that no rank
    // holds further back goes first (due or not): it is what those ranks wait behind.
    chosen = free_heads_.empty() ? oldest : free_heads_.begin()->second;
  }
  if (!loose_.empty()) {
    // A line without a label goes once nothing that arrived before it is held (so before anything
    // that arrived after it), or past the window when no head is due.
    const auto& line = loose_.front();
    const bool older_held = (oldest != nullptr && oldest->second.first_line < line.number) ||
                            std::any_of(ranks_.begin(), ranks_.end(), [&](const auto& r) {
                              return r.second.open_lines > 0 && r.second.open_first_line < line.number;
                            });
    if (!older_held || (chosen == nullptr && now - line.arrived >= options_.window)) return {nullptr, true};
  }
  return {const_cast<entry*>(chosen), false};
}

void folder::write(entry& text) {
  auto& data = text.second;
  const auto ranks = std::move(data.heads);
  data.heads = {};
  index(text);
  if (full_ == &text) full_ = nullptr;
  const std::string prefix = "[rank: " + ranks.to_string() + "] ";
  const std::string body = options_.numbers ? render(text.first, data.ranges) : text.first;
  data.ranges.clear();
  for (std::size_t start = 0;;) {
    const auto end = body.find('\n', start);
    output_ += prefix;
    output_.append(body, start, end == std::string::npos ? std::string::npos : end - start);
    output_ += '\n';
    if (end == std::string::npos) break;
    start = end + 1;
  }
  ranks.for_each([&](int rank) {
    const auto at = ranks_.find(rank);
    auto& state = at->second;
    held_bytes_ -= state.queue.front().held;
    state.queue.pop_front();
    --data.occurrences;
    if (!state.queue.empty()) {
      make_head(rank, state.queue.front());
    } else if (state.open_lines == 0) {
      ranks_.erase(at);  // nothing held for it
    }
  });
  if (data.occurrences == 0) texts_.erase(texts_.find(text.first));
}

void folder::write_loose() {
  output_ += loose_.front().text;
  output_ += '\n';
  held_bytes_ -= loose_.front().text.size() + block_overhead;
  loose_.pop_front();
}

void folder::write_due(clock::time_point now, bool everything) {
  while (true) {
    if (held_bytes_ > options_.held_limit) {
      draining_ = true;
      if (!said_over_limit_) {
        said_over_limit_ = true;
        output_ += "jobkit fold: more than " + std::to_string(options_.held_limit) +
                   " bytes held: the oldest blocks are written unfolded until half of that is held\n";
      }
    }
    if (draining_ && held_bytes_ <= options_.held_limit / 2) draining_ = false;
    const auto chosen = pick(now, everything || draining_);
    if (chosen.loose) {
      write_loose();
    } else if (chosen.text != nullptr) {
      write(*chosen.text);
    } else if (!draining_ || !close_oldest_open()) {
      return;
    }
  }
}

bool folder::close_oldest_open() {
  auto oldest = ranks_.end();
  for (auto at = ranks_.begin(); at != ranks_.end(); ++at) {
    if (at->second.open_lines > 0 &&
        (oldest == ranks_.end() || at->second.open_first_line < oldest->second.open_first_line)) {
      oldest = at;
    }
  }
  if (oldest == ranks_.end()) return false;
  close(oldest->first, oldest->second);
  return true;
}

void folder::tick(clock::time_point now) {
  for (auto& [rank, state] : ranks_) {
    if (state.open_lines > 0 && now >= open_deadline(state)) close(rank, state);
  }
  write_due(now, false);
}

void folder::finish(clock::time_point now) {
  if (!partial_.empty() && !just_cut_) line(partial_, now);
  partial_.clear();
  for (auto& [rank, state] : ranks_) {
    if (state.open_lines > 0) close(rank, state);
  }
  write_due(now, true);
}

std::optional<clock::time_point> folder::next_deadline() const {
  std::optional<clock::time_point> next;
  auto earliest = [&](clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [rank, state] : ranks_) {
    if (state.open_lines > 0) earliest(open_deadline(state));
  }
  if (!heads_.empty()) earliest(heads_.begin()->second->second.first + options_.window);
  if (!loose_.empty()) earliest(loose_.front().arrived + options_.window);
  return next;
}

}  // namespace jobkit::fold
