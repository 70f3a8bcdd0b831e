#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace jobkit::where {

/// Where this process is in jobkit, kept where `jobkit where` on the same node reads it: the call in
/// progress (its name, the caller's call site, the group, since when) and the last one that ended.
///
/// One file per process in /dev/shm, `jobkit-where.UID.JOB.STEP.PID` (mode 0600: only its user and
/// root read it), made at the process's first collective and removed at its exit; a process that
/// was killed leaves it, and `jobkit where` removes it once the process is gone. Written without a
/// lock (a sequence count, odd while it is written): a reader that sees it change reads again.
/// Writing costs a coarse clock read (the vDSO's, no system call) and a copy of the names. JOBKIT_WHERE=0
/// turns it off; where the file cannot be made, nothing is recorded and nothing fails.
struct record_layout {
  static constexpr std::uint32_t magic_value = 0x6a6b7768;  // "jkwh"
  static constexpr std::uint32_t version_value = 1;
  std::uint32_t magic;
  std::uint32_t version;
  std::atomic<std::uint64_t> sequence;
  std::int32_t pid;
  std::int32_t rank;  // in the world; -1 before the first call
  std::int32_t group_size;
  std::int32_t in_call;  // 1 while a call is in progress
  std::int64_t since_ns;  // CLOCK_REALTIME: when the call began
  std::int64_t last_ended_ns;
  char call[32];
  char site[128];
  char last_call[32];
  char last_site[128];
};

/// What a reader saw (read_record).
struct record_view {
  int pid = 0;
  int rank = -1;
  int group_size = 0;
  bool in_call = false;
  std::int64_t since_ns = 0;
  std::int64_t last_ended_ns = 0;
  std::string call;
  std::string site;
  std::string last_call;
  std::string last_site;
};

/// A call begins: its name ("barrier"), the caller's call site ("train.py:31"), this process's rank
/// in the world and the size of the call's group. A call inside a call (another thread's, or a
/// helper's) leaves the outer one recorded.
void enter(std::string_view call, std::string_view site, int rank, int group_size) noexcept;
/// The call that enter began ended (returned or threw).
void leave() noexcept;

/// enter and leave around a scope.
class call_scope {
 public:
  call_scope(std::string_view call, std::string_view site, int rank, int group_size) noexcept {
    enter(call, site, rank, group_size);
  }
  ~call_scope() { leave(); }
  call_scope(const call_scope&) = delete;
  call_scope& operator=(const call_scope&) = delete;
};

/// The directory and name prefix of the records of a step: "/dev/shm/jobkit-where.UID.JOB.STEP.".
std::string record_prefix(unsigned uid, std::string_view job, std::string_view step);
/// Removes this user's records (and Python stack files) whose process is gone.
void remove_gone(unsigned uid);
/// Reads a record file; nullopt when it is not one (another size or magic) or kept changing.
std::optional<record_view> read_record(const std::string& path);

}  // namespace jobkit::where
