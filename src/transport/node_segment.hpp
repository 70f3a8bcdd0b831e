#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

/// The shared memory of one group's members on one node: a POSIX shared memory object that the
/// node's leader (its first member) creates and unlinks as soon as every node-mate has mapped it,
/// so that no exit, SIGKILL included, can leave it behind afterwards. It holds one slot per
/// member (its contribution, up to inline_capacity bytes in place), the result going down, a data
/// region that grows for large payloads, mailboxes for one-way broadcasts, and an abort notice. Waiting spins for a
/// bounded time (JOBKIT_SHM_SPIN_US) and then sleeps on a futex.
/// How often a wait on a node segment looks at what a futex cannot tell: node-mates' pidfds and
/// the leader's TCP links.
inline constexpr std::chrono::milliseconds segment_check_interval{100};

class node_segment {
 public:
  static constexpr std::size_t inline_capacity = 7 * 1024;
  static constexpr std::size_t text_capacity = 256;

  /// What a member signs for one exchange that every member signs (all but one-way broadcasts):
  /// two per slot, in turn, so that a member may sign the next such exchange while the others
  /// still read this one (an exchange on one node whose members read each other's parts:
  /// node_exchange). No member can sign the one after next before every member
  /// arrived at the next, which it does only once it read this one.
  /// The words the others read first share a cache line with the payload's first bytes; the
  /// name and call site, read whole only for a message, come last.
  struct alignas(64) part {
    std::uint64_t sequence;   // the exchange's full sequence number
    std::uint64_t name_hash;  // name_hash(name): the others compare it, and the size, to their own
    std::uint64_t size;       // contribution bytes
    std::uint32_t has_payload;
    std::uint32_t name_size, site_size;
    std::byte payload[inline_capacity];
    char name[text_capacity];
    char site[text_capacity];
  };
  /// FNV-1a of a collective's name as a part holds it (its first text_capacity bytes).
  static std::uint64_t name_hash(std::string_view name) noexcept;
  /// One member's slot; member 0 is the leader. Words used with atomic_ref.
  struct slot {
    std::uint32_t pid;
    std::uint32_t left;                 // set once the member destroyed its group
    alignas(64) std::uint32_t arrived;  // low 32 bits of the sequence number of its last contribution
    std::uint32_t filled;               // same, once a large contribution is in the data region
    std::uint64_t data_offset;          // where the finisher (see reserve) wants a large contribution
    std::uint64_t buffer_size;          // an exchange over buffers: the buffer's size on this member
    std::uint64_t taken;                // sequence number of the last mail it took
    part parts[2];                      // in turn (part_of)
  };
  /// A broadcast's bytes, posted by its source for the other members to take (see mail_for).
  struct mail {
    std::uint64_t claimed;       // sequence number of the broadcast that owns it (set first, by CAS)
    std::uint32_t posted;        // low 32 bits of that number, once everything below is written
    std::uint32_t readers_left;  // members that have not taken it yet
    std::int32_t source;         // group rank
    std::uint32_t too_large;     // the bytes did not fit: the members run the ordinary exchange
    std::uint32_t name_size, site_size;
    std::uint64_t size;
    char name[text_capacity];
    char site[text_capacity];
    std::byte payload[inline_capacity];
  };
  static constexpr std::size_t mailboxes = 8;
  struct notice {
    int origin;
    errc code;
    std::string reason;
  };
  enum class bell { up, down };

  /// Creates the segment (leader), replacing one of the same name that a crashed earlier attempt
  /// of the same job and step may have left. @throws jobkit::error (io) naming who and what
  node_segment(const std::string& name, int members, const std::string& who);
  struct attach_t {};
  static constexpr attach_t attach{};
  /// Maps the leader's segment (a node-mate). @throws jobkit::error (io)
  node_segment(attach_t, const std::string& name, int members, const std::string& who);
  ~node_segment();
  node_segment(const node_segment&) = delete;
  node_segment& operator=(const node_segment&) = delete;

  const std::string& name() const noexcept { return name_; }
  /// Removes the name; the memory lives on until the last member unmaps it.
  void unlink() noexcept;

  slot& member(int index) noexcept;
  /// The part member `index` signs as its `count`th (from 1).
  part& part_of(int index, std::uint64_t count) noexcept { return member(index).parts[count & 1]; }
  /// What member `index` signed last.
  const part& latest_part(int index) noexcept;
  std::uint32_t load(const std::uint32_t& word) const noexcept;
  void store(std::uint32_t& word, std::uint32_t value) noexcept;
  /// Wakes whoever waits on this bell.
  void ring(bell b) noexcept;
  /// The bell's current value, to pass to wait.
  std::uint32_t bell_value(bell b) const noexcept;
  /// Returns once the bell rang after `seen` or at `until`: spins a bounded time (when `spin`),
  /// then sleeps. True when the sleep ended unrung, by a signal or at `until` (the caller's
  /// detail::interruption_point: a signal handled outside the sleep, e.g. while spinning, is seen
  /// there).
  bool wait(bell b, std::uint32_t seen, steady_clock::time_point until, bool spin) noexcept;

  /// The mail of the broadcast with this sequence number: mailboxes in turn, so that a source may
  /// post up to `mailboxes` broadcasts before the members take the first.
  mail& mail_for(std::uint64_t sequence) noexcept;
  std::uint64_t load(const std::uint64_t& word) const noexcept;
  void store(std::uint64_t& word, std::uint64_t value) noexcept;
  /// Sets word from expected to desired; false when it held something else.
  bool exchange_word(std::uint64_t& word, std::uint64_t expected, std::uint64_t desired) noexcept;
  /// Takes one from word and returns what is left.
  std::uint32_t count_down(std::uint32_t& word) noexcept;

  /// Counts arrivals (each member, the leader included, once per exchange; a broadcast's source
  /// for everyone); returns the count over every exchange so far, so that only the last to arrive
  /// rings a bell.
  std::uint64_t arrive(std::uint64_t count = 1) noexcept;
  /// The count arrive() reached so far.
  std::uint64_t arrivals() const noexcept;
  /// True for the one caller that takes on this exchange (its low 32 bits), false for the others;
  /// the caller's node index is then what finisher() returns.
  bool claim(std::uint32_t exchange, int member) noexcept;
  /// The node index of the member that took on `exchange`, or -1 when none has yet.
  int finisher(std::uint32_t exchange) const noexcept;
  /// Posts an abort unless one is there already; rings both bells.
  void post_abort(int origin, errc code, const std::string& reason) noexcept;
  std::optional<notice> abort_notice() const;

  /// Makes the data region hold at least size bytes (the member that finishes the exchange: the
  /// leader, or the last to arrive on a node that holds the whole group). @throws jobkit::error (io)
  void reserve(std::size_t size);
  /// The data region, at least size bytes of it as reserved. @throws jobkit::error (io)
  std::span<std::byte> data(std::size_t size);
  void set_result_size(std::uint64_t size) noexcept;
  std::uint64_t result_size() const noexcept;
  std::uint32_t& result_word() noexcept;
  std::uint32_t& grant_word() noexcept;

 private:
  struct header;
  header& head() const noexcept;
  /// Bytes of the header, the mailboxes and the slots, in whole pages.
  static std::size_t fixed_size(int members);
  void map_fixed();
  void map_data(std::size_t size);

  std::string name_;
  std::string who_;  // the member that maps it, as its errors name it
  int fd_ = -1;
  std::size_t fixed_size_ = 0;
  std::byte* fixed_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t data_mapped_ = 0;
  bool owner_ = false;
  std::chrono::microseconds spin_;
};

/// JOBKIT_SHM_SPIN_US: how long a waiter spins before it sleeps (default 50 µs).
/// @throws jobkit::error (invalid_environment) when malformed
std::chrono::microseconds shm_spin_time();

/// A pidfd of a node-mate's process, closed on destruction: it becomes readable when the process
/// ends, however it ends. Empty for this process (node-mates that are threads, in unit tests).
class process_watch {
 public:
  explicit process_watch(pid_t pid);
  ~process_watch();
  process_watch(process_watch&& other) noexcept;
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;
  process_watch& operator=(process_watch&&) = delete;
  /// True once the process has ended.
  bool ended() const noexcept;

 private:
  int fd_ = -1;
  bool gone_ = false;  // it had ended before pidfd_open
};

}  // namespace jobkit::detail
