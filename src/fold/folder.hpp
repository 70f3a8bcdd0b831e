#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/rank_set.hpp"
#include "fold/numbers.hpp"

namespace jobkit::fold {

using clock = std::chrono::steady_clock;

struct options {
  /// The longest a block is held waiting for other ranks to say it too.
  std::chrono::milliseconds window{1000};
  /// A rank's block closes this long after its last line (a traceback's: the window).
  std::chrono::milliseconds gap{50};
  /// The step's number of ranks; 0: unknown (then only the window writes a block).
  int ranks = 0;
  /// srun's task count when it is known exactly from srun's own options (fold runs srun): srun's
  /// labels are then exactly as wide as its largest rank and name ranks below it (labels.hpp);
  /// 0: labels of any width.
  int srun_tasks = 0;
  /// Fold blocks that differ only in their numbers (numbers.hpp).
  bool numbers = false;
  /// Past this many bytes held (the text of every block, open or closed, and of every line
  /// without a label, and 400 per block or line for its bookkeeping), the oldest blocks are written
  /// at once, unfolded, until half of it is held, blocks still open closed (the oldest first) once
  /// nothing else is left to write; said once in the output. Checked at every line, so at most
  /// this much is held besides the line being read (at most 1 MiB).
  std::size_t held_limit = std::size_t{256} << 20;
  /// A block closes at this many lines.
  std::size_t block_lines = 256;
};

/// The folding engine of `jobkit fold`, for one stream (stdout or stderr), without I/O: bytes in,
/// folded lines out.
///
/// A line is labelled with its rank (labels.hpp); a line without a label passes through unchanged,
/// in its turn. A rank's lines make **blocks**: one line; a line and the indented lines right after
/// it (within `gap` of each other); a Python traceback, from `Traceback (most recent call last):`
/// through its indented lines to the first line that is not (its exception), within the window. A
/// block closes at the rank's next line that does not continue it, `gap` after its last line (a
/// traceback: the window), or at `block_lines` lines.
///
/// Each rank's closed blocks wait in a queue, in its order; only the blocks at the queues' heads
/// are written, so every rank's order holds. Heads with the same text fold: written once, each line
/// prefixed "[rank: SET] " with the ranks that said it. A head is written
///  - as soon as every rank of the step has it next;
///  - once the window has passed since its first line arrived (the oldest first); when ranks
///    also hold it further back in their queues, the oldest head that no rank holds further back
///    goes first, due or not (it is what those ranks wait behind; they then catch up and join);
///  - at the end (finish), in the same order.
/// A line without a label is written once nothing that arrived before it is held (so before
/// anything that arrived after it), or past the window.
class folder {
 public:
  explicit folder(options opts);

  /// Takes a stream's bytes as read; a line's end may come in a later call.
  void add(std::string_view bytes, clock::time_point now);
  /// Closes and writes what is due by now.
  void tick(clock::time_point now);
  /// The end of the stream: a last line without its newline is a line; everything held is written.
  void finish(clock::time_point now);
  /// When tick has something to do next, if anything is held.
  [[nodiscard]] std::optional<clock::time_point> next_deadline() const;

  /// What was written so far: the caller writes it out and clears it.
  std::string& output() noexcept { return output_; }
  /// The bytes held, as counted against options::held_limit.
  [[nodiscard]] std::size_t held_bytes() const noexcept { return held_bytes_; }

 private:
  /// One distinct block text (its shape with --numbers), and the ranks that have it next.
  struct text_entry {
    std::size_t occurrences = 0;  // in every queue, head or not
    detail::rank_set heads;
    clock::time_point first;       // the earliest first line among the heads
    std::uint64_t first_line = 0;  // and its number in the stream (orders heads that arrived at once)
    std::vector<number_range> ranges;
    // Where the entry stands in heads_ and free_heads_ (index): its key there, if it is.
    bool indexed = false;
    bool indexed_free = false;
    std::uint64_t indexed_line = 0;
  };
  using entry = std::unordered_map<std::string, text_entry>::value_type;
  using by_age = std::set<std::pair<std::uint64_t, entry*>>;
  struct block {
    entry* text;
    clock::time_point first;
    std::uint64_t first_line;
    std::vector<std::string> numbers;
    std::size_t held;  // what it counts in held_bytes_
  };
  /// A rank with a block open or queued (a rank with neither has none: what is held is counted).
  struct rank_state {
    std::string open;  // the block being read, lines joined by '\n'; counted in held_bytes_ as read
    std::size_t open_lines = 0;
    bool traceback = false;
    clock::time_point open_first;
    std::uint64_t open_first_line = 0;
    clock::time_point open_last;
    std::deque<block> queue;
  };
  struct loose_line {
    std::string text;
    clock::time_point arrived;
    std::uint64_t number;
  };
  /// What pick chose: a text entry, or the oldest loose line (text null).
  struct choice {
    entry* text = nullptr;
    bool loose = false;
  };

  void line(std::string_view text, clock::time_point now);
  void rank_line(int rank, std::string_view body, std::uint64_t number, clock::time_point now);
  void close(int rank, rank_state& state);
  void make_head(int rank, const block& head);
  void index(entry& text);
  [[nodiscard]] clock::time_point open_deadline(const rank_state& state) const;
  [[nodiscard]] int expected_ranks() const;
  [[nodiscard]] choice pick(clock::time_point now, bool everything) const;
  void write(entry& text);
  void write_loose();
  void write_due(clock::time_point now, bool everything);
  bool close_oldest_open();

  options options_;
  std::string partial_;      // bytes after the last newline
  bool just_cut_ = false;    // partial_ is the label of a line just cut at its longest
  std::uint64_t lines_ = 0;  // lines read so far
  std::unordered_map<int, rank_state> ranks_;
  std::unordered_map<std::string, text_entry> texts_;
  by_age heads_;           // the entries some rank has next, oldest first
  by_age free_heads_;      // those of them that no rank also holds further back
  entry* full_ = nullptr;  // the entry every rank has next, if one has (at most one can)
  std::deque<loose_line> loose_;
  int largest_rank_ = -1;
  std::size_t held_bytes_ = 0;
  bool said_over_limit_ = false;
  bool draining_ = false;  // past held_limit, until half of it is held
  std::string output_;
};

}  // namespace jobkit::fold
