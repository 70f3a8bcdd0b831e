// What `jobkit where` reads from outside: the agents' lines (any bytes from a node) folded into the
// report, and a Python process's faulthandler dump. The first byte picks the parser. The report
// must name every node given that did not answer; an answer read has a rank and a host.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "where/report.hpp"

namespace {
[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    const auto frames = jobkit::where::python_frames(text);
    if (frames && (frames->empty() || frames->find('\n') != std::string::npos)) finding("a stack that is not one line");
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
