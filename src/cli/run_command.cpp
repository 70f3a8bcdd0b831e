// jobkit run: a step run and supervised inside its job's allocation. When the step fails (a
// crash, a lost node, a hang the step reports) it starts a new step on healthy nodes (spares
// first, blamed nodes never again) that resumes from the newest whole checkpoint; it requeues the
// job, with its bad nodes excluded, only when too few healthy nodes are left. Its decisions are
// src/recovery/plan.hpp's, its ledger src/recovery/ledger.hpp's, its Slurm calls slurm_job.hpp's;
// docs/recovery.md says what happens on each kind of fault.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "core/child_process.hpp"
#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/parse.hpp"
#include "core/posix_io.hpp"
#include "fold/labels.hpp"
#include "fold/srun_options.hpp"
#include "fold_pump.hpp"
#include "jobkit/checkpoints.hpp"
#include "recovery/events.hpp"
#include "recovery/ledger.hpp"
#include "recovery/plan.hpp"
#include "slurm_job.hpp"

namespace jobkit::cli {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

constexpr std::string_view run_usage =
    "usage: jobkit run [options] -- srun [srun options] PROGRAM [ARGS...]\n"
    "\n"
    "Runs the step and supervises it inside the job's allocation (a batch script or salloc whose\n"
    "job has --no-kill). When the step fails (a rank's crash, a node lost, a hang the step\n"
    "reports) it starts a new step in the same allocation on healthy nodes, spares first, never\n"
    "on a node it blamed, and the program resumes from its newest whole checkpoint. Too few\n"
    "healthy nodes left: the job is requeued with its bad nodes excluded. The step's output is\n"
    "folded as by jobkit fold. jobkit run sets the step's nodes (--nodes, --nodelist) and\n"
    "--kill-on-bad-exit=1: srun's own placement options are refused. See docs/recovery.md.\n"
    "\n"
    "options:\n"
    "  --checkpoints DIR  the job's checkpoint root, on a file system every node sees (required):\n"
    "                     the ledger (jobkit-ledger-JOBID.jsonl) and the job's recovery state\n"
    "                     (.jobkit-run-JOBID/: bad nodes, restarts, the step's events) live there\n"
    "  --spare-nodes S    nodes of the allocation held back as spares (default 0)\n"
    "  --min-nodes M      the program can run on M nodes or more: without a spare left, a smaller\n"
    "                     step (default: never smaller; needs --ntasks-per-node, not -n)\n"
    "  --max-restarts N   failed steps restarted or requeued before a failure is final (default 5;\n"
    "                     counted across requeues; pre-emptions do not count)\n"
    "  --no-progress K    stop, with exit status 93 and no requeue, after K restarts in a row that\n"
    "                     did not advance the newest checkpoint (default 3; 0: never)\n"
    "  --health-check CMD a site's check, run on each node through srun before each step: a\n"
    "                     node where it fails is blamed (CMD is run by sh -c)\n"
    "  --blame-stragglers at a restart, blame the node of a rank the failed step named a straggler\n"
    "                     twice or more (its progress watch: docs/progress.md)\n"
    "  --no-fold          print every rank's lines as srun does\n"
    "  --help             show this help\n"
    "\n"
    "exit status: 0 when the step finished or stopped at a committed checkpoint, or the job was\n"
    "requeued; 93 when restarts made no progress; else the last step's status\n";

constexpr int no_progress_status = 93;
// How long a hung step goes on after its first hang event: a watcher looks once a second, so the
// reports of the other ranks of the same hang come within it.
constexpr auto hang_gathering = std::chrono::seconds(2);

struct run_args {
  fs::path checkpoints;
  int spares = 0;
  std::optional<int> min_nodes;
  int max_restarts = 5;
  int no_progress = 3;
  std::string health_check;
  bool fold = true;
  bool blame_stragglers = false;
  std::vector<std::string> command;
  bool tasks_given = false;     // srun's -n/--ntasks
  bool per_node_given = false;  // srun's --ntasks-per-node
};

int count_option(std::string_view option, std::string_view value, int least, int most, std::string_view also = {}) {
  auto rest = value;
  const auto n = detail::take_decimal(rest);
  if (!n || !rest.empty() || *n < least || *n > most) {
    throw usage_error{
        fmt::format("run: {}='{}'{} is not a whole number from {} to {}", option, value, also, least, most)};
  }
  return *n;
}

run_args parse_run_args(const std::vector<std::string_view>& args) {
  run_args parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) parsed.command.emplace_back(args[i]);
      break;
    }
    if (arg == "--checkpoints") {
      parsed.checkpoints = std::string(option_value(args, i, "run"));
    } else if (arg == "--spare-nodes") {
      parsed.spares = count_option(arg, option_value(args, i, "run"), 0, 100000, " (SPARE_NODES in the templates)");
    } else if (arg == "--min-nodes") {
      parsed.min_nodes = count_option(arg, option_value(args, i, "run"), 1, 100000);
    } else if (arg == "--max-restarts") {
      parsed.max_restarts =
          count_option(arg, option_value(args, i, "run"), 0, 100000, " (MAX_RESTARTS in the templates)");
    } else if (arg == "--no-progress") {
      parsed.no_progress = count_option(arg, option_value(args, i, "run"), 0, 100000);
    } else if (arg == "--health-check") {
      parsed.health_check = std::string(option_value(args, i, "run"));
    } else if (arg == "--no-fold") {
      parsed.fold = false;
    } else if (arg == "--blame-stragglers") {
      parsed.blame_stragglers = true;
    } else {
      throw usage_error{"run: unknown argument '" + std::string(arg) + "' (see jobkit run --help)"};
    }
  }
  if (parsed.command.empty()) throw usage_error{"run: no step after '--' (see jobkit run --help)"};
  const auto slash = parsed.command.front().rfind('/');
  if (parsed.command.front().substr(slash == std::string::npos ? 0 : slash + 1) != "srun") {
    throw usage_error{"run: the step must be an srun command line ('-- srun ...'), not '" + parsed.command.front() +
                      "'"};
  }
  if (parsed.checkpoints.empty()) throw usage_error{"run: --checkpoints DIR is required (see jobkit run --help)"};
  const std::vector<std::string_view> srun_args(parsed.command.begin() + 1, parsed.command.end());
  const auto placement = fold::srun_options_given(srun_args, {
                                                                 "N",
                                                                 "nodes",
                                                                 "w",
                                                                 "nodelist",
                                                                 "x",
                                                                 "exclude",
                                                                 "nodefile",
                                                             });
  if (!placement.empty()) {
    throw usage_error{
        fmt::format("run: srun's {} is jobkit run's to set (the allocation's nodes less its spares and "
                    "its bad nodes): remove it",
                    placement.front())};
  }
  parsed.tasks_given = !fold::srun_options_given(srun_args, {"n", "ntasks"}).empty();
  parsed.per_node_given = !fold::srun_options_given(srun_args, {"ntasks-per-node"}).empty();
  if (parsed.min_nodes && parsed.tasks_given) {
    throw usage_error{
        "run: --min-nodes needs the step's tasks given per node (--ntasks-per-node), not srun's -n: a "
        "smaller step keeps its tasks per node"};
  }
  return parsed;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string read_small_file(const fs::path& path, std::size_t limit = 1 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

/// Writes `text` to `path` whole or not at all (a temporary file renamed over it).
void write_whole(const fs::path& path, const std::string& text) {
  const auto temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw error(errc::io, fmt::format("run: cannot write {}", temporary));
  }
  fs::rename(temporary, path);
}

void append_line(const fs::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const auto text = line + "\n";
  (void)detail::write_file_all(fd, text.data(), text.size());
  ::close(fd);
}

void say(const std::string& line) { print_error_line("jobkit run: " + line); }

/// The job's state beside its checkpoints, which outlives a requeue (the same job id).
class job_state {
 public:
  job_state(const fs::path& checkpoints, const std::string& job)
      : dir_(checkpoints / (".jobkit-run-" + job)), ledger_(checkpoints / ("jobkit-ledger-" + job + ".jsonl")) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) {
      throw usage_error{
          fmt::format("run: cannot create the job's recovery directory '{}': {}", dir_.string(), ec.message())};
    }
    bad_ = detail::parse_bad_nodes(read_small_file(dir_ / "bad-nodes"));
    restarts_ = number("restarts");
    attempts_ = number("attempts");
  }

  const fs::path& dir() const { return dir_; }
  const fs::path& ledger() const { return ledger_; }
  const std::vector<detail::bad_node>& bad() const { return bad_; }
  std::set<std::string> bad_set() const {
    std::set<std::string> nodes;
    for (const auto& b : bad_) nodes.insert(b.node);
    return nodes;
  }
  bool is_bad(const std::string& node) const {
    return std::any_of(bad_.begin(), bad_.end(), [&](const auto& b) { return b.node == node; });
  }
  void add_bad(const std::string& node, const std::string& why) {
    if (is_bad(node)) return;
    bad_.push_back({node, static_cast<std::int64_t>(unix_now()), why});
    write_whole(dir_ / "bad-nodes", detail::format_bad_nodes(bad_));
  }
  int restarts() const { return restarts_; }
  int attempts() const { return attempts_; }
  void count_restart() { set("restarts", ++restarts_); }
  /// The next step's attempt number (counted across requeues).
  int next_attempt() {
    set("attempts", attempts_ + 1);
    return attempts_++;
  }

 private:
  int number(const std::string& name) const {
    auto text = read_small_file(dir_ / name, 32);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    std::string_view rest = text;
    const auto n = detail::take_decimal(rest);
    return n && rest.empty() ? *n : 0;
  }
  void set(const std::string& name, int value) { write_whole(dir_ / name, std::to_string(value) + "\n"); }

  fs::path dir_;
  fs::path ledger_;
  std::vector<detail::bad_node> bad_;
  int restarts_ = 0;
  int attempts_ = 0;
};

/// The newest whole checkpoint under the root (-1: none) and when it was committed (Unix s).
std::pair<std::int64_t, double> newest_checkpoint(const fs::path& root) {
  std::int64_t newest = -1;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code exists;
    const auto step = parse_checkpoint_step_name(it->path().filename().string());
    if (step && *step > newest && fs::exists(it->path() / "manifest.json", exists)) newest = *step;
  }
  if (newest < 0) return {-1, 0};
  const auto manifest = root / checkpoint_step_name(newest) / "manifest.json";
  const auto written = fs::last_write_time(manifest, ec);
  if (ec) return {newest, 0};
  const auto since_epoch = std::chrono::file_clock::to_sys(written).time_since_epoch();
  return {newest, std::chrono::duration<double>(since_epoch).count()};
}

/// Reads the lines the step appends to events.jsonl since the last read.
class event_reader {
 public:
  /// From the file's end (the lines written from now on).
  explicit event_reader(fs::path path) : path_(std::move(path)) {
    std::error_code ec;
    offset_ = fs::exists(path_, ec) ? fs::file_size(path_, ec) : 0;
    if (ec) offset_ = 0;
  }
  /// From `offset`.
  event_reader(fs::path path, std::uintmax_t offset) : path_(std::move(path)), offset_(offset) {}
  /// Reads what was appended since the last read (at most 64 KiB); returns the bytes read.
  template <class Each>
  std::size_t read(Each each) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return 0;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk(1 << 16, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    chunk.resize(static_cast<std::size_t>(in.gcount()));
    offset_ += chunk.size();
    partial_ += chunk;
    for (auto end = partial_.find('\n'); end != std::string::npos; end = partial_.find('\n')) {
      if (const auto e = detail::parse_event(std::string_view(partial_).substr(0, end))) each(*e);
      partial_.erase(0, end + 1);
    }
    if (partial_.size() > detail::event_line_limit) partial_.clear();  // a line too long: not ours
    return chunk.size();
  }

 private:
  fs::path path_;
  std::uintmax_t offset_ = 0;
  std::string partial_;
};

/// A rank's `failure` event (src/transport/tree.cpp: a group's first failure, its message) read as
/// a line of the step's output would be; false for another event.
bool add_failure(detail::step_evidence& evidence, const detail::step_event& e) {
  if (e.kind != "failure") return false;
  evidence.add_line(detail::json_text_field(e.line, "message"));
  return true;
}

/// Splits each stream's bytes into lines for the evidence (bounded per line).
struct line_splitter {
  std::string held;
  template <class Each>
  void add(std::string_view bytes, Each each) {
    for (const char c : bytes) {
      if (c == '\n') {
        each(std::string_view(held));
        held.clear();
      } else if (held.size() < detail::evidence_line_limit) {
        held.push_back(c);
      }
    }
  }
};

/// One step: how it ended and what it said.
struct step_result {
  int status = 0;
  detail::step_evidence evidence;
  double failed = 0;  // the first evidence of its failure, Unix s
  double ended = 0;
  double started = 0;
  double productive_from = 0;                  // its first step done, else its world ready, else its start
  std::string hang;                            // the first hang event's line
  std::set<std::string> hung_outside;          // nodes of ranks that said they hang outside any jobkit call
  std::string stragglers;                      // the last straggler event's stragglers (a JSON array)
  std::map<std::string, int> straggler_nodes;  // how many straggler events named each node
  std::string step_id;
  double world_ready = 0, checkpoint_loaded = 0, first_step_done = 0;
  std::string source;
  int late_signal = 0;  // a signal recorded once srun had ended
};

/// Where `jobkit where` is: this very program.
std::string self_program() {
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("jobkit") : self.string();
}

class supervisor {
 public:
  supervisor(run_args args, std::string job, std::vector<std::string> allocation)
      : args_(std::move(args)),
        job_(std::move(job)),
        allocation_(std::move(allocation)),
        state_(args_.checkpoints, job_),
        restart_count_(detail::process_environment().get("SLURM_RESTART_COUNT").value_or("0")) {}

  int run() {
    const auto wanted = allocation_.size() - static_cast<std::size_t>(args_.spares);
    ledger_.job_id = job_;
    ledger_.started = unix_now();
    if (!state_.bad().empty()) {
      std::vector<std::string> names;
      for (const auto& b : state_.bad()) names.push_back(b.node + " (" + b.why + ")");
      say(fmt::format("job {}: nodes blamed earlier, never used again: {}", job_, fmt::join(names, "; ")));
    }
    auto& pending = pending_;
    pending = previous_supervisor();
    while (true) {
      heartbeat();
      if (const auto signal = forwarding_.take()) return stop_by_signal(signal->number);
      for (const auto& [node, slurm_state] : slurm_bad_nodes(allocation_)) {
        state_.add_bad(node, "Slurm reports it " + slurm_state);
      }
      auto nodes = detail::choose_nodes(allocation_, state_.bad_set(), wanted);
      if (nodes.size() < wanted && (!args_.min_nodes || nodes.size() < static_cast<std::size_t>(*args_.min_nodes))) {
        const bool counted = pending.has_value();  // the failure that left too few, counted already
        record_pending();
        return requeue(nodes.size(), wanted, counted);
      }
      // After a failure, the nodes of the next step reachable from here (a node lost at once with
      // the one named, a spare lost while it waited: Slurm may not know yet).
      if (pending) {
        const auto unreachable = unreachable_nodes(nodes, std::chrono::seconds(2));
        for (const auto& [node, why] : unreachable) {
          state_.add_bad(node, "unreachable: " + why);
          say(fmt::format("node {}: unreachable: {}: blamed", node, why));
        }
        if (!unreachable.empty()) continue;  // choose again
      }
      if (!args_.health_check.empty()) {
        const bool fine = healthy(nodes);
        // A signal or a pre-emption while the check ran: its tasks were signalled too, and what
        // they said blames no node.
        if (signal_in_check_ != 0) return stop_by_signal(signal_in_check_);
        if (preempted_) return stop_for_preemption();
        if (!fine) continue;  // blamed: choose again
      }
      // Slurm pre-empting the job (its GraceTime signals steps' tasks, not this script): no new
      // step, which nothing would tell to stop.
      if ((preempted_ = preempt_time(job_))) return stop_for_preemption();
      if (nodes.size() < wanted) {
        say(fmt::format("{} healthy nodes of the {} the step wants: a smaller step (--min-nodes {})", nodes.size(),
                        wanted, *args_.min_nodes));
      }
      const int attempt = state_.next_attempt();
      attempt_ = attempt;
      auto result = run_step(nodes, attempt, pending.has_value());
      // A step that could not start everywhere did not recover anything: its ranks that started
      // say nothing of the restart's phases.
      if (!result.evidence.launch_failed.empty())
        result.world_ready = result.checkpoint_loaded = result.first_step_done = 0;
      if (pending) {
        pending->nodes = nodes;
        finish_entry(*pending, result);
        pending.reset();
      }
      ledger_.productive += productive_time(result);
      if (result.late_signal != 0) return stop_by_signal(result.late_signal);
      if (stopped()) return end("stopped at a committed checkpoint: " + stop_record_, 0);
      if (result.status == 0) return end("finished", 0);

      auto entry = failure_entry(result, attempt, nodes);
      if (state_.restarts() >= args_.max_restarts) {
        entry.number = state_.restarts() + 1;
        ledger_.restarts.push_back(entry);
        print_entry(entry);
        return end(fmt::format("failed with status {} after {} restarts (--max-restarts {})", result.status,
                               state_.restarts(), args_.max_restarts),
                   result.status);
      }
      // A step that never started ran no part of the program: it says nothing of its progress.
      if (entry.cause != "launch failed") newest_at_failures_.push_back(entry.checkpoint);
      if (entry.cause != "launch failed" && detail::no_progress(newest_at_failures_, args_.no_progress)) {
        entry.number = state_.restarts() + 1;
        ledger_.restarts.push_back(entry);
        print_entry(entry);
        return end(fmt::format("no progress: the newest checkpoint ({}) did not advance in {} restart(s) in a row "
                               "(--no-progress {}); not requeued",
                               entry.checkpoint < 0 ? std::string("none") : std::to_string(entry.checkpoint),
                               args_.no_progress, args_.no_progress),
                   no_progress_status);
      }
      state_.count_restart();
      entry.number = state_.restarts();
      pending = entry;
    }
  }

 private:
  /// Runs the step on `nodes` and watches it.
  step_result run_step(const std::vector<std::string>& nodes, int attempt, bool after_failure) {
    std::vector<std::string> argv{args_.command.front()};
    if (args_.fold) argv.emplace_back("--label");
    argv.push_back("--kill-on-bad-exit=1");
    // On the whole allocation the step is placed as srun places it by itself; on part of it, its
    // nodes are named, so that Slurm never hands a spare's place back to a bad node. (Slurm
    // 24.11 refuses `--nodes=3 --nodelist=c1,c2,c3` in a job of `--nodes=3 --ntasks=7`:
    // "Requested node configuration is not available", seen on the dev cluster.)
    if (nodes != allocation_) {
      argv.push_back(fmt::format("--nodes={}", nodes.size()));
      argv.push_back("--nodelist=" + comma_list(nodes));
    }
    // A step left on a lost node keeps its resources on every node until Slurm ends it (after
    // SlurmdTimeout): the next step shares them (docs/recovery.md, measured).
    if (after_failure) argv.emplace_back("--overlap");
    argv.insert(argv.end(), args_.command.begin() + 1, args_.command.end());
    // A step on fewer nodes than the allocation: the job's total of tasks (SLURM_NTASKS) would
    // ask srun for too many; its tasks per node (srun's option, else SLURM_NTASKS_PER_NODE) hold.
    // srun's environment only: this command's own view of the job stays the allocation's.
    std::vector<std::pair<std::string, std::optional<std::string>>> srun_environment;
    if (nodes.size() < allocation_.size() && !args_.tasks_given) {
      srun_environment.emplace_back("SLURM_NTASKS", std::nullopt);
      srun_environment.emplace_back("SLURM_NPROCS", std::nullopt);
    }
    // A step that is not on the allocation's first nodes in their order: Slurm's mpi/pmix
    // (22.05 to 26.05) takes a node's place in the step for its place in the job when it routes
    // a direct get and when it chooses which stepd connects to which, so that gets and, now and
    // then, fences never complete (src/pmix/facts.hpp; bench/RESULTS.md, 2026-12-02). With the
    // job's node list set to the step's in srun's environment the stepds count as the step does
    // (measured: 70 of 70 steps on c2,c3 of c1-c3). The ranks see the step's nodes there.
    const bool first_nodes =
        std::equal(nodes.begin(), nodes.end(), allocation_.begin(),
                   allocation_.begin() + static_cast<std::ptrdiff_t>(std::min(nodes.size(), allocation_.size())));
    if (!first_nodes) {
      srun_environment.emplace_back("SLURM_JOB_NODELIST", comma_list(nodes));
      srun_environment.emplace_back("SLURM_NODELIST", comma_list(nodes));
    }
    ::setenv("JOBKIT_RECOVERY_DIR", state_.dir().c_str(), 1);
    ::setenv("JOBKIT_RECOVERY_ATTEMPT", std::to_string(attempt).c_str(), 1);

    step_result result;
    result.started = unix_now();
    event_reader events(state_.dir() / "events.jsonl");
    const auto environment = detail::environment_with(srun_environment);
    detail::child_process child(argv, {.environment = &environment, .capture_output = true});
    if (!child.started()) throw usage_error{"run: cannot run '" + argv.front() + "': " + child.start_error()};
    say(fmt::format("job {} step attempt {} on {}", job_, attempt, comma_list(nodes)));
    start_deputy(nodes);

    const auto size = [&] {
      const std::vector<std::string_view> srun_args(argv.begin() + 1, argv.end());
      fold::options options;
      if (const auto tasks = fold::srun_task_count(srun_args)) {
        options.ranks = tasks->count;
        if (tasks->exact) options.srun_tasks = tasks->count;
        return options;
      }
      // srun takes the job's tasks: its total on the whole allocation, else its tasks per node
      // (a line every rank said is then written at once, not after the window).
      const auto& env = detail::process_environment();
      const auto number = [&](const char* name) {
        std::string_view rest;
        const auto value = env.get(name);
        if (value) rest = *value;
        const auto n = detail::take_decimal(rest);
        return n && rest.empty() && *n > 0 && *n <= fold::most_tasks ? *n : 0;
      };
      long long ranks = 0;
      if (nodes.size() == allocation_.size()) ranks = number("SLURM_NTASKS");
      if (ranks == 0) ranks = static_cast<long long>(number("SLURM_NTASKS_PER_NODE")) * nodes.size();
      if (ranks > 0 && ranks <= fold::most_tasks) options.ranks = static_cast<int>(ranks);
      return options;
    }();
    std::vector<fold_stream> streams;
    streams.push_back({child.out_fd(), STDOUT_FILENO, fold::folder(size)});
    streams.push_back({child.err_fd(), STDERR_FILENO, fold::folder(size)});
    std::vector<line_splitter> lines(2);
    command_run run{child, forwarding_, std::nullopt, false};

    std::optional<clock::time_point> lost_seen;
    std::optional<clock::time_point> ended_at;   // when this command ended the step
    std::optional<clock::time_point> hang_seen;  // when the step's first hang event was read
    bool hang_reported = false;                  // `jobkit where`'s report of it made
    bool srun_killed = false;
    const auto evidence_size = [&] {
      return result.evidence.lost.size() + result.evidence.dead.size() + result.evidence.failed_tasks.size();
    };
    pump_hooks hooks;
    hooks.read = [&](std::size_t index, std::string_view bytes) {
      lines[index].add(bytes, [&](std::string_view line) {
        const auto before = evidence_size();
        result.evidence.add_line(line);
        if (evidence_size() != before && result.failed == 0) result.failed = unix_now();
        if (!result.evidence.lost.empty() && !lost_seen) lost_seen = clock::now();
      });
      if (!args_.fold)
        (void)detail::write_file_all(index == 0 ? STDOUT_FILENO : STDERR_FILENO, bytes.data(), bytes.size());
    };
    // The ledger's phases of this step, from its events (while it runs, and once it ended).
    const auto take_phase = [&](const detail::step_event& e) {
      if (e.kind == "world_ready" && result.world_ready == 0) result.world_ready = e.time;
      if (e.kind == "checkpoint_loaded" && result.checkpoint_loaded == 0) {
        result.checkpoint_loaded = e.time;
        result.source = detail::json_text_field(e.line, "source");
      }
      if (e.kind == "first_step_done" && result.first_step_done == 0) result.first_step_done = e.time;
    };
    hooks.tick = [&] {
      heartbeat();
      events.read([&](const detail::step_event& e) {
        if (e.attempt != attempt) return;
        if (result.step_id.empty()) result.step_id = detail::json_text_field(e.line, "step");
        take_phase(e);
        if (e.kind == "straggler") {
          result.stragglers = std::string(detail::json_array_field(e.line, "stragglers"));
          std::set<std::string> named;
          for (auto at = result.stragglers.find("\"host\":\""); at != std::string::npos;
               at = result.stragglers.find("\"host\":\"", at + 1)) {
            const auto from = at + 8;
            const auto end = result.stragglers.find('"', from);
            if (end != std::string::npos) named.insert(result.stragglers.substr(from, end - from));
          }
          for (const auto& node : named) {
            if (result.straggler_nodes.size() < 4096) ++result.straggler_nodes[node];
          }
        }
        if (e.kind == "hang") {
          if (detail::json_field(e.line, "in_call") == "false" && result.hung_outside.size() < 4096) {
            result.hung_outside.insert(e.host);
          }
          if (result.hang.empty()) {
            result.hang = e.line;
            hang_seen = clock::now();
            if (result.failed == 0) result.failed = unix_now();
          }
        }
      });
      if (run.status || ended_at) {
        // Ended by this command and still not gone: srun waits for a node that answers nothing.
        if (!run.status && ended_at && !srun_killed && clock::now() - *ended_at > std::chrono::milliseconds(1500)) {
          say(
              fmt::format("job {} step attempt {}: srun has not returned 1.5 s after its step was ended (it waits for "
                          "a node that answers nothing): srun killed, its step left to Slurm",
                          job_, attempt));
          child.signal(SIGKILL);
          srun_killed = true;
        }
        return;
      }
      if (!result.hang.empty()) {
        if (!hang_reported) report_hang(result, attempt);
        hang_reported = true;
        // The step is ended hang_gathering after its first hang event, not at once: the other
        // ranks' reports of the same hang (each watcher looks once a second) are read meanwhile,
        // and where the ranks that hang in their own code are (one node, or several: the
        // program's) decides the blame.
        if (clock::now() - *hang_seen >= hang_gathering) {
          end_this_step(result, child);
          ended_at = clock::now();
        }
      } else if (lost_seen && clock::now() - *lost_seen > std::chrono::seconds(1)) {
        // The survivors have said it; srun would wait for the lost node's tasks until Slurm
        // declares the node down.
        std::vector<std::string> lost;
        for (const auto& b : detail::lost_nodes_of(result.evidence)) lost.push_back(b.node);
        say(fmt::format("job {} step attempt {}: a node is lost ({}): the step is ended", job_, attempt,
                        lost.empty() ? std::string("named by its peers") : comma_list(lost)));
        end_this_step(result, child);
        ended_at = clock::now();
      }
    };
    if (args_.fold) {
      pump(streams, &run, &hooks);
    } else {
      for (auto& s : streams) s.writable = false;  // the read hook writes the bytes as they come
      pump(streams, &run, &hooks);
    }
    events.read([&](const detail::step_event& e) {
      if (e.attempt == attempt) take_phase(e);
    });
    result.status = *run.status;
    stop_deputy();
    result.ended = unix_now();
    // The scancels that ended steps: those done are reaped; one still waiting for a lost node
    // goes on (killed, if still running, when jobkit run ends).
    std::erase_if(ending_, [](detail::child_process& c) { return c.try_reap().has_value(); });
    if (const auto signal = forwarding_.take()) result.late_signal = signal->number;
    if (result.status != 0 && result.failed == 0) result.failed = result.ended;
    result.productive_from = result.first_step_done > 0 ? result.first_step_done
                             : result.world_ready > 0   ? result.world_ready
                                                        : result.started;
    return result;
  }

  /// Ends the step through Slurm (its tasks everywhere); srun itself is killed later if it does
  /// not return, or now when the step is not known.
  void end_this_step(const step_result& result, detail::child_process& child) {
    auto scancel =
        result.step_id.empty() ? std::optional<detail::child_process>() : start_ending_step(job_, result.step_id);
    if (scancel) {
      ending_.push_back(std::move(*scancel));
    } else {
      child.signal(SIGKILL);
    }
  }

  void report_hang(const step_result& result, int attempt) {
    const auto rank = detail::json_field(result.hang, "rank");
    const auto host = detail::json_text_field(result.hang, "host");
    say(
        fmt::format("job {} step attempt {}: rank {} on {} made no progress past its bound ({}): where every rank "
                    "is, then the step is ended",
                    job_, attempt, rank, host, result.hang));
    const auto where = detail::run_bounded({self_program(), "where", job_}, std::chrono::seconds(60));
    const auto report = where.out + where.err;
    try {
      write_whole(state_.dir() / fmt::format("where-{}.txt", attempt), report);
    } catch (const std::exception&) {
    }
    (void)detail::write_file_all(STDERR_FILENO, report.data(), report.size());
  }

  detail::restart_entry failure_entry(const step_result& result, int attempt, const std::vector<std::string>& nodes) {
    detail::restart_entry entry;
    entry.attempt = attempt;
    entry.at.failed = result.failed;
    entry.at.step_ended = result.ended;
    const auto [checkpoint, committed] = newest_checkpoint(args_.checkpoints);
    entry.checkpoint = checkpoint;
    entry.stragglers = result.stragglers;
    // A persistent straggler (named by two straggler lines or more of the failed step), blamed
    // with --blame-stragglers: the next step runs without its node.
    if (args_.blame_stragglers) {
      for (const auto& [node, times] : result.straggler_nodes) {
        if (times >= 2 && std::find(nodes.begin(), nodes.end(), node) != nodes.end()) {
          state_.add_bad(node, fmt::format("a persistent straggler: named in {} straggler lines", times));
          say(fmt::format("node {}: a persistent straggler ({} straggler lines): blamed (--blame-stragglers)", node,
                          times));
        }
      }
    }
    entry.wasted = std::max(0.0, result.failed - std::max(committed, result.productive_from));
    std::optional<detail::blame> blamed;
    if (!result.hang.empty()) {
      entry.cause = "hang";
      // Where the ranks that hang in their own code are, when they are on one node (ranks that
      // wait in a collective for a stopped one name no node: `jobkit where` says which it is); a
      // hang is blamed on a node only where it repeats there.
      if (result.hung_outside.size() == 1) entry.where = *result.hung_outside.begin();
      blamed = record_crash_node(entry.where, "hung twice: two steps hung with a rank on this node");
    } else if (auto lost = detail::lost_nodes_of(result.evidence),
               unlaunched = detail::unlaunched_nodes_of(result.evidence);
               !lost.empty() || !unlaunched.empty()) {
      // Nodes the evidence names for what they are (lost; no step starts there): blamed at once.
      const auto& named = lost.empty() ? unlaunched : lost;
      entry.cause = !lost.empty() ? (lost.size() == 1 ? "lost node" : "lost nodes") : "launch failed";
      std::vector<std::string> names;
      for (const auto& b : named) {
        names.push_back(b.node);
        if (std::find(nodes.begin(), nodes.end(), b.node) != nodes.end()) state_.add_bad(b.node, b.why);
      }
      entry.where = comma_list(names);
      entry.blamed = entry.where;
      entry.blame_why = named.front().why;
      return entry;
    } else {
      entry.cause = fmt::format("crash (status {})", result.status);
      entry.where = detail::crash_node(result.evidence);
      blamed = record_crash_node(entry.where, "");
    }
    if (blamed && std::find(nodes.begin(), nodes.end(), blamed->node) != nodes.end()) {
      entry.blamed = blamed->node;
      entry.blame_why = blamed->why;
      state_.add_bad(blamed->node, blamed->why);
    }
    return entry;
  }

  /// The restart of an earlier start of this job whose `jobkit run` never ended (its record of
  /// running is still there: its node was lost with the batch script, or it was killed): the nodes
  /// that its steps' ranks named lost (their failure events) are blamed, and its own node when
  /// Slurm reports it unusable. nullopt when the earlier run ended (or there was none). Then
  /// records this one as running; the record is removed when it ends (supervisor's destructor).
  std::optional<detail::restart_entry> previous_supervisor() {
    const auto file = state_.dir() / "running";
    const auto text = read_small_file(file, 4096);
    host_ = detail::process_environment().get("SLURMD_NODENAME").value_or("");
    if (host_.empty()) {
      char name[256] = {};
      if (::gethostname(name, sizeof name - 1) == 0) host_ = name;
    }
    write_whole(file, fmt::format("{}\t{}\t{}\n", host_, static_cast<std::int64_t>(unix_now()), state_.attempts()));
    running_ = file;
    if (text.empty()) return std::nullopt;
    // "HOST<TAB>STARTED<TAB>FIRST_ATTEMPT"
    std::istringstream in(text);
    std::string host, started, first;
    std::getline(in, host, '\t');
    std::getline(in, started, '\t');
    std::getline(in, first);
    std::string_view rest = first;
    const auto first_attempt = detail::take_decimal(rest).value_or(0);
    detail::step_evidence evidence;
    double failed = 0;
    int last_attempt = first_attempt;
    // The file's last 16 MiB (a long job's events; the earlier run's are its last).
    const auto events_file = state_.dir() / "events.jsonl";
    std::error_code ec;
    const auto size = fs::file_size(events_file, ec);
    constexpr std::uintmax_t tail = 16 << 20;
    event_reader events(events_file, ec || size < tail ? 0 : size - tail);
    for (std::uintmax_t read = 0; read < tail;) {
      const auto n = events.read([&](const detail::step_event& e) {
        if (e.attempt < first_attempt) return;
        last_attempt = std::max(last_attempt, e.attempt);
        if (!add_failure(evidence, e)) return;
        if (failed == 0 || e.time < failed) failed = e.time;
      });
      if (n == 0) break;
      read += n;
    }
    say(
        fmt::format("job {}: the jobkit run of an earlier start of this job (on {}, attempt {}) never ended: its node "
                    "was lost with the batch script, or it was killed",
                    job_, host.empty() ? std::string("?") : host, last_attempt));
    detail::restart_entry entry;
    entry.attempt = last_attempt;
    entry.at.failed = failed;
    entry.cause = "lost batch host";
    entry.where = host;
    entry.checkpoint = newest_checkpoint(args_.checkpoints).first;
    for (const auto& b : detail::lost_nodes_of(evidence)) {
      const auto why = fmt::format("{}, in attempt {}, whose jobkit run never ended", b.why, last_attempt);
      state_.add_bad(b.node, why);
      if (entry.blamed.empty()) entry.blame_why = why;
      entry.blamed += (entry.blamed.empty() ? "" : ",") + b.node;
    }
    if (!host.empty() && !state_.is_bad(host)) {
      for (const auto& [node, slurm_state] : slurm_bad_nodes({host})) {
        const auto why =
            fmt::format("the batch host of attempt {}: its jobkit run never ended, and Slurm reports it {}",
                        last_attempt, slurm_state);
        state_.add_bad(node, why);
        entry.blame_why = why;
        entry.blamed += (entry.blamed.empty() ? "" : ",") + node;
      }
    }
    // Killed on a node that is fine (a requeue's or a pre-emption's SIGKILL after KillWait): no
    // fault of the job's, no restart.
    if (entry.blamed.empty()) return std::nullopt;
    if (!state_.is_bad(host)) entry.cause = "lost node";  // its ranks named another node, not the batch host
    state_.count_restart();
    entry.number = state_.restarts();
    return entry;
  }

  /// Says that this command is alive: its record of running touched (at most once a second).
  void heartbeat() {
    const auto now = clock::now();
    if (running_.empty() || now - last_heartbeat_ < std::chrono::seconds(1)) return;
    last_heartbeat_ = now;
    std::error_code ec;
    fs::last_write_time(running_, fs::file_time_type::clock::now(), ec);
  }

  /// The deputy (docs/recovery.md, "A lost batch host"): while a step runs, a one-task step on
  /// another node (of the step's, else of the allocation's) that requeues the job, its batch host
  /// excluded, when this command falls silent and the step's ranks named its node lost. Only
  /// beside a step: a signal that Slurm sends the job's steps once (`--signal=USR1@T`) must reach
  /// a step of the program's.
  void start_deputy(const std::vector<std::string>& step_nodes) {
    std::string node;
    const std::vector<std::string>* const lists[] = {&step_nodes, &allocation_};
    for (const auto* list : lists) {
      for (const auto& n : *list) {
        if (node.empty() && n != host_ && !state_.is_bad(n)) node = n;
      }
    }
    if (node.empty() || host_.empty()) return;
    // srun's own lines (and the deputy's task's) are not the step's: the deputy writes its
    // record, deputy.log, beside the job's state.
    deputy_.emplace(std::vector<std::string>{"/bin/sh", "-c", "exec \"$0\" \"$@\" </dev/null >/dev/null 2>&1",
                                             args_.command.front(), "--overlap", "--mpi=none",
                                             "--job-name=" + std::string(deputy_step_name), "--nodes=1", "--ntasks=1",
                                             "--nodelist=" + node, "--kill-on-bad-exit=0", self_program(), "run",
                                             "--deputy", host_, "--checkpoints", args_.checkpoints.string()},
                    detail::child_options{.null_stdin = true});
    if (!deputy_->started()) deputy_.reset();
  }

  /// Ends the step's deputy, not waited for (reaped at the next step's end, or waited for at this
  /// command's end).
  void stop_deputy() {
    if (!deputy_) return;
    deputy_->signal(SIGTERM);  // srun passes it to the deputy, which ends at once
    std::erase_if(old_deputies_, [](detail::child_process& c) { return c.try_reap().has_value(); });
    old_deputies_.push_back(std::move(*deputy_));
    deputy_.reset();
  }

  /// Records the node of this failure; the node blamed once the record says so.
  std::optional<detail::blame> record_crash_node(const std::string& node, const std::string& why) {
    const auto file = state_.dir() / "failure-nodes";
    auto text = read_small_file(file);
    std::vector<std::string> nodes;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line) && nodes.size() < detail::evidence_node_limit;) nodes.push_back(line);
    if (node.empty()) return std::nullopt;
    nodes.push_back(node);
    append_line(file, node);
    auto blamed = detail::repeated_crash(nodes);
    if (blamed && blamed->node == node && !why.empty()) blamed->why = why;
    return blamed && blamed->node == node ? blamed : std::nullopt;
  }

  /// Completes the restart's entry with its new step's phases, prints it and adds it to the
  /// ledger.
  void finish_entry(detail::restart_entry& entry, const step_result& next) {
    entry.at.step_started = next.started;
    entry.at.world_ready = next.world_ready;
    entry.at.checkpoint_loaded = next.checkpoint_loaded;
    entry.at.first_step_done = next.first_step_done;
    entry.source = next.source;
    ledger_.restarts.push_back(entry);
    print_entry(entry);
  }

  void print_entry(const detail::restart_entry& entry) {
    say(detail::restart_line(entry).substr(std::string_view("jobkit run: ").size()));
    append_line(state_.ledger(), detail::restart_json(job_, entry));
  }

  double productive_time(const step_result& result) const {
    const double end = result.status == 0 ? result.ended : result.failed;
    return std::max(0.0, end - result.productive_from);
  }

  bool stopped() {
    std::error_code ec;
    const auto file = args_.checkpoints / (".stopped-" + job_ + ".r" + restart_count_);
    if (!fs::exists(file, ec) || fs::file_size(file, ec) == 0) return false;
    stop_record_ = read_small_file(file, 4096);
    while (!stop_record_.empty() && (stop_record_.back() == '\n' || stop_record_.back() == ' '))
      stop_record_.pop_back();
    return true;
  }

  bool healthy(const std::vector<std::string>& nodes) {
    const auto result = detail::run_bounded(
        {args_.command.front(), "--overlap", fmt::format("--nodes={}", nodes.size()), "--nodelist=" + comma_list(nodes),
         "--ntasks-per-node=1", "--kill-on-bad-exit=0", "sh", "-c", args_.health_check},
        std::chrono::seconds(120));
    if (const auto signal = forwarding_.take()) {
      signal_in_check_ = signal->number;
      return false;
    }
    if (result.status == 0) return true;
    // A pre-emption ends the check's tasks (their step's), not the node's fault.
    if ((preempted_ = preempt_time(job_))) return false;
    detail::step_evidence evidence;
    std::istringstream in(result.err);
    for (std::string line; std::getline(in, line);) evidence.add_line(line);
    bool blamed = false;
    for (const auto& node : evidence.failed_tasks) {
      if (std::find(nodes.begin(), nodes.end(), node) == nodes.end() || state_.is_bad(node)) continue;
      state_.add_bad(node, fmt::format("the health check failed there ({})", args_.health_check));
      say(fmt::format("node {}: the health check '{}' failed: blamed", node, args_.health_check));
      blamed = true;
    }
    if (!blamed) {
      throw usage_error{fmt::format("run: the health check '{}' failed (status {}) on no node srun named: {}",
                                    args_.health_check, result.status, detail::first_line(result.err))};
    }
    return false;
  }

  int requeue(std::size_t healthy, std::size_t wanted, bool counted) {
    const auto bad = state_.bad_set();
    if (!counted && state_.restarts() >= args_.max_restarts) {
      return end(fmt::format("{} healthy nodes of the {} the step needs, and no restart left (--max-restarts {})",
                             healthy, wanted, args_.max_restarts),
                 1);
    }
    if (!counted) state_.count_restart();
    say(fmt::format("job {}: {} healthy nodes of the {} the step needs: requeueing the job with {} excluded", job_,
                    healthy, wanted, bad.empty() ? std::string("no node") : comma_list({bad.begin(), bad.end()})));
    const auto problem = requeue_excluding(job_, bad);
    if (!problem.empty()) return end("the requeue failed: " + problem, 1);
    return end("requeued", 0);
  }

  /// Pre-empted between steps: requeued (Slurm's requeue of a pre-emption comes only at the end
  /// of its GraceTime, and a batch script that ends first would end the job); not a restart.
  int stop_for_preemption() {
    say(fmt::format("job {}: Slurm is pre-empting the job (PreemptTime {}): no new step; requeueing it", job_,
                    *preempted_));
    const auto problem = requeue_excluding(job_, state_.bad_set());
    if (!problem.empty()) return end("pre-empted between steps; the requeue failed: " + problem, 1);
    return end("pre-empted between steps: requeued", 0);
  }

  int stop_by_signal(int number) {
    return end(fmt::format("signal {} between steps (a pre-emption, scancel): no new step", number), 128 + number);
  }

  /// The restart whose next step never started (too few nodes, a signal, jobkit run's end): into
  /// the ledger as it is known.
  void record_pending() {
    if (!pending_) return;
    ledger_.restarts.push_back(*pending_);
    print_entry(*pending_);
    pending_.reset();
  }

  int end(const std::string& outcome, int status) {
    record_pending();
    ledger_.outcome = outcome;
    ledger_.ended = unix_now();
    say(attempt_ < 0 ? fmt::format("job {}: {}", job_, outcome)
                     : fmt::format("job {} attempt {}: {}", job_, attempt_, outcome));
    append_line(state_.ledger(), detail::run_json(ledger_));
    print_error_line(detail::ledger_summary(ledger_));
    return status;
  }

  run_args args_;
  std::string job_;
  std::vector<std::string> allocation_;
  job_state state_;
  std::string restart_count_;
  detail::signal_forwarder forwarding_{forwarded_signals, srun_lacks_it};
  detail::job_ledger ledger_;
  std::vector<std::int64_t> newest_at_failures_;
  int attempt_ = -1;                         // the last step's
  std::list<detail::child_process> ending_;  // scancels of ended steps, reaped as they end
  std::string stop_record_;
  std::optional<detail::restart_entry> pending_;  // the restart whose next step is being started or watched
  int signal_in_check_ = 0;                       // a signal that came while the health check ran
  std::optional<std::string> preempted_;          // Slurm's PreemptTime, once seen
  clock::time_point last_heartbeat_{};
  std::optional<detail::child_process> deputy_;    // the running step's deputy's srun
  std::list<detail::child_process> old_deputies_;  // ended steps' deputies, reaped as they end
  std::string host_;                               // the node this command runs on (the batch host)
  fs::path running_;                               // its record of running, removed when it ends

 public:
  ~supervisor() {
    std::error_code ec;
    if (!running_.empty()) fs::remove(running_, ec);  // a deputy that outlives its srun ends within a second
    stop_deputy();
    const auto until = clock::now() + std::chrono::seconds(2);
    for (auto& c : old_deputies_) {
      if (!c.reaped()) c.wait_until(until);
    }
  }
};

}  // namespace

/// `jobkit run --deputy HOST --checkpoints DIR`, started by jobkit run as a step of one task on
/// another node: while the record of running that jobkit run keeps on HOST is the one it found at
/// its start, watches it and the step's failure events; when the record has been silent for 10 s
/// and the ranks named HOST lost, blames HOST and requeues the job with its bad nodes excluded
/// (Slurm keeps a --no-kill job whose batch host is lost allocated, without its script, until its
/// time limit). Ends when the record goes (jobkit run ended) or changes.
int run_deputy(const std::string& host, const fs::path& checkpoints) {
  const auto job = detail::process_environment().get("SLURM_JOB_ID").value_or("");
  if (job.empty() || host.empty()) throw usage_error{"run: --deputy needs SLURM_JOB_ID and the batch host"};
  const auto dir = checkpoints / (".jobkit-run-" + job);
  const auto running = dir / "running";
  const auto record = read_small_file(running, 4096);
  if (record.empty() || !record.starts_with(host + '\t')) return 0;
  const auto log = [&](const std::string& line) { append_line(dir / "deputy.log", "jobkit run deputy: " + line); };
  // Signals Slurm sends every step of the job (--signal, scancel --signal) are the program's;
  // SIGTERM (jobkit run's end, a pre-emption, a requeue) ends the deputy.
  for (const int number : {SIGUSR1, SIGUSR2, SIGHUP, SIGINT, SIGQUIT}) ::signal(number, SIG_IGN);
  std::error_code ec;
  event_reader events(dir / "events.jsonl");
  detail::step_evidence evidence;
  while (true) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (read_small_file(running, 4096) != record) return 0;  // ended, or another start's
    events.read([&](const detail::step_event& e) { add_failure(evidence, e); });
    const auto touched = fs::last_write_time(running, ec);
    if (ec) continue;
    const auto silent = std::chrono::duration<double>(fs::file_time_type::clock::now() - touched).count();
    if (silent < 10) continue;
    const auto lost = detail::lost_nodes_of(evidence);
    const auto named = std::find_if(lost.begin(), lost.end(), [&](const detail::blame& b) { return b.node == host; });
    if (named == lost.end()) continue;
    // The requeue signals every step of the job, this one too: its SIGTERM must not end it halfway.
    ::signal(SIGTERM, SIG_IGN);
    job_state state(checkpoints, job);
    state.add_bad(host, fmt::format("{}; the batch host: its jobkit run silent for {:.0f} s", named->why, silent));
    auto bad = state.bad_set();
    log(
        fmt::format("the batch host {} is lost ({}; jobkit run there silent for {:.0f} s): requeueing job {} with {} "
                    "excluded",
                    host, named->why, silent, job, comma_list({bad.begin(), bad.end()})));
    const auto problem = requeue_excluding(job, bad);
    log(problem.empty() ? std::string("requeued") : "the requeue failed: " + problem);
    return problem.empty() ? 0 : 1;
  }
}

int run_run(const std::vector<std::string_view>& args) {
  if (args.size() == 4 && args[0] == "--deputy" && args[2] == "--checkpoints") {
    return run_deputy(std::string(args[1]), std::string(args[3]));
  }
  for (const auto arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      std::fputs(run_usage.data(), stdout);
      return 0;
    }
  }
  auto parsed = parse_run_args(args);
  auto allocation = allocation_nodes();
  if (static_cast<std::size_t>(parsed.spares) >= allocation.size()) {
    throw usage_error{
        fmt::format("run: --spare-nodes={} (SPARE_NODES in the templates) leaves no node for the step: "
                    "the allocation has {} nodes ({})",
                    parsed.spares, allocation.size(), comma_list(allocation))};
  }
  if (parsed.min_nodes && static_cast<std::size_t>(*parsed.min_nodes) > allocation.size() - parsed.spares) {
    throw usage_error{
        fmt::format("run: --min-nodes={} is more than the step's {} nodes (the allocation's {} less "
                    "--spare-nodes={})",
                    *parsed.min_nodes, allocation.size() - parsed.spares, allocation.size(), parsed.spares)};
  }
  // A step on fewer nodes than the allocation keeps the tasks per node of the job (or of srun's
  // options): a job that gives only a total of tasks says nothing of them.
  const auto& env = detail::process_environment();
  if ((parsed.spares > 0 || parsed.min_nodes) && !parsed.tasks_given && !parsed.per_node_given &&
      !env.get("SLURM_NTASKS_PER_NODE") && env.get("SLURM_NTASKS")) {
    throw usage_error{
        fmt::format("run: --spare-nodes={} runs the step on fewer nodes than the allocation, and the job "
                    "gives its tasks as a total (SLURM_NTASKS={}) without --ntasks-per-node: give "
                    "--ntasks-per-node (to sbatch or to srun)",
                    parsed.spares, *env.get("SLURM_NTASKS"))};
  }
  ::signal(SIGPIPE, SIG_IGN);
  const auto job = *env.get("SLURM_JOB_ID");
  supervisor s(std::move(parsed), job, std::move(allocation));
  return s.run();
}

}  // namespace jobkit::cli
