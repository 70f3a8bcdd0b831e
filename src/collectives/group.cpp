#include "jobkit/collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "collectives/group_state.hpp"
#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "core/timeout.hpp"
#include "jobkit/detail/sections.hpp"
#include "progress/tracker.hpp"
#include "transport/exchange.hpp"
#include "where/record.hpp"
#include "where/settings.hpp"
#include "where/watch.hpp"

namespace jobkit {

namespace {

/// What `jobkit where` and the step's own report say of a call: the record (src/where/record.hpp)
/// and the watch (src/where/watch.hpp), each told what it needs. Where the step reports at all
/// (src/where/settings.hpp), the group's rank 0 asks for the report and every rank's deadline
/// message points to it.
struct where_call {
  where::call_info recorded;
  where::watched_call watched;
};

where_call where_of(const detail::group_state& state, const detail::collective_call& call) {
  where_call w;
  const int rank = state.world_ranks.at(static_cast<std::size_t>(state.rank));
  w.recorded = {
      .call = call.name, .site = call.site, .rank = rank, .group_size = static_cast<int>(state.world_ranks.size())};
  w.watched = {.call = call.name,
               .site = call.site,
               .rank = rank,
               .report_after = where::reports() ? where::report_after(call.timeout) : std::chrono::milliseconds(0)};
  return w;
}

/// A call that failed after waiting past its report threshold: its message says where the step's
/// report of every rank is (group rank 0 logged it, if it was in the call too).
[[noreturn]] void point_to_report(const error& e, const detail::group_state& state, std::chrono::milliseconds after,
                                  std::chrono::steady_clock::time_point began) {
  if (after.count() <= 0 || std::chrono::steady_clock::now() - began < after) throw;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(after).count();
  const std::string reporter =
      state.rank == 0 ? std::string("this rank")
                      : detail::rank_label(state.world_ranks.front(), state.hosts.empty() ? "" : state.hosts.front());
  detail::raise(e.code(),
                fmt::format("{}; where every rank was after {} s: the report {} logged, if it was in the call "
                            "(JOBKIT_WHERE_REPORT_AFTER; jobkit where shows it while a step runs)",
                            e.what(), seconds, reporter),
                e.native_status());
}

}  // namespace

group::group(std::shared_ptr<detail::group_state> state) : state_(std::move(state)) {}

group detail::group_access::over(std::shared_ptr<group_state> state) { return group(std::move(state)); }

int group::rank() const noexcept { return state_->rank; }
int group::size() const noexcept { return static_cast<int>(state_->world_ranks.size()); }
const std::vector<int>& group::world_ranks() const noexcept { return state_->world_ranks; }

std::string group::describe(int group_rank) const {
  const auto r = static_cast<std::size_t>(group_rank);
  return detail::rank_label(state_->world_ranks.at(r), r < state_->hosts.size() ? state_->hosts[r] : "");
}

detail::collective_call group::make_call(detail::exchange_kind kind, std::string name,
                                         std::chrono::milliseconds timeout, const std::source_location& site) const {
  const auto checked = detail::timeout_of(timeout, name);
  return detail::collective_call(kind, std::move(name), detail::site_text(site), checked);
}

void group::check_root(std::string_view operation, int root) const {
  if (root < 0 || root >= size()) {
    throw error(errc::invalid_argument,
                fmt::format("{}: root={} is not a rank of this group (ranks 0 to {})", operation, root, size() - 1));
  }
}

void group::connect(const detail::collective_call& call) {
  auto& state = *state_;
  switch (state.phase) {
    case detail::group_phase::connected: return;
    case detail::group_phase::failed:
      detail::raise(state.failure->code, "this group is unusable after an earlier failure: " + state.failure->reason,
                    state.failure->native_status);
    case detail::group_phase::pending: break;
  }
  std::optional<error> failed;
  try {
    state.pending->connect(state, {call.timeout, call.deadline});  // the exchange has what the setup left
  } catch (const timeout_error& e) {
    failed.emplace(
        timeout_error(detail::in_call(call.name, call.site, fmt::format("setting up the data path: {}", e.what())),
                      e.native_status()));
  } catch (const error& e) {
    failed.emplace(e.code(),
                   detail::in_call(call.name, call.site, fmt::format("setting up the data path: {}", e.what())),
                   e.native_status());
  } catch (const std::exception& e) {  // not jobkit's (no memory, no thread): the setup is spent all the same
    failed.emplace(errc::internal,
                   detail::in_call(call.name, call.site, fmt::format("setting up the data path: {}", e.what())));
  }
  state.pending.reset();
  if (!failed) {
    state.phase = detail::group_phase::connected;
    return;
  }
  state.phase = detail::group_phase::failed;
  state.failure = detail::group_failure{failed->code(), failed->what(), failed->native_status()};
  detail::raise(state.failure->code, state.failure->reason, state.failure->native_status);
}

std::vector<detail::rank_bytes> group::run(const detail::collective_call& call, std::span<std::byte> buffer,
                                           std::size_t piece) {
  detail::exchange ex(call);
  ex.buffer = buffer;
  ex.piece = piece;
  // A step boundary where nothing higher counts (docs/progress.md); its wait is not compute.
  detail::progress_mark(detail::mark_source::collective);
  const detail::collective_wait waited;
  const auto began = std::chrono::steady_clock::now();
  auto described = where_of(*state_, call);
  const where::call_scope recorded(described.recorded);
  const auto after = described.watched.report_after;
  if (state_->rank != 0) described.watched.report_after = std::chrono::milliseconds(0);  // rank 0 reports
  const where::watch_scope watched(described.watched);
  try {
    check_section(call);
    connect(call);
    return state_->link->run(ex);
  } catch (const error& e) {
    point_to_report(e, *state_, after, began);
  }
}

void group::run_into(detail::exchange_kind kind, std::string name, std::span<std::byte> buffer, std::size_t piece,
                     int root, std::chrono::milliseconds timeout, const std::source_location& site) {
  auto call = make_call(kind, std::move(name), timeout, site);
  call.root = root;
  run(call, buffer, piece);
}

void group::place_own_part(std::span<const std::byte> mine, std::span<std::byte> all,
                           const std::source_location& site) {
  if (all.size() != mine.size() * static_cast<std::size_t>(size())) {
    throw error(errc::invalid_argument,
                fmt::format("all_gather_into at {}: all holds {} bytes, not size() * mine = {} * {} bytes",
                            detail::site_text(site), all.size(), size(), mine.size()));
  }
  auto* place = all.data() + static_cast<std::size_t>(rank()) * mine.size();
  if (place != mine.data() && !mine.empty()) std::memmove(place, mine.data(), mine.size());
}

void group::abort(const std::string& message) noexcept {
  if (state_->link) state_->link->abort(message);
}

void group::fail_from_callable(const detail::collective_call& call) {
  std::string what = "an exception that is not a std::exception";
  try {
    throw;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  try {
    connect(call);  // the other ranks may be waiting for this one to set up the data path
  } catch (const error&) {
  }
  abort(fmt::format("{} at {}: the callable threw on {}: {}", call.name, call.site, describe(rank()), what));
  throw;
}

void group::fail_to_decode(const detail::collective_call& call, int from_rank, const error& e) const {
  throw error(e.code(), fmt::format("{} at {}: the value from {} cannot be read: {}", call.name, call.site,
                                    describe(from_rank), e.what()));
}

void group::fail_sizes_differ(const detail::collective_call& call, int rank_a, std::size_t size_a, int rank_b,
                              std::size_t size_b) const {
  throw error(errc::invalid_argument, fmt::format("{} at {}: {} passed {} elements but {} passed {}", call.name,
                                                  call.site, describe(rank_a), size_a, describe(rank_b), size_b));
}

void group::fail_scatter_count(const detail::collective_call& call, int root, std::size_t count) const {
  throw error(errc::invalid_argument, fmt::format("{} at {}: {} passed {} values for a group of {} ranks", call.name,
                                                  call.site, describe(root), count, size()));
}

namespace detail {

std::string site_text(const std::source_location& site) {
  if (const auto* text = current_call_site_override()) return *text;
  std::string_view file = site.file_name();
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  // Built by hand, not by fmt: every collective names its call site.
  char line[16];
  const auto end = std::to_chars(line, line + sizeof line, site.line()).ptr;
  std::string text;
  text.reserve(file.size() + 1 + static_cast<std::size_t>(end - line));
  text.append(file).append(1, ':').append(line, end);
  return text;
}

}  // namespace detail

void group::check_section(const detail::collective_call& call) const {
  const auto section = detail::current_section();
  if (!section || size() == 1) return;
  const auto& local = state_->local_ranks;
  if (section->kind == detail::section_kind::node_leaders && !local.empty() &&
      std::all_of(local.begin(), local.end(), [](int r) { return r == 0; })) {
    return;  // every member runs this section too
  }
  const char* who = section->kind == detail::section_kind::main_only      ? "the main rank only"
                    : section->kind == detail::section_kind::node_leaders ? "local rank 0 of each node only"
                                                                          : "one rank at a time";
  throw error(errc::invalid_argument,
              fmt::format("{} at {} on a group of {} ranks is called inside {}, which runs on {}: the other "
                          "members would never arrive (see the nesting rule in jobkit/helpers.hpp)",
                          call.name, call.site, size(), section->where, who));
}

void group::check_peers(const std::string& during) {
  if (state_->link) state_->link->check_peers(during);
}

void group::setup(call_options options, std::source_location site) {
  const auto call = make_call(detail::exchange_kind::barrier, "setup", options.timeout, site);
  check_section(call);
  connect(call);
}

void group::barrier(call_options options, std::source_location site) {
  auto call = make_call(detail::exchange_kind::barrier, "barrier", options.timeout, site);
  run(call);
}

void group::reduce_into(std::span<std::byte> data,
                        const std::function<void(std::span<std::byte>, std::span<const std::byte>)>& combine,
                        call_options options, std::source_location site) {
  auto call = make_call(detail::exchange_kind::all_reduce, detail::signed_name("reduce_into", options.signature),
                        options.timeout, site);
  call.mine = std::span<const std::byte>(data);
  // Folded in place into the lowest rank's bytes, in rank order: every member gets the same bits.
  call.fold = [&](std::vector<detail::rank_bytes>& entries) {
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    auto& total = entries.front();
    for (std::size_t i = 1; i < entries.size(); ++i) {
      const auto& next = entries[i];
      if (next.bytes.size() != total.bytes.size()) {
        fail_sizes_differ(call, total.rank, total.bytes.size(), next.rank, next.bytes.size());
      }
      combine(total.bytes, next.bytes);
    }
    return detail::rank_bytes{total.rank, std::move(total.bytes)};
  };
  const auto result = run(call);
  const auto& bytes = result.at(0).bytes;
  if (bytes.size() != data.size()) fail_sizes_differ(call, 0, bytes.size(), rank(), data.size());
  if (!bytes.empty()) std::memcpy(data.data(), bytes.data(), bytes.size());
}

std::optional<group> group::split(int color, int key, call_options options, std::source_location site) {
  const auto call = make_call(detail::exchange_kind::all_gather, "split", options.timeout, site);
  const auto choices = all_gather(std::make_pair(color, key), options, site);
  if (color < 0) return std::nullopt;
  std::vector<std::tuple<int, int, int>> chosen;  // (key, group rank, world rank)
  for (int r = 0; r < size(); ++r) {
    const auto& [c, k] = choices[static_cast<std::size_t>(r)];
    if (c == color) chosen.emplace_back(k, r, state_->world_ranks[static_cast<std::size_t>(r)]);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<int> members;
  for (const auto& [k, r, w] : chosen) members.push_back(w);
  if (!state_->make_subgroup) {
    throw error(errc::internal, fmt::format("split at {}: this group cannot make subgroups", call.site));
  }
  return detail::group_over(state_->make_subgroup(members, {call.timeout, call.deadline}));  // what the all_gather left
}

}  // namespace jobkit
