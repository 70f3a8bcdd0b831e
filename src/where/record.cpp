#include "where/record.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/mutex_held.hpp"
#include "where/settings.hpp"

namespace jobkit::where {
namespace {

static_assert(sizeof(record_layout) == 1632, "docs/cli.md gives the record's size");

std::int64_t now_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

template <std::size_t N>
void copy_text(char (&to)[N], std::string_view from) noexcept {
  const auto n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  std::memset(to + n, 0, N - n);
}

template <std::size_t N>
std::string text_of(const char (&from)[N]) {
  return std::string(from, ::strnlen(from, N));
}

// The fences between the sequence count and the fields. GCC refuses atomic_thread_fence under
// -fsanitize=thread (TSan does not model fences): that build, which no other process reads, orders
// them for the compiler only.
void fence(std::memory_order order) noexcept {
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(order);
#else
  std::atomic_thread_fence(order);
#endif
}

/// This process's record, mapped once, and what only its writers touch: all under `record_lock`,
/// which a fork takes (atfork), so that a child starts from a state no writer was changing.
pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
record_layout* layout_ = nullptr;
int fd_ = -1;
bool tried_ = false;
std::uint64_t record_generation = 1;  // a forked child's record is another

void record_before_fork() noexcept { ::pthread_mutex_lock(&record_lock); }
void record_after_fork_in_parent() noexcept { ::pthread_mutex_unlock(&record_lock); }
void record_after_fork_in_child() noexcept {
  // The mapping and the fd are the parent's record: dropped unwritten. The calls in progress were
  // the parent's; a scope of one of them that ends here (the forking thread's) finds another
  // generation and leaves nothing.
  if (layout_ != nullptr) ::munmap(layout_, sizeof(record_layout));
  if (fd_ >= 0) ::close(fd_);
  layout_ = nullptr;
  fd_ = -1;
  tried_ = false;
  ++record_generation;
  ::pthread_mutex_unlock(&record_lock);
}

/// Under `record_lock`.
record_layout* open_record() noexcept {
  if (tried_) return layout_;
  tried_ = true;
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
  layout->score = -1;
  layout->version = record_layout::version_value;
  layout->magic = record_layout::magic_value;
  fd_ = fd;  // kept open: /proc/PID/fd is how a reader finds it
  layout_ = layout;
  return layout_;
}

/// Writes under the sequence count: odd while `change` runs. Under `record_lock`.
template <typename Change>
void write_record(record_layout& layout, Change change) noexcept {
  const auto sequence = layout.sequence.load(std::memory_order_relaxed);
  layout.sequence.store(sequence + 1, std::memory_order_relaxed);
  fence(std::memory_order_release);
  change();
  layout.sequence.store(sequence + 2, std::memory_order_release);
}

struct record_held : detail::mutex_held {
  record_held() noexcept : mutex_held(record_lock) {}
};

}  // namespace

call_scope::call_scope(const call_info& info) noexcept {
  static const bool registered =
      ::pthread_atfork(record_before_fork, record_after_fork_in_parent, record_after_fork_in_child) == 0;
  if (!registered || !enabled()) return;  // (without atfork, a record a forked child would share: none)
  const record_held h;
  auto* layout = open_record();
  if (layout == nullptr) {
    slot_ = -2;
    return;
  }
  generation_ = record_generation;
  const auto free = std::find_if(std::begin(layout->slots), std::end(layout->slots),
                                 [](const record_layout::call_slot& s) { return s.in_call == 0; });
  slot_ = free == std::end(layout->slots) ? -1 : static_cast<int>(free - std::begin(layout->slots));
  const auto since = now_ns();
  write_record(*layout, [&] {
    layout->rank = info.rank;
    ++layout->calls;
    if (slot_ < 0) return;
    auto& s = layout->slots[slot_];
    s.in_call = 1;
    s.group_size = info.group_size;
    s.since_ns = since;
    copy_text(s.call, info.call);
    copy_text(s.site, info.site);
  });
}

call_scope::~call_scope() {
  if (slot_ == -2) return;
  const record_held h;
  auto* layout = layout_;
  if (layout == nullptr || generation_ != record_generation) return;  // the parent's call, in a child
  write_record(*layout, [&] {
    --layout->calls;
    if (slot_ < 0) return;
    auto& s = layout->slots[slot_];
    s.in_call = 0;
    std::memcpy(layout->last_call, s.call, sizeof s.call);
    std::memcpy(layout->last_site, s.site, sizeof s.site);
    layout->last_ended_ns = now_ns();
  });
}

void record_score(double score, double threshold, std::int64_t agreement) noexcept {
  const record_held h;
  auto* layout = layout_;
  if (layout == nullptr) return;
  write_record(*layout, [&] {
    layout->score = score;
    layout->score_threshold = threshold;
    layout->score_agreement = agreement;
  });
}

namespace {

/// A record's view: its header and the oldest call in progress among `slots` (the record's own,
/// or a reader's copy of them).
record_view view_of(const record_layout& layout, const record_layout::call_slot (&slots)[record_layout::slot_count]) {
  record_view v;
  v.pid = layout.pid;
  v.rank = layout.rank;
  v.calls = layout.calls;
  v.last_ended_ns = layout.last_ended_ns;
  v.last_call = text_of(layout.last_call);
  v.last_site = text_of(layout.last_site);
  if (layout.score >= 0) {
    v.score = layout.score;
    v.score_threshold = layout.score_threshold;
    v.score_agreement = layout.score_agreement;
  }
  const record_layout::call_slot* oldest = nullptr;
  for (const auto& s : slots) {
    if (s.in_call != 0 && (oldest == nullptr || s.since_ns < oldest->since_ns)) oldest = &s;
  }
  if (oldest != nullptr) {
    v.in_call = true;
    v.group_size = oldest->group_size;
    v.since_ns = oldest->since_ns;
    v.call = text_of(oldest->call);
    v.site = text_of(oldest->site);
  }
  return v;
}

}  // namespace

std::optional<record_view> read_own_record() {
  const record_held h;
  const auto* layout = layout_;
  if (layout == nullptr) return std::nullopt;
  return view_of(*layout, layout->slots);
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
    // A copy first, then the checks: the writer may change it meanwhile.
    record_layout::call_slot slots[record_layout::slot_count];
    std::memcpy(static_cast<void*>(slots), layout->slots, sizeof slots);
    auto v = view_of(*layout, slots);
    fence(std::memory_order_acquire);
    if (layout->sequence.load(std::memory_order_relaxed) != before || layout->magic != record_layout::magic_value ||
        layout->version != record_layout::version_value) {
      continue;
    }
    view = std::move(v);
  }
  ::munmap(mapped, sizeof(record_layout));
  return view;
}

}  // namespace jobkit::where
