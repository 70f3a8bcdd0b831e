#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jobkit/error.hpp"
#include "jobkit/serialize.hpp"

namespace jobkit {

/// Per-call settings of a collective.
struct call_options {
  /// How long this call may wait for the other ranks; zero means the default, JOBKIT_TIMEOUT
  /// (docs/environment.md).
  std::chrono::milliseconds timeout{0};
};

/// Reductions of all_reduce. band, bor and bxor apply to integral types only.
enum class reduce_op { sum, prod, min, max, band, bor, bxor };

std::string_view to_string(reduce_op op) noexcept;

/// Arithmetic types, and std::vector or std::array of them (reduced element by element).
template <class T>
concept reducible =
    std::is_arithmetic_v<T> ||
    (detail::is_vector<T>::value && std::is_arithmetic_v<typename T::value_type>) ||
    (detail::is_std_array<T>::value && std::is_arithmetic_v<typename T::value_type>);

namespace detail {

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
};

struct group_state;

/// "file.cpp:42": a call site as errors name it.
std::string site_text(const std::source_location& site);

/// Code that only some ranks run at a time (inside a jobkit/helpers.hpp helper). Collectives of
/// groups that include ranks outside the section are refused at once instead of waiting for
/// ranks that never come.
enum class section_kind {
  main_only,     ///< run by the main rank alone
  node_leaders,  ///< run by local rank 0 of every node, at the same time
  staggered,     ///< run by every rank, but not at the same time (zero_first, do_n_at_a_time)
};

/// Marks the calling thread as inside a section for its lifetime.
class section_guard {
 public:
  section_guard(section_kind kind, std::string helper, const std::source_location& site);
  ~section_guard();
  section_guard(const section_guard&) = delete;
  section_guard& operator=(const section_guard&) = delete;
};

/// The innermost section of the calling thread, if any: its kind and "helper at file:line".
struct section_info {
  section_kind kind;
  std::string where;
};
std::optional<section_info> current_section();

}  // namespace detail

/// A set of ranks that run collectives together: the world, a node, one rank per node, or an
/// explicit list. Every member must call the same collectives in the same order; each call
/// waits at most its timeout, and fails on every member when any member dies, times out, calls
/// a different collective, or throws inside a callable it was given.
///
/// Sending a value: see jobkit::sendable. Copies share the same connections; not thread-safe:
/// one collective at a time per group.
class group {
 public:
  explicit group(std::shared_ptr<detail::group_state> state);

  /// This process's rank within the group (its position in world_ranks()).
  int rank() const noexcept;
  int size() const noexcept;
  /// The members' ranks in the world, in group-rank order.
  const std::vector<int>& world_ranks() const noexcept;

  /// Returns when every member has arrived.
  void barrier(call_options options = {}, std::source_location site = std::source_location::current());

  /// The root's value, on every rank.
  template <sendable T>
  T broadcast(const T& value, int root = 0, call_options options = {},
              std::source_location site = std::source_location::current());

  /// Every rank's value, in rank order, on the root; an empty vector on the other ranks.
  template <sendable T>
  std::vector<T> gather(const T& value, int root = 0, call_options options = {},
                        std::source_location site = std::source_location::current());

  /// Every rank's value, in rank order, on every rank. Sizes may differ between ranks.
  template <sendable T>
  std::vector<T> all_gather(const T& value, call_options options = {},
                            std::source_location site = std::source_location::current());

  /// The reduction of every rank's value, bitwise identical on every rank. Vectors must have the
  /// same length on every rank.
  template <reducible T>
  T all_reduce(const T& value, reduce_op op, call_options options = {},
               std::source_location site = std::source_location::current());

  /// values[r] to rank r. Only the root's values are read; they must hold size() elements.
  template <sendable T>
  T scatter(const std::vector<T>& values, int root = 0, call_options options = {},
            std::source_location site = std::source_location::current());

  /// fn() runs on the root only; its result is returned on every rank. If fn throws, the root
  /// rethrows it and every other rank throws a jobkit::error carrying its message.
  template <class F, class R = std::invoke_result_t<F&>>
    requires sendable<R>
  R compute_and_broadcast(F&& fn, int root = 0, call_options options = {},
                          std::source_location site = std::source_location::current());

  /// fn() runs on every rank; the results, in rank order, on the root (empty elsewhere).
  template <class F, class R = std::invoke_result_t<F&>>
    requires sendable<R>
  std::vector<R> gather_from_all_ranks(F&& fn, int root = 0, call_options options = {},
                                       std::source_location site = std::source_location::current());

  /// map() runs on every rank; reduce(std::vector of every rank's result, in rank order) runs
  /// on rank 0 only, and its result is returned on every rank.
  template <class Map, class Reduce, class M = std::invoke_result_t<Map&>,
            class R = std::invoke_result_t<Reduce&, std::vector<M>>>
    requires sendable<M> && sendable<R>
  R reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options = {},
                         std::source_location site = std::source_location::current());

  /// Fails the collective the other members are in (or enter next) with `message`, on every
  /// member, and makes this group unusable. For work that other ranks wait on and that failed.
  void abort(const std::string& message) noexcept;

  /// Throws jobkit::error at once when a member is known to be gone (its connection to this rank
  /// closed), after passing the failure on to the other members; otherwise returns. Does not
  /// wait: for long waits outside jobkit's collectives (`during` names them in the message).
  void check_peers(const std::string& during = "work outside jobkit's collectives");

  /// Sets up this group's connections now rather than in its first collective (collective over
  /// the members). Useful before work that makes the other members wait for long.
  void setup(call_options options = {}, std::source_location site = std::source_location::current());

 private:
  std::vector<detail::rank_bytes> run(detail::exchange& ex);
  /// Sets up the group's connections if its first collective has not (bounded by ex.timeout).
  void connect(const detail::exchange& ex);
  /// Refuses a collective that a helper section makes unreachable for some members.
  void check_section(const detail::exchange& ex) const;
  detail::exchange make_exchange(std::string name, call_options options,
                                 const std::source_location& site) const;
  void check_root(std::string_view operation, int root) const;
  /// Reports an exception thrown by a user callable on this rank to every member, then rethrows.
  [[noreturn]] void fail_from_callable(const detail::exchange& ex);
  [[noreturn]] void fail_to_decode(const detail::exchange& ex, int from_rank, const error& e) const;
  /// "rank W (host)" for a group rank.
  std::string describe(int group_rank) const;

  template <class T>
  T decode(const detail::exchange& ex, const detail::rank_bytes& entry) const {
    try {
      return from_bytes<T>(entry.bytes);
    } catch (const error& e) {
      fail_to_decode(ex, entry.rank, e);
    }
  }
  template <class T>
  std::vector<T> decode_all(const detail::exchange& ex, const std::vector<detail::rank_bytes>& entries) const {
    std::vector<T> values;
    values.reserve(entries.size());
    for (const auto& entry : entries) values.push_back(decode<T>(ex, entry));
    return values;
  }
  /// fn()'s result as bytes; an exception from fn fails the collective on every member.
  template <class F>
  std::vector<std::byte> encode_result(F& fn, const detail::exchange& ex) {
    try {
      return to_bytes(fn());
    } catch (...) {
      fail_from_callable(ex);
    }
  }
  template <class T>
  T combine(const detail::exchange& ex, T a, const T& b, reduce_op op, int rank_a, int rank_b) const;
  template <class T>
  static T combine_scalar(T a, T b, reduce_op op);

  std::shared_ptr<detail::group_state> state_;
};

/// @name Collectives over every rank of the job (world())
///@{
group& world();

inline void barrier(call_options options = {}, std::source_location site = std::source_location::current()) {
  world().barrier(options, site);
}
template <sendable T>
T broadcast(const T& value, int root = 0, call_options options = {},
            std::source_location site = std::source_location::current()) {
  return world().broadcast(value, root, options, site);
}
template <sendable T>
std::vector<T> gather(const T& value, int root = 0, call_options options = {},
                      std::source_location site = std::source_location::current()) {
  return world().gather(value, root, options, site);
}
template <sendable T>
std::vector<T> all_gather(const T& value, call_options options = {},
                          std::source_location site = std::source_location::current()) {
  return world().all_gather(value, options, site);
}
template <reducible T>
T all_reduce(const T& value, reduce_op op, call_options options = {},
             std::source_location site = std::source_location::current()) {
  return world().all_reduce(value, op, options, site);
}
template <sendable T>
T scatter(const std::vector<T>& values, int root = 0, call_options options = {},
          std::source_location site = std::source_location::current()) {
  return world().scatter(values, root, options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R>
R compute_and_broadcast(F&& fn, int root = 0, call_options options = {},
                        std::source_location site = std::source_location::current()) {
  return world().compute_and_broadcast(std::forward<F>(fn), root, options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R>
std::vector<R> gather_from_all_ranks(F&& fn, int root = 0, call_options options = {},
                                     std::source_location site = std::source_location::current()) {
  return world().gather_from_all_ranks(std::forward<F>(fn), root, options, site);
}
template <class Map, class Reduce, class M = std::invoke_result_t<Map&>,
          class R = std::invoke_result_t<Reduce&, std::vector<M>>>
  requires sendable<M> && sendable<R>
R reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options = {},
                       std::source_location site = std::source_location::current()) {
  return world().reduce_and_broadcast(std::forward<Map>(map), std::forward<Reduce>(reduce), options, site);
}
///@}

/// @name Groups
/// Creating a group is collective over its members only: every listed rank calls it, in the same
/// order relative to its other group creations; non-members do not take part. The first
/// collective of a process (on any group) sets up the data path through PMIx and is collective
/// over the whole job.
///@{
/// A group of the listed world ranks; group rank i is world_ranks[i].
/// @throws jobkit::error (invalid_argument) on duplicates, out-of-range ranks, or when the
/// calling rank is not listed
group make_group(const std::vector<int>& world_ranks, call_options options = {});
/// The ranks on this process's node (cached).
group& node_group();
/// One rank per node: local rank 0 of every node (cached). Only those ranks may call it.
group& node_leaders_group();
///@}

// ---- implementation ----

template <sendable T>
T group::broadcast(const T& value, int root, call_options options, std::source_location site) {
  check_root("broadcast", root);
  auto ex = make_exchange("broadcast(root " + std::to_string(root) + ")", options, site);
  std::vector<std::byte> bytes;
  if (rank() == root) {
    bytes = to_bytes(value);
    ex.mine = bytes;
  }
  auto entries = run(ex);
  if (rank() == root) return value;
  return decode<T>(ex, entries.at(0));
}

template <sendable T>
std::vector<T> group::gather(const T& value, int root, call_options options, std::source_location site) {
  check_root("gather", root);
  auto ex = make_exchange("gather(root " + std::to_string(root) + ")", options, site);
  const auto bytes = to_bytes(value);
  ex.mine = bytes;
  ex.to = detail::delivery::one_rank;
  ex.target = root;
  return decode_all<T>(ex, run(ex));
}

template <sendable T>
std::vector<T> group::all_gather(const T& value, call_options options, std::source_location site) {
  auto ex = make_exchange("all_gather", options, site);
  const auto bytes = to_bytes(value);
  ex.mine = bytes;
  return decode_all<T>(ex, run(ex));
}

template <class T>
T group::combine_scalar(T a, T b, reduce_op op) {
  switch (op) {
    case reduce_op::sum: return static_cast<T>(a + b);
    case reduce_op::prod: return static_cast<T>(a * b);
    case reduce_op::min: return std::min(a, b);
    case reduce_op::max: return std::max(a, b);
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case reduce_op::band: return static_cast<T>(a & b);
      case reduce_op::bor: return static_cast<T>(a | b);
      default: return static_cast<T>(a ^ b);
    }
  }
  return a;  // unreachable: all_reduce refuses bitwise operations on floating-point types
}

template <class T>
T group::combine(const detail::exchange& ex, T a, const T& b, reduce_op op, int rank_a, int rank_b) const {
  if constexpr (std::is_arithmetic_v<T>) {
    return combine_scalar(a, b, op);
  } else {
    if (a.size() != b.size()) {
      throw error(errc::invalid_argument,
                  ex.name + " at " + ex.site + ": " + describe(rank_a) + " passed " + std::to_string(a.size()) +
                      " elements but " + describe(rank_b) + " passed " + std::to_string(b.size()));
    }
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = combine_scalar(a[i], b[i], op);
    return a;
  }
}

namespace detail {
[[noreturn]] void throw_bitwise_on_floating(reduce_op op);
}

template <reducible T>
T group::all_reduce(const T& value, reduce_op op, call_options options, std::source_location site) {
  constexpr bool floating = [] {
    if constexpr (std::is_arithmetic_v<T>) return std::is_floating_point_v<T>;
    else return std::is_floating_point_v<typename T::value_type>;
  }();
  if (floating &&
      (op == reduce_op::band || op == reduce_op::bor || op == reduce_op::bxor)) {
    detail::throw_bitwise_on_floating(op);
  }
  auto ex = make_exchange("all_reduce(" + std::string(to_string(op)) + ")", options, site);
  const auto bytes = to_bytes(value);
  ex.mine = bytes;
  // Entries are folded in rank order, so every rank receives the same bits.
  ex.fold = [this, &ex, op](std::vector<detail::rank_bytes>& entries) {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    T total = decode<T>(ex, entries.front());
    for (std::size_t i = 1; i < entries.size(); ++i) {
      total = combine(ex, std::move(total), decode<T>(ex, entries[i]), op, entries.front().rank, entries[i].rank);
    }
    return detail::rank_bytes{entries.front().rank, to_bytes(total)};
  };
  return decode<T>(ex, run(ex).at(0));
}

template <sendable T>
T group::scatter(const std::vector<T>& values, int root, call_options options, std::source_location site) {
  check_root("scatter", root);
  auto ex = make_exchange("scatter(root " + std::to_string(root) + ")", options, site);
  std::vector<std::byte> bytes;
  if (rank() == root) {
    std::vector<std::vector<std::byte>> parts;
    for (const auto& v : values) parts.push_back(to_bytes(v));
    bytes = to_bytes(parts);
    ex.mine = bytes;
  }
  ex.to = detail::delivery::each_own;
  const int members = size();
  ex.finish = [this, &ex, members, root](std::vector<detail::rank_bytes>& entries) {
    auto parts = decode<std::vector<std::vector<std::byte>>>(ex, entries.at(0));
    if (static_cast<int>(parts.size()) != members) {
      throw error(errc::invalid_argument, ex.name + " at " + ex.site + ": " + describe(root) + " passed " +
                                              std::to_string(parts.size()) + " values for a group of " +
                                              std::to_string(members) + " ranks");
    }
    std::vector<detail::rank_bytes> out;
    for (int r = 0; r < members; ++r) out.push_back({r, std::move(parts[static_cast<std::size_t>(r)])});
    return out;
  };
  return decode<T>(ex, run(ex).at(0));
}

template <class F, class R>
  requires sendable<R>
R group::compute_and_broadcast(F&& fn, int root, call_options options, std::source_location site) {
  check_root("compute_and_broadcast", root);
  auto ex = make_exchange("compute_and_broadcast(root " + std::to_string(root) + ")", options, site);
  // Connected first: while fn runs, the others then wait in jobkit's data path with its deadline,
  // not in the setup's PMIx fence (bounded by the launcher's own timeout).
  connect(ex);
  if (rank() != root) return decode<R>(ex, run(ex).at(0));
  std::optional<R> value;
  std::vector<std::byte> bytes;
  try {
    value.emplace(fn());
    bytes = to_bytes(*value);
  } catch (...) {
    fail_from_callable(ex);
  }
  ex.mine = bytes;
  run(ex);
  return std::move(*value);
}

template <class F, class R>
  requires sendable<R>
std::vector<R> group::gather_from_all_ranks(F&& fn, int root, call_options options, std::source_location site) {
  check_root("gather_from_all_ranks", root);
  auto ex = make_exchange("gather_from_all_ranks(root " + std::to_string(root) + ")", options, site);
  connect(ex);
  const auto bytes = encode_result(fn, ex);
  ex.mine = bytes;
  ex.to = detail::delivery::one_rank;
  ex.target = root;
  return decode_all<R>(ex, run(ex));
}

template <class Map, class Reduce, class M, class R>
  requires sendable<M> && sendable<R>
R group::reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options, std::source_location site) {
  auto ex = make_exchange("reduce_and_broadcast", options, site);
  connect(ex);
  const auto bytes = encode_result(map, ex);
  ex.mine = bytes;
  ex.finish = [this, &ex, &reduce](std::vector<detail::rank_bytes>& entries) {
    return std::vector<detail::rank_bytes>{{0, to_bytes(reduce(decode_all<M>(ex, entries)))}};
  };
  return decode<R>(ex, run(ex).at(0));
}

}  // namespace jobkit
