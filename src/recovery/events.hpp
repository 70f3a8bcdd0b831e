#pragma once

// What a step tells the command that supervises it (`jobkit run`, src/cli/run_command.cpp): one
// JSON line per event, appended to `$JOBKIT_RECOVERY_DIR/events.jsonl` (the job's recovery
// directory, beside its checkpoints, which the command sets for every step it starts). Where the
// variable is unset (a step that no `jobkit run` started) every call here does nothing.
//
// A line: {"event":KIND,"attempt":A,"step":S,"rank":R,"host":H,"time":UNIX_SECONDS,...FIELDS}
// (S: the Slurm step, SLURM_STEP_ID, which the command ends when the step hangs), at most
// event_line_limit bytes, written with one write(2) on an O_APPEND descriptor, so that lines of
// ranks on many nodes never interleave (a local or NFS file system: NFS appends are not atomic
// across clients, the reader skips a line it cannot parse). A = JOBKIT_RECOVERY_ATTEMPT: the
// number of the step within the job's `jobkit run` (0, 1, ...), so that the command reads only
// its current step's events.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "core/environment.hpp"

namespace jobkit::detail {

inline constexpr std::size_t event_line_limit = 4096;

/// The supervisor's settings for this step, from the environment: nullopt when
/// JOBKIT_RECOVERY_DIR is unset or empty.
/// @throws jobkit::error (invalid_environment) naming JOBKIT_RECOVERY_ATTEMPT when it is malformed
struct recovery_settings {
  std::filesystem::path dir;
  int attempt = 0;
  std::string step;  ///< SLURM_STEP_ID, empty when unset
};
std::optional<recovery_settings> recovery_settings_from(const environment& env);
/// The same for this process, read once.
const std::optional<recovery_settings>& recovery_settings_of_process();

/// One event line: `fields` is a JSON object's members without braces ("\"step\":40"), or empty.
std::string event_line(std::string_view kind, const recovery_settings& settings, int rank, std::string_view host,
                       double unix_seconds, std::string_view fields);

/// Appends one event of this process to the supervisor's file, when there is one. Never throws:
/// an event that cannot be written is dropped (the step goes on; the ledger then lacks it).
/// `rank` and `host` are the caller's (identity); false when nothing was written.
bool record_event(std::string_view kind, int rank, std::string_view host, std::string_view fields) noexcept;

}  // namespace jobkit::detail
