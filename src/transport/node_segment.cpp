// A node's shared memory segment as memory: its creation, mapping and unlinking, the layout of
// slots, mailboxes and the growing data region, the futex bells and the pidfd watches. What the
// members write there and when is tree_node's (the on-node medium) and the routes' (routes.hpp).

#include "transport/node_segment.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/environment.hpp"
#include "core/fnv1a.hpp"

namespace jobkit::detail {

namespace {

// Changes with the layout (the slots' two parts since 2026-11-28), so that two builds of
// different layouts in one step are told apart.
constexpr std::uint64_t segment_magic = 0x6a6f626b73683032;  // "jobksh02"
constexpr std::size_t page = 4096;
constexpr std::size_t initial_data = 64 * 1024;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

[[noreturn]] void io_failure(const std::string& who, const std::string& what, int error_number) {
  throw error(errc::io, fmt::format("{}: {}: {}", who, what, errno_text(error_number)), error_number);
}

}  // namespace

struct node_segment::header {
  std::uint64_t magic;
  std::uint32_t members;
  alignas(64) std::uint32_t up_bell;
  std::uint32_t up_sleepers;
  std::uint64_t arrivals;  // members' arrivals so far, over every exchange
  std::uint64_t claim;     // (exchange << 32) | node index of the member that took on finishing it
  alignas(64) std::uint32_t down_bell;
  std::uint32_t down_sleepers;
  alignas(64) std::uint32_t result;
  std::uint32_t grant;
  std::uint64_t result_size;
  std::uint64_t data_capacity;
  alignas(64) std::uint32_t abort_state;  // 0 none, 1 being written, 2 posted
  std::int32_t abort_origin;
  std::int32_t abort_code;
  std::uint32_t abort_size;
  char abort_text[3800];
};

std::chrono::microseconds shm_spin_time() {
  static const auto spin = [] {
    const auto value = process_environment().get("JOBKIT_SHM_SPIN_US");
    if (!value) return std::chrono::microseconds(50);
    char* end = nullptr;
    errno = 0;
    const long us = std::strtol(value->c_str(), &end, 10);
    if (value->empty() || *end != '\0' || errno != 0 || us < 0 || us > 1000000) {
      throw error(errc::invalid_environment,
                  fmt::format("JOBKIT_SHM_SPIN_US='{}' is not a number of microseconds from 0 to 1000000", *value));
    }
    return std::chrono::microseconds(us);
  }();
  return spin;
}

node_segment::node_segment(const std::string& name, int members, const std::string& who)
    : name_(name), who_(who), owner_(true), spin_(shm_spin_time()) {
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    io_failure(who, "cannot remove the shared memory segment " + name + " left by an earlier attempt", errno);
  }
  fd_ = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) io_failure(who, "cannot create the shared memory segment " + name, errno);
  try {
    fixed_size_ = fixed_size(members);
    // Allocated now: a full /dev/shm is an error here, not a SIGBUS at the first write.
    if (const int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(fixed_size_ + initial_data)); rc != 0) {
      io_failure(who,
                 fmt::format("cannot size the shared memory segment {} ({} bytes; is /dev/shm full?)", name,
                             fixed_size_ + initial_data),
                 rc);
    }
    map_fixed();
    head().magic = segment_magic;
    head().members = static_cast<std::uint32_t>(members);
    head().data_capacity = initial_data;
  } catch (...) {
    if (fixed_) ::munmap(fixed_, fixed_size_);
    ::close(fd_);
    ::shm_unlink(name.c_str());
    throw;
  }
}

node_segment::node_segment(attach_t, const std::string& name, int members, const std::string& who)
    : name_(name), who_(who), spin_(shm_spin_time()) {
  fd_ = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd_ < 0) io_failure(who, "cannot open the shared memory segment " + name + " of its node's leader", errno);
  try {
    fixed_size_ = fixed_size(members);
    struct stat info {};
    if (::fstat(fd_, &info) != 0) io_failure(who, "cannot read the size of " + name, errno);
    if (static_cast<std::size_t>(info.st_size) < fixed_size_) {
      throw error(errc::internal, fmt::format("{}: the shared memory segment {} holds {} bytes, not the {} of {} "
                                              "members: two jobkit builds in one step?",
                                              who, name, info.st_size, fixed_size_, members));
    }
    map_fixed();
    if (head().magic != segment_magic || head().members != static_cast<std::uint32_t>(members)) {
      throw error(errc::internal,
                  fmt::format("{}: the shared memory segment {} is not one of {} members of this jobkit build", who,
                              name, members));
    }
  } catch (...) {
    if (fixed_) ::munmap(fixed_, fixed_size_);
    ::close(fd_);
    throw;
  }
}

node_segment::~node_segment() {
  unlink();
  if (data_) ::munmap(data_, data_mapped_);
  ::munmap(fixed_, fixed_size_);
  ::close(fd_);
}

void node_segment::map_fixed() {
  void* p = ::mmap(nullptr, fixed_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) io_failure(who_, "cannot map the shared memory segment " + name_, errno);
  fixed_ = static_cast<std::byte*>(p);
}

void node_segment::map_data(std::size_t size) {
  if (data_) ::munmap(data_, data_mapped_);
  data_ = nullptr;
  data_mapped_ = 0;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(fixed_size_));
  if (p == MAP_FAILED) io_failure(who_, fmt::format("cannot map {} bytes of the segment {}", size, name_), errno);
  data_ = static_cast<std::byte*>(p);
  data_mapped_ = size;
}

void node_segment::unlink() noexcept {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

node_segment::header& node_segment::head() const noexcept { return *reinterpret_cast<header*>(fixed_); }

std::size_t node_segment::fixed_size(int members) {
  return round_up(sizeof(header), page) + round_up(sizeof(mail) * mailboxes, page) +
         round_up(sizeof(slot) * static_cast<std::size_t>(members), page);
}

node_segment::mail& node_segment::mail_for(std::uint64_t sequence) noexcept {
  return reinterpret_cast<mail*>(fixed_ + round_up(sizeof(header), page))[sequence % mailboxes];
}

node_segment::slot& node_segment::member(int index) noexcept {
  return reinterpret_cast<slot*>(fixed_ + round_up(sizeof(header), page) +
                                 round_up(sizeof(mail) * mailboxes, page))[index];
}

std::uint64_t node_segment::name_hash(std::string_view name) noexcept {
  return fnv1a(fnv1a_basis, name.substr(0, text_capacity));
}

const node_segment::part& node_segment::latest_part(int index) noexcept {
  const auto& parts = member(index).parts;
  return parts[0].sequence > parts[1].sequence ? parts[0] : parts[1];
}

std::uint32_t node_segment::load(const std::uint32_t& word) const noexcept {
  return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(word)).load(std::memory_order_acquire);
}

void node_segment::store(std::uint32_t& word, std::uint32_t value) noexcept {
  std::atomic_ref<std::uint32_t>(word).store(value, std::memory_order_release);
}

std::uint64_t node_segment::load(const std::uint64_t& word) const noexcept {
  return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(word)).load(std::memory_order_acquire);
}

void node_segment::store(std::uint64_t& word, std::uint64_t value) noexcept {
  std::atomic_ref<std::uint64_t>(word).store(value, std::memory_order_release);
}

bool node_segment::exchange_word(std::uint64_t& word, std::uint64_t expected, std::uint64_t desired) noexcept {
  return std::atomic_ref<std::uint64_t>(word).compare_exchange_strong(expected, desired, std::memory_order_acq_rel);
}

std::uint32_t node_segment::count_down(std::uint32_t& word) noexcept {
  return std::atomic_ref<std::uint32_t>(word).fetch_sub(1, std::memory_order_acq_rel) - 1;
}

std::uint32_t node_segment::bell_value(bell b) const noexcept {
  return load(b == bell::up ? head().up_bell : head().down_bell);
}

void node_segment::ring(bell b) noexcept {
  auto& word = b == bell::up ? head().up_bell : head().down_bell;
  auto& sleepers = b == bell::up ? head().up_sleepers : head().down_sleepers;
  std::atomic_ref<std::uint32_t>(word).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(sleepers).load(std::memory_order_seq_cst) != 0) {
    ::syscall(SYS_futex, &word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

bool node_segment::wait(bell b, std::uint32_t seen, steady_clock::time_point until, bool spin) noexcept {
  auto& word = b == bell::up ? head().up_bell : head().down_bell;
  auto& sleepers = b == bell::up ? head().up_sleepers : head().down_sleepers;
  std::atomic_ref<std::uint32_t> bell_ref(word);
  if (spin) {
    const auto spin_end = std::min(until, steady_clock::now() + spin_);
    // Spinning yields the core: on an oversubscribed node the rank that rings may need it. The
    // clock is read every few turns only: the bell is what a turn is for.
    for (unsigned turn = 1;; ++turn) {
      if (bell_ref.load(std::memory_order_acquire) != seen) return false;
      if (turn % 8 == 0 && steady_clock::now() >= spin_end) break;
      ::sched_yield();
    }
  }
  std::atomic_ref<std::uint32_t> sleeping(sleepers);
  sleeping.fetch_add(1, std::memory_order_seq_cst);
  bool unrung = false;
  if (bell_ref.load(std::memory_order_seq_cst) == seen) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - steady_clock::now());
    unrung = true;
    if (left.count() > 0) {
      timespec relative{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
      unrung = ::syscall(SYS_futex, &word, FUTEX_WAIT, seen, &relative, nullptr, 0) != 0 &&
               (errno == EINTR || errno == ETIMEDOUT);
    }
  }
  sleeping.fetch_sub(1, std::memory_order_seq_cst);
  return unrung;
}

void node_segment::post_abort(int origin, errc code, const std::string& reason) noexcept {
  auto& h = head();
  std::uint32_t expected = 0;
  if (std::atomic_ref<std::uint32_t>(h.abort_state).compare_exchange_strong(expected, 1)) {
    h.abort_origin = origin;
    h.abort_code = static_cast<std::int32_t>(code);
    h.abort_size = static_cast<std::uint32_t>(std::min(reason.size(), sizeof h.abort_text));
    std::memcpy(h.abort_text, reason.data(), h.abort_size);
    store(h.abort_state, 2);
  }
  ring(bell::up);
  ring(bell::down);
}

std::optional<node_segment::notice> node_segment::abort_notice() const {
  const auto& h = head();
  if (load(h.abort_state) != 2) return std::nullopt;
  return notice{h.abort_origin, static_cast<errc>(h.abort_code), std::string(h.abort_text, h.abort_size)};
}

void node_segment::reserve(std::size_t size) {
  auto& capacity = head().data_capacity;
  if (size > capacity) {
    const auto grown = round_up(std::max(size, static_cast<std::size_t>(capacity) * 2), page);
    if (const int rc = ::posix_fallocate(fd_, static_cast<off_t>(fixed_size_), static_cast<off_t>(grown)); rc != 0) {
      io_failure(who_,
                 fmt::format("cannot grow the shared memory segment {} to {} bytes (is /dev/shm full?)", name_,
                             fixed_size_ + grown),
                 rc);
    }
    capacity = grown;  // published to the members by the release store of the grant or the result
  }
  if (data_mapped_ < size) map_data(static_cast<std::size_t>(capacity));
}

std::span<std::byte> node_segment::data(std::size_t size) {
  if (data_mapped_ < size) map_data(std::max(size, static_cast<std::size_t>(head().data_capacity)));
  return {data_, data_mapped_};
}

std::uint64_t node_segment::arrive(std::uint64_t count) noexcept {
  return std::atomic_ref<std::uint64_t>(head().arrivals).fetch_add(count, std::memory_order_acq_rel) + count;
}

bool node_segment::claim(std::uint32_t exchange, int member) noexcept {
  std::atomic_ref<std::uint64_t> word(head().claim);
  const auto mine = std::uint64_t{exchange} << 32 | static_cast<std::uint32_t>(member);
  auto current = word.load(std::memory_order_acquire);
  while (current >> 32 != exchange) {
    if (word.compare_exchange_weak(current, mine, std::memory_order_acq_rel)) return true;
  }
  return false;
}

int node_segment::finisher(std::uint32_t exchange) const noexcept {
  const auto word = load(head().claim);
  return word >> 32 == exchange ? static_cast<int>(static_cast<std::uint32_t>(word)) : -1;
}

std::uint64_t node_segment::arrivals() const noexcept {
  return std::atomic_ref<std::uint64_t>(head().arrivals).load(std::memory_order_acquire);
}

void node_segment::set_result_size(std::uint64_t size) noexcept { head().result_size = size; }
std::uint64_t node_segment::result_size() const noexcept { return head().result_size; }
std::uint32_t& node_segment::result_word() noexcept { return head().result; }
std::uint32_t& node_segment::grant_word() noexcept { return head().grant; }

process_watch::process_watch(pid_t pid) {
  if (pid == ::getpid()) return;
  fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd_ < 0) gone_ = errno == ESRCH;
}

process_watch::~process_watch() {
  if (fd_ >= 0) ::close(fd_);
}

process_watch::process_watch(process_watch&& other) noexcept : fd_(other.fd_), gone_(other.gone_) { other.fd_ = -1; }

bool process_watch::ended() const noexcept {
  if (gone_) return true;
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace jobkit::detail
