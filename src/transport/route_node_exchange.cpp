// The node exchange: a barrier, all_gather or all_reduce of a group whose members are all on one
// node, with no leader. Each member signs its slot with its contribution and counts itself in; the
// last to arrive wakes the others; then each reads the others' parts and folds them itself, in rank
// order (the same bits on every member). A contribution too large for its part goes through the
// segment's data region instead: the last to arrive claims finishing, grants each large one a
// place, waits until they are copied in, folds and publishes the result, which the others read.

#include <fmt/format.h>

#include <algorithm>

#include "core/failure.hpp"
#include "transport/routes.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

/// The result from the members' parts, read by each member (folded here for all_reduce).
std::vector<rank_bytes> read_parts(const route_media& m, const exchange& ex);
/// The finisher's: has the large contributions copied into the data region, folds, and publishes
/// the result; returns this member's entries. `mine` is this member's contribution.
std::vector<rank_bytes> finish_on_node(const route_media& m, const exchange& ex, std::span<const std::byte> mine);
/// The deadline of a member waiting in the node exchange: names who never arrived, whose large
/// contribution never came, or the member that took on finishing and never published.
[[noreturn]] void finish_stalled(const route_media& m, const exchange& ex);

}  // namespace

std::vector<rank_bytes> node_exchange(const route_media& m, const exchange& ex) {
  auto& context = m.context;
  auto& node = *m.node;
  auto& segment = node.segment();
  const auto seq = low_bits(context.sequence);
  const auto target = context.sequence * node.mates().size();
  node.check(ex, false);
  const auto mine = ex.mine.value_or(std::span<const std::byte>{});
  if (ex.mine) context.check_size(mine.size(), ex);
  node.sign_slot(ex, mine, ex.mine.has_value());
  const auto stalled = [&] { finish_stalled(m, ex); };
  // The last to arrive wakes the others. A node-mate in another collective (one over buffers) may be
  // the last and ring only the leader's bell: the others find every arrival at their next look.
  const bool last = segment.arrive() == target;
  if (last) {
    segment.ring(node_segment::bell::down);
  } else {
    node.wait_in_segment(
        node_segment::bell::down, ex, ex.deadline, [&] { return segment.arrivals() >= target; }, stalled);
  }
  node.check_parts_in_step(ex);
  const auto count = static_cast<int>(node.mates().size());
  bool large = false;
  for (int i = 0; i < count && !large; ++i) large = in_data_region(node.part(i));
  if (!large) return read_parts(m, ex);

  // A contribution past its part: the last to arrive gathers them in the data region and
  // publishes the result; the others wait for it.
  std::optional<std::vector<rank_bytes>> finished;
  const auto try_finish = [&] {
    if (finished || !segment.claim(seq, node.index())) return;
    try {
      finished = finish_on_node(m, ex, mine);
    } catch (...) {
      // fail() and user_step() have told the others; anything else (no memory, an interruption)
      // must too, or they would wait for this rank's result until their deadline.
      if (context.broken.empty()) {
        context.spreader->spread_abort(fmt::format("{} at {} failed on {}, which was finishing it for its node",
                                                   ex.name, ex.site, context.describe(context.rank)),
                                       context.rank, errc::peer_failure);
      }
      throw;
    }
  };
  const auto published = [&] { return segment.load(segment.result_word()) == seq; };
  if (last) try_finish();
  if (mine.size() > node_segment::inline_capacity && !finished) {
    node.wait_in_segment(
        node_segment::bell::down, ex, ex.deadline, [&] { return segment.load(segment.grant_word()) == seq; }, stalled);
    node.fill_granted(ex, mine);
  }
  if (finished) return std::move(*finished);
  node.wait_in_segment(node_segment::bell::down, ex, ex.deadline, published, stalled);
  return node.read_result(ex);
}

namespace {

std::vector<rank_bytes> read_parts(const route_media& m, const exchange& ex) {
  const auto& mates = m.node->mates();
  std::vector<rank_bytes> entries;
  if (ex.kind == exchange_kind::barrier) return entries;
  entries.reserve(mates.size());
  for (int i = 0; i < static_cast<int>(mates.size()); ++i) {
    const auto& p = m.node->part(i);
    if (p.has_payload != 0)
      entries.push_back(rank_bytes{mates[static_cast<std::size_t>(i)], {p.payload, p.payload + p.size}});
  }
  if (ex.fold && !entries.empty()) {
    entries = m.context.user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  return entries;
}

std::vector<rank_bytes> finish_on_node(const route_media& m, const exchange& ex, std::span<const std::byte> mine) {
  auto& node = *m.node;
  const auto& mates = node.mates();
  const int self = node.index();
  const auto total = node.grant_places(ex, self);  // every part checked: node_exchange
  if (total > 0) {
    node.wait_in_segment(
        node_segment::bell::up, ex, ex.deadline, [&] { return node.unfilled(self).empty(); },
        [&] { node.pieces_not_filled(ex, node.unfilled(self)); });
  }
  std::vector<rank_bytes> entries;
  for (int i = 0; i < static_cast<int>(mates.size()); ++i) {
    if (node.part(i).has_payload == 0) continue;
    const auto bytes = i == self ? mine : node.contribution(i, total);
    entries.push_back(rank_bytes{mates[static_cast<std::size_t>(i)], {bytes.begin(), bytes.end()}});
  }
  if (ex.fold && !entries.empty()) {
    entries = m.context.user_step(ex, [&] { return std::vector<rank_bytes>{ex.fold(entries)}; });
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  const auto everyone = all_entries(entries);
  node.check_members(ex, false);  // the others may have given up meanwhile (a slow operation): fail as they did
  node.publish(ex, entries, everyone);
  return entries;
}

void finish_stalled(const route_media& m, const exchange& ex) {
  auto& context = m.context;
  auto& node = *m.node;
  auto& segment = node.segment();
  const auto seq = low_bits(context.sequence);
  if (const auto missing = node.not_arrived(); !missing.empty()) context.never_arrived(ex, missing);
  const int finisher = segment.finisher(seq);
  if (finisher >= 0 && segment.load(segment.grant_word()) == seq) {
    if (const auto ranks = node.unfilled(finisher); !ranks.empty()) node.pieces_not_filled(ex, ranks);
  }
  const auto who = finisher >= 0 ? context.describe(node.mates()[static_cast<std::size_t>(finisher)]) : "no rank";
  context.timed_out(ex, fmt::format(": every rank arrived, but {}, which arrived last and "
                                    "finishes the exchange, did not publish the result (a slow operation, or stopped)",
                                    who));
}

}  // namespace

}  // namespace jobkit::detail
