#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>

namespace jobkit::detail {

using steady_clock = std::chrono::steady_clock;

/// Milliseconds left until deadline, for poll(2): 0 when past, at most INT_MAX.
int remaining_ms(steady_clock::time_point deadline);

/// strerror's text for an errno value, thread-safe.
std::string errno_text(int error_number);

/// A signal's abbreviation without "SIG" ("TERM" for SIGTERM), nullptr for a number with none:
/// sigabbrev_np where glibc has it (2.32 and later); built against an older glibc (the portable
/// wheel, scripts/portable-wheel.sh: glibc 2.28), a table of Linux's standard signals.
const char* signal_abbreviation(int signal) noexcept;

/// An open file descriptor, closed on destruction.
class descriptor {
 public:
  explicit descriptor(int fd) noexcept : fd_(fd) {}
  ~descriptor();
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  int get() const noexcept { return fd_; }
  /// Closes now and returns close()'s errno, 0 on success (NFS reports write errors here).
  int close() noexcept;

 private:
  int fd_;
};

// ---- Files (blocking descriptors). Each returns 0 or the errno of the call that failed. ----

/// Writes every byte to a blocking descriptor (a file, a pipe, a terminal), again after EINTR and
/// after a partial write; any other error ends it (EAGAIN of a non-blocking one too), and a write
/// of nothing is EIO. The one write-all loop: async-signal-safe (write(2) and errno only, nothing
/// allocated, nothing thrown), so run_forked's child and the logger call it too.
int write_file_all(int fd, const void* data, std::size_t size) noexcept;
/// Reads exactly size bytes at offset; EIO when the file ends early.
int pread_file_all(int fd, void* data, std::size_t size, off_t offset);
/// The one read-to-the-end loop: reads into `buffer` again and again, again after EINTR, and hands
/// each piece read to `each`, until the end of the stream (returns 0) or an error (returns its
/// errno; EAGAIN when a non-blocking descriptor has nothing more for now).
int read_each(int fd, std::span<std::byte> buffer, const std::function<void(std::span<const std::byte>)>& each);

// ---- Sockets (non-blocking descriptors), each wait bounded by a deadline. ----

/// The connection broke or was closed by the peer; why says how.
struct socket_closed {
  std::string why;
  /// ETIMEDOUT when the peer's host stopped answering (see link_silence), else 0 or the errno.
  int error_number = 0;
};
/// The deadline passed first.
struct socket_timeout {};

/// How long a TCP link has gone without any answer from its peer's host, when that is at least
/// `limit` while something is owed: data sent and not acknowledged, or a keepalive probe (a
/// link of the data path is probed once a second while idle, see set_link_options). A peer
/// whose host answers is never silent, however long its process does not read: a closed
/// receive window is answered too. nullopt when the link is not silent or not TCP.
std::optional<std::chrono::milliseconds> link_silence(int fd, std::chrono::milliseconds limit);
/// Options of every TCP link of the data path: no Nagle delay, non-blocking, and keepalive probes
/// once a second after a second of quiet, so that link_silence sees a silent host, and the
/// kernel closes an idle link to it (ETIMEDOUT) about a second after `silence_limit`.
void set_link_options(int fd, std::chrono::milliseconds silence_limit);

/// Waits until fd is ready for events. A TCP link silent for lost_node_timeout() ends the wait
/// with socket_closed (ETIMEDOUT). @throws socket_closed, socket_timeout
void wait_ready(int fd, short events, steady_clock::time_point deadline);
/// Sends every byte of the parts (MSG_NOSIGNAL); parts are consumed. @throws socket_closed, socket_timeout
void send_all(int fd, iovec* parts, int count, steady_clock::time_point deadline);
/// Receives exactly size bytes. @throws socket_closed, socket_timeout
void receive_all(int fd, void* data, std::size_t size, steady_clock::time_point deadline);
/// What recv() returned without waiting: bytes read, 0 when nothing is there yet.
/// @throws socket_closed on end of stream or error
std::size_t receive_some(int fd, void* data, std::size_t size);

}  // namespace jobkit::detail
