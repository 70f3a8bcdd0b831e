// A training step that survives pre-emption, time limits and crashes (slurm/train-requeue.sbatch):
// resume from the newest complete checkpoint, stop at one step agreed by every rank when Slurm
// signals or time runs short, commit a checkpoint, and have rank 0 requeue the job (every rank then
// exits 0; the batch script reads what the stop recorded beside the checkpoints).
//
// Its "model" is deterministic: rank r adds (r + 1) * (s + 1) at step s, so the final sum of
// every rank is known and a resumed run must end with exactly the result of an uninterrupted one.
//
//   srun --mpi=pmix --kill-on-bad-exit=1 jobkit-train-requeue --ckpt DIR [--steps N]
//        [--step-ms MS] [--every K] [--margin SECONDS] [--result FILE]
//        [--crash-rank R --crash-step S [--crash-attempt A]] [--crash-node NODE]
//        [--crash-rank-by-attempt] [--hang-rank R --hang-step S] [--slow-exit-rank R --slow-exit-s S]
//        (tests: rank R dies at step S's save (-1: the attempt's first), in attempt A (under
//        jobkit run JOBKIT_RECOVERY_ATTEMPT, its count of the job's steps, else
//        SLURM_RESTART_COUNT; default 0); NODE's first rank dies at that save in every attempt;
//        or rank (2 x attempt) mod the world size does, in every attempt; rank R stops itself
//        (SIGSTOP) after step S in attempt 0, a hang;
//        rank R takes S seconds in its exit handlers, as a slow teardown would)
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "jobkit/jobkit.hpp"

namespace {

struct settings {
  std::string checkpoint_root;
  std::int64_t steps = 40;
  int step_ms = 100;
  std::int64_t every = 10;  // a checkpoint every `every` steps, besides the one at a stop
  int margin_s = 0;
  std::string result;
  int crash_rank = -1;
  std::int64_t crash_step = -1;
  int crash_attempt = 0;
  std::string crash_node;              // a rank on this node crashes at its first save, every attempt
  bool crash_rank_by_attempt = false;  // the rank that crashes is (2 x attempt) mod world size
  int hang_rank = -1;                  // this rank stops itself (SIGSTOP) at hang_step, in attempt 0
  std::int64_t hang_step = -1;
  int slow_exit_rank = -1;
  int slow_exit_s = 0;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--crash-rank-by-attempt") {
      s.crash_rank_by_attempt = true;
      continue;
    }
    if (i + 1 >= argc) throw jobkit::error(jobkit::errc::invalid_argument, fmt::format("{} needs a value", arg));
    const std::string value = argv[++i];
    if (arg == "--ckpt")
      s.checkpoint_root = value;
    else if (arg == "--steps")
      s.steps = std::stoll(value);
    else if (arg == "--step-ms")
      s.step_ms = std::stoi(value);
    else if (arg == "--every")
      s.every = std::stoll(value);
    else if (arg == "--margin")
      s.margin_s = std::stoi(value);
    else if (arg == "--result")
      s.result = value;
    else if (arg == "--crash-rank")
      s.crash_rank = std::stoi(value);
    else if (arg == "--crash-step")
      s.crash_step = std::stoll(value);
    else if (arg == "--crash-attempt")
      s.crash_attempt = std::stoi(value);
    else if (arg == "--hang-rank")
      s.hang_rank = std::stoi(value);
    else if (arg == "--hang-step")
      s.hang_step = std::stoll(value);
    else if (arg == "--crash-node")
      s.crash_node = value;
    else if (arg == "--slow-exit-rank")
      s.slow_exit_rank = std::stoi(value);
    else if (arg == "--slow-exit-s")
      s.slow_exit_s = std::stoi(value);
    else
      throw jobkit::error(jobkit::errc::invalid_argument, fmt::format("unknown argument '{}'", arg));
  }
  if (s.checkpoint_root.empty()) throw jobkit::error(jobkit::errc::invalid_argument, "--ckpt DIR is required");
  return s;
}

/// This step's attempt: under `jobkit run`, its count of the job's steps (restarts inside the
/// allocation and requeues); else Slurm's count of requeues.
int attempt_of(const jobkit::identity& me) {
  if (const char* attempt = std::getenv("JOBKIT_RECOVERY_ATTEMPT")) return std::atoi(attempt);
  return me.restart_count;
}

int slow_exit_seconds = 0;
void slow_exit() {
  std::signal(SIGTERM, SIG_IGN);  // a teardown that does not end on Slurm's SIGTERM: only SIGKILL ends it
  std::this_thread::sleep_for(std::chrono::seconds(slow_exit_seconds));
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct state {
  std::int64_t next_step = 0;
  std::int64_t sum = 0;
};

void save(jobkit::checkpoints& saved, const state& s, const settings& opt) {
  const auto& me = jobkit::current_identity();
  const auto part = saved.begin(s.next_step);
  std::ofstream(part / "state") << s.next_step << ' ' << s.sum << '\n';
  static bool first_save = true;  // of this attempt
  const bool crash_here = opt.crash_step < 0 ? first_save : s.next_step == opt.crash_step;
  first_save = false;
  const bool crash_rank = opt.crash_rank_by_attempt
                              ? me.rank == (2 * attempt_of(me)) % me.world_size
                              : (me.rank == opt.crash_rank && attempt_of(me) == opt.crash_attempt) ||
                                    (!opt.crash_node.empty() && me.hostname == opt.crash_node && me.local_rank == 0);
  if (crash_rank && crash_here) {
    jobkit::log::warn("crashing on purpose at the save of step {} (the others are in commit())", s.next_step);
    ::raise(SIGKILL);
  }
  saved.commit();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto opt = parse(argc, argv);
    const auto& me = jobkit::current_identity();
    jobkit::stop_guard stop({.time_margin = std::chrono::seconds(opt.margin_s)});
    jobkit::checkpoints saved(opt.checkpoint_root, {.keep = 2});
    if (!opt.result.empty()) {
      std::ofstream(fmt::format("{}.pid.{}", opt.result, me.rank)) << ::getpid() << '\n';
    }
    if (me.rank == opt.slow_exit_rank) {
      slow_exit_seconds = opt.slow_exit_s;
      std::atexit(slow_exit);
    }

    state s;
    if (const auto step = saved.latest()) {
      std::ifstream(saved.part(*step) / "state") >> s.next_step >> s.sum;
      jobkit::log::info("attempt {}: resuming from step {} (sum {})", attempt_of(me), *step, s.sum);
    } else {
      jobkit::log::info("attempt {}: no checkpoint, starting at step 0", attempt_of(me));
    }

    for (; s.next_step < opt.steps;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opt.step_ms));  // stands for the real work
      s.sum += (me.rank + 1) * (s.next_step + 1);
      ++s.next_step;
      if (me.rank == opt.hang_rank && s.next_step == opt.hang_step && attempt_of(me) == 0) {
        jobkit::log::warn("hanging on purpose at step {} (SIGSTOP)", s.next_step);
        ::raise(SIGSTOP);
      }
      if (stop.stop_requested()) {
        const auto agreed = now_ns();
        save(saved, s, opt);
        jobkit::log::info("stop at step {}: {}; agreed_ns={} committed_ns={}", s.next_step,
                          jobkit::to_string(stop.cause()), agreed, now_ns());
        saved.requeue(stop.cause());  // rank 0 asks Slurm; the outcome is logged and recorded once
        return 0;
      }
      if (s.next_step % opt.every == 0 && s.next_step < opt.steps) save(saved, s, opt);
    }
    const auto sums = jobkit::gather(s.sum);
    if (me.rank == 0) {
      std::int64_t total = 0;
      for (auto v : sums) total += v;
      jobkit::log::info("finished {} steps: total {}", opt.steps, total);
      if (!opt.result.empty()) std::ofstream(opt.result) << total << '\n';
    }
    return 0;
  } catch (const std::exception& e) {
    jobkit::log::error("{}", e.what());
    return 1;
  }
}
