#include "rendezvous/endpoint_turn.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <mutex>
#include <optional>
#include <vector>

#include "core/fnv1a.hpp"
#include "core/names.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

namespace {

constexpr std::string_view prefix = "jobkit-turns-";

/// One local rank's slot: the task that counts, and its count.
struct slot {
  std::uint64_t stamp;
  std::uint64_t taken;
  std::int64_t task_pid;
};
constexpr std::size_t slot_size = sizeof(slot);
/// The count's first slot names its format: a count of another format (another jobkit build in
/// the same step) is refused, never misread.
constexpr slot format_slot{0x736e727574746b6aULL /* "jkturns" */, 1, 0};
/// Where local rank r's slot is: after the format's.
off_t slot_offset(int local_rank) { return static_cast<off_t>(local_rank + 1) * static_cast<off_t>(slot_size); }
constexpr std::size_t max_slots = std::size_t{1} << 16;

[[noreturn]] void fail(const std::string& name, std::string_view what, int error_number) {
  throw error(
      errc::io,
      fmt::format("data path setup: the node's count of endpoint turns, shared memory {} (/dev/shm{}): {}{}{}", name,
                  name, what, error_number != 0 ? ": " : "", error_number != 0 ? errno_text(error_number) : ""),
      error_number);
}

/// Whether a process with this pid is alive (a pid of another user's process counts as alive).
bool alive(std::int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

/// A count opened and locked (flock, exclusive), linked under its name (a count removed while
/// this process waited for the lock is opened again). Closed and unlocked on destruction.
class locked_count {
 public:
  /// nullopt when `create` is false and there is no count of this name (or it is not this user's).
  static std::optional<locked_count> open(const std::string& name, bool create) {
    for (;;) {
      const int fd = ::shm_open(name.c_str(), O_RDWR | (create ? O_CREAT : 0), 0600);
      if (fd < 0) {
        if (!create && errno == ENOENT) return std::nullopt;
        fail(name, "cannot open it", errno);
      }
      locked_count count(fd);
      while (::flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) fail(name, "cannot lock it", errno);
      }
      if (::fstat(fd, &count.st_) != 0) fail(name, "cannot read its size", errno);
      if (count.st_.st_uid != ::geteuid() || !S_ISREG(count.st_.st_mode)) {
        if (!create) return std::nullopt;
        fail(name, fmt::format("it belongs to user {}, not to this process's user {}", count.st_.st_uid, ::geteuid()),
             0);
      }
      if (count.st_.st_nlink > 0) return count;  // else removed meanwhile: open the name again
    }
  }
  locked_count(locked_count&& other) noexcept : fd_(other.fd_), st_(other.st_) { other.fd_ = -1; }
  locked_count& operator=(locked_count&&) = delete;
  ~locked_count() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock
  }

  int fd() const noexcept { return fd_; }
  /// The local ranks' slots it has (0 for a count just made).
  std::size_t slots() const noexcept {
    const auto whole = static_cast<std::size_t>(st_.st_size) / slot_size;
    return whole == 0 ? 0 : whole - 1;
  }
  /// Whether it is a count of this build's format (or one just made, still empty).
  bool ours() const {
    if (st_.st_size == 0) return true;
    slot first{};
    return static_cast<std::size_t>(st_.st_size) % slot_size == 0 && pread_file_all(fd_, &first, slot_size, 0) == 0 &&
           first.stamp == format_slot.stamp && first.taken == format_slot.taken;
  }
  /// Every local rank's slot (a count of another format, or too large, reads as none).
  std::vector<slot> read() const {
    const auto n = slots();
    if (n > max_slots || !ours()) return {};
    std::vector<slot> all(n);
    if (n > 0 && pread_file_all(fd_, all.data(), n * slot_size, slot_offset(0)) != 0) return {};
    return all;
  }

 private:
  explicit locked_count(int fd) : fd_(fd) {}
  int fd_;
  struct stat st_ {};
};

/// Whether no task of these slots is left: every one ended, or no longer alive.
bool no_task_left(const std::vector<slot>& slots) {
  for (const auto& s : slots) {
    if (s.task_pid != 0 && alive(s.task_pid)) return false;
  }
  return true;
}

/// Removes this user's counts, other than `keep`, whose tasks have all ended (at most max_swept).
void sweep(const std::string& keep) noexcept {
  try {
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) return;
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string_view n(entry->d_name);
      if (n.starts_with(prefix) && "/" + std::string(n) != keep) names.push_back("/" + std::string(n));
      if (names.size() >= static_cast<std::size_t>(max_swept)) break;
    }
    ::closedir(dir);
    for (const auto& name : names) {
      auto count = locked_count::open(name, false);
      if (count && count->ours() && no_task_left(count->read())) ::shm_unlink(name.c_str());
    }
  } catch (...) {  // a count that cannot be read is left as it is
  }
}

}  // namespace

task_of_process task_of(const environment& env, int parent_pid) {
  task_of_process task;
  task.pid = parent_pid;
  if (const auto text = env.get("SLURM_TASK_PID")) {
    int pid = 0;
    const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), pid);
    if (ec == std::errc{} && end == text->data() + text->size() && pid > 0) task.pid = pid;
  }
  std::uint64_t hash = fnv1a_basis;  // over the values, each ended by 0xff
  const auto mix = [&](std::string_view value) { hash = fnv1a(fnv1a(hash, value), 0xffU); };
  mix(std::to_string(task.pid));
  for (const char* name : {"SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT"}) mix(env.get(name).value_or(""));
  task.stamp = hash;
  return task;
}

std::string endpoint_turns_name(const identity& self) {
  if (self.job_id.empty()) return {};
  return fmt::format("/{}{}-n{}", prefix, job_step_tag(self, 0), self.node_rank);
}

namespace {

/// The turns this process ends when it exits: a static object's destructor (at exit(), not at an
/// exec), only in the process that took them (a forked child that exits ends nothing).
class turns_at_exit {
 public:
  static turns_at_exit& instance() {
    static turns_at_exit held;
    return held;
  }
  void add(std::string name, int local_rank) {
    const std::lock_guard lock(mutex_);
    entries_.push_back({std::move(name), local_rank, ::getpid()});
  }
  ~turns_at_exit() {
    for (const auto& e : entries_) {
      if (e.pid == ::getpid()) end_task_turns(e.name, e.local_rank);
    }
  }
  turns_at_exit(const turns_at_exit&) = delete;
  turns_at_exit& operator=(const turns_at_exit&) = delete;

 private:
  turns_at_exit() = default;
  struct entry {
    std::string name;
    int local_rank;
    pid_t pid;
  };
  std::mutex mutex_;
  std::vector<entry> entries_;
};

}  // namespace

endpoint_turn take_endpoint_turn(const identity& self, const task_of_process& task) {
  const auto name = endpoint_turns_name(self);
  if (name.empty()) return {};
  const int local_rank = self.local_rank;
  if (local_rank < 0 || static_cast<std::size_t>(local_rank) >= max_slots) {
    fail(name, fmt::format("local rank {} has no slot (at most {})", local_rank, max_slots), 0);
  }
  if (task.pid == ::getpid()) turns_at_exit::instance();  // made before the turn: destroyed after it is used
  endpoint_turn turn;
  bool created = false;
  {
    auto count = *locked_count::open(name, true);
    if (!count.ours()) {
      fail(name, "it was written by another jobkit build (another format): every process of a step must use one build",
           0);
    }
    created = count.slots() == 0;
    if (created && ::pwrite(count.fd(), &format_slot, slot_size, 0) != static_cast<ssize_t>(slot_size)) {
      fail(name, "cannot write it", errno);
    }
    const auto offset = slot_offset(local_rank);
    slot mine{task.stamp, 0, task.pid};
    if (static_cast<std::size_t>(local_rank) < count.slots()) {
      slot found{};
      if (const int e = pread_file_all(count.fd(), &found, slot_size, offset); e != 0) fail(name, "cannot read it", e);
      if (found.stamp == task.stamp) mine.taken = found.taken;  // else an earlier task's: this one's first turn
    } else if (::ftruncate(count.fd(), offset + static_cast<off_t>(slot_size)) != 0) {  // grows only: under the lock
      fail(name, "cannot grow it (is /dev/shm full?)", errno);
    }
    if (mine.taken >= max_endpoint_turns) {
      fail(name,
           fmt::format("local rank {} has taken {} turns, the most one rank may take in one step is {}", local_rank,
                       mine.taken, max_endpoint_turns),
           0);
    }
    ++mine.taken;
    const auto written = ::pwrite(count.fd(), &mine, slot_size, offset);
    if (written != static_cast<ssize_t>(slot_size)) fail(name, "cannot write it", written < 0 ? errno : EIO);
    turn.number = mine.taken;
  }
  // Only the task's own first process ends its task's turns: a later process of the task (a
  // shell's command) may be followed by another.
  if (task.pid == ::getpid()) turns_at_exit::instance().add(name, local_rank);
  if (created) sweep(name);  // once per step and node: the first rank there to take a turn
  return turn;
}

void end_task_turns(const std::string& name, int local_rank) noexcept {
  try {
    auto count = locked_count::open(name, false);
    if (!count || !count->ours() || local_rank < 0 || static_cast<std::size_t>(local_rank) >= count->slots()) return;
    const auto offset = slot_offset(local_rank);
    slot mine{};
    if (pread_file_all(count->fd(), &mine, slot_size, offset) != 0) return;
    mine.task_pid = 0;  // ended: a node-mate that ends after this one removes the count
    if (::pwrite(count->fd(), &mine, slot_size, offset) != static_cast<ssize_t>(slot_size)) return;
    if (no_task_left(count->read())) ::shm_unlink(name.c_str());
  } catch (...) {  // left for a later step's sweep
  }
}

std::string endpoint_turn::key() const {
  return number == 0 ? std::string("jobkit.endpoint") : fmt::format("jobkit.endpoint.t{}", number);
}

}  // namespace jobkit::detail
