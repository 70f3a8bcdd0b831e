#include "where/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

std::string format_score(int rank, std::string_view host, const record_view& record) {
  if (!record.score) return {};
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, " %.3f %.3f %lld\n", *record.score, record.score_threshold,
                static_cast<long long>(record.score_agreement));
  return "#score " + std::to_string(rank) + ' ' + flat(host) + numbers;
}

namespace {

struct rank_score {
  std::string host;
  double score = 0;
  double threshold = 0;
  long long agreement = 0;
};

/// "#score RANK HOST SCORE THRESHOLD AGREEMENT" (the part after "#score "); nullopt when malformed.
std::optional<std::pair<int, rank_score>> parse_score(std::string_view rest) {
  std::vector<std::string> fields;
  while (!rest.empty() && fields.size() < 6) {
    const auto blank = rest.find(' ');
    fields.emplace_back(rest.substr(0, blank));
    rest = blank == std::string_view::npos ? std::string_view() : rest.substr(blank + 1);
  }
  if (fields.size() != 5 || !rest.empty() || fields[1].empty()) return std::nullopt;
  std::string_view rank_text = fields[0];
  std::string_view agreement_text = fields[4];
  const auto rank = detail::take_decimal(rank_text);
  const auto agreement = detail::take_decimal(agreement_text);
  const auto number = [](const std::string& text) -> std::optional<double> {
    char* end = nullptr;
    const double n = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(n) || n < 0) return std::nullopt;
    return n;
  };
  const auto score = number(fields[2]);
  const auto threshold = number(fields[3]);
  if (!rank || !rank_text.empty() || *rank > largest_rank || !agreement || !agreement_text.empty() || !score ||
      !threshold) {
    return std::nullopt;
  }
  return std::pair<int, rank_score>(*rank, rank_score{fields[1], *score, *threshold, *agreement});
}

std::string two_places(double n) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f", n);
  return text;
}

/// The block of straggler scores (fold_report); "" when no rank has one.
std::string score_block(const std::map<int, rank_score>& scores) {
  if (scores.empty()) return {};
  constexpr std::size_t listed_in_full = 64;
  const double threshold = scores.begin()->second.threshold;
  long long low = scores.begin()->second.agreement;
  long long high = low;
  for (const auto& [rank, s] : scores) {
    low = std::min(low, s.agreement);
    high = std::max(high, s.agreement);
  }
  std::string block =
      "straggler scores (a rank's median compute time per step against the median of all ranks'; "
      "below " +
      two_places(threshold) + ": a straggler), at stop agreement " + std::to_string(low) +
      (high != low ? "-" + std::to_string(high) : "") + ":\n";
  const auto marked = [](const rank_score& s) { return s.score < s.threshold ? " (straggler)" : ""; };
  if (scores.size() <= listed_in_full) {
    std::vector<std::pair<int, std::string>> lines;  // (first rank, line) per node
    std::map<std::string, std::size_t> line_of;
    for (const auto& [rank, s] : scores) {
      auto it = line_of.find(s.host);
      if (it == line_of.end()) {
        it = line_of.emplace(s.host, lines.size()).first;
        lines.emplace_back(rank, "  " + s.host + ":");
      } else {
        lines[it->second].second += ',';
      }
      lines[it->second].second += " rank " + std::to_string(rank) + ' ' + two_places(s.score) + marked(s);
    }
    for (const auto& [first, line] : lines) block += line + "\n";
    return block;
  }
  detail::rank_set others;
  double least = 0;
  double most = 0;
  for (const auto& [rank, s] : scores) {
    if (s.score < s.threshold) {
      block += "  rank " + std::to_string(rank) + " (" + s.host + ") " + two_places(s.score) + marked(s) + "\n";
      continue;
    }
    least = others.size() == 0 ? s.score : std::min(least, s.score);
    most = others.size() == 0 ? s.score : std::max(most, s.score);
    others.insert(rank);
  }
  if (others.size() > 0) {
    block += "  ranks " + others.to_string() + ": " + two_places(least) +
             (two_places(most) != two_places(least) ? "-" + two_places(most) : "") + "\n";
  }
  return block;
}

}  // namespace

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
  std::map<int, rank_score> scores;
  int world = 0;
  for (std::size_t start = 0; start < agents_output.size();) {
    auto end = agents_output.find('\n', start);
    if (end == std::string_view::npos) end = agents_output.size();
    const auto line = agents_output.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("#score ")) {
      if (auto score = parse_score(line.substr(7)); score && !scores.contains(score->first)) {
        scores.insert(std::move(*score));
      }
      continue;
    }
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
  report += score_block(scores);
  return report;
}

}  // namespace jobkit::where
