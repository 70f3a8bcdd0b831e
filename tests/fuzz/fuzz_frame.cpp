// The frames of an established link: a header (checked before any allocation), the rest of the
// frame received through a real socket, and the entries of a payload.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
  return 0;
}
