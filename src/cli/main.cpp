// The jobkit command: job-step helpers for shell scripts and sbatch templates.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "jobkit/jobkit.hpp"

namespace {

constexpr std::string_view main_usage =
    "usage: jobkit [--help] [--version] <command> [<args>]\n"
    "\n"
    "Job-step helpers backed by the launcher's PMIx server (srun --mpi=pmix, mpirun).\n"
    "\n"
    "commands:\n"
    "  info     print this process's identity in the job step\n"
    "\n"
    "Run 'jobkit <command> --help' for a command's options. Environment variables:\n"
    "docs/environment.md.\n";

constexpr std::string_view info_usage =
    "usage: jobkit info [--json] [--help]\n"
    "\n"
    "Print this process's identity: rank, world size, local rank, local world size, node rank,\n"
    "number of nodes, hostname, job and step id, and where they came from (pmix, slurm, torchrun,\n"
    "default). Run it under srun to see every rank: srun --mpi=pmix -N2 -n4 jobkit info\n"
    "\n"
    "options:\n"
    "  --json   one JSON object per line\n"
    "  --help   show this help\n";

/// Bad input or a bad environment: one line on stderr, exit status 2.
struct usage_error {
  std::string message;
};

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
  if (command == "info") return run_info(rest);
  throw usage_error{"unknown command '" + std::string(command) + "' (see jobkit --help)"};
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    return run(args);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "jobkit: %s\n", e.message.c_str());
  } catch (const jobkit::error& e) {
    std::fprintf(stderr, "jobkit: %s\n", e.what());
  }
  return 2;
}
