#include "jobkit/workspace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <system_error>
#include <tuple>

#include "core/backoff.hpp"
#include "core/embedder.hpp"
#include "core/failure.hpp"
#include "core/names.hpp"
#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/runtime.hpp"

namespace jobkit {

namespace {

using clock = std::chrono::steady_clock;

/// The magic, then the config size and the payload size (this machine's byte order).
constexpr std::array<char, 8> state_magic{'j', 'k', 's', 't', 'a', 't', 'e', '1'};
struct state_header {
  std::array<char, 8> magic;
  std::uint64_t config_size;
  std::uint64_t payload_size;
};

/// Removes what an earlier attempt left in `directory` and creates it if needed.
void prepare_directory(const std::filesystem::path& directory, int world_rank, const std::string& host) {
  const auto who = detail::rank_label(world_rank, host);
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    throw error(errc::io,
                fmt::format("workspace: {} cannot create the directory {}: {}", who, directory.string(), ec.message()),
                ec.value());
  }
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    // NFS keeps a removed file that some client still holds open as ".nfsXXXX" until it is
    // closed; it cannot be removed and goes away by itself.
    if (it->path().filename().string().starts_with(".nfs")) continue;
    std::filesystem::remove_all(it->path(), ec);
    if (ec) {
      throw error(errc::io,
                  fmt::format("workspace: {} cannot remove {}, left by an earlier attempt: {}", who,
                              it->path().string(), ec.message()),
                  ec.value());
    }
  }
  if (ec) {
    throw error(errc::io,
                fmt::format("workspace: {} cannot list the directory {}: {}", who, directory.string(), ec.message()),
                ec.value());
  }
}

/// Opening a directory makes an NFS client revalidate its cached view of it, so a cached "no
/// such file" for an entry created by another client does not outlive the entry's creation.
void refresh_directory(const std::filesystem::path& directory) {
  if (DIR* d = ::opendir(directory.c_str())) ::closedir(d);
}

}  // namespace

workspace::workspace(std::filesystem::path root, group members, call_options options, std::source_location site)
    : workspace("ws", std::move(root), std::move(members), options, site) {}

workspace::workspace(std::string_view purpose, std::filesystem::path root, group members, call_options options,
                     const std::source_location& site)
    : members_(std::move(members)) {
  const auto& id = current_identity();
  // Everyone has arrived, so nobody still uses an earlier workspace in the same directory.
  hosts_ = members_.all_gather(id.hostname, options, site);
  // Rank 0's name for everyone: its pid stands in for the job when there is no launcher.
  directory_ = members_.compute_and_broadcast(
      [&] {
        const auto directory =
            root / detail::workspace_directory_name(purpose, id, members_.world_ranks(), static_cast<int>(::getpid()));
        prepare_directory(directory, id.rank, id.hostname);
        return directory.string();
      },
      0, options, site);
  const auto timeout = detail::timeout_of(options.timeout, "workspace");
  const auto deadline = clock::now() + timeout;
  detail::backoff pauses(std::chrono::milliseconds(1), std::chrono::milliseconds(50));
  std::error_code ec;
  while (!std::filesystem::is_directory(directory_, ec)) {
    if (clock::now() >= deadline) {
      const auto message =
          fmt::format("workspace: {} does not see the directory {} within {} ms after {} created it",
                      detail::rank_label(id.rank, id.hostname), directory_.string(), timeout.count(), describe(0));
      members_.abort(message);
      throw timeout_error(message);
    }
    refresh_directory(directory_.parent_path());
    detail::interruptible_pause_until(pauses.next(), deadline);
  }
  members_.barrier(options, site);
}

workspace::~workspace() {
  const auto mine = path_of(members_.rank());
  ::unlink(mine.c_str());
  ::unlink((mine.string() + ".tmp").c_str());
  ::rmdir(directory_.c_str());  // fails while other members' files are there: the last one removes it
}

std::string workspace::describe(int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  return detail::rank_label(members_.world_ranks()[r], hosts_[r]);
}

void workspace::check_rank(const char* operation, int rank) const {
  if (rank < 0 || rank >= members_.size()) {
    throw error(errc::invalid_argument, fmt::format("workspace::{}: rank={} is not a rank of this group (0 to {})",
                                                    operation, rank, members_.size() - 1));
  }
}

std::filesystem::path workspace::path_of(int rank) const {
  check_rank("path_of", rank);
  return directory_ / fmt::format("rank-{}.state", members_.world_ranks()[static_cast<std::size_t>(rank)]);
}

void workspace::write(std::span<const std::byte> payload) { write({}, payload); }

void workspace::write(std::string_view config, std::span<const std::byte> payload) {
  const auto target = path_of(members_.rank());
  const auto temporary = target.string() + ".tmp";
  const auto fail = [&](const std::string& step, int error_number) {
    ::unlink(temporary.c_str());
    throw error(
        errc::io,
        fmt::format("workspace: {} cannot {} ({} bytes of config, {} bytes of payload): {}", describe(members_.rank()),
                    step, config.size(), payload.size(), detail::errno_text(error_number)),
        error_number);
  };
  detail::descriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("create " + temporary, errno);
  const state_header header{state_magic, config.size(), payload.size()};
  int failed = detail::write_file_all(fd.get(), &header, sizeof header);
  if (failed == 0) failed = detail::write_file_all(fd.get(), config.data(), config.size());
  if (failed == 0) failed = detail::write_file_all(fd.get(), payload.data(), payload.size());
  if (failed != 0) fail("write " + temporary, failed);
  if (::fsync(fd.get()) != 0) fail("flush " + temporary, errno);
  if (const int close_failed = fd.close(); close_failed != 0) fail("write " + temporary, close_failed);
  if (::rename(temporary.c_str(), target.c_str()) != 0) fail("rename " + temporary + " to " + target.string(), errno);
}

rank_state workspace::read(int rank, call_options options) const {
  check_rank("read", rank);
  const auto path = path_of(rank);
  const auto timeout = detail::timeout_of(options.timeout, "workspace");
  const auto deadline = clock::now() + timeout;
  detail::backoff pauses(std::chrono::milliseconds(1), std::chrono::milliseconds(50));
  const auto fail = [&](const std::string& why, int error_number) {
    throw error(errc::io,
                fmt::format("workspace: the state of {} at {} cannot be read on {}: {}", describe(rank), path.string(),
                            describe(members_.rank()), why),
                error_number);
  };
  int fd_number;
  while ((fd_number = ::open(path.c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
    if (errno != ENOENT) fail(detail::errno_text(errno), errno);
    if (clock::now() >= deadline) {
      throw timeout_error(fmt::format("workspace: the state of {} did not appear at {} within {} ms (read on {})",
                                      describe(rank), path.string(), timeout.count(), describe(members_.rank())));
    }
    refresh_directory(directory_);
    detail::interruptible_pause_until(pauses.next(), deadline);
  }
  detail::descriptor fd(fd_number);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(detail::errno_text(errno), errno);
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  state_header header{};
  if (file_size < sizeof header) fail(fmt::format("the file holds {} bytes, less than a header", file_size), 0);
  if (const int failed = detail::pread_file_all(fd.get(), &header, sizeof header, 0); failed != 0) {
    fail(detail::errno_text(failed), failed);
  }
  if (header.magic != state_magic) fail("it is not a jobkit workspace state (wrong magic)", 0);
  if (header.config_size > file_size - sizeof header ||
      header.payload_size != file_size - sizeof header - header.config_size) {
    fail(fmt::format("the header announces {} + {} bytes but the file holds {} after the header", header.config_size,
                     header.payload_size, file_size - sizeof header),
         0);
  }
  rank_state state;
  state.config.resize(header.config_size);
  state.payload.resize(header.payload_size);
  int failed = detail::pread_file_all(fd.get(), state.config.data(), state.config.size(), sizeof header);
  if (failed == 0) {
    failed = detail::pread_file_all(fd.get(), state.payload.data(), state.payload.size(),
                                    static_cast<off_t>(sizeof header + header.config_size));
  }
  if (failed != 0) fail(detail::errno_text(failed), failed);
  return state;
}

}  // namespace jobkit
