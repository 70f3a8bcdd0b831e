#pragma once

// Collectives over a group of ranks: barrier, broadcast, gather, all_gather, all_reduce, scatter,
// their callable forms, and groups (the world, a node, node leaders, an explicit list, a split).

#include <chrono>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jobkit/detail/collective_call.hpp"
#include "jobkit/error.hpp"
#include "jobkit/export.hpp"
#include "jobkit/serialize.hpp"
#include "jobkit/timeout.hpp"

namespace jobkit {

/// Per-call settings of a collective.
struct call_options {
  /// How long this call may wait for the other ranks; zero means the default, JOBKIT_TIMEOUT
  /// (docs/environment.md); negative is refused.
  std::chrono::milliseconds timeout{0};
  /// What the caller passes, e.g. "float32[4, 8]": compared between the members like the
  /// collective's name, so a difference fails on every member, naming two of them and both
  /// signatures (empty: nothing to compare beyond the collective itself).
  std::string signature{};
};

/// Per-call settings of a collective with a root: `g.broadcast(x, {.root = 3, .timeout = 10s})`.
struct rooted_options {
  int root = 0;
  std::chrono::milliseconds timeout{0};  ///< as call_options::timeout
  std::string signature{};               ///< as call_options::signature
};

/// Reductions of all_reduce. band, bor and bxor apply to integral types only; avg (the sum
/// divided by the group's size) to floating-point types only.
enum class reduce_op { sum, prod, min, max, band, bor, bxor, avg };

/// "sum", "prod", "min", "max", "band", "bor", "bxor", "avg".
JOBKIT_API std::string_view to_string(reduce_op op) noexcept;
/// The reduce_op of that name (to_string's). @throws jobkit::error (invalid_argument) naming it
JOBKIT_API reduce_op reduce_op_of(std::string_view name);

/// Arithmetic types, and std::vector or std::array of them (reduced element by element).
template <class T>
concept reducible = std::is_arithmetic_v<T> ||
                    (detail::is_vector<T>::value&& std::is_arithmetic_v<typename T::value_type>) ||
                    (detail::is_std_array<T>::value && std::is_arithmetic_v<typename T::value_type>);

/// A user reduction of T: op(a, b) returns the combination of a and b.
template <class Op, class T>
concept binary_operation_of =
    std::invocable<Op&, const T&, const T&> && std::convertible_to<std::invoke_result_t<Op&, const T&, const T&>, T>;

/// Memory that bulk collectives write into: a contiguous range (std::vector, std::array,
/// std::span...) of trivially copyable, non-const elements.
template <class R>
concept bulk_buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::is_trivially_copyable_v<std::ranges::range_value_t<R>> &&
    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// What a bulk collective reads: a contiguous range of the same elements as the buffer B.
template <class R, class B>
concept bulk_source = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::same_as<std::ranges::range_value_t<R>, std::ranges::range_value_t<B>>;

namespace detail {
struct group_state;   // what a group holds (src/collectives/group_state.hpp)
struct group_access;  // the one way to its private constructor: groups come from a runtime
}  // namespace detail

/// A set of ranks that run collectives together: the world, a node, one rank per node, an
/// explicit list, or a split. Every member must call the same collectives in the same order;
/// each call waits at most its timeout, and fails on every member when any member dies, times
/// out, calls a different collective, or throws inside a callable it was given.
///
/// Sending a value: see jobkit::sendable. Copies share the same connections; not thread-safe:
/// one collective at a time per group.
class JOBKIT_API group {
 public:
  /// This process's rank within the group (its position in world_ranks()).
  int rank() const noexcept;
  int size() const noexcept;
  /// The members' ranks in the world, in group-rank order.
  const std::vector<int>& world_ranks() const noexcept;

  /// Returns when every member has arrived.
  void barrier(call_options options = {}, std::source_location site = std::source_location::current());

  /// The root's value, on every rank. Up to 7 KiB from group rank 0, or from any root of a group
  /// on one node, it goes one way (as MPI_Bcast may): the root, and a rank whose node leader has
  /// passed the bytes on, may return before every other rank has them; a failure or a mismatch
  /// elsewhere then reaches it at its next collective.
  template <sendable T>
  T broadcast(const T& value, rooted_options options, std::source_location site = std::source_location::current());

  /// Every rank's value, in rank order, on the root; an empty vector on the other ranks.
  template <sendable T>
  std::vector<T> gather(const T& value, rooted_options options,
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

  /// The reduction of every rank's value by a user operation, applied in rank order
  /// (op(op(v0, v1), v2)...), so every rank gets the same result for any op, associative or not.
  /// op runs on whichever rank combines (as an MPI_Op does: on a group within one node, every
  /// member combines the values itself when each fits in 7 KiB), so it must do the same on every
  /// rank; where it throws, that rank rethrows it and every other rank throws a jobkit::error
  /// naming the first that failed.
  template <sendable T, binary_operation_of<T> Op>
  T all_reduce(const T& value, Op op, call_options options = {},
               std::source_location site = std::source_location::current());

  /// values[r] to rank r. Only the root's values are read; they must hold size() elements.
  template <sendable T>
  T scatter(const std::vector<T>& values, rooted_options options,
            std::source_location site = std::source_location::current());

  /// fn() runs on the root only; its result is returned on every rank. If fn throws, the root
  /// rethrows it and every other rank throws a jobkit::error carrying its message.
  template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R> R compute_and_broadcast(F&& fn, rooted_options options,
                                               std::source_location site = std::source_location::current());

  /// fn() runs on every rank; the results, in rank order, on the root (empty elsewhere).
  template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R> std::vector<R> gather_from_all_ranks(
      F&& fn, rooted_options options, std::source_location site = std::source_location::current());

  /// The same with the root spelled first, as the seeds do: `broadcast(x, 3)`.
  ///@{
  template <sendable T>
  T broadcast(const T& value, int root = 0, call_options options = {},
              std::source_location site = std::source_location::current()) {
    return broadcast(value, rooted_options{root, options.timeout, options.signature}, site);
  }
  template <sendable T>
  std::vector<T> gather(const T& value, int root = 0, call_options options = {},
                        std::source_location site = std::source_location::current()) {
    return gather(value, rooted_options{root, options.timeout, options.signature}, site);
  }
  template <sendable T>
  T scatter(const std::vector<T>& values, int root = 0, call_options options = {},
            std::source_location site = std::source_location::current()) {
    return scatter(values, rooted_options{root, options.timeout, options.signature}, site);
  }
  template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R> R compute_and_broadcast(F&& fn, int root = 0, call_options options = {},
                                               std::source_location site = std::source_location::current()) {
    return compute_and_broadcast(std::forward<F>(fn), rooted_options{root, options.timeout, options.signature}, site);
  }
  template <class F, class R = std::invoke_result_t<F&>>
  requires sendable<R> std::vector<R> gather_from_all_ranks(
      F&& fn, int root = 0, call_options options = {}, std::source_location site = std::source_location::current()) {
    return gather_from_all_ranks(std::forward<F>(fn), rooted_options{root, options.timeout, options.signature}, site);
  }
  ///@}

  /// @name Bulk data in the caller's memory
  /// For large arrays of trivially copyable elements (MPI_Bcast and MPI_Allgather's form): the
  /// result is written into memory the caller owns and reuses, so no call allocates, and the bytes
  /// travel from buffer to buffer without being serialised. Every member passes the same number of
  /// elements; a difference fails on every member, naming two of them.
  ///@{
  /// The root's `data`, into every member's `data`.
  template <bulk_buffer B>
  void broadcast_into(B&& data, rooted_options options, std::source_location site = std::source_location::current());
  template <bulk_buffer B>
  void broadcast_into(B&& data, int root = 0, call_options options = {},
                      std::source_location site = std::source_location::current()) {
    broadcast_into(std::forward<B>(data), rooted_options{root, options.timeout, options.signature}, site);
  }
  /// Every member's `mine`, in rank order, into every member's `all`, which holds size() times as
  /// many elements. `mine` may be this rank's own part of `all`.
  template <class M, bulk_buffer B>
  requires bulk_source<M, B>
  void all_gather_into(const M& mine, B&& all, call_options options = {},
                       std::source_location site = std::source_location::current());
  ///@}

  /// The reduction of every member's `data`, in place, for element types the library does not
  /// know (the Python bindings' dtypes): combine(acc, in) folds `in` into `acc`, element by
  /// element, and is applied in rank order on whichever member combines, so every member gets the
  /// same bytes. `data` is sent as it is and overwritten with the result; every member passes the
  /// same number of bytes (options.signature says what they hold).
  void reduce_into(std::span<std::byte> data,
                   const std::function<void(std::span<std::byte>, std::span<const std::byte>)>& combine,
                   call_options options = {}, std::source_location site = std::source_location::current());

  /// map() runs on every rank; reduce(std::vector of every rank's result, in rank order) runs
  /// on rank 0 only, and its result is returned on every rank.
  template <class Map, class Reduce, class M = std::invoke_result_t<Map&>,
            class R = std::invoke_result_t<Reduce&, std::vector<M>>>
  requires sendable<M> && sendable<R> R
  reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options = {},
                       std::source_location site = std::source_location::current());

  /// Splits the group as MPI_Comm_split and ncclCommSplit do (collective over the members): the
  /// ranks that pass the same color form one new group, ordered by (key, rank in this group). A
  /// negative color joins no group and gets an empty optional.
  std::optional<group> split(int color, int key, call_options options = {},
                             std::source_location site = std::source_location::current());

  /// Fails the collective the other members are in (or enter next) with `message`, on every
  /// member, and makes this group unusable. For work that other ranks wait on and that failed.
  /// A group of one has nobody to tell: it stays usable.
  void abort(const std::string& message) noexcept;

  /// Throws jobkit::error at once when a member is known to be gone (its connection to this rank
  /// closed), after passing the failure on to the other members; otherwise returns. Does not
  /// wait: for long waits outside jobkit's collectives (`during` names them in the message).
  void check_peers(const std::string& during = "work outside jobkit's collectives");

  /// Sets up this group's connections now rather than in its first collective (collective over
  /// the members). Useful before work that makes the other members wait for long.
  void setup(call_options options = {}, std::source_location site = std::source_location::current());

 private:
  /// Runs one collective on the transport; the entries this member receives. The kinds over
  /// buffers (run_into) pass the members' buffer and, for all_gather_into, each member's piece.
  std::vector<detail::rank_bytes> run(const detail::collective_call& call, std::span<std::byte> buffer = {},
                                      std::size_t piece = 0);
  /// An exchange of a kind over the members' buffers (broadcast_into, all_gather_into).
  void run_into(detail::exchange_kind kind, std::string name, std::span<std::byte> buffer, std::size_t piece, int root,
                std::chrono::milliseconds timeout, const std::source_location& site);
  /// Checks all_gather_into's sizes, and moves `mine` to its place in `all` unless it is there.
  void place_own_part(std::span<const std::byte> mine, std::span<std::byte> all, const std::source_location& site);
  /// Sets up the group's connections if its first collective has not (bounded by call.timeout).
  void connect(const detail::collective_call& call);
  /// Refuses a collective that a helper section makes unreachable for some members.
  void check_section(const detail::collective_call& call) const;
  detail::collective_call make_call(detail::exchange_kind kind, std::string name, std::chrono::milliseconds timeout,
                                    const std::source_location& site) const;
  void check_root(std::string_view operation, int root) const;
  /// Reports an exception thrown by a user callable on this rank to every member, then rethrows.
  [[noreturn]] void fail_from_callable(const detail::collective_call& call);
  [[noreturn]] void fail_to_decode(const detail::collective_call& call, int from_rank, const error& e) const;
  [[noreturn]] void fail_sizes_differ(const detail::collective_call& call, int rank_a, std::size_t size_a, int rank_b,
                                      std::size_t size_b) const;
  [[noreturn]] void fail_scatter_count(const detail::collective_call& call, int root, std::size_t count) const;
  /// "rank W (host)" for a group rank.
  std::string describe(int group_rank) const;

  template <class T>
  T decode(const detail::collective_call& call, const detail::rank_bytes& entry) const;
  template <class T>
  std::vector<T> decode_all(const detail::collective_call& call, const std::vector<detail::rank_bytes>& entries) const;
  /// fn()'s result as bytes; an exception from fn fails the collective on every member.
  template <class F>
  std::vector<std::byte> encode_result(F& fn, const detail::collective_call& call);
  /// Folds every rank's value in rank order with combine(a, b, rank_a, rank_b).
  template <class T, class Combine>
  T fold_in_rank_order(detail::collective_call& call, const T& value, Combine combine);

  explicit group(std::shared_ptr<detail::group_state> state);
  friend struct detail::group_access;

  std::shared_ptr<detail::group_state> state_;
};

/// @name Collectives over every rank of the job (world())
///@{
JOBKIT_API group& world();

inline void barrier(call_options options = {}, std::source_location site = std::source_location::current()) {
  world().barrier(options, site);
}
template <sendable T>
T broadcast(const T& value, int root = 0, call_options options = {},
            std::source_location site = std::source_location::current()) {
  return world().broadcast(value, root, options, site);
}
template <sendable T>
T broadcast(const T& value, rooted_options options, std::source_location site = std::source_location::current()) {
  return world().broadcast(value, options, site);
}
template <sendable T>
std::vector<T> gather(const T& value, int root = 0, call_options options = {},
                      std::source_location site = std::source_location::current()) {
  return world().gather(value, root, options, site);
}
template <sendable T>
std::vector<T> gather(const T& value, rooted_options options,
                      std::source_location site = std::source_location::current()) {
  return world().gather(value, options, site);
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
template <sendable T, binary_operation_of<T> Op>
T all_reduce(const T& value, Op op, call_options options = {},
             std::source_location site = std::source_location::current()) {
  return world().all_reduce(value, std::move(op), options, site);
}
template <sendable T>
T scatter(const std::vector<T>& values, int root = 0, call_options options = {},
          std::source_location site = std::source_location::current()) {
  return world().scatter(values, root, options, site);
}
template <sendable T>
T scatter(const std::vector<T>& values, rooted_options options,
          std::source_location site = std::source_location::current()) {
  return world().scatter(values, options, site);
}
template <bulk_buffer B>
void broadcast_into(B&& data, int root = 0, call_options options = {},
                    std::source_location site = std::source_location::current()) {
  world().broadcast_into(std::forward<B>(data), root, options, site);
}
template <bulk_buffer B>
void broadcast_into(B&& data, rooted_options options, std::source_location site = std::source_location::current()) {
  world().broadcast_into(std::forward<B>(data), options, site);
}
template <class M, bulk_buffer B>
requires bulk_source<M, B>
void all_gather_into(const M& mine, B&& all, call_options options = {},
                     std::source_location site = std::source_location::current()) {
  world().all_gather_into(mine, std::forward<B>(all), options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
requires sendable<R> R compute_and_broadcast(F&& fn, int root = 0, call_options options = {},
                                             std::source_location site = std::source_location::current()) {
  return world().compute_and_broadcast(std::forward<F>(fn), root, options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
requires sendable<R> R compute_and_broadcast(F&& fn, rooted_options options,
                                             std::source_location site = std::source_location::current()) {
  return world().compute_and_broadcast(std::forward<F>(fn), options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
requires sendable<R> std::vector<R> gather_from_all_ranks(F&& fn, int root = 0, call_options options = {},
                                                          std::source_location site = std::source_location::current()) {
  return world().gather_from_all_ranks(std::forward<F>(fn), root, options, site);
}
template <class F, class R = std::invoke_result_t<F&>>
requires sendable<R> std::vector<R> gather_from_all_ranks(F&& fn, rooted_options options,
                                                          std::source_location site = std::source_location::current()) {
  return world().gather_from_all_ranks(std::forward<F>(fn), options, site);
}
template <class Map, class Reduce, class M = std::invoke_result_t<Map&>,
          class R = std::invoke_result_t<Reduce&, std::vector<M>>>
requires sendable<M> && sendable<R> R
reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options = {},
                     std::source_location site = std::source_location::current()) {
  return world().reduce_and_broadcast(std::forward<Map>(map), std::forward<Reduce>(reduce), options, site);
}
///@}

/// @name Groups
/// Creating a group is collective over its members only: every listed rank calls it, in the same
/// order relative to its other group creations; non-members do not take part. The first
/// collective of a process (on any group) sets up the data path through the launcher and is
/// collective over the whole job.
///@{
/// A group of the listed world ranks; group rank i is world_ranks[i].
/// @throws jobkit::error (invalid_argument) on duplicates, out-of-range ranks, or when the
/// calling rank is not listed
JOBKIT_API group make_group(const std::vector<int>& world_ranks, call_options options = {});
/// The ranks on this process's node (cached).
JOBKIT_API group& node_group();
/// One rank per node: local rank 0 of every node (cached). Only those ranks may call it.
JOBKIT_API group& node_leaders_group();
/// The step's ranks of this process's heterogeneous-job component (identity::component), in
/// component-rank order (cached); the whole step outside a heterogeneous job. Every rank of the
/// step calls it, each getting its own component's group.
JOBKIT_API group& component_group();
///@}

}  // namespace jobkit

#include "jobkit/detail/collectives_impl.hpp"
