// The jobkit command: job-step helpers for shell scripts and sbatch templates.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "core/embedder.hpp"
#include "core/posix_io.hpp"
#include "jobkit/jobkit.hpp"

void jobkit::cli::print_error_line(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::fflush(stderr);
  (void)jobkit::detail::write_file_all(STDERR_FILENO, text.data(), text.size());
}

namespace {

constexpr std::string_view main_usage =
    "usage: jobkit [--help] [--version] <command> [<args>]\n"
    "\n"
    "Job-step helpers backed by the launcher's PMIx server (srun --mpi=pmix, mpirun).\n"
    "\n"
    "commands:\n"
    "  info       print this process's identity in the job step\n"
    "  barrier    wait until every rank of the step has arrived\n"
    "  broadcast  copy the root rank's stdin to every rank's stdout\n"
    "  bench      time jobkit's collectives against the raw PMIx fence\n"
    "  on-main, once-per-node, n-at-a-time, zero-first\n"
    "             run a command on some ranks while the others wait\n"
    "  exec       run a command with RANK, WORLD_SIZE, MASTER_ADDR, ... set (torch env://)\n"
    "  env        print those variables as export lines\n"
    "  fold       print a step's output with what many ranks said once, under their ranks\n"
    "  where      where every rank of a running step is: its jobkit call, Python stack, or state\n"
    "  run        run a step and restart it inside the allocation when it fails (spares, bad nodes)\n"
    "  doctor     preflight: identity, GPUs, CPU affinity, NCCL, per rank\n"
    "  checkpoint latest, begin, commit, part, verify: a checkpoint directory never half-written\n"
    "  requeue    ask Slurm to requeue this job (this task of an array job)\n"
    "  time-left  print the seconds left before the job's time limit\n"
    "\n"
    "Run 'jobkit <command> --help' for a command's options. Environment variables:\n"
    "docs/environment.md. Exit status: 0 success, 1 a collective failed on some rank (a rank\n"
    "died, a deadline expired, ranks disagree), 2 bad usage or a bad launcher environment.\n";

constexpr std::string_view info_usage =
    "usage: jobkit info [--json] [--help]\n"
    "\n"
    "Print this process's identity: rank, world size, local rank, local world size, node rank,\n"
    "number of nodes, hostname, job and step id, and where they came from (pmix, pmi2, slurm,\n"
    "torchrun, default). Run it under srun to see every rank: srun --mpi=pmix -N2 -n4 jobkit info\n"
    "\n"
    "options:\n"
    "  --json   one JSON object per line\n"
    "  --help   show this help\n";

constexpr std::string_view barrier_usage =
    "usage: jobkit barrier [--timeout SECONDS] [--help]\n"
    "\n"
    "Return when every rank of the job step has called 'jobkit barrier'. If a rank dies or the\n"
    "deadline expires first, every rank exits with status 1 and a message naming the ranks.\n"
    "\n"
    "options:\n"
    "  --timeout SECONDS  deadline (default: JOBKIT_TIMEOUT, else 1800)\n"
    "  --help             show this help\n";

constexpr std::string_view broadcast_usage =
    "usage: jobkit broadcast [--root RANK] [--timeout SECONDS] [--help]\n"
    "\n"
    "The root rank reads its standard input to the end; every rank writes those bytes to its\n"
    "standard output. Only the root reads stdin. For example, share a run id computed once:\n"
    "  run_id=$(date +%s%N | srun --mpi=pmix jobkit broadcast)\n"
    "\n"
    "options:\n"
    "  --root RANK        the rank whose stdin is sent (default 0)\n"
    "  --timeout SECONDS  deadline (default: JOBKIT_TIMEOUT, else 1800)\n"
    "  --help             show this help\n";

using jobkit::cli::option_value;
using jobkit::cli::timeout_option;
using jobkit::cli::usage_error;

int parse_rank(std::string_view option, std::string_view value) {
  int rank = 0;
  const bool digits =
      !value.empty() && value.size() < 10 && value.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits) rank = std::stoi(std::string(value));
  if (!digits) throw usage_error{std::string(option) + "='" + std::string(value) + "' is not a rank"};
  return rank;
}

int run_barrier(const std::vector<std::string_view>& args) {
  jobkit::call_options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(barrier_usage.data(), stdout);
      return 0;
    }
    if (args[i] == "--timeout") {
      options = timeout_option(option_value(args, i, "barrier"));
    } else {
      throw usage_error{"barrier: unknown argument '" + std::string(args[i]) + "' (see jobkit barrier --help)"};
    }
  }
  jobkit::barrier(options);
  return 0;
}

std::string read_all_stdin() {
  std::string data;
  std::vector<std::byte> buffer(65536);
  const int code = jobkit::detail::read_each(STDIN_FILENO, buffer, [&](std::span<const std::byte> piece) {
    data.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  });
  if (code != 0) {
    throw jobkit::error(jobkit::errc::invalid_argument,
                        "broadcast: reading stdin: " + jobkit::detail::errno_text(code));
  }
  return data;
}

int run_broadcast(const std::vector<std::string_view>& args) {
  jobkit::call_options options;
  int root = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(broadcast_usage.data(), stdout);
      return 0;
    }
    if (args[i] == "--timeout") {
      options = timeout_option(option_value(args, i, "broadcast"));
    } else if (args[i] == "--root") {
      root = parse_rank("--root", option_value(args, i, "broadcast"));
    } else {
      throw usage_error{"broadcast: unknown argument '" + std::string(args[i]) + "' (see jobkit broadcast --help)"};
    }
  }
  const auto& id = jobkit::current_identity();
  if (root >= id.world_size) {
    throw usage_error{"broadcast: --root=" + std::to_string(root) + " is not a rank of this step (ranks 0 to " +
                      std::to_string(id.world_size - 1) + ")"};
  }
  std::string data;
  if (id.rank == root) data = read_all_stdin();
  data = jobkit::broadcast(data, root, options);
  std::fwrite(data.data(), 1, data.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_info(const std::vector<std::string_view>& args) {
  bool json = false;
  for (auto arg : args) {
    if (arg == "--help" || arg == "-h") {
      std::fputs(info_usage.data(), stdout);
      return 0;
    }
    if (arg == "--json") {
      json = true;
    } else {
      throw usage_error{"info: unknown argument '" + std::string(arg) + "' (see jobkit info --help)"};
    }
  }
  const auto& id = jobkit::current_identity();
  const std::string line = (json ? jobkit::to_json(id) : jobkit::to_string(id)) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
  return 0;
}

int run(const std::vector<std::string_view>& args) {
  if (args.empty()) throw usage_error{"no command given (see jobkit --help)"};
  const auto command = args.front();
  const std::vector<std::string_view> rest(args.begin() + 1, args.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(main_usage.data(), stdout);
    return 0;
  }
  if (command == "--version") {
    std::printf("jobkit %s\n", JOBKIT_VERSION_STRING);
    return 0;
  }
  // Every jobkit call of the command names the command as its call site (`barrier at jobkit
  // barrier`), in its errors and in `jobkit where`, rather than a line of this file.
  const jobkit::detail::call_site_override site("jobkit " + std::string(command));
  if (command == "info") return run_info(rest);
  if (command == "barrier") return run_barrier(rest);
  if (command == "broadcast") return run_broadcast(rest);
  if (command == "bench") return jobkit::cli::run_bench(rest);
  if (command == "on-main" || command == "once-per-node" || command == "n-at-a-time" || command == "zero-first") {
    return jobkit::cli::run_step_helper(command, rest);
  }
  if (command == "exec" || command == "env") return jobkit::cli::run_exec(command, rest);
  if (command == "fold") return jobkit::cli::run_fold(rest);
  if (command == "where") return jobkit::cli::run_where(rest);
  if (command == "run") return jobkit::cli::run_run(rest);
  if (command == "doctor") return jobkit::cli::run_doctor(rest);
  if (command == "checkpoint") return jobkit::cli::run_checkpoint(rest);
  if (command == "requeue") return jobkit::cli::run_requeue(rest);
  if (command == "time-left") return jobkit::cli::run_time_left(rest);
  throw usage_error{"unknown command '" + std::string(command) + "' (see jobkit --help)"};
}

}  // namespace

jobkit::call_options jobkit::cli::timeout_option(std::string_view value) {
  try {
    return {.timeout = jobkit::parse_timeout("--timeout", value)};
  } catch (const jobkit::error& e) {
    throw usage_error{e.what()};
  }
}

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    return run(args);
  } catch (const usage_error& e) {
    jobkit::cli::print_error_line("jobkit: " + e.message);
  } catch (const jobkit::error& e) {
    jobkit::cli::print_error_line(std::string("jobkit: ") + e.what());
    const bool caller_fault =
        e.code() == jobkit::errc::invalid_environment || e.code() == jobkit::errc::invalid_argument;
    return caller_fault ? 2 : 1;
  }
  return 2;
}
