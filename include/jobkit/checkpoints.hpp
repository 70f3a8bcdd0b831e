#pragma once

// A checkpoint directory that is never half-written: every rank writes its part of a step, then
// one collective commit makes the step visible at once with a manifest of every part, or leaves
// the previous step the latest.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/export.hpp"
#include "jobkit/preemption.hpp"

namespace jobkit {

struct checkpoint_options {
  /// Complete steps kept after a commit, the newest ones; older steps are removed. 0: keep all.
  int keep = 2;
  /// The deadline of each collective inside (zero: JOBKIT_TIMEOUT).
  std::chrono::milliseconds timeout{0};
  /// The memory tier (docs/checkpoints-memory.md): a node-local directory, e.g. /dev/shm/jobkit,
  /// where each save also keeps every rank's part, with a copy on a partner node. Empty:
  /// JOBKIT_CHECKPOINT_MEMORY, and off when that is unset or empty.
  std::filesystem::path memory{};
  /// With the memory tier, every K-th save (this object's first included) also goes to the root;
  /// the others to the memory tier only. 1: every save. Without it: ignored.
  int shared_every = 1;
  /// Memory steps kept on each node after a commit, the newest: 1 or 2.
  int memory_keep = 1;
  /// The bytes this root's memory tier may hold on each node; 0: JOBKIT_CHECKPOINT_MEMORY_LIMIT,
  /// else half of what the memory directory's file system has free (with what it holds already).
  std::uint64_t memory_limit = 0;
};

namespace detail {
struct memory_tier;
}

/// Checkpoints of the whole job (every rank of the world) under one root directory.
///
/// Layout: `<root>/step-<N>/` (N zero-padded to 12 digits) is a complete step: `manifest.json`
/// names every part file with its rank, host, size and CRC-32C, and `rank-<r>/` holds rank r's
/// part. A save in progress lives in `<root>/step-<N>.partial.<job>.r<restart>.s<step>/`: named by
/// the job id, restart count and Slurm step of the attempt that writes it, so two jobs, two
/// attempts of one requeued job, or two steps of one job (`jobkit run`'s restarts), never write
/// into one directory.
///
/// The root may be on a shared file system (one committer: rank 0) or on node-local storage
/// (one committer per node: its local rank 0; a step counts only once it is complete on every
/// node). jobkit::fs_local_rank tells which, when the object is made.
///
///     jobkit::checkpoints saved("/shared/ckpt/run1");
///     if (auto step = saved.latest()) load(saved.part(*step));
///     ...
///     save(saved.begin(step));  // this rank's files
///     saved.commit();           // collective: the step is whole on every node, or absent
///
/// With the memory tier (checkpoint_options::memory, JOBKIT_CHECKPOINT_MEMORY), a commit also
/// keeps every part in its node's memory directory and a copy on a partner node, and latest()
/// chooses where each rank's part comes from (its node's memory, the partner's copy fetched over
/// the data path, else the root for every rank) and stages it, so that part() names a readable
/// local directory: the same program works with it on or off (docs/checkpoints-memory.md).
class JOBKIT_API checkpoints {
 public:
  /// Collective over all ranks: creates the root, finds who commits on which file system, and
  /// removes what earlier attempts of this job (other restart counts) left unfinished there.
  /// @throws jobkit::error naming the root when it cannot be created or written, on every rank
  explicit checkpoints(std::filesystem::path root, checkpoint_options options = {},
                       std::source_location site = std::source_location::current());

  /// The newest step complete on every file system, the same on every rank; nullopt when there
  /// is none. Collective. With the memory tier: the newest step whole in memory across the job
  /// when it is at least as new as the root's, each rank's part checked (size, CRC-32C) in its
  /// node's memory or fetched from its partner's copy into it; when some part has no complete,
  /// checksummed copy, every rank falls back to the root's newest step (a warning names the
  /// rank, node and step of each damaged copy). Rank 0 logs where the parts came from and records
  /// it (event checkpoint_loaded).
  std::optional<std::int64_t> latest(std::source_location site = std::source_location::current());

  /// Collective: every rank reads back its files of complete step `step` and compares their sizes
  /// and CRC-32C with the manifest (as written by commit; read as untrusted input).
  /// @throws jobkit::error (io) on every rank, naming each damaged or missing file and its rank
  void verify(std::int64_t step, std::source_location site = std::source_location::current());

  /// This rank's part of complete step `step`, to read from: the part latest() staged in this
  /// node's memory when it chose `step` from the memory tier, else the root's.
  std::filesystem::path part(std::int64_t step) const;

  /// Starts saving `step` (>= 0): returns the empty directory where this rank writes its part
  /// (with the memory tier, in the memory directory for a save that skips the root).
  /// Not collective. A begin() without commit() is dropped by the next begin().
  /// @throws jobkit::error (invalid_argument) on a negative step; (io) when it cannot be made
  std::filesystem::path begin(std::int64_t step);

  /// Collective: every rank flushes its part to storage (fsync) and reports its files; if every
  /// rank succeeded, each committer writes the manifest and renames the step into place (one
  /// rename, then an fsync of the root), and steps beyond `keep` are removed. A step of the same
  /// number committed before is replaced.
  /// @throws jobkit::error on every rank, naming the rank and file, when a part cannot be
  ///         flushed or the step cannot be committed (the previous step stays the latest); when
  ///         a rank dies or the deadline expires (likewise). With the memory tier: also when a
  ///         node's parts and copies would not fit in its memory limit (checked before anything
  ///         is written; the step is committed nowhere, a memory-only save's part is dropped)
  void commit(std::source_location site = std::source_location::current());
  /// Commits `step`, whose parts were written after a begin(step) of this attempt of the job,
  /// possibly by another process (as `jobkit checkpoint begin` and `commit` do). As commit().
  void commit(std::int64_t step, std::source_location site = std::source_location::current());

  /// Ends a stop the ranks agreed on (stop_guard), once its checkpoint is committed, without an
  /// exit status: collective. Rank 0 asks Slurm to requeue this job (jobkit::requeue()), logs
  /// the outcome once ("job 17 requeued", or a warning with Slurm's reason where the job cannot
  /// be: not a batch job, --no-requeue, JobRequeue=0) and records it for the batch script in
  /// `<root>/.stopped-<job>.r<restart>`, one line: "SIGTERM on rank 0; requeued" or
  /// "...; not requeued: REASON". Every rank returns whether the job was requeued; the program
  /// then ends with exit status 0 either way (Slurm ends a requeued job's tasks soon after).
  /// @throws jobkit::error (invalid_argument) on every rank when a rank's begin() was not committed; as a collective
  ///         when a rank fails or the deadline passes
  bool requeue(const stop_cause& cause, std::source_location site = std::source_location::current());

  /// The step begin() was called for and not yet committed.
  std::optional<std::int64_t> pending_step() const noexcept { return pending_; }
  const std::filesystem::path& root() const noexcept { return root_; }
  /// True on the ranks that write manifests and rename steps (fs_local_rank 0).
  bool is_committer() const noexcept { return committer_; }
  /// This job's memory directory of this root on this node; empty without the memory tier.
  std::filesystem::path memory_directory() const;

 private:
  std::filesystem::path staging(std::int64_t step) const;
  std::vector<std::filesystem::path> retire_unwanted(bool own_attempt, bool old_steps) const;
  void commit_step(std::optional<std::int64_t> step, const std::source_location& site);

  std::filesystem::path root_;
  checkpoint_options options_;
  bool committer_ = false;
  std::vector<int> committer_of_;  ///< world rank -> world rank of its file system's committer
  std::string attempt_;            ///< "<job>.r<restart>"
  std::string stage_tag_;          ///< "<job>.r<restart>.s<step>": this step's saves in progress
  std::optional<std::int64_t> pending_;
  std::shared_ptr<detail::memory_tier> memory_;  ///< null without the memory tier
};

/// "step-000000000042"; the name of a complete step under a checkpoint root.
JOBKIT_API std::string checkpoint_step_name(std::int64_t step);
/// The step of a complete step's directory name; nullopt for any other name.
JOBKIT_API std::optional<std::int64_t> parse_checkpoint_step_name(std::string_view name) noexcept;

}  // namespace jobkit
