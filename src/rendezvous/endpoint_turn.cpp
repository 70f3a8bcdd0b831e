#include "rendezvous/endpoint_turn.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>

#include "core/names.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

namespace {

/// One local rank's slot: the stamp of the task that counts, and its count.
struct slot {
  std::uint64_t stamp;
  std::uint64_t taken;
};
constexpr std::size_t slot_size = sizeof(slot);

[[noreturn]] void fail(const std::string& name, std::string_view what, int error_number) {
  throw error(
      errc::io,
      fmt::format("data path setup: the node's count of endpoint turns, shared memory {} (/dev/shm{}): "
                  "{}{}{}",
                  name, name, what, error_number != 0 ? ": " : "", error_number != 0 ? errno_text(error_number) : ""),
      error_number);
}

/// Holds an exclusive flock until destroyed.
class exclusive_lock {
 public:
  exclusive_lock(int fd, const std::string& name) : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) fail(name, "cannot lock it", errno);
    }
  }
  ~exclusive_lock() { ::flock(fd_, LOCK_UN); }
  exclusive_lock(const exclusive_lock&) = delete;
  exclusive_lock& operator=(const exclusive_lock&) = delete;

 private:
  int fd_;
};

}  // namespace

std::uint64_t task_stamp(const environment& env) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the values and their ends
  bool any = false;
  for (const char* name : {"SLURM_TASK_PID", "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT"}) {
    const auto value = env.get(name).value_or("");
    any = any || !value.empty();
    for (const char c : value + '\n') {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ULL;
    }
  }
  return any ? hash : 0;
}

std::string endpoint_turns_name(const identity& self) {
  if (self.job_id.empty()) return {};
  return fmt::format("/jobkit-turns-{}-n{}", job_step_tag(self, 0), self.node_rank);
}

std::uint64_t take_endpoint_turn(const identity& self, std::uint64_t stamp) {
  const auto name = endpoint_turns_name(self);
  if (name.empty()) return 0;
  if (self.local_rank < 0 || self.local_rank >= 1 << 20) fail(name, fmt::format("local rank {}", self.local_rank), 0);
  const descriptor fd(::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600));
  if (fd.get() < 0) fail(name, "cannot open it", errno);
  const exclusive_lock lock(fd.get(), name);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(name, "cannot read its size", errno);
  if (st.st_uid != ::geteuid() || !S_ISREG(st.st_mode)) {
    fail(name, fmt::format("it belongs to user {}, not to this process's user {}", st.st_uid, ::geteuid()), 0);
  }
  const auto offset = static_cast<off_t>(self.local_rank) * static_cast<off_t>(slot_size);
  slot mine{stamp, 0};
  if (st.st_size >= offset + static_cast<off_t>(slot_size)) {
    slot found{};
    if (const int e = pread_file_all(fd.get(), &found, slot_size, offset); e != 0) fail(name, "cannot read it", e);
    if (found.stamp == stamp) mine.taken = found.taken;  // else an earlier task's: this one's first turn
  } else if (::ftruncate(fd.get(), offset + static_cast<off_t>(slot_size)) != 0) {  // grows only: under the lock
    fail(name, "cannot grow it (is /dev/shm full?)", errno);
  }
  if (mine.taken >= max_endpoint_turns) {
    fail(name,
         fmt::format("local rank {} has taken {} turns, the most one rank may take in one step is {}", self.local_rank,
                     mine.taken, max_endpoint_turns),
         0);
  }
  ++mine.taken;
  const auto written = ::pwrite(fd.get(), &mine, slot_size, offset);
  if (written != static_cast<ssize_t>(slot_size)) fail(name, "cannot write it", written < 0 ? errno : EIO);
  return mine.taken;
}

std::string endpoint_key(std::uint64_t turn) {
  return turn == 0 ? std::string("jobkit.endpoint") : fmt::format("jobkit.endpoint.t{}", turn);
}

}  // namespace jobkit::detail
