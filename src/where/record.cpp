#include "where/record.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/environment.hpp"

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

std::atomic<int> depth{0};  // calls in progress in this process

struct process_record {
  record_layout* layout = nullptr;
  std::string path;
};

process_record* open_record() noexcept {
  static process_record* record = [] {
    auto* made = new process_record;  // never freed: read by every later call, and at exit
    const auto& env = detail::process_environment();
    const auto off = env.get("JOBKIT_WHERE");
    if (off && *off == "0") return made;
    const auto job = env.get("SLURM_JOB_ID");
    const auto step = env.get("SLURM_STEP_ID");
    if (!job) return made;  // outside a Slurm job, `jobkit where` has nothing to ask
    made->path = record_prefix(::getuid(), *job, step.value_or("none")) + std::to_string(::getpid());
    const int fd = ::open(made->path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return made;
    void* mapped = MAP_FAILED;
    if (::ftruncate(fd, sizeof(record_layout)) == 0) {
      mapped = ::mmap(nullptr, sizeof(record_layout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    ::close(fd);
    if (mapped == MAP_FAILED) {
      ::unlink(made->path.c_str());
      return made;
    }
    auto* layout = new (mapped) record_layout{};
    layout->pid = ::getpid();
    layout->rank = -1;
    layout->version = record_layout::version_value;
    layout->magic = record_layout::magic_value;
    made->layout = layout;
    std::atexit([] {
      if (!record->path.empty()) ::unlink(record->path.c_str());
    });
    return made;
  }();
  return record;
}

}  // namespace

std::string record_prefix(unsigned uid, std::string_view job, std::string_view step) {
  return "/dev/shm/jobkit-where." + std::to_string(uid) + "." + std::string(job) + "." + std::string(step) + ".";
}

void enter(std::string_view call, std::string_view site, int rank, int group_size) noexcept {
  if (depth.fetch_add(1, std::memory_order_acq_rel) != 0) return;
  auto* layout = open_record()->layout;
  if (layout == nullptr) return;
  const auto sequence = layout->sequence.load(std::memory_order_relaxed);
  layout->sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  layout->rank = rank;
  layout->group_size = group_size;
  layout->in_call = 1;
  layout->since_ns = now_ns();
  copy_text(layout->call, call);
  copy_text(layout->site, site);
  layout->sequence.store(sequence + 2, std::memory_order_release);
}

void leave() noexcept {
  if (depth.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  auto* layout = open_record()->layout;
  if (layout == nullptr) return;
  const auto sequence = layout->sequence.load(std::memory_order_relaxed);
  layout->sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  layout->in_call = 0;
  layout->last_ended_ns = now_ns();
  std::memcpy(layout->last_call, layout->call, sizeof layout->call);
  std::memcpy(layout->last_site, layout->site, sizeof layout->site);
  layout->sequence.store(sequence + 2, std::memory_order_release);
}

void remove_gone(unsigned uid) {
  const std::string mine = "jobkit-where." + std::to_string(uid) + ".";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (!name.starts_with(mine)) continue;
    if (name.ends_with(".py")) name.remove_suffix(3);
    const auto dot = name.rfind('.');
    const auto pid = std::atoi(std::string(name.substr(dot + 1)).c_str());
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(("/dev/shm/" + std::string(entry->d_name)).c_str());
  }
  ::closedir(dir);
}

std::optional<record_view> read_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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
    v.last_call = text_of(layout->last_call);
    v.last_site = text_of(layout->last_site);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (layout->sequence.load(std::memory_order_relaxed) == before && layout->magic == record_layout::magic_value &&
        layout->version == record_layout::version_value) {
      view = std::move(v);
    }
  }
  ::munmap(mapped, sizeof(record_layout));
  return view;
}

}  // namespace jobkit::where
