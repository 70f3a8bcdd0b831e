#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace jobkit::detail {

using steady_clock = std::chrono::steady_clock;

/// Milliseconds left until deadline, for poll(2): 0 when past, at most INT_MAX.
int remaining_ms(steady_clock::time_point deadline);

/// strerror's text for an errno value, thread-safe.
std::string errno_text(int error_number);

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

/// Writes every byte.
int write_file_all(int fd, const void* data, std::size_t size);
/// Reads exactly size bytes at offset; EIO when the file ends early.
int pread_file_all(int fd, void* data, std::size_t size, off_t offset);

// ---- Sockets (non-blocking descriptors), each wait bounded by a deadline. ----

/// The connection broke or was closed by the peer; why says how.
struct socket_closed {
  std::string why;
};
/// The deadline passed first.
struct socket_timeout {};

/// Waits until fd is ready for events. @throws socket_closed, socket_timeout
void wait_ready(int fd, short events, steady_clock::time_point deadline);
/// Sends every byte of the parts (MSG_NOSIGNAL); parts are consumed. @throws socket_closed, socket_timeout
void send_all(int fd, iovec* parts, int count, steady_clock::time_point deadline);
/// Receives exactly size bytes. @throws socket_closed, socket_timeout
void receive_all(int fd, void* data, std::size_t size, steady_clock::time_point deadline);
/// What recv() returned without waiting: bytes read, 0 when nothing is there yet.
/// @throws socket_closed on end of stream or error
std::size_t receive_some(int fd, void* data, std::size_t size);

}  // namespace jobkit::detail
