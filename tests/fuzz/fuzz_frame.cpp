// The frames of an established link: a header (checked before any allocation), the rest of the
// frame received through a real socket, the entries of a payload, and the pieces of the up frame
// of an exchange over buffers read straight into the buffer (read_pieces).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transport/frame.hpp"

using namespace jobkit::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  int pair[2];
  if (size <= 65536 && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0) {
    if (::send(pair[0], data, size, 0) == static_cast<ssize_t>(size)) {
      ::close(pair[0]);  // the peer is gone after these bytes: every read ends
      try {
        const frame f = receive_frame(pair[1], steady_clock::now());
        if (sizeof(frame_header) + f.name.size() + f.site.size() + f.payload.size() > size) {
          std::fprintf(stderr, "receive_frame returned more bytes than were sent\n");
          std::abort();
        }
        (void)abort_in(f);
      } catch (const protocol_violation&) {
      } catch (const socket_closed&) {
      } catch (const socket_timeout&) {
      }
    } else {
      ::close(pair[0]);
    }
    ::close(pair[1]);
  }
  if (size == 0) return 0;
  const int group_size = data[0] % 64 + 1;
  try {
    const auto entries = parse_entries(input.subspan(1), group_size);
    std::vector<const rank_bytes*> pointers;
    for (const auto& e : entries) pointers.push_back(&e);
    std::vector<std::byte> again;
    append_entries(again, pointers);
    if (again.size() != size - 1 || std::memcmp(again.data(), data + 1, again.size()) != 0) {
      std::fprintf(stderr, "parse_entries then append_entries does not give the input back\n");
      std::abort();
    }
  } catch (const protocol_violation&) {
  }
  if (size < 4) return 0;
  // The up frame of an exchange over buffers from a child whose subtree holds the ranks of one
  // parity: a group of up to 16, a broadcast_into from a root or an all_gather_into, pieces of up
  // to 63 bytes; the rest of the input is the payload.
  const int ranks = data[1] % 16 + 1;
  const bool rooted = data[2] % 32 < ranks;
  const collective_call call(rooted ? exchange_kind::broadcast_into : exchange_kind::all_gather_into, "fuzz",
                             "fuzz_frame.cpp:1", std::chrono::milliseconds(0));
  exchange ex(call);
  ex.root = rooted ? data[2] % 32 : 0;
  ex.piece = data[3] % 64;
  std::vector<std::byte> buffer(rooted ? ex.piece : ex.piece * static_cast<std::size_t>(ranks));
  ex.buffer = buffer;
  const auto payload = input.subspan(4);
  std::size_t at = 0;
  const auto take = [&](void* to, std::size_t n) {
    if (n > payload.size() - at) throw protocol_violation{"the input ended"};
    if (n > 0) std::memcpy(to, payload.data() + at, n);
    at += n;
  };
  const auto due = [&](int r) { return r % 2 == data[0] % 2 && ex.contributes_piece(r); };
  try {
    const auto announced = read_pieces(take, payload.size(), ex, ranks, due);
    if (announced == buffer.size() && at != payload.size()) {
      std::fprintf(stderr, "read_pieces accepted a frame without reading all of it\n");
      std::abort();
    }
  } catch (const protocol_violation&) {
  }
  return 0;
}
