#pragma once

// Who runs what: "main process only", "once per node", "rank 0 first" and "n at a time",
// taking callables so that skipped work is really skipped. Where each comes from and how it
// differs from its origin: docs/lineage.md.
//
// Failures: when fn (or post_fn) throws on a rank that others wait for, that rank gets its own
// exception back and every rank waiting for it throws a jobkit::error carrying the message.
//
// Nesting rule: code inside fn runs on some ranks only, or not at the same time on all. There,
//  - a helper nested inside main_process_only / run_on_main runs its callable directly (the main
//    rank is also its node's local rank 0, and alone);
//  - once_per_node / run_once_per_node / local_zero_first nested inside once_per_node or
//    run_once_per_node run their callable directly;
//  - any other nesting throws jobkit::error (invalid_argument) at once, naming both helpers;
//  - a collective inside fn on a group with members outside the section (e.g. a world barrier
//    inside main_process_only) throws jobkit::error at once, instead of waiting forever.
// So nested helpers never deadlock.

#include <filesystem>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>

#include "jobkit/collectives.hpp"
#include "jobkit/detail/sections.hpp"
#include "jobkit/export.hpp"
#include "jobkit/runtime.hpp"

namespace jobkit {

/// Settings of run_on_main.
struct run_on_main_options {
  /// post_fn on every rank at once (true), or on the other ranks after the main one (false).
  bool run_post_on_main = false;
  std::chrono::milliseconds timeout{0};  ///< as call_options::timeout
};

/// Settings of run_once_per_node.
struct run_once_per_node_options {
  /// post_fn on every rank (true), or only on the ranks that did not run fn (false).
  bool run_post_on_all = false;
  std::chrono::milliseconds timeout{0};  ///< as call_options::timeout
};

/// Settings of do_n_at_a_time.
struct n_at_a_time_options {
  /// At most n ranks at a time; empty: one rank per node at a time, on any layout.
  std::optional<int> n;
  std::chrono::milliseconds timeout{0};  ///< as call_options::timeout
};

namespace detail {

/// A stand-in for "no post function".
struct no_post {
  void operator()() const noexcept {}
};

/// "rank 3 (c1)" for this process.
JOBKIT_API std::string describe_self();

/// Runs fn; if it throws, fails the collective `g`'s other members wait in with the exception's
/// message (naming this rank and the helper's call site), then rethrows.
template <class F>
decltype(auto) run_or_abort(group& g, F& fn, const std::string& helper, const std::source_location& site) {
  try {
    return fn();
  } catch (const std::exception& e) {
    g.abort(helper + " at " + site_text(site) + ": fn threw on " + describe_self() + ": " + e.what());
    throw;
  } catch (...) {
    g.abort(helper + ": fn threw a non-standard exception on " + describe_self());
    throw;
  }
}

/// Whether a helper called inside an enclosing section may just run its callable here.
/// @throws jobkit::error when the nesting is not allowed (see the rule at the top of the file)
JOBKIT_API bool nested_runs_directly(section_kind wanted, const char* helper, const std::source_location& site);

template <class R>
using stored_t = std::conditional_t<std::is_void_v<R>, bool, R>;

/// fn's result, or true for a void fn, so that it can travel through a collective.
template <class F, class R = std::invoke_result_t<F&>>
stored_t<R> call_storing(F& fn) {
  if constexpr (std::is_void_v<R>) {
    fn();
    return true;
  } else {
    return fn();
  }
}

}  // namespace detail

/// fn() on the main rank only; its result is returned on every rank. fn may return void.
template <class F, class R = std::invoke_result_t<F&>>
requires(std::is_void_v<R> || sendable<R>) R
    main_process_only(F&& fn, call_options options = {}, std::source_location site = std::source_location::current()) {
  if (detail::nested_runs_directly(detail::section_kind::main_only, "main_process_only", site)) return fn();
  auto& g = world();
  auto guarded = [&] {
    detail::section_guard section(detail::section_kind::main_only, "main_process_only", site);
    return detail::call_storing(fn);
  };
  [[maybe_unused]] auto result = g.compute_and_broadcast(guarded, 0, options, site);
  if constexpr (!std::is_void_v<R>) return result;
}

/// Another name for main_process_only.
template <class F, class R = std::invoke_result_t<F&>>
requires(std::is_void_v<R> || sendable<R>) R
    master_only(F&& fn, call_options options = {}, std::source_location site = std::source_location::current()) {
  return main_process_only(std::forward<F>(fn), options, site);
}

/// fn on the main rank (its result returned everywhere), a barrier, then post_fn: on every rank
/// at once when run_post_on_main, else on the other ranks followed by a barrier (the usual "main
/// prepares, the others load what it prepared").
template <class F, class P = detail::no_post, class R = std::invoke_result_t<F&>>
requires(std::is_void_v<R> || sendable<R>) && std::is_invocable_v<P&> R
    run_on_main(F&& fn, P&& post_fn = {}, run_on_main_options options = {},
                std::source_location site = std::source_location::current()) {
  const bool post_on_main = options.run_post_on_main;
  const call_options call{options.timeout};
  if (detail::nested_runs_directly(detail::section_kind::main_only, "run_on_main", site)) {
    if constexpr (std::is_void_v<R>) {
      fn();
      if (post_on_main) post_fn();
      return;
    } else {
      R result = fn();
      if (post_on_main) post_fn();
      return result;
    }
  }
  auto& g = world();
  auto guarded = [&] {
    detail::section_guard section(detail::section_kind::main_only, "run_on_main", site);
    return detail::call_storing(fn);
  };
  [[maybe_unused]] auto result = g.compute_and_broadcast(guarded, 0, call, site);
  g.barrier(call, site);
  if (post_on_main) {
    post_fn();
  } else {
    if (g.rank() != 0) detail::run_or_abort(g, post_fn, "run_on_main post_fn", site);
    g.barrier(call, site);
  }
  if constexpr (!std::is_void_v<R>) return result;
}

/// run_on_main with the flag spelled positionally, as SpeechBrain does.
template <class F, class P, class R = std::invoke_result_t<F&>>
requires(std::is_void_v<R> || sendable<R>) && std::is_invocable_v<P&> R
    run_on_main(F&& fn, P&& post_fn, bool run_post_on_main, call_options options = {},
                std::source_location site = std::source_location::current()) {
  return run_on_main(std::forward<F>(fn), std::forward<P>(post_fn),
                     run_on_main_options{run_post_on_main, options.timeout}, site);
}

/// fn() on local rank 0 of every node; the other ranks get an empty optional (for a void fn:
/// true where it ran). The ranks of a node wait for their runner, so its exception reaches them.
template <class F, class R = std::invoke_result_t<F&>>
std::optional<detail::stored_t<R>> once_per_node(F&& fn, call_options options = {},
                                                 std::source_location site = std::source_location::current()) {
  const bool runner = current_identity().local_rank == 0;
  if (detail::nested_runs_directly(detail::section_kind::node_leaders, "once_per_node", site)) {
    return detail::call_storing(fn);
  }
  auto& node = node_group();
  std::optional<detail::stored_t<R>> result;
  if (runner) {
    detail::section_guard section(detail::section_kind::node_leaders, "once_per_node", site);
    auto call = [&] { return detail::call_storing(fn); };
    result.emplace(detail::run_or_abort(node, call, "once_per_node", site));
  }
  node.barrier(options, site);
  return result;
}

/// once_per_node(fn), a barrier over all ranks, then post_fn: on every rank at once when
/// run_post_on_all, else on the ranks that did not run fn, followed by a barrier. Where post_fn
/// runs and returns a value, it replaces the result.
template <class F, class P = detail::no_post, class R = std::invoke_result_t<F&>>
requires std::is_invocable_v<P&> std::optional<detail::stored_t<R>> run_once_per_node(
    F&& fn, P&& post_fn = {}, run_once_per_node_options settings = {},
    std::source_location site = std::source_location::current()) {
  const bool run_post_on_all = settings.run_post_on_all;
  const call_options options{settings.timeout};
  using post_result = std::invoke_result_t<P&>;
  auto run_post = [&](std::optional<detail::stored_t<R>>& result) {
    if constexpr (std::is_convertible_v<post_result, detail::stored_t<R>> && !std::is_void_v<post_result>) {
      result = post_fn();
    } else {
      post_fn();
    }
  };
  if (detail::nested_runs_directly(detail::section_kind::node_leaders, "run_once_per_node", site)) {
    std::optional<detail::stored_t<R>> result = detail::call_storing(fn);
    if (run_post_on_all) run_post(result);
    return result;
  }
  auto result = once_per_node(fn, options, site);
  auto& g = world();
  g.barrier(options, site);
  if (run_post_on_all) {
    run_post(result);
  } else {
    if (current_identity().local_rank != 0) {
      auto call = [&] {
        run_post(result);
        return true;
      };
      detail::run_or_abort(g, call, "run_once_per_node post_fn", site);
    }
    g.barrier(options, site);
  }
  return result;
}

/// run_once_per_node with the flag spelled positionally, as SpeechBrain does.
template <class F, class P, class R = std::invoke_result_t<F&>>
requires std::is_invocable_v<P&> std::optional<detail::stored_t<R>> run_once_per_node(
    F&& fn, P&& post_fn, bool run_post_on_all, call_options options = {},
    std::source_location site = std::source_location::current()) {
  return run_once_per_node(std::forward<F>(fn), std::forward<P>(post_fn),
                           run_once_per_node_options{run_post_on_all, options.timeout}, site);
}

namespace detail {

template <class F, class R = std::invoke_result_t<F&>>
R first_then_others(group& g, bool first, F& fn, call_options options, const char* helper,
                    const std::source_location& site) {
  if (nested_runs_directly(section_kind::staggered, helper, site)) return fn();
  // Connect before the first rank's work: the others then wait in jobkit's barrier, not in a
  // PMIx fence bounded by Slurm's PMIx timeout (300 s).
  g.setup(options, site);
  auto guarded = [&]() -> R {
    section_guard section(section_kind::staggered, helper, site);
    return fn();
  };
  if (first) {
    if constexpr (std::is_void_v<R>) {
      run_or_abort(g, guarded, helper, site);
      g.barrier(options, site);
    } else {
      R result = run_or_abort(g, guarded, helper, site);
      g.barrier(options, site);
      return result;
    }
  } else {
    g.barrier(options, site);
    return guarded();
  }
}

}  // namespace detail

/// fn() on every rank: the main rank first; the others start when it has finished. If the main
/// rank's fn throws, the others do not run fn and throw a jobkit::error with its message.
/// The others wait `options.timeout` at most (default JOBKIT_TIMEOUT).
template <class F, class R = std::invoke_result_t<F&>>
R zero_first(F&& fn, call_options options = {}, std::source_location site = std::source_location::current()) {
  return detail::first_then_others(world(), current_identity().rank == 0, fn, options, "zero_first", site);
}

/// zero_first per node: local rank 0 of each node first, then the node's other ranks. Nodes do
/// not wait for each other.
template <class F, class R = std::invoke_result_t<F&>>
R local_zero_first(F&& fn, call_options options = {}, std::source_location site = std::source_location::current()) {
  if (detail::current_section() && detail::current_section()->kind == detail::section_kind::node_leaders) {
    detail::nested_runs_directly(detail::section_kind::node_leaders, "local_zero_first", site);
    return fn();
  }
  return detail::first_then_others(node_group(), current_identity().local_rank == 0, fn, options, "local_zero_first",
                                   site);
}

namespace detail {
/// The round (0, 1, ...) in which this rank runs, and the number of rounds, for do_n_at_a_time.
/// Ranks are ordered by (local rank, node), so that each round spreads over the nodes; with no n
/// the rounds are the local ranks: exactly one rank per node at a time, whatever the layout.
JOBKIT_API std::pair<int, int> n_at_a_time_round(std::optional<int> n, call_options options,
                                                 const std::source_location& site);
}  // namespace detail

/// fn() on every rank, at most n ranks at a time (default: one rank per node at a time, for any
/// layout, including cyclic and uneven ones); each rank gets its own fn's result. For throttling
/// checkpoint writes or downloads. If fn throws on a rank, the rounds stop and every rank throws.
template <class F, class R = std::invoke_result_t<F&>>
R do_n_at_a_time(F&& fn, n_at_a_time_options settings = {},
                 std::source_location site = std::source_location::current()) {
  if (detail::nested_runs_directly(detail::section_kind::staggered, "do_n_at_a_time", site)) return fn();
  const call_options options{settings.timeout};
  const auto [mine, rounds] = detail::n_at_a_time_round(settings.n, options, site);
  auto& g = world();
  std::optional<detail::stored_t<R>> result;
  for (int round = 0; round < rounds; ++round) {
    if (round == mine) {
      detail::section_guard section(detail::section_kind::staggered, "do_n_at_a_time", site);
      auto call = [&] { return detail::call_storing(fn); };
      result.emplace(detail::run_or_abort(g, call, "do_n_at_a_time", site));
    }
    g.barrier(options, site);
  }
  if constexpr (!std::is_void_v<R>) return std::move(*result);
}

/// do_n_at_a_time with n spelled positionally.
template <class F, class R = std::invoke_result_t<F&>>
R do_n_at_a_time(F&& fn, int n, call_options options = {},
                 std::source_location site = std::source_location::current()) {
  return do_n_at_a_time(std::forward<F>(fn), n_at_a_time_options{n, options.timeout}, site);
}

/// 0 on exactly one rank per file system holding `dir`, counting up on the others: the rank
/// that should write files there. Collective over all ranks.
/// Overrides: FS_LOCAL_RANK (this rank's value), else OLMO_SHARED_FS=1 (one file system for
/// all: the global rank). Otherwise each node's local rank 0 drops a probe file in
/// `dir` and every rank looks which probes it sees: ranks that see the same set share a file
/// system (the dev cluster's work tree is shared; its /tmp is per node).
/// @throws jobkit::error naming dir when it cannot be written, or the variable when malformed
JOBKIT_API int fs_local_rank(const std::filesystem::path& dir, call_options options = {});

}  // namespace jobkit
