// tcp_tree: a group's data path composed of its two media. tree_node is the members of a node in
// their shared segment, tree_links the node leaders' TCP links; this file sets them up, decides
// which route each exchange takes (routes.hpp, one file per route) and spreads a failure on both.

#include "transport/tree.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include "core/failure.hpp"
#include "core/json.hpp"
#include "core/posix_io.hpp"
#include "recovery/events.hpp"
#include "transport/frame.hpp"
#include "transport/routes.hpp"
#include "transport/tree_layout.hpp"

namespace jobkit::detail {

using clock = steady_clock;

tcp_tree::tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, const time_bound& bound) {
  const auto deadline = bound.deadline;
  const auto& placement = fabric.placement();
  context_.members = members;
  context_.rank = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  for (const int w : members) context_.hosts.push_back(fabric.host_of(w));
  context_.spreader = this;
  const int rank = context_.rank;

  std::vector<int> nodes;
  for (const int w : members) nodes.push_back(placement.node_of.at(static_cast<std::size_t>(w)));
  const auto position = position_in_tree(tree_parents(nodes), rank);
  const int my_node = nodes[static_cast<std::size_t>(rank)];
  std::vector<int> node_members;  // group ranks on this rank's node, leader first
  for (std::size_t g = 0; g < nodes.size(); ++g) {
    if (nodes[g] == my_node) node_members.push_back(static_cast<int>(g));
  }
  const auto node_index =
      static_cast<int>(std::find(node_members.begin(), node_members.end(), rank) - node_members.begin());
  // Node-mates meet in shared memory: only the children on other nodes are TCP links.
  std::vector<int> child_ranks, mates;
  std::vector<std::vector<int>> subtrees;
  for (std::size_t i = 0; i < position.children.size(); ++i) {
    const int c = position.children[i];
    if (nodes[static_cast<std::size_t>(c)] == my_node) {
      mates.push_back(c);
      continue;
    }
    subtrees.push_back(position.subtrees[i]);
    child_ranks.push_back(c);
  }

  const auto key = fabric.next_group_key(members);
  if (node_members.size() > 1) node_ = std::make_unique<tree_node>(context_, node_members, node_index);
  if (node_index > 0) {
    const descriptor setup(fabric.connect(members[static_cast<std::size_t>(node_members.front())], key, deadline));
    node_->join(setup.get(), deadline);
    return;
  }
  if (node_) {
    auto tag = key;
    std::replace(tag.begin(), tag.end(), '#', '.');
    node_->create(fmt::format("{}-{}-n{}", fabric.segment_prefix(), tag, my_node));
  }
  std::optional<tree_links::link> parent;
  if (const int p = position.parent; p >= 0) {
    parent = tree_links::link{fabric.connect(members[static_cast<std::size_t>(p)], key, deadline), p};
  }
  std::vector<int> accepted_world_ranks;
  for (const int g : child_ranks) accepted_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  for (const int g : mates) accepted_world_ranks.push_back(members[static_cast<std::size_t>(g)]);
  // A failure here reaches the ranks already connected with its reason: the children and the
  // parent as an abort in their first collective, the node-mates instead of the segment's name.
  const auto tell = [&](int fd, bool mate, const std::string& message) {
    const auto until = clock::now() + std::chrono::milliseconds(200);
    if (mate) return tree_node::refuse(fd, message, until);
    send_abort(fd, 0, context_.rank, errc::peer_failure, message, until);
  };
  std::vector<int> fds;
  try {
    fds = fabric.accept(
        accepted_world_ranks, key, deadline, bound.timeout,
        [&](std::size_t i, int fd, const std::string& message) { tell(fd, i >= child_ranks.size(), message); });
  } catch (const std::exception& e) {
    if (parent) {
      tell(parent->fd, false, e.what());
      ::close(parent->fd);
    }
    throw;  // node_'s destructor tells the node-mates that mapped the segment not to wait
  } catch (...) {
    if (parent) ::close(parent->fd);
    throw;
  }
  std::vector<tree_links::link> children;
  for (std::size_t i = 0; i < child_ranks.size(); ++i) children.push_back(tree_links::link{fds[i], child_ranks[i]});
  links_ = std::make_unique<tree_links>(context_, parent, children, std::move(subtrees));
  const std::vector<int> mate_fds(fds.begin() + static_cast<std::ptrdiff_t>(child_ranks.size()), fds.end());
  if (node_) node_->share(mate_fds, deadline);
}

tcp_tree::tcp_tree(int world_rank, const std::string& host) {
  context_.members = {world_rank};
  context_.hosts = {host};
  context_.spreader = this;
  links_ = std::make_unique<tree_links>(context_, std::nullopt, std::vector<tree_links::link>{},
                                        std::vector<std::vector<int>>{});
}

void tcp_tree::settle_after_first_exchange(tcp_fabric& fabric) {
  if (!fabric.settled()) settling_ = &fabric;
}

void tcp_tree::record_failure(const std::string& message) const noexcept {
  // For jobkit run (recovery/events.hpp): what broke this group, in the job's recovery directory,
  // which outlives the batch host (its srun and the step's output may be lost with it).
  try {
    if (!recovery_settings_of_process()) return;
    const auto g = static_cast<std::size_t>(context_.rank);
    if (g >= context_.members.size() || g >= context_.hosts.size()) return;
    record_event("failure", context_.members[g], context_.hosts[g],
                 "\"message\":" + json_string(std::string_view(message).substr(0, event_line_limit / 2)));
  } catch (...) {
  }
}

void tcp_tree::spread_abort(const std::string& given, int origin, errc code) noexcept {
  const std::string message = given.empty() ? "aborted (no reason given)" : given;
  if (context_.broken.empty()) {
    context_.broken = message;
    context_.broken_code = code;
    record_failure(message);
  }
  failed_->store(true, std::memory_order_release);
  if (node_) node_->post_abort(origin, code, message);
  if (links_) links_->spread_abort(message, origin, code);
}

void tcp_tree::abort(const std::string& message) noexcept {
  if (context_.members.size() == 1) return;  // nobody to tell: a group of one stays usable
  if (context_.broken.empty()) spread_abort(message, context_.rank, errc::peer_failure);
}

void tcp_tree::check_peers(const std::string& during) {
  if (!context_.broken.empty()) raise(context_.broken_code, context_.broken);
  const collective_call call(exchange_kind::barrier, during, "", {});
  const exchange context(call);
  if (node_) node_->check_members(context, true);
  if (links_) links_->check_closed(context);
}

void tcp_tree::begin_exchange(const exchange& ex) {
  if (!context_.broken.empty()) {
    raise(context_.broken_code, fmt::format("{} at {}: this group is unusable after an earlier failure: {}", ex.name,
                                            ex.site, context_.broken));
  }
  ++context_.sequence;
}

tcp_tree::route tcp_tree::route_of(const exchange& ex) const {
  const auto size = context_.members.size();
  const bool one_node = node_ && node_->mates().size() == size;
  switch (ex.kind) {
    case exchange_kind::broadcast:
      if (one_node) return route::node_broadcast;
      return ex.root == 0 && size > 1 ? route::one_way_broadcast : route::tree;
    case exchange_kind::barrier:
    case exchange_kind::all_gather:
    case exchange_kind::all_reduce: return one_node ? route::node_exchange : route::tree;
    case exchange_kind::gather:
    case exchange_kind::scatter:
    case exchange_kind::reduce_and_broadcast: return route::tree;
    case exchange_kind::broadcast_into:
    case exchange_kind::all_gather_into: return route::buffer_tree;
  }
  return route::tree;
}

bool tcp_tree::fits_one_way(const exchange& ex) {
  return ex.mine.value_or(std::span<const std::byte>{}).size() <= node_segment::inline_capacity;
}

std::vector<rank_bytes> tcp_tree::run(const exchange& ex) {
  auto entries = run_exchange(ex);
  if (settling_ &&
      ex.kind != exchange_kind::broadcast) {  // every member took part: every one had published its endpoint
    settling_->settle();
    settling_ = nullptr;
  }
  return entries;
}

std::vector<rank_bytes> tcp_tree::run_exchange(const exchange& ex) {
  begin_exchange(ex);
  const route_media media{context_, node_.get(), links_.get()};
  switch (route_of(ex)) {
    case route::node_broadcast:
      if (auto entries = node_broadcast(media, ex, fits_one_way(ex))) return std::move(*entries);
      break;  // too large for mail: the tree
    case route::node_exchange: return node_exchange(media, ex);
    case route::one_way_broadcast:
      if (auto entries = one_way_broadcast(media, ex, fits_one_way(ex))) return std::move(*entries);
      break;  // too large for one way: the tree
    case route::buffer_tree: buffer_tree(media, ex); return {};
    case route::tree: break;
  }
  return tree_exchange(media, ex);
}

}  // namespace jobkit::detail
