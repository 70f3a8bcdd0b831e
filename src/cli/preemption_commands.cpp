// jobkit checkpoint, requeue and time-left: pre-emption and requeue for sbatch scripts and for
// steps that are not C++.
#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <string>

#include "cli.hpp"
#include "jobkit/jobkit.hpp"

namespace jobkit::cli {
namespace {

constexpr std::string_view checkpoint_usage =
    "usage: jobkit checkpoint latest DIR [--timeout S]\n"
    "       jobkit checkpoint begin DIR STEP\n"
    "       jobkit checkpoint commit DIR STEP [--keep K] [--timeout S]\n"
    "       jobkit checkpoint part DIR STEP\n"
    "       jobkit checkpoint verify DIR STEP [--timeout S]\n"
    "\n"
    "A checkpoint directory that is never half-written (see jobkit/checkpoints.hpp). Run each\n"
    "command on every rank of the step (srun --mpi=pmix), or in a batch script as one rank:\n"
    "  latest  print the newest step complete on every node (nothing when there is none)\n"
    "  begin   print the empty directory where this rank writes its part of STEP\n"
    "  commit  collective: every rank's part of STEP is flushed and the step made visible at once,\n"
    "          with a manifest of every file's size and CRC-32C; older steps beyond K (default 2,\n"
    "          0 keeps all) are removed. Fails on every rank when any rank's part is missing\n"
    "  part    print this rank's part of complete step STEP, to read from\n"
    "  verify  collective: every rank checks its files of STEP against the manifest (size, CRC-32C)\n"
    "\n"
    "options:\n"
    "  --keep K     complete steps kept after a commit (default 2; 0: all)\n"
    "  --timeout S  how long a rank waits for the others (default: JOBKIT_TIMEOUT, else 1800)\n";

constexpr std::string_view requeue_usage =
    "usage: jobkit requeue\n"
    "\n"
    "Ask Slurm to requeue this job (SLURM_JOB_ID; for an array job, this task only). Slurm ends\n"
    "the job and starts it again later with SLURM_RESTART_COUNT one higher. Run it once, e.g. in\n"
    "the batch script after the last checkpoint was committed. A job already requeued counts as\n"
    "success. Exit status 1 when Slurm refuses (e.g. sbatch --no-requeue), 2 outside a job.\n";

constexpr std::string_view time_left_usage =
    "usage: jobkit time-left\n"
    "\n"
    "Print the seconds this job has left before its time limit, or 'unknown' (no time limit, not\n"
    "in a Slurm job, or libslurm gave no answer: a warning says why). From SLURM_JOB_END_TIME when\n"
    "it is set (Slurm 23.02 and later; its value at the step's launch), else from slurmctld through\n"
    "libslurm (see JOBKIT_LIBSLURM), called in a child process that is killed after 10 s. Exit\n"
    "status 2 when SLURM_JOB_END_TIME or SLURM_JOB_ID is malformed.\n";

std::int64_t parse_step(std::string_view value) {
  std::int64_t step = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), step);
  if (value.empty() || value.size() > 12 || ec != std::errc{} || end != value.data() + value.size() || step < 0) {
    throw usage_error{fmt::format("checkpoint: STEP='{}' is not a step number (0 to 999999999999)", value)};
  }
  return step;
}

bool wants_help(const std::vector<std::string_view>& args) {
  return !args.empty() && (args[0] == "--help" || args[0] == "-h");
}

}  // namespace

int run_checkpoint(const std::vector<std::string_view>& args) {
  if (args.empty()) throw usage_error{"checkpoint: no action given (see jobkit checkpoint --help)"};
  if (wants_help(args)) {
    std::fputs(checkpoint_usage.data(), stdout);
    return 0;
  }
  const auto action = args[0];
  std::vector<std::string_view> positional;
  checkpoint_options options;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--timeout" && (action == "begin" || action == "part")) {
      throw usage_error{
          fmt::format("checkpoint: --timeout does not apply to '{}', which waits for no other rank "
                      "(see jobkit checkpoint --help)",
                      action)};
    } else if (args[i] == "--timeout") {
      options.timeout = timeout_option(option_value(args, i, "checkpoint")).timeout;
    } else if (args[i] == "--keep" && action == "commit") {
      const auto value = option_value(args, i, "checkpoint");
      int keep = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), keep);
      if (ec != std::errc{} || end != value.data() + value.size() || keep < 0) {
        throw usage_error{fmt::format("checkpoint: --keep='{}' is not a count", value)};
      }
      options.keep = keep;
    } else if (args[i].starts_with("--")) {
      throw usage_error{fmt::format("checkpoint: unknown argument '{}' (see jobkit checkpoint --help)", args[i])};
    } else {
      positional.push_back(args[i]);
    }
  }
  const std::size_t wanted = action == "latest" ? 1 : 2;
  if ((action != "latest" && action != "begin" && action != "commit" && action != "part" && action != "verify") ||
      positional.size() != wanted) {
    throw usage_error{
        fmt::format("checkpoint: expected 'latest DIR', 'begin DIR STEP', 'commit DIR STEP', 'part DIR STEP' "
                    "or 'verify DIR STEP' (see jobkit checkpoint --help)")};
  }
  checkpoints saved{std::filesystem::path(positional[0]), options};
  if (action == "latest") {
    if (const auto step = saved.latest()) std::printf("%lld\n", static_cast<long long>(*step));
  } else if (action == "begin") {
    std::printf("%s\n", saved.begin(parse_step(positional[1])).c_str());
  } else if (action == "verify") {
    saved.verify(parse_step(positional[1]));
  } else if (action == "part") {
    std::printf("%s\n", saved.part(parse_step(positional[1])).c_str());
  } else {
    saved.commit(parse_step(positional[1]));
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_requeue(const std::vector<std::string_view>& args) {
  if (wants_help(args)) {
    std::fputs(requeue_usage.data(), stdout);
    return 0;
  }
  if (!args.empty()) throw usage_error{fmt::format("requeue: unknown argument '{}'", args[0])};
  try {
    requeue();
  } catch (const error& e) {
    if (e.code() == errc::invalid_environment) throw usage_error{e.what()};
    throw;
  }
  return 0;
}

int run_time_left(const std::vector<std::string_view>& args) {
  if (wants_help(args)) {
    std::fputs(time_left_usage.data(), stdout);
    return 0;
  }
  if (!args.empty()) throw usage_error{fmt::format("time-left: unknown argument '{}'", args[0])};
  if (const auto left = time_left(std::chrono::seconds(0))) {
    std::printf("%lld\n", static_cast<long long>(left->count()));
  } else {
    std::printf("unknown\n");
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace jobkit::cli
