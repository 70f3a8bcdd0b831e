// Shell helpers for sbatch scripts (on-main, once-per-node, n-at-a-time, zero-first) and the
// torch launcher bridge (exec, env).
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli.hpp"
#include "core/child_process.hpp"
#include "jobkit/jobkit.hpp"
#include "network/fabric.hpp"

namespace jobkit::cli {
namespace {

constexpr std::string_view helpers_usage =
    "usage: jobkit on-main [--timeout S] -- CMD [ARGS...]\n"
    "       jobkit once-per-node [--timeout S] -- CMD [ARGS...]\n"
    "       jobkit n-at-a-time N [--timeout S] -- CMD [ARGS...]\n"
    "       jobkit zero-first [--local] [--timeout S] -- CMD [ARGS...]\n"
    "\n"
    "Run CMD on some ranks of the step while the others wait, e.g. in an sbatch script:\n"
    "  srun --mpi=pmix jobkit once-per-node -- rsync -a /shared/data/ /tmp/data/\n"
    "\n"
    "  on-main        rank 0 runs CMD\n"
    "  once-per-node  local rank 0 of every node runs CMD\n"
    "  n-at-a-time N  every rank runs CMD, at most N at a time, spread over the nodes\n"
    "  zero-first     rank 0 runs CMD first, then every other rank (--local: local rank 0 of every\n"
    "                 node first, then all the other ranks, once every node's first run ended)\n"
    "\n"
    "CMD runs without the PMIX_* and PMI_* variables (it is not a rank of the step). It receives the signals\n"
    "its jobkit process receives (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT: Slurm's\n"
    "pre-emption, scancel --signal, sbatch --signal), and SIGKILL when its jobkit process dies.\n"
    "Every rank exits with status 0 when CMD succeeded wherever it ran. When it failed somewhere,\n"
    "every rank prints where and how, and exits with that command's status (128 + N for signal N);\n"
    "later rounds do not start.\n"
    "\n"
    "options:\n"
    "  --timeout S  how long a rank waits for the others (default: JOBKIT_TIMEOUT, else 1800)\n";

constexpr std::string_view exec_usage =
    "usage: jobkit exec [--overwrite] [--timeout S] -- CMD [ARGS...]\n"
    "       jobkit env [--overwrite] [--timeout S]\n"
    "\n"
    "Set the torch.distributed env:// variables from the launcher, then run CMD in place of\n"
    "jobkit (exec) or print them as shell export lines (env):\n"
    "  RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK  from PMIx (exact for any layout)\n"
    "  MASTER_ADDR  rank 0's first data path address (JOBKIT_SOCKET_IFNAME selects the interface),\n"
    "               or JOBKIT_MASTER_ADDR when set; checked to resolve on every rank\n"
    "  GLOO_SOCKET_IFNAME  unless set: the interface of this rank's first data path address\n"
    "  MASTER_PORT  a port free on rank 0's host now, chosen by rank 0 and shared with all ranks:\n"
    "               no port derived from the job id, so steps and jobs never collide\n"
    "  srun --mpi=pmix -N2 -n8 jobkit exec -- python3 train.py\n"
    "\n"
    "If any of these variables is already set, jobkit refuses and names it, unless --overwrite.\n"
    "exec replaces jobkit with CMD (same process): CMD receives Slurm's signals itself.\n"
    "\n"
    "options:\n"
    "  --overwrite  replace variables that are already set\n"
    "  --timeout S  how long a rank waits for the others (default: JOBKIT_TIMEOUT, else 1800)\n";

/// How a command ended on one rank: (rank, host, status, description); status 0 is success.
using outcome = std::tuple<int, std::string, int, std::string>;

std::string join_command(const std::vector<std::string>& command) {
  std::string text;
  for (const auto& part : command) text += (text.empty() ? "" : " ") + part;
  return text;
}

/// Runs the command as a child process and describes how it ended. The child gets the stop
/// signals this process gets (core/child_process: detail::stop_signals), and SIGKILL if this
/// process dies first (PR_SET_PDEATHSIG): it never outlives the step.
std::pair<int, std::string> run_command(const std::vector<std::string>& command) {
  // CMD is not a rank of the step: it must not connect to the PMIx (or PMI-2: PMI_FD, PMI_RANK,
  // ...) server as this process.
  std::vector<std::string> environment;
  for (char** variable = environ; *variable; ++variable) {
    const std::string_view entry = *variable;
    if (!entry.starts_with("PMIX_") && !entry.starts_with("PMI_")) environment.emplace_back(entry);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  detail::signal_forwarder forwarding(detail::stop_signals);
  detail::child_process child(command, {.environment = &environment, .die_with_parent = true});
  if (!child.started()) {
    return {127, fmt::format("cannot run '{}': {}", command.front(), child.start_error())};
  }
  const int status = child.wait(&forwarding);
  const int signal = child.end_signal();
  if (signal == 0) return {status, fmt::format("exit status {}", status)};
  return {status, fmt::format("killed by signal {} ({})", signal, ::strsignal(signal))};
}

struct helper_args {
  call_options options;
  bool local = false;
  int n = 0;
  std::vector<std::string> command;
};

helper_args parse_helper_args(std::string_view name, const std::vector<std::string_view>& args, bool wants_n) {
  helper_args parsed;
  std::size_t i = 0;
  if (wants_n) {
    if (args.empty() || args[0] == "--")
      throw usage_error{fmt::format("{}: N is missing (see jobkit {} --help)", name, name)};
    const auto n = args[0];
    if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string_view::npos || n == "0" ||
        n[0] == '0') {
      throw usage_error{fmt::format("{}: N='{}' is not a positive integer", name, n)};
    }
    parsed.n = std::stoi(std::string(n));
    i = 1;
  }
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      for (++i; i < args.size(); ++i) parsed.command.emplace_back(args[i]);
      break;
    }
    if (args[i] == "--timeout") {
      parsed.options = timeout_option(option_value(args, i, name));
    } else if (args[i] == "--local" && name == "zero-first") {
      parsed.local = true;
    } else {
      throw usage_error{fmt::format("{}: unknown argument '{}' (see jobkit {} --help)", name, args[i], name)};
    }
  }
  if (parsed.command.empty())
    throw usage_error{fmt::format("{}: no command after -- (see jobkit {} --help)", name, name)};
  return parsed;
}

/// Shares every rank's outcome; on a failure anywhere, every rank reports it and returns its
/// status (the first failed rank's).
std::optional<int> first_failure(const std::string& helper, const std::vector<std::string>& command,
                                 const std::optional<outcome>& mine, call_options options) {
  const auto all = jobkit::all_gather(mine, options);
  std::optional<int> status;
  for (const auto& entry : all) {
    if (!entry || std::get<2>(*entry) == 0) continue;
    const auto& [rank, host, code, how] = *entry;
    print_error_line(
        fmt::format("jobkit {}: '{}' failed on rank {} ({}): {}", helper, join_command(command), rank, host, how));
    if (!status) status = code;
  }
  return status;
}

std::optional<outcome> run_here(const std::vector<std::string>& command) {
  const auto& id = current_identity();
  const auto [code, how] = run_command(command);
  return outcome{id.rank, id.hostname, code, how};
}

}  // namespace

int run_step_helper(std::string_view name, const std::vector<std::string_view>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(helpers_usage.data(), stdout);
    return 0;
  }
  const auto parsed = parse_helper_args(name, args, name == "n-at-a-time");
  const auto& id = current_identity();
  const std::string helper(name);
  // Connect first: the waiting ranks then wait in jobkit's data path (bounded by --timeout), not
  // in a PMIx fence bounded by Slurm's PMIx timeout.
  world().setup(parsed.options);
  std::optional<outcome> mine;
  if (name == "on-main" || name == "once-per-node") {
    if (name == "on-main" ? id.rank == 0 : id.local_rank == 0) mine = run_here(parsed.command);
    return first_failure(helper, parsed.command, mine, parsed.options).value_or(0);
  }
  if (name == "zero-first") {
    if (parsed.local ? id.local_rank == 0 : id.rank == 0) mine = run_here(parsed.command);
    if (const auto failed = first_failure(helper, parsed.command, mine, parsed.options)) return *failed;
    std::optional<outcome> rest;
    if (!mine) rest = run_here(parsed.command);
    return first_failure(helper, parsed.command, rest, parsed.options).value_or(0);
  }
  // n-at-a-time: the rounds of jobkit::do_n_at_a_time, spread over the nodes.
  const auto [my_round, rounds] = detail::n_at_a_time_round(parsed.n, parsed.options, std::source_location::current());
  for (int round = 0; round < rounds; ++round) {
    std::optional<outcome> ran;
    if (round == my_round) ran = run_here(parsed.command);
    if (const auto failed = first_failure(helper, parsed.command, ran, parsed.options)) return *failed;
  }
  return 0;
}

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    const auto why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw error(errc::internal, fmt::format("exec: cannot find a free port: {}", why));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string resolve_problem(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) return gai_strerror(rc);
  ::freeaddrinfo(found);
  return {};
}

constexpr const char* torch_variables[] = {"RANK",      "LOCAL_RANK",  "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                           "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"};

}  // namespace

int run_exec(std::string_view name, const std::vector<std::string_view>& args) {
  bool overwrite = false;
  call_options options;
  std::vector<std::string> command;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(exec_usage.data(), stdout);
      return 0;
    }
    if (args[i] == "--" && name == "exec") {
      for (++i; i < args.size(); ++i) command.emplace_back(args[i]);
      break;
    }
    if (args[i] == "--overwrite") {
      overwrite = true;
    } else if (args[i] == "--timeout") {
      options = timeout_option(option_value(args, i, name));
    } else {
      throw usage_error{fmt::format("{}: unknown argument '{}' (see jobkit {} --help)", name, args[i], name)};
    }
  }
  if (name == "exec" && command.empty()) throw usage_error{"exec: no command after -- (see jobkit exec --help)"};

  std::vector<std::string> already;
  for (const char* variable : torch_variables) {
    if (const char* value = std::getenv(variable)) already.push_back(fmt::format("{}='{}'", variable, value));
  }
  if (!already.empty() && !overwrite) {
    throw usage_error{
        fmt::format("{}: {} {} already set; jobkit sets these from the launcher (pass --overwrite to "
                    "replace them)",
                    name, fmt::join(already, ", "), already.size() == 1 ? "is" : "are")};
  }
  for (const char* variable : torch_variables) ::unsetenv(variable);  // identity comes from PMIx alone
  ::unsetenv("JOBKIT_TORCH_VARIABLES");

  std::vector<std::pair<std::string, std::string>> values;
  {
    runtime rt;  // finalised before exec: PMIx must not see this process vanish without finalising
    const auto& id = rt.identity();
    auto& g = rt.world();
    std::pair<std::string, int> master;
    const auto mine = rt.data_path_addresses().front();
    if (id.rank == 0) {
      const char* chosen = std::getenv("JOBKIT_MASTER_ADDR");
      master = {chosen && *chosen ? std::string(chosen) : mine.address, free_port()};
    }
    // gloo announces the address its host name resolves to, which Debian maps to 127.0.1.1.
    const char* gloo_interface = std::getenv("GLOO_SOCKET_IFNAME");
    if (!gloo_interface || !*gloo_interface) values.emplace_back("GLOO_SOCKET_IFNAME", mine.interface);
    master = g.broadcast(master, 0, options);
    const auto problems = g.all_gather(resolve_problem(master.first), options);
    for (int r = 0; r < static_cast<int>(problems.size()); ++r) {
      if (!problems[static_cast<std::size_t>(r)].empty()) {
        throw error(errc::invalid_environment,
                    fmt::format("{}: MASTER_ADDR='{}' (rank 0's address) does not resolve on rank {}: {}", name,
                                master.first, r, problems[static_cast<std::size_t>(r)]));
      }
    }
    values.insert(values.end(),
                  {{"RANK", std::to_string(id.rank)},
                   {"LOCAL_RANK", std::to_string(id.local_rank)},
                   {"WORLD_SIZE", std::to_string(id.world_size)},
                   {"LOCAL_WORLD_SIZE", std::to_string(id.local_world_size)},
                   {"NODE_RANK", std::to_string(id.node_rank)},
                   // What jobkit set, so that jobkit in CMD takes them on any layout
                   // (src/identity/discovery.cpp, jobkit_set_candidate).
                   {"JOBKIT_TORCH_VARIABLES", fmt::format("{},{},{},{},{},{}", id.rank, id.local_rank, id.world_size,
                                                          id.local_world_size, id.node_rank, id.num_nodes)},
                   {"MASTER_ADDR", master.first},
                   {"MASTER_PORT", std::to_string(master.second)}});
  }
  // This process took its launcher rank's turn of the data path; the program it hands the step to
  // takes the next one (src/rendezvous/endpoint_turn.hpp).
  if (name == "env") {
    for (const auto& [variable, value] : values) std::printf("export %s=%s\n", variable.c_str(), value.c_str());
    return 0;
  }
  for (const auto& [variable, value] : values) ::setenv(variable.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (auto& part : command) argv.push_back(part.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  throw usage_error{fmt::format("exec: cannot run '{}': {}", command.front(), std::strerror(errno))};
}

}  // namespace jobkit::cli
