#include "where/record.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/environment.hpp"
#include "where/watch.hpp"

namespace jobkit::where {
namespace {

std::int64_t now_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

template <std::size_t N>
void copy_text(char (&to)[N], std::string_view from) noexcept {
  const auto n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

template <std::size_t N>
std::string text_of(const char (&from)[N]) {
  return std::string(from, ::strnlen(from, N));
}

std::atomic<int> depth{0};

// The fences between the sequence count and the fields. GCC refuses atomic_thread_fence under
// -fsanitize=thread (TSan does not model fences): that build, which no other process reads, orders
// them for the compiler only.
void fence(std::memory_order order) noexcept {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(order);
#else
  std::atomic_thread_fence(order);
#endif
}  // calls in progress in this process

/// This process's record: a memfd (no file name anywhere: it ends with the process, and only
/// its user and root reach it, through /proc/PID/fd), mapped once. A forked child makes its own.
record_layout* layout_ = nullptr;
int fd_ = -1;
bool tried_ = false;

void forget_in_child() noexcept {
  if (layout_ != nullptr) ::munmap(layout_, sizeof(record_layout));
  if (fd_ >= 0) ::close(fd_);
  layout_ = nullptr;
  fd_ = -1;
  tried_ = false;
  forget_watch_in_child();
}

record_layout* open_record() noexcept {
  // Called by the thread that took depth from 0 to 1: one at a time.
  if (tried_) return layout_;
  tried_ = true;
  static const bool off = [] {
    const auto& env = detail::process_environment();
    const auto value = env.get("JOBKIT_WHERE");
    // Outside a Slurm job `jobkit where` has nothing to ask.
    return (value && *value == "0") || !env.get("SLURM_JOB_ID");
  }();
  if (off) return nullptr;
  const int fd = ::memfd_create(record_name, MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  void* mapped = MAP_FAILED;
  if (::ftruncate(fd, sizeof(record_layout)) == 0) {
    mapped = ::mmap(nullptr, sizeof(record_layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (mapped == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  auto* layout = new (mapped) record_layout{};
  layout->pid = ::getpid();
  layout->rank = -1;
  layout->version = record_layout::version_value;
  layout->magic = record_layout::magic_value;
  static const bool registered = ::pthread_atfork(nullptr, nullptr, forget_in_child) == 0;
  (void)registered;
  fd_ = fd;  // kept open: /proc/PID/fd is how a reader finds it
  layout_ = layout;
  return layout_;
}

}  // namespace

std::int64_t enter(const call_info& info) noexcept {
  if (depth.fetch_add(1, std::memory_order_acq_rel) != 0) return 0;
  auto* layout = open_record();
  if (layout == nullptr) return 0;
  const auto since = now_ns();
  const auto sequence = layout->sequence.load(std::memory_order_relaxed);
  layout->sequence.store(sequence + 1, std::memory_order_relaxed);
  fence(std::memory_order_release);
  layout->rank = info.rank;
  layout->group_size = info.group_size;
  layout->in_call = 1;
  layout->since_ns = since;
  copy_text(layout->call, info.call);
  copy_text(layout->site, info.site);
  layout->sequence.store(sequence + 2, std::memory_order_release);
  watch_enter(info.group_rank, info.report_after, since);
  return since;
}

std::chrono::milliseconds call_scope::waited() const noexcept {
  if (since_ns_ == 0) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(now_ns() - since_ns_));
}

void leave() noexcept {
  if (depth.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  auto* layout = layout_;
  if (layout == nullptr) return;
  watch_leave();
  const auto sequence = layout->sequence.load(std::memory_order_relaxed);
  layout->sequence.store(sequence + 1, std::memory_order_relaxed);
  fence(std::memory_order_release);
  layout->in_call = 0;
  layout->last_ended_ns = now_ns();
  layout->sequence.store(sequence + 2, std::memory_order_release);
}

process_files find_files(int pid) {
  process_files found;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = ::opendir(dir.c_str());
  if (fds == nullptr) return found;
  const std::string record = std::string("/memfd:") + record_name + " ";
  const std::string stack = std::string("/memfd:") + stack_name + " ";
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = dir + "/" + entry->d_name;
    char target[256];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string_view link(target, static_cast<std::size_t>(n));
    if (link.starts_with(record) && found.record.empty()) found.record = path;
    if (link.starts_with(stack) && found.stack.empty()) found.stack = path;
  }
  ::closedir(fds);
  return found;
}

std::optional<record_view> read_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // a /proc/PID/fd link, followed
  if (fd < 0) return std::nullopt;
  struct stat info {};
  void* mapped = MAP_FAILED;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size == sizeof(record_layout)) {
    mapped = ::mmap(nullptr, sizeof(record_layout), PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (mapped == MAP_FAILED) return std::nullopt;
  const auto* layout = static_cast<const record_layout*>(mapped);
  std::optional<record_view> view;
  for (int attempt = 0; attempt < 100 && !view; ++attempt) {
    const auto before = layout->sequence.load(std::memory_order_acquire);
    if (before % 2 != 0) continue;
    record_view v;
    v.pid = layout->pid;
    v.rank = layout->rank;
    v.group_size = layout->group_size;
    v.in_call = layout->in_call != 0;
    v.since_ns = layout->since_ns;
    v.last_ended_ns = layout->last_ended_ns;
    v.call = text_of(layout->call);
    v.site = text_of(layout->site);
    fence(std::memory_order_acquire);
    if (layout->sequence.load(std::memory_order_relaxed) == before && layout->magic == record_layout::magic_value &&
        layout->version == record_layout::version_value) {
      if (!v.in_call) {
        v.last_call = v.call;
        v.last_site = v.site;
      }
      view = std::move(v);
    }
  }
  ::munmap(mapped, sizeof(record_layout));
  return view;
}

}  // namespace jobkit::where
