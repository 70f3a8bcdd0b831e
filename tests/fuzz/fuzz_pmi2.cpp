// What a rank reads from the PMI-2 server: PMI_process_mapping (with a job size from the first
// byte), and the values of other ranks (hex parts). The second byte picks the parser.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "finding.hpp"
#include "jobkit/error.hpp"
#include "pmi2/wire.hpp"

using namespace jobkit::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  if (data[1] % 2 == 0) {
    const int world_size = 1 + data[0];
    try {
      const auto nodes = parse_process_mapping(text, world_size);
      if (nodes.size() != static_cast<std::size_t>(world_size)) finding("a mapping of the wrong size was accepted");
      const auto num_nodes = place_of(nodes, 0).num_nodes;
      int total = 0;
      for (int r = 0; r < world_size; ++r) {
        const auto p = place_of(nodes, r);
        if (p.node_rank < 0 || p.node_rank >= num_nodes || p.local_rank >= p.local_world_size) finding("bad place");
        if (p.local_rank == 0) total += p.local_world_size;
      }
      if (total != world_size) finding("the nodes' sizes do not add up to the job");
    } catch (const jobkit::error&) {
    }
  } else {
    try {
      std::vector<std::byte> bytes;
      const auto parts = pmi2_value_parts(text);
      decode_pmi2_part(text, true, bytes);
      if (parts < 1 || parts > pmi2_max_parts) finding("a part count over the limit was accepted");
      const auto again = encode_pmi2_value(bytes);
      std::vector<std::byte> back;
      decode_pmi2_part(again.front(), true, back);
      if (back != bytes) finding("value round trip");
    } catch (const jobkit::error&) {
    }
  }
  return 0;
}
