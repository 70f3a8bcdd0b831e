#include "fold/labels.hpp"

#include "core/parse.hpp"

namespace jobkit::fold {
namespace {

constexpr int largest_rank = most_tasks - 1;
constexpr std::size_t widest_label = 8;  // the digits of largest_rank

/// The number of digits srun writes a rank in when tasks - 1 is its largest.
std::size_t width_of(int tasks) {
  std::size_t width = 1;
  for (int n = tasks - 1; n >= 10; n /= 10) ++width;
  return width;
}

/// "[rank: N] " off the front of rest: N, else nullopt with rest unchanged.
std::optional<int> take_jobkit_prefix(std::string_view& rest) {
  constexpr std::string_view open = "[rank: ";
  if (rest.substr(0, open.size()) != open) return std::nullopt;
  auto after = rest.substr(open.size());
  const auto rank = detail::take_decimal(after);
  if (!rank || *rank > largest_rank || after.substr(0, 2) != "] ") return std::nullopt;
  rest = after.substr(2);
  return rank;
}

/// srun's "N: " off the front of rest (see parse_label): N, else nullopt with rest unchanged.
std::optional<int> take_srun_label(std::string_view& rest, int tasks) {
  const auto blanks = rest.find_first_not_of(' ');
  if (blanks == std::string_view::npos) return std::nullopt;
  auto after = rest.substr(blanks);
  const auto digits = after.find_first_not_of("0123456789");
  const auto width = blanks + (digits == std::string_view::npos ? after.size() : digits);
  if (digits == 0 || width > widest_label || (tasks > 0 && width != width_of(tasks))) return std::nullopt;
  if (after.front() == '0' && digits != 1) return std::nullopt;  // srun pads with blanks, never zeros
  const auto rank = detail::take_decimal(after);
  if (!rank || *rank > largest_rank || (tasks > 0 && *rank >= tasks)) return std::nullopt;
  if (after == ":" || after.substr(0, 2) == ": ") {
    rest = after.substr(after.size() == 1 ? 1 : 2);
    return rank;
  }
  return std::nullopt;
}

}  // namespace

std::optional<labelled_line> parse_label(std::string_view line, int tasks) {
  auto rest = line;
  if (const auto rank = take_srun_label(rest, tasks)) {
    auto text = rest;
    if (const auto inner = take_jobkit_prefix(text); inner && *inner == *rank) rest = text;
    return labelled_line{*rank, rest};
  }
  if (const auto rank = take_jobkit_prefix(rest)) return labelled_line{*rank, rest};
  return std::nullopt;
}

}  // namespace jobkit::fold
