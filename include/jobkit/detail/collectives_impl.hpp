#pragma once

// The templates of jobkit/collectives.hpp: each collective as one detail::collective_call.

#include <algorithm>
#include <cstddef>
#include <ranges>
#include <span>
#include <string>
#include <utility>

#include "jobkit/detail/reduce_ops.hpp"

namespace jobkit {

template <class T>
T group::decode(const detail::collective_call& call, const detail::rank_bytes& entry) const {
  try {
    return from_bytes<T>(entry.bytes);
  } catch (const error& e) {
    fail_to_decode(call, entry.rank, e);
  }
}

template <class T>
std::vector<T> group::decode_all(const detail::collective_call& call,
                                 const std::vector<detail::rank_bytes>& entries) const {
  std::vector<T> values;
  values.reserve(entries.size());
  for (const auto& entry : entries) values.push_back(decode<T>(call, entry));
  return values;
}

template <class F>
std::vector<std::byte> group::encode_result(F& fn, const detail::collective_call& call) {
  try {
    return to_bytes(fn());
  } catch (...) {
    fail_from_callable(call);
  }
}

namespace detail {

/// The name a collective's members compare: its name, and the caller's signature when it gave one.
inline std::string signed_name(std::string name, const std::string& signature) {
  return signature.empty() ? name : name + " of " + signature;
}

template <class R>
std::span<const std::byte> bytes_of(const R& range) {
  return {reinterpret_cast<const std::byte*>(std::ranges::data(range)),
          std::ranges::size(range) * sizeof(std::ranges::range_value_t<R>)};
}

template <class R>
std::span<std::byte> writable_bytes_of(R& range) {
  return {reinterpret_cast<std::byte*>(std::ranges::data(range)),
          std::ranges::size(range) * sizeof(std::ranges::range_value_t<R>)};
}

}  // namespace detail

template <bulk_buffer B>
void group::broadcast_into(B&& data, rooted_options options, std::source_location site) {
  check_root("broadcast_into", options.root);
  run_into(detail::exchange_kind::broadcast_into,
           detail::signed_name("broadcast_into(root " + std::to_string(options.root) + ")", options.signature),
           detail::writable_bytes_of(data), 0, options.root, options.timeout, site);
}

template <class M, bulk_buffer B>
requires bulk_source<M, B>
void group::all_gather_into(const M& mine, B&& all, call_options options, std::source_location site) {
  const auto bytes = detail::writable_bytes_of(all);
  place_own_part(detail::bytes_of(mine), bytes, site);
  run_into(detail::exchange_kind::all_gather_into, detail::signed_name("all_gather_into", options.signature), bytes,
           std::ranges::size(mine) * sizeof(std::ranges::range_value_t<M>), 0, options.timeout, site);
}

template <sendable T>
T group::broadcast(const T& value, rooted_options options, std::source_location site) {
  check_root("broadcast", options.root);
  auto call = make_call(detail::exchange_kind::broadcast,
                        detail::signed_name("broadcast(root " + std::to_string(options.root) + ")", options.signature),
                        options.timeout, site);
  call.root = options.root;
  std::vector<std::byte> bytes;
  if (rank() == options.root) {
    bytes = to_bytes(value);
    call.mine = bytes;
  }
  auto entries = run(call);
  if (rank() == options.root) return value;
  return decode<T>(call, entries.at(0));
}

template <sendable T>
std::vector<T> group::gather(const T& value, rooted_options options, std::source_location site) {
  check_root("gather", options.root);
  auto call = make_call(detail::exchange_kind::gather,
                        detail::signed_name("gather(root " + std::to_string(options.root) + ")", options.signature),
                        options.timeout, site);
  const auto bytes = to_bytes(value);
  call.mine = bytes;
  call.root = options.root;
  return decode_all<T>(call, run(call));
}

template <sendable T>
std::vector<T> group::all_gather(const T& value, call_options options, std::source_location site) {
  auto call = make_call(detail::exchange_kind::all_gather, detail::signed_name("all_gather", options.signature),
                        options.timeout, site);
  const auto bytes = to_bytes(value);
  call.mine = bytes;
  return decode_all<T>(call, run(call));
}

template <class T, class Combine>
T group::fold_in_rank_order(detail::collective_call& call, const T& value, Combine combine) {
  const auto bytes = to_bytes(value);
  call.mine = bytes;
  // Entries are folded in rank order, so every rank receives the same bits. The fold refers to
  // one local, so that std::function holds it without an allocation.
  const auto fold = [this, &call, &combine](std::vector<detail::rank_bytes>& entries) {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    T total = decode<T>(call, entries.front());
    for (std::size_t i = 1; i < entries.size(); ++i) {
      total = combine(std::move(total), decode<T>(call, entries[i]), entries.front().rank, entries[i].rank);
    }
    return detail::rank_bytes{entries.front().rank, to_bytes(total)};
  };
  call.fold = [&fold](std::vector<detail::rank_bytes>& entries) { return fold(entries); };
  return decode<T>(call, run(call).at(0));
}

namespace detail {
template <class T>
T combine_scalar(T a, T b, reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg: return static_cast<T>(a + b);  // avg: the sum, divided at the end
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
  return a;  // unreachable: check_reduce_op refuses bitwise operations on floating-point types
}
}  // namespace detail

template <reducible T>
T group::all_reduce(const T& value, reduce_op op, call_options options, std::source_location site) {
  constexpr bool floating = [] {
    if constexpr (std::is_arithmetic_v<T>)
      return std::is_floating_point_v<T>;
    else
      return std::is_floating_point_v<typename T::value_type>;
  }();
  detail::check_reduce_op("all_reduce", op, !floating);
  auto call = make_call(detail::exchange_kind::all_reduce,
                        detail::signed_name("all_reduce(" + std::string(to_string(op)) + ")", options.signature),
                        options.timeout, site);
  T total = fold_in_rank_order(call, value, [&](T a, const T& b, int rank_a, int rank_b) {
    if constexpr (std::is_arithmetic_v<T>) {
      return detail::combine_scalar(a, b, op);
    } else {
      if (a.size() != b.size()) fail_sizes_differ(call, rank_a, a.size(), rank_b, b.size());
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = detail::combine_scalar(a[i], b[i], op);
      return a;
    }
  });
  if constexpr (floating) {
    if (op == reduce_op::avg) {  // every rank divides the same bits by the same size
      if constexpr (std::is_arithmetic_v<T>) {
        total /= static_cast<T>(size());
      } else {
        for (auto& x : total) x /= static_cast<typename T::value_type>(size());
      }
    }
  }
  return total;
}

template <sendable T, binary_operation_of<T> Op>
T group::all_reduce(const T& value, Op op, call_options options, std::source_location site) {
  auto call = make_call(detail::exchange_kind::all_reduce,
                        detail::signed_name("all_reduce(user operation)", options.signature), options.timeout, site);
  return fold_in_rank_order(call, value, [&](T a, const T& b, int, int) { return static_cast<T>(op(a, b)); });
}

template <sendable T>
T group::scatter(const std::vector<T>& values, rooted_options options, std::source_location site) {
  const int root = options.root;
  check_root("scatter", root);
  auto call = make_call(detail::exchange_kind::scatter,
                        detail::signed_name("scatter(root " + std::to_string(root) + ")", options.signature),
                        options.timeout, site);
  std::vector<std::byte> bytes;
  if (rank() == root) {
    std::vector<std::vector<std::byte>> parts;
    for (const auto& v : values) parts.push_back(to_bytes(v));
    bytes = to_bytes(parts);
    call.mine = bytes;
  }
  call.root = root;
  const int members = size();
  call.finish = [this, &call, members, root](std::vector<detail::rank_bytes>& entries) {
    auto parts = decode<std::vector<std::vector<std::byte>>>(call, entries.at(0));
    if (static_cast<int>(parts.size()) != members) fail_scatter_count(call, root, parts.size());
    std::vector<detail::rank_bytes> out;
    for (int r = 0; r < members; ++r) out.push_back({r, std::move(parts[static_cast<std::size_t>(r)])});
    return out;
  };
  return decode<T>(call, run(call).at(0));
}

template <class F, class R>
requires sendable<R> R group::compute_and_broadcast(F&& fn, rooted_options options, std::source_location site) {
  const int root = options.root;
  check_root("compute_and_broadcast", root);
  auto call = make_call(detail::exchange_kind::broadcast, "compute_and_broadcast(root " + std::to_string(root) + ")",
                        options.timeout, site);
  call.root = root;
  // Connected first: while fn runs, the others then wait in jobkit's data path with its deadline,
  // not in the setup's PMIx fence (bounded by the launcher's own timeout).
  connect(call);
  if (rank() != root) return decode<R>(call, run(call).at(0));
  std::optional<R> value;
  std::vector<std::byte> bytes;
  try {
    value.emplace(fn());
    bytes = to_bytes(*value);
  } catch (...) {
    fail_from_callable(call);
  }
  call.mine = bytes;
  run(call);
  return std::move(*value);
}

template <class F, class R>
requires sendable<R> std::vector<R> group::gather_from_all_ranks(F&& fn, rooted_options options,
                                                                 std::source_location site) {
  check_root("gather_from_all_ranks", options.root);
  auto call = make_call(detail::exchange_kind::gather,
                        "gather_from_all_ranks(root " + std::to_string(options.root) + ")", options.timeout, site);
  connect(call);
  const auto bytes = encode_result(fn, call);
  call.mine = bytes;
  call.root = options.root;
  return decode_all<R>(call, run(call));
}

template <class Map, class Reduce, class M, class R>
requires sendable<M> && sendable<R> R group::reduce_and_broadcast(Map&& map, Reduce&& reduce, call_options options,
                                                                  std::source_location site) {
  auto call = make_call(detail::exchange_kind::reduce_and_broadcast, "reduce_and_broadcast", options.timeout, site);
  connect(call);
  const auto bytes = encode_result(map, call);
  call.mine = bytes;
  call.finish = [this, &call, &reduce](std::vector<detail::rank_bytes>& entries) {
    return std::vector<detail::rank_bytes>{{0, to_bytes(reduce(decode_all<M>(call, entries)))}};
  };
  return decode<R>(call, run(call).at(0));
}

}  // namespace jobkit
