#pragma once

// What the two media of the tree protocol and its routes share: the group's members, this rank's
// place, the exchange's number, and how a failure is told (tree_node: the members of a node in
// their shared segment; tree_links: the node leaders over TCP; tcp_tree composes them and spreads
// a failure on both).

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "transport/transport.hpp"

namespace jobkit::detail {

/// One rank's collective: which rank, the collective's name and number, and where it was called.
struct call_site {
  int group_rank;
  std::string_view name;
  std::uint64_t sequence;
  std::string_view site;
};

/// Tells every member of a failure, on both media: what the media and routes call when they fail
/// (tree_context::fail); tcp_tree implements it over its node segment and its links.
class abort_spreader {
 public:
  /// Must not throw.
  virtual void spread_abort(const std::string& message, int origin, errc code) noexcept = 0;

 protected:
  ~abort_spreader() = default;
};

/// What the on-node medium (tree_node) watches on the across-node one (tree_links) while a node
/// leader waits for its node-mates: tree_links::gather implements it.
class link_watch {
 public:
  /// At every look at the node: fails on an abort or a closed link, takes the children's
  /// contributions already waiting.
  virtual void tick() = 0;
  /// At the deadline: names the missing node-mates (world ranks) and the children whose
  /// contribution has not come.
  [[noreturn]] virtual void timed_out(std::vector<int> missing) = 0;

 protected:
  ~link_watch() = default;
};

struct tree_context {
  using time_point = steady_clock::time_point;

  std::vector<int> members;        // world ranks in group-rank order
  std::vector<std::string> hosts;  // per group rank
  int rank = 0;                    // group rank
  std::uint64_t sequence = 0;      // the current exchange's number
  errc broken_code = errc::peer_failure;
  std::string broken;  // set once the tree failed
  /// Tells every member on both media (tcp_tree; the unit tests' stand-ins).
  abort_spreader* spreader = nullptr;

  std::string describe(int group_rank) const;
  /// The one way the tree fails an exchange: the message, named with this rank's call
  /// (core/failure.hpp in_call: unchanged when it names the call already), goes to every member
  /// as an abort, then is thrown here.
  [[noreturn]] void fail(const exchange& ex, const std::string& message, int origin, errc code = errc::peer_failure);
  /// An abort that another member sent (its reason, its origin): passes it on unchanged, and
  /// throws it here named with this rank's own call (core/failure.hpp in_call).
  [[noreturn]] void passed_on(const std::string& reason, int origin, errc code, const exchange& ex);
  [[noreturn]] void out_of_step(const call_site& one, const call_site& other);
  /// out_of_step against this rank's current exchange.
  [[noreturn]] void out_of_step(int group_rank, std::string_view name, std::uint64_t sequence, std::string_view site,
                                const exchange& ex);
  /// The one message of a deadline that passed: "{call} at {site} timed out after {timeout} ms on
  /// {this rank}" and `rest` (": who never arrived", or " waiting for ..."), failed as a timeout.
  [[noreturn]] void timed_out(const exchange& ex, std::string_view rest);
  [[noreturn]] void never_arrived(const exchange& ex, const std::vector<int>& missing);
  [[noreturn]] void sizes_differ(const exchange& ex, int group_rank, std::uint64_t theirs, std::uint64_t mine);
  /// What this rank found in the node's shared memory, which no member of this build writes
  /// (`found`: "a piece of 8 bytes"; `due`: what was due instead, or empty): fails the group as
  /// internal.
  [[noreturn]] void corrupt_segment(const exchange& ex, std::string_view found, std::string_view due = {});
  /// Fails the group when a payload exceeds what one frame may carry.
  void check_size(std::uint64_t size, const exchange& ex);
  /// Runs fold or finish; an exception reaches every member as an abort and is rethrown here.
  template <class Step>
  std::vector<rank_bytes> user_step(const exchange& ex, Step&& step) {
    try {
      return step();
    } catch (...) {
      step_failed(ex, std::current_exception());
      throw;
    }
  }

 private:
  [[noreturn]] void spread_and_raise(const std::string& message, int origin, errc code);
  void step_failed(const exchange& ex, const std::exception_ptr& e) noexcept;
};

/// Every entry, serialised as one result for everyone.
std::vector<std::byte> all_entries(const std::vector<rank_bytes>& entries);

/// The low 32 bits of an exchange's number, as the segment's words hold them.
inline std::uint32_t low_bits(std::uint64_t sequence) { return static_cast<std::uint32_t>(sequence); }

}  // namespace jobkit::detail
