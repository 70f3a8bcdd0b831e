#include "fold/numbers.hpp"

#include <cstdlib>

namespace jobkit::fold {
namespace {

// In a shape, marker + '#' stands for a number and marker + marker for a marker byte of the text.
constexpr char marker = '\x1f';

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_digit(c) || c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/// The length of the number at text[i], or 0.
std::size_t number_at(std::string_view text, std::size_t i) {
  if (i > 0 && is_word(text[i - 1])) return 0;
  std::size_t j = i;
  if (j < text.size() && text[j] == '-') ++j;
  const std::size_t digits_start = j;
  while (j < text.size() && is_digit(text[j])) ++j;
  if (j == digits_start) return 0;
  if (j + 1 < text.size() && text[j] == '.' && is_digit(text[j + 1])) {
    ++j;
    while (j < text.size() && is_digit(text[j])) ++j;
  }
  if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
    std::size_t k = j + 1;
    if (k < text.size() && (text[k] == '-' || text[k] == '+')) ++k;
    const std::size_t exponent_start = k;
    while (k < text.size() && is_digit(text[k])) ++k;
    if (k > exponent_start) j = k;
  }
  if (j < text.size() && is_word(text[j])) return 0;
  return j - i;
}

double value_of(const std::string& number) { return std::strtod(number.c_str(), nullptr); }

}  // namespace

numbered_text split_numbers(std::string_view text) {
  numbered_text result;
  result.shape.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (const auto length = number_at(text, i)) {
      result.shape += marker;
      result.shape += '#';
      result.numbers.emplace_back(text.substr(i, length));
      i += length;
      continue;
    }
    if (text[i] == marker) result.shape += marker;
    result.shape += text[i++];
  }
  return result;
}

void widen(std::vector<number_range>& ranges, const std::vector<std::string>& numbers) {
  if (ranges.empty()) {
    for (const auto& n : numbers) ranges.push_back({n, n, value_of(n), value_of(n)});
    return;
  }
  for (std::size_t i = 0; i < numbers.size() && i < ranges.size(); ++i) {
    const double v = value_of(numbers[i]);
    if (v < ranges[i].low_value) ranges[i].low = numbers[i], ranges[i].low_value = v;
    if (v > ranges[i].high_value) ranges[i].high = numbers[i], ranges[i].high_value = v;
  }
}

std::string render(std::string_view shape, const std::vector<number_range>& ranges) {
  std::string text;
  std::size_t next = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != marker || i + 1 == shape.size()) {
      text += shape[i];
      continue;
    }
    ++i;
    if (shape[i] == marker) {
      text += marker;
    } else if (next < ranges.size()) {
      const auto& r = ranges[next++];
      text += r.low;
      if (r.high != r.low) text += ".." + r.high;
    }
  }
  return text;
}

}  // namespace jobkit::fold
