// The on-node medium of the tree protocol (tree_node): what the routes (routes.hpp) do with the
// node's segment. A member signs its slot and its part, contributes past it into a granted place
// of the data region, a leader (or a finisher) publishes a result that the others read; every wait
// sleeps on the segment's futexes with the node-mates' pidfds and aborts looked at in between. Its
// setup is tree_node_setup.cpp, its mail tree_node_mail.cpp; the segment itself (its layout,
// futexes, pidfd watches) is node_segment.

#include "transport/tree_node.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "transport/frame.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

}  // namespace

tree_node::tree_node(tree_context& context, std::vector<int> mates, int index)
    : context_(context), mates_(std::move(mates)), index_(index) {}

tree_node::~tree_node() {
  if (!segment_) return;
  segment_->store(segment_->member(index_).left, 1);
  segment_->ring(node_segment::bell::up);
  segment_->ring(node_segment::bell::down);
}

void tree_node::copy_text(char (&to)[node_segment::text_capacity], std::uint32_t& size, std::string_view text) {
  size = static_cast<std::uint32_t>(std::min(text.size(), sizeof to));
  std::memcpy(to, text.data(), size);
}

void tree_node::post_abort(int origin, errc code, const std::string& message) noexcept {
  if (segment_) segment_->post_abort(origin, code, message);
}

void tree_node::segment_failed(const exchange& ex, const error& e) {
  context_.fail(ex, fmt::format("{} at {}: {}", ex.name, ex.site, e.what()), context_.rank, e.code());
}

void tree_node::check(const exchange& ex, bool deaths, const std::function<bool()>& excused) {
  check_members(ex, deaths, excused);
  check_mail_in_step(ex);
}

void tree_node::check_members(const exchange& ex, bool deaths, const std::function<bool()>& excused) {
  const auto aborted = [&] {
    if (auto notice = segment_->abort_notice()) context_.passed_on(notice->reason, notice->origin, notice->code, ex);
  };
  aborted();
  const auto during = [&] { return fmt::format("during {}{}", ex.name, ex.site.empty() ? "" : " at " + ex.site); };
  for (std::size_t i = 0; i < watched_.size(); ++i) {
    const int index = watched_members_[i];
    const int g = mates_[static_cast<std::size_t>(index)];
    const bool left = segment_->load(segment_->member(index).left) != 0;
    const bool ended = !left && deaths && watched_[i].ended();
    if ((!left && !ended) || (excused && excused())) continue;
    // A member that left because of an abort posted after the look above: the abort is the cause.
    aborted();
    if (left) {
      context_.fail(ex,
                    fmt::format("{} left the group {}: it destroyed the group or its process is exiting",
                                context_.describe(g), during()),
                    g);
    }
    context_.fail(ex,
                  fmt::format("{} exited {}: the process died or exited (its pidfd reported the end)",
                              context_.describe(g), during()),
                  g);
  }
}

void tree_node::wait_for_leader(const exchange& ex, time_point deadline, const std::function<bool()>& ready) {
  wait_in_segment(node_segment::bell::down, ex, deadline, ready, [&] {
    if (const auto missing = not_arrived(); !missing.empty()) context_.never_arrived(ex, missing);
    context_.timed_out(ex, fmt::format(" waiting for the result from {}: some rank outside "
                                       "this rank's node never arrived",
                                       context_.describe(mates_.front())));
  });
}

void tree_node::wait_for_result(const exchange& ex, time_point deadline) {
  const auto seq = low_bits(context_.sequence);
  wait_for_leader(ex, deadline, [&] { return segment_->load(segment_->result_word()) == seq; });
}

void tree_node::sign_slot(const exchange& ex, std::span<const std::byte> mine, bool has_payload) {
  auto& slot = segment_->member(index_);
  ++signed_;
  auto& mine_part = part(index_);
  mine_part.sequence = context_.sequence;
  mine_part.name_hash = name_hash_of(ex);
  mine_part.size = mine.size();
  mine_part.has_payload = has_payload ? 1 : 0;
  slot.buffer_size = ex.into_buffer() ? ex.buffer.size() : 0;
  copy_text(mine_part.name, mine_part.name_size, ex.name);
  copy_text(mine_part.site, mine_part.site_size, ex.site);
  if (!mine.empty() && mine.size() <= node_segment::inline_capacity) {
    std::memcpy(mine_part.payload, mine.data(), mine.size());
  }
  segment_->store(slot.arrived, low_bits(context_.sequence));
}

void tree_node::contribute(const exchange& ex, time_point deadline, std::span<const std::byte> mine, bool has_payload) {
  auto& segment = *segment_;
  const auto seq = low_bits(context_.sequence);
  sign_slot(ex, mine, has_payload);
  const bool large = mine.size() > node_segment::inline_capacity;
  // One wake-up of the leader per exchange, by the last to arrive (the leader counts itself too):
  // on a node with more ranks than cores each wake-up is a context switch.
  if (segment.arrive() == context_.sequence * mates_.size()) segment.ring(node_segment::bell::up);
  if (!large) return;
  wait_for_leader(ex, deadline, [&] { return segment.load(segment.grant_word()) == seq; });
  fill_granted(ex, mine);
}

void tree_node::fill_granted(const exchange& ex, std::span<const std::byte> mine) {
  auto& segment = *segment_;
  auto& slot = segment.member(index_);
  try {
    std::memcpy(segment.data(slot.data_offset + mine.size()).data() + slot.data_offset, mine.data(), mine.size());
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  segment.store(slot.filled, low_bits(context_.sequence));
  segment.ring(node_segment::bell::up);
}

bool tree_node::pieces_fit_in_place(const exchange& ex) {
  if (ex.kind != exchange_kind::all_gather_into) return false;
  for (int i = 0; i < static_cast<int>(mates_.size()); ++i) {
    const auto& p = part(i);
    if (in_data_region(p) && (segment_->member(i).buffer_size != ex.buffer.size() || p.size != ex.piece_size()))
      return false;
  }
  return true;
}

std::size_t tree_node::grant_places(const exchange& ex, int finisher) {
  auto& segment = *segment_;
  pieces_in_place_ = pieces_fit_in_place(ex);
  std::size_t total = 0;
  for (int i = 0; i < static_cast<int>(mates_.size()); ++i) {
    auto& slot = segment.member(i);
    if (i == finisher || !in_data_region(part(i))) continue;
    if (pieces_in_place_) {
      slot.data_offset = ex.piece_offset(mates_[static_cast<std::size_t>(i)]);
      total = ex.buffer.size();
    } else {
      slot.data_offset = total;
      total += (part(i).size + 63) / 64 * 64;
    }
  }
  pieces_in_place_ = pieces_in_place_ && total > 0;
  if (total == 0) return 0;
  try {
    segment.reserve(total);
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  segment.store(segment.grant_word(), low_bits(context_.sequence));
  segment.ring(node_segment::bell::down);
  return total;
}

std::span<const std::byte> tree_node::contribution(int index, std::size_t used) {
  const auto& p = part(index);
  if (p.size <= node_segment::inline_capacity) return {p.payload, static_cast<std::size_t>(p.size)};
  return segment_->data(used).subspan(segment_->member(index).data_offset, p.size);
}

std::uint64_t tree_node::name_hash_of(const exchange& ex) {
  if (hashed_ != context_.sequence) {
    hash_ = node_segment::name_hash(ex.name);
    hashed_ = context_.sequence;
  }
  return hash_;
}

void tree_node::check_parts_in_step(const exchange& ex) {
  check_mail_in_step(ex);  // a broadcast's source went on: name its broadcast, not its next collective
  // The number and the name's hash and size: the line each reads first (its text, for the message).
  const auto hash = name_hash_of(ex);
  const auto size = std::min(ex.name.size(), node_segment::text_capacity);
  for (int i = 0; i < static_cast<int>(mates_.size()); ++i) {
    const auto& p = part(i);
    if (p.sequence != context_.sequence || p.name_hash != hash || p.name_size != size) check_slot_in_step(i, ex);
  }
}

std::vector<int> tree_node::unfilled(int finisher) {
  auto& segment = *segment_;
  std::vector<int> ranks;
  for (int i = 0; i < static_cast<int>(mates_.size()); ++i) {
    if (i != finisher && in_data_region(part(i)) &&
        segment.load(segment.member(i).filled) != low_bits(context_.sequence))
      ranks.push_back(context_.members[static_cast<std::size_t>(mates_[static_cast<std::size_t>(i)])]);
  }
  return ranks;
}

void tree_node::pieces_not_filled(const exchange& ex, const std::vector<int>& ranks) {
  context_.timed_out(ex, fmt::format(": rank(s) {} arrived but never copied in their "
                                     "contribution past {} bytes (stuck, or stopped)",
                                     fmt::join(ranks, ", "), node_segment::inline_capacity));
}

std::vector<int> tree_node::not_arrived() {
  std::vector<int> ranks;
  for (std::size_t i = 0; i < mates_.size(); ++i) {
    if (segment_->load(segment_->member(static_cast<int>(i)).arrived) != low_bits(context_.sequence))
      ranks.push_back(context_.members[static_cast<std::size_t>(mates_[i])]);
  }
  return ranks;
}

std::vector<rank_bytes> tree_node::read_result(const exchange& ex) {
  auto& segment = *segment_;
  const auto size = static_cast<std::size_t>(segment.result_size());
  std::vector<rank_bytes> entries;
  try {
    entries = parse_entries(segment.data(size).first(size), static_cast<int>(context_.members.size()));
  } catch (const protocol_violation& v) {
    context_.corrupt_segment(ex, v.what);
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  return received(ex, context_.rank, std::move(entries));
}

std::size_t tree_node::await_mates(const exchange& ex, time_point deadline, link_watch& links) {
  using bell = node_segment::bell;
  auto& segment = *segment_;
  const auto seq = low_bits(context_.sequence);
  const auto count = mates_.size();
  // For the messages of node-mates that time out or find themselves out of step.
  sign_slot(ex, {}, false);
  segment.arrive();
  // Waits until every node-mate's word is at seq; fails as soon as anything else happens.
  const auto wait_for_mates = [&](auto word_of, std::vector<bool> in) {
    auto waiting = static_cast<std::size_t>(std::count(in.begin(), in.end(), false));
    auto next_check = clock::now() + segment_check_interval;
    std::uint32_t last = 0;
    for (bool first = true;; first = false) {
      const auto seen = segment.bell_value(bell::up);
      for (std::size_t i = 1; i < count; ++i) {
        if (in[i]) continue;
        auto& slot = segment.member(static_cast<int>(i));
        if (segment.load(word_of(slot)) != seq) continue;
        check_slot_in_step(static_cast<int>(i), ex);
        in[i] = true;
        --waiting;
      }
      if (waiting == 0) return;
      const auto now = clock::now();
      const bool tick = now >= next_check;
      check(ex, tick);
      if (now >= deadline) {
        std::vector<int> missing;
        for (std::size_t i = 1; i < count; ++i) {
          if (!in[i]) missing.push_back(context_.members[static_cast<std::size_t>(mates_[i])]);
        }
        links.timed_out(missing);
      }
      if (tick) {
        links.tick();
        next_check = now + segment_check_interval;
      }
      // Spins only after something happened, not after a wake-up for the checks.
      if (segment.wait(bell::up, seen, std::min(deadline, next_check), first || seen != last)) interruption_point();
      last = seen;
    }
  };
  std::vector<bool> in(count, false);
  in[0] = true;
  wait_for_mates([](node_segment::slot& s) -> std::uint32_t& { return s.arrived; }, in);

  // Large contributions: the leader says where each goes in the data region, then waits for them.
  const auto total = grant_places(ex, 0);
  if (pieces_in_place_) {  // its own piece too, while they copy theirs
    const auto offset = ex.piece_offset(context_.rank);
    std::memcpy(segment.data(total).data() + offset, ex.buffer.data() + offset, ex.piece_size());
  }
  if (total > 0) {
    for (std::size_t i = 1; i < count; ++i) in[i] = !in_data_region(part(static_cast<int>(i)));
    wait_for_mates([](node_segment::slot& s) -> std::uint32_t& { return s.filled; }, in);
  }
  return total;
}

void tree_node::publish(const exchange& ex, const std::vector<rank_bytes>& entries,
                        std::span<const std::byte> everyone) {
  std::vector<std::byte> selected;
  if (!ex.to_everyone()) {
    std::vector<const rank_bytes*> down;
    for (const auto& e : entries) {
      const int r = ex.receiver_of(e.rank);
      if (r != context_.rank && std::find(mates_.begin(), mates_.end(), r) != mates_.end()) down.push_back(&e);
    }
    append_entries(selected, down);
    everyone = selected;
  }
  context_.check_size(everyone.size(), ex);
  try {
    segment_->reserve(everyone.size());
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  if (!everyone.empty()) {
    std::memcpy(segment_->data(everyone.size()).data(), everyone.data(), everyone.size());
  }
  segment_->set_result_size(everyone.size());
  segment_->store(segment_->result_word(), low_bits(context_.sequence));
  segment_->ring(node_segment::bell::down);
}

void tree_node::check_slot_in_step(int index, const exchange& ex) {
  // What it signed last: this exchange's part, or the one before when it is behind.
  const auto& slot = segment_->latest_part(index);
  const std::string_view name(slot.name, slot.name_size);
  if (slot.sequence != context_.sequence || name != std::string_view(ex.name).substr(0, node_segment::text_capacity)) {
    const call_site member{mates_[static_cast<std::size_t>(index)], name, slot.sequence,
                           std::string_view(slot.site, slot.site_size)};
    // A member behind this one may be behind because a source posted a broadcast with its number
    // and went on: that broadcast, not the source's later collective, is the other call site.
    const auto* mail = slot.sequence < context_.sequence ? posted_mail(slot.sequence) : nullptr;
    if (mail && std::string_view(mail->name, mail->name_size) != name) {
      context_.out_of_step(member, {mail->source, std::string_view(mail->name, mail->name_size), slot.sequence,
                                    std::string_view(mail->site, mail->site_size)});
    }
    context_.out_of_step(member, {context_.rank, ex.name, context_.sequence, ex.site});
  }
}

void tree_node::read_buffer(const exchange& ex) {
  auto& segment = *segment_;
  const auto size = segment.result_size();
  if (size != ex.buffer.size()) {
    context_.corrupt_segment(ex, fmt::format("a result of {} bytes", size),
                             fmt::format("{} were due", ex.buffer.size()));
  }
  if (size == 0) return;
  std::span<std::byte> result;
  try {
    result = segment.data(size);
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  // Its own piece of an all_gather is in its buffer already (all_gather_into put it there).
  const auto skip_from = ex.kind == exchange_kind::all_gather_into ? ex.piece_offset(context_.rank) : size;
  const auto skip_to = std::min<std::size_t>(size, skip_from + ex.piece_size());
  std::memcpy(ex.buffer.data(), result.data(), skip_from);
  if (size > skip_to) std::memcpy(ex.buffer.data() + skip_to, result.data() + skip_to, size - skip_to);
}

void tree_node::publish_buffer(const exchange& ex) {
  const auto size = ex.buffer.size();
  try {
    segment_->reserve(size);
    if (size > 0) {
      auto region = segment_->data(size).first(size);
      if (!pieces_in_place_) {
        std::memcpy(region.data(), ex.buffer.data(), size);
      } else {  // the node's pieces are there: copy the others' (from other nodes), between them
        std::vector<std::size_t> here;
        for (const int g : mates_) here.push_back(ex.piece_offset(g));
        std::sort(here.begin(), here.end());
        std::size_t from = 0;
        for (const auto offset : here) {
          if (offset > from) std::memcpy(region.data() + from, ex.buffer.data() + from, offset - from);
          from = offset + ex.piece_size();
        }
        if (size > from) std::memcpy(region.data() + from, ex.buffer.data() + from, size - from);
      }
    }
  } catch (const error& e) {
    segment_failed(ex, e);
  }
  segment_->set_result_size(size);
  segment_->store(segment_->result_word(), low_bits(context_.sequence));
  segment_->ring(node_segment::bell::down);
}

}  // namespace jobkit::detail
