// jobkit's workspace and node_local_gather under a real launcher, through the public API only.
// ROOT is a directory on the file system every node shares. Modes:
//   gather-cross ROOT   a gather of all ranks to rank 5 (another node), sizes differing per rank:
//                       once through collectives, once through a workspace
//   gather-node         each node's ranks gather to their first rank, and an explicit list of the
//                       first node's ranks in reverse order: through shared memory
//   race ROOT N         the last rank overwrites its state N times while rank 0 reads it: every
//                       read must be a complete state
//   steps ROOT ROUNDS   rounds of workspace exchanges and node gathers; two steps of one job run
//                       this at the same time and must each see only their own step's data (each
//                       goes on past ROUNDS until the other is halfway: ROOT.half-STEP)
//   kill                the last rank (on the first rank's node) dies by SIGKILL while it writes
//                       its shared memory segment
//   blocked             the last rank's segment name is taken by a directory: the gather fails
//   exit-before         the last rank exits before the gather
//   missing ROOT        every rank reads a state that nobody writes, with a 1 s deadline
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "jobkit/jobkit.hpp"
#include "test_support.hpp"

using namespace std::chrono;
namespace fs = std::filesystem;

namespace {

/// The state rank r contributes under `label` (a step, a round, a sequence number): the config
/// names both, the payload's bytes depend on both, its size on the rank.
jobkit::rank_state expected_state(int r, const std::string& label, std::size_t size) {
  jobkit::rank_state s{"{\"rank\": " + std::to_string(r) + ", \"label\": \"" + label + "\"}",
                       std::vector<std::byte>(size)};
  const std::uint64_t seed = mix(std::hash<std::string>{}(s.config));
  for (std::size_t i = 0; i < size; ++i) s.payload[i] = static_cast<std::byte>(mix(seed + i / 8) >> (8 * (i % 8)));
  return s;
}

/// Sizes that differ per rank: nothing, one byte, a few KiB, 3 MiB.
std::size_t size_of(int r) {
  switch (r % 4) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 4096 + static_cast<std::size_t>(r);
    default: return (std::size_t{3} << 20) + static_cast<std::size_t>(r);
  }
}

std::string job_step() {
  const auto& id = jobkit::current_identity();
  return id.job_id + "." + id.step_id;
}

/// Checks a gather's result on this rank: on the first member every member's state, elsewhere
/// nothing. Returns the number of wrong states and prints one line.
int check_gather(const char* what, jobkit::group& g, const jobkit::gather_result& result, const std::string& label) {
  int bad = 0;
  if (g.rank() == 0) {
    if (result.states.size() != static_cast<std::size_t>(g.size())) bad = g.size();
    for (int i = 0; bad == 0 && i < g.size(); ++i) {
      const int r = g.world_ranks()[static_cast<std::size_t>(i)];
      if (result.states[static_cast<std::size_t>(i)] != expected_state(r, label, size_of(r))) ++bad;
    }
  } else if (!result.states.empty()) {
    bad = 1;
  }
  std::printf("rank %d: %s route %s, %s, %d bad states\n", jobkit::rank(), what,
              std::string(jobkit::to_string(result.route)).c_str(),
              g.rank() == 0 ? ("gathered " + std::to_string(result.states.size())).c_str() : "sent", bad);
  return bad;
}

jobkit::gather_result gather(jobkit::group& g, const std::string& label, jobkit::gather_options options = {}) {
  const int me = jobkit::rank();
  const auto mine = expected_state(me, label, size_of(me));
  return jobkit::node_local_gather(mine.config, mine.payload, g, options);
}

int gather_cross(const fs::path& root) {
  const auto& id = jobkit::current_identity();
  // Rank 5 first (on the second node), then the others in order.
  std::vector<int> ranks{5};
  for (int r = 0; r < id.world_size; ++r) {
    if (r != 5) ranks.push_back(r);
  }
  auto g = jobkit::make_group(ranks);
  int bad = check_gather("cross-node (no workspace)", g, gather(g, "cross"), "cross");
  bad += check_gather("cross-node (workspace)", g, gather(g, "cross", {.workspace = root, .collective_max_bytes = 0}),
                      "cross");
  return bad == 0 ? 0 : 1;
}

int gather_node() {
  const auto& id = jobkit::current_identity();
  // Sets up the data path on every rank: a rank alone on its node gathers without it, and the
  // other nodes' setup would wait for that rank.
  jobkit::barrier();
  auto& node = jobkit::node_group();
  int bad = check_gather("node group", node, gather(node, "node"), "node");
  if (id.node_rank == 0) {
    std::vector<int> reversed(node.world_ranks().rbegin(), node.world_ranks().rend());
    auto g = jobkit::make_group(reversed);
    bad += check_gather("reversed node list", g, gather(g, "reversed"), "reversed");
  }
  return bad == 0 ? 0 : 1;
}

int race(const fs::path& root, std::uint64_t writes) {
  const auto& id = jobkit::current_identity();
  const int writer = id.world_size - 1;
  jobkit::workspace ws(root);
  const auto size = [](std::uint64_t n) { return static_cast<std::size_t>(mix(n) % 300000); };
  if (id.rank == writer) {
    for (std::uint64_t n = 1; n <= writes; ++n) {
      const auto s = expected_state(writer, std::to_string(n), size(n));
      ws.write(s.config, s.payload);
    }
    std::printf("rank %d: wrote %llu states\n", id.rank, static_cast<unsigned long long>(writes));
  } else if (id.rank == 0) {
    long reads = 0, partial = 0, distinct = 0;
    std::uint64_t last = 0;
    while (last != writes) {
      const auto s = ws.read(writer, {.timeout = seconds(60)});
      ++reads;
      const auto at = s.config.find("\"label\": \"");
      const auto n = at == std::string::npos ? 0 : std::strtoull(s.config.c_str() + at + 10, nullptr, 10);
      if (n == 0 || s != expected_state(writer, std::to_string(n), size(n))) {
        ++partial;
        continue;
      }
      if (n != last) ++distinct;
      last = n;
    }
    std::printf("rank %d: %ld reads of rank %d's state on %s, %ld distinct states, %ld partial\n", id.rank, reads,
                writer, ws.path_of(writer).string().c_str(), distinct, partial);
    if (partial != 0) return 1;
  }
  jobkit::barrier();
  return 0;
}

int steps(const fs::path& root, int rounds) {
  const auto& id = jobkit::current_identity();
  auto& node = jobkit::node_group();
  jobkit::workspace ws(root);
  const auto epoch_ms = [] { return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count(); };
  const auto start = epoch_ms();
  // The two steps start seconds apart on a loaded machine (srun's start): each goes on past ROUNDS
  // until the other has done half of its own (a marker of its rank 0 next to ROOT) or 60 s have
  // passed, so that they run at the same time for at least half of the later one's rounds.
  const auto prefix = root.filename().string() + ".half-";
  const auto other_halfway = [&] {
    for (const auto& entry : fs::directory_iterator(root.parent_path())) {
      const auto name = entry.path().filename().string();
      if (name.starts_with(prefix) && name != prefix + id.step_id) return true;
    }
    return false;
  };
  long foreign = 0, checked = 0;
  for (int round = 0;; ++round) {
    if (round == rounds / 2 && id.rank == 0) std::ofstream(root.parent_path() / (prefix + id.step_id)).put('1');
    if (round >= rounds) {
      const int more = jobkit::broadcast(id.rank == 0 && !other_halfway() && epoch_ms() - start < 60'000 ? 1 : 0);
      if (more == 0) break;
    }
    const auto label = job_step() + " round " + std::to_string(round);
    const auto mine = expected_state(id.rank, label, size_of(id.rank));
    ws.write(mine.config, mine.payload);
    jobkit::barrier();
    for (int r = 0; r < id.world_size; ++r) {
      ++checked;
      if (ws.read(r) != expected_state(r, label, size_of(r))) ++foreign;
    }
    const auto gathered = gather(node, label);
    for (std::size_t i = 0; i < gathered.states.size(); ++i) {
      const int r = node.world_ranks()[i];
      ++checked;
      if (gathered.states[i] != expected_state(r, label, size_of(r))) ++foreign;
    }
    jobkit::barrier();  // nobody overwrites its state while another reads this round's
  }
  std::printf("rank %d step %s: %ld states checked, %ld not of this step and round\n", id.rank, id.step_id.c_str(),
              checked, foreign);
  if (id.rank == 0)
    std::printf("step %s ran from %lld to %lld\n", id.step_id.c_str(), static_cast<long long>(start),
                static_cast<long long>(epoch_ms()));
  return foreign == 0 ? 0 : 1;
}

int kill_while_holding() {
  const auto& id = jobkit::current_identity();
  auto& node = jobkit::node_group();
  const int victim = node.world_ranks().back();
  std::size_t size = 1000;
  if (id.rank == victim) {
    size = std::size_t{256} << 20;  // long enough to be caught writing
    const auto segment = "/dev/shm/jobkit-" + job_step() + "-" + std::to_string(id.rank);  // the documented name
    std::thread([segment] {
      while (!fs::exists(segment)) std::this_thread::sleep_for(microseconds(100));
      std::printf("rank %d: killing myself while holding %s\n", jobkit::rank(), segment.c_str());
      std::fflush(stdout);
      ::kill(::getpid(), SIGKILL);
    }).detach();
  }
  const std::vector<std::byte> payload(size, std::byte{7});
  jobkit::node_local_gather(payload, node);
  std::printf("rank %d: the gather succeeded despite the death\n", id.rank);
  return 0;
}

int blocked() {
  const auto& id = jobkit::current_identity();
  auto& node = jobkit::node_group();
  const fs::path obstacle = "/dev/shm/jobkit-" + job_step() + "-" + std::to_string(node.world_ranks().back());
  if (id.rank == node.world_ranks().back()) fs::create_directories(obstacle / "inside");
  try {
    gather(node, "blocked");
  } catch (...) {
    if (id.rank == node.world_ranks().back()) fs::remove_all(obstacle);
    throw;
  }
  std::printf("rank %d: the gather succeeded despite the obstacle\n", id.rank);
  return 0;
}

int exit_before() {
  const auto& id = jobkit::current_identity();
  jobkit::barrier();  // connected: the exit below is the only failure
  if (id.rank == id.world_size - 1) {
    std::printf("rank %d: exiting before the gather\n", id.rank);
    std::fflush(stdout);
    std::exit(1);
  }
  // Timed from here, not from the step's start: launching a step on a loaded machine can take
  // seconds, detecting the exit must not.
  const auto start = steady_clock::now();
  try {
    gather(jobkit::world(), "early");
  } catch (const jobkit::error&) {
    std::printf("rank %d: the gather failed after %lld ms\n", id.rank,
                static_cast<long long>(duration_cast<milliseconds>(steady_clock::now() - start).count()));
    std::fflush(stdout);
    throw;
  }
  std::printf("rank %d: the gather succeeded without rank %d\n", id.rank, id.world_size - 1);
  return 0;
}

int missing(const fs::path& root) {
  const auto& id = jobkit::current_identity();
  jobkit::workspace ws(root);
  ws.read((id.rank + 1) % id.world_size, {.timeout = seconds(1)});
  std::printf("rank %d: read a state that nobody wrote\n", id.rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const fs::path root = argc > 2 ? argv[2] : "";
  const std::string arg = argc > 3 ? argv[3] : "";
  return report_errors([&]() -> int {
    if (mode == "gather-cross") return gather_cross(root);
    if (mode == "gather-node") return gather_node();
    if (mode == "race") return race(root, std::stoull(arg));
    if (mode == "steps") return steps(root, std::stoi(arg));
    if (mode == "kill") return kill_while_holding();
    if (mode == "blocked") return blocked();
    if (mode == "exit-before") return exit_before();
    if (mode == "missing") return missing(root);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  });
}
