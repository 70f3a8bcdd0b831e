#pragma once

// The loop that moves a step's output through the fold engine: `jobkit fold -- srun ...` and
// `jobkit run -- srun ...` (which also reads each line for the evidence of a fault, and does its
// own work between reads).

#include <signal.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "core/child_process.hpp"
#include "fold/folder.hpp"

namespace jobkit::cli {

/// One stream being folded: where it comes from, its engine, where it goes.
struct fold_stream {
  int from;
  int to;
  fold::folder folder;
  bool open = true;
  bool writable = true;  // false once its reader went away: the step goes on, its output is dropped

  void flush();
};

/// The signals srun gets from this process (the terminal's and Slurm's stop signals).
inline constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/// A signal srun gets by itself is not sent again: a terminal's (the kernel sends it to the whole
/// foreground process group, srun included) and a slurmstepd's (Slurm signals every process of the
/// batch step).
bool srun_lacks_it(const detail::forwarded_signal& record);

/// The command being folded (srun) and how it ended, once reaped.
struct command_run {
  detail::child_process& child;
  detail::signal_forwarder& forwarding;
  std::optional<int> status;  // child_process::try_reap's, once reaped
  /// A signal that comes once the command has exited ends this process by it (`jobkit fold`);
  /// false: it stays recorded in `forwarding` for the caller (`jobkit run`, between steps).
  bool end_on_late_signal = true;

  void reap() {
    if (!status) status = child.try_reap();
  }
};

/// What the caller does while the loop runs.
struct pump_hooks {
  /// The bytes just read from streams[index], before they are folded.
  std::function<void(std::size_t index, std::string_view bytes)> read;
  /// Called at least every `every` while the loop runs.
  std::function<void()> tick;
  std::chrono::milliseconds every{500};
};

/// Reads the streams until each ends, folding, and until the command (if any) has exited and been
/// reaped. A signal goes to the command while it runs, its streams closed or not; once it has
/// exited, a signal ends this process, as it would without its handler (end_on_late_signal).
void pump(std::vector<fold_stream>& streams, command_run* run, const pump_hooks* hooks = nullptr);

}  // namespace jobkit::cli
