#include "recovery/ledger.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <map>

#include "core/json.hpp"
#include "recovery/events.hpp"

namespace jobkit::detail {
namespace {

double seconds_between(double from, double to) { return from > 0 && to >= from ? to - from : 0; }

std::string phase(double from, double to) {
  return from > 0 && to > 0 ? fmt::format("{:.3f}", seconds_between(from, to)) : "null";
}

double number_of(std::string_view text, double otherwise) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() ? value : otherwise;
}

}  // namespace

std::string_view json_field(std::string_view line, std::string_view name) {
  const std::string key = fmt::format("\"{}\":", name);
  const auto at = line.find(key);
  if (at == std::string_view::npos) return {};
  auto rest = line.substr(at + key.size());
  if (rest.starts_with('"')) {
    for (std::size_t i = 1; i < rest.size(); ++i) {
      if (rest[i] == '\\') {
        ++i;
      } else if (rest[i] == '"') {
        return rest.substr(0, i + 1);
      }
    }
    return {};
  }
  const auto end = rest.find_first_of(",}");
  return end == std::string_view::npos ? std::string_view() : rest.substr(0, end);
}

std::string json_text_field(std::string_view line, std::string_view name) {
  const auto raw = json_field(line, name);
  if (raw.size() < 2 || !raw.starts_with('"')) return {};
  return std::string(raw.substr(1, raw.size() - 2));
}

std::string_view json_array_field(std::string_view line, std::string_view name) {
  const std::string key = fmt::format("\"{}\":[", name);
  const auto at = line.find(key);
  if (at == std::string_view::npos) return {};
  const auto start = at + key.size() - 1;
  int depth = 0;
  bool in_string = false;
  for (auto i = start; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']' && --depth == 0) {
      return line.substr(start, i - start + 1);
    }
  }
  return {};
}

std::optional<step_event> parse_event(std::string_view line) {
  while (line.ends_with('\n') || line.ends_with('\r')) line.remove_suffix(1);
  if (line.size() > event_line_limit || !line.starts_with("{\"event\":") || !line.ends_with('}')) return std::nullopt;
  step_event e;
  e.kind = json_text_field(line, "event");
  e.host = json_text_field(line, "host");
  const double attempt = number_of(json_field(line, "attempt"), -1);
  const double rank = number_of(json_field(line, "rank"), -1);
  e.time = number_of(json_field(line, "time"), 0);
  if (e.kind.empty() || attempt < 0 || attempt > 1e6 || rank < 0 || rank > 1e9 || e.time <= 0) return std::nullopt;
  e.attempt = static_cast<int>(attempt);
  e.rank = static_cast<int>(rank);
  e.line = std::string(line);
  return e;
}

namespace {

std::map<std::string, double> badput_of(const restart_entry& r) {
  return {{"wasted progress from disruption", r.wasted},
          {"infrastructure recovery from disruption", seconds_between(r.at.failed, r.at.step_started)},
          {"program startup", seconds_between(r.at.step_started, r.at.world_ready)},
          {"checkpoint restore", seconds_between(r.at.world_ready, r.at.checkpoint_loaded)}};
}

}  // namespace

std::string restart_json(std::string_view job_id, const restart_entry& r) {
  std::vector<std::string> nodes;
  for (const auto& n : r.nodes) nodes.push_back(json_string(n));
  std::vector<std::string> lost;
  for (const auto& [cause, seconds] : badput_of(r))
    lost.push_back(fmt::format("{}:{:.3f}", json_string(cause), seconds));
  return fmt::format(
      R"({{"restart":{{"job_id":{},"number":{},"attempt":{},"cause":{},"node":{},"blamed":{},"why":{},"next_nodes":[{}],)"
      R"("checkpoint":{},"source":{},"stragglers":{},"wasted_s":{:.3f},"failed":{:.3f},)"
      R"("phases_s":{{"failure_to_step_ended":{},)"
      R"("step_ended_to_step_started":{},"step_started_to_world_ready":{},"world_ready_to_checkpoint_loaded":{},)"
      R"("checkpoint_loaded_to_first_step_done":{},"failure_to_first_step_done":{}}},"badput_s":{{{}}}}}}})",
      json_string(job_id), r.number, r.attempt, json_string(r.cause), json_string(r.where), json_string(r.blamed),
      json_string(r.blame_why), fmt::join(nodes, ","), r.checkpoint, json_string(r.source),
      r.stragglers.empty() ? std::string("null") : r.stragglers, r.wasted, r.at.failed,
      phase(r.at.failed, r.at.step_ended), phase(r.at.step_ended, r.at.step_started),
      phase(r.at.step_started, r.at.world_ready), phase(r.at.world_ready, r.at.checkpoint_loaded),
      phase(r.at.checkpoint_loaded, r.at.first_step_done), phase(r.at.failed, r.at.first_step_done),
      fmt::join(lost, ","));
}

std::string run_json(const job_ledger& ledger) {
  std::map<std::string, double> badput;
  for (const auto& r : ledger.restarts) {
    for (const auto& [cause, seconds] : badput_of(r)) badput[cause] += seconds;
  }
  std::vector<std::string> lost;
  for (const auto& [cause, seconds] : badput) lost.push_back(fmt::format("{}:{:.3f}", json_string(cause), seconds));
  const double total = seconds_between(ledger.started, ledger.ended);
  return fmt::format(
      R"({{"run":{{"job_id":{},"started":{:.3f},"ended":{:.3f},"outcome":{},"restarts":{},"badput_s":{{{}}},)"
      R"("productive_s":{:.3f},"elapsed_s":{:.3f},"effective_training_time_ratio":{}}}}})",
      json_string(ledger.job_id), ledger.started, ledger.ended, json_string(ledger.outcome), ledger.restarts.size(),
      fmt::join(lost, ","), ledger.productive, total,
      total > 0 ? fmt::format("{:.4f}", ledger.productive / total) : std::string("null"));
}

std::string restart_line(const restart_entry& r) {
  auto line = fmt::format("jobkit run: restart {}: attempt {}: {}", r.number, r.attempt, r.cause);
  if (!r.where.empty()) line += " on " + r.where;
  line += r.blamed.empty() ? " (no node blamed)" : fmt::format(" ({} blamed: {})", r.blamed, r.blame_why);
  if (r.checkpoint >= 0) line += fmt::format(", resuming from checkpoint {}", r.checkpoint);
  if (!r.nodes.empty()) line += fmt::format(", next step on {}", fmt::join(r.nodes, ","));
  const auto at = [&](double t) { return t > 0 ? fmt::format("+{:.2f} s", seconds_between(r.at.failed, t)) : "-"; };
  line += fmt::format(
      "; from the failure: step ended {}, step started {}, world ready {}, checkpoint loaded {}, "
      "first step done {}",
      at(r.at.step_ended), at(r.at.step_started), at(r.at.world_ready), at(r.at.checkpoint_loaded),
      at(r.at.first_step_done));
  if (!r.source.empty()) line += fmt::format(" (checkpoint from {})", r.source);
  return line;
}

std::string ledger_summary(const job_ledger& ledger) {
  const double total = seconds_between(ledger.started, ledger.ended);
  double recovery = 0;
  double wasted = 0;
  for (const auto& r : ledger.restarts) {
    recovery += seconds_between(r.at.failed, r.at.first_step_done > 0 ? r.at.first_step_done : r.at.step_started);
    wasted += r.wasted;
  }
  return fmt::format(
      "jobkit run: {} after {} restart(s) in {:.1f} s: {:.1f} s recovering, {:.1f} s of work done again; "
      "effective training time ratio {}",
      ledger.outcome, ledger.restarts.size(), total, recovery, wasted,
      total > 0 ? fmt::format("{:.3f}", ledger.productive / total) : std::string("unknown"));
}

}  // namespace jobkit::detail
