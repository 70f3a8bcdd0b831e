#include "where/report.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "core/parse.hpp"
#include "core/rank_set.hpp"

namespace jobkit::where {
namespace {

constexpr int largest_rank = (1 << 24) - 1;  // as jobkit fold: no step has more tasks

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string flat(std::string_view text) {
  std::string out(text);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
  return out;
}

}  // namespace

std::optional<std::string> python_frames(std::string_view dump) {
  // faulthandler: "Current thread 0x... (most recent call first):" or "Thread 0x... (...):", then
  // lines '  File "PATH", line N in FUNCTION'.
  auto block_at = dump.find("Current thread ");
  if (block_at == std::string_view::npos) block_at = dump.find("Thread ");
  if (block_at == std::string_view::npos) block_at = 0;
  std::string frames;
  int count = 0;
  std::size_t start = dump.find('\n', block_at);
  while (start != std::string_view::npos && start + 1 < dump.size() && count < 6) {
    const auto end = dump.find('\n', start + 1);
    const auto line = dump.substr(start + 1, end == std::string_view::npos ? std::string_view::npos : end - start - 1);
    start = end;
    constexpr std::string_view file = "  File \"";
    if (line.substr(0, file.size()) != file) {
      if (count > 0) break;  // the thread's frames have ended
      continue;
    }
    const auto quote = line.find('"', file.size());
    const auto at_line = line.find(", line ", quote);
    const auto in = line.find(" in ", at_line);
    if (quote == std::string_view::npos || at_line == std::string_view::npos || in == std::string_view::npos) continue;
    if (count++ > 0) frames += " <- ";
    frames += flat(line.substr(in + 4));
    frames += ' ';
    frames += flat(base_name(line.substr(file.size(), quote - file.size())));
    frames += ':';
    frames += flat(line.substr(at_line + 7, in - at_line - 7));
  }
  if (count == 0) return std::nullopt;
  return frames;
}

rank_answer describe(int rank, std::string host, const std::optional<record_view>& record,
                     const std::optional<std::string>& stack, const std::string& state, std::int64_t now_ns,
                     std::string_view no_stack) {
  rank_answer answer;
  answer.rank = rank;
  answer.host = std::move(host);
  if (state.find("stopped") != std::string::npos) {
    // A stopped process answers nothing; where its record last had it is still worth saying.
    answer.text = "not answering: " + state;
    if (record && record->in_call) answer.text += ", in " + record->call + " at " + record->site;
    return answer;
  }
  if (record && record->in_call) {
    answer.seconds = std::max<long>(0, static_cast<long>((now_ns - record->since_ns) / 1'000'000'000));
    answer.group_size = record->group_size;
    answer.text = "in " + record->call + " at " + record->site;
    return answer;
  }
  if (stack) {
    answer.text = "not in jobkit: " + *stack;
  } else {
    answer.text = "not in jobkit: " + state;
    if (!no_stack.empty()) answer.text += " (" + std::string(no_stack) + ")";
  }
  if (record && !record->last_call.empty()) {
    const auto ago = std::max<long>(0, static_cast<long>((now_ns - record->last_ended_ns) / 1'000'000'000));
    answer.text += " (its last jobkit call: " + record->last_call + " at " + record->last_site + ", ended " +
                   std::to_string(ago) + " s ago)";
  }
  return answer;
}

std::string format_answer(const rank_answer& answer) {
  return std::to_string(answer.rank) + '\t' + flat(answer.host) + '\t' + std::to_string(answer.seconds) + '\t' +
         std::to_string(answer.group_size) + '\t' + flat(answer.text) + '\n';
}

std::optional<rank_answer> parse_answer(std::string_view line) {
  std::vector<std::string_view> fields;
  for (int i = 0; i < 4; ++i) {
    const auto tab = line.find('\t');
    if (tab == std::string_view::npos) return std::nullopt;
    fields.push_back(line.substr(0, tab));
    line.remove_prefix(tab + 1);
  }
  rank_answer answer;
  auto rank = fields[0];
  const auto r = detail::take_decimal(rank);
  auto group = fields[3];
  const auto g = detail::take_decimal(group);
  auto seconds = fields[2];
  const bool none = seconds == "-1";
  const auto s = none ? std::optional<int>(-1) : detail::take_decimal(seconds);
  if (!r || !rank.empty() || !g || !group.empty() || !s || (!none && !seconds.empty()) || fields[1].empty() ||
      *r > largest_rank || *g > largest_rank + 1) {
    return std::nullopt;
  }
  answer.rank = *r;
  answer.host = std::string(fields[1]);
  answer.seconds = *s;
  answer.group_size = *g;
  answer.text = std::string(line);
  return answer;
}

std::string fold_report(std::string_view agents_output, const std::vector<std::string>& nodes) {
  struct folded {
    detail::rank_set ranks;
    long low = -1;
    long high = -1;
    int group_size = 0;
  };
  std::map<std::string, folded> by_text;
  std::map<int, std::string> host_of;
  std::set<std::string> answered;
  int world = 0;
  for (std::size_t start = 0; start < agents_output.size();) {
    auto end = agents_output.find('\n', start);
    if (end == std::string_view::npos) end = agents_output.size();
    const auto line = agents_output.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("#node ")) {
      const auto rest = line.substr(6);
      answered.insert(std::string(rest.substr(0, rest.find(' '))));
      continue;
    }
    const auto answer = parse_answer(line);
    if (!answer || host_of.contains(answer->rank)) continue;  // one answer per rank
    host_of[answer->rank] = answer->host;
    auto& f = by_text[answer->text];
    f.ranks.insert(answer->rank);
    f.group_size = std::max(f.group_size, answer->group_size);
    if (answer->seconds >= 0) {
      f.low = f.low < 0 ? answer->seconds : std::min(f.low, answer->seconds);
      f.high = std::max(f.high, answer->seconds);
    }
    world = std::max({world, answer->rank + 1, answer->group_size});
  }
  std::vector<std::pair<int, std::string>> lines;
  for (const auto& [text, f] : by_text) {
    std::string line = "[rank: " + f.ranks.to_string() + "] " + text;
    if (f.low >= 0) {
      line += " for " + std::to_string(f.low) + (f.high != f.low ? "-" + std::to_string(f.high) : "") + " s";
    }
    if (f.group_size > 0 && f.group_size == world && f.ranks.size() < static_cast<std::size_t>(world)) {
      // A call of the world: the ranks not in it are the ones it waits for.
      const auto missing = f.ranks.complement(world);
      line += ", waiting for rank" + std::string(missing.size() > 1 ? "s " : " ") + missing.to_string();
      if (missing.size() <= 4) {
        std::string hosts;
        missing.for_each([&](int r) {
          const auto it = host_of.find(r);
          hosts += (hosts.empty() ? "" : ", ") + (it == host_of.end() ? "not found" : it->second);
        });
        line += " (" + hosts + ")";
      }
    }
    lines.emplace_back(f.ranks.first(), line + "\n");
  }
  std::sort(lines.begin(), lines.end());
  std::string report;
  for (const auto& [first, line] : lines) report += line;
  for (const auto& node : nodes) {
    if (!answered.contains(node)) report += "[node: " + node + "] not answering\n";
  }
  return report;
}

}  // namespace jobkit::where
