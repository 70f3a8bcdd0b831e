#pragma once

#include <memory>
#include <vector>

#include "transport/transport.hpp"

namespace jobkit::detail {

/// Groups of `size` ranks inside one process, one per thread: the same exchange semantics as
/// the TCP data path (ordering, name checks, deadlines, aborts) without a launcher. A group of
/// one rank is what a single-rank job uses: no PMIx, no sockets.
std::vector<std::shared_ptr<group_state>> make_inprocess_group_states(int size,
                                                                      const std::string& hostname = "localhost");

/// The state of a group whose only member is this process (world rank `world_rank`).
std::shared_ptr<group_state> make_single_rank_group_state(int world_rank, const std::string& hostname);

}  // namespace jobkit::detail
