// The across-node medium of the tree protocol (tree_links): a node leader's TCP links to its
// parent and children, the frames of each exchange up and down them, receipts for one-way
// broadcasts, and aborts spread to every neighbour. Frames and their limits are frame.hpp's.

#include "transport/tree_links.hpp"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "core/timeout.hpp"
#include "transport/frame.hpp"
#include "transport/node_segment.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

/// How often a leader waiting for its children looks whether a link went silent.
constexpr std::chrono::milliseconds silence_check_interval{250};

/// What a leader receives from its parent before passing it on: big enough for the socket
/// calls to be few, small enough that every level of the tree works at once.
constexpr std::size_t buffer_chunk = std::size_t{1} << 20;

/// The links' one wait with a deadline: a poll of `fds` for at most `slice`, never past
/// `deadline`; a slice that passed or a signal is an interruption point. The count of ready links
/// (0: none; -1: a signal ended the slice).
int poll_for(std::vector<pollfd>& fds, clock::time_point deadline, std::chrono::milliseconds slice) {
  const auto wait = std::min<int>(remaining_ms(deadline), static_cast<int>(slice.count()));
  const int ready = ::poll(fds.data(), fds.size(), wait);
  if (ready > 0) return ready;
  const bool signalled = ready < 0 && errno == EINTR;
  if (ready == 0 || signalled) interruption_point();
  return signalled ? -1 : 0;
}

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

/// The one drain-then-close: closes a link (already shut down for writing) whose peer may still
/// send what nobody reads. A close with unread data sends a reset, and a reset makes the peer's
/// kernel drop what it has not acknowledged yet: so the close waits, until `until` at most, for
/// the peer to acknowledge everything sent (an abort in flight, say), which then stays readable
/// for it however the connection ends. What arrives meanwhile is discarded.
void close_after_delivery(int fd, clock::time_point until) {
  char discard[4096];
  while (clock::now() < until) {
    ssize_t n = 0;
    while ((n = ::recv(fd, discard, sizeof discard, MSG_DONTWAIT)) > 0) {
    }
    // The peer closed or reset: it reads nothing more, and a reset keeps the count from reaching 0.
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    int unacknowledged = 0;
    if (::ioctl(fd, SIOCOUTQ, &unacknowledged) != 0 || unacknowledged == 0) break;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 1);
  }
  ::close(fd);
}

}  // namespace

tree_links::tree_links(tree_context& context, std::optional<link> parent, const std::vector<link>& children,
                       std::vector<std::vector<int>> subtrees)
    : context_(context), parent_(parent), subtrees_(std::move(subtrees)) {
  child_of_.assign(context.members.size(), -1);
  for (std::size_t i = 0; i < children.size(); ++i) {
    children_.push_back(child_link{children[i], {}});
    for (const int g : subtrees_[i]) child_of_[static_cast<std::size_t>(g)] = static_cast<int>(i);
  }
}

tree_links::~tree_links() {
  for (auto& child : children_) {
    if (child.fd < 0) continue;
    if (child.unconfirmed.empty()) {
      ::close(child.fd);
    } else {
      ::shutdown(child.fd, SHUT_WR);
      close_after_delivery(child.fd, clock::now() + std::chrono::seconds(1));
    }
  }
  if (parent_ && parent_->fd >= 0) ::close(parent_->fd);
}

void tree_links::spread_abort(const std::string& message, int origin, errc code) noexcept {
  std::vector<link*> links;
  for (auto& child : children_) links.push_back(&child);
  if (parent_) links.push_back(&*parent_);
  // Tell every neighbour, so the failure reaches every member instead of a deadline. Then close
  // gracefully: a close with unread data sends a reset, which can destroy the abort in flight.
  const auto deadline = clock::now() + std::chrono::milliseconds(200);
  for (auto* l : links) {
    if (l->fd < 0) continue;
    if (l->peer != origin) send_abort(l->fd, context_.sequence, origin, code, message, deadline);
    ::shutdown(l->fd, SHUT_WR);
  }
  for (auto* l : links) {
    if (l->fd < 0) continue;
    close_after_delivery(l->fd, deadline);
    l->fd = -1;
  }
}

void tree_links::check_closed(const exchange& context) {
  std::vector<pollfd> fds;
  std::vector<const link*> links;
  for (const auto& child : children_) links.push_back(&child);
  if (parent_) links.push_back(&*parent_);
  for (const auto* l : links) fds.push_back(pollfd{l->fd, POLLRDHUP, 0});
  if (::poll(fds.data(), fds.size(), 0) > 0) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) lost(*links[i], "connection closed", context);
    }
  }
  check_silence(context);
}

void tree_links::check_silence(const exchange& ex) {
  if (children_.empty() && !parent_) return;  // no link (a group of one): JOBKIT_LOST_NODE_TIMEOUT unread
  const auto limit = lost_node_timeout();
  for (const auto& child : children_) {
    if (child.fd >= 0 && link_silence(child.fd, limit)) went_silent(child, ex);
  }
  if (parent_ && parent_->fd >= 0 && link_silence(parent_->fd, limit)) went_silent(*parent_, ex);
}

tree_links::gather::gather(tree_links& links, const exchange& ex, time_point deadline, std::vector<rank_bytes>& entries)
    : links_(links),
      ex_(ex),
      deadline_(deadline),
      entries_(&entries),
      done_(links.children_.size(), false),
      pending_(links.children_.size()) {}

bool tree_links::gather::take(std::size_t i) { return links_.receive_child(i, ex_, deadline_, *entries_); }

void tree_links::gather::tick() { links_.check_links(*this); }

void tree_links::gather::timed_out(std::vector<int> missing) { links_.node_timed_out(*this, std::move(missing)); }

void tree_links::gather::finish() { links_.await_children(*this); }

void tree_links::node_timed_out(const gather& wait, std::vector<int> missing) {
  std::vector<bool> arrived = wait.done_;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto next = arrived[i] ? std::nullopt : skip_receipts(i, wait.ex_, wait.deadline_);
    arrived[i] = arrived[i] || (next && !is(*next, frame_type::receipt));
  }
  time_out(wait.ex_, arrived, std::move(missing));
}

std::vector<rank_bytes> tree_links::up_and_back(const exchange& ex, time_point deadline,
                                                const std::vector<rank_bytes>& entries,
                                                std::vector<std::byte>& everyone) {
  const auto& parent = *parent_;
  std::vector<const rank_bytes*> up;
  for (const auto& e : entries) up.push_back(&e);
  std::vector<std::byte> payload;
  append_entries(payload, up);
  context_.check_size(payload.size(), ex);
  try {
    send_frame(parent.fd, frame_type::up, context_.sequence, context_.rank, ex.name, ex.site, payload, deadline);
    frame f = receive_frame(parent.fd, deadline);
    check_from_parent(f, ex);
    auto result = parse_entries(f.payload, static_cast<int>(context_.members.size()));
    if (ex.to_everyone()) everyone = std::move(f.payload);
    return result;
  } catch (...) {
    result_failed(parent, ex);
  }
}

void tree_links::send_down(const exchange& ex, time_point deadline, const std::vector<rank_bytes>& entries,
                           std::span<const std::byte> everyone) {
  std::vector<std::byte> selected;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto below = [&](const rank_bytes& e) {
      const int rank = ex.receiver_of(e.rank);
      return rank >= 0 && rank < static_cast<int>(child_of_.size()) &&
             child_of_[static_cast<std::size_t>(rank)] == static_cast<int>(i);
    };
    if (!ex.to_everyone()) {
      std::vector<const rank_bytes*> down;
      for (const auto& e : entries) {
        if (below(e)) down.push_back(&e);
      }
      selected.clear();
      append_entries(selected, down);
    }
    const auto& child = children_[i];
    const auto down = ex.to_everyone() ? everyone : std::span<const std::byte>(selected);
    context_.check_size(down.size(), ex);
    try {
      send_frame(child.fd, frame_type::down, context_.sequence, context_.rank, ex.name, ex.site, down, deadline);
    } catch (...) {
      send_failed(child, ex);
    }
  }
}

tree_links::broadcast tree_links::receive_broadcast(const exchange& ex, time_point deadline,
                                                    const std::function<void()>& watch_node) {
  const auto& parent = *parent_;
  try {
    send_frame(parent.fd, frame_type::receipt, context_.sequence, context_.rank, ex.name, ex.site, {}, deadline);
  } catch (const socket_closed&) {
    // The parent may have passed the bytes on and left the group: they wait in this socket.
  } catch (...) {
    send_failed(parent, ex);
  }
  // Owed from here on: the children's receipts may arrive while this rank waits.
  for (auto& child : children_) child.unconfirmed.push_back({context_.sequence, ex.name, ex.site});
  frame f = await_broadcast(ex, deadline, watch_node);
  for (auto& child : children_) {  // unless the receipt came back while this rank waited
    if (!child.unconfirmed.empty() && child.unconfirmed.back().sequence == context_.sequence)
      child.unconfirmed.back().site = f.site;
  }
  broadcast b;
  b.one_way = is(f.header, frame_type::down);
  if (b.one_way) {
    try {
      b.entries = parse_entries(f.payload, static_cast<int>(context_.members.size()));
      if (b.entries.size() != 1 || b.entries.front().rank != 0 ||
          b.entries.front().bytes.size() > node_segment::inline_capacity) {
        throw protocol_violation{"a one-way broadcast that is not one entry of group rank 0 within 7 KiB"};
      }
    } catch (const protocol_violation& v) {
      broke_protocol(parent, v, ex);
    }
    b.everyone = std::move(f.payload);
  }
  b.source_site = std::move(f.site);
  return b;
}

void tree_links::pass_on_broadcast(const exchange& ex, time_point deadline, const broadcast& b) {
  for (auto& child : children_) {
    try {
      send_frame(child.fd, b.one_way ? frame_type::down : frame_type::by_tree, context_.sequence, 0, ex.name,
                 b.source_site, b.everyone, deadline);
    } catch (...) {
      send_failed(child, ex);
    }
    if (!parent_) child.unconfirmed.push_back({context_.sequence, ex.name, ex.site});
  }
  drain_receipts(ex, deadline);
}

void tree_links::parent_spoke(const exchange& ex, time_point deadline) {
  const auto& parent = *parent_;
  try {
    const frame f = receive_frame(parent.fd, deadline);
    check_from_parent(f, ex);
    context_.fail(ex,
                  fmt::format("{} sent {} #{} before {} had contributed to {} #{}", context_.describe(parent.peer),
                              f.name, f.header.sequence, context_.describe(context_.rank), ex.name, context_.sequence),
                  context_.rank, errc::internal);
  } catch (...) {
    message_failed(parent, ex);
  }
}

bool tree_links::receive_child(std::size_t i, const exchange& ex, time_point deadline,
                               std::vector<rank_bytes>& entries) {
  const auto& child = children_[i];
  std::vector<rank_bytes> under;
  try {
    auto f = next_from_child(i, ex, deadline);
    if (!f) return false;
    check_in_step(child, *f, ex, deadline);
    if (ex.into_buffer()) {
      receive_pieces(i, *f, ex, deadline);
    } else {
      receive_payload(child.fd, *f, deadline);
      under = parse_entries(f->payload, static_cast<int>(context_.members.size()));
    }
  } catch (...) {
    message_failed(child, ex);
  }
  std::move(under.begin(), under.end(), std::back_inserter(entries));
  return true;
}

std::optional<frame> tree_links::next_from_child(std::size_t i, const exchange& ex, time_point deadline) {
  auto& child = children_[i];
  while (true) {
    frame f = receive_frame_head(child.fd, deadline);
    if (!is(f.header, frame_type::receipt)) {
      const auto& pending = child.unconfirmed;
      if (is(f.header, frame_type::up) && !pending.empty() && pending.front().sequence == f.header.sequence) {
        const auto& b = pending.front();
        context_.out_of_step({child.peer, f.name, f.header.sequence, f.site}, {0, b.name, b.sequence, b.site});
      }
      return f;
    }
    confirm(i, f, ex);
    if (!readable_now(child.fd)) return std::nullopt;
  }
}

void tree_links::confirm(std::size_t i, const frame& receipt, const exchange& ex) {
  auto& child = children_[i];
  auto& pending = child.unconfirmed;
  const auto sequence = receipt.header.sequence;
  const call_site theirs{child.peer, receipt.name, sequence, receipt.site};
  if (!pending.empty() && pending.front().sequence == sequence) {
    if (pending.front().name != receipt.name) {
      context_.out_of_step(theirs, {0, pending.front().name, sequence, pending.front().site});
    }
    pending.pop_front();
    return;
  }
  // The child entered a broadcast that went one way while this rank is in another collective.
  if (sequence == context_.sequence) context_.out_of_step(theirs, {context_.rank, ex.name, context_.sequence, ex.site});
  throw protocol_violation{
      fmt::format("a receipt for {} #{}, which this rank never passed on to it", receipt.name, sequence)};
}

std::optional<frame_header> tree_links::skip_receipts(std::size_t i, const exchange& ex, time_point deadline) {
  auto& child = children_[i];
  while (true) {
    frame_header h{};
    // Nothing, part of a header, the end or an error: the blocking reads report those.
    if (::recv(child.fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h)) return std::nullopt;
    // Only what is owed: behind it may come a receipt for the child's next collective.
    if (!is(h, frame_type::receipt) || child.unconfirmed.empty()) return h;
    try {
      confirm(i, receive_frame_head(child.fd, deadline), ex);
    } catch (...) {
      message_failed(child, ex);
    }
  }
}

void tree_links::check_child(std::size_t i, const exchange& ex, time_point deadline) {
  const auto& child = children_[i];
  const auto next = skip_receipts(i, ex, deadline);
  if (next && is(*next, frame_type::receipt)) return;
  pollfd p{child.fd, POLLRDHUP, 0};
  if (!next && (::poll(&p, 1, 0) <= 0 || p.revents == 0)) return;  // a header still on its way
  try {
    auto f = next_from_child(i, ex, deadline);  // names a contribution to the broadcast as out of step
    if (!f) return;
    check_in_step(child, *f, ex, deadline);
    throw protocol_violation{fmt::format("a frame of type {} in a broadcast that went one way", f->header.type)};
  } catch (...) {
    message_failed(child, ex);
  }
}

void tree_links::drain_receipts(const exchange& ex, time_point deadline) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto next = skip_receipts(i, ex, deadline);
    // A failure behind the receipts reaches this rank now rather than at its next collective.
    if (next && (is(*next, frame_type::abort) || (is(*next, frame_type::up) && !children_[i].unconfirmed.empty())))
      check_child(i, ex, deadline);
  }
}

void tree_links::check_from_parent(const frame& f, const exchange& ex) {
  if (auto notice = abort_in(f)) context_.passed_on(notice->reason, notice->origin, notice->code, ex);
  if (f.header.sequence == context_.sequence && f.name == ex.name) return;
  // Only a broadcast that went one way comes down before this rank's contribution went up: its
  // origin is the source, its site the source's.
  const auto source = static_cast<int>(std::min<std::uint64_t>(f.header.origin, context_.members.size() - 1));
  context_.out_of_step({context_.rank, ex.name, context_.sequence, ex.site},
                       {source, f.name, f.header.sequence, f.site});
}

std::vector<pollfd>& tree_links::link_fds(gather& wait, short child_events) {
  auto& fds = wait.fds_;
  fds.clear();
  for (std::size_t i = 0; i < children_.size(); ++i)
    fds.push_back(pollfd{wait.done_[i] ? -1 : children_[i].fd, child_events, 0});
  // The parent sends nothing before it has this rank's contribution, except an abort or its
  // closing: watch it too, so that a failure elsewhere does not wait for a slow child.
  if (parent_) fds.push_back(pollfd{parent_->fd, POLLIN, 0});
  return fds;
}

void tree_links::take_ready(gather& wait, short child_events) {
  const auto& fds = wait.fds_;
  if (parent_ && fds.back().revents != 0) parent_spoke(wait.ex_, wait.deadline_);
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (wait.done_[i] || (fds[i].revents & child_events) == 0 || !wait.take(i)) continue;
    wait.done_[i] = true;
    --wait.pending_;
  }
}

void tree_links::check_links(gather& wait) {
  auto& fds = link_fds(wait, POLLIN | POLLRDHUP);
  if (::poll(fds.data(), fds.size(), 0) <= 0) {
    check_silence(wait.ex_);
    return;
  }
  // A child's contribution waits in its socket; one that closed (or aborted and closed) cannot.
  take_ready(wait, POLLRDHUP | POLLHUP | POLLERR);
}

void tree_links::await_children(gather& wait) {
  while (wait.pending_ > 0) {
    auto& fds = link_fds(wait, POLLIN);
    const int ready = poll_for(fds, wait.deadline_, silence_check_interval);
    if (ready < 0) continue;  // a signal: look again
    if (ready > 0) {
      take_ready(wait, static_cast<short>(~0));
      continue;
    }
    if (clock::now() >= wait.deadline_) time_out(wait.ex_, wait.done_, {});
    check_silence(wait.ex_);
  }
}

frame tree_links::await_broadcast(const exchange& ex, time_point deadline, const std::function<void()>& watch_node) {
  const auto& parent = *parent_;
  // The children too: one that fails, dies or is in another collective must not wait for the root.
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back(pollfd{parent.fd, POLLIN, 0});
    for (const auto& child : children_) fds.push_back(pollfd{child.fd, POLLIN | POLLRDHUP, 0});
    const int ready = poll_for(fds, deadline, segment_check_interval);
    if (ready > 0 && fds.front().revents != 0) break;
    for (std::size_t i = 0; ready > 0 && i < children_.size(); ++i) {
      if (fds[i + 1].revents != 0) check_child(i, ex, deadline);
    }
    watch_node();
    check_silence(ex);
    if (clock::now() >= deadline) {
      context_.timed_out(ex, fmt::format(" waiting for the broadcast from {}: rank {} or a rank "
                                         "between never arrived",
                                         context_.describe(parent.peer), context_.members.front()));
    }
  }
  try {
    frame f = receive_frame(parent.fd, deadline);
    check_from_parent(f, ex);
    if (!is(f.header, frame_type::down) && !is(f.header, frame_type::by_tree)) {
      throw protocol_violation{fmt::format("a frame of type {} where a broadcast was due", f.header.type)};
    }
    return f;
  } catch (...) {
    result_failed(parent, ex);
  }
}

void tree_links::check_in_step(const link& l, frame& f, const exchange& ex, time_point deadline) {
  if (is(f.header, frame_type::abort)) {
    if (f.payload.size() != f.header.payload_size) receive_payload(l.fd, f, deadline);
    const auto notice = abort_in(f);
    context_.passed_on(notice->reason, notice->origin, notice->code, ex);
  }
  if (f.header.sequence != context_.sequence || f.name != ex.name)
    context_.out_of_step(l.peer, f.name, f.header.sequence, f.site, ex);
}

void tree_links::receive_pieces(std::size_t i, const frame& f, const exchange& ex, time_point deadline) {
  const auto& child = children_[i];
  if (!is(f.header, frame_type::up)) {
    throw protocol_violation{fmt::format("a frame of type {} where its contribution was due", f.header.type)};
  }
  const auto size = read_pieces(
      [&](void* to, std::size_t n) { receive_all(child.fd, to, n, deadline); }, f.header.payload_size, ex,
      static_cast<int>(context_.members.size()),
      [&](int g) { return child_of_[static_cast<std::size_t>(g)] == static_cast<int>(i) && ex.contributes_piece(g); });
  if (size != ex.buffer.size()) context_.sizes_differ(ex, child.peer, size, ex.buffer.size());
}

void tree_links::send_pieces_up(const exchange& ex, time_point deadline, const std::vector<int>& pieces) {
  const auto& parent = *parent_;
  const std::uint64_t size = ex.buffer.size();
  const auto count = static_cast<std::uint32_t>(pieces.size());
  std::vector<std::byte> heads(pieces_head_size + pieces.size() * piece_head_size);
  std::memcpy(heads.data(), &size, sizeof size);
  std::memcpy(heads.data() + sizeof size, &count, sizeof count);
  std::vector<iovec> parts{{heads.data(), pieces_head_size}};
  std::uint64_t payload_size = parts.front().iov_len;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    auto* head = heads.data() + pieces_head_size + k * piece_head_size;
    const auto r = static_cast<std::uint32_t>(pieces[k]);
    const std::uint64_t n = ex.piece_size();
    std::memcpy(head, &r, sizeof r);
    std::memcpy(head + sizeof r, &n, sizeof n);
    parts.push_back({head, piece_head_size});
    parts.push_back({ex.buffer.data() + ex.piece_offset(pieces[k]), n});
    payload_size += piece_head_size + n;
  }
  context_.check_size(payload_size, ex);
  try {
    send_frame_parts(parent.fd, frame_type::up, context_.sequence, context_.rank, ex.name, ex.site, payload_size, parts,
                     deadline);
  } catch (...) {
    send_failed(parent, ex);
  }
}

void tree_links::pass_buffer_down(const exchange& ex, time_point deadline) {
  const auto size = ex.buffer.size();
  if (parent_) {
    const auto& parent = *parent_;
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
          send_frame_parts(child.fd, frame_type::down, context_.sequence, context_.rank, ex.name, ex.site, size, {},
                           deadline);
        }
      } catch (...) {
        send_failed(child, ex);
      }
    }
  };
  to_children(nullptr);
  for (std::size_t at = 0; at < size;) {
    const auto n = std::min(buffer_chunk, size - at);
    if (parent_) {
      const auto& parent = *parent_;
      try {
        receive_all(parent.fd, ex.buffer.data() + at, n, deadline);
      } catch (const socket_closed& e) {
        lost(parent, e.why, ex, e.error_number);
      } catch (const socket_timeout&) {
        context_.fail(
            ex, fmt::format("{} stalled mid-message during {} at {}", context_.describe(parent.peer), ex.name, ex.site),
            parent.peer);
      }
    }
    const iovec part{ex.buffer.data() + at, n};
    to_children(&part);
    at += n;
  }
}

}  // namespace jobkit::detail
