#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace jobkit::where {

/// Where this process is in jobkit, kept where `jobkit where` on the same node reads it: the calls
/// in progress (each one's name, the caller's call site, the size of its group, since when) and the
/// last one that ended.
///
/// A memfd named "jobkit-where", made at the process's first collective and kept open: it has no
/// name in any file system, ends with the process (killed or not), and is reached only through
/// /proc/PID/fd (proc.hpp: find_files), by its user and root (ptrace's read access). Each call owns
/// a slot of it from its start to its end (call_scope), whichever thread makes it and however many
/// make calls at once; a call past the slots is counted, not named. Its writers take turns (a lock
/// of this process, held for a copy of the names) and count a sequence, odd while they write: a
/// reader that sees it change reads again. A forked child starts with no calls and makes its own
/// memfd at its first call; what it inherited of its parent's is dropped, and a call the parent was
/// in when it forked is never the child's. Nothing is recorded where `jobkit where` is off
/// (settings.hpp) or the memfd cannot be made, and nothing fails.
inline constexpr const char* record_name = "jobkit-where";

struct record_layout {
  static constexpr std::uint32_t magic_value = 0x6a6b7768;  // "jkwh"
  static constexpr std::uint32_t version_value = 4;
  static constexpr int slot_count = 8;
  struct call_slot {
    std::int32_t in_call;  // 1 while the slot's call is in progress
    std::int32_t group_size;
    std::int64_t since_ns;  // CLOCK_REALTIME: when the call began
    char call[32];
    char site[128];
  };
  std::uint32_t magic;
  std::uint32_t version;
  std::atomic<std::uint64_t> sequence;
  std::int32_t pid;
  std::int32_t rank;   // in the world; -1 before the first call
  std::int32_t calls;  // in progress, in a slot or not
  std::int32_t unused;
  call_slot slots[slot_count];
  std::int64_t last_ended_ns;  // when the last call ended
  char last_call[32];
  char last_site[128];
  // This rank's straggler score (docs/progress.md) at the last exchange of the progress tracker:
  // negative before the first (and where tracking is off); the threshold below which it is a
  // straggler, and the stop agreement (1, 2, ...) it was computed at.
  double score;
  double score_threshold;
  std::int64_t score_agreement;
};

/// What a reader saw (read_record): the oldest call in progress (the one that has waited longest),
/// and the last one that ended.
struct record_view {
  int pid = 0;
  int rank = -1;
  int group_size = 0;
  bool in_call = false;
  int calls = 0;  // in progress
  std::int64_t since_ns = 0;
  std::int64_t last_ended_ns = 0;
  std::string call;
  std::string site;
  std::string last_call;
  std::string last_site;
  std::optional<double> score;  // the straggler score; nullopt before the first exchange
  double score_threshold = 0;
  std::int64_t score_agreement = 0;
};

/// A call: its name ("barrier"), the caller's call site ("train.py:31"), this process's rank in the
/// world and the size of the call's group.
struct call_info {
  std::string_view call;
  std::string_view site;
  int rank = 0;
  int group_size = 0;
};

/// A call recorded from its start to its end (returned or threw): the one owner of its slot.
class call_scope {
 public:
  explicit call_scope(const call_info& info) noexcept;
  ~call_scope();
  call_scope(const call_scope&) = delete;
  call_scope& operator=(const call_scope&) = delete;

 private:
  int slot_ = -2;                 // -1: past the slots; -2: not recorded
  std::uint64_t generation_ = 0;  // the record's (a forked child's is another)
};

/// Reads a record (a /proc/PID/fd/N path); nullopt when it is not one (another size or magic) or
/// kept changing.
std::optional<record_view> read_record(const std::string& path);

/// Records this rank's straggler score of an exchange (src/progress/tracker.hpp) in the record,
/// where this process has one (made at its first recorded call: the exchange is a collective);
/// nothing otherwise. Never fails.
void record_score(double score, double threshold, std::int64_t agreement) noexcept;

/// This process's own record, read in place (no /proc): nullopt before its first recorded call or
/// where nothing is recorded. For the progress watcher (src/progress/tracker.hpp), which names the
/// call a rank that makes no progress is in.
std::optional<record_view> read_own_record();

}  // namespace jobkit::where
