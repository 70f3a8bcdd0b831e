#include "collectives/group_state.hpp"

#include <algorithm>

#include "network/fabric.hpp"
#include "transport/tree.hpp"

namespace jobkit::detail {

std::shared_ptr<group_state> make_tcp_group_state(tcp_fabric& fabric, const std::vector<int>& members,
                                                  const time_bound& bound, subgroup_maker make_subgroup) {
  auto state = std::make_shared<group_state>();
  state->world_ranks = members;
  state->rank = static_cast<int>(std::find(members.begin(), members.end(), fabric.rank()) - members.begin());
  auto tree = std::make_unique<tcp_tree>(fabric, members, bound);
  if (static_cast<int>(members.size()) == fabric.world_size()) tree->settle_after_first_exchange(fabric);
  state->link = std::move(tree);
  for (const int r : members) {
    state->hosts.push_back(fabric.host_of(r));
    state->local_ranks.push_back(fabric.placement().local_rank_of.at(static_cast<std::size_t>(r)));
  }
  state->make_subgroup =
      make_subgroup ? std::move(make_subgroup) : [&fabric](const std::vector<int>& ranks, const time_bound& b) {
        return make_tcp_group_state(fabric, ranks, b);
      };
  return state;
}

std::shared_ptr<group_state> make_single_rank_group_state(int world_rank, const std::string& hostname) {
  auto state = std::make_shared<group_state>();
  state->link = std::make_unique<tcp_tree>(world_rank, hostname);
  state->world_ranks = {world_rank};
  state->hosts = {hostname};
  state->make_subgroup = [world_rank, hostname](const std::vector<int>&, const time_bound&) {
    return make_single_rank_group_state(world_rank, hostname);
  };
  return state;
}

}  // namespace jobkit::detail
