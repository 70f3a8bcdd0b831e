#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/tree_context.hpp"

namespace jobkit::detail {

struct protocol_violation;
struct frame;
struct frame_header;

/// The across-node medium of the tree protocol: a node leader's TCP links to its parent and
/// children in the binomial tree of node leaders under group rank 0. A leader sends frames up and
/// down (contributions, results, one-way broadcasts and their receipts, each checked in step as it
/// arrives), waits for them with a deadline, and sends an abort to every neighbour. Which exchange
/// does what is the routes' (routes.hpp); what happens on the node meanwhile is tree_node's.
class tree_links {
 public:
  using time_point = tree_context::time_point;
  struct link {
    int fd = -1;
    int peer = -1;  // group rank
  };
  /// A leader's wait for its children's contributions to one exchange (into `entries`; for the
  /// kinds over buffers, into the buffer); the wait for the node's members watches it meanwhile
  /// (link_watch).
  class gather final : public link_watch {
   public:
    gather(tree_links& links, const exchange& ex, time_point deadline, std::vector<rank_bytes>& entries);
    void tick() override;
    [[noreturn]] void timed_out(std::vector<int> missing) override;
    /// Waits for the children not heard from yet, taking each contribution as it arrives.
    void finish();

   private:
    friend class tree_links;
    /// Child i's contribution taken; false when only receipts were waiting.
    bool take(std::size_t i);

    tree_links& links_;
    const exchange& ex_;
    time_point deadline_;
    std::vector<rank_bytes>* entries_;
    std::vector<bool> done_;
    std::size_t pending_;
    std::vector<pollfd> fds_;  // the children's links, then the parent's (tree_links::link_fds)
  };
  /// A one-way broadcast as it came to this leader: entries (empty when it was too large for
  /// mail, and goes the ordinary way), the frame to pass on, and the source's call site.
  struct broadcast {
    bool one_way = false;
    std::vector<rank_bytes> entries;
    std::vector<std::byte> everyone;
    std::string source_site;
  };

  /// Takes the connections; subtrees[i]: the group ranks under children[i].
  tree_links(tree_context& context, std::optional<link> parent, const std::vector<link>& children,
             std::vector<std::vector<int>> subtrees);
  /// Closes the links, once the peer acknowledged what was sent where receipts are still owed.
  ~tree_links();
  tree_links(const tree_links&) = delete;
  tree_links& operator=(const tree_links&) = delete;

  bool root() const noexcept { return !parent_; }
  std::size_t children() const noexcept { return children_.size(); }
  const std::vector<std::vector<int>>& subtrees() const noexcept { return subtrees_; }
  /// Sends an abort to every neighbour but the one at origin and closes the links (noexcept).
  void spread_abort(const std::string& message, int origin, errc code) noexcept;
  /// Fails when a link was closed, or went silent (no answer from the peer's host for
  /// lost_node_timeout() while something is owed on it).
  void check_closed(const exchange& context);
  /// Fails when a link went silent.
  void check_silence(const exchange& ex);

  /// Child i's contribution, appended to entries (for the kinds over buffers, its subtree's pieces
  /// straight into the buffer); false when only receipts were waiting.
  bool receive_child(std::size_t i, const exchange& ex, time_point deadline, std::vector<rank_bytes>& entries);
  /// Sends this subtree's entries up and returns the parent's result (with its frame's payload
  /// in `everyone` when the result goes to every member).
  std::vector<rank_bytes> up_and_back(const exchange& ex, time_point deadline, const std::vector<rank_bytes>& entries,
                                      std::vector<std::byte>& everyone);
  /// Sends each child its part of the result.
  void send_down(const exchange& ex, time_point deadline, const std::vector<rank_bytes>& entries,
                 std::span<const std::byte> everyone);

  /// A leader below the root: sends its receipt and waits for the parent's frame (watch_node runs
  /// between looks at the links).
  broadcast receive_broadcast(const exchange& ex, time_point deadline, const std::function<void()>& watch_node);
  /// Passes a broadcast on to the children, then reads the receipts that came back.
  void pass_on_broadcast(const exchange& ex, time_point deadline, const broadcast& b);

  /// The kinds over buffers: this subtree's pieces up (those of the group ranks in `pieces`),
  /// straight from the buffer; the whole buffer down in chunks, received from the parent (unless
  /// root) and passed on to the children as they arrive.
  void send_pieces_up(const exchange& ex, time_point deadline, const std::vector<int>& pieces);
  void pass_buffer_down(const exchange& ex, time_point deadline);

 private:
  /// A one-way broadcast sent down a link, whose receipt has not come back yet.
  struct unconfirmed_broadcast {
    std::uint64_t sequence;
    std::string name, site;  // the source's call site
  };
  struct child_link : link {
    std::deque<unconfirmed_broadcast> unconfirmed;
  };
  /// The links a gather watches: each child's not heard from yet (for child_events), then the
  /// parent's; in wait.fds_.
  std::vector<pollfd>& link_fds(gather& wait, short child_events);
  /// After a poll of link_fds: fails when the parent spoke; takes the contribution of each child
  /// whose link showed one of child_events.
  void take_ready(gather& wait, short child_events);
  /// gather::tick: fails on an abort from the parent or a child that closed; takes the
  /// contributions of the children that have one waiting.
  void check_links(gather& wait);
  /// gather::finish.
  void await_children(gather& wait);
  /// gather::timed_out.
  [[noreturn]] void node_timed_out(const gather& wait, std::vector<int> missing);
  std::optional<frame> next_from_child(std::size_t i, const exchange& ex, time_point deadline);
  /// receive_child over buffers: the pieces of child i's frame `f` into the buffer.
  void receive_pieces(std::size_t i, const frame& f, const exchange& ex, time_point deadline);
  void confirm(std::size_t i, const frame& receipt, const exchange& ex);
  std::optional<frame_header> skip_receipts(std::size_t i, const exchange& ex, time_point deadline);
  void check_child(std::size_t i, const exchange& ex, time_point deadline);
  void drain_receipts(const exchange& ex, time_point deadline);
  frame await_broadcast(const exchange& ex, time_point deadline, const std::function<void()>& watch_node);
  void check_from_parent(const frame& f, const exchange& ex);
  void check_in_step(const link& l, frame& f, const exchange& ex, time_point deadline);
  [[noreturn]] void parent_spoke(const exchange& ex, time_point deadline);
  [[noreturn]] void message_failed(const link& l, const exchange& ex);
  [[noreturn]] void send_failed(const link& l, const exchange& ex);
  [[noreturn]] void result_failed(const link& parent, const exchange& ex);
  [[noreturn]] void lost(const link& l, const std::string& why, const exchange& ex, int error_number = 0);
  [[noreturn]] void went_silent(const link& l, const exchange& ex);
  [[noreturn]] void broke_protocol(const link& l, const protocol_violation& v, const exchange& ex);
  [[noreturn]] void time_out(const exchange& ex, const std::vector<bool>& done, std::vector<int> missing);

  tree_context& context_;
  std::optional<link> parent_;
  std::vector<child_link> children_;
  std::vector<std::vector<int>> subtrees_;  // group ranks under each child
  std::vector<int> child_of_;               // group rank -> index of the child whose subtree has it, or -1
};

}  // namespace jobkit::detail
