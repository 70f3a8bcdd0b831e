#include "core/host_list.hpp"

#include <fmt/format.h>

#include "core/parse.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

/// One name's pieces: plain text, or the numbers a bracket stands for (already formatted).
using alternatives = std::vector<std::string>;

struct host_list_parser {
  std::string_view name, value, rest;
  std::size_t hosts = 0;

  [[noreturn]] void bad(std::string_view why) const {
    throw error(
        errc::invalid_environment,
        fmt::format("{}='{}' is not a Slurm host list: {} (expected a form like 'c[1-3],gpu08')", name, value, why));
  }

  int number(std::string& text) {
    const auto before = rest;
    const auto n = take_decimal(rest);
    if (!n)
      bad(rest.empty() || rest.front() < '0' || rest.front() > '9' ? "a bracket misses a number"
                                                                   : "a number is out of range");
    text = std::string(before.substr(0, before.size() - rest.size()));
    return *n;
  }

  /// The numbers of one bracket, `rest` just past its '['.
  alternatives bracket() {
    alternatives out;
    while (true) {
      std::string low_text, high_text;
      const int low = number(low_text);
      int high = low;
      if (rest.starts_with("-")) {
        rest.remove_prefix(1);
        high = number(high_text);
        if (high < low) bad(fmt::format("the range {}-{} runs backwards", low_text, high_text));
      }
      if (static_cast<std::size_t>(high - low) >= max_listed_hosts - out.size()) bad("it names too many hosts");
      const auto width = low_text.size();
      for (long i = low; i <= high; ++i) out.push_back(fmt::format("{:0{}}", i, width));
      if (rest.starts_with("]")) {
        rest.remove_prefix(1);
        return out;
      }
      if (!rest.starts_with(","))
        bad(rest.empty() ? "a '[' is not closed" : fmt::format("unexpected '{}' in a bracket", rest.front()));
      rest.remove_prefix(1);
    }
  }

  /// One name (up to a top-level ',' or the end), expanded.
  void item(std::vector<std::string>& hosts_out) {
    std::vector<alternatives> pieces;
    while (!rest.empty() && rest.front() != ',') {
      if (rest.front() == ']') bad("a ']' has no '['");
      if (rest.front() == '[') {
        rest.remove_prefix(1);
        pieces.push_back(bracket());
        continue;
      }
      const auto end = rest.find_first_of(",[]");
      pieces.push_back({std::string(rest.substr(0, end))});
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    }
    if (pieces.empty()) bad("a name is empty");
    std::size_t count = 1;
    for (const auto& p : pieces) {
      if (count > (max_listed_hosts - hosts) / p.size()) bad("it names too many hosts");
      count *= p.size();
    }
    hosts += count;
    std::vector<std::string> names{""};
    for (const auto& p : pieces) {
      std::vector<std::string> longer;
      longer.reserve(names.size() * p.size());
      for (const auto& head : names) {
        for (const auto& tail : p) longer.push_back(head + tail);
      }
      names = std::move(longer);
    }
    hosts_out.insert(hosts_out.end(), names.begin(), names.end());
  }
};

}  // namespace

std::vector<std::string> expand_host_list(std::string_view name, std::string_view value) {
  host_list_parser parser{name, value, value};
  if (value.empty()) parser.bad("it is empty");
  std::vector<std::string> hosts;
  while (true) {
    parser.item(hosts);
    if (parser.rest.empty()) break;
    parser.rest.remove_prefix(1);  // the ','
    if (parser.rest.empty()) parser.bad("it ends in ','");
  }
  return hosts;
}

}  // namespace jobkit::detail
