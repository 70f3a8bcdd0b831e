// jobkit doctor: a preflight for a job step, one row per rank gathered on rank 0.
#include <dlfcn.h>
#include <sched.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli.hpp"
#include "core/environment.hpp"
#include "core/shared_library.hpp"
#include "jobkit/jobkit.hpp"
#include "pmix/versions.hpp"
#include "preemption/slurm_api.hpp"
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
    "all_reduce that is wrong. It also prints the PMIx client and server versions and the Slurm\n"
    "release each rank sees, and warns on known-bad combinations (warnings do not fail it); when\n"
    "PMIx_Init fails or hangs (JOBKIT_PMIX_INIT_TIMEOUT), it prints them before the error.\n"
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

/// The Slurm release on this node, without slurm_init in this process (it ends the process when no
/// Slurm configuration is reachable, as in many containers): `srun --version` in a child gives the
/// full release (srun reads its configuration first, and may retry for a minute when it finds none:
/// bounded to 5 s); else libslurm's slurm_api_version() (dlopen, no other call), which is the API
/// number, from which only the release series follows (libslurm.so.42 is 24.11).
void find_slurm(detail::launcher_versions& versions) {
  if (FILE* pipe = ::popen("timeout 5 srun --version 2>/dev/null", "r")) {
    char line[256] = {};
    const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
    ::pclose(pipe);
    if (const auto found = read ? detail::parse_release(line) : std::nullopt; found && found->patch >= 0) {
      versions.slurm = fmt::format("{}.{:02}.{}", found->major, found->minor, found->patch);
      versions.slurm_origin = "srun --version";
      return;
    }
  }
  // The same libraries jobkit's time_left() looks for, the first with slurm_api_version.
  auto request = detail::libslurm_request();
  request.probe = "slurm_api_version";
  request.mode = RTLD_LAZY | RTLD_LOCAL;
  static constexpr std::pair<int, const char*> series[] = {{37, "21.08"}, {38, "22.05"}, {39, "23.02"},
                                                           {40, "23.11"}, {41, "24.05"}, {42, "24.11"},
                                                           {43, "25.05"}, {44, "25.11"}, {45, "26.05"}};
  for (const auto& name : detail::library_candidates(request)) {
    auto one = request;
    one.soname = name;
    one.also.clear();
    std::vector<detail::library_failure> failures;
    const auto library = detail::try_open_shared_library(one, failures);
    if (!library) continue;
    long (*api_version)() = nullptr;
    std::vector<std::string> missing;
    detail::look_up(api_version, *library, "slurm_api_version", missing);
    if (api_version == nullptr) continue;
    const long api = api_version();
    const int current = static_cast<int>((api >> 16) & 0xff);
    versions.slurm_origin =
        fmt::format("{}: slurm_api_version() {}.{}.{}", name, current, (api >> 8) & 0xff, api & 0xff);
    for (const auto& [number, release] : series) {
      if (number == current) versions.slurm = release;
    }
    if (!versions.slurm) versions.slurm_origin += ", a release this jobkit does not know";
    return;  // libslurm stays loaded: unloading it is not known to be safe
  }
  versions.slurm_origin = "no srun on PATH and no libslurm found";
}

detail::launcher_versions seen_versions() {
  auto versions = detail::pmix_versions(detail::process_environment());
  find_slurm(versions);
  return versions;
}

/// The lines of the versions seen, and the advice on them, each prefixed.
std::string versions_report(const detail::launcher_versions& versions) {
  std::string text = fmt::format(
      "pmix: client {}; server {}; PMIX_GDS_MODULE={}; PMIX_MCA_gds={}\n", versions.pmix_client,
      versions.pmix_server ? fmt::format("{} (PMIX_VERSION)", *versions.pmix_server) : "unknown (no PMIX_VERSION)",
      versions.gds_module.value_or("(unset)"), versions.mca_gds.value_or("(unset)"));
  text += fmt::format("slurm: {} ({})\n", versions.slurm.value_or("unknown"), versions.slurm_origin);
  for (const auto& advice : detail::advise(versions)) {
    text += fmt::format("{}: {}\n", advice.warning ? "warning" : "note", advice.text);
  }
  return text;
}

/// What a rank reports of its launcher's versions, compared across ranks.
std::string versions_summary(const detail::launcher_versions& versions) {
  return fmt::format("pmix client {}, server {}, slurm {}", versions.pmix_client,
                     versions.pmix_server.value_or("unknown"), versions.slurm.value_or("unknown"));
}

/// One rank's row: rank, host, local rank, node, GPUs seen, device, uuid, pci, cpus, nccl version,
/// NCCL phases (text), problems (text, empty when none), launcher versions (versions_summary).
using row = std::tuple<int, std::string, int, int, std::string, int, std::string, std::string, std::string, std::string,
                       std::string, std::string, std::string>;

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
  // Before the identity: when PMIx_Init fails or hangs, the versions are what explains it.
  const auto versions = seen_versions();
  const jobkit::identity* found = nullptr;
  try {
    found = &current_identity();
  } catch (const error&) {
    const auto launched_rank = detail::process_environment().get("PMIX_RANK");
    if (!launched_rank || *launched_rank == "0") {
      std::printf("jobkit doctor: no identity (the error follows)\n%s", versions_report(versions).c_str());
      std::fflush(stdout);
    }
    throw;
  }
  const auto& id = *found;
  row mine{id.rank,
           id.hostname,
           id.local_rank,
           id.node_rank,
           "n/a (built without CUDA)",
           -1,
           "",
           "",
           cpu_affinity(),
           "n/a",
           "",
           "",
           versions_summary(versions)};
  auto& [rank, host, local_rank, node, gpus, device, uuid, pci, cpus, version, phases, problems, launcher] = mine;
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
    std::printf("%s", versions_report(versions).c_str());
    for (const auto& r : rows) {
      if (std::get<12>(r) != launcher) {
        std::printf("warning: rank %d (%s) sees other versions than rank 0: %s\n", std::get<0>(r),
                    std::get<1>(r).c_str(), std::get<12>(r).c_str());
      }
    }
    std::printf("%5s  %-12s %5s %4s %5s %6s  %-40s %-14s %-12s %-8s %s\n", "rank", "host", "local", "node", "gpus",
                "device", "uuid", "pci", "cpus", "nccl", "nccl check");
    for (const auto& [r, h, l, n, g, d, u, p, c, v, ph, pr, ls] : rows) {
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
