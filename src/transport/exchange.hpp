#pragma once

// What the transport runs: one collective's call (jobkit/detail/collective_call.hpp) and, for the
// kinds over buffers, the members' buffers; and the rules of who contributes and who receives what.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jobkit/detail/collective_call.hpp"

namespace jobkit::detail {

/// One exchange: a view of its collective's call, which must outlive it, and the members' buffers
/// for broadcast_into and all_gather_into (`buffer`, the same size on every member: nothing is
/// received as entries, the result is in place).
struct exchange {
  explicit exchange(const collective_call& call)
      : kind(call.kind),
        name(call.name),
        site(call.site),
        timeout(call.timeout),
        deadline(call.deadline),
        root(call.root),
        mine(call.mine),
        fold(call.fold),
        finish(call.finish) {}

  exchange_kind kind;
  const std::string& name;
  const std::string& site;                         ///< "file.cpp:42"
  std::chrono::milliseconds timeout;               ///< what the messages name
  std::chrono::steady_clock::time_point deadline;  ///< the call's: every wait of every route ends by it
  int root;
  // The kinds of values:
  std::optional<std::span<const std::byte>> mine;
  const std::function<rank_bytes(std::vector<rank_bytes>&)>& fold;
  const std::function<std::vector<rank_bytes>(std::vector<rank_bytes>&)>& finish;
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

}  // namespace jobkit::detail
