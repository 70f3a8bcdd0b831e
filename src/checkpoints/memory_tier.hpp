#pragma once

// The memory tier of jobkit::checkpoints (docs/checkpoints-memory.md): what each node keeps in
// its memory directory, who is whose partner, the copy of a part over a group of two (every byte
// checked against its CRC-32C on arrival), the order of many such copies, and the sweep of what
// crashed jobs left. checkpoints.cpp composes them.

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/environment.hpp"
#include "jobkit/collectives.hpp"

namespace jobkit::detail {

/// One file of a part: (path relative to the part, size, CRC-32C).
using part_file = std::tuple<std::string, std::uint64_t, std::uint32_t>;

/// The memory directory: `option` when set, else JOBKIT_CHECKPOINT_MEMORY; nullopt when off.
/// @throws jobkit::error (invalid_environment) naming the variable when it is not an absolute path
std::optional<std::filesystem::path> memory_directory_from(const std::filesystem::path& option, const environment& env);
/// JOBKIT_CHECKPOINT_MEMORY_LIMIT in bytes (a positive decimal number); nullopt when unset or empty.
/// @throws jobkit::error (invalid_environment) naming the variable and its value when malformed
std::optional<std::uint64_t> memory_limit_from(const environment& env);

/// The directory of one job's memory tier of one root: "jobkit-ckpt-<job>-<16 hex digits of the
/// root's hash>", under the memory directory.
std::string memory_job_directory_name(std::string_view job, const std::filesystem::path& root);
/// The job id in such a name; nullopt for any other name.
std::optional<std::string> job_of_memory_directory_name(std::string_view name);

/// Every rank's partner, the rank that keeps a copy of its part: on the next node (nodes in the
/// order of their first rank, the last node's next is the first), the rank at the same position
/// among that node's ranks, modulo their count. -1 for every rank when all share one node.
/// hosts[r]: rank r's host.
std::vector<int> memory_partners(const std::vector<std::string>& hosts);

/// The round of each copy (from, to) so that copies of one round share no rank: the smallest
/// round in which neither end has a copy yet, in index order. A rank runs its copies in the order
/// (round, index), which never deadlocks: the first unfinished copy of that order has both ends
/// at it.
std::vector<int> copy_rounds(const std::vector<std::pair<int, int>>& copies);

/// The order in which `rank` runs its copies: their indices, by (round, index).
std::vector<std::size_t> copies_of(int rank, const std::vector<std::pair<int, int>>& copies);

/// Sends the files of `part` (as `files` lists them) over `pair`, a group of two (this rank either
/// of its ranks), to the other's receive_part. Bounded memory: chunks of `chunk` bytes. Returns
/// what went wrong on this side ("" when nothing): a file that cannot be read is sent as zeros,
/// which the receiver's check then refuses.
std::string send_part(group& pair, const std::filesystem::path& part, const std::vector<part_file>& files,
                      std::chrono::milliseconds timeout, std::size_t chunk = std::size_t{4} << 20);
/// Receives a part from send_part over `pair` (the sender its other rank) into the new directory
/// `into`, checking what arrives from outside: the list's length (at most 1,000,000 files),
/// every name (relative, inside the part), the total size (at most `max_bytes`) and every file's
/// size and CRC-32C against the list. Returns "" when the part arrived whole, else what is
/// wrong (the directory is then removed).
std::string receive_part(group& pair, const std::filesystem::path& into, std::uint64_t max_bytes,
                         std::chrono::milliseconds timeout, std::vector<part_file>* received = nullptr,
                         std::size_t chunk = std::size_t{4} << 20);

/// "" when every listed file of `part` has its size and CRC-32C, else what differs.
std::string check_part(const std::filesystem::path& part, const std::vector<part_file>& files);
/// Copies the listed files of `from` into the new directory `to`, checking each file's CRC-32C as
/// it is read; "" when whole, else what is wrong.
std::string copy_part(const std::filesystem::path& from, const std::filesystem::path& to,
                      const std::vector<part_file>& files);

/// A node's committed memory step: its manifest's world size and the files of each part it holds.
struct memory_step {
  int world_size = 0;
  std::map<int, std::vector<part_file>> parts;  ///< rank -> its files, relative to rank-<r>/
};
/// The manifest of a memory step holding `parts` (rank -> files) of a step of `world_size` ranks.
std::string memory_manifest(std::int64_t step, int world_size, std::string_view job,
                            const std::map<int, std::vector<part_file>>& parts);
/// Parses a memory step's manifest (untrusted: the manifest parser's checks, the world size, every
/// file inside its rank's part). @throws jobkit::error (io) naming what is wrong
memory_step parse_memory_manifest(std::string_view text);
/// The committed steps in a job's memory directory (those with a manifest that parses); a step
/// whose manifest does not is left out with a warning naming it.
std::map<std::int64_t, memory_step> memory_inventory(const std::filesystem::path& job_directory);

/// Bytes of the regular files under `directory` (0 when absent).
std::uint64_t bytes_under(const std::filesystem::path& directory);
/// Free bytes of the file system of `directory` for an unprivileged user (statvfs), or 0.
std::uint64_t free_bytes(const std::filesystem::path& directory);

/// Whether job `job` has ended, from `squeue -h -j JOB -o %T`'s exit status and outputs: true when
/// Slurm no longer knows it or names a final state, false when it names any other, nullopt when
/// the answer says neither (no squeue, no controller).
std::optional<bool> job_ended_from_squeue(int status, std::string_view out, std::string_view err);

/// The sweep of what ended jobs left in a memory directory, on one node: each directory of
/// another job's memory tier that this user owns is removed when that job has ended: as
/// `ended(job)` answers it, else (nullopt) when its record of the job's end time (`.job`, written
/// from SLURM_JOB_END_TIME) is more than 5 minutes past. Others' and unanswered ones are kept.
/// At most 16 directories are asked about per sweep. Returns the directories removed.
std::vector<std::filesystem::path> sweep_memory(const std::filesystem::path& memory_directory, std::string_view own_job,
                                                uid_t user, std::chrono::system_clock::time_point now,
                                                const std::function<std::optional<bool>(const std::string&)>& ended);
/// The record sweep_memory reads: "end <unix seconds>\n", or "end unknown\n".
std::string job_record(std::optional<std::chrono::system_clock::time_point> end);

/// Ranks as ranges, "0-3,5,7-8"; "none" for none. `ranks` ascending.
std::string rank_ranges(const std::vector<int>& ranks);

/// What a checkpoints object with the memory tier holds (checkpoints.cpp).
struct memory_tier {
  std::filesystem::path directory;      ///< the memory directory (checkpoint_options::memory)
  std::filesystem::path job_directory;  ///< this job's of this root, on every node
  std::uint64_t limit = 0;              ///< bytes per node; 0: half of the free space
  std::string limit_source;             ///< what set `limit`, for its error
  std::vector<std::string> hosts;       ///< rank -> its host
  std::vector<int> partners;            ///< rank -> its partner (memory_partners)
  bool leader = false;                  ///< the lowest rank of its host: lists, writes manifests, prunes
  std::uint64_t saves = 0;              ///< commits so far: which go to the root too
  /// The groups of two that copies run over, in both directions, by (lower rank, higher rank), made
  /// on first use: the lower rank is its rank 0, so that making it connects the higher rank to the
  /// lower only (a rank of a later node to one of an earlier node, as the world's own setup does;
  /// Slurm 22.05's PMIx server could not answer a step's rank for the endpoint of a rank on a later
  /// node of a step on some of the allocation's nodes, e.g. c1 for c3's on c1,c3 of c1-c3).
  std::map<std::pair<int, int>, group> pairs;
  /// The part latest() staged in this node's memory: its step, directory and files.
  struct staged_part {
    std::int64_t step = -1;
    std::filesystem::path directory;
    std::vector<part_file> files;
  };
  std::optional<staged_part> staged;

  group& pair(int from, int to, std::chrono::milliseconds timeout) {
    const auto key = std::minmax(from, to);
    auto it = pairs.find(key);
    if (it == pairs.end()) {
      it = pairs.emplace(key, make_group({key.first, key.second}, {.timeout = timeout})).first;
    }
    return it->second;
  }
};

}  // namespace jobkit::detail
