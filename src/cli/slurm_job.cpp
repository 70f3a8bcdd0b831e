#include "slurm_job.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "cli.hpp"
#include "core/command.hpp"
#include "core/environment.hpp"
#include "core/host_list.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "network/dial.hpp"
#include "recovery/plan.hpp"

namespace jobkit::cli {
namespace {

constexpr auto slurm_command_limit = std::chrono::seconds(30);

/// A node address as a numeric one (a NodeAddr may be a host name), nullopt when it does not resolve.
std::optional<std::string> numeric_address(const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return std::nullopt;
  char numeric[NI_MAXHOST] = {};
  const int rc = ::getnameinfo(found->ai_addr, found->ai_addrlen, numeric, sizeof numeric, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(found);
  if (rc != 0) return std::nullopt;
  return std::string(numeric);
}

}  // namespace

std::vector<std::string> allocation_nodes() {
  const auto& env = detail::process_environment();
  const auto job = env.get("SLURM_JOB_ID");
  if (!job || job->empty()) {
    throw usage_error{
        "run: SLURM_JOB_ID is not set: jobkit run supervises a step inside a job's allocation (run "
        "it in a batch script or salloc)"};
  }
  const auto list = env.get("SLURM_JOB_NODELIST");
  if (!list || list->empty()) throw usage_error{"run: SLURM_JOB_NODELIST is not set (it names the allocation's nodes)"};
  try {
    return detail::expand_host_list("SLURM_JOB_NODELIST", *list);
  } catch (const error& e) {
    throw usage_error{std::string("run: ") + e.what()};
  }
}

std::vector<std::pair<std::string, std::string>> slurm_bad_nodes(const std::vector<std::string>& nodes) {
  std::vector<std::pair<std::string, std::string>> bad;
  if (nodes.empty()) return bad;
  const auto result =
      detail::run_bounded({"sinfo", "-h", "-N", "-n", comma_list(nodes), "-o", "%N %T"}, slurm_command_limit);
  if (result.status != 0) return bad;
  std::string_view text = result.out;
  while (!text.empty()) {
    const auto end = std::min(text.find('\n'), text.size());
    const auto line = text.substr(0, end);
    text = text.substr(std::min(end + 1, text.size()));
    const auto space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const auto node = std::string(line.substr(0, space));
    const auto state = std::string(line.substr(space + 1));
    if (detail::slurm_state_is_bad(state) &&
        std::none_of(bad.begin(), bad.end(), [&](const auto& b) { return b.first == node; })) {
      bad.emplace_back(node, state);
    }
  }
  return bad;
}

std::optional<detail::child_process> start_ending_step(const std::string& job, const std::string& step) {
  detail::child_process scancel({"scancel", "--signal=KILL", fmt::format("{}.{}", job, step)}, {.null_stdin = true});
  if (scancel.started()) return scancel;
  print_error_line(
      fmt::format("jobkit run: cannot run scancel to end step {}.{}: {}", job, step, scancel.start_error()));
  return std::nullopt;
}

std::string requeue_excluding(const std::string& job, const std::set<std::string>& excluded) {
  // The requeue has Slurm signal every process of the job (SIGCONT, SIGTERM; SIGKILL KillWait
  // later): a command that the SIGTERM ended (status 143) is run again, a few times.
  const auto step = [&](std::vector<std::string> argv) -> std::string {
    detail::command_result result;
    for (int attempt = 0; attempt < 5; ++attempt) {
      result = detail::run_bounded(argv, slurm_command_limit);
      if (result.status == 0) return {};
      if (result.status < 128 || result.status == 124) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return fmt::format("'{}' failed (status {}): {}", fmt::join(argv, " "), result.status,
                       detail::first_line(result.err + result.out));
  };
  if (auto why = step({"scontrol", "requeuehold", job}); !why.empty()) return why;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // Slurm's signals, before the next commands
  std::string problem;
  if (!excluded.empty()) {
    problem = step({"scontrol", "update", "JobId=" + job,
                    "ExcNodeList=" + comma_list(std::vector<std::string>(excluded.begin(), excluded.end()))});
  }
  if (auto why = step({"scontrol", "release", job}); !why.empty()) problem += (problem.empty() ? "" : "; ") + why;
  return problem;
}

std::optional<std::string> preempt_time(const std::string& job) {
  const auto result = detail::run_bounded({"scontrol", "show", "job", "-o", job}, slurm_command_limit);
  if (result.status != 0) return std::nullopt;
  return detail::preempt_time_of(result.out);
}

std::vector<std::pair<std::string, std::string>> unreachable_nodes(const std::vector<std::string>& nodes,
                                                                   std::chrono::milliseconds limit) {
  std::vector<std::pair<std::string, std::string>> unreachable;
  if (nodes.empty()) return unreachable;
  const auto shown = detail::run_bounded({"scontrol", "show", "node", "-o", comma_list(nodes)}, slurm_command_limit);
  if (shown.status != 0) return unreachable;
  struct probe {
    std::string node, where;
    int fd = -1;
  };
  std::vector<probe> probes;
  // One line per node: "NodeName=c2 ... NodeAddr=198.18.0.2 ... Port=6819 ...".
  for (const auto& [name, addr, port] : detail::slurmd_addresses(shown.out)) {
    if (std::find(nodes.begin(), nodes.end(), name) == nodes.end()) continue;
    const auto address = numeric_address(addr);
    if (!address) {
      unreachable.emplace_back(name, fmt::format("its address {} does not resolve", addr));
      continue;
    }
    // The data path's own dial (network/dial.hpp): begun without waiting, bounded here.
    const auto where = addr + ":" + std::to_string(port);
    auto d = detail::begin_dial(*address, port, limit);
    if (d.fd < 0) {
      unreachable.emplace_back(name, fmt::format("its slurmd at {} refused a connection: {}", where, d.why));
    } else if (d.connected) {
      ::close(d.fd);
    } else {
      probes.push_back({name, where, d.fd});
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    std::vector<pollfd> waiting;
    for (const auto& p : probes) {
      if (p.fd >= 0) waiting.push_back({p.fd, POLLOUT, 0});
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (waiting.empty() || left <= 0) break;
    if (::poll(waiting.data(), waiting.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (const auto& w : waiting) {
      if (w.revents == 0) continue;
      auto p = std::find_if(probes.begin(), probes.end(), [&](const probe& q) { return q.fd == w.fd; });
      if (const int error = detail::dial_outcome(p->fd); error != 0) {
        unreachable.emplace_back(
            p->node, fmt::format("its slurmd at {} refused a connection: {}", p->where, detail::errno_text(error)));
      }
      ::close(p->fd);
      p->fd = -1;
    }
  }
  for (auto& p : probes) {
    if (p.fd < 0) continue;
    unreachable.emplace_back(
        p.node, fmt::format("its slurmd at {} took no connection from this node in {} ms", p.where, limit.count()));
    ::close(p.fd);
  }
  return unreachable;
}

std::string comma_list(const std::vector<std::string>& nodes) { return fmt::format("{}", fmt::join(nodes, ",")); }

}  // namespace jobkit::cli
