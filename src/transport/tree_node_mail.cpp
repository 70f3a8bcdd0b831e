// tree_node's mail, what both one-way broadcast routes post and take (route_node_broadcast.cpp,
// route_one_way_broadcast.cpp): the source (or the node's leader, for a broadcast from another
// node) posts the bytes as mail in the segment and goes on; each other member takes them. A
// mailbox is reused only once every member took its earlier broadcast.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "transport/tree_node.hpp"

namespace jobkit::detail {

namespace {

using clock = steady_clock;

}  // namespace

const node_segment::mail* tree_node::posted_mail(std::uint64_t sequence) {
  const auto& mail = segment_->mail_for(sequence);
  if (segment_->load(mail.posted) != low_bits(sequence) || segment_->load(mail.claimed) != sequence) return nullptr;
  return &mail;
}

void tree_node::check_mail_in_step(const exchange& ex) {
  const auto* mail = posted_mail(context_.sequence);
  if (!mail) return;
  const std::string_view name(mail->name, mail->name_size);
  // The same broadcast, too large for mail: the ordinary exchange follows it.
  if (name == std::string_view(ex.name).substr(0, node_segment::text_capacity)) return;
  context_.out_of_step(mail->source, name, context_.sequence, std::string_view(mail->site, mail->site_size), ex);
}

int tree_node::mail_poster(int source) const {
  const auto at = std::find(mates_.begin(), mates_.end(), source);
  return at == mates_.end() ? 0 : static_cast<int>(at - mates_.begin());
}

bool tree_node::post_mail(const exchange& ex, time_point deadline, std::span<const std::byte> bytes, bool fits,
                          std::string_view source_site) {
  auto& segment = *segment_;
  auto& mail = segment.mail_for(context_.sequence);
  // The mailbox's last broadcast must have been taken by every member before it is reused.
  wait_in_segment(
      node_segment::bell::up, ex, deadline, [&] { return segment.load(mail.readers_left) == 0; },
      [&] { mail_not_taken(ex, mail); });
  // The mailbox holds an earlier broadcast: claimed from that number to this one, so that of two
  // members that each believe themselves the source, one claims it and the other finds it claimed.
  const auto earlier = segment.load(mail.claimed);
  if (earlier >= context_.sequence || !segment.exchange_word(mail.claimed, earlier, context_.sequence)) {
    // Another member posts a broadcast with this number: it believes itself the source.
    wait_in_segment(
        node_segment::bell::down, ex, deadline,
        [&] { return segment.load(mail.posted) == low_bits(context_.sequence); },
        [&] {
          context_.timed_out(ex, fmt::format(": another rank claimed #{} for a broadcast and never "
                                             "posted it",
                                             context_.sequence));
        });
    context_.out_of_step(mail.source, std::string_view(mail.name, mail.name_size), context_.sequence,
                         std::string_view(mail.site, mail.site_size), ex);
  }
  mail.source = ex.source();
  mail.too_large = fits ? 0 : 1;
  mail.size = fits ? bytes.size() : 0;
  copy_text(mail.name, mail.name_size, ex.name);
  copy_text(mail.site, mail.site_size, source_site);
  if (fits && !bytes.empty()) std::memcpy(mail.payload, bytes.data(), bytes.size());
  segment.store(mail.readers_left, static_cast<std::uint32_t>(mates_.size() - 1));
  // Every member's arrival at once: the counts of the exchanges after this one stay right.
  if (fits) segment.arrive(mates_.size());
  segment.store(mail.posted, low_bits(context_.sequence));
  segment.ring(node_segment::bell::down);
  return fits;
}

void tree_node::mail_not_taken(const exchange& ex, node_segment::mail& mail) {
  const auto earlier = segment_->load(mail.claimed);
  const auto poster = static_cast<std::size_t>(mail_poster(mail.source));
  std::vector<int> missing;
  for (std::size_t i = 0; i < mates_.size(); ++i) {
    if (i != poster && segment_->load(segment_->member(static_cast<int>(i)).taken) < earlier)
      missing.push_back(context_.members[static_cast<std::size_t>(mates_[i])]);
  }
  context_.timed_out(ex, fmt::format(": rank(s) {} never took {} #{} at {}, whose mailbox {} "
                                     "needs for #{} (at least one of them is late, stuck or in another collective)",
                                     fmt::join(missing, ", "), std::string_view(mail.name, mail.name_size), earlier,
                                     std::string_view(mail.site, mail.site_size), context_.describe(mates_[poster]),
                                     context_.sequence));
}

std::optional<std::vector<rank_bytes>> tree_node::take_mail(const exchange& ex, time_point deadline) {
  auto& segment = *segment_;
  auto& mail = segment.mail_for(context_.sequence);
  const int source = mail_poster(ex.source());
  const auto& source_slot = segment.member(source);
  wait_in_segment(
      node_segment::bell::down, ex, deadline,
      [&] {
        if (posted_mail(context_.sequence)) return true;
        // The source signs its slot only in other collectives, which cannot end without this member.
        if (segment.load(source_slot.arrived) == low_bits(context_.sequence)) check_slot_in_step(source, ex);
        return false;
      },
      [&] {
        // The source may be waiting for a member that has not taken an earlier broadcast.
        if (segment.load(mail.claimed) < context_.sequence && segment.load(mail.readers_left) != 0)
          mail_not_taken(ex, mail);
        if (mates_[static_cast<std::size_t>(source)] != ex.source()) {
          context_.timed_out(ex, fmt::format(" waiting for the broadcast from {}, which {} passes on "
                                             "to this node: rank {} or a rank between never arrived",
                                             context_.describe(ex.source()), context_.describe(mates_.front()),
                                             context_.members[static_cast<std::size_t>(ex.source())]));
        }
        context_.never_arrived(ex, {context_.members[static_cast<std::size_t>(ex.source())]});
      });
  const std::string_view name(mail.name, mail.name_size);
  if (name != std::string_view(ex.name).substr(0, node_segment::text_capacity)) {
    context_.out_of_step(mail.source, name, context_.sequence, std::string_view(mail.site, mail.site_size), ex);
  }
  std::optional<std::vector<rank_bytes>> entries;
  if (mail.too_large == 0) {
    if (mail.size > node_segment::inline_capacity) {
      context_.corrupt_segment(ex, fmt::format("a broadcast of {} bytes", mail.size));
    }
    entries.emplace();
    entries->push_back(rank_bytes{mail.source, {mail.payload, mail.payload + mail.size}});
  }
  segment.store(segment.member(index_).taken, context_.sequence);
  if (segment.count_down(mail.readers_left) == 0) segment.ring(node_segment::bell::up);
  return entries;
}

}  // namespace jobkit::detail
