#include "core/host_list.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/parse.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {
namespace {

/// The numbers low to high, each written at least `width` digits wide.
struct number_range {
  int low, high;
  std::size_t width;
};

/// One piece of a name: plain text, or a bracket's ranges.
struct piece {
  std::string text;
  std::vector<number_range> ranges;  // empty for text
  std::size_t count = 1;             // the names it stands for
  std::size_t longest = 0;           // bytes of its longest expansion
};

struct host_list_parser {
  std::string_view name, value, rest;
  std::size_t budget;  // names still allowed

  [[noreturn]] void bad(std::string_view why) const {
    throw error(
        errc::invalid_environment,
        fmt::format("{}='{}' is not a Slurm host list: {} (expected a form like 'c[1-3],gpu08')", name, value, why));
  }

  int number(std::size_t& width) {
    const auto before = rest.size();
    const auto n = take_decimal(rest);
    if (!n) {
      bad(rest.empty() || rest.front() < '0' || rest.front() > '9' ? "a bracket misses a number"
                                                                   : "a number is out of range");
    }
    width = before - rest.size();
    return *n;
  }

  /// A bracket's ranges, counted, with `rest` just past its '['.
  piece bracket() {
    piece p;
    p.count = 0;
    while (true) {
      number_range r{};
      r.low = r.high = number(r.width);
      std::size_t high_width = r.width;
      if (rest.starts_with("-")) {
        rest.remove_prefix(1);
        r.high = number(high_width);
        if (r.high < r.low) bad(fmt::format("the range {}-{} runs backwards", r.low, r.high));
      }
      const auto n = static_cast<std::size_t>(r.high) - static_cast<std::size_t>(r.low) + 1;
      if (n > budget - p.count) bad(fmt::format("it names more than {} hosts", budget));
      p.count += n;
      p.longest = std::max({p.longest, r.width, high_width});
      p.ranges.push_back(r);
      if (rest.starts_with("]")) {
        rest.remove_prefix(1);
        return p;
      }
      if (!rest.starts_with(",")) {
        bad(rest.empty() ? "a '[' is not closed" : fmt::format("unexpected '{}' in a bracket", rest.front()));
      }
      rest.remove_prefix(1);
    }
  }

  /// One name (up to a top-level ',' or the end), counted, then expanded into `out`.
  void item(std::vector<std::string>& out) {
    std::vector<piece> pieces;
    std::size_t count = 1, longest = 0;
    while (!rest.empty() && rest.front() != ',') {
      if (rest.front() == ']') bad("a ']' has no '['");
      if (rest.front() == '[') {
        rest.remove_prefix(1);
        pieces.push_back(bracket());
      } else {
        const auto end = std::min(rest.find_first_of(",[]"), rest.size());
        pieces.push_back({std::string(rest.substr(0, end)), {}, 1, end});
        rest.remove_prefix(end);
      }
      const auto& p = pieces.back();
      if (p.count > budget / count) bad(fmt::format("it names more than {} hosts", budget));
      count *= p.count;
      longest += p.longest;
      if (longest > max_host_name) bad(fmt::format("a name is longer than {} bytes", max_host_name));
    }
    if (pieces.empty()) bad("a name is empty");
    budget -= count;
    std::vector<std::string> names{""};
    for (const auto& p : pieces) {
      std::vector<std::string> longer;
      longer.reserve(names.size() * p.count);
      for (const auto& head : names) {
        if (p.ranges.empty()) longer.push_back(head + p.text);
        for (const auto& r : p.ranges) {
          for (long i = r.low; i <= r.high; ++i) longer.push_back(fmt::format("{}{:0{}}", head, i, r.width));
        }
      }
      names = std::move(longer);
    }
    out.insert(out.end(), names.begin(), names.end());
  }
};

}  // namespace

std::vector<std::string> expand_host_list(std::string_view name, std::string_view value, std::size_t max_hosts) {
  host_list_parser parser{name, value, value, std::min(max_hosts, max_listed_hosts)};
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
