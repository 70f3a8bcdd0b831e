#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "transport/transport.hpp"

namespace jobkit::detail {

// The frames of an established tree link. Every size in a header is checked against these
// limits before anything is allocated.
constexpr std::uint32_t frame_magic = 0x4a4b5434;  // "JKT4"
constexpr std::size_t max_name_size = 256;         // a collective's name, e.g. "broadcast(root 3)"
constexpr std::size_t max_site_size = 512;         // "file.cpp:42"
/// The largest payload of one frame: what one collective carries over one link (for a gather,
/// the values of the whole subtree below it). Larger values are refused before sending.
constexpr std::uint64_t max_payload_size = std::uint64_t{1} << 32;  // 4 GiB

/// A broadcast across nodes goes one way: its bytes come `down` from the root at once, and each
/// leader sends its parent a `receipt` (no payload) as it enters the broadcast, so that a parent in
/// another collective reports both call sites instead of waiting for its deadline. `by_tree` (no
/// payload) comes down instead when the bytes are too large for one way: every member then runs
/// the ordinary exchange of the same number.
enum class frame_type : std::uint32_t { up = 1, down = 2, abort = 3, receipt = 4, by_tree = 5 };

struct frame_header {
  std::uint32_t magic;
  std::uint32_t type;
  std::uint64_t sequence;
  std::uint32_t origin;  // the writer's group rank (abort: the rank that failed; one-way down, by_tree: the source)
  std::uint16_t name_size;
  std::uint16_t site_size;
  std::uint64_t payload_size;
};

constexpr bool is(const frame_header& h, frame_type type) noexcept {
  return h.type == static_cast<std::uint32_t>(type);
}

struct frame {
  frame_header header{};
  std::string name, site;
  std::vector<std::byte> payload;
};

/// An authenticated peer sent bytes that break the protocol; what says how.
struct protocol_violation {
  std::string what;
};

/// Checks magic, type and sizes. @throws protocol_violation
void check_header(const frame_header& header);

/// Name and site are cut to their limits. @throws jobkit::error (invalid_argument) when the
/// payload exceeds max_payload_size; socket_closed, socket_timeout
void send_frame(int fd, frame_type type, std::uint64_t sequence, int origin, std::string_view name,
                std::string_view site, std::span<const std::byte> payload, steady_clock::time_point deadline);
/// The same with the payload in parts (scatter-gather from the caller's memory). The parts may
/// hold less than payload_size bytes: the caller then sends the rest with send_all.
void send_frame_parts(int fd, frame_type type, std::uint64_t sequence, int origin, std::string_view name,
                      std::string_view site, std::uint64_t payload_size, std::span<const iovec> parts,
                      steady_clock::time_point deadline);
/// @throws protocol_violation, socket_closed, socket_timeout
frame receive_frame(int fd, steady_clock::time_point deadline);
/// A frame's header, name and site, checked; the caller reads the payload (receive_payload, or
/// straight into its own memory). @throws protocol_violation, socket_closed, socket_timeout
frame receive_frame_head(int fd, steady_clock::time_point deadline);
/// The payload that receive_frame_head announced, into f.payload.
void receive_payload(int fd, frame& f, steady_clock::time_point deadline);

/// A set of rank_bytes as one payload: [u32 count] then per entry [u32 rank][u64 size][bytes].
void append_entries(std::vector<std::byte>& out, const std::vector<const rank_bytes*>& entries);
/// @throws protocol_violation when the payload is truncated or an entry's rank is not below group_size
std::vector<rank_bytes> parse_entries(std::span<const std::byte> in, int group_size);

/// The head of the up frame of an exchange over buffers: [u64 the sender's buffer size][u32
/// pieces]; then per piece [u32 rank][u64 size] and its bytes.
constexpr std::size_t pieces_head_size = sizeof(std::uint64_t) + sizeof(std::uint32_t);
constexpr std::size_t piece_head_size = sizeof(std::uint32_t) + sizeof(std::uint64_t);

/// Reads the payload of payload_size bytes of such an up frame through take(to, n), each piece
/// straight to its place in ex.buffer. Exactly the ranks for which due(rank) holds must send a
/// piece, once each, of ex.piece_size() bytes. Returns the sender's buffer size; when it is not
/// ex.buffer.size(), the pieces are left unread (the caller reports the two sizes).
/// @throws protocol_violation
std::uint64_t read_pieces(const std::function<void(void*, std::size_t)>& take, std::uint64_t payload_size,
                          const exchange& ex, int group_size, const std::function<bool(int)>& due);

/// What an abort frame carries: the reason, the rank that failed first, and the error category.
struct abort_notice {
  std::string reason;
  int origin;
  errc code;
};
std::optional<abort_notice> abort_in(const frame& f);
/// Sends an abort frame (the one encoding abort_in reads); false when it could not be sent by
/// `deadline` (the link is gone or full: the caller closes it either way).
bool send_abort(int fd, std::uint64_t sequence, int origin, errc code, std::string_view message,
                steady_clock::time_point deadline) noexcept;

std::span<const std::byte> as_bytes(std::string_view text);

}  // namespace jobkit::detail
