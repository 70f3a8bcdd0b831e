#include "rendezvous/endpoint_directory.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/failure.hpp"
#include "core/lost_node.hpp"

namespace jobkit::detail {

void raise_setup_failure(rendezvous& rv, const std::string& key, const identity& self, const error& e) {
  const auto call = rv.ranks_without(key, self.world_size, std::chrono::seconds(2));
  std::string who;
  if (call.asked.empty()) {
    who = "this launcher's rendezvous (PMI-2) cannot say which rank never arrived";
  } else if (!call.absent.empty()) {
    who = fmt::format("rank(s) {} never reached jobkit (exited or crashed before it, or stuck)",
                      fmt::join(call.absent, ", "));
  } else if (static_cast<int>(call.asked.size()) < self.world_size) {
    who = fmt::format("every rank on {} reached jobkit, so the missing rank is on another node", self.hostname);
  } else {
    who = "every rank had published its endpoint";
  }
  raise(e.code(),
        fmt::format("data path setup on {}: {}; {}; with srun, --kill-on-bad-exit=1 ends the whole step as soon "
                    "as a rank exits with an error",
                    rank_label(self.rank, self.hostname), e.what(), who),
        e.native_status());
}

endpoint_directory::endpoint_directory(rendezvous& rv, const identity& self, endpoint mine, std::string key,
                                       const time_bound& bound, std::chrono::milliseconds silence_limit,
                                       const logger& log)
    : rv_(rv), rank_(self.rank), key_(std::move(key)), silence_limit_(silence_limit) {
  const auto record = encode_endpoint(self.rank, mine);
  rv.put(key_, std::as_bytes(std::span(record.data(), record.size())));
  const auto asked = steady_clock::now();
  auto placed = rv.placement();
  const auto placement_us = std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::now() - asked);
  // The launcher's placement must be the one this rank's identity came from: otherwise the ranks
  // could build different trees.
  const auto i = static_cast<std::size_t>(rank_);
  if (placed && (static_cast<int>(placed->node_of.size()) != self.world_size || placed->node_of[i] != self.node_rank ||
                 placed->local_rank_of[i] != self.local_rank)) {
    throw error(
        errc::invalid_environment,
        fmt::format("data path setup on {}: the launcher places {} of {} ranks, this one on node {} at local "
                    "rank {}, but its identity says node {} and local rank {}",
                    rank_label(rank_, self.hostname), placed->node_of.size(), self.world_size,
                    i < placed->node_of.size() ? placed->node_of[i] : -1,
                    i < placed->node_of.size() ? placed->local_rank_of[i] : -1, self.node_rank, self.local_rank));
  }
  if (placed) {
    // Every rank decides alike: the placement is the launcher's, the same on every rank.
    rv.commit();
    log.debug("data path: endpoints read on demand, {} ranks placed on {} nodes by the launcher (read in {} us)",
              self.world_size, placed->nodes.size(), placement_us.count());
    on_demand_ = true;
    placement_ = std::move(*placed);
    known_.emplace(rank_, std::move(mine));
    return;
  }
  std::vector<std::vector<std::byte>> records;
  try {
    rv.fence(bound);
    // A fence that returned does not prove that every rank put its endpoint (Slurm 24.11: see
    // pmix_session::get_all), so a missing record is named like a missing rank at the fence.
    records = rv.get_all(key_, self.world_size, bound.left());
  } catch (const error& e) {
    raise_setup_failure(rv, key_, self, e);
  }
  std::map<int, int> node_index;  // identity's node rank -> index in placement_.nodes
  for (int r = 0; r < self.world_size; ++r) {
    auto e = decode_endpoint(records[static_cast<std::size_t>(r)], r);
    const auto [it, added] = node_index.emplace(e.node, static_cast<int>(placement_.nodes.size()));
    if (added) placement_.nodes.push_back(e.host);
    placement_.node_of.push_back(it->second);
    placement_.local_rank_of.push_back(e.local_rank);
    known_.emplace(r, std::move(e));
  }
  settled_ = true;
}

const endpoint* endpoint_directory::known(int peer) const {
  const auto it = known_.find(peer);
  return it == known_.end() ? nullptr : &it->second;
}

const endpoint* endpoint_directory::fetch(int peer, steady_clock::time_point until, std::string& why) {
  if (const auto* e = known(peer)) return e;
  if (!on_demand_) {
    why = "its endpoint was not exchanged";
    return nullptr;
  }
  try {
    auto e = decode_endpoint(rv_.await(peer, key_, std::chrono::milliseconds(remaining_ms(until))), peer);
    const auto at = static_cast<std::size_t>(peer);
    if (e.node != placement_.node_of.at(at) || e.local_rank != placement_.local_rank_of.at(at)) {
      throw error(
          errc::invalid_environment,
          fmt::format("data path setup: rank {} published node {} and local rank {}, the launcher places it "
                      "on node {} ({}) at local rank {}",
                      peer, e.node, e.local_rank, placement_.node_of[at], host_of(peer), placement_.local_rank_of[at]));
    }
    return &known_.emplace(peer, std::move(e)).first->second;
  } catch (const timeout_error& e) {
    why = e.what();
    return nullptr;
  }
}

std::string endpoint_directory::unanswered(int peer, steady_clock::time_point deadline) {
  const auto until = std::min(deadline, steady_clock::now() + silence_limit_);
  std::string why;
  if (fetch(peer, until, why) || !settled_ || until >= deadline) return {};
  return describe(lost_node{.node = host_of(peer),
                            .what = "gave no answer for its endpoint",
                            .limit = silence_limit_,
                            .seen_from = host_of(rank_),
                            .ranks = {},
                            .detail = why});
}

const endpoint& endpoint_directory::endpoint_of(int peer, steady_clock::time_point deadline) {
  if (settled_) {
    if (const auto lost = unanswered(peer, deadline); !lost.empty()) {
      throw error(errc::peer_failure, fmt::format("data path: {}: {}", rank_label(peer, host_of(peer)), lost));
    }
  }
  std::string why;
  if (const auto* e = fetch(peer, deadline, why)) return *e;
  throw timeout_error(fmt::format("data path setup: no endpoint from {}: {}", rank_label(peer, host_of(peer)), why));
}

}  // namespace jobkit::detail
