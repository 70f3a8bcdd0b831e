// What `jobkit run` and a restarted step read from outside: a step's output lines (any bytes a
// program prints), the job's record of bad nodes and the events file beside the checkpoints (a
// shared file system: anyone of the job may write there), what scontrol says of the job's nodes
// and of the job, and the carried progress bound. The first byte picks the parser. Findings: a
// blamed node that no line named, a record that does not read back as written, an event whose
// fields break their bounds, a slurmd address or pre-emption time the text did not give.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "finding.hpp"
#include "progress/learner.hpp"
#include "recovery/events.hpp"
#include "recovery/ledger.hpp"
#include "recovery/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace jobkit::detail;
  switch (data[0] % 5) {
    case 0: {
      step_evidence evidence;
      std::string_view rest = text;
      while (!rest.empty()) {
        const auto end = std::min(rest.find('\n'), rest.size());
        evidence.add_line(rest.substr(0, end));
        rest = rest.substr(std::min(end + 1, rest.size()));
      }
      for (const auto& b : lost_nodes_of(evidence)) {
        if (b.node.empty() || text.find(b.node) == std::string_view::npos) finding("a lost node no line named");
      }
      const auto node = crash_node(evidence);
      if (!node.empty() && text.find(node) == std::string_view::npos) finding("a crash node no line named");
      if (evidence.lost.size() > evidence_node_limit || evidence.failed_tasks.size() > evidence_node_limit) {
        finding("evidence past its bounds");
      }
      return 0;
    }
    case 1: {
      const auto nodes = parse_bad_nodes(text);
      if (nodes.size() > evidence_node_limit) finding("too many bad nodes");
      const auto again = parse_bad_nodes(format_bad_nodes(nodes));
      if (again.size() != nodes.size()) finding("a record that does not read back");
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (again[i].node != nodes[i].node || again[i].when != nodes[i].when) finding("a record read back otherwise");
      }
      return 0;
    }
    case 2: {
      if (const auto e = parse_event(text)) {
        if (e->kind.empty() || e->attempt < 0 || e->rank < 0 || e->line.size() > event_line_limit) {
          finding("an event past its bounds");
        }
        (void)json_array_field(e->line, "stragglers");
        (void)json_text_field(e->line, "step");
      }
      return 0;
    }
    case 3: {
      // What scontrol says of the job's nodes and of the job (jobkit run's slurmd probe, its
      // pre-emption check): every node, address and time one the text holds, every port valid.
      const auto found = slurmd_addresses(text);
      if (found.size() > evidence_node_limit) finding("too many slurmd addresses");
      for (const auto& a : found) {
        if (a.node.empty() || a.address.empty() || text.find(a.node) == std::string_view::npos ||
            text.find(a.address) == std::string_view::npos || a.port < 1 || a.port > 65535) {
          finding("a slurmd address the text did not give");
        }
      }
      if (const auto when = preempt_time_of(text)) {
        if (when->empty() || when->size() > 64 || *when == "None" || text.find(*when) == std::string_view::npos) {
          finding("a pre-emption time the text did not give");
        }
      }
      return 0;
    }
    default: (void)jobkit::detail::parse_bound_file(text); return 0;
  }
}
