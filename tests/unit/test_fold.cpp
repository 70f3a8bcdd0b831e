// The folding engine of `jobkit fold` on synthetic streams (src/fold): labels, rank sets, numbers,
// srun's task count, blocks and when they are written; 512 and 4,096 ranks interleaved.
#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "core/rank_set.hpp"
#include "fold/folder.hpp"
#include "fold/labels.hpp"
#include "fold/numbers.hpp"
#include "fold/srun_options.hpp"
#include "jobkit/error.hpp"

using namespace std::chrono_literals;
using jobkit::detail::rank_set;
using fold_clock = jobkit::fold::clock;
using jobkit::fold::folder;
using jobkit::fold::options;

namespace {

const fold_clock::time_point t0{};

/// The output's lines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    REQUIRE(end != std::string::npos);  // every written line ends with a newline
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

/// Each rank's lines, read back from folded output ("[rank: 0-3,5] text" gives text to ranks
/// 0, 1, 2, 3 and 5); unlabelled lines under -1.
std::map<int, std::vector<std::string>> unfold(const std::string& text) {
  std::map<int, std::vector<std::string>> by_rank;
  for (const auto& line : lines_of(text)) {
    if (line.rfind("[rank: ", 0) != 0) {
      by_rank[-1].push_back(line);
      continue;
    }
    const auto close = line.find("] ");
    REQUIRE(close != std::string::npos);
    const auto set = line.substr(7, close - 7);
    const auto body = line.substr(close + 2);
    std::size_t start = 0;
    while (start <= set.size()) {
      auto end = set.find(',', start);
      if (end == std::string::npos) end = set.size();
      const auto part = set.substr(start, end - start);
      const auto dash = part.find('-');
      const int first = std::stoi(part.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
      for (int r = first; r <= last; ++r) by_rank[r].push_back(body);
      start = end + 1;
    }
  }
  return by_rank;
}

std::string label(int rank, const std::string& text) { return std::to_string(rank) + ": " + text + "\n"; }

}  // namespace

TEST_CASE("rank sets are ranges, written as jobkit writes them") {
  rank_set s;
  CHECK(s.to_string().empty());
  for (int r : {5, 3, 4, 0, 47, 18, 1, 2}) s.insert(r);
  CHECK(s.to_string() == "0-5,18,47");
  CHECK(s.size() == 8);
  CHECK(s.ranges() == 3);
  s.insert(4);
  CHECK(s.size() == 8);
  for (int r = 6; r < 18; ++r) s.insert(r);
  CHECK(s.to_string() == "0-18,47");
  CHECK(s.first() == 0);
  CHECK(s.complement(50).to_string() == "19-46,48-49");
  CHECK(s.complement(10).to_string().empty());
  CHECK(rank_set{}.complement(3).to_string() == "0-2");
  CHECK(s.complement(50).size() == 30);
  std::vector<int> seen;
  s.for_each([&](int r) { seen.push_back(r); });
  CHECK(seen.size() == 20);
  CHECK(seen.back() == 47);
}

TEST_CASE("labels: srun's, jobkit's, both, and lines without one") {
  using jobkit::fold::parse_label;
  auto l = parse_label(" 7: hello");
  REQUIRE(l);
  CHECK(l->rank == 7);
  CHECK(l->text == "hello");
  l = parse_label("[rank: 12] WARNING: x");
  REQUIRE(l);
  CHECK(l->rank == 12);
  CHECK(l->text == "WARNING: x");
  l = parse_label("12: [rank: 12] WARNING: x");
  REQUIRE(l);
  CHECK(l->text == "WARNING: x");
  l = parse_label("12: [rank: 3] quoted");  // another rank's prefix is text
  REQUIRE(l);
  CHECK(l->rank == 12);
  CHECK(l->text == "[rank: 3] quoted");
  l = parse_label("3:");  // an empty line
  REQUIRE(l);
  CHECK(l->text.empty());
  CHECK_FALSE(parse_label("srun: error: c2: task 3: Killed"));
  CHECK_FALSE(parse_label("P1 3: a het step's label"));
  CHECK_FALSE(parse_label("16777216: too large"));
  CHECK_FALSE(parse_label("99999999999999999999: too large"));
  CHECK_FALSE(parse_label("[rank: 3]no blank"));
  CHECK_FALSE(parse_label(""));
}

TEST_CASE("labels: a time or a date is text; srun's label is blanks, a rank and ': ', as wide as its step's") {
  using jobkit::fold::parse_label;
  // srun writes the rank right-aligned in the width of the largest, then ": " (nothing after: ":").
  CHECK_FALSE(parse_label("12:34:56: message"));
  CHECK_FALSE(parse_label("12:34:56 message"));
  CHECK_FALSE(parse_label("2026-12-01 12:34:56 message"));
  CHECK_FALSE(parse_label("3:text"));
  CHECK_FALSE(parse_label("07: padded with zeros"));
  CHECK_FALSE(parse_label("         3: wider than any step's label"));
  CHECK(parse_label("0: zero")->rank == 0);
  CHECK(parse_label("       3: as wide as the largest")->rank == 3);
  // With srun's task count (fold runs srun with -n 16): exactly its width, a rank below it.
  auto l = parse_label(" 5: x", 16);
  REQUIRE(l);
  CHECK(l->rank == 5);
  CHECK(l->text == "x");
  CHECK(parse_label("15:", 16));
  CHECK_FALSE(parse_label("5: x", 16));
  CHECK_FALSE(parse_label("  5: x", 16));
  CHECK_FALSE(parse_label("16: x", 16));
  CHECK_FALSE(parse_label("12: 34:56 the time among 8 tasks", 8));
  CHECK(parse_label("0: x", 1));
  CHECK_FALSE(parse_label(" 0: x", 1));
  CHECK(parse_label("[rank: 20] jobkit's prefix is read as it is", 16));
}

TEST_CASE("a line that starts with the time passes through, in its turn") {
  for (const int srun_tasks : {0, 10}) {
    folder f(options{.window = 1000ms, .ranks = 10, .srun_tasks = srun_tasks});
    f.add("0: a\n12:34:56 INFO started\n1: b\n", t0);
    f.finish(t0);
    CHECK(f.output() == "[rank: 0] a\n12:34:56 INFO started\n[rank: 1] b\n");
  }
}

TEST_CASE("numbers: words stay words, numbers fold into ranges") {
  using jobkit::fold::split_numbers;
  const auto a = split_numbers("step 10 loss 0.231 lr 1e-4 option_3 c1 v2.1rc -3");
  const auto b = split_numbers("step 10 loss 0.229 lr 2e-4 option_3 c1 v2.1rc -7");
  CHECK(a.shape == b.shape);
  CHECK(a.numbers == std::vector<std::string>{"10", "0.231", "1e-4", "-3"});
  CHECK(split_numbers("option_3").shape != split_numbers("option_4").shape);
  std::vector<jobkit::fold::number_range> ranges;
  jobkit::fold::widen(ranges, a.numbers);
  jobkit::fold::widen(ranges, b.numbers);
  CHECK(jobkit::fold::render(a.shape, ranges) == "step 10 loss 0.229..0.231 lr 1e-4..2e-4 option_3 c1 v2.1rc -7..-3");
  // The marker byte itself, in the text, comes back as it was.
  const auto odd = split_numbers("a\x1f#b 5");
  jobkit::fold::widen(ranges = {}, odd.numbers);
  CHECK(jobkit::fold::render(odd.shape, ranges) == "a\x1f#b 5");
}

namespace {

using srun_args = std::vector<std::string_view>;

/// srun's task count, and whether it is exact: "48" or "at least 4".
std::optional<std::string> tasks_of(const srun_args& args) {
  const auto tasks = jobkit::fold::srun_task_count(args);
  if (!tasks) return std::nullopt;
  return (tasks->exact ? "" : "at least ") + std::to_string(tasks->count);
}

}  // namespace

TEST_CASE("srun's task count comes from its options, up to its command") {
  using v = srun_args;
  CHECK(tasks_of(v{"--mpi=pmix", "-N3", "-n48", "python", "x.py"}) == "48");
  CHECK(tasks_of(v{"-n", "8", "python", "-n", "4"}) == "8");
  CHECK(tasks_of(v{"--ntasks", "6", "cmd"}) == "6");
  CHECK(tasks_of(v{"--ntasks=5", "cmd"}) == "5");
  CHECK(tasks_of(v{"-ln4", "cmd"}) == "4");
  CHECK(tasks_of(v{"-N", "2", "--ntasks-per-node=3", "cmd"}) == "6");
  CHECK(tasks_of(v{"-N2-4", "--ntasks-per-node", "2", "cmd"}) == "at least 4");
  CHECK(tasks_of(v{"-p", "dev", "cmd", "-n", "4"}) == std::nullopt);
  CHECK(tasks_of(v{"-K1", "cmd", "-n4"}) == std::nullopt);  // -K takes its value attached only
  CHECK(tasks_of(v{"-n", "many", "cmd"}) == std::nullopt);  // srun judges what jobkit does not read
  CHECK(tasks_of(v{"-N", "1k", "--ntasks-per-node=2", "cmd"}) == std::nullopt);
  CHECK(tasks_of(v{}) == std::nullopt);
  CHECK(tasks_of(v{"-n16777216", "cmd"}) == "16777216");
}

TEST_CASE("srun's task count is bounded: past 2^24 tasks an error names the options and values") {
  using jobkit::fold::srun_task_count;
  using v = srun_args;
  CHECK_THROWS_AS(srun_task_count(v{"-n", "99999999999", "cmd"}), jobkit::error);
  CHECK_THROWS_WITH(srun_task_count(v{"-n", "99999999999", "cmd"}),
                    "fold: srun's -n='99999999999' asks for more than 16777216 tasks, the most jobkit fold reads");
  CHECK_THROWS_WITH(srun_task_count(v{"--ntasks=16777217", "cmd"}), Catch::Contains("srun's --ntasks='16777217' asks"));
  // Each factor fits an int; their product does not.
  CHECK_THROWS_WITH(srun_task_count(v{"--nodes=100000", "--ntasks-per-node", "100000", "cmd"}),
                    Catch::Contains("srun's --nodes='100000' times --ntasks-per-node='100000' (10000000000) asks"));
  CHECK_THROWS_WITH(srun_task_count(v{"-N5000-6000", "--ntasks-per-node=5000", "cmd"}),
                    Catch::Contains("-N='5000-6000' times --ntasks-per-node='5000' (25000000)"));
  try {
    srun_task_count(v{"-n", "99999999999", "cmd"});
  } catch (const jobkit::error& e) {
    CHECK(e.code() == jobkit::errc::invalid_argument);
  }
}

TEST_CASE("a line every rank said is written at once, once; the others at the window") {
  folder f(options{.window = 1000ms, .ranks = 3});
  f.add(label(0, "config a = 1") + label(1, "config a = 1") + label(0, "only zero"), t0);
  f.add(label(2, "config a = 1"), t0 + 10ms);
  CHECK(f.output().empty());  // the last rank's block closes after the gap (an indented line may follow)
  f.tick(t0 + 70ms);
  CHECK(f.output() == "[rank: 0-2] config a = 1\n");
  f.output().clear();
  REQUIRE(f.next_deadline());
  f.tick(t0 + 900ms);
  CHECK(f.output().empty());
  f.tick(*f.next_deadline());
  CHECK(f.output() == "[rank: 0] only zero\n");
  CHECK(f.held_bytes() == 0);
  CHECK_FALSE(f.next_deadline());
}

TEST_CASE("blocks: indented lines and tracebacks fold whole; a differing block comes out apart") {
  folder f(options{.window = 1000ms, .ranks = 3});
  const std::vector<std::string> traceback = {
      "Traceback (most recent call last):", "  File \"train.py\", line 12, in <module>", "    main()",
      "ValueError: bad batch"};
  std::string in;
  for (std::size_t i = 0; i < traceback.size(); ++i) {
    for (int r = 0; r < 3; ++r) in += label(r, r == 1 && i == 3 ? "ValueError: bad batch on rank 1" : traceback[i]);
  }
  in += label(0, "table:") + label(0, "  a 1") + label(0, "  b 2");
  f.add(in, t0);
  f.finish(t0 + 1ms);
  const auto lines = lines_of(f.output());
  REQUIRE(lines.size() == 11);
  CHECK(lines[0] == "[rank: 0,2] Traceback (most recent call last):");
  CHECK(lines[3] == "[rank: 0,2] ValueError: bad batch");
  // Rank 1's traceback arrived before rank 0's table: written first.
  CHECK(lines[4] == "[rank: 1] Traceback (most recent call last):");
  CHECK(lines[7] == "[rank: 1] ValueError: bad batch on rank 1");
  CHECK(lines[8] == "[rank: 0] table:");
  CHECK(lines[10] == "[rank: 0]   b 2");
}

TEST_CASE("a traceback's lines far apart stay one block; other blocks close after the gap") {
  folder f(options{.window = 1000ms, .ranks = 2});
  f.add(label(0, "Traceback (most recent call last):"), t0);
  f.add(label(0, "  File \"x\", line 1"), t0 + 300ms);
  f.add(label(0, "RuntimeError: x"), t0 + 600ms);
  f.add(label(1, "header"), t0);
  f.add(label(1, "  late indented line"), t0 + 300ms);  // past the gap: a block of its own
  f.finish(t0 + 700ms);
  CHECK(f.output() ==
        "[rank: 0] Traceback (most recent call last):\n[rank: 0]   File \"x\", line 1\n[rank: 0] RuntimeError: x\n"
        "[rank: 1] header\n[rank: 1]   late indented line\n");
}

TEST_CASE("each rank's order holds; a rank that lags joins the fold when it catches up") {
  folder f(options{.window = 1000ms, .ranks = 3});
  f.add(label(0, "rank 0 shard") + label(0, "end") + label(1, "rank 1 shard") + label(1, "end"), t0);
  f.add(label(2, "end"), t0 + 5ms);  // rank 2 has no line of its own
  f.add(label(0, "after"), t0 + 10ms);
  f.tick(t0 + 1100ms);
  const auto lines = lines_of(f.output());
  REQUIRE(lines.size() == 4);
  // "end" of rank 2 is due first but ranks 0 and 1 hold it further back: their lines go first.
  CHECK(lines[0] == "[rank: 0] rank 0 shard");
  CHECK(lines[1] == "[rank: 1] rank 1 shard");
  CHECK(lines[2] == "[rank: 0-2] end");
  CHECK(lines[3] == "[rank: 0] after");
}

TEST_CASE("a due block that a rank holds further back waits for the block before it there, due or not") {
  folder f(options{.window = 1000ms, .ranks = 3});
  f.add(label(0, "A"), t0);
  f.add(label(1, "X") + label(1, "A") + label(2, "A"), t0 + 600ms);
  f.tick(t0 + 1000ms);  // A is due on ranks 0 and 2, rank 1 holds it behind X, which is not due
  CHECK(f.output() == "[rank: 1] X\n[rank: 0-2] A\n");
}

TEST_CASE("lines without a label keep their turn") {
  folder f(options{.window = 1000ms, .ranks = 2});
  f.add(label(0, "first") + "srun: error: c2: task 1: Killed\n", t0);
  f.tick(t0 + 100ms);
  CHECK(f.output().empty());  // "first" waits for rank 1; the srun line waits behind it
  f.tick(t0 + 1000ms);
  CHECK(f.output() == "[rank: 0] first\nsrun: error: c2: task 1: Killed\n");
  f.output().clear();
  f.add("srun: nothing held before it\n", t0 + 2000ms);
  CHECK(f.output() == "srun: nothing held before it\n");
}

TEST_CASE("a partial line, a cut line and bytes split anywhere are lines as written") {
  folder f(options{.window = 1000ms, .ranks = 2});
  const std::string in = label(0, "hello") + label(1, "hello") + "1: partial of a killed rank";
  for (char c : in) f.add(std::string(1, c), t0);
  f.finish(t0);
  CHECK(f.output() == "[rank: 0-1] hello\n[rank: 1] partial of a killed rank\n");
  folder g(options{.ranks = 1});
  g.add("0: " + std::string(3 << 20, 'x') + "\n", t0);
  g.finish(t0);
  const auto lines = lines_of(g.output());
  const auto piece = (std::size_t{1} << 20) - 3;  // a line is cut at 1 MiB, its label kept on each piece
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "[rank: 0] " + std::string(piece, 'x'));
  CHECK(lines[2] == "[rank: 0] " + std::string(piece, 'x'));
  CHECK(lines[3] == "[rank: 0] " + std::string((3 << 20) - 3 * piece, 'x'));
  folder h(options{.ranks = 1});
  h.add("0: " + std::string(piece, 'y'), t0);  // cut exactly where the newline comes
  h.add("\n0: next\n", t0);
  h.finish(t0);
  CHECK(h.output() == "[rank: 0] " + std::string(piece, 'y') + "\n[rank: 0] next\n");
}

TEST_CASE("--numbers folds lines that differ in numbers only, never by default") {
  folder plain(options{.ranks = 2});
  folder numbers(options{.ranks = 2, .numbers = true});
  const std::string in = label(0, "step 5 loss 0.231") + label(1, "step 5 loss 0.229");
  plain.add(in, t0);
  plain.finish(t0);
  numbers.add(in, t0);
  numbers.finish(t0);
  CHECK(plain.output() == "[rank: 0] step 5 loss 0.231\n[rank: 1] step 5 loss 0.229\n");
  CHECK(numbers.output() == "[rank: 0-1] step 5 loss 0.229..0.231\n");
}

TEST_CASE("past the held limit the oldest blocks are written unfolded, said once") {
  folder f(options{.window = 60000ms, .ranks = 4, .held_limit = 4000});
  std::string in;
  for (int i = 0; i < 20; ++i) in += label(i % 2, "line " + std::to_string(i));
  f.add(in, t0);
  f.tick(t0 + 100ms);
  const auto lines = lines_of(f.output());
  REQUIRE_FALSE(lines.empty());
  CHECK(std::count_if(lines.begin(), lines.end(), [](const auto& l) { return l.rfind("jobkit fold: ", 0) == 0; }) == 1);
  CHECK(f.held_bytes() <= 4000);
  f.finish(t0 + 200ms);
  const auto by_rank = unfold(f.output());  // everything, the notice once
  CHECK(by_rank.at(0).size() + by_rank.at(1).size() == 20);
  CHECK(by_rank.at(-1).size() == 1);
}

TEST_CASE("open blocks count against the held limit: at every line, at most the limit is held") {
  folder f(options{.window = 60000ms, .ranks = 4, .held_limit = 4000});
  f.add(label(0, "a"), t0);
  CHECK(f.held_bytes() == 1 + 400);  // the block still open: an indented line may follow
  // A traceback whose exception has not come: one open block of 200 lines, 8 KB.
  std::vector<std::string> traceback{"Traceback (most recent call last):"};
  for (int i = 0; i < 200; ++i) traceback.push_back("  File \"x.py\", line " + std::to_string(i) + ", in f");
  for (std::size_t i = 0; i < traceback.size(); ++i) {
    f.add(label(1, traceback[i]), t0 + 1ms);
    REQUIRE(f.held_bytes() <= 4000);
  }
  const auto lines = lines_of(f.output());
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.front().rfind("jobkit fold: more than 4000 bytes held", 0) == 0);
  f.finish(t0 + 2ms);
  CHECK(f.held_bytes() == 0);
  auto by_rank = unfold(f.output());
  CHECK(by_rank.at(0) == std::vector<std::string>{"a"});
  CHECK(by_rank.at(1) == traceback);  // in its order, nothing lost
  CHECK(by_rank.at(-1).size() == 1);  // the notice, once
  // Lines without a label count too, with their bookkeeping.
  folder g(options{.window = 60000ms, .ranks = 2, .held_limit = 4000});
  g.add(label(0, "a"), t0);
  for (int i = 0; i < 20; ++i) {
    g.add("no label " + std::to_string(i) + "\n", t0);
    REQUIRE(g.held_bytes() <= 4000);
  }
  CHECK_FALSE(g.output().empty());
}

TEST_CASE("512 and 4096 ranks, interleaved: nothing lost, each rank's order kept, shared lines once") {
  for (const int ranks : {512, 4096}) {
    std::mt19937 random(static_cast<unsigned>(ranks));
    // Every rank: 3 shared lines, its own line, a shared traceback (rank 17's differs), a line of
    // all but rank 5. Ranks advance in random order, some a few lines ahead.
    std::vector<std::vector<std::string>> said(ranks);
    for (int r = 0; r < ranks; ++r) {
      said[r] = {"config a = 1",
                 "config b = 2",
                 "WARNING: tokenizer",
                 "rank " + std::to_string(r) + " shard",
                 "Traceback (most recent call last):",
                 "  File \"train.py\", line 3, in <module>",
                 r == 17 ? "ValueError: other" : "ValueError: bad"};
      if (r != 5) said[r].push_back("WARNING: dataset");
    }
    std::vector<std::size_t> next(ranks, 0);
    folder f(options{.window = 1000ms, .ranks = ranks});
    auto now = t0;
    std::string chunk;
    std::size_t left = 0;
    for (const auto& s : said) left += s.size();
    std::string out;
    while (left > 0) {
      const int r = static_cast<int>(random() % ranks);
      if (next[r] == said[r].size()) continue;
      chunk += (r < 10 ? "   " : r < 100 ? "  " : r < 1000 ? " " : "") + label(r, said[r][next[r]++]);
      --left;
      if (chunk.size() > 4096) {
        f.add(chunk, now);
        chunk.clear();
        now += 1ms;
        out += f.output();
        f.output().clear();
      }
    }
    f.add(chunk, now);
    f.finish(now);
    out += f.output();
    const auto by_rank = unfold(out);
    for (int r = 0; r < ranks; ++r) CHECK(by_rank.at(r) == said[r]);
    const auto lines = lines_of(out);
    auto count = [&](const std::string& line) { return std::count(lines.begin(), lines.end(), line); };
    const auto all = "[rank: 0-" + std::to_string(ranks - 1) + "] ";
    CHECK(count(all + "config a = 1") == 1);
    CHECK(count(all + "WARNING: tokenizer") == 1);
    CHECK(count("[rank: 0-4,6-" + std::to_string(ranks - 1) + "] WARNING: dataset") == 1);
    CHECK(count("[rank: 0-16,18-" + std::to_string(ranks - 1) + "] ValueError: bad") == 1);
    CHECK(count("[rank: 17] ValueError: other") == 1);
    CHECK(lines.size() == static_cast<std::size_t>(3 + ranks + 3 + 3 + 1));
    CHECK(f.held_bytes() == 0);
  }
}
