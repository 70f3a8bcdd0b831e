#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace jobkit::fold {

/// `jobkit fold --numbers`: lines that differ only in their numbers fold into one line that gives
/// each number's range. A number is an optional '-', digits, an optional fraction and an optional
/// exponent, neither preceded nor followed by a letter, a digit, '_' or '.' (so "option_3", "c1",
/// "v2.1rc" and "3rd" are words, not numbers).

/// A text with each number replaced by a marker, and the numbers as they were written.
struct numbered_text {
  std::string shape;  // the text, numbers marked; a text that differs only in numbers has the same shape
  std::vector<std::string> numbers;
};

numbered_text split_numbers(std::string_view text);

/// One number's place across the ranks folded into a line: the smallest and the largest value, as
/// written.
struct number_range {
  std::string low;
  std::string high;
  double low_value = 0;
  double high_value = 0;
};

/// Widens ranges (empty: the first text) by a text's numbers of the same shape.
void widen(std::vector<number_range>& ranges, const std::vector<std::string>& numbers);

/// The shape with each number written back: the number where all agreed, else "LOW..HIGH".
std::string render(std::string_view shape, const std::vector<number_range>& ranges);

}  // namespace jobkit::fold
