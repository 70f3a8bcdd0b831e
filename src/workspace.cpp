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
#include <thread>
#include <tuple>

#include "jobkit/runtime.hpp"
#include "scoped_names.hpp"
#include "transport.hpp"

namespace jobkit {

namespace detail {

std::string job_step_tag(const identity& id, int pid) {
  if (id.job_id.empty()) return fmt::format("pid{}", pid);
  std::string tag = id.step_id.empty() ? id.job_id : id.job_id + "." + id.step_id;
  for (char& c : tag) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-';
    if (!safe) c = '_';
  }
  return tag;
}

std::string workspace_directory_name(std::string_view purpose, const identity& id, const std::vector<int>& world_ranks,
                                     int pid) {
  auto name = fmt::format("jobkit-{}-{}", purpose, job_step_tag(id, pid));
  if (static_cast<int>(world_ranks.size()) == id.world_size) return name;
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the ranks' bytes
  for (const int r : world_ranks) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (static_cast<std::uint32_t>(r) >> shift) & 0xffU;
      hash *= 0x100000001b3ULL;
    }
  }
  return fmt::format("{}-g{:016x}", name, hash);
}

std::string segment_name(const identity& id, int world_rank, int pid) {
  return fmt::format("/jobkit-{}-{}", job_step_tag(id, pid), world_rank);
}

/// Builds the workspaces that node_local_gather uses, in a directory of their own.
struct workspace_factory {
  static workspace make(std::string_view purpose, std::filesystem::path root, group members, call_options options,
                        const std::source_location& site) {
    return workspace(purpose, std::move(root), std::move(members), options, site);
  }
};

}  // namespace detail

namespace {

using clock = std::chrono::steady_clock;

/// The magic, then the config size and the payload size (this machine's byte order).
constexpr std::array<char, 8> state_magic{'j', 'k', 's', 't', 'a', 't', 'e', '1'};
struct state_header {
  std::array<char, 8> magic;
  std::uint64_t config_size;
  std::uint64_t payload_size;
};

std::string system_error_text(int error_number) { return std::generic_category().message(error_number); }

std::chrono::milliseconds timeout_of(call_options options) {
  return options.timeout.count() > 0 ? options.timeout : detail::default_timeout();
}

/// An open file descriptor, closed on destruction.
class descriptor {
 public:
  explicit descriptor(int fd) noexcept : fd_(fd) {}
  ~descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  descriptor(const descriptor&) = delete;
  descriptor& operator=(const descriptor&) = delete;
  int get() const noexcept { return fd_; }
  /// Closes now and returns close()'s errno, 0 on success (NFS reports write errors here).
  int close() noexcept {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

/// Writes every byte; returns 0 or the errno of the write that failed.
int write_all(int fd, const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

/// Reads exactly size bytes at offset; returns 0, the errno of the read that failed, or EIO
/// when the file ends early.
int read_all(int fd, void* data, std::size_t size, off_t offset) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return 0;
}

/// Removes what an earlier attempt left in `directory` and creates it if needed.
void prepare_directory(const std::filesystem::path& directory, int world_rank, const std::string& host) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    throw error(errc::io, fmt::format("workspace: rank {} ({}) cannot create the directory {}: {}",
                                                    world_rank, host, directory.string(), ec.message()),
                ec.value());
  }
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    // NFS keeps a removed file that some client still holds open as ".nfsXXXX" until it is
    // closed; it cannot be removed and goes away by itself.
    if (it->path().filename().string().starts_with(".nfs")) continue;
    std::filesystem::remove_all(it->path(), ec);
    if (ec) {
      throw error(errc::io,
                  fmt::format("workspace: rank {} ({}) cannot remove {}, left by an earlier attempt: {}", world_rank,
                              host, it->path().string(), ec.message()),
                  ec.value());
    }
  }
  if (ec) {
    throw error(errc::io, fmt::format("workspace: rank {} ({}) cannot list the directory {}: {}",
                                                    world_rank, host, directory.string(), ec.message()),
                ec.value());
  }
}

/// Opening a directory makes an NFS client revalidate its cached view of it, so a cached "no
/// such file" for an entry created by another client does not outlive the entry's creation.
void refresh_directory(const std::filesystem::path& directory) {
  if (DIR* d = ::opendir(directory.c_str())) ::closedir(d);
}

/// Sleeps until the next poll: 1 ms, doubling up to 50 ms, never past the deadline.
void pause_before_retry(std::chrono::milliseconds& pause, clock::time_point deadline) {
  std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - clock::now()));
  pause = std::min(pause * 2, std::chrono::milliseconds(50));
}

}  // namespace

// ---- workspace ----

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
  const auto timeout = timeout_of(options);
  const auto deadline = clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::error_code ec;
  while (!std::filesystem::is_directory(directory_, ec)) {
    if (clock::now() >= deadline) {
      const auto message =
          fmt::format("workspace: rank {} ({}) does not see the directory {} within {} ms after rank {} ({}) "
                      "created it",
                      id.rank, id.hostname, directory_.string(), timeout.count(), members_.world_ranks().front(),
                      hosts_.front());
      members_.abort(message);
      throw timeout_error(message);
    }
    refresh_directory(directory_.parent_path());
    pause_before_retry(pause, deadline);
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
  return fmt::format("rank {} ({})", members_.world_ranks()[r], hosts_[r]);
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
    throw error(errc::io,
                fmt::format("workspace: {} cannot {} ({} bytes of config, {} bytes of payload): {}",
                            describe(members_.rank()), step, config.size(), payload.size(),
                            system_error_text(error_number)),
                error_number);
  };
  descriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("create " + temporary, errno);
  const state_header header{state_magic, config.size(), payload.size()};
  int failed = write_all(fd.get(), &header, sizeof header);
  if (failed == 0) failed = write_all(fd.get(), config.data(), config.size());
  if (failed == 0) failed = write_all(fd.get(), payload.data(), payload.size());
  if (failed != 0) fail("write " + temporary, failed);
  if (::fsync(fd.get()) != 0) fail("flush " + temporary, errno);
  if (const int close_failed = fd.close(); close_failed != 0) fail("write " + temporary, close_failed);
  if (::rename(temporary.c_str(), target.c_str()) != 0) fail("rename " + temporary + " to " + target.string(), errno);
}

rank_state workspace::read(int rank, call_options options) const {
  check_rank("read", rank);
  const auto path = path_of(rank);
  const auto timeout = timeout_of(options);
  const auto deadline = clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  const auto fail = [&](const std::string& why, int error_number) {
    throw error(errc::io,
                fmt::format("workspace: the state of {} at {} cannot be read on {}: {}", describe(rank), path.string(),
                            describe(members_.rank()), why),
                error_number);
  };
  int fd_number;
  while ((fd_number = ::open(path.c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
    if (errno != ENOENT) fail(system_error_text(errno), errno);
    if (clock::now() >= deadline) {
      throw timeout_error(fmt::format("workspace: the state of {} did not appear at {} within {} ms (read on {})",
                                      describe(rank), path.string(), timeout.count(), describe(members_.rank())));
    }
    refresh_directory(directory_);
    pause_before_retry(pause, deadline);
  }
  descriptor fd(fd_number);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(system_error_text(errno), errno);
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  state_header header{};
  if (file_size < sizeof header) fail(fmt::format("the file holds {} bytes, less than a header", file_size), 0);
  if (const int failed = read_all(fd.get(), &header, sizeof header, 0); failed != 0) {
    fail(system_error_text(failed), failed);
  }
  if (header.magic != state_magic) fail("it is not a jobkit workspace state (wrong magic)", 0);
  if (header.config_size > file_size - sizeof header ||
      header.payload_size != file_size - sizeof header - header.config_size) {
    fail(fmt::format("the header announces {} + {} bytes but the file holds {} after the header",
                     header.config_size, header.payload_size, file_size - sizeof header),
         0);
  }
  rank_state state;
  state.config.resize(header.config_size);
  state.payload.resize(header.payload_size);
  int failed = read_all(fd.get(), state.config.data(), state.config.size(), sizeof header);
  if (failed == 0) {
    failed = read_all(fd.get(), state.payload.data(), state.payload.size(),
                      static_cast<off_t>(sizeof header + header.config_size));
  }
  if (failed != 0) fail(system_error_text(failed), failed);
  return state;
}

// ---- node_local_gather ----

std::string_view to_string(gather_route route) noexcept {
  switch (route) {
    case gather_route::shared_memory: return "shared_memory";
    case gather_route::workspace: return "workspace";
    case gather_route::collectives: return "collectives";
  }
  return "unknown";
}

namespace {

/// What each member announces before the data moves. The first member's workspace and limit
/// decide the route for everyone.
struct announcement {
  std::string host;
  std::string segment;
  std::uint64_t config_size;
  std::uint64_t payload_size;
  std::string workspace;
  std::uint64_t collective_max_bytes;
};
using announcement_tuple =
    std::tuple<std::string, std::string, std::uint64_t, std::uint64_t, std::string, std::uint64_t>;

std::string describe(const std::vector<int>& world_ranks, const std::vector<announcement>& members, int rank) {
  const auto r = static_cast<std::size_t>(rank);
  return fmt::format("rank {} ({})", world_ranks[r], members[r].host);
}

gather_route choose_route(const std::vector<announcement>& members) {
  const bool one_node = std::all_of(members.begin(), members.end(),
                                    [&](const announcement& a) { return a.host == members.front().host; });
  if (one_node) return gather_route::shared_memory;
  std::uint64_t total = 0;
  for (const auto& a : members) total += a.config_size + a.payload_size;
  const auto& first = members.front();
  if (first.workspace.empty() || total <= first.collective_max_bytes) return gather_route::collectives;
  return gather_route::workspace;
}

/// Creates this writer's segment, after removing one of the same name that a crashed earlier
/// attempt of the same job, step and rank may have left.
void write_segment(const std::string& name, std::string_view config, std::span<const std::byte> payload,
                   const std::string& who) {
  const auto fail = [&](const std::string& step, int error_number) {
    throw error(errc::io,
                fmt::format("node_local_gather: {} cannot {} ({} bytes to gather): {}", who, step,
                            config.size() + payload.size(), system_error_text(error_number)),
                error_number);
  };
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    fail("remove the shared memory segment " + name + " left by an earlier attempt", errno);
  }
  descriptor fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) fail("create the shared memory segment " + name, errno);
  int failed = write_all(fd.get(), config.data(), config.size());
  if (failed == 0) failed = write_all(fd.get(), payload.data(), payload.size());
  if (failed != 0) fail("fill the shared memory segment " + name, failed);
}

/// Opens a writer's segment, unlinks it at once (from then on it disappears with the last
/// descriptor, whatever happens to either process) and copies it out.
rank_state take_segment(const announcement& writer, const std::string& writer_name, const std::string& reader_name) {
  const auto fail = [&](const std::string& why, int error_number) {
    throw error(errc::io,
                fmt::format("node_local_gather: {} cannot read the shared memory segment {} of {}: {}", reader_name,
                            writer.segment, writer_name, why),
                error_number);
  };
  descriptor fd(::shm_open(writer.segment.c_str(), O_RDONLY | O_CLOEXEC, 0));
  if (fd.get() < 0) fail(system_error_text(errno), errno);
  if (::shm_unlink(writer.segment.c_str()) != 0) fail("unlink: " + system_error_text(errno), errno);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(system_error_text(errno), errno);
  const auto expected = writer.config_size + writer.payload_size;
  if (static_cast<std::uint64_t>(info.st_size) != expected) {
    fail(fmt::format("it holds {} bytes, {} were announced", info.st_size, expected), 0);
  }
  rank_state state;
  state.config.resize(writer.config_size);
  state.payload.resize(writer.payload_size);
  int failed = read_all(fd.get(), state.config.data(), state.config.size(), 0);
  if (failed == 0) {
    failed = read_all(fd.get(), state.payload.data(), state.payload.size(), static_cast<off_t>(writer.config_size));
  }
  if (failed != 0) fail(system_error_text(failed), failed);
  return state;
}

std::vector<rank_state> gather_through_shared_memory(group& members, const std::vector<announcement>& announced,
                                                     std::string_view config, std::span<const std::byte> payload,
                                                     call_options call, const std::source_location& site) {
  const int me = members.rank();
  const auto& world_ranks = members.world_ranks();
  try {
    std::vector<rank_state> states;
    if (me == 0) {
      states.push_back({std::string(config), {payload.begin(), payload.end()}});  // while the writers write
    } else {
      write_segment(announced[static_cast<std::size_t>(me)].segment, config, payload,
                    describe(world_ranks, announced, me));
    }
    members.barrier(call, site);
    if (me == 0) {
      for (int r = 1; r < members.size(); ++r) {
        states.push_back(take_segment(announced[static_cast<std::size_t>(r)], describe(world_ranks, announced, r),
                                      describe(world_ranks, announced, 0)));
      }
    }
    members.barrier(call, site);  // the writers' segments stay until the first member has opened them
    return states;
  } catch (...) {
    // The first member also removes the segments of writers that died holding one: they are all
    // on its node.
    if (me == 0) {
      for (int r = 1; r < members.size(); ++r) ::shm_unlink(announced[static_cast<std::size_t>(r)].segment.c_str());
    } else {
      ::shm_unlink(announced[static_cast<std::size_t>(me)].segment.c_str());
    }
    throw;
  }
}

std::vector<rank_state> gather_through_workspace(group& members, const std::vector<announcement>& announced,
                                                 std::string_view config, std::span<const std::byte> payload,
                                                 call_options call, const std::source_location& site) {
  const int me = members.rank();
  auto ws = detail::workspace_factory::make("gather", announced.front().workspace, members, call, site);
  std::vector<rank_state> states;
  if (me == 0) {
    states.push_back({std::string(config), {payload.begin(), payload.end()}});  // while the writers write
  } else {
    ws.write(config, payload);
  }
  members.barrier(call, site);
  if (me == 0) {
    for (int r = 1; r < members.size(); ++r) {
      auto state = ws.read(r, call);
      const auto& expected = announced[static_cast<std::size_t>(r)];
      if (state.config.size() != expected.config_size || state.payload.size() != expected.payload_size) {
        throw error(errc::internal,
                    fmt::format("node_local_gather: {} announced {} + {} bytes but its state at {} holds {} + {}",
                                describe(members.world_ranks(), announced, r), expected.config_size,
                                expected.payload_size, ws.path_of(r).string(), state.config.size(),
                                state.payload.size()));
      }
      states.push_back(std::move(state));
    }
  }
  members.barrier(call, site);  // the writers' files stay until the first member has read them
  return states;
}

std::vector<rank_state> gather_through_collectives(group& members, std::string_view config,
                                                   std::span<const std::byte> payload, call_options call,
                                                   const std::source_location& site) {
  const auto mine = std::pair{std::string(config), std::vector<std::byte>(payload.begin(), payload.end())};
  const auto all = members.gather(mine, 0, call, site);
  std::vector<rank_state> states;
  states.reserve(all.size());
  for (const auto& [c, p] : all) states.push_back({c, p});
  return states;
}

}  // namespace

gather_result node_local_gather(std::span<const std::byte> mine, group members, gather_options options,
                                std::source_location site) {
  return node_local_gather({}, mine, std::move(members), options, site);
}

gather_result node_local_gather(std::string_view config, std::span<const std::byte> payload, group members,
                                gather_options options, std::source_location site) {
  const auto& id = current_identity();
  const int world_rank = members.world_ranks()[static_cast<std::size_t>(members.rank())];
  const auto mine = announcement_tuple{id.hostname,
                                       detail::segment_name(id, world_rank, static_cast<int>(::getpid())),
                                       config.size(),
                                       payload.size(),
                                       options.workspace.string(),
                                       options.collective_max_bytes};
  std::vector<announcement> announced;
  for (auto& [host, segment, config_size, payload_size, workspace, limit] :
       members.all_gather(mine, options.call, site)) {
    announced.push_back({std::move(host), std::move(segment), config_size, payload_size, std::move(workspace), limit});
  }
  const auto route = choose_route(announced);
  try {
    switch (route) {
      case gather_route::shared_memory:
        return {gather_through_shared_memory(members, announced, config, payload, options.call, site), route};
      case gather_route::workspace:
        return {gather_through_workspace(members, announced, config, payload, options.call, site), route};
      case gather_route::collectives:
        break;
    }
    return {gather_through_collectives(members, config, payload, options.call, site), route};
  } catch (const std::exception& e) {
    // Members waiting for this one fail with the same message (a no-op when the failure came
    // from another member: the group is already broken). jobkit's messages name the rank.
    members.abort(dynamic_cast<const error*>(&e)
                      ? std::string(e.what())
                      : fmt::format("node_local_gather: {} failed: {}", describe(members.world_ranks(), announced,
                                                                                  members.rank()),
                                    e.what()));
    throw;
  }
}

}  // namespace jobkit
