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

#include "jobkit/export.hpp"

namespace jobkit::detail {

/// One rank's bytes; rank is the rank in the group.
struct rank_bytes {
  int rank;
  std::vector<std::byte> bytes;
};

/// What an exchange is: who contributes and who receives what (the transport's exchange::receives),
/// and which way the transport takes (tcp_tree::route_of). Each collective names its kind; nothing
/// is inferred.
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

/// One collective as the templates of jobkit/collectives.hpp describe it to their group: its kind,
/// name and call site, its timeout and the one deadline it gives (taken when the call is made:
/// the data path's setup, every route and both media wait until it, never past it), and this
/// member's part. The contributions travel to the
/// group's rank 0, combined on the way by `fold` (all_reduce); rank 0 applies `finish` (scatter,
/// reduce_and_broadcast) and the result travels back to the members that receive it. Ranks
/// compare `name`, so a different collective or a different root on one rank is an error, not a
/// pairing. Which member receives what, and how the bytes travel, is the transport's
/// (src/transport/exchange.hpp); the kinds over buffers are made by the group itself.
struct collective_call {
  collective_call(exchange_kind of, std::string called, std::string at, std::chrono::milliseconds within)
      : kind(of),
        name(std::move(called)),
        site(std::move(at)),
        timeout(within),
        deadline(std::chrono::steady_clock::now() + within) {}

  exchange_kind kind;
  std::string name;
  std::string site;  ///< "file.cpp:42"
  std::chrono::milliseconds timeout;
  std::chrono::steady_clock::time_point deadline;  ///< when the call began, plus timeout
  int root = 0;  ///< broadcast, gather, scatter, broadcast_into: the member that contributes or receives
  std::optional<std::span<const std::byte>> mine;
  std::function<rank_bytes(std::vector<rank_bytes>&)> fold;
  std::function<std::vector<rank_bytes>(std::vector<rank_bytes>&)> finish;
};

/// "file.cpp:42": a call site as errors name it.
JOBKIT_API std::string site_text(const std::source_location& site);

}  // namespace jobkit::detail
