#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace jobkit::where {

/// Where this process is in jobkit, kept where `jobkit where` on the same node reads it: the call in
/// progress (its name, the caller's call site, the size of its group, since when) and the last one
/// that ended.
///
/// A memfd named "jobkit-where" of 208 bytes, made at the process's first collective and kept open:
/// it has no name in any file system, ends with the process (killed or not), and is reached only
/// through /proc/PID/fd, by its user and root (ptrace's read access). A forked child makes its own.
/// Written without a lock (a sequence count, odd while it is written): a reader that sees it change
/// reads again. Writing costs a coarse clock read (the vDSO's, no system call) and a copy of the
/// names at a call's start, the clock alone at its end (the call's fields then describe the last
/// one that ended). JOBKIT_WHERE=0 turns it off, as does running outside a Slurm job; where the memfd cannot be
/// made, nothing is recorded and nothing fails.
inline constexpr const char* record_name = "jobkit-where";
/// The memfd `import jobkit` has Python's faulthandler dump every thread's stack into.
inline constexpr const char* stack_name = "jobkit-where-stack";

struct record_layout {
  static constexpr std::uint32_t magic_value = 0x6a6b7768;  // "jkwh"
  static constexpr std::uint32_t version_value = 2;
  std::uint32_t magic;
  std::uint32_t version;
  std::atomic<std::uint64_t> sequence;
  std::int32_t pid;
  std::int32_t rank;  // in the world; -1 before the first call
  std::int32_t group_size;
  std::int32_t in_call;        // 1 while a call is in progress; 0: call and site are the last that ended
  std::int64_t since_ns;       // CLOCK_REALTIME: when the call began
  std::int64_t last_ended_ns;  // when the last call ended
  char call[32];
  char site[128];
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
/// in the world, its rank in the call's group and the group's size; report_after: when the step
/// reports by itself (watch.hpp; zero: never). A call inside a call (another thread's, or a
/// helper's) leaves the outer one recorded.
struct call_info {
  std::string_view call;
  std::string_view site;
  int rank = 0;
  int group_rank = 0;
  int group_size = 0;
  std::chrono::milliseconds report_after{0};
};
/// Returns when the call began (CLOCK_REALTIME, ns); 0 when nothing is recorded (a call inside a
/// call, JOBKIT_WHERE=0, outside a Slurm job).
std::int64_t enter(const call_info& info) noexcept;
/// The call that enter began ended (returned or threw).
void leave() noexcept;

/// enter and leave around a scope.
class call_scope {
 public:
  explicit call_scope(const call_info& info) noexcept : since_ns_(enter(info)) {}
  ~call_scope() { leave(); }
  /// How long the recorded call has been in progress; zero when it is not recorded.
  std::chrono::milliseconds waited() const noexcept;
  call_scope(const call_scope&) = delete;
  call_scope& operator=(const call_scope&) = delete;

 private:
  std::int64_t since_ns_;
};

/// A process's record and Python stack file, as /proc/PID/fd/N paths; empty where it has none.
struct process_files {
  std::string record;
  std::string stack;
};
process_files find_files(int pid);

/// Reads a record (a /proc/PID/fd/N path); nullopt when it is not one (another size or magic) or
/// kept changing.
std::optional<record_view> read_record(const std::string& path);

}  // namespace jobkit::where
