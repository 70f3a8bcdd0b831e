#include "recovery/plan.hpp"

#include <algorithm>
#include <charconv>

#include "core/parse.hpp"

namespace jobkit::detail {
namespace {

constexpr std::string_view name_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.";

/// The host name at the start of `text` (letters, digits, '-', '_', '.'; a trailing '.' is
/// punctuation), empty when there is none.
std::string_view name_at(std::string_view text) {
  auto name = text.substr(0, std::min(text.find_first_not_of(name_chars), text.size()));
  while (name.ends_with('.')) name.remove_suffix(1);
  return name.size() > 255 ? std::string_view() : name;
}

/// srun's label "  12: " at the start of a line, skipped.
std::string_view without_label(std::string_view line) {
  const auto start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) return line;
  const auto colon = line.find(": ", start);
  if (colon == std::string_view::npos || colon == start) return line;
  const auto digits = line.substr(start, colon - start);
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) return line;
  return line.substr(colon + 2);
}

template <class Map>
void count_into(Map& map, std::string_view node) {
  if (node.empty()) return;
  if (map.size() >= evidence_node_limit && map.find(std::string(node)) == map.end()) return;
  ++map[std::string(node)];
}

}  // namespace

void step_evidence::add_line(std::string_view line) {
  if (line.size() > evidence_line_limit) line = line.substr(0, evidence_line_limit);
  line = without_label(line);
  // srun: "srun: error: c2: task 3: Exited with exit code 9", "srun: error: c2: tasks 2-3: Killed"
  if (constexpr std::string_view srun = "srun: error: "; line.starts_with(srun)) {
    const auto rest = line.substr(srun.size());
    const auto node = name_at(rest);
    const auto after = rest.substr(node.size());
    if (!node.empty() && (after.starts_with(": task ") || after.starts_with(": tasks ")) &&
        failed_tasks.size() < evidence_node_limit) {
      failed_tasks.emplace_back(node);
      return;
    }
    // "srun: error: Task launch for StepId=7.1 failed on node c4: Communication connection failure"
    constexpr std::string_view launch = "Task launch for ";
    constexpr std::string_view on_node = " failed on node ";
    if (rest.starts_with(launch)) {
      const auto at = rest.find(on_node);
      const auto node = at == std::string_view::npos ? std::string_view() : name_at(rest.substr(at + on_node.size()));
      if (!node.empty() && rest.substr(at + on_node.size() + node.size()).starts_with(':') &&
          launch_failed.size() < evidence_node_limit) {
        launch_failed.emplace(node);
      }
    }
    return;
  }
  // jobkit's lost node, whichever layer saw it (core/lost_node.cpp's describe).
  for (auto at = line.find("its node "); at != std::string_view::npos; at = line.find("its node ", at + 1)) {
    const auto node = name_at(line.substr(at + 9));
    const auto tail = line.substr(at + 9 + node.size());
    const auto verdict = tail.find(": the node is lost or cut off");
    if (node.empty() || verdict == std::string_view::npos) continue;
    auto from = tail.substr(verdict + 29);
    std::string_view accuser;
    if (from.starts_with(" from ")) accuser = name_at(from.substr(6));
    if (lost.size() >= evidence_node_limit && lost.find(std::string(node)) == lost.end()) continue;
    auto& accusers = lost[std::string(node)];
    if (accusers.size() < evidence_node_limit) accusers.emplace(accuser.empty() ? "?" : std::string(accuser));
  }
  // jobkit's dead rank: "rank 3 (c2) closed its connection (...) during ...: the process died or
  // exited", "rank 3 (c2) exited ...: the process died or exited".
  if (line.find("the process died or exited") == std::string_view::npos) return;
  for (auto at = line.find("rank "); at != std::string_view::npos; at = line.find("rank ", at + 1)) {
    auto rest = line.substr(at + 5);
    const auto digits = rest.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string_view::npos || !rest.substr(digits).starts_with(" (")) continue;
    rest = rest.substr(digits + 2);
    const auto node = name_at(rest);
    const auto after = rest.substr(node.size());
    if (!after.starts_with(") closed its connection") && !after.starts_with(") exited")) continue;
    count_into(dead, node);
  }
}

std::vector<blame> lost_nodes_of(const step_evidence& evidence) {
  const auto why = [](const std::set<std::string>& accusers) {
    std::string from;
    for (const auto& accuser : accusers) from += (from.empty() ? "" : ", ") + accuser;
    return "lost: jobkit's lost-node verdict (named by " + from + ")";
  };
  std::vector<blame> blamed;
  for (const auto& [node, accusers] : evidence.lost) {
    if (std::any_of(accusers.begin(), accusers.end(),
                    [&](const std::string& a) { return !evidence.lost.contains(a); })) {
      blamed.push_back({node, why(accusers)});
    }
  }
  if (!blamed.empty()) return blamed;
  const std::pair<const std::string, std::set<std::string>>* best = nullptr;
  bool tie = false;
  for (const auto& entry : evidence.lost) {
    if (best == nullptr || entry.second.size() > best->second.size()) {
      best = &entry;
      tie = false;
    } else if (entry.second.size() == best->second.size()) {
      tie = true;
    }
  }
  if (best != nullptr && !tie) blamed.push_back({best->first, why(best->second)});
  return blamed;
}

std::vector<blame> unlaunched_nodes_of(const step_evidence& evidence) {
  std::vector<blame> blamed;
  for (const auto& node : evidence.launch_failed) {
    blamed.push_back({node, "the step could not start there (srun: task launch failed on the node)"});
  }
  return blamed;
}

std::string crash_node(const step_evidence& evidence) {
  const std::pair<const std::string, int>* best = nullptr;
  for (const auto& entry : evidence.dead) {
    if (best == nullptr || entry.second > best->second) best = &entry;
  }
  if (best != nullptr) return best->first;
  return evidence.failed_tasks.empty() ? std::string() : evidence.failed_tasks.front();
}

std::optional<blame> repeated_crash(const std::vector<std::string>& crash_nodes) {
  std::map<std::string, int> times;
  for (const auto& node : crash_nodes) {
    if (!node.empty() && ++times[node] == 2) {
      return blame{node, "crashed twice: the first failure of two failed steps was on this node"};
    }
  }
  return std::nullopt;
}

bool slurm_state_is_bad(std::string_view state) {
  if (state.ends_with('*')) return true;  // not responding
  for (const std::string_view bad : {"down", "drain", "fail", "maint", "reboot", "future", "unknown"}) {
    if (state.starts_with(bad)) return true;
  }
  return false;
}

std::string format_bad_nodes(const std::vector<bad_node>& nodes) {
  std::string text;
  for (const auto& n : nodes) {
    auto why = n.why;
    std::replace_if(
        why.begin(), why.end(), [](char c) { return c == '\t' || c == '\n' || c == '\r'; }, ' ');
    text += n.node + '\t' + std::to_string(n.when) + '\t' + why + '\n';
  }
  return text;
}

std::vector<bad_node> parse_bad_nodes(std::string_view text) {
  std::vector<bad_node> nodes;
  while (!text.empty() && nodes.size() < evidence_node_limit) {
    const auto end = std::min(text.find('\n'), text.size());
    const auto line = text.substr(0, end);
    text = text.substr(std::min(end + 1, text.size()));
    if (line.size() > evidence_line_limit) continue;
    const auto tab = line.find('\t');
    const auto tab2 = tab == std::string_view::npos ? tab : line.find('\t', tab + 1);
    if (tab2 == std::string_view::npos) continue;
    const auto node = line.substr(0, tab);
    if (node.empty() || name_at(node) != node) continue;
    bad_node n{std::string(node), 0, std::string(line.substr(tab2 + 1))};
    const auto when = line.substr(tab + 1, tab2 - tab - 1);
    if (std::from_chars(when.data(), when.data() + when.size(), n.when).ptr != when.data() + when.size()) continue;
    if (std::none_of(nodes.begin(), nodes.end(), [&](const bad_node& o) { return o.node == n.node; })) {
      nodes.push_back(std::move(n));
    }
  }
  return nodes;
}

std::vector<std::string> choose_nodes(const std::vector<std::string>& allocation, const std::set<std::string>& bad,
                                      std::size_t wanted) {
  std::vector<std::string> chosen;
  for (const auto& node : allocation) {
    if (chosen.size() == wanted) break;
    if (bad.count(node) == 0) chosen.push_back(node);
  }
  return chosen;
}

bool no_progress(const std::vector<std::int64_t>& newest, int limit) {
  if (limit <= 0 || newest.size() < static_cast<std::size_t>(limit) + 1) return false;
  const auto last = newest.back();
  return std::all_of(newest.end() - limit - 1, newest.end(), [&](std::int64_t n) { return n == last; });
}

std::string scontrol_field(std::string_view line, std::string_view name) {
  if (name.empty()) return {};
  for (auto at = line.find(name); at != std::string_view::npos; at = line.find(name, at + 1)) {
    const auto from = at + name.size();
    if ((at > 0 && line[at - 1] != ' ') || from >= line.size() || line[from] != '=') continue;
    const auto value = line.substr(from + 1);
    return std::string(value.substr(0, std::min(value.find_first_of(" \n"), value.size())));
  }
  return {};
}

std::vector<slurmd_address> slurmd_addresses(std::string_view shown) {
  constexpr std::size_t field_limit = 255;
  std::vector<slurmd_address> found;
  std::size_t lines = 0;
  while (!shown.empty() && lines++ < evidence_node_limit) {
    const auto end = std::min(shown.find('\n'), shown.size());
    const auto line = shown.substr(0, std::min(end, evidence_line_limit));
    shown.remove_prefix(std::min(end + 1, shown.size()));
    auto name = scontrol_field(line, "NodeName"), address = scontrol_field(line, "NodeAddr");
    const auto port_text = scontrol_field(line, "Port");
    std::string_view rest = port_text;
    const auto port = take_decimal(rest);
    if (name.empty() || address.empty() || name.size() > field_limit || address.size() > field_limit || !port ||
        !rest.empty() || *port < 1 || *port > 65535) {
      continue;
    }
    found.push_back({std::move(name), std::move(address), *port});
  }
  return found;
}

std::optional<std::string> preempt_time_of(std::string_view shown) {
  auto value = scontrol_field(shown, "PreemptTime");
  if (value.empty() || value == "None" || value == "Unknown" || value.size() > 64) return std::nullopt;
  return value;
}

}  // namespace jobkit::detail
