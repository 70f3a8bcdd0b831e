#include "where/proc.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "core/parse.hpp"
#include "where/record.hpp"

namespace jobkit::where {
namespace {

bool digits_only(std::string_view text) {
  return !text.empty() && text.size() < 12 && text.find_first_not_of("0123456789") == std::string_view::npos;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string read_small_file(const std::string& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

std::optional<int> rank_in_step(std::string_view environ, std::string_view job, std::string_view step,
                                std::string_view node) {
  bool job_matches = false;
  bool step_matches = false;
  bool node_matches = false;
  std::optional<int> rank;
  for (std::size_t start = 0; start < environ.size();) {
    auto end = environ.find('\0', start);
    if (end == std::string_view::npos) end = environ.size();
    const auto variable = environ.substr(start, end - start);
    start = end + 1;
    const auto is = [&](std::string_view name, std::string_view value) {
      return variable.size() == name.size() + 1 + value.size() && variable.starts_with(name) &&
             variable[name.size()] == '=' && variable.ends_with(value);
    };
    job_matches = job_matches || is("SLURM_JOB_ID", job);
    step_matches = step_matches || is("SLURM_STEP_ID", step);
    node_matches = node_matches || is("SLURMD_NODENAME", node);
    if (variable.starts_with("SLURM_PROCID=")) {
      auto value = variable.substr(13);
      if (const auto r = detail::take_decimal(value); r && value.empty()) rank = r;
    }
  }
  if (!job_matches || !step_matches || !node_matches) return std::nullopt;
  return rank;
}

std::optional<process_stat> parse_stat(std::string_view stat) {
  // "PID (NAME) S PPID ...": the name may hold blanks and parentheses, so it ends at the last ')'.
  const auto open = stat.find('(');
  const auto close = stat.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open || close + 2 >= stat.size() ||
      stat[close + 1] != ' ') {
    return std::nullopt;
  }
  process_stat out;
  out.name = std::string(stat.substr(open + 1, close - open - 1));
  out.state = stat[close + 2];
  auto rest = stat.substr(close + 3);
  if (rest.starts_with(' ')) {
    rest.remove_prefix(1);
    if (const auto ppid = detail::take_decimal(rest)) out.ppid = *ppid;
  }
  return out;
}

std::string state_name(char state) {
  switch (state) {
    case 'R': return "R (running)";
    case 'S': return "S (sleeping)";
    case 'D': return "D (disk sleep)";
    case 'T': return "T (stopped)";
    case 't': return "t (stopped by a tracer)";
    case 'Z': return "Z (zombie)";
    case 'I': return "I (idle)";
    default: return std::string(1, state);
  }
}

std::string state_text(const std::optional<process_stat>& stat, std::string_view wchan) {
  if (!stat) return "gone";
  std::string text = stat->name + " " + state_name(stat->state);
  if (!wchan.empty() && wchan != "0") {
    text += " in ";
    text += wchan;
  }
  return text;
}

std::optional<bool> catches(std::string_view status, int signal) {
  constexpr std::string_view key = "SigCgt:";
  std::size_t at = key.size();
  if (!status.starts_with(key)) {
    at = status.find("\nSigCgt:");
    if (at == std::string_view::npos) return std::nullopt;
    at += 1 + key.size();
  }
  auto rest = status.substr(at);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  std::size_t digits = 0;
  while (digits < rest.size() && hex_value(rest[digits]) >= 0) ++digits;
  const bool ends = digits == rest.size() || rest[digits] == '\n';
  if (digits == 0 || digits > 64 || !ends) return std::nullopt;
  if (signal < 1) return false;
  const auto bit = static_cast<std::size_t>(signal - 1);
  if (bit / 4 >= digits) return false;
  const int digit = hex_value(rest[digits - 1 - bit / 4]);  // the last digit holds signals 1 to 4
  return ((digit >> (bit % 4)) & 1) != 0;
}

fd_target parse_fd_target(std::string_view target) {
  // A memfd's link reads "/memfd:NAME (deleted)".
  constexpr std::string_view memfd = "/memfd:";
  if (!target.starts_with(memfd)) return {};
  auto name = target.substr(memfd.size());
  if (const auto blank = name.find(' '); blank != std::string_view::npos) name = name.substr(0, blank);
  if (name == record_name) return {fd_target::record, std::nullopt};
  if (!name.starts_with(stack_name)) return {};
  name.remove_prefix(stack_name.size());
  fd_target found{fd_target::stack, std::nullopt};
  if (name.empty()) return found;  // an older jobkit's: no signal named
  if (name.front() != ':') return {};
  name.remove_prefix(1);
  const auto signal = detail::take_decimal(name);
  if (signal && name.empty() && *signal >= 1 && *signal <= SIGRTMAX) found.signal = signal;
  return found;
}

process_files find_files(int pid) {
  process_files found;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = ::opendir(dir.c_str());
  if (fds == nullptr) return found;
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = dir + "/" + entry->d_name;
    char target[256];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const auto seen = parse_fd_target(std::string_view(target, static_cast<std::size_t>(n)));
    if (seen.kind == fd_target::record && found.record.empty()) found.record = path;
    if (seen.kind == fd_target::stack && found.stack.empty()) {
      found.stack = path;
      found.stack_signal = seen.signal;
    }
  }
  ::closedir(fds);
  return found;
}

std::vector<task_process> step_processes(const std::string& job, const std::string& step, const std::string& node,
                                         int self) {
  std::vector<task_process> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* entry = ::readdir(proc)) {
    if (!digits_only(entry->d_name)) continue;
    const int pid = std::atoi(entry->d_name);
    if (pid == self) continue;
    const std::string dir = "/proc/" + std::string(entry->d_name);
    const auto rank = rank_in_step(read_small_file(dir + "/environ", 1 << 20), job, step, node);
    if (!rank) continue;
    const auto stat = parse_stat(read_small_file(dir + "/stat", 4096));
    found.push_back({pid, stat ? stat->ppid : 0, *rank});
  }
  ::closedir(proc);
  return found;
}

std::string proc_state(int pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  return state_text(parse_stat(read_small_file(dir + "/stat", 4096)), read_small_file(dir + "/wchan", 256));
}

stack_plan plan_stack(int pid, std::optional<int> named_signal, std::string_view status) {
  const auto p = std::to_string(pid);
  if (!named_signal) return {0, "pid " + p + "'s stack file names no signal; no stack taken"};
  const auto n = std::to_string(*named_signal);
  const auto caught = catches(status, *named_signal);
  if (!caught) return {0, "no signal mask in pid " + p + "'s /proc status; no stack taken"};
  if (!*caught) return {0, "signal " + n + " not caught by pid " + p + "; no stack taken"};
  return {*named_signal, {}};
}

}  // namespace jobkit::where
