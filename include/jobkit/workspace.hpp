#pragma once

// A shared directory where each rank leaves its state for the others to read, and a gather of
// byte buffers (or config + payload pairs) to the first of a list of ranks: through POSIX shared
// memory when they share a node, otherwise through a workspace or jobkit's collectives.
// ModelOpt's NFSWorkspace, get_tensors_parallel and get_configs_parallel, without their races:
// names scoped to the job and step, atomic writes, deadlines, cleanup on every exit path, and
// failures that reach every rank instead of a hang.

#include <cstddef>
#include <filesystem>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/export.hpp"
#include "jobkit/identity.hpp"

namespace jobkit {

namespace detail {
struct workspace_factory;
}

/// What a rank leaves in a workspace or contributes to a gather: a config (often JSON) and a
/// binary payload. Either may be empty.
struct rank_state {
  std::string config;
  std::vector<std::byte> payload;

  friend bool operator==(const rank_state&, const rank_state&) = default;
};

/// A directory on a file system every rank of a group sees (NFS, Lustre, ...), where each rank
/// writes its state and any rank reads the state of any other.
///
/// The directory is `<root>/jobkit-ws-<job>.<step>`, with `-g<hash of the members>` appended
/// for a group other than the whole world, so two jobs, two steps or two disjoint groups never
/// see each other's files. Rank r's state is the file `rank-<world rank of r>.state` in it.
///
/// - Creating a workspace is collective over the group: the group's rank 0 removes what a
///   crashed earlier attempt of the same job, step and group left there and creates the
///   directory, and every member waits until it sees the directory before any of them returns.
///   Only one workspace per root and group may exist at a time.
/// - write() is atomic: the state goes to a temporary file that is flushed to storage, then
///   renamed over the state file. A reader sees the previous state or the new one, never a part.
/// - read() waits, up to its deadline, for a state that was not written yet.
/// - No other synchronisation: like the seed, a reader sees whatever state is there when it
///   reads. Destroy the workspace only when no member reads anymore (e.g. after a barrier): the
///   destructor removes this rank's files, and the last member's destructor the directory.
///
/// write() and read() may run in different threads at once; neither copyable nor movable.
class JOBKIT_API workspace {
 public:
  /// @param root a directory all members see; created (with its parents) when missing
  /// @param members the group that shares the workspace (a handle: copies share connections)
  /// @param options the deadline of the collectives and of waiting to see the directory
  /// @param site the call site, named in errors of the collectives inside
  /// @throws jobkit::error on every member when the directory cannot be prepared on rank 0 or
  ///         seen on some member, or a member fails; jobkit::timeout_error past the deadline
  explicit workspace(std::filesystem::path root, group members = world(), call_options options = {},
                     std::source_location site = std::source_location::current());
  ~workspace();
  workspace(const workspace&) = delete;
  workspace& operator=(const workspace&) = delete;

  /// Replaces this rank's state with `payload` and an empty config.
  /// @throws jobkit::error naming the rank, the file and the system error
  void write(std::span<const std::byte> payload);
  /// Replaces this rank's state.
  void write(std::string_view config, std::span<const std::byte> payload);

  /// The current state of group rank `rank` (this rank included), waiting until it exists.
  /// @throws jobkit::timeout_error naming the rank, its host, the file and the deadline when the
  ///         state does not appear in time; jobkit::error when it cannot be read or is damaged;
  ///         jobkit::error (invalid_argument) when `rank` is not a group rank
  rank_state read(int rank, call_options options = {}) const;

  /// The file that holds group rank `rank`'s state.
  std::filesystem::path path_of(int rank) const;
  const std::filesystem::path& directory() const noexcept { return directory_; }

 private:
  friend struct detail::workspace_factory;
  /// `purpose` names the directory: "jobkit-<purpose>-<job>.<step>..."
  workspace(std::string_view purpose, std::filesystem::path root, group members, call_options options,
            const std::source_location& site);

  void check_rank(const char* operation, int rank) const;
  std::string describe(int rank) const;

  group members_;
  std::filesystem::path directory_;
  std::vector<std::string> hosts_;  ///< group rank -> hostname
};

/// How node_local_gather moved the data.
enum class gather_route {
  shared_memory,  ///< all members on one node: POSIX shared memory
  workspace,      ///< members on several nodes, payloads above collective_max_bytes: files
  collectives,    ///< members on several nodes: jobkit's own gather
};

/// "shared_memory", "workspace" or "collectives".
JOBKIT_API std::string_view to_string(gather_route route) noexcept;

/// Only the first member's workspace and collective_max_bytes count: every member takes the
/// route they decide.
struct gather_options {
  /// The deadline of each wait inside the gather.
  call_options call{};
  /// A directory on a shared file system for members on several nodes; empty: collectives only.
  std::filesystem::path workspace{};
  /// Members on several nodes whose states hold at most this many bytes in all go through
  /// collectives even when `workspace` is set.
  std::size_t collective_max_bytes = std::size_t{4} << 20;
};

struct gather_result {
  /// On the group's rank 0: every member's state, in group-rank order. Empty on the others.
  std::vector<rank_state> states;
  /// The route taken, the same on every member.
  gather_route route;
};

/// Gathers every member's state to the group's rank 0 (the first of the ranks given to
/// make_group). Collective over `members`; sizes may differ between members.
///
/// All members on one node (same hostname): each other member writes its state into a POSIX
/// shared memory segment named `/jobkit-<job>.<step>-<world rank>`, the first member opens and
/// unlinks it at once and copies it out. A writer removes a segment of that name left by a
/// crashed earlier attempt before creating its own; on any failure the writers and the first
/// member unlink every segment of the gather, so a rank that dies holding one leaves nothing.
/// Members on several nodes: through a workspace under `options.workspace` (see workspace; its
/// directory is named `jobkit-gather-...`), or through jobkit's gather when no workspace is given
/// or the states are small.
///
/// A failure on any member (an error, a death, a deadline) makes every member throw a
/// jobkit::error; the failing rank throws its own error. Errors of the collectives inside name
/// `site`.
JOBKIT_API gather_result node_local_gather(std::span<const std::byte> mine, group members, gather_options options = {},
                                           std::source_location site = std::source_location::current());
JOBKIT_API gather_result node_local_gather(std::string_view config, std::span<const std::byte> payload, group members,
                                           gather_options options = {},
                                           std::source_location site = std::source_location::current());

}  // namespace jobkit
