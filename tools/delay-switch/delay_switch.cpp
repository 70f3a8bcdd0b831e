// jk-delay-switch: a userspace Ethernet switch over tap devices that holds every frame for a
// fixed delay before it delivers it. The dev cluster (slurm/dev-cluster.sh) uses it when
// JOBKIT_CLUSTER_DELAY_MS is set, because this machine's kernel has no sch_netem.
//
// Usage: jk-delay-switch --delay-us US [--queue-frames N] [--pid-file F] [--tag T] TAP...
// Creates one tap device per name TAP (IFF_TAP | IFF_NO_PI) and holds their fds; the caller moves
// them into network namespaces. Writes its pid to F once every tap exists. Learns source MAC ->
// port; a frame to a known unicast MAC goes to that port, any other to every other port. The delay
// is the same for every frame, so one FIFO in arrival order is also in deadline order: frames keep
// their order on every link. At most N frames wait (default 8192); beyond that a frame is dropped
// and counted. --tag is ignored (it lets a caller find the process by its command line). Prints
// its counters and the CPU time it used to stderr on SIGTERM/SIGINT and exits 0.
// Standalone on purpose (C++20 and Linux headers only): dev-cluster.sh compiles this one file.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr std::size_t max_frame = 1600;  // MTU 1500 + Ethernet header; taps use no offloads

struct slot {
  std::int64_t due_ns;
  int in_port;
  int out_port;  // -1: every port but in_port
  std::uint16_t len;
  unsigned char data[max_frame];
};

struct counters {
  std::uint64_t in = 0, out = 0, dropped = 0, flooded = 0;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "jk-delay-switch: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int open_tap(const std::string& name) {
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("open /dev/net/tun");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (name.size() >= IFNAMSIZ) {
    errno = ENAMETOOLONG;
    fail(name.c_str());
  }
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) fail(("TUNSETIFF " + name).c_str());
  return fd;
}

std::uint64_t mac_key(const unsigned char* m) {
  std::uint64_t k = 0;
  for (int i = 0; i < 6; ++i) k = (k << 8) | m[i];
  return k;
}

class switch_ {
 public:
  switch_(std::vector<int> taps, std::int64_t delay_ns, std::size_t capacity)
      : taps_(std::move(taps)), delay_ns_(delay_ns), ring_(capacity) {}

  // Reads every frame waiting on port p; delivers or queues each.
  void receive(int p) {
    for (;;) {
      // When the queue is full the frame is read into the spare slot, then dropped.
      slot& s = size_ == ring_.size() ? spare_ : ring_[(head_ + size_) % ring_.size()];
      ssize_t n = read(taps_[p], s.data, sizeof s.data);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        fail("read tap");
      }
      if (n < 14) continue;
      ++c_.in;
      if (&s == &spare_) {
        ++c_.dropped;
        continue;
      }
      if (!(s.data[6] & 1)) macs_[mac_key(s.data + 6)] = p;
      auto it = (s.data[0] & 1) ? macs_.end() : macs_.find(mac_key(s.data));
      s.out_port = it == macs_.end() ? -1 : it->second;
      if (s.out_port == p) continue;  // to a MAC on its own port: nothing to do
      s.in_port = p;
      s.len = static_cast<std::uint16_t>(n);
      s.due_ns = now_ns() + delay_ns_;
      if (delay_ns_ == 0) {
        deliver(s);
      } else {
        ++size_;
      }
    }
  }

  // Delivers every frame that is due; returns the deadline of the next, or 0 when none waits.
  std::int64_t deliver_due() {
    std::int64_t t = now_ns();
    while (size_ > 0) {
      slot& s = ring_[head_];
      if (s.due_ns > t) return s.due_ns;
      deliver(s);
      head_ = (head_ + 1) % ring_.size();
      --size_;
    }
    return 0;
  }

  const counters& stats() const { return c_; }

 private:
  void deliver(const slot& s) {
    if (s.out_port >= 0) {
      send(s.out_port, s);
      return;
    }
    ++c_.flooded;
    for (int q = 0; q < static_cast<int>(taps_.size()); ++q) {
      if (q != s.in_port) send(q, s);
    }
  }

  void send(int q, const slot& s) {
    // A tap whose interface is down (or not yet up in its namespace) refuses with EIO: the
    // frame is lost, as on a cable with no link.
    if (write(taps_[q], s.data, s.len) == s.len) {
      ++c_.out;
    } else {
      ++c_.dropped;
    }
  }

  std::vector<int> taps_;
  std::int64_t delay_ns_;
  std::vector<slot> ring_;
  slot spare_{};
  std::size_t head_ = 0, size_ = 0;
  std::unordered_map<std::uint64_t, int> macs_;
  counters c_;
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: jk-delay-switch --delay-us US [--queue-frames N] [--pid-file F] [--tag T] TAP...\n");
  std::exit(2);
}

long long number(const char* s) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno || end == s || *end || v < 0) usage();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long long delay_us = -1, capacity = 8192;
  std::string pid_file;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--delay-us") {
      delay_us = number(argv[++i]);
    } else if (i + 1 < argc && a == "--queue-frames") {
      capacity = number(argv[++i]);
    } else if (i + 1 < argc && a == "--pid-file") {
      pid_file = argv[++i];
    } else if (i + 1 < argc && a == "--tag") {
      ++i;
    } else if (a.starts_with("-")) {
      usage();
    } else {
      names.push_back(a);
    }
  }
  if (delay_us < 0 || capacity < 1 || names.empty()) usage();

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigprocmask(SIG_BLOCK, &sigs, nullptr);
  int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || tfd < 0 || ep < 0) fail("signalfd/timerfd/epoll");

  std::vector<int> taps;
  for (const auto& n : names) taps.push_back(open_tap(n));
  const int n_taps = static_cast<int>(taps.size());
  auto watch = [&](int fd, int id) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<std::uint32_t>(id);
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) fail("epoll_ctl");
  };
  for (int p = 0; p < n_taps; ++p) watch(taps[p], p);
  watch(tfd, n_taps);
  watch(sfd, n_taps + 1);

  switch_ sw(taps, delay_us * 1000, static_cast<std::size_t>(capacity));
  if (!pid_file.empty()) {
    std::string tmp = pid_file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f || std::fprintf(f, "%d\n", getpid()) < 0 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), pid_file.c_str()) != 0)
      fail(pid_file.c_str());
  }

  std::int64_t armed = 0;  // the deadline the timer is set to, 0: none
  std::vector<epoll_event> events(64);
  for (;;) {
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      int id = static_cast<int>(events[i].data.u32);
      if (id < n_taps) {
        sw.receive(id);
      } else if (id == n_taps) {
        std::uint64_t ticks;
        while (read(tfd, &ticks, sizeof ticks) > 0) {
        }
        armed = 0;
      } else {
        const counters& c = sw.stats();
        rusage ru{};
        getrusage(RUSAGE_SELF, &ru);
        const double cpu_ms = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
        std::fprintf(stderr,
                     "jk-delay-switch: %d ports, delay %lld us: frames in %llu, out %llu, "
                     "flooded %llu, dropped %llu; cpu %.0f ms\n",
                     n_taps, delay_us, static_cast<unsigned long long>(c.in), static_cast<unsigned long long>(c.out),
                     static_cast<unsigned long long>(c.flooded), static_cast<unsigned long long>(c.dropped), cpu_ms);
        return 0;
      }
    }
    std::int64_t next = sw.deliver_due();
    if (next != 0 && next != armed) {
      // Absolute deadline: the FIFO's head is always the earliest.
      itimerspec its{};
      its.it_value.tv_sec = next / 1'000'000'000;
      its.it_value.tv_nsec = next % 1'000'000'000;
      if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr) < 0) fail("timerfd_settime");
      armed = next;
    }
  }
}
