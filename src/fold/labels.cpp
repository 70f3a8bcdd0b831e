#include "fold/labels.hpp"

#include "core/parse.hpp"

namespace jobkit::fold {
namespace {

constexpr int largest_rank = (1 << 24) - 1;

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

}  // namespace

std::optional<labelled_line> parse_label(std::string_view line) {
  auto rest = line;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (const auto rank = detail::take_decimal(rest);
      rank && *rank <= largest_rank && !rest.empty() && rest.front() == ':') {
    rest.remove_prefix(1);
    // srun writes "N: text"; an empty line is "N: " (some releases) or "N:".
    if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    auto text = rest;
    if (const auto inner = take_jobkit_prefix(text); inner && *inner == *rank) rest = text;
    return labelled_line{*rank, rest};
  }
  rest = line;
  if (const auto rank = take_jobkit_prefix(rest)) return labelled_line{*rank, rest};
  return std::nullopt;
}

}  // namespace jobkit::fold
