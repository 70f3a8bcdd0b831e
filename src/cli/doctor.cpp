// jobkit doctor: a preflight for a job step, one row per rank gathered on rank 0.
#include <sched.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli.hpp"
#include "jobkit/jobkit.hpp"
#if JOBKIT_HAS_NCCL
#include "jobkit/nccl.hpp"
#endif

namespace jobkit::cli {
namespace {

constexpr std::string_view doctor_usage =
    "usage: jobkit doctor [--nccl] [--timeout S] [--help]\n"
    "\n"
    "Preflight of a job step. Every rank reports its identity, the GPUs it sees (UUID and PCI bus\n"
    "id), the GPU the device rule gives it, its CPU affinity and the NCCL version; rank 0 prints\n"
    "one row per rank and every problem found: a device rule that fails, two ranks of a node on\n"
    "one GPU, and with --nccl a rank without a GPU, a communicator that cannot start or an\n"
    "all_reduce that is wrong.\n"
    "  srun --mpi=pmix jobkit doctor --nccl\n"
    "\n"
    "options:\n"
    "  --nccl       also create an NCCL communicator over all ranks and check an all_reduce, with\n"
    "               the time of each phase (needs a GPU per rank)\n"
    "  --timeout S  deadline of each step (default: JOBKIT_TIMEOUT, else 1800)\n"
    "Exit status: 0 when no problem was found, 1 otherwise.\n";

std::string cpu_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string ranges;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    ranges += (ranges.empty() ? "" : ",") + (last == cpu ? std::to_string(cpu) : fmt::format("{}-{}", cpu, last));
    cpu = last;
  }
  return ranges;
}

/// One rank's row: rank, host, local rank, node, GPUs seen, device, uuid, pci, cpus, nccl version,
/// NCCL phases (text), problems (text, empty when none).
using row = std::tuple<int, std::string, int, int, std::string, int, std::string, std::string, std::string, std::string,
                       std::string, std::string>;

}  // namespace

int run_doctor(const std::vector<std::string_view>& args) {
  bool with_nccl = false;
  call_options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(doctor_usage.data(), stdout);
      return 0;
    }
    if (args[i] == "--nccl") {
      with_nccl = true;
    } else if (args[i] == "--timeout") {
      options = timeout_option(option_value(args, i, "doctor"));
    } else {
      throw usage_error{fmt::format("doctor: unknown argument '{}' (see jobkit doctor --help)", args[i])};
    }
  }
#if !JOBKIT_HAS_NCCL
  if (with_nccl) throw usage_error{"doctor: --nccl needs a jobkit built with CUDA and NCCL"};
#endif
  const auto& id = current_identity();
  row mine{
      id.rank, id.hostname, id.local_rank, id.node_rank, "n/a (built without CUDA)", -1, "", "", cpu_affinity(), "n/a",
      "",      ""};
  auto& [rank, host, local_rank, node, gpus, device, uuid, pci, cpus, version, phases, problems] = mine;
  [[maybe_unused]] const auto problem = [&](const std::string& text) {
    problems += (problems.empty() ? "" : "; ") + text;
  };
#if JOBKIT_HAS_NCCL
  try {
    const int nccl_version = nccl::runtime_version();
    version = fmt::format("{}.{}.{}", nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
  } catch (const error& e) {
    version = "not loadable";
    problem(e.what());
  }
  try {
    const auto devices = nccl::visible_devices();
    gpus = std::to_string(devices.size());
    device = nccl::select_device(static_cast<int>(devices.size()), id.local_rank, id.local_world_size);
    uuid = devices[static_cast<std::size_t>(device)].uuid;
    pci = devices[static_cast<std::size_t>(device)].pci_bus_id;
  } catch (const error& e) {
    // No GPU is a problem for an NCCL step only; a device rule that fails on GPUs always is.
    if (gpus.starts_with("n/a")) {
      gpus = "0";
      if (with_nccl) problem(e.what());
    } else {
      problem(e.what());
    }
  }
#endif
  auto rows = all_gather(mine, options);
#if JOBKIT_HAS_NCCL
  std::vector<nccl::device_choice> choices;
  for (const auto& r : rows) {
    if (std::get<5>(r) >= 0)
      choices.push_back({std::get<0>(r), std::get<2>(r), std::get<1>(r), std::get<5>(r), std::get<6>(r)});
  }
  const auto duplicates = nccl::duplicate_devices(choices);
  if (with_nccl) {
    bool ready = !duplicates;
    for (const auto& r : rows) ready = ready && std::get<11>(r).empty();
    if (!ready) {
      problem("NCCL check skipped: not every rank has a GPU of its own");
    } else {
      try {
        const auto start = std::chrono::steady_clock::now();
        nccl::communicator_options settings;
        settings.call = options;
        nccl::communicator comm(settings);
        const float total = comm.all_reduce_value(static_cast<float>(id.rank + 1), reduce_op::sum);
        const auto all_reduce_us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start) -
            comm.timing().device_selection - comm.timing().id_exchange - comm.timing().nccl_init;
        phases = fmt::format("select {:.1f} ms, ids {:.1f} ms, init {:.1f} ms, all_reduce {:.1f} ms",
                             comm.timing().device_selection.count() / 1e3, comm.timing().id_exchange.count() / 1e3,
                             comm.timing().nccl_init.count() / 1e3, all_reduce_us.count() / 1e3);
        const float expected = static_cast<float>(id.world_size) * (id.world_size + 1) / 2;
        if (total != expected) problem(fmt::format("NCCL all_reduce gave {} instead of {}", total, expected));
      } catch (const error& e) {
        problem(e.what());
      }
    }
    rows = all_gather(mine, options);
  }
#endif
  bool failed = false;
  for (const auto& r : rows) failed = failed || !std::get<11>(r).empty();
#if JOBKIT_HAS_NCCL
  failed = failed || duplicates.has_value();
#endif
  if (id.rank == 0) {
    std::printf("jobkit doctor: %d ranks on %d nodes, job %s step %s\n", id.world_size, id.num_nodes,
                id.job_id.empty() ? "-" : id.job_id.c_str(), id.step_id.empty() ? "-" : id.step_id.c_str());
    std::printf("%5s  %-12s %5s %4s %5s %6s  %-40s %-14s %-12s %-8s %s\n", "rank", "host", "local", "node", "gpus",
                "device", "uuid", "pci", "cpus", "nccl", "nccl check");
    for (const auto& [r, h, l, n, g, d, u, p, c, v, ph, pr] : rows) {
      std::printf("%5d  %-12s %5d %4d %5s %6s  %-40s %-14s %-12s %-8s %s\n", r, h.c_str(), l, n, g.c_str(),
                  d >= 0 ? std::to_string(d).c_str() : "-", u.empty() ? "-" : u.c_str(), p.empty() ? "-" : p.c_str(),
                  c.c_str(), v.c_str(), ph.empty() ? "-" : ph.c_str());
    }
    if (failed) std::printf("problems:\n");
    for (const auto& r : rows) {
      if (!std::get<11>(r).empty())
        std::printf("  rank %d (%s): %s\n", std::get<0>(r), std::get<1>(r).c_str(), std::get<11>(r).c_str());
    }
#if JOBKIT_HAS_NCCL
    if (duplicates) std::printf("  %s", duplicates->c_str());
#endif
    if (!failed) std::printf("no problem found\n");
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}

}  // namespace jobkit::cli
