// jobkit where: where every rank of a running step is, folded by rank set. The front end asks
// Slurm for the job's steps and their nodes and starts one agent per node in an overlapping step
// (`srun --overlap ... jobkit where --agent JOB STEP`); each agent reads the records of the step's
// processes on its node (src/where/record.hpp), asks Python ranks for their stacks (the handler
// `import jobkit` registers, python/jobkit/_where.py: only with the signal each one registered, and
// only where it is caught, src/where/proc.hpp) and /proc for the others.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/parse.hpp"
#include "core/rank_set.hpp"
#include "where/proc.hpp"
#include "where/record.hpp"
#include "where/report.hpp"

extern char** environ;

namespace jobkit::cli {
namespace {

constexpr std::string_view where_usage =
    "usage: jobkit where [JOBID[.STEP]] [--timeout SECONDS]\n"
    "\n"
    "Where every rank of a running step is: the jobkit call it is in (name, call site, for how\n"
    "long, whom it waits for), or for a Python rank outside jobkit its stack, or what /proc says of a\n"
    "process without jobkit; one report folded by rank set:\n"
    "  [rank: 0-4,6] in barrier at train.py:31 for 42 s, waiting for rank 5 (c2)\n"
    "  [rank: 5] not in jobkit: load_shard data.py:12 <- train_step train.py:27\n"
    "With progress tracking on (docs/progress.md), each rank's straggler score follows, by node.\n"
    "It reaches each node of the step through an overlapping step (srun --overlap); no rank is\n"
    "stopped, slowed beyond a Python stack's dump, or changed. Run it in the batch script or a shell\n"
    "inside the allocation. JOBID defaults to SLURM_JOB_ID; without STEP, every running step.\n"
    "\n"
    "options:\n"
    "  --timeout SECONDS  the longest to wait for the nodes' answers (default 10)\n"
    "  --help             show this help\n";

bool digits_only(std::string_view text) {
  return !text.empty() && text.size() < 12 && text.find_first_not_of("0123456789") == std::string_view::npos;
}

// --- the agent: one node --------------------------------------------------------------------

/// A Python process's stack, asked of the handler `import jobkit` registered: its dump file.
struct stack_request {
  int pid = 0;
  int signal = 0;    // the one it registered, which it catches (where::plan_stack)
  std::string path;  // /proc/PID/fd/N of its memfd
  off_t before = 0;  // the file's size before the signal
  off_t last = 0;
  bool sent = false;
  bool grew = false;
  bool done = false;
};

/// The stacks of every request at once: each process is sent the signal, then all are waited for
/// together (their dumps run side by side) until each dump has stopped growing, within one limit
/// for all; nullopt for a process that did not answer.
std::vector<std::optional<std::string>> python_stacks(std::vector<stack_request>& requests,
                                                      std::chrono::milliseconds limit) {
  for (auto& r : requests) {
    struct stat before {};
    if (::stat(r.path.c_str(), &before) != 0) continue;
    r.before = r.last = before.st_size;
    r.sent = ::kill(r.pid, r.signal) == 0;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto waiting = [&] {
    return std::any_of(requests.begin(), requests.end(), [](const stack_request& r) { return r.sent && !r.done; });
  };
  while (waiting() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& r : requests) {
      if (!r.sent || r.done) continue;
      struct stat now {};
      if (::stat(r.path.c_str(), &now) != 0) {
        r.sent = false;  // the process ended
        continue;
      }
      if (r.grew && now.st_size == r.last) r.done = true;  // the dump has ended
      r.grew = r.grew || now.st_size > r.before;
      r.last = now.st_size;
    }
  }
  std::vector<std::optional<std::string>> stacks(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!r.sent || !r.grew) continue;
    std::ifstream in(r.path, std::ios::binary);
    in.seekg(r.before);
    std::string dump(static_cast<std::size_t>(std::min<off_t>(r.last - r.before, 1 << 20)), '\0');
    in.read(dump.data(), static_cast<std::streamsize>(dump.size()));
    dump.resize(static_cast<std::size_t>(in.gcount()));
    stacks[i] = where::python_frames(dump);
  }
  return stacks;
}

int run_agent(const std::string& job, const std::string& step) {
  char hostname[256] = {};
  ::gethostname(hostname, sizeof hostname - 1);
  const std::string host = detail::process_environment().get("SLURMD_NODENAME").value_or(hostname);
  std::map<int, std::vector<where::task_process>> by_rank;
  for (const auto& p : where::step_processes(job, step, host, ::getpid())) by_rank[p.rank].push_back(p);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  struct rank_seen {
    int rank = 0;
    std::optional<where::record_view> record;
    std::string state;
    int stack = -1;        // its index in requests
    std::string no_stack;  // why it was not asked for one
  };
  std::vector<rank_seen> seen;
  std::vector<stack_request> requests;
  for (const auto& [rank, list] : by_rank) {
    // The process with a record, else with a Python stack file; else one without a child in the
    // task (the program, not its shell).
    const where::task_process* chosen = nullptr;
    where::process_files files;
    for (const auto& p : list) {
      auto found = where::find_files(p.pid);
      const bool better = chosen == nullptr ? !found.record.empty() || !found.stack.empty()
                                            : files.record.empty() && !found.record.empty();
      if (better) {
        chosen = &p;
        files = std::move(found);
      }
    }
    for (const auto& p : list) {
      const bool parent =
          std::any_of(list.begin(), list.end(), [&](const where::task_process& q) { return q.ppid == p.pid; });
      if (chosen == nullptr && !parent) chosen = &p;
    }
    if (chosen == nullptr) chosen = &list.front();
    rank_seen r;
    r.rank = rank;
    if (!files.record.empty()) r.record = where::read_record(files.record);
    r.state = where::proc_state(chosen->pid);
    if (!files.stack.empty() && r.state.find("stopped") == std::string::npos && (!r.record || !r.record->in_call)) {
      const auto status = where::read_small_file("/proc/" + std::to_string(chosen->pid) + "/status", 16384);
      const auto plan = where::plan_stack(chosen->pid, files.stack_signal, status);
      if (plan.signal != 0) {
        r.stack = static_cast<int>(requests.size());
        requests.push_back(stack_request{.pid = chosen->pid, .signal = plan.signal, .path = files.stack});
      } else {
        r.no_stack = plan.refused;
      }
    }
    seen.push_back(std::move(r));
  }
  const auto stacks = python_stacks(requests, std::chrono::milliseconds(2000));
  std::string out;
  for (const auto& r : seen) {
    const auto stack = r.stack >= 0 ? stacks[static_cast<std::size_t>(r.stack)] : std::nullopt;
    out += where::format_answer(where::describe(r.rank, host, r.record, stack, r.state, now_ns, r.no_stack));
    if (r.record) out += where::format_score(r.rank, host, *r.record);
  }
  out += "#node " + host + " " + std::to_string(by_rank.size()) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

// --- the front end --------------------------------------------------------------------------

struct step_place {
  std::string id;     // JOB.STEP
  std::string nodes;  // a Slurm host list
};

int run_front(std::string job, std::optional<std::string> only_step, std::chrono::milliseconds limit) {
  const auto squeue = detail::run_bounded({"squeue", "-h", "-s", "-j", job, "-o", "%i|%N|%j"}, limit);
  if (squeue.status != 0) {
    throw usage_error{"where: squeue -s -j " + job + " failed (" + std::to_string(squeue.status) +
                      "): " + detail::first_line(squeue.err)};
  }
  std::vector<step_place> steps;
  std::istringstream lines(squeue.out);
  for (std::string line; std::getline(lines, line);) {
    const auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    const auto bar2 = line.find('|', bar + 1);
    if (bar2 == std::string::npos) continue;
    // jobkit run's deputy (docs/recovery.md) runs no ranks.
    if (line.substr(bar2 + 1) == deputy_step_name) continue;
    step_place s{line.substr(0, bar), line.substr(bar + 1, bar2 - bar - 1)};
    const auto dot = s.id.find('.');
    if (dot == std::string::npos) continue;
    const auto step = s.id.substr(dot + 1);
    if (!digits_only(step)) continue;  // the batch and extern steps run no ranks
    if (only_step && step != *only_step) continue;
    steps.push_back(s);
  }
  if (steps.empty()) {
    throw usage_error{only_step ? "where: step " + job + "." + *only_step + " is not running"
                                : "where: job " + job + " has no running step"};
  }
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string jobkit = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "jobkit";
  int status = 0;
  for (const auto& s : steps) {
    const auto step = s.id.substr(s.id.find('.') + 1);
    const auto hosts = detail::run_bounded({"scontrol", "show", "hostnames", s.nodes}, limit);
    std::vector<std::string> nodes;
    std::istringstream names(hosts.out);
    for (std::string name; std::getline(names, name);) {
      if (!name.empty()) nodes.push_back(name);
    }
    if (hosts.status != 0 || nodes.empty()) {
      throw usage_error{"where: scontrol show hostnames " + s.nodes + " failed: " + detail::first_line(hosts.err)};
    }
    const auto agents = detail::run_bounded({"srun", "--overlap", "--jobid=" + job, "-N", std::to_string(nodes.size()),
                                             "--ntasks=" + std::to_string(nodes.size()), "--ntasks-per-node=1", "-w",
                                             s.nodes, "--quiet", "--mpi=none", jobkit, "where", "--agent", job, step},
                                            limit);
    if (agents.out.empty() && agents.status != 0 && agents.status != 124) {
      // Nothing reached any node: Slurm refused the overlapping step (not the caller's job, or a
      // job that ended meanwhile).
      throw usage_error{"where: srun --overlap into job " + job + " failed (exit status " +
                        std::to_string(agents.status) + "): " + detail::first_line(agents.err)};
    }
    const auto report = where::fold_report(agents.out, nodes);
    std::string text = "step " + s.id + " on " + s.nodes + ":\n" + report;
    if (agents.status != 0 && agents.status != 124) {
      text += "(srun --overlap for the nodes' agents: exit status " + std::to_string(agents.status) + ": " +
              detail::first_line(agents.err) + ")\n";
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (report.find("not answering") != std::string::npos) status = 1;
  }
  std::fflush(stdout);
  return status;
}

}  // namespace

int run_where(const std::vector<std::string_view>& args) {
  std::optional<std::string> target;
  std::chrono::milliseconds limit(10000);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(where_usage.data(), stdout);
      return 0;
    }
    if (arg == "--agent") {
      if (i + 2 >= args.size() || !digits_only(args[i + 1]) || !digits_only(args[i + 2])) {
        throw usage_error{"where: --agent needs JOB STEP"};
      }
      return run_agent(std::string(args[i + 1]), std::string(args[i + 2]));
    }
    if (arg == "--timeout") {
      const auto value = option_value(args, i, "where");
      auto rest = value;
      const auto seconds = detail::take_decimal(rest);
      if (!seconds || !rest.empty() || *seconds == 0 || *seconds > 3600) {
        throw usage_error{"where: --timeout='" + std::string(value) +
                          "' is not a whole number of seconds from 1 to 3600"};
      }
      limit = std::chrono::seconds(*seconds);
    } else if (!arg.starts_with("-") && !target) {
      target = std::string(arg);
    } else {
      throw usage_error{"where: unknown argument '" + std::string(arg) + "' (see jobkit where --help)"};
    }
  }
  if (!target) {
    const auto job = detail::process_environment().get("SLURM_JOB_ID");
    if (!job) throw usage_error{"where: no JOBID given and SLURM_JOB_ID is not set (run it inside the allocation)"};
    target = *job;
  }
  const auto dot = target->find('.');
  const auto job = target->substr(0, dot);
  std::optional<std::string> step;
  if (dot != std::string::npos) step = target->substr(dot + 1);
  if (!digits_only(job) || (step && !digits_only(*step))) {
    throw usage_error{"where: '" + *target + "' is not a job id (JOBID or JOBID.STEP, digits)"};
  }
  return run_front(job, step, limit);
}

}  // namespace jobkit::cli
