#include "transport/tree.hpp"

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
#include <deque>

#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "jobkit/error.hpp"
#include "transport/frame.hpp"
#include "transport/tree_layout.hpp"

namespace jobkit::detail {

using clock = steady_clock;

namespace {

/// How often a wait in shared memory looks at what a futex cannot tell: node-mates' pidfds and
/// the leader's TCP links.
constexpr std::chrono::milliseconds check_interval{100};

std::uint32_t low_bits(std::uint64_t sequence) { return static_cast<std::uint32_t>(sequence); }

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

/// Closes a link whose peer may still send receipts nobody reads. A close with unread data sends
/// a reset, and a reset makes the peer's kernel drop what it has not acknowledged yet: so the
/// close waits (a bounded time) until the peer acknowledged everything sent, which then stays
/// readable for it however the connection ends.
void close_after_delivery(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = clock::now() + std::chrono::seconds(1);
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

/// Whether a member's contribution goes through the data region (past its slot) rather than in place.
bool in_data_region(const node_segment::slot& slot) {
  return slot.has_payload != 0 && slot.size > node_segment::inline_capacity;
}

/// Every entry, serialised as one result for everyone.
std::vector<std::byte> all_entries(const std::vector<rank_bytes>& entries) {
  std::vector<const rank_bytes*> all;
  for (const auto& e : entries) all.push_back(&e);
  std::vector<std::byte> out;
  append_entries(out, all);
  return out;
}

void copy_text(char (&to)[node_segment::text_capacity], std::uint32_t& size, std::string_view text) {
  size = static_cast<std::uint32_t>(std::min(text.size(), sizeof to));
  std::memcpy(to, text.data(), size);
}

}  // namespace

tcp_tree::tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout)
    : members_(members) {
  const auto deadline = clock::now() + timeout;
  const auto& endpoints = fabric.endpoints();
  rank_ = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  for (const int w : members) hosts_.push_back(endpoints.at(static_cast<std::size_t>(w)).host);

  std::vector<int> nodes;
  for (const int w : members) nodes.push_back(endpoints[static_cast<std::size_t>(w)].node);
  const auto position = position_in_tree(tree_parents(nodes), rank_);
  const int my_node = nodes[static_cast<std::size_t>(rank_)];
  for (std::size_t g = 0; g < nodes.size(); ++g) {
    if (nodes[g] == my_node) node_members_.push_back(static_cast<int>(g));
  }
  if (node_members_.size() == 1) node_members_.clear();
  node_index_ = static_cast<int>(std::find(node_members_.begin(), node_members_.end(), rank_) - node_members_.begin());
  // Node-mates meet in shared memory: only the children on other nodes are TCP links.
  std::vector<int> child_ranks, mates;
  child_of_.assign(members.size(), -1);
  for (std::size_t i = 0; i < position.children.size(); ++i) {
    const int c = position.children[i];
    if (nodes[static_cast<std::size_t>(c)] == my_node) {
      mates.push_back(c);
      continue;
    }
    for (const int g : position.subtrees[i]) child_of_[static_cast<std::size_t>(g)] = static_cast<int>(subtree_.size());
    subtree_.push_back(position.subtrees[i]);
    child_ranks.push_back(c);
  }

  const auto key = fabric.next_group_key(members);
  if (node_index_ > 0) {
    join_node(fabric, key, deadline);
    return;
  }
  if (!node_members_.empty()) {
    auto tag = key;
    std::replace(tag.begin(), tag.end(), '#', '.');
    segment_ = std::make_unique<node_segment>(fmt::format("{}-{}-n{}", fabric.segment_prefix(), tag, my_node),
                                              static_cast<int>(node_members_.size()), describe(rank_));
  }
  if (const int p = position.parent; p >= 0) {
    parent_link_.push_back(link{fabric.connect(members[static_cast<std::size_t>(p)], key, deadline), p, {}});
  }
  std::vector<int> accepted_world_ranks;
  for (const int g : child_ranks) accepted_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  for (const int g : mates) accepted_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  try {
    auto fds = fabric.accept(accepted_world_ranks, key, deadline);
    for (std::size_t i = 0; i < child_ranks.size(); ++i) children_.push_back(link{fds[i], child_ranks[i], {}});
    const std::vector<int> mate_fds(fds.begin() + static_cast<std::ptrdiff_t>(child_ranks.size()), fds.end());
    if (segment_) share_segment(mate_fds, deadline);
  } catch (...) {
    for (auto* links : {&children_, &parent_link_}) {
      for (const auto& l : *links) ::close(l.fd);
      links->clear();
    }
    if (segment_) {  // node-mates that mapped it already must not wait for this leader
      segment_->store(segment_->member(0).left, 1);
      segment_->ring(node_segment::bell::down);
    }
    throw;
  }
}

void tcp_tree::join_node(tcp_fabric& fabric, const std::string& key, time_point deadline) {
  const int leader = node_members_.front();
  const auto who = describe(rank_);
  descriptor setup(fabric.connect(members_[static_cast<std::size_t>(leader)], key, deadline));
  std::string name;
  try {
    std::uint32_t size = 0;
    receive_all(setup.get(), &size, sizeof size, deadline);
    if (size == 0 || size > 255) {
      throw error(errc::internal, fmt::format("data path setup: {} announced a {}-byte segment name to {}",
                                              describe(leader), size, who));
    }
    name.resize(size);
    receive_all(setup.get(), name.data(), size, deadline);
    segment_ = std::make_unique<node_segment>(node_segment::attach, name, static_cast<int>(node_members_.size()), who);
    auto& mine = segment_->member(node_index_);
    segment_->store(mine.pid, static_cast<std::uint32_t>(::getpid()));
    const char mapped = 1;
    iovec part{const_cast<char*>(&mapped), 1};
    send_all(setup.get(), &part, 1, deadline);
  } catch (const socket_closed& e) {
    throw error(errc::peer_failure,
                fmt::format("data path setup: {} closed its connection ({}) before {} mapped their node's shared "
                            "memory: the process died or exited",
                            describe(leader), e.why, who));
  } catch (const socket_timeout&) {
    throw timeout_error(fmt::format("data path setup: {} waited in vain for {} to share their node's shared memory",
                                    who, describe(leader)));
  }
  const auto pid = segment_->load(segment_->member(0).pid);
  watched_.emplace_back(static_cast<pid_t>(pid));
  watched_members_.push_back(0);
}

void tcp_tree::share_segment(const std::vector<int>& fds, time_point deadline) {
  segment_->store(segment_->member(0).pid, static_cast<std::uint32_t>(::getpid()));
  std::deque<descriptor> setup;  // closed on return: they were only for the setup
  for (const int fd : fds) setup.emplace_back(fd);
  const auto& name = segment_->name();
  const auto size = static_cast<std::uint32_t>(name.size());
  for (std::size_t i = 0; i < setup.size(); ++i) {
    const int mate = node_members_[i + 1];
    try {
      iovec parts[2] = {{const_cast<std::uint32_t*>(&size), sizeof size}, {const_cast<char*>(name.data()), size}};
      send_all(setup[i].get(), parts, 2, deadline);
    } catch (const socket_closed& e) {
      throw error(errc::peer_failure, fmt::format("data path setup: {} closed its connection ({}) before it mapped "
                                                  "the node's shared memory: the process died or exited",
                                                  describe(mate), e.why));
    } catch (const socket_timeout&) {
      throw timeout_error(
          fmt::format("data path setup: {} did not take the name of the node's shared memory "
                      "from {} in time",
                      describe(mate), describe(rank_)));
    }
  }
  for (std::size_t i = 0; i < setup.size(); ++i) {
    const int mate = node_members_[i + 1];
    try {
      char mapped = 0;
      receive_all(setup[i].get(), &mapped, 1, deadline);
    } catch (const socket_closed& e) {
      throw error(errc::peer_failure,
                  fmt::format("data path setup: {} could not map the node's shared memory segment {} ({}); its own "
                              "error says why",
                              describe(mate), name, e.why));
    } catch (const socket_timeout&) {
      throw timeout_error(fmt::format("data path setup: {} did not map the node's shared memory segment {} in time",
                                      describe(mate), name));
    }
  }
  segment_->unlink();  // every node-mate has it mapped: from now on no exit can leave it behind
  for (std::size_t i = 1; i < node_members_.size(); ++i) {
    auto& slot = segment_->member(static_cast<int>(i));
    watched_.emplace_back(static_cast<pid_t>(segment_->load(slot.pid)));
    watched_members_.push_back(static_cast<int>(i));
  }
}

tcp_tree::~tcp_tree() {
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      if (l.unconfirmed.empty()) {
        ::close(l.fd);
      } else {
        close_after_delivery(l.fd);
      }
    }
  }
  if (segment_) {
    segment_->store(segment_->member(node_index_).left, 1);
    segment_->ring(node_segment::bell::up);
    segment_->ring(node_segment::bell::down);
  }
}

std::string tcp_tree::describe(int group_rank) const {
  const auto g = static_cast<std::size_t>(group_rank);
  return rank_label(members_[g], hosts_[g]);
}

void tcp_tree::spread_abort(const std::string& given, int origin, errc code) noexcept {
  const std::string message = given.empty() ? "aborted (no reason given)" : given;
  if (broken_.empty()) {
    broken_ = message;
    broken_code_ = code;
  }
  if (segment_) segment_->post_abort(origin, code, message);
  // Tell every neighbour, so the failure reaches every member instead of a deadline. Then close
  // gracefully: a close with unread data sends a reset, which can destroy the abort in flight.
  const auto deadline = clock::now() + std::chrono::milliseconds(200);
  const auto code_text = std::to_string(static_cast<int>(code));
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      if (l.peer != origin) {
        try {
          send_frame(l.fd, frame_type::abort, sequence_, origin, code_text, "", as_bytes(message), deadline);
        } catch (...) {
        }
      }
      ::shutdown(l.fd, SHUT_WR);
    }
  }
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd < 0) continue;
      char discard[4096];
      try {
        while (true) {
          wait_ready(l.fd, POLLIN, deadline);
          const ssize_t n = ::recv(l.fd, discard, sizeof discard, 0);
          if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
        }
      } catch (...) {
      }
      ::close(l.fd);
      l.fd = -1;
    }
  }
}

void tcp_tree::fail(const std::string& message, int origin, errc code) {
  spread_abort(message, origin, code);
  raise(code, message);
}

void tcp_tree::abort(const std::string& message) noexcept {
  if (broken_.empty()) spread_abort(message, rank_, errc::peer_failure);
}

void tcp_tree::check_peers(const std::string& during) {
  if (!broken_.empty()) raise(broken_code_, broken_);
  exchange context;
  context.name = during;
  if (segment_) check_members(context, true);
  std::vector<pollfd> fds;
  std::vector<const link*> links;
  for (const auto* all : {&children_, &parent_link_}) {
    for (const auto& l : *all) {
      fds.push_back(pollfd{l.fd, POLLRDHUP, 0});
      links.push_back(&l);
    }
  }
  if (::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) lost(*links[i], "connection closed", context);
  }
}

void tcp_tree::check_node(const exchange& ex, bool deaths, const std::function<bool()>& excused) {
  check_members(ex, deaths, excused);
  check_mail_in_step(ex);
}

void tcp_tree::check_members(const exchange& ex, bool deaths, const std::function<bool()>& excused) {
  const auto aborted = [&] {
    if (auto notice = segment_->abort_notice()) fail(notice->reason, notice->origin, notice->code);
  };
  aborted();
  const auto during = [&] { return fmt::format("during {}{}", ex.name, ex.site.empty() ? "" : " at " + ex.site); };
  for (std::size_t i = 0; i < watched_.size(); ++i) {
    const int index = watched_members_[i];
    const int g = node_members_[static_cast<std::size_t>(index)];
    const bool left = segment_->load(segment_->member(index).left) != 0;
    const bool ended = !left && deaths && watched_[i].ended();
    if ((!left && !ended) || (excused && excused())) continue;
    // A member that left because of an abort posted after the look above: the abort is the cause.
    aborted();
    if (left) {
      fail(fmt::format("{} left the group {}: it destroyed the group or its process is exiting", describe(g), during()),
           g);
    }
    fail(fmt::format("{} exited {}: the process died or exited (its pidfd reported the end)", describe(g), during()),
         g);
  }
}

void tcp_tree::check_mail_in_step(const exchange& ex) {
  const auto* mail = posted_mail(sequence_);
  if (!mail) return;
  const std::string_view name(mail->name, mail->name_size);
  // The same broadcast, too large for mail: the ordinary exchange follows it.
  if (name == std::string_view(ex.name).substr(0, node_segment::text_capacity)) return;
  out_of_step(mail->source, name, sequence_, std::string_view(mail->site, mail->site_size), ex);
}

const node_segment::mail* tcp_tree::posted_mail(std::uint64_t sequence) {
  const auto& mail = segment_->mail_for(sequence);
  if (segment_->load(mail.posted) != low_bits(sequence) || segment_->load(mail.claimed) != sequence) return nullptr;
  return &mail;
}

void tcp_tree::lost(const link& l, const std::string& why, const exchange& ex) {
  // The peer may have sent an abort just before closing: its reason is the one to report.
  try {
    const auto until = clock::now() + std::chrono::milliseconds(100);
    frame f = receive_frame(l.fd, until);
    while (is(f.header, frame_type::receipt)) f = receive_frame(l.fd, until);
    if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
  } catch (const socket_closed&) {
  } catch (const socket_timeout&) {
  } catch (const protocol_violation&) {
  }
  fail(fmt::format("{} closed its connection ({}) during {}{}: the process died or exited", describe(l.peer), why,
                   ex.name, ex.site.empty() ? "" : " at " + ex.site),
       l.peer);
}

void tcp_tree::broke_protocol(const link& l, const protocol_violation& v, const exchange& ex) {
  fail(fmt::format("{} sent {} during {}{}: the connection breaks jobkit's data path protocol (a bug, memory "
                   "corruption, or two jobkit builds in one step)",
                   describe(l.peer), v.what, ex.name, ex.site.empty() ? "" : " at " + ex.site),
       rank_, errc::internal);
}

void tcp_tree::check_size(std::uint64_t size, const exchange& ex) {
  if (size <= max_payload_size) return;
  fail(fmt::format("{} at {}: {} bytes would cross one link of the data path on {}, more than its limit of {} "
                   "bytes per collective (move bulk data with NCCL, or in pieces)",
                   ex.name, ex.site, size, describe(rank_), max_payload_size),
       rank_, errc::invalid_argument);
}

template <class Step>
std::vector<rank_bytes> tcp_tree::user_step(const exchange& ex, Step&& step) {
  try {
    return step();
  } catch (const std::exception& e) {
    const auto* known = dynamic_cast<const error*>(&e);
    spread_abort(fmt::format("{} at {} failed on {}: {}", ex.name, ex.site, describe(rank_), e.what()), rank_,
                 known ? known->code() : errc::peer_failure);
    throw;
  } catch (...) {
    spread_abort(fmt::format("{} at {} failed on {}: an exception that is not a std::exception", ex.name, ex.site,
                             describe(rank_)),
                 rank_, errc::peer_failure);
    throw;
  }
}

void tcp_tree::time_out(const exchange& ex, const std::vector<bool>& done, std::vector<int> missing) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    if (done[i]) continue;
    for (const int g : subtree_[i]) missing.push_back(members_[static_cast<std::size_t>(g)]);
  }
  std::sort(missing.begin(), missing.end());
  fail(fmt::format("{} at {} timed out after {} ms on {}: rank(s) {} never arrived (at least one of them "
                   "is late, stuck or in another collective)",
                   ex.name, ex.site, ex.timeout.count(), describe(rank_), fmt::join(missing, ", ")),
       rank_, errc::timeout);
}

void tcp_tree::out_of_step(const call_site& one, const call_site& other) {
  fail(fmt::format("collectives out of step: {} is in {} #{} at {} while {} is in {} #{} at {}",
                   describe(one.group_rank), one.name, one.sequence, one.site, describe(other.group_rank), other.name,
                   other.sequence, other.site),
       rank_);
}

void tcp_tree::out_of_step(int group_rank, std::string_view name, std::uint64_t sequence, std::string_view site,
                           const exchange& ex) {
  out_of_step({group_rank, name, sequence, site}, {rank_, ex.name, sequence_, ex.site});
}

void tcp_tree::check_slot_in_step(int index, const exchange& ex) {
  const auto& slot = segment_->member(index);
  const std::string_view name(slot.name, slot.name_size);
  if (slot.sequence != sequence_ || name != std::string_view(ex.name).substr(0, node_segment::text_capacity)) {
    const call_site member{node_members_[static_cast<std::size_t>(index)], name, slot.sequence,
                           std::string_view(slot.site, slot.site_size)};
    // A member behind this one may be behind because a source posted a broadcast with its number
    // and went on: that broadcast, not the source's later collective, is the other call site.
    const auto* mail = slot.sequence < sequence_ ? posted_mail(slot.sequence) : nullptr;
    if (mail && std::string_view(mail->name, mail->name_size) != name) {
      out_of_step(member, {mail->source, std::string_view(mail->name, mail->name_size), slot.sequence,
                           std::string_view(mail->site, mail->site_size)});
    }
    out_of_step(member, {rank_, ex.name, sequence_, ex.site});
  }
}

void tcp_tree::message_failed(const link& l, const exchange& ex) {
  try {
    throw;
  } catch (const protocol_violation& v) {
    broke_protocol(l, v, ex);
  } catch (const socket_closed& e) {
    lost(l, e.why, ex);
  } catch (const socket_timeout&) {
    fail(fmt::format("{} stalled mid-message during {} at {}", describe(l.peer), ex.name, ex.site), l.peer);
  }
}

void tcp_tree::send_failed(const link& l, const exchange& ex) {
  try {
    throw;
  } catch (const socket_closed& e) {
    lost(l, e.why, ex);
  } catch (const socket_timeout&) {
    fail(fmt::format("{} stopped reading during {} at {}", describe(l.peer), ex.name, ex.site), l.peer);
  }
}

void tcp_tree::result_failed(const link& parent, const exchange& ex) {
  try {
    throw;
  } catch (const socket_timeout&) {
    fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the result from {}: some rank outside "
                     "this rank's subtree never arrived",
                     ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(parent.peer)),
         rank_, errc::timeout);
  } catch (...) {
    message_failed(parent, ex);
  }
}

void tcp_tree::parent_spoke(const exchange& ex, time_point deadline) {
  const auto& parent = parent_link_.front();
  try {
    const frame f = receive_frame(parent.fd, deadline);
    check_from_parent(f, ex);
    fail(fmt::format("{} sent {} #{} before {} had contributed to {} #{}", describe(parent.peer), f.name,
                     f.header.sequence, describe(rank_), ex.name, sequence_),
         rank_, errc::internal);
  } catch (...) {
    message_failed(parent, ex);
  }
}

bool tcp_tree::receive_child(std::size_t i, const exchange& ex, time_point deadline, std::vector<rank_bytes>& entries) {
  const auto& child = children_[i];
  std::vector<rank_bytes> under;
  try {
    auto f = next_from_child(i, ex, deadline);
    if (!f) return false;
    check_in_step(child, *f, ex, deadline);
    receive_payload(child.fd, *f, deadline);
    under = parse_entries(f->payload, static_cast<int>(members_.size()));
  } catch (...) {
    message_failed(child, ex);
  }
  std::move(under.begin(), under.end(), std::back_inserter(entries));
  return true;
}

std::optional<frame> tcp_tree::next_from_child(std::size_t i, const exchange& ex, time_point deadline) {
  auto& child = children_[i];
  while (true) {
    frame f = receive_frame_head(child.fd, deadline);
    if (!is(f.header, frame_type::receipt)) {
      const auto& pending = child.unconfirmed;
      if (is(f.header, frame_type::up) && !pending.empty() && pending.front().sequence == f.header.sequence) {
        const auto& b = pending.front();
        out_of_step({child.peer, f.name, f.header.sequence, f.site}, {0, b.name, b.sequence, b.site});
      }
      return f;
    }
    confirm(i, f, ex);
    if (!readable_now(child.fd)) return std::nullopt;
  }
}

void tcp_tree::confirm(std::size_t i, const frame& receipt, const exchange& ex) {
  auto& child = children_[i];
  auto& pending = child.unconfirmed;
  const auto sequence = receipt.header.sequence;
  const call_site theirs{child.peer, receipt.name, sequence, receipt.site};
  if (!pending.empty() && pending.front().sequence == sequence) {
    if (pending.front().name != receipt.name) {
      out_of_step(theirs, {0, pending.front().name, sequence, pending.front().site});
    }
    pending.pop_front();
    return;
  }
  // The child entered a broadcast that went one way while this rank is in another collective.
  if (sequence == sequence_) out_of_step(theirs, {rank_, ex.name, sequence_, ex.site});
  throw protocol_violation{
      fmt::format("a receipt for {} #{}, which this rank never passed on to it", receipt.name, sequence)};
}

std::optional<frame_header> tcp_tree::skip_receipts(std::size_t i, const exchange& ex, time_point deadline) {
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

void tcp_tree::check_child(std::size_t i, const exchange& ex, time_point deadline) {
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

void tcp_tree::drain_receipts(const exchange& ex, time_point deadline) {
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto next = skip_receipts(i, ex, deadline);
    // A failure behind the receipts reaches this rank now rather than at its next collective.
    if (next && (is(*next, frame_type::abort) || (is(*next, frame_type::up) && !children_[i].unconfirmed.empty())))
      check_child(i, ex, deadline);
  }
}

void tcp_tree::check_from_parent(const frame& f, const exchange& ex) {
  if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
  if (f.header.sequence == sequence_ && f.name == ex.name) return;
  // Only a broadcast that went one way comes down before this rank's contribution went up: its
  // origin is the source, its site the source's.
  const auto source = static_cast<int>(std::min<std::uint64_t>(f.header.origin, members_.size() - 1));
  out_of_step({rank_, ex.name, sequence_, ex.site}, {source, f.name, f.header.sequence, f.site});
}

void tcp_tree::check_links(const exchange& ex, time_point deadline, const take_child& take, std::vector<bool>& done,
                           std::size_t& pending) {
  std::vector<pollfd> fds;
  for (std::size_t i = 0; i < children_.size(); ++i)
    fds.push_back(pollfd{done[i] ? -1 : children_[i].fd, POLLIN | POLLRDHUP, 0});
  if (!parent_link_.empty()) fds.push_back(pollfd{parent_link_.front().fd, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), 0) <= 0) return;
  if (!parent_link_.empty() && fds.back().revents != 0) parent_spoke(ex, deadline);
  for (std::size_t i = 0; i < children_.size(); ++i) {
    // A child's contribution waits in its socket; one that closed (or aborted and closed) cannot.
    if (done[i] || (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0 || !take(i)) continue;
    done[i] = true;
    --pending;
  }
}

std::size_t tcp_tree::await_node(const exchange& ex, time_point deadline, const take_child& take,
                                 std::vector<bool>& done, std::size_t& pending) {
  using bell = node_segment::bell;
  auto& segment = *segment_;
  const auto seq = low_bits(sequence_);
  const auto count = node_members_.size();
  // For the messages of node-mates that time out or find themselves out of step.
  sign_slot(ex, {}, false, 0);
  segment.arrive();
  // Waits until every node-mate's word is at seq; fails as soon as anything else happens.
  const auto wait_for_mates = [&](auto word_of, std::vector<bool> in) {
    auto waiting = static_cast<std::size_t>(std::count(in.begin(), in.end(), false));
    auto next_check = clock::now() + check_interval;
    std::uint32_t last = 0;
    for (bool first = true;; first = false) {
      const auto seen = segment.bell_value(bell::up);
      for (std::size_t i = 1; i < count; ++i) {
        if (in[i]) continue;
        auto& slot = segment.member(static_cast<int>(i));
        if (segment.load(word_of(slot)) != seq) continue;
        check_slot_in_step(static_cast<int>(i), ex);
        in[i] = true;
        --waiting;
      }
      if (waiting == 0) return;
      const auto now = clock::now();
      const bool tick = now >= next_check;
      check_node(ex, tick);
      if (now >= deadline) {
        std::vector<int> missing;
        for (std::size_t i = 1; i < count; ++i) {
          if (!in[i]) missing.push_back(members_[static_cast<std::size_t>(node_members_[i])]);
        }
        std::vector<bool> arrived = done;
        for (std::size_t i = 0; i < children_.size(); ++i) {
          const auto next = arrived[i] ? std::nullopt : skip_receipts(i, ex, deadline);
          arrived[i] = arrived[i] || (next && !is(*next, frame_type::receipt));
        }
        time_out(ex, arrived, missing);
      }
      if (tick) {
        check_links(ex, deadline, take, done, pending);
        next_check = now + check_interval;
      }
      // Spins only after something happened, not after a wake-up for the checks.
      if (segment.wait(bell::up, seen, std::min(deadline, next_check), first || seen != last)) interruption_point();
      last = seen;
    }
  };
  std::vector<bool> in(count, false);
  in[0] = true;
  wait_for_mates([](node_segment::slot& s) -> std::uint32_t& { return s.arrived; }, in);

  // Large contributions: the leader says where each goes in the data region, then waits for them.
  const auto total = grant_places(ex, 0);
  if (total > 0) {
    for (std::size_t i = 1; i < count; ++i) in[i] = !in_data_region(segment.member(static_cast<int>(i)));
    wait_for_mates([](node_segment::slot& s) -> std::uint32_t& { return s.filled; }, in);
  }
  return total;
}

std::size_t tcp_tree::grant_places(const exchange& ex, int finisher) {
  auto& segment = *segment_;
  std::size_t total = 0;
  for (int i = 0; i < static_cast<int>(node_members_.size()); ++i) {
    auto& slot = segment.member(i);
    if (i == finisher || !in_data_region(slot)) continue;
    slot.data_offset = total;
    total += (slot.size + 63) / 64 * 64;
  }
  if (total == 0) return 0;
  try {
    segment.reserve(total, describe(rank_));
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  segment.store(segment.grant_word(), low_bits(sequence_));
  segment.ring(node_segment::bell::down);
  return total;
}

std::span<const std::byte> tcp_tree::contribution(int index, std::size_t used) {
  auto& slot = segment_->member(index);
  if (slot.size <= node_segment::inline_capacity) return {slot.payload, static_cast<std::size_t>(slot.size)};
  return segment_->data(used, describe(rank_)).subspan(slot.data_offset, slot.size);
}

void tcp_tree::await_children(const exchange& ex, time_point deadline, const take_child& take, std::vector<bool>& done,
                              std::size_t& pending) {
  std::vector<pollfd> fds;
  while (pending > 0) {
    fds.clear();
    for (std::size_t i = 0; i < children_.size(); ++i) fds.push_back(pollfd{done[i] ? -1 : children_[i].fd, POLLIN, 0});
    // The parent sends nothing before it has this rank's contribution, except an abort or its
    // closing: watch it too, so that a failure elsewhere does not wait for a slow child.
    if (!parent_link_.empty()) fds.push_back(pollfd{parent_link_.front().fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) {
      interruption_point();
      continue;
    }
    if (ready == 0) time_out(ex, done, {});
    if (!parent_link_.empty() && fds.back().revents != 0) parent_spoke(ex, deadline);
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (done[i] || fds[i].revents == 0 || !take(i)) continue;
      done[i] = true;
      --pending;
    }
  }
}

std::vector<rank_bytes> tcp_tree::gather_up(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  std::vector<rank_bytes> entries;
  if (ex.mine) entries.push_back(rank_bytes{rank_, {ex.mine->begin(), ex.mine->end()}});

  std::vector<bool> done(children_.size(), false);
  std::size_t pending = children_.size();
  const take_child take = [&](std::size_t i) { return receive_child(i, ex, deadline, entries); };
  if (node_leader()) {
    const auto used = await_node(ex, deadline, take, done, pending);
    for (std::size_t i = 1; i < node_members_.size(); ++i) {
      if (segment_->member(static_cast<int>(i)).has_payload == 0) continue;
      const auto bytes = contribution(static_cast<int>(i), used);
      entries.push_back(rank_bytes{node_members_[i], {bytes.begin(), bytes.end()}});
    }
  }
  await_children(ex, deadline, take, done, pending);
  return entries;
}

void tcp_tree::publish_to_node(const exchange& ex, const std::vector<rank_bytes>& entries,
                               std::span<const std::byte> everyone) {
  std::vector<std::byte> selected;
  if (ex.to != delivery::everyone) {
    std::vector<const rank_bytes*> down;
    for (const auto& e : entries) {
      const int r = ex.to == delivery::one_rank ? ex.target : e.rank;
      if (r != rank_ && std::find(node_members_.begin(), node_members_.end(), r) != node_members_.end())
        down.push_back(&e);
    }
    append_entries(selected, down);
    everyone = selected;
  }
  check_size(everyone.size(), ex);
  try {
    segment_->reserve(everyone.size(), describe(rank_));
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  if (!everyone.empty()) {
    std::memcpy(segment_->data(everyone.size(), describe(rank_)).data(), everyone.data(), everyone.size());
  }
  segment_->set_result_size(everyone.size());
  segment_->store(segment_->result_word(), low_bits(sequence_));
  segment_->ring(node_segment::bell::down);
}

template <class Ready, class TimedOut>
void tcp_tree::wait_in_segment(node_segment::bell b, const exchange& ex, time_point deadline, Ready&& ready,
                               TimedOut&& timed_out) {
  const std::function<bool()> excused = [&] { return ready(); };
  auto next_check = clock::now() + check_interval;
  std::uint32_t last = 0;
  for (bool first = true;; first = false) {
    const auto seen = segment_->bell_value(b);
    if (ready()) return;
    const auto now = clock::now();
    const bool tick = now >= next_check;
    check_node(ex, tick, excused);
    if (now >= deadline) timed_out();
    if (tick) next_check = now + check_interval;
    // Spins only after something happened, not after a wake-up for the checks.
    if (segment_->wait(b, seen, std::min(deadline, next_check), first || seen != last)) interruption_point();
    last = seen;
  }
}

void tcp_tree::never_arrived(const exchange& ex, const std::vector<int>& missing) {
  fail(fmt::format("{} at {} timed out after {} ms on {}: rank(s) {} never arrived (at least one of them "
                   "is late, stuck or in another collective)",
                   ex.name, ex.site, ex.timeout.count(), describe(rank_), fmt::join(missing, ", ")),
       rank_, errc::timeout);
}

template <class Ready>
void tcp_tree::wait_for_leader(const exchange& ex, time_point deadline, Ready&& ready) {
  wait_in_segment(node_segment::bell::down, ex, deadline, ready, [&] {
    if (const auto missing = not_arrived(); !missing.empty()) never_arrived(ex, missing);
    fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the result from {}: some rank outside "
                     "this rank's node never arrived",
                     ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(node_members_.front())),
         rank_, errc::timeout);
  });
}

void tcp_tree::wait_for_result(const exchange& ex, time_point deadline) {
  const auto seq = low_bits(sequence_);
  wait_for_leader(ex, deadline, [&] { return segment_->load(segment_->result_word()) == seq; });
}

void tcp_tree::sign_slot(const exchange& ex, std::span<const std::byte> mine, bool has_payload,
                         std::uint64_t bulk_size) {
  auto& slot = segment_->member(node_index_);
  slot.sequence = sequence_;
  slot.size = mine.size();
  slot.has_payload = has_payload ? 1 : 0;
  slot.bulk_size = bulk_size;
  copy_text(slot.name, slot.name_size, ex.name);
  copy_text(slot.site, slot.site_size, ex.site);
  if (!mine.empty() && mine.size() <= node_segment::inline_capacity) {
    std::memcpy(slot.payload, mine.data(), mine.size());
  }
  segment_->store(slot.arrived, low_bits(sequence_));
}

void tcp_tree::contribute_to_node(const exchange& ex, time_point deadline, std::span<const std::byte> mine,
                                  bool has_payload, std::uint64_t bulk_size) {
  auto& segment = *segment_;
  const auto seq = low_bits(sequence_);
  sign_slot(ex, mine, has_payload, bulk_size);
  const bool large = mine.size() > node_segment::inline_capacity;
  // One wake-up of the leader per exchange, by the last to arrive (the leader counts itself too):
  // on a node with more ranks than cores each wake-up is a context switch.
  if (segment.arrive() == sequence_ * node_members_.size()) segment.ring(node_segment::bell::up);
  if (!large) return;
  wait_for_leader(ex, deadline, [&] { return segment.load(segment.grant_word()) == seq; });
  fill_granted(ex, mine);
}

void tcp_tree::fill_granted(const exchange& ex, std::span<const std::byte> mine) {
  auto& segment = *segment_;
  auto& slot = segment.member(node_index_);
  try {
    std::memcpy(segment.data(slot.data_offset + mine.size(), describe(rank_)).data() + slot.data_offset, mine.data(),
                mine.size());
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  segment.store(slot.filled, low_bits(sequence_));
  segment.ring(node_segment::bell::up);
}

std::vector<rank_bytes> tcp_tree::exchange_on_node(const exchange& ex) {
  auto& segment = *segment_;
  const auto deadline = clock::now() + ex.timeout;
  const auto seq = low_bits(sequence_);
  const auto target = sequence_ * node_members_.size();
  check_node(ex, false);
  const auto mine = ex.mine.value_or(std::span<const std::byte>{});
  if (ex.mine) check_size(mine.size(), ex);
  sign_slot(ex, mine, ex.mine.has_value(), 0);
  std::optional<std::vector<rank_bytes>> finished;
  // One member finishes (the claim), before anyone can leave and sign its slot anew.
  const auto try_finish = [&] {
    if (finished || !segment.claim(seq, node_index_)) return;
    try {
      finished = finish_on_node(ex, deadline, mine);
    } catch (...) {
      // fail() and user_step() have told the others; anything else (no memory, an interruption)
      // must too, or they would wait for this rank's result until their deadline.
      if (broken_.empty()) {
        spread_abort(fmt::format("{} at {} failed on {}, which was finishing it for its node", ex.name, ex.site,
                                 describe(rank_)),
                     rank_, errc::peer_failure);
      }
      throw;
    }
  };
  const auto published = [&] { return segment.load(segment.result_word()) == seq; };
  // A node-mate in another collective may be the last: it rings only the leader's bell, so the
  // leader, which looks again at least every check_interval, finds that out.
  const auto leader_looks = [&] {
    if (node_index_ == 0 && !published() && segment.arrivals() >= target) try_finish();
  };
  const auto stalled = [&] { finish_stalled(ex); };
  if (segment.arrive() == target) try_finish();
  if (mine.size() > node_segment::inline_capacity && !finished) {
    wait_in_segment(
        node_segment::bell::down, ex, deadline,
        [&] {
          leader_looks();
          return finished || segment.load(segment.grant_word()) == seq;
        },
        stalled);
    if (!finished) fill_granted(ex, mine);
  }
  if (finished) return std::move(*finished);
  wait_in_segment(
      node_segment::bell::down, ex, deadline,
      [&] {
        leader_looks();
        return finished || published();
      },
      stalled);
  if (finished) return std::move(*finished);
  if (ex.synchronize_only) return {};
  return read_result(ex);
}

std::vector<int> tcp_tree::unfilled(int finisher) {
  auto& segment = *segment_;
  std::vector<int> ranks;
  for (int i = 0; i < static_cast<int>(node_members_.size()); ++i) {
    const auto& slot = segment.member(i);
    if (i != finisher && in_data_region(slot) && segment.load(slot.filled) != low_bits(sequence_))
      ranks.push_back(members_[static_cast<std::size_t>(node_members_[static_cast<std::size_t>(i)])]);
  }
  return ranks;
}

void tcp_tree::pieces_not_filled(const exchange& ex, const std::vector<int>& ranks) {
  fail(fmt::format("{} at {} timed out after {} ms on {}: rank(s) {} arrived but never copied in their "
                   "contribution past {} bytes (stuck, or stopped)",
                   ex.name, ex.site, ex.timeout.count(), describe(rank_), fmt::join(ranks, ", "),
                   node_segment::inline_capacity),
       rank_, errc::timeout);
}

std::vector<int> tcp_tree::not_arrived() {
  std::vector<int> ranks;
  for (std::size_t i = 0; i < node_members_.size(); ++i) {
    if (segment_->load(segment_->member(static_cast<int>(i)).arrived) != low_bits(sequence_))
      ranks.push_back(members_[static_cast<std::size_t>(node_members_[i])]);
  }
  return ranks;
}

void tcp_tree::finish_stalled(const exchange& ex) {
  auto& segment = *segment_;
  const auto seq = low_bits(sequence_);
  if (const auto missing = not_arrived(); !missing.empty()) never_arrived(ex, missing);
  const int finisher = segment.finisher(seq);
  if (finisher >= 0 && segment.load(segment.grant_word()) == seq) {
    if (const auto ranks = unfilled(finisher); !ranks.empty()) pieces_not_filled(ex, ranks);
  }
  const auto who = finisher >= 0 ? describe(node_members_[static_cast<std::size_t>(finisher)]) : "no rank";
  fail(fmt::format("{} at {} timed out after {} ms on {}: every rank arrived, but {}, which arrived last and "
                   "finishes the exchange, did not publish the result (a slow operation, or stopped)",
                   ex.name, ex.site, ex.timeout.count(), describe(rank_), who),
       rank_, errc::timeout);
}

std::vector<rank_bytes> tcp_tree::finish_on_node(const exchange& ex, time_point deadline,
                                                 std::span<const std::byte> mine) {
  auto& segment = *segment_;
  const auto count = static_cast<int>(node_members_.size());
  check_mail_in_step(ex);  // a broadcast's source went on: name its broadcast, not its next collective
  for (int i = 0; i < count; ++i) check_slot_in_step(i, ex);
  const auto total = grant_places(ex, node_index_);
  if (total > 0) {
    wait_in_segment(
        node_segment::bell::up, ex, deadline, [&] { return unfilled(node_index_).empty(); },
        [&] { pieces_not_filled(ex, unfilled(node_index_)); });
  }
  std::vector<rank_bytes> entries;
  for (int i = 0; i < count; ++i) {
    if (segment.member(i).has_payload == 0) continue;
    const auto bytes = i == node_index_ ? mine : contribution(i, total);
    entries.push_back(rank_bytes{node_members_[static_cast<std::size_t>(i)], {bytes.begin(), bytes.end()}});
  }
  if (ex.fold && !entries.empty()) {
    entries = user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const auto everyone = all_entries(entries);
  check_members(ex, false);  // the others may have given up meanwhile (a slow operation): fail as they did
  publish_to_node(ex, entries, everyone);
  return entries;
}

std::vector<rank_bytes> tcp_tree::run_as_node_mate(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  check_node(ex, false);
  const auto mine = ex.mine.value_or(std::span<const std::byte>{});
  if (ex.mine) check_size(mine.size(), ex);
  contribute_to_node(ex, deadline, mine, ex.mine.has_value(), 0);
  wait_for_result(ex, deadline);
  return read_result(ex);
}

std::vector<rank_bytes> tcp_tree::read_result(const exchange& ex) {
  auto& segment = *segment_;
  const auto size = static_cast<std::size_t>(segment.result_size());
  std::vector<rank_bytes> entries;
  try {
    entries = parse_entries(segment.data(size, describe(rank_)).first(size), static_cast<int>(members_.size()));
  } catch (const protocol_violation& v) {
    fail(fmt::format("{} found {} in the node's shared memory during {} at {}: a bug, memory corruption, or two "
                     "jobkit builds in one step",
                     describe(rank_), v.what, ex.name, ex.site),
         rank_, errc::internal);
  } catch (const error& e) {
    fail(fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), rank_, e.code());
  }
  if (ex.to == delivery::one_rank && ex.target != rank_) return {};
  if (ex.to == delivery::each_own) {
    std::erase_if(entries, [&](const rank_bytes& e) { return e.rank != rank_; });
  }
  return entries;
}

std::optional<std::vector<rank_bytes>> tcp_tree::broadcast_on_node(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  // A source that posted its last broadcast may have left the group already: the others look
  // for the mail before they look at the node.
  if (ex.source != rank_) return take_mail(ex, deadline);
  check_node(ex, false);
  const auto mine = ex.mine.value_or(std::span<const std::byte>{});
  if (!post_mail(ex, deadline, mine, mine.size() <= node_segment::inline_capacity, ex.site)) return std::nullopt;
  return std::vector<rank_bytes>{rank_bytes{rank_, {mine.begin(), mine.end()}}};
}

std::optional<std::vector<rank_bytes>> tcp_tree::broadcast_across_nodes(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  if (node_index_ > 0) return take_mail(ex, deadline);
  if (segment_) check_members(ex, false);
  std::vector<rank_bytes> entries;
  std::vector<std::byte> everyone;
  std::string source_site = ex.site;
  bool one_way = true;
  if (parent_link_.empty()) {
    const auto mine = ex.mine.value_or(std::span<const std::byte>{});
    one_way = mine.size() <= node_segment::inline_capacity;
    if (one_way) {
      entries.push_back(rank_bytes{rank_, {mine.begin(), mine.end()}});
      append_entries(everyone, {&entries.front()});
    }
  } else {
    const auto& parent = parent_link_.front();
    try {
      send_frame(parent.fd, frame_type::receipt, sequence_, rank_, ex.name, ex.site, {}, deadline);
    } catch (const socket_closed&) {
      // The parent may have passed the bytes on and left the group: they wait in this socket.
    } catch (...) {
      send_failed(parent, ex);
    }
    // Owed from here on: the children's receipts may arrive while this rank waits.
    for (auto& child : children_) child.unconfirmed.push_back({sequence_, ex.name, ex.site});
    frame f = await_broadcast(ex, deadline);
    for (auto& child : children_) {  // unless the receipt came back while this rank waited
      if (!child.unconfirmed.empty() && child.unconfirmed.back().sequence == sequence_)
        child.unconfirmed.back().site = f.site;
    }
    one_way = is(f.header, frame_type::down);
    if (one_way) {
      try {
        entries = parse_entries(f.payload, static_cast<int>(members_.size()));
        if (entries.size() != 1 || entries.front().rank != 0 ||
            entries.front().bytes.size() > node_segment::inline_capacity) {
          throw protocol_violation{"a one-way broadcast that is not one entry of group rank 0 within 7 KiB"};
        }
      } catch (const protocol_violation& v) {
        broke_protocol(parent, v, ex);
      }
      everyone = std::move(f.payload);
    }
    source_site = std::move(f.site);
  }
  // The node first, as the ordinary exchange does: measured faster on nodes with more ranks than
  // cores (bench/RESULTS.md, "a one-way broadcast across nodes": 404f3f4, recorded 2026-11-24 at 8bb13f0).
  if (segment_) {
    const auto bytes = one_way ? std::span<const std::byte>(entries.front().bytes) : std::span<const std::byte>{};
    post_mail(ex, deadline, bytes, one_way, source_site);
  }
  for (auto& child : children_) {
    try {
      send_frame(child.fd, one_way ? frame_type::down : frame_type::by_tree, sequence_, 0, ex.name, source_site,
                 everyone, deadline);
    } catch (...) {
      send_failed(child, ex);
    }
    if (parent_link_.empty()) child.unconfirmed.push_back({sequence_, ex.name, ex.site});
  }
  drain_receipts(ex, deadline);
  if (!one_way) return std::nullopt;
  return entries;
}

frame tcp_tree::await_broadcast(const exchange& ex, time_point deadline) {
  const auto& parent = parent_link_.front();
  // The children too: one that fails, dies or is in another collective must not wait for the root.
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back(pollfd{parent.fd, POLLIN, 0});
    for (const auto& child : children_) fds.push_back(pollfd{child.fd, POLLIN | POLLRDHUP, 0});
    const auto wait = std::min<int>(remaining_ms(deadline), static_cast<int>(check_interval.count()));
    const int ready = ::poll(fds.data(), fds.size(), wait);
    if (ready < 0 && errno == EINTR) interruption_point();
    if (ready > 0 && fds.front().revents != 0) break;
    for (std::size_t i = 0; ready > 0 && i < children_.size(); ++i) {
      if (fds[i + 1].revents != 0) check_child(i, ex, deadline);
    }
    if (segment_) check_members(ex, true);
    if (clock::now() >= deadline) {
      fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the broadcast from {}: rank {} or a rank "
                       "between never arrived",
                       ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(parent.peer), members_.front()),
           rank_, errc::timeout);
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

int tcp_tree::mail_poster(int source) const {
  const auto at = std::find(node_members_.begin(), node_members_.end(), source);
  return at == node_members_.end() ? 0 : static_cast<int>(at - node_members_.begin());
}

bool tcp_tree::post_mail(const exchange& ex, time_point deadline, std::span<const std::byte> bytes, bool fits,
                         std::string_view source_site) {
  auto& segment = *segment_;
  auto& mail = segment.mail_for(sequence_);
  // The mailbox's last broadcast must have been taken by every member before it is reused.
  wait_in_segment(
      node_segment::bell::up, ex, deadline, [&] { return segment.load(mail.readers_left) == 0; },
      [&] { mail_not_taken(ex, mail); });
  if (!segment.exchange_word(mail.claimed, segment.load(mail.claimed), sequence_)) {
    // Another member posts a broadcast with this number: it believes itself the source.
    wait_in_segment(
        node_segment::bell::down, ex, deadline, [&] { return segment.load(mail.posted) == low_bits(sequence_); },
        [&] {
          fail(fmt::format("{} at {} timed out after {} ms on {}: another rank claimed #{} for a broadcast and never "
                           "posted it",
                           ex.name, ex.site, ex.timeout.count(), describe(rank_), sequence_),
               rank_, errc::timeout);
        });
    out_of_step(mail.source, std::string_view(mail.name, mail.name_size), sequence_,
                std::string_view(mail.site, mail.site_size), ex);
  }
  mail.source = ex.source;
  mail.too_large = fits ? 0 : 1;
  mail.size = fits ? bytes.size() : 0;
  copy_text(mail.name, mail.name_size, ex.name);
  copy_text(mail.site, mail.site_size, source_site);
  if (fits && !bytes.empty()) std::memcpy(mail.payload, bytes.data(), bytes.size());
  segment.store(mail.readers_left, static_cast<std::uint32_t>(node_members_.size() - 1));
  // Every member's arrival at once: the counts of the exchanges after this one stay right.
  if (fits) segment.arrive(node_members_.size());
  segment.store(mail.posted, low_bits(sequence_));
  segment.ring(node_segment::bell::down);
  return fits;
}

void tcp_tree::mail_not_taken(const exchange& ex, node_segment::mail& mail) {
  const auto earlier = segment_->load(mail.claimed);
  const auto poster = static_cast<std::size_t>(mail_poster(mail.source));
  std::vector<int> missing;
  for (std::size_t i = 0; i < node_members_.size(); ++i) {
    if (i != poster && segment_->load(segment_->member(static_cast<int>(i)).taken) < earlier)
      missing.push_back(members_[static_cast<std::size_t>(node_members_[i])]);
  }
  fail(fmt::format("{} at {} timed out after {} ms on {}: rank(s) {} never took {} #{} at {}, whose mailbox {} "
                   "needs for #{} (at least one of them is late, stuck or in another collective)",
                   ex.name, ex.site, ex.timeout.count(), describe(rank_), fmt::join(missing, ", "),
                   std::string_view(mail.name, mail.name_size), earlier, std::string_view(mail.site, mail.site_size),
                   describe(node_members_[poster]), sequence_),
       rank_, errc::timeout);
}

std::optional<std::vector<rank_bytes>> tcp_tree::take_mail(const exchange& ex, time_point deadline) {
  auto& segment = *segment_;
  auto& mail = segment.mail_for(sequence_);
  const int source = mail_poster(ex.source);
  const auto& source_slot = segment.member(source);
  wait_in_segment(
      node_segment::bell::down, ex, deadline,
      [&] {
        if (posted_mail(sequence_)) return true;
        // The source signs its slot only in other collectives, which cannot end without this member.
        if (segment.load(source_slot.arrived) == low_bits(sequence_)) check_slot_in_step(source, ex);
        return false;
      },
      [&] {
        // The source may be waiting for a member that has not taken an earlier broadcast.
        if (segment.load(mail.claimed) < sequence_ && segment.load(mail.readers_left) != 0) mail_not_taken(ex, mail);
        if (node_members_[static_cast<std::size_t>(source)] != ex.source) {
          fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the broadcast from {}, which {} passes on "
                           "to this node: rank {} or a rank between never arrived",
                           ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(ex.source),
                           describe(node_members_.front()), members_[static_cast<std::size_t>(ex.source)]),
               rank_, errc::timeout);
        }
        never_arrived(ex, {members_[static_cast<std::size_t>(ex.source)]});
      });
  const std::string_view name(mail.name, mail.name_size);
  if (name != std::string_view(ex.name).substr(0, node_segment::text_capacity)) {
    out_of_step(mail.source, name, sequence_, std::string_view(mail.site, mail.site_size), ex);
  }
  std::optional<std::vector<rank_bytes>> entries;
  if (mail.too_large == 0) {
    if (mail.size > node_segment::inline_capacity) {
      fail(fmt::format("{} found a broadcast of {} bytes in the node's shared memory during {} at {}: a bug, memory "
                       "corruption, or two jobkit builds in one step",
                       describe(rank_), mail.size, ex.name, ex.site),
           rank_, errc::internal);
    }
    entries.emplace();
    entries->push_back(rank_bytes{mail.source, {mail.payload, mail.payload + mail.size}});
  }
  segment.store(segment.member(node_index_).taken, sequence_);
  if (segment.count_down(mail.readers_left) == 0) segment.ring(node_segment::bell::up);
  return entries;
}

void tcp_tree::begin_exchange(const exchange& ex) {
  if (!broken_.empty()) {
    raise(broken_code_,
          fmt::format("{} at {}: this group is unusable after an earlier failure: {}", ex.name, ex.site, broken_));
  }
  ++sequence_;
}

std::vector<rank_bytes> tcp_tree::run(const exchange& ex) {
  begin_exchange(ex);
  if (segment_ && node_members_.size() == members_.size()) {
    if (ex.source >= 0) {
      if (auto entries = broadcast_on_node(ex)) return std::move(*entries);
    } else if (ex.synchronize_only || (ex.to == delivery::everyone && !ex.finish)) {
      return exchange_on_node(ex);
    }
  } else if (ex.source == 0 && members_.size() > 1 && ex.to == delivery::everyone && !ex.fold && !ex.finish) {
    if (auto entries = broadcast_across_nodes(ex)) return std::move(*entries);
  }
  if (node_index_ > 0) return run_as_node_mate(ex);
  auto entries = gather_up(ex);
  if (ex.fold && !entries.empty()) {
    entries = user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  const auto deadline = clock::now() + ex.timeout;
  std::vector<std::byte> everyone;  // what every child receives when the result goes to everyone
  if (!parent_link_.empty()) {
    const auto& parent = parent_link_.front();
    std::vector<const rank_bytes*> up;
    for (const auto& e : entries) up.push_back(&e);
    std::vector<std::byte> payload;
    append_entries(payload, up);
    check_size(payload.size(), ex);
    try {
      send_frame(parent.fd, frame_type::up, sequence_, rank_, ex.name, ex.site, payload, deadline);
      frame f = receive_frame(parent.fd, deadline);
      check_from_parent(f, ex);
      entries = parse_entries(f.payload, static_cast<int>(members_.size()));
      if (ex.to == delivery::everyone) everyone = std::move(f.payload);
    } catch (...) {
      result_failed(parent, ex);
    }
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    if (ex.finish) entries = user_step(ex, [&] { return ex.finish(entries); });
    if (ex.to == delivery::everyone && (!children_.empty() || node_leader())) everyone = all_entries(entries);
  }
  if (node_leader()) publish_to_node(ex, entries, everyone);

  std::vector<std::byte> selected;
  for (std::size_t i = 0; i < children_.size(); ++i) {
    const auto below = [&](const rank_bytes& e) {
      const int rank = ex.to == delivery::one_rank ? ex.target : e.rank;
      return rank >= 0 && rank < static_cast<int>(child_of_.size()) &&
             child_of_[static_cast<std::size_t>(rank)] == static_cast<int>(i);
    };
    if (ex.to != delivery::everyone) {
      std::vector<const rank_bytes*> down;
      for (const auto& e : entries) {
        if (below(e)) down.push_back(&e);
      }
      selected.clear();
      append_entries(selected, down);
    }
    const auto& child = children_[i];
    const auto& down = ex.to == delivery::everyone ? everyone : selected;
    check_size(down.size(), ex);
    try {
      send_frame(child.fd, frame_type::down, sequence_, rank_, ex.name, ex.site, down, deadline);
    } catch (...) {
      send_failed(child, ex);
    }
  }

  if (ex.to == delivery::one_rank && ex.target != rank_) return {};
  if (ex.to == delivery::each_own) {
    std::erase_if(entries, [&](const rank_bytes& e) { return e.rank != rank_; });
  }
  return entries;
}

group make_tcp_group(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout,
                     subgroup_maker make_subgroup) {
  auto state = std::make_shared<group_state>();
  state->world_ranks = members;
  state->rank = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  state->link = std::make_unique<tcp_tree>(fabric, members, timeout);
  for (const int r : members) {
    state->hosts.push_back(fabric.endpoints()[static_cast<std::size_t>(r)].host);
    state->local_ranks.push_back(fabric.endpoints()[static_cast<std::size_t>(r)].local_rank);
  }
  state->make_subgroup =
      make_subgroup ? std::move(make_subgroup) : [&fabric](const std::vector<int>& ranks, std::chrono::milliseconds t) {
        return make_tcp_group(fabric, ranks, t);
      };
  return group(std::move(state));
}

}  // namespace jobkit::detail
