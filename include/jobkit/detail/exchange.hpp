#pragma once

// The engine under jobkit/collectives.hpp: what one collective asks of the data path.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

namespace jobkit::detail {

/// One rank's bytes; rank is the rank in the group.
struct rank_bytes {
  int rank;
  std::vector<std::byte> bytes;
};

/// Who receives the result of an exchange.
enum class delivery {
  everyone,  ///< every rank receives every entry
  one_rank,  ///< only `target` receives the entries; the others receive nothing
  each_own,  ///< each rank receives the entries whose rank is its own
};

/// The one primitive every collective is made of. Each rank contributes bytes (or nothing); the
/// contributions travel to the group's rank 0, combined on the way by `fold` when it is set; rank
/// 0 applies `finish` and the result travels back to the ranks named by `to`. Ranks compare
/// `name`, so a different collective or a different root on one rank is an error, not a pairing.
struct exchange {
  std::string name;
  std::string site;  ///< "file.cpp:42"
  std::chrono::milliseconds timeout;
  std::optional<std::span<const std::byte>> mine;
  std::function<rank_bytes(std::vector<rank_bytes>&)> fold;
  std::function<std::vector<rank_bytes>(std::vector<rank_bytes>&)> finish;
  delivery to = delivery::everyone;
  int target = 0;
  /// No member contributes and none receives anything: a barrier.
  bool synchronize_only = false;
  /// A broadcast: only this rank contributes and every rank receives its bytes as they are, so the
  /// transport may let it go on without waiting for the others, as MPI_Bcast does. -1: none.
  int source = -1;
};

struct group_state;

/// "file.cpp:42": a call site as errors name it.
std::string site_text(const std::source_location& site);

/// Throws jobkit::error (invalid_argument) for a bitwise reduction of floating-point values.
[[noreturn]] void throw_bitwise_on_floating(std::string_view op);

}  // namespace jobkit::detail
