#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <span>

#include "transport/fabric.hpp"
#include "transport/node_segment.hpp"
#include "transport/transport.hpp"

namespace jobkit::detail {

struct protocol_violation;
struct frame;
struct frame_header;

/// The data path of a group: the members of a node meet in a shared memory segment (see
/// node_segment) under their first member, the node's leader; the leaders form a binomial tree of
/// TCP connections under group rank 0. Every wait has a deadline; a closed connection, a node-mate
/// whose process ended (seen through its pidfd) or an abort from any member fails the exchange on
/// every member. One exchange at a time, in the same order on every member.
class tcp_tree final : public transport {
 public:
  /// members: world ranks in group-rank order; the calling rank must be one of them.
  /// @throws jobkit::error when a connection fails or times out
  tcp_tree(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout);
  ~tcp_tree() override;

  std::vector<rank_bytes> run(const exchange& ex) override;
  /// Node-mates through the segment; between nodes, pieces go up as scatter-gather frames from
  /// the buffers and the whole buffer comes down in chunks that each leader forwards to its
  /// children as they arrive, straight from and into the members' buffers.
  void run_bulk(const bulk_exchange& bx) override;
  void abort(const std::string& message) noexcept override;
  void check_peers(const std::string& during) override;

 private:
  /// A one-way broadcast sent down a link, whose receipt has not come back yet.
  struct unconfirmed_broadcast {
    std::uint64_t sequence;
    std::string name, site;  // the source's call site
  };
  struct link {
    int fd = -1;
    int peer = -1;                                  // group rank
    std::deque<unconfirmed_broadcast> unconfirmed;  // child links only
  };
  using time_point = steady_clock::time_point;
  bool node_leader() const noexcept { return segment_ && node_index_ == 0; }
  /// A node-mate's setup: the segment's name from the leader over a setup connection, then mapped.
  void join_node(tcp_fabric& fabric, const std::string& key, time_point deadline);
  /// The leader's setup: tells the node-mates the segment's name, waits until each mapped it, unlinks it.
  void share_segment(const std::vector<int>& fds, time_point deadline);
  /// Takes child i's contribution; false when only receipts were waiting.
  using take_child = std::function<bool(std::size_t)>;
  std::vector<rank_bytes> gather_up(const exchange& ex);
  /// The leader's wait for its node-mates' contributions, which watches the TCP links meanwhile
  /// (take receives child i's contribution). Large contributions get a place in the data region;
  /// returns the bytes of it in use.
  std::size_t await_node(const exchange& ex, time_point deadline, const take_child& take, std::vector<bool>& done,
                         std::size_t& pending);
  /// Node-mate `index`'s contribution, in its slot or in the data region.
  std::span<const std::byte> contribution(int index, std::size_t used);
  /// Waits for the children not done yet, and takes each contribution as it arrives.
  void await_children(const exchange& ex, time_point deadline, const take_child& take, std::vector<bool>& done,
                      std::size_t& pending);
  /// Fails on an abort posted in the segment, when a watched node-mate left or ended, or when a
  /// broadcast's source posted mail for this exchange's number while this member is in another
  /// collective. A departure is excused when `excused` (if set) then holds: what the member owed
  /// is there.
  void check_node(const exchange& ex, bool deaths, const std::function<bool()>& excused = {});
  /// check_node without the mail: outside an exchange.
  void check_members(const exchange& ex, bool deaths, const std::function<bool()>& excused = {});
  void check_mail_in_step(const exchange& ex);
  /// The mail of the broadcast numbered `sequence`, once its source posted it; else null.
  const node_segment::mail* posted_mail(std::uint64_t sequence);
  /// A broadcast of a group on one node, as MPI_Bcast does it: the source posts its bytes as mail
  /// in the segment and goes on; each other member takes them. Empty when they were too large for
  /// mail, so that every member runs the ordinary exchange instead.
  std::optional<std::vector<rank_bytes>> broadcast_on_node(const exchange& ex);
  /// Posts the bytes, or, when they do not fit, a notice that sends every member down the
  /// ordinary exchange. Returns whether they fit.
  bool post_mail(const exchange& ex, time_point deadline, std::span<const std::byte> bytes, bool fits,
                 std::string_view source_site);
  std::optional<std::vector<rank_bytes>> take_mail(const exchange& ex, time_point deadline);
  [[noreturn]] void never_arrived(const exchange& ex, const std::vector<int>& missing);
  /// The deadline of a broadcast whose mailbox still holds an earlier broadcast that some member
  /// has not taken: names them.
  [[noreturn]] void mail_not_taken(const exchange& ex, node_segment::mail& mail);
  /// Between node waits: fails on an abort from the parent or a child that closed.
  void check_links(const exchange& ex, time_point deadline, const take_child& take, std::vector<bool>& done,
                   std::size_t& pending);
  bool receive_child(std::size_t i, const exchange& ex, time_point deadline, std::vector<rank_bytes>& entries);
  /// The head of child i's next frame that is not a receipt, consuming the receipts before it;
  /// empty when only receipts were waiting. A contribution to a collective whose number went one
  /// way fails the group as out of step, naming the broadcast.
  std::optional<frame> next_from_child(std::size_t i, const exchange& ex, time_point deadline);
  void confirm(std::size_t i, const frame& receipt, const exchange& ex);
  /// Reads the receipts child i owes that have arrived, without blocking; returns the header of
  /// the frame behind them (not taken) once all of it has arrived.
  std::optional<frame_header> skip_receipts(std::size_t i, const exchange& ex, time_point deadline);
  /// During a one-way broadcast: fails on what child i sent besides receipts (an abort, a
  /// contribution to another collective, its connection's end).
  void check_child(std::size_t i, const exchange& ex, time_point deadline);
  /// Reads the receipts waiting on the child links without blocking, and fails on an abort or a
  /// contribution to another collective behind them.
  void drain_receipts(const exchange& ex, time_point deadline);
  /// A broadcast from group rank 0 of a group that spans nodes, one way: the root sends its bytes
  /// down and goes on; each leader sends a receipt up, passes the bytes on to its children and
  /// posts them as its node's mail. Empty when they are too large for mail: every member then
  /// runs the ordinary exchange.
  std::optional<std::vector<rank_bytes>> broadcast_across_nodes(const exchange& ex);
  /// A leader's wait for the parent's frame of a one-way broadcast, watching its node meanwhile.
  frame await_broadcast(const exchange& ex, time_point deadline);
  /// Fails unless the parent's frame is this exchange's result (an abort, or a broadcast that went
  /// one way while this rank is in another collective, fail the group).
  void check_from_parent(const frame& f, const exchange& ex);
  /// The node index of the member that posts a broadcast's mail: the source, or the leader when
  /// the source is on another node.
  int mail_poster(int source) const;
  [[noreturn]] void parent_spoke(const exchange& ex, time_point deadline);
  /// In a catch block around reading a message of link l: fails the group as the exception says
  /// (a broken protocol, a closed link, a stall mid-message), or lets it pass (already failed).
  [[noreturn]] void message_failed(const link& l, const exchange& ex);
  /// In a catch block around sending to link l: fails the group as the exception says (a closed
  /// link, a peer that stopped reading), or lets it pass.
  [[noreturn]] void send_failed(const link& l, const exchange& ex);
  /// In a catch block around the wait for the parent's result: fails the group as the exception
  /// says (a broken protocol, a closed link, the deadline), or lets it pass (already failed).
  [[noreturn]] void result_failed(const link& parent, const exchange& ex);
  [[noreturn]] void time_out(const exchange& ex, const std::vector<bool>& done, std::vector<int> missing);
  void publish_to_node(const exchange& ex, const std::vector<rank_bytes>& entries, std::span<const std::byte> everyone);
  /// Fails on a group that failed before; else starts the next exchange (its sequence number).
  void begin_exchange(const exchange& ex);
  std::vector<rank_bytes> run_as_node_mate(const exchange& ex);
  /// This member's slot for the current exchange: number, name, call site, its contribution when
  /// it fits in place, then the arrival word.
  void sign_slot(const exchange& ex, std::span<const std::byte> mine, bool has_payload, std::uint64_t bulk_size);
  /// Fails unless node-mate `index` signed its slot for this exchange (number and name).
  void check_slot_in_step(int index, const exchange& ex);
  /// One rank's collective: which rank, the collective's name and number, and where it was called.
  struct call_site {
    int group_rank;
    std::string_view name;
    std::uint64_t sequence;
    std::string_view site;
  };
  [[noreturn]] void out_of_step(const call_site& one, const call_site& other);
  /// out_of_step against this rank's current exchange.
  [[noreturn]] void out_of_step(int group_rank, std::string_view name, std::uint64_t sequence, std::string_view site,
                                const exchange& ex);
  /// A barrier, all_gather or all_reduce of a group on one node: every member signs its slot and
  /// counts itself in, and the last to arrive does what a leader would (finish_on_node), so that
  /// the others wait for one wake-up, not two.
  std::vector<rank_bytes> exchange_on_node(const exchange& ex);
  /// Checks every slot, has the large contributions copied into the data region, folds, and
  /// publishes the result; returns this member's entries. `mine` is this member's contribution.
  std::vector<rank_bytes> finish_on_node(const exchange& ex, time_point deadline, std::span<const std::byte> mine);
  /// Gives each large contribution but the finisher's own (node index) a place in the data region,
  /// sized for all of them, and grants them; returns the bytes of the region in use (0: none).
  std::size_t grant_places(const exchange& ex, int finisher);
  /// Copies a large contribution where the finisher granted it a place, and says so.
  void fill_granted(const exchange& ex, std::span<const std::byte> mine);
  /// World ranks of the node-mates (this rank included) that have not arrived at this exchange.
  std::vector<int> not_arrived();
  /// World ranks of the members other than `finisher` whose large contribution is not in yet.
  std::vector<int> unfilled(int finisher);
  [[noreturn]] void pieces_not_filled(const exchange& ex, const std::vector<int>& ranks);
  /// The deadline of a member waiting in exchange_on_node: names who never arrived, whose large
  /// contribution never came, or the member that took on finishing and never published.
  [[noreturn]] void finish_stalled(const exchange& ex);
  /// A node-mate's entries of the result its leader (or the finisher) published.
  std::vector<rank_bytes> read_result(const exchange& ex);
  /// A node-mate's contribution into its slot (large ones into the data region once granted).
  void contribute_to_node(const exchange& ex, time_point deadline, std::span<const std::byte> mine, bool has_payload,
                          std::uint64_t bulk_size);
  void bulk_as_node_mate(const bulk_exchange& bx);
  /// Child i's pieces, straight into the buffer.
  bool receive_child_bulk(std::size_t i, const bulk_exchange& bx, time_point deadline);
  void send_up_bulk(const bulk_exchange& bx, time_point deadline);
  /// Receives the whole buffer from the parent (unless rank 0) and sends it on to the children,
  /// one chunk at a time.
  void pass_down_bulk(const bulk_exchange& bx, time_point deadline);
  /// Fails unless f belongs to this exchange: an abort, or another collective, fail the group.
  void check_in_step(const link& l, frame& f, const exchange& ex, time_point deadline);
  [[noreturn]] void sizes_differ(const exchange& ex, int group_rank, std::uint64_t theirs, std::uint64_t mine);
  /// A node-mate's wait for the result of the current exchange from its leader.
  void wait_for_result(const exchange& ex, time_point deadline);
  /// A node-mate's wait for its leader until ready() holds; at the deadline, names the node-mates
  /// that never arrived, or else some rank outside the node.
  template <class Ready>
  void wait_for_leader(const exchange& ex, time_point deadline, Ready&& ready);
  /// Waits on a bell of the segment until ready() holds, checking the node meanwhile (a departure
  /// excused when ready() then holds); calls timed_out, which must throw, at the deadline.
  template <class Ready, class TimedOut>
  void wait_in_segment(node_segment::bell b, const exchange& ex, time_point deadline, Ready&& ready,
                       TimedOut&& timed_out);
  /// Runs fold or finish; an exception reaches every member as an abort and is rethrown here.
  template <class Step>
  std::vector<rank_bytes> user_step(const exchange& ex, Step&& step);
  /// Sends an abort to every neighbour but the one at origin, closes the links, marks the tree
  /// unusable.
  void spread_abort(const std::string& message, int origin, errc code) noexcept;
  [[noreturn]] void fail(const std::string& message, int origin, errc code = errc::peer_failure);
  [[noreturn]] void lost(const link& l, const std::string& why, const exchange& ex);
  [[noreturn]] void broke_protocol(const link& l, const protocol_violation& v, const exchange& ex);
  /// Fails the group when a payload exceeds what one frame may carry.
  void check_size(std::uint64_t size, const exchange& ex);
  std::string describe(int group_rank) const;

  std::vector<int> members_;
  std::vector<std::string> hosts_;  // per group rank
  int rank_ = 0;                    // group rank
  std::uint64_t sequence_ = 0;
  std::vector<link> children_;
  std::vector<link> parent_link_;          // empty on group rank 0
  std::vector<std::vector<int>> subtree_;  // group ranks under each child
  std::vector<int> child_of_;              // group rank -> index of the child whose subtree has it, or -1
  std::vector<int> node_members_;          // group ranks on this rank's node, leader first; empty when alone
  int node_index_ = -1;                    // this rank's place in node_members_
  std::unique_ptr<node_segment> segment_;
  std::vector<process_watch> watched_;  // the leader: its node-mates; a node-mate: its leader
  std::vector<int> watched_members_;    // node indexes of watched_
  errc broken_code_ = errc::peer_failure;
  std::string broken_;  // set once the tree failed
};

using subgroup_maker = std::function<group(const std::vector<int>&, std::chrono::milliseconds)>;
/// A group of these world ranks over a new tcp_tree (collective over the members). Its split
/// makes groups with make_subgroup, by default through the same fabric, which must outlive them.
group make_tcp_group(tcp_fabric& fabric, const std::vector<int>& members, std::chrono::milliseconds timeout,
                     subgroup_maker make_subgroup = {});

}  // namespace jobkit::detail
