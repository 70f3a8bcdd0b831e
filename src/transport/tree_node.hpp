#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/embedder.hpp"
#include "transport/node_segment.hpp"
#include "transport/tree_context.hpp"

namespace jobkit::detail {

/// The longest refusal a leader sends or a node-mate reads, and the longest segment name.
inline constexpr std::size_t max_refusal_size = 4096;
inline constexpr std::size_t max_segment_name_size = 255;

/// What a node-mate reads from its leader at setup: the segment's name, or else the leader's
/// refusal (its own setup failed; tree_node::refuse).
struct leader_answer {
  std::string name;
  std::optional<std::string> refusal;
};
/// Reads the answer from `fd`, bounded: a refusal cut to max_refusal_size bytes. @throws
/// jobkit::error (internal) naming the size of a name over max_segment_name_size; socket_closed,
/// socket_timeout
leader_answer read_leader_answer(int fd, tree_context::time_point deadline);

/// Whether a member's contribution goes through the segment's data region (past its part) rather
/// than in place.
inline bool in_data_region(const node_segment::part& part) {
  return part.has_payload != 0 && part.size > node_segment::inline_capacity;
}

/// The on-node medium of the tree protocol: a group's members on one node meet in a node_segment
/// under their first member, the leader. A member posts (signs its slot, contributes, publishes,
/// posts mail or an abort), waits with a deadline (sleeping on the segment's futexes, looking at
/// the node-mates' pidfds and aborts in between; a leader's TCP links through a link_watch) and
/// reads (the parts, a published result, mail). Which exchange does what is the routes'
/// (routes.hpp).
class tree_node {
 public:
  using time_point = tree_context::time_point;
  /// mates: the group ranks on this node, leader first (two or more); this rank is mates[index].
  tree_node(tree_context& context, std::vector<int> mates, int index);
  /// Tells the node-mates this member left (the leader: also when its setup failed), so that none
  /// waits for it.
  ~tree_node();
  tree_node(const tree_node&) = delete;
  tree_node& operator=(const tree_node&) = delete;

  /// The leader: creates the segment (node_segment's name rules).
  void create(const std::string& name);
  /// The leader's setup over one connection per node-mate: tells each the segment's name, waits
  /// until each mapped it, unlinks it and watches them.
  void share(const std::vector<int>& fds, time_point deadline);
  /// A node-mate's setup: the segment's name from the leader over `fd`, mapped, then said so.
  /// @throws jobkit::error (peer_failure) with the leader's message when the leader refused (its
  ///         own setup failed)
  void join(int fd, time_point deadline);
  /// The leader's setup failed: tells a node-mate connected over `fd` why, in place of the
  /// segment's name (a name of length 0, then the message). Never throws.
  static void refuse(int fd, const std::string& why, time_point deadline) noexcept;
  /// Without setup connections (unit tests): map the segment; then, once every member mapped it,
  /// start_watching (the leader unlinks it).
  void attach(const std::string& name);
  void start_watching();

  bool leader() const noexcept { return index_ == 0; }
  const std::vector<int>& mates() const noexcept { return mates_; }
  /// This member's node index (its place in mates()).
  int index() const noexcept { return index_; }
  /// The segment itself: its arrival count, bells and words (node_segment).
  node_segment& segment() const noexcept { return *segment_; }

  // What the routes (routes.hpp) do with the segment. To post: sign a slot, contribute, grant
  // places in the data region and fill them, publish a result, post mail or an abort.

  /// This member's slot for the current exchange: number, name, call site, its contribution when
  /// it fits in place, then the arrival word.
  void sign_slot(const exchange& ex, std::span<const std::byte> mine, bool has_payload);
  /// A node-mate's contribution into its slot (large ones into the data region once granted).
  void contribute(const exchange& ex, time_point deadline, std::span<const std::byte> mine, bool has_payload);
  /// Gives each large contribution but the finisher's own (node index) a place in the data region,
  /// sized for all of them (an all_gather_into's: where each belongs in the result), and grants
  /// them; returns the bytes of the region in use (0: none).
  std::size_t grant_places(const exchange& ex, int finisher);
  /// Copies a large contribution where the finisher granted it a place, and says so.
  void fill_granted(const exchange& ex, std::span<const std::byte> mine);
  /// The leader (or the finisher): the result for the node-mates (`everyone` when it goes to every
  /// member).
  void publish(const exchange& ex, const std::vector<rank_bytes>& entries, std::span<const std::byte> everyone);
  /// The leader: the whole buffer of an exchange over buffers, for its node-mates (past the
  /// node's pieces when they are in place already).
  void publish_buffer(const exchange& ex);
  /// Posts a broadcast's bytes (or a notice that they did not fit) for the node-mates.
  bool post_mail(const exchange& ex, time_point deadline, std::span<const std::byte> bytes, bool fits,
                 std::string_view source_site);
  void post_abort(int origin, errc code, const std::string& message) noexcept;

  // To wait, each with a deadline and the node watched meanwhile:

  /// Waits on a bell of the segment until ready() holds, checking the node meanwhile (a departure
  /// excused when ready() then holds); calls timed_out, which must throw, at the deadline.
  /// A template, as the spin of the futex wait calls ready() at every turn: inlined where it is used.
  template <class Ready, class TimedOut>
  void wait_in_segment(node_segment::bell b, const exchange& ex, time_point deadline, Ready&& ready,
                       TimedOut&& timed_out);
  /// A node-mate's wait for the result of the current exchange from its leader.
  void wait_for_result(const exchange& ex, time_point deadline);
  /// The leader's wait for its node-mates' contributions; returns the bytes of the data region
  /// in use by large ones. For an all_gather_into (every member contributing a piece of one size)
  /// the large pieces go where they belong in the result, the leader's own included, so that the
  /// region holds the node's part of the result once they are in (pieces_in_place()).
  std::size_t await_mates(const exchange& ex, time_point deadline, link_watch& links);
  /// Waits for the mail of this exchange and takes it: its entries, or empty when its bytes did not
  /// fit (every member then takes the tree).
  std::optional<std::vector<rank_bytes>> take_mail(const exchange& ex, time_point deadline);

  // To read:

  /// Node-mate `index`'s slot, and what it signed for the current exchange.
  const node_segment::slot& slot(int index) const { return segment_->member(index); }
  node_segment::part& part(int index) const { return segment_->part_of(index, signed_); }
  /// Node-mate `index`'s contribution, in its slot or in the data region (`used` bytes of it).
  std::span<const std::byte> contribution(int index, std::size_t used);
  /// Whether the last await_mates (or grant_places) placed the node's pieces where they belong in
  /// the result.
  bool pieces_in_place() const noexcept { return pieces_in_place_; }
  /// A node-mate's entries of the result its leader (or the finisher) published.
  std::vector<rank_bytes> read_result(const exchange& ex);
  /// A node-mate's buffer from the one its leader published (its own piece left as it is).
  void read_buffer(const exchange& ex);

  // To check:

  /// Fails on an abort in the segment, a node-mate that left or (deaths) ended, or the mail of a
  /// broadcast with this exchange's number while this member is in another collective.
  void check(const exchange& ex, bool deaths, const std::function<bool()>& excused = {});
  /// check without the mail: outside an exchange, or across nodes.
  void check_members(const exchange& ex, bool deaths, const std::function<bool()>& excused = {});
  /// Fails unless every member signed its part for this exchange (number and name).
  void check_parts_in_step(const exchange& ex);
  /// World ranks of the node-mates (this rank included) that have not arrived at this exchange.
  std::vector<int> not_arrived();
  /// World ranks of the members other than `finisher` whose large contribution is not in yet.
  std::vector<int> unfilled(int finisher);
  /// The deadline of a member whose node-mates arrived but never copied in their large
  /// contributions (world ranks `ranks`).
  [[noreturn]] void pieces_not_filled(const exchange& ex, const std::vector<int>& ranks);

 private:
  /// The mail of the broadcast numbered `sequence`, once its source posted it; else null.
  const node_segment::mail* posted_mail(std::uint64_t sequence);
  void check_mail_in_step(const exchange& ex);
  /// Fails unless node-mate `index` signed its slot for this exchange (number and name).
  void check_slot_in_step(int index, const exchange& ex);
  /// The deadline of a broadcast whose mailbox still holds an earlier broadcast that some member
  /// has not taken: names them.
  [[noreturn]] void mail_not_taken(const exchange& ex, node_segment::mail& mail);
  /// The node index of the member that posts a broadcast's mail: the source, or the leader when
  /// the source is on another node.
  int mail_poster(int source) const;
  /// Whether every large piece of an all_gather_into on this node has the size that its place in
  /// the result has: then each can be copied straight to that place.
  bool pieces_fit_in_place(const exchange& ex);
  /// node_segment::name_hash of the exchange's name, computed once per exchange.
  std::uint64_t name_hash_of(const exchange& ex);
  /// A node-mate's wait for its leader until ready() holds; at the deadline, names the node-mates
  /// that never arrived, or else some rank outside the node.
  void wait_for_leader(const exchange& ex, time_point deadline, const std::function<bool()>& ready);
  static void copy_text(char (&to)[node_segment::text_capacity], std::uint32_t& size, std::string_view text);
  /// Fails the group on an error of the segment (no memory for the data region).
  [[noreturn]] void segment_failed(const exchange& ex, const error& e);

  tree_context& context_;
  std::vector<int> mates_;  // group ranks, leader first
  int index_;
  std::unique_ptr<node_segment> segment_;
  std::vector<process_watch> watched_;  // the leader: its node-mates; a node-mate: its leader
  std::vector<int> watched_members_;    // node indexes of watched_
  bool pieces_in_place_ = false;        // see pieces_in_place
  std::uint64_t signed_ = 0;            // the parts this member signed: as many as each member in step
  std::uint64_t hashed_ = 0;            // the exchange whose name hash_ is the hash of
  std::uint64_t hash_ = 0;
};

template <class Ready, class TimedOut>
void tree_node::wait_in_segment(node_segment::bell b, const exchange& ex, time_point deadline, Ready&& ready,
                                TimedOut&& timed_out) {
  const std::function<bool()> excused = [&] { return ready(); };
  auto next_check = std::chrono::steady_clock::now() + segment_check_interval;
  std::uint32_t last = 0;
  for (bool first = true;; first = false) {
    const auto seen = segment_->bell_value(b);
    if (ready()) return;
    const auto now = std::chrono::steady_clock::now();
    const bool tick = now >= next_check;
    check(ex, tick, excused);
    if (now >= deadline) timed_out();
    if (tick) next_check = now + segment_check_interval;
    // Spins only after something happened, not after a wake-up for the checks.
    if (segment_->wait(b, seen, std::min(deadline, next_check), first || seen != last)) interruption_point();
    last = seen;
  }
}

}  // namespace jobkit::detail
