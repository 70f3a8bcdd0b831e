#pragma once

#include <optional>
#include <string_view>

namespace jobkit::fold {

/// A line of a step's output with the rank that wrote it.
struct labelled_line {
  int rank;
  std::string_view text;  // the line after its label(s), without the newline
};

/// The rank label of one line (without its newline): srun's `--label` (the rank right-aligned, then
/// ": ", e.g. " 7: text"), jobkit's own prefix ("[rank: 7] text"), or both (srun's first; jobkit's is
/// taken off the text when it names the same rank). nullopt for a line without a label: srun's own
/// messages ("srun: error: ..."), a het step's label ("P1 3: ..."), a rank past 2^24 - 1 (no step
/// has that many tasks; such a number is text, not a label).
std::optional<labelled_line> parse_label(std::string_view line);

}  // namespace jobkit::fold
