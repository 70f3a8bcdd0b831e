#pragma once

// The engine under jobkit/collectives.hpp: what one collective asks of the data path.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace jobkit::detail {

/// One rank's bytes; rank is the rank in the group.
struct rank_bytes {
  int rank;
  std::vector<std::byte> bytes;
};

/// What an exchange is: who contributes, who receives what (receives()), and which way the
/// transport takes (tcp_tree::route_of). Each collective names its kind; nothing is inferred.
enum class exchange_kind {
  barrier,               ///< nothing contributed, nothing received
  broadcast,             ///< `root` contributes; every member receives its bytes as they are
  all_gather,            ///< every member contributes; every member receives every entry
  all_reduce,            ///< every member contributes; `fold` combines them; every member receives the result
  gather,                ///< every member contributes; `root` alone receives every entry
  scatter,               ///< `root` contributes; `finish` splits it; each member receives its own entry
  reduce_and_broadcast,  ///< every member contributes; `finish` on group rank 0; every member receives its result
  // The kinds over the members' own memory (`buffer`, the same size on every member): nothing is
  // received as entries, the result is in place.
  broadcast_into,   ///< `root`'s whole buffer ends in every member's buffer
  all_gather_into,  ///< each member's piece (`piece` bytes at rank * piece, already in place) ends at its place
};

/// The one primitive every collective is made of. The contributions travel to the group's rank 0,
/// combined on the way by `fold` (all_reduce); rank 0 applies `finish` (scatter,
/// reduce_and_broadcast) and the result travels back to the members that receive it; the kinds
/// over buffers move the bytes between the members' buffers instead. Ranks compare `name`, so a
/// different collective or a different root on one rank is an error, not a pairing.
struct exchange {
  exchange(exchange_kind of, std::string called, std::string at, std::chrono::milliseconds within)
      : kind(of), name(std::move(called)), site(std::move(at)), timeout(within) {}

  exchange_kind kind;
  std::string name;
  std::string site;  ///< "file.cpp:42"
  std::chrono::milliseconds timeout;
  int root = 0;  ///< broadcast, gather, scatter, broadcast_into: the member that contributes or receives
  // The kinds of values:
  std::optional<std::span<const std::byte>> mine;
  std::function<rank_bytes(std::vector<rank_bytes>&)> fold;
  std::function<std::vector<rank_bytes>(std::vector<rank_bytes>&)> finish;
  // The kinds over buffers:
  std::span<std::byte> buffer;
  std::size_t piece = 0;  ///< all_gather_into: each member's piece

  /// broadcast_into and all_gather_into: the bytes move between the members' buffers.
  bool into_buffer() const noexcept {
    return kind == exchange_kind::broadcast_into || kind == exchange_kind::all_gather_into;
  }
  /// Every member receives every entry of the result (all but gather and scatter).
  bool to_everyone() const noexcept { return kind != exchange_kind::gather && kind != exchange_kind::scatter; }
  /// Gather and scatter: the member that receives the entry of group rank `entry`.
  int receiver_of(int entry) const noexcept { return kind == exchange_kind::gather ? root : entry; }
  /// The receive rule: whether `member` receives the entry of group rank `entry`.
  bool receives(int member, int entry) const noexcept { return to_everyone() || receiver_of(entry) == member; }
  /// A broadcast's source: the one member that contributes and may go on without waiting, as
  /// MPI_Bcast does. -1 for every other kind.
  int source() const noexcept { return kind == exchange_kind::broadcast ? root : -1; }

  /// The kinds over buffers: whether group rank `member` contributes a piece (every member of an
  /// all_gather_into, the root of a broadcast_into), where in the buffer it lies, and its size.
  bool contributes_piece(int member) const noexcept {
    return kind == exchange_kind::all_gather_into || (kind == exchange_kind::broadcast_into && member == root);
  }
  std::size_t piece_offset(int member) const noexcept {
    return kind == exchange_kind::all_gather_into ? static_cast<std::size_t>(member) * piece : 0;
  }
  std::size_t piece_size() const noexcept { return kind == exchange_kind::all_gather_into ? piece : buffer.size(); }
  /// The piece of group rank `member` in this member's buffer.
  std::span<std::byte> piece_of(int member) const noexcept {
    return buffer.subspan(piece_offset(member), piece_size());
  }
  /// What this member (group rank `self`) contributes: its value, or its piece of the buffer;
  /// nothing when it contributes nothing.
  std::optional<std::span<const std::byte>> contribution_of(int self) const noexcept {
    if (!into_buffer()) return mine;
    if (!contributes_piece(self)) return std::nullopt;
    return piece_of(self);
  }
};

struct group_state;

/// "file.cpp:42": a call site as errors name it.
std::string site_text(const std::source_location& site);

}  // namespace jobkit::detail
