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

#include "core/failure.hpp"
#include "core/names.hpp"
#include "core/posix_io.hpp"
#include "core/timeout.hpp"
#include "jobkit/runtime.hpp"

namespace jobkit {

namespace detail {

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
}  // namespace

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
  return detail::rank_label(world_ranks[r], members[r].host);
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
                            config.size() + payload.size(), detail::errno_text(error_number)),
                error_number);
  };
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    fail("remove the shared memory segment " + name + " left by an earlier attempt", errno);
  }
  detail::descriptor fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) fail("create the shared memory segment " + name, errno);
  int failed = detail::write_file_all(fd.get(), config.data(), config.size());
  if (failed == 0) failed = detail::write_file_all(fd.get(), payload.data(), payload.size());
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
  detail::descriptor fd(::shm_open(writer.segment.c_str(), O_RDONLY | O_CLOEXEC, 0));
  if (fd.get() < 0) fail(detail::errno_text(errno), errno);
  if (::shm_unlink(writer.segment.c_str()) != 0) fail("unlink: " + detail::errno_text(errno), errno);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail(detail::errno_text(errno), errno);
  const auto expected = writer.config_size + writer.payload_size;
  if (static_cast<std::uint64_t>(info.st_size) != expected) {
    fail(fmt::format("it holds {} bytes, {} were announced", info.st_size, expected), 0);
  }
  rank_state state;
  state.config.resize(writer.config_size);
  state.payload.resize(writer.payload_size);
  int failed = detail::pread_file_all(fd.get(), state.config.data(), state.config.size(), 0);
  if (failed == 0) {
    failed = detail::pread_file_all(fd.get(), state.payload.data(), state.payload.size(),
                                    static_cast<off_t>(writer.config_size));
  }
  if (failed != 0) fail(detail::errno_text(failed), failed);
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
        throw error(
            errc::internal,
            fmt::format("node_local_gather: {} announced {} + {} bytes but its state at {} holds {} + {}",
                        describe(members.world_ranks(), announced, r), expected.config_size, expected.payload_size,
                        ws.path_of(r).string(), state.config.size(), state.payload.size()));
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
      case gather_route::collectives: break;
    }
    return {gather_through_collectives(members, config, payload, options.call, site), route};
  } catch (const std::exception& e) {
    // Members waiting for this one fail with the same message (a no-op when the failure came
    // from another member: the group is already broken). jobkit's messages name the rank.
    members.abort(dynamic_cast<const error*>(&e)
                      ? std::string(e.what())
                      : fmt::format("node_local_gather: {} failed: {}",
                                    describe(members.world_ranks(), announced, members.rank()), e.what()));
    throw;
  }
}

}  // namespace jobkit
