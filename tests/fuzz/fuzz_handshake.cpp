// What a stranger can send before it proves membership, what a rank reads from the rendezvous,
// and what a node-mate reads from its leader: the challenge, the hello, the welcome, an endpoint
// record, JOBKIT_SOCKET_IFNAME, and the leader's answer (a segment name or a refusal, read from a
// socket). The first byte picks the parser.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <sys/socket.h>
#include <unistd.h>

#include "finding.hpp"
#include "jobkit/error.hpp"
#include "network/addresses.hpp"
#include "network/handshake.hpp"
#include "transport/frame.hpp"
#include "transport/tree_node.hpp"

using namespace jobkit::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data + 2);
  const std::size_t n = size - 2;
  switch (data[0] % 6) {
    case 0:
      if (n >= challenge_size) {
        const auto c = decode_challenge(std::span<const std::byte, challenge_size>(bytes, challenge_size));
        if (c && decode_challenge(encode_challenge(*c))->nonce != c->nonce) finding("challenge round trip");
      }
      break;
    case 1:
      if (n >= hello_fixed_size) {
        const auto start = decode_hello_start(std::span<const std::byte, hello_fixed_size>(bytes, hello_fixed_size));
        if (start && start->key_size > max_group_key_size) finding("a hello key over the limit was accepted");
      }
      break;
    case 2:
      if (n >= welcome_size) (void)decode_welcome(std::span<const std::byte, welcome_size>(bytes, welcome_size));
      break;
    case 3:
      try {
        const int rank = data[1];
        const auto e = decode_endpoint({bytes, n}, rank);
        const auto again = decode_endpoint(as_bytes(encode_endpoint(rank, e)), rank);
        if (again.port != e.port || again.addresses != e.addresses || again.secret != e.secret ||
            again.host != e.host || again.node != e.node || again.local_rank != e.local_rank) {
          finding("endpoint round trip");
        }
        if (e.addresses.size() > max_endpoint_addresses) finding("too many addresses accepted");
      } catch (const jobkit::error&) {
      }
      break;
    case 4: {
      int ends[2];
      if (n > 65536 || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) break;
      const bool written = n == 0 || ::write(ends[1], bytes, n) == static_cast<ssize_t>(n);
      ::close(ends[1]);  // the reader meets the end of the bytes, never a wait
      try {
        if (written) {
          const auto answer = read_leader_answer(ends[0], steady_clock::now() + std::chrono::seconds(1));
          if (answer.refusal && answer.refusal->size() > max_refusal_size) finding("a refusal over the limit");
          if (answer.name.size() > max_segment_name_size) finding("a segment name over the limit");
        }
      } catch (const jobkit::error&) {
      } catch (const socket_closed&) {
      } catch (const socket_timeout&) {
        finding("a closed socket read as a timeout");
      }
      ::close(ends[0]);
      break;
    }
    default:
      try {
        const auto filter =
            parse_interface_filter("JOBKIT_SOCKET_IFNAME", std::string_view(reinterpret_cast<const char*>(bytes), n));
        (void)interface_matches(filter, "eth0");
      } catch (const jobkit::error&) {
      }
  }
  return 0;
}
