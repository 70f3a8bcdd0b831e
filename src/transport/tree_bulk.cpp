// tcp_tree's bulk exchanges (broadcast_into, all_gather_into): the bytes move between the
// members' own buffers, the node's segment and the sockets without intermediate copies.

#include <sys/uio.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/failure.hpp"
#include "transport/frame.hpp"
#include "transport/tree.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

/// What a leader receives from its parent before passing it on: big enough for the socket
/// calls to be few, small enough that every level of the tree works at once.
constexpr std::size_t bulk_chunk = std::size_t{1} << 20;

}  // namespace

void tcp_tree::check_in_step(const link& l, frame& f, const exchange& ex, time_point deadline) {
  if (is(f.header, frame_type::abort)) {
    if (f.payload.size() != f.header.payload_size) receive_payload(l.fd, f, deadline);
    const auto notice = abort_in(f);
    fail(notice->reason, notice->origin, notice->code);
  }
  if (f.header.sequence != sequence_ || f.name != ex.name) out_of_step(l.peer, f.name, f.header.sequence, f.site, ex);
}

void tcp_tree::sizes_differ(const exchange& ex, int group_rank, std::uint64_t theirs, std::uint64_t mine) {
  fail(fmt::format("{} at {}: {} passed a buffer of {} bytes but {} one of {} bytes: every member must pass the "
                   "same size",
                   ex.name, ex.site, describe(group_rank), theirs, describe(rank_), mine),
       rank_, errc::invalid_argument);
}

void tcp_tree::run_bulk(const bulk_exchange& bx) {
  const auto& ex = bx.base;
  begin_exchange(ex);
  if (node_index_ > 0) return bulk_as_node_mate(bx);
  const auto deadline = clock::now() + ex.timeout;
  std::vector<bool> done(children_.size(), false);
  std::size_t pending = children_.size();
  const take_child take = [&](std::size_t i) { return receive_child_bulk(i, bx, deadline); };
  if (node_leader()) {
    const auto used = await_node(ex, deadline, take, done, pending);
    for (std::size_t i = 1; i < node_members_.size(); ++i) {
      const int index = static_cast<int>(i);
      const auto& slot = segment_->member(index);
      if (slot.bulk_size != bx.buffer.size()) sizes_differ(ex, node_members_[i], slot.bulk_size, bx.buffer.size());
      if (!bx.contributes(node_members_[i])) continue;
      const auto piece = contribution(index, used);
      if (slot.has_payload == 0 || piece.size() != bx.piece_size()) {
        fail(fmt::format("{} found a piece of {} bytes from {} in the node's shared memory during {} at {}, where {} "
                         "were due: a bug, memory corruption, or two jobkit builds in one step",
                         describe(rank_), piece.size(), describe(node_members_[i]), ex.name, ex.site, bx.piece_size()),
             rank_, errc::internal);
      }
      if (!piece.empty()) std::memcpy(bx.buffer.data() + bx.offset(node_members_[i]), piece.data(), piece.size());
    }
  }
  await_children(ex, deadline, take, done, pending);
  if (!parent_link_.empty()) send_up_bulk(bx, deadline);
  pass_down_bulk(bx, deadline);
  if (!node_leader()) return;
  const auto size = bx.buffer.size();
  try {
    segment_->reserve(size, describe(rank_));
    if (size > 0) std::memcpy(segment_->data(size, describe(rank_)).data(), bx.buffer.data(), size);
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  segment_->set_result_size(size);
  segment_->store(segment_->result_word(), static_cast<std::uint32_t>(sequence_));
  segment_->ring(node_segment::bell::down);
}

bool tcp_tree::receive_child_bulk(std::size_t i, const bulk_exchange& bx, time_point deadline) {
  const auto& ex = bx.base;
  const auto& child = children_[i];
  try {
    auto f = next_from_child(i, ex, deadline);
    if (!f) return false;
    check_in_step(child, *f, ex, deadline);
    if (!is(f->header, frame_type::up)) {
      throw protocol_violation{fmt::format("a frame of type {} where its contribution was due", f->header.type)};
    }
    const auto size = read_bulk_pieces(
        [&](void* to, std::size_t n) { receive_all(child.fd, to, n, deadline); }, f->header.payload_size, bx,
        static_cast<int>(members_.size()),
        [&](int g) { return child_of_[static_cast<std::size_t>(g)] == static_cast<int>(i) && bx.contributes(g); });
    if (size != bx.buffer.size()) sizes_differ(ex, child.peer, size, bx.buffer.size());
  } catch (...) {
    message_failed(child, ex);
  }
  return true;
}

void tcp_tree::send_up_bulk(const bulk_exchange& bx, time_point deadline) {
  const auto& ex = bx.base;
  const auto& parent = parent_link_.front();
  std::vector<int> pieces;  // the contributors of this subtree, whose pieces this buffer holds now
  if (bx.contributes(rank_)) pieces.push_back(rank_);
  for (std::size_t i = 1; i < node_members_.size(); ++i) {
    if (bx.contributes(node_members_[i])) pieces.push_back(node_members_[i]);
  }
  for (const auto& under : subtree_) {
    for (const int g : under) {
      if (bx.contributes(g)) pieces.push_back(g);
    }
  }
  const std::uint64_t size = bx.buffer.size();
  const auto count = static_cast<std::uint32_t>(pieces.size());
  std::vector<std::byte> heads(bulk_head_size + pieces.size() * bulk_piece_head_size);
  std::memcpy(heads.data(), &size, sizeof size);
  std::memcpy(heads.data() + sizeof size, &count, sizeof count);
  std::vector<iovec> parts{{heads.data(), bulk_head_size}};
  std::uint64_t payload_size = parts.front().iov_len;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    auto* head = heads.data() + bulk_head_size + k * bulk_piece_head_size;
    const auto r = static_cast<std::uint32_t>(pieces[k]);
    const std::uint64_t n = bx.piece_size();
    std::memcpy(head, &r, sizeof r);
    std::memcpy(head + sizeof r, &n, sizeof n);
    parts.push_back({head, bulk_piece_head_size});
    parts.push_back({bx.buffer.data() + bx.offset(pieces[k]), n});
    payload_size += bulk_piece_head_size + n;
  }
  check_size(payload_size, ex);
  try {
    send_frame_parts(parent.fd, frame_type::up, sequence_, rank_, ex.name, ex.site, payload_size, parts, deadline);
  } catch (...) {
    send_failed(parent, ex);
  }
}

void tcp_tree::pass_down_bulk(const bulk_exchange& bx, time_point deadline) {
  const auto& ex = bx.base;
  const auto size = bx.buffer.size();
  if (!parent_link_.empty()) {
    const auto& parent = parent_link_.front();
    try {
      frame f = receive_frame_head(parent.fd, deadline);
      check_in_step(parent, f, ex, deadline);
      if (!is(f.header, frame_type::down) || f.header.payload_size != size) {
        throw protocol_violation{fmt::format("a frame of type {} and {} bytes where the {}-byte result was due",
                                             f.header.type, f.header.payload_size, size)};
      }
    } catch (...) {
      result_failed(parent, ex);
    }
  }
  const auto to_children = [&](const iovec* part) {
    for (const auto& child : children_) {
      try {
        if (part) {
          iovec left = *part;  // send_all advances it
          send_all(child.fd, &left, 1, deadline);
        } else {
          send_frame_parts(child.fd, frame_type::down, sequence_, rank_, ex.name, ex.site, size, {}, deadline);
        }
      } catch (...) {
        send_failed(child, ex);
      }
    }
  };
  to_children(nullptr);
  for (std::size_t at = 0; at < size;) {
    const auto n = std::min(bulk_chunk, size - at);
    if (!parent_link_.empty()) {
      const auto& parent = parent_link_.front();
      try {
        receive_all(parent.fd, bx.buffer.data() + at, n, deadline);
      } catch (const socket_closed& e) {
        lost(parent, e.why, ex);
      } catch (const socket_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(parent.peer), ex.name, ex.site),
             parent.peer);
      }
    }
    const iovec part{bx.buffer.data() + at, n};
    to_children(&part);
    at += n;
  }
}

void tcp_tree::bulk_as_node_mate(const bulk_exchange& bx) {
  const auto& ex = bx.base;
  auto& segment = *segment_;
  const auto deadline = clock::now() + ex.timeout;
  check_node(ex, false);
  const bool contributes = bx.contributes(rank_);
  const auto mine = contributes ? std::span<const std::byte>(bx.buffer).subspan(bx.offset(rank_), bx.piece_size())
                                : std::span<const std::byte>{};
  contribute_to_node(ex, deadline, mine, contributes, bx.buffer.size());
  wait_for_result(ex, deadline);
  const auto size = segment.result_size();
  if (size != bx.buffer.size()) {
    fail(fmt::format("{} found a result of {} bytes in the node's shared memory during {} at {}, where {} were "
                     "due: a bug, memory corruption, or two jobkit builds in one step",
                     describe(rank_), size, ex.name, ex.site, bx.buffer.size()),
         rank_, errc::internal);
  }
  if (size == 0) return;
  std::span<std::byte> result;
  try {
    result = segment.data(size, describe(rank_));
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  std::memcpy(bx.buffer.data(), result.data(), size);
}

}  // namespace jobkit::detail
