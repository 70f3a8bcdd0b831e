// What `jobkit where` reads from outside: the agents' lines (any bytes from a node) folded into the
// report, a Python process's faulthandler dump, and what the agent reads of a process in /proc (its
// status's SigCgt, its stat, its environment, its fds' link targets: src/where/proc.hpp), and the
// rule of when it sends a signal. The first byte picks the parser. The report must name every node
// given that did not answer; an answer read has a rank and a host; a signal is sent only where the
// status says it is caught, and a refusal says why.
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "finding.hpp"
#include "where/proc.hpp"
#include "where/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 4 == 0) {
    const auto frames = jobkit::where::python_frames(text);
    if (frames && (frames->empty() || frames->find('\n') != std::string::npos)) finding("a stack that is not one line");
    return 0;
  }
  if (data[0] % 4 == 2) {
    // /proc/PID/status, stat and environ.
    const bool masked = jobkit::where::catches(text, 1).has_value();
    for (int signal = 0; signal <= 257; ++signal) {
      const auto caught = jobkit::where::catches(text, signal);
      if (caught.has_value() != masked) finding("a mask read for one signal and not for another");
      const auto plan = jobkit::where::plan_stack(7, signal, text);
      if (plan.signal != 0 && (plan.signal != signal || caught != true || !plan.refused.empty())) {
        finding("a signal sent that the status does not say is caught");
      }
      if (plan.signal == 0 && !plan.refused.ends_with("; no stack taken")) finding("a refusal that does not say so");
    }
    if (const auto stat = jobkit::where::parse_stat(text)) {
      if (stat->name.size() >= text.size() || stat->ppid < 0) finding("a stat read beyond its text");
      (void)jobkit::where::state_text(stat, text);
    }
    if (const auto rank = jobkit::where::rank_in_step(text, "77", "0", "c1"); rank && *rank < 0)
      finding("a negative rank");
    return 0;
  }
  if (data[0] % 4 == 3) {
    // A /proc/PID/fd link's target.
    const auto target = jobkit::where::parse_fd_target(text);
    if (target.signal &&
        (target.kind != jobkit::where::fd_target::stack || *target.signal < 1 || *target.signal > SIGRTMAX)) {
      finding("a signal read from what is not a stack file's name");
    }
    return 0;
  }
  const std::vector<std::string> nodes = {"c1", "c2"};
  const auto report = jobkit::where::fold_report(text, nodes);
  if (!report.empty() && report.back() != '\n') finding("the report ends in the middle of a line");
  for (const auto& node : nodes) {
    const bool answered = text.find("#node " + node) != std::string_view::npos;
    const bool named = report.find("[node: " + node + "] not answering\n") != std::string::npos;
    if (!answered && !named) finding("a node that did not answer is not named");
  }
  for (std::size_t start = 0; start < text.size();) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (const auto answer = jobkit::where::parse_answer(text.substr(start, end - start))) {
      if (answer->rank < 0 || answer->host.empty() || answer->seconds < -1) finding("a bad answer was read");
    }
    start = end + 1;
  }
  return 0;
}
