#pragma once

#include <optional>
#include <string_view>

namespace jobkit::fold {

/// The most tasks a step has here: ranks run from 0 to most_tasks - 1; a larger number is text,
/// not a rank (no step has that many tasks). `--ranks` and srun's options are bounded by it.
constexpr int most_tasks = 1 << 24;

/// A line of a step's output with the rank that wrote it.
struct labelled_line {
  int rank;
  std::string_view text;  // the line after its label(s), without the newline
};

/// The rank label of one line (without its newline): srun's `--label`, jobkit's own prefix
/// ("[rank: 7] text"), or both (srun's first; jobkit's is taken off the text when it names the same
/// rank).
///
/// srun's label is the rank right-aligned in the width of the step's largest rank, then ": " (an
/// empty line: "N: " on some releases, "N:" on others): " 7: text" among 16 tasks. So it is
/// blanks and a number without leading zeros, 8 characters at most, then ": " or the line's end;
/// with `tasks`, the step's task count as srun was given it (0: not known), exactly as wide as
/// tasks - 1 and naming a rank below tasks. "12:34:56: x" (a time) and "2026-12-01 12:34:56 x" are
/// text, and so is "5: x" among 16 tasks (srun writes " 5: x").
///
/// nullopt for a line without a label: srun's own messages ("srun: error: ..."), a het step's label
/// ("P1 3: ..."), a rank of most_tasks or more.
std::optional<labelled_line> parse_label(std::string_view line, int tasks = 0);

}  // namespace jobkit::fold
