#include "transport/tree.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>

#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "jobkit/error.hpp"
#include "transport/frame.hpp"
#include "transport/tree_layout.hpp"

namespace jobkit::detail {

using clock = steady_clock;

tcp_tree::tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout)
    : members_(members) {
  const auto deadline = clock::now() + timeout;
  const auto& endpoints = fabric.endpoints();
  rank_ = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  for (const int w : members) hosts_.push_back(endpoints.at(static_cast<std::size_t>(w)).host);

  std::vector<int> nodes;
  for (const int w : members) nodes.push_back(endpoints[static_cast<std::size_t>(w)].node);
  auto position = position_in_tree(tree_parents(nodes), rank_);
  subtree_ = std::move(position.subtrees);
  child_of_ = std::move(position.child_of);
  const auto& child_ranks = position.children;

  const auto key = fabric.next_group_key(members);
  if (const int p = position.parent; p >= 0) {
    parent_link_.push_back(link{fabric.connect(members[static_cast<std::size_t>(p)], key, deadline), p});
  }
  std::vector<int> child_world_ranks;
  for (const int g : child_ranks) child_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  try {
    const auto fds = fabric.accept(child_world_ranks, key, deadline);
    for (std::size_t i = 0; i < fds.size(); ++i) children_.push_back(link{fds[i], child_ranks[i]});
  } catch (...) {
    for (const auto& l : parent_link_) ::close(l.fd);
    throw;
  }
}

tcp_tree::~tcp_tree() {
  for (auto* links : {&children_, &parent_link_}) {
    for (auto& l : *links) {
      if (l.fd >= 0) ::close(l.fd);
    }
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
    if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      exchange context;
      context.name = during;
      lost(*links[i], "connection closed", context);
    }
  }
}

void tcp_tree::lost(const link& l, const std::string& why, const exchange& ex) {
  // The peer may have sent an abort just before closing: its reason is the one to report.
  try {
    if (auto notice = abort_in(receive_frame(l.fd, clock::now() + std::chrono::milliseconds(100)))) {
      fail(notice->reason, notice->origin, notice->code);
    }
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

void tcp_tree::check_size(std::span<const std::byte> payload, const exchange& ex) {
  if (payload.size() <= max_payload_size) return;
  fail(fmt::format("{} at {}: {} bytes would cross one link of the data path on {}, more than its limit of {} "
                   "bytes per collective (move bulk data with NCCL, or in pieces)",
                   ex.name, ex.site, payload.size(), describe(rank_), max_payload_size),
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

std::vector<rank_bytes> tcp_tree::gather_up(const exchange& ex) {
  const auto deadline = clock::now() + ex.timeout;
  std::vector<rank_bytes> entries;
  if (ex.mine) entries.push_back(rank_bytes{rank_, {ex.mine->begin(), ex.mine->end()}});

  std::vector<bool> done(children_.size(), false);
  std::size_t pending = children_.size();
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
    if (ready == 0) {
      std::vector<int> missing;
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
    if (!parent_link_.empty() && fds.back().revents != 0) {
      const auto& parent = parent_link_.front();
      try {
        const frame f = receive_frame(parent.fd, deadline);
        if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
        fail(fmt::format("{} sent {} #{} before {} had contributed to {} #{}", describe(parent.peer), f.name,
                         f.header.sequence, describe(rank_), ex.name, sequence_),
             rank_, errc::internal);
      } catch (const protocol_violation& v) {
        broke_protocol(parent, v, ex);
      } catch (const socket_closed& e) {
        lost(parent, e.why, ex);
      } catch (const socket_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(parent.peer), ex.name, ex.site),
             parent.peer);
      }
    }
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (done[i] || fds[i].revents == 0) continue;
      const auto& child = children_[i];
      std::vector<rank_bytes> under;
      try {
        const frame f = receive_frame(child.fd, deadline);
        if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
        if (f.header.sequence != sequence_ || f.name != ex.name) {
          fail(fmt::format("collectives out of step: {} is in {} #{} at {} while {} is in {} #{} at {}",
                           describe(child.peer), f.name, f.header.sequence, f.site, describe(rank_), ex.name, sequence_,
                           ex.site),
               rank_);
        }
        under = parse_entries(f.payload, static_cast<int>(members_.size()));
      } catch (const protocol_violation& v) {
        broke_protocol(child, v, ex);
      } catch (const socket_closed& e) {
        lost(child, e.why, ex);
      } catch (const socket_timeout&) {
        fail(fmt::format("{} stalled mid-message during {} at {}", describe(child.peer), ex.name, ex.site), child.peer);
      }
      std::move(under.begin(), under.end(), std::back_inserter(entries));
      done[i] = true;
      --pending;
    }
  }
  return entries;
}

std::vector<rank_bytes> tcp_tree::run(const exchange& ex) {
  if (!broken_.empty()) {
    raise(broken_code_,
          fmt::format("{} at {}: this group is unusable after an earlier failure: {}", ex.name, ex.site, broken_));
  }
  ++sequence_;
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
    check_size(payload, ex);
    try {
      send_frame(parent.fd, frame_type::up, sequence_, rank_, ex.name, ex.site, payload, deadline);
      frame f = receive_frame(parent.fd, deadline);
      if (auto notice = abort_in(f)) fail(notice->reason, notice->origin, notice->code);
      entries = parse_entries(f.payload, static_cast<int>(members_.size()));
      if (ex.to == delivery::everyone) everyone = std::move(f.payload);
    } catch (const protocol_violation& v) {
      broke_protocol(parent, v, ex);
    } catch (const socket_closed& e) {
      lost(parent, e.why, ex);
    } catch (const socket_timeout&) {
      fail(fmt::format("{} at {} timed out after {} ms on {} waiting for the result from {}: some rank outside "
                       "this rank's subtree never arrived",
                       ex.name, ex.site, ex.timeout.count(), describe(rank_), describe(parent.peer)),
           rank_, errc::timeout);
    }
  } else {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    if (ex.finish) entries = user_step(ex, [&] { return ex.finish(entries); });
    if (ex.to == delivery::everyone && !children_.empty()) {
      std::vector<const rank_bytes*> all;
      for (const auto& e : entries) all.push_back(&e);
      append_entries(everyone, all);
    }
  }

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
    check_size(down, ex);
    try {
      send_frame(child.fd, frame_type::down, sequence_, rank_, ex.name, ex.site, down, deadline);
    } catch (const socket_closed& e) {
      lost(child, e.why, ex);
    } catch (const socket_timeout&) {
      fail(fmt::format("{} stopped reading during {} at {}", describe(child.peer), ex.name, ex.site), child.peer);
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
