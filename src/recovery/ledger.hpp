#pragma once

// `jobkit run`'s ledger of lost time, without I/O: for every restart its cause, the blamed node
// and its phases; for the job the time lost per cause and the effective training time ratio, in
// the words of Google's ml-goodput-measurement (badput by cause). Written beside the checkpoints
// as `jobkit-ledger-<job>.jsonl` and one line per restart in the job's output (docs/recovery.md).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// One event line of a step (recovery/events.hpp) as the ledger reads it; nullopt for a line
/// that is not one (bounded: the file is the step's, which may write anything there).
struct step_event {
  std::string kind;
  int attempt = 0;
  int rank = 0;
  std::string host;
  double time = 0;   // Unix seconds
  std::string line;  // the whole line, for its other fields
};
std::optional<step_event> parse_event(std::string_view line);
/// The raw text of a field of a flat JSON object line ("40", "\"c3\""), empty when absent.
std::string_view json_field(std::string_view line, std::string_view name);
/// A string field's value without its quotes (escapes kept as they are), empty when absent.
std::string json_text_field(std::string_view line, std::string_view name);
/// An array field's raw text ("[1.0,0.5]"; arrays inside it and strings with brackets are
/// skipped over), empty when absent or unterminated.
std::string_view json_array_field(std::string_view line, std::string_view name);

/// When each phase of a restart happened, Unix seconds (0: not seen).
struct restart_phases {
  double failed = 0;             ///< the failure seen (its first evidence, else the step's end)
  double step_ended = 0;         ///< the failed step's srun returned (or was left)
  double step_started = 0;       ///< the next step's srun started
  double world_ready = 0;        ///< the next step's data path up (event world_ready)
  double checkpoint_loaded = 0;  ///< its checkpoint read (event checkpoint_loaded)
  double first_step_done = 0;    ///< its first step after it (event first_step_done)
};

struct restart_entry {
  int number = 0;      ///< the job's restart count with this one (1: its first)
  int attempt = 0;     ///< the failed step's attempt number (0: the first step)
  std::string cause;   ///< crash, lost node, hang, ...
  std::string where;   ///< the failure's node (crash node, lost node), empty: unknown
  std::string blamed;  ///< the node blamed and excluded, empty: none
  std::string blame_why;
  std::vector<std::string> nodes;  ///< the next step's nodes (empty: none started)
  std::int64_t checkpoint = -1;    ///< the newest whole checkpoint at the failure
  std::string source;              ///< where the next step read it (memory, partner, shared), if said
  std::string stragglers;          ///< the failed step's last straggler scores (a JSON array), if any
  double wasted = 0;               ///< seconds of work since that checkpoint, done again
  restart_phases at;
};

struct job_ledger {
  std::string job_id;
  double started = 0;  ///< `jobkit run` started, Unix seconds
  double ended = 0;
  std::string outcome;  ///< finished, stopped, requeued, no progress, restarts spent, ...
  std::vector<restart_entry> restarts;
  /// Seconds of productive training: from each step's first step done (else its start) to its
  /// end, less each failure's wasted work.
  double productive = 0;
};

/// The ledger file (`jobkit-ledger-<job>.jsonl`) holds JSON lines: one per restart, as it is
/// known ({"restart":...}), and one per `jobkit run` at its end ({"run":...}: its outcome, its
/// restarts' time lost per cause, its productive time and effective training time ratio). A
/// requeued job appends to the same file.
std::string restart_json(std::string_view job_id, const restart_entry& entry);
std::string run_json(const job_ledger& ledger);
/// The restart's line in the job's output: "jobkit run: restart 1: crash on c2 (not blamed) ...".
std::string restart_line(const restart_entry& entry);
/// The job's last line: restarts, time lost per cause, the effective training time ratio.
std::string ledger_summary(const job_ledger& ledger);

}  // namespace jobkit::detail
