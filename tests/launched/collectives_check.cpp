// jobkit's collectives under a real launcher, through the public API only. Modes:
//   stress N         N mixed collectives on the world, node groups, node leaders and two
//                    disjoint explicit groups; sizes vary per rank and per operation; every
//                    received value is checked; prints the cost of the first and last 1000
//   late S           a barrier that the last rank reaches S seconds late: nobody may leave early
//   die HOW OP       the last rank dies (exit, kill, abort, term) while the others are in OP
//                    (barrier, broadcast, all_gather, broadcast_into), then a barrier
//   node-death V     rank V, which shares its node with the others, is killed in a loop of
//                    barriers: the others must name it (they wait in shared memory, where no
//                    socket closes); each prints when it noticed, the victim when it died
//   idle S           the last rank is S seconds late for a barrier; the others print the CPU time
//                    they spent waiting in it (getrusage, the whole process)
//   slow-and-dead    3 nodes x 3 ranks: rank 5 is 10 s late while rank 8 dies; every rank but
//                    the slow one must fail at once (its node leader, waiting for it, included)
//   mismatch         rank 0 calls broadcast while the others call barrier; then all call barrier
//   timeout          the last rank sleeps past the others' 1 s deadline
//   throw            compute_and_broadcast whose callable throws on the root (rank 1)
//   bulk             broadcast_into and all_gather_into of sizes from 0 to several MiB (more than
//                    one chunk between nodes, more than a slot in shared memory), from every
//                    root, on the world, the node groups, node leaders and the even ranks; every
//                    byte is checked, and the buffers are reused from call to call
//   bulk-sizes       the last rank passes one element more to broadcast_into
//   bulk-sizes-gather the last rank of each node passes one element more (past a slot: 16 KB) to
//                    all_gather_into on its node group
//   groups           node groups, node leaders and explicit lists match the real layout
//   setup N          the data path's setup (endpoints read on demand), then N groups of varying
//                    members (each rank in about 3 of 4), each checked by an all_gather and an
//                    all_reduce: what setup-stress runs step after step, with a late rank
//   churn N          N rounds of group creation (world, a split, node groups) and checked
//                    collectives on each: what strangers on the ranks' ports must not disturb
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "jobkit/jobkit.hpp"
#include "test_support.hpp"

using namespace std::chrono;

namespace {

/// The bytes rank r contributes to operation i: a size that varies per rank and per operation
/// (now and then 256 KiB), contents that depend on both.
/// Nanoseconds since the epoch: comparable between the processes of one node.
long long wall_ns() { return duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count(); }

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

std::string payload(int r, std::uint64_t i) {
  const std::uint64_t h = mix(i * 7919 + static_cast<std::uint64_t>(r) + 1);
  const std::size_t size = h % 997 == 0 ? 256 * 1024 : h % 4001;
  std::string s(size, '\0');
  for (std::size_t k = 0; k < size; ++k) s[k] = static_cast<char>(mix(h ^ k) & 0xff);
  return s;
}

struct checker {
  int rank;
  long bad = 0;
  long checked = 0;
  void expect(bool ok, std::uint64_t op, const char* what) {
    ++checked;
    if (!ok && bad++ < 10)
      std::printf("rank %d: WRONG VALUE in %s at operation %llu\n", rank, what, static_cast<unsigned long long>(op));
  }
};

int stress(long operations) {
  const auto& id = jobkit::current_identity();
  const int me = id.rank, size = id.world_size;
  auto& world = jobkit::world();
  auto& node = jobkit::node_group();
  std::optional<jobkit::group> leaders;
  if (id.local_rank == 0) leaders = jobkit::node_leaders_group();
  // Two disjoint groups that run their collectives at the same time: even and odd ranks.
  std::vector<int> parity_ranks;
  for (int r = me % 2; r < size; r += 2) parity_ranks.push_back(r);
  auto parity = jobkit::make_group(parity_ranks);

  checker check{me};
  double first = 0;
  auto window_start = steady_clock::now();
  for (long n = 0; n < operations; ++n) {
    const auto i = static_cast<std::uint64_t>(n);
    const int root = static_cast<int>(mix(i) % static_cast<std::uint64_t>(size));
    switch (n % 10) {
      case 0: world.barrier(); break;
      case 1: check.expect(world.broadcast(payload(me, i), root) == payload(root, i), i, "broadcast"); break;
      case 2: {
        const auto got = world.gather(payload(me, i), root);
        bool ok = me == root ? static_cast<int>(got.size()) == size : got.empty();
        for (int r = 0; ok && r < static_cast<int>(got.size()); ++r)
          ok = got[static_cast<std::size_t>(r)] == payload(r, i);
        check.expect(ok, i, "gather");
        break;
      }
      case 3: {
        const auto got = world.all_gather(payload(me, i));
        bool ok = static_cast<int>(got.size()) == size;
        for (int r = 0; ok && r < size; ++r) ok = got[static_cast<std::size_t>(r)] == payload(r, i);
        check.expect(ok, i, "all_gather");
        break;
      }
      case 4: {
        const auto value = [&](int r) {
          return static_cast<std::int64_t>(mix(i + static_cast<std::uint64_t>(r)) >> 12);
        };
        std::int64_t sum = 0, max = INT64_MIN;
        std::uint64_t x = 0;
        for (int r = 0; r < size; ++r) {
          sum += value(r);
          max = std::max(max, value(r));
          x ^= static_cast<std::uint64_t>(value(r));
        }
        check.expect(world.all_reduce(value(me), jobkit::reduce_op::sum) == sum, i, "all_reduce(sum)");
        const std::vector<std::int64_t> pair{value(me), static_cast<std::int64_t>(value(me) ^ 0x5555)};
        const auto got = world.all_reduce(pair, jobkit::reduce_op::max);
        check.expect(got.size() == 2 && got[0] == max, i, "all_reduce(max)");
        check.expect(world.all_reduce(static_cast<std::uint64_t>(value(me)), jobkit::reduce_op::bxor) == x, i,
                     "all_reduce(bxor)");
        break;
      }
      case 5: {
        std::vector<std::string> values;
        if (me == root) {
          for (int r = 0; r < size; ++r) values.push_back(payload(r, i) + std::to_string(root));
        }
        check.expect(world.scatter(values, root) == payload(me, i) + std::to_string(root), i, "scatter");
        break;
      }
      case 6: {
        const auto got = world.compute_and_broadcast([&] { return std::make_pair(payload(root, i), me); }, root);
        check.expect(got.first == payload(root, i) && got.second == root, i, "compute_and_broadcast");
        break;
      }
      case 7: {
        const auto got = node.all_gather(payload(me, i));
        bool ok = static_cast<int>(got.size()) == node.size();
        for (int g = 0; ok && g < node.size(); ++g)
          ok = got[static_cast<std::size_t>(g)] == payload(node.world_ranks()[static_cast<std::size_t>(g)], i);
        check.expect(ok, i, "node all_gather");
        break;
      }
      case 8:
        if (leaders) {
          const int leader_root = static_cast<int>(i % static_cast<std::uint64_t>(leaders->size()));
          const int from = leaders->world_ranks()[static_cast<std::size_t>(leader_root)];
          check.expect(leaders->broadcast(payload(me, i), leader_root) == payload(from, i), i, "leaders broadcast");
        }
        break;
      case 9: {
        std::int64_t sum = 0;
        for (const int r : parity.world_ranks()) sum += r * static_cast<std::int64_t>(i % 1000);
        check.expect(parity.all_reduce(static_cast<std::int64_t>(me) * static_cast<std::int64_t>(i % 1000),
                                       jobkit::reduce_op::sum) == sum,
                     i, "parity all_reduce");
        break;
      }
    }
    if (n + 1 == 1000) first = duration<double, std::micro>(steady_clock::now() - window_start).count() / 1000;
    if (n + 1 == operations - 1000) window_start = steady_clock::now();
  }
  const double last = duration<double, std::micro>(steady_clock::now() - window_start).count() / 1000;
  std::printf(
      "rank %d: %ld operations, %ld values checked, %ld bad values, first 1000: %.1f us/op, last 1000: %.1f us/op\n",
      me, operations, check.checked, check.bad, first, last);
  return check.bad == 0 ? 0 : 1;
}

/// Element k of rank r's piece in bulk operation i.
std::uint32_t element(std::uint64_t i, int r, std::size_t k) {
  return static_cast<std::uint32_t>(mix(i * 1000003 + static_cast<std::uint64_t>(r) * 7919 + k));
}

int bulk() {
  const auto& id = jobkit::current_identity();
  const int me = id.rank;
  std::vector<int> even_ranks;
  for (int r = 0; r < id.world_size; r += 2) even_ranks.push_back(r);
  std::optional<jobkit::group> even;
  if (me % 2 == 0) even = jobkit::make_group(even_ranks);
  std::optional<jobkit::group> leaders;
  if (id.local_rank == 0) leaders = jobkit::node_leaders_group();
  // Each group with a number of its own, so that every member derives the same test data.
  std::vector<std::pair<int, jobkit::group*>> groups{{0, &jobkit::world()}, {1, &jobkit::node_group()}};
  if (leaders) groups.emplace_back(2, &*leaders);
  if (even) groups.emplace_back(3, &*even);

  checker check{me};
  std::vector<std::uint32_t> buffer, all;  // reused, as a training loop would
  // Elements: none, one, a slot's inline capacity and a little more, several bulk chunks and an odd tail.
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1792}, std::size_t{1793},
                                  std::size_t{100'000}, std::size_t{786'433}}) {
    for (const auto& [number, g] : groups) {
      const std::uint64_t base = (count * 4 + static_cast<std::uint64_t>(number)) * 4096;
      for (int root = 0; root < g->size(); ++root) {
        const std::uint64_t i = base + static_cast<std::uint64_t>(root);
        const int from = g->world_ranks()[static_cast<std::size_t>(root)];
        buffer.assign(count, 0);
        if (g->rank() == root) {
          for (std::size_t k = 0; k < count; ++k) buffer[k] = element(i, from, k);
        }
        g->broadcast_into(buffer, root);
        bool ok = buffer.size() == count;
        for (std::size_t k = 0; ok && k < count; ++k) ok = buffer[k] == element(i, from, k);
        check.expect(ok, i, "broadcast_into");
        if (count > 100'000 && root >= 2) break;  // the largest from three roots only
      }
      const std::size_t piece = count / static_cast<std::size_t>(g->size()) + 1;
      const auto gathered = [&](std::uint64_t i) {
        for (int r = 0; r < g->size(); ++r) {
          const int w = g->world_ranks()[static_cast<std::size_t>(r)];
          for (std::size_t k = 0; k < piece; ++k) {
            if (all[static_cast<std::size_t>(r) * piece + k] != element(i, w, k)) return false;
          }
        }
        return true;
      };
      std::vector<std::uint32_t> mine(piece);
      for (std::size_t k = 0; k < piece; ++k) mine[k] = element(base + 4000, me, k);
      all.assign(piece * static_cast<std::size_t>(g->size()), 0);
      g->all_gather_into(mine, all);
      check.expect(gathered(base + 4000), base + 4000, "all_gather_into");
      // In place: this rank's part of `all` is its contribution.
      std::span<std::uint32_t> own(all.data() + static_cast<std::size_t>(g->rank()) * piece, piece);
      for (std::size_t k = 0; k < piece; ++k) own[k] = element(base + 4001, me, k);
      g->all_gather_into(own, all);
      check.expect(gathered(base + 4001), base + 4001, "all_gather_into in place");
    }
  }
  // A value collective between bulk ones: the sequence stays in step.
  check.expect(jobkit::all_reduce(1, jobkit::reduce_op::sum) == id.world_size, 0, "all_reduce after bulk");
  std::printf("rank %d: bulk %ld checks, %ld bad values\n", me, check.checked, check.bad);
  return check.bad == 0 ? 0 : 1;
}

int groups() {
  const auto& id = jobkit::current_identity();
  const auto hosts = jobkit::all_gather(id.hostname);
  std::vector<int> same_host;
  for (int r = 0; r < id.world_size; ++r) {
    if (hosts[static_cast<std::size_t>(r)] == id.hostname) same_host.push_back(r);
  }
  auto& node = jobkit::node_group();
  const bool node_ok =
      node.world_ranks() == same_host && node.rank() == id.local_rank && node.all_gather(id.rank) == same_host;
  bool leaders_ok = true;
  if (id.local_rank == 0) {
    auto& leaders = jobkit::node_leaders_group();
    const auto leader_hosts = leaders.all_gather(id.hostname);
    leaders_ok = leaders.size() == id.num_nodes && leaders.rank() == id.node_rank &&
                 std::set<std::string>(leader_hosts.begin(), leader_hosts.end()).size() == leader_hosts.size();
  }
  // A list in a scrambled order: group rank i is world rank list[i].
  std::vector<int> list;
  for (int r = id.world_size - 1; r >= 0; --r) list.push_back(r);
  auto reversed = jobkit::make_group(list);
  const bool list_ok =
      reversed.rank() == id.world_size - 1 - id.rank && reversed.broadcast(id.rank, 0) == id.world_size - 1;
  jobkit::barrier();
  std::printf("rank %d: node group %s, leaders %s, explicit list %s\n", id.rank, node_ok ? "ok" : "WRONG",
              leaders_ok ? "ok" : "WRONG", list_ok ? "ok" : "WRONG");
  return node_ok && leaders_ok && list_ok ? 0 : 1;
}

int churn(int rounds) {
  const auto& id = jobkit::current_identity();
  const int size = id.world_size;
  checker check{id.rank};
  const auto start = steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    std::vector<int> all(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<std::size_t>(r)] = r;
    auto world = jobkit::make_group(all);
    const auto op = static_cast<std::uint64_t>(i);
    check.expect(world.all_reduce(id.rank + i, jobkit::reduce_op::sum) == size * (size - 1) / 2 + size * i, op,
                 "all_reduce");
    auto half = world.split(id.rank % 2, id.rank);
    const auto members = half->all_gather(id.rank);
    bool same_parity = true;
    for (const int r : members) same_parity = same_parity && r % 2 == id.rank % 2;
    check.expect(same_parity && static_cast<int>(members.size()) == (size + 1 - id.rank % 2) / 2, op, "split");
    const auto root = static_cast<int>(mix(op) % static_cast<std::uint64_t>(size));
    check.expect(
        world.broadcast(fmt::format("round {} from {}", i, root), root) == fmt::format("round {} from {}", i, root), op,
        "broadcast");
  }
  jobkit::barrier();
  std::printf("rank %d: churn %d rounds in %.2f s, %ld checks, %ld bad values\n", id.rank, rounds,
              duration<double>(steady_clock::now() - start).count(), check.checked, check.bad);
  return check.bad == 0 ? 0 : 1;
}

int setup(int rounds) {
  const auto& id = jobkit::current_identity();
  const int size = id.world_size;
  checker check{id.rank};
  const auto everyone = jobkit::all_gather(id.rank);
  for (int r = 0; r < size; ++r) check.expect(everyone[static_cast<std::size_t>(r)] == r, 0, "all_gather of the world");
  check.expect(jobkit::node_group().size() == id.local_world_size, 0, "node group");
  for (int i = 1; i <= rounds; ++i) {
    const auto op = static_cast<std::uint64_t>(i);
    std::vector<int> members;
    for (int r = 0; r < size; ++r) {
      if (r == i % size || mix(op * 131 + static_cast<std::uint64_t>(r)) % 4 != 0) members.push_back(r);
    }
    if (std::find(members.begin(), members.end(), id.rank) == members.end()) continue;
    auto g = jobkit::make_group(members);
    check.expect(g.all_gather(id.rank) == members, op, "all_gather of a group");
    check.expect(g.all_reduce(i, jobkit::reduce_op::sum) == i * static_cast<int>(members.size()), op,
                 "all_reduce of a group");
  }
  jobkit::barrier();
  std::printf("rank %d: setup and %d groups, %ld checks, %ld bad values\n", id.rank, rounds, check.checked, check.bad);
  return check.bad == 0 ? 0 : 1;
}

/// `die` mode: 100 rounds of `op`; at round 50 the last rank dies (`how`: exit, kill, abort, term),
/// saying when. A broadcast's root does not wait for the others (as MPI_Bcast): it may learn of the
/// death only at its next collective, the barrier after the rounds.
void die_during(const std::string& how, const std::string& op, int me, int last) {
  for (int i = 0; i < 100; ++i) {
    if (i == 50 && me == last) {
      std::printf("rank %d dies at %lld\n", me, wall_ns());
      std::fflush(stdout);
      if (how == "exit") std::exit(1);
      if (how == "kill") ::kill(::getpid(), SIGKILL);
      if (how == "abort") std::abort();
      if (how == "term") ::kill(::getpid(), SIGTERM);
    }
    if (op == "barrier") jobkit::barrier();
    if (op == "broadcast") jobkit::broadcast(payload(0, static_cast<std::uint64_t>(i)), 0);
    if (op == "all_gather") jobkit::all_gather(payload(me, static_cast<std::uint64_t>(i)));
    if (op == "broadcast_into") {
      std::vector<char> buffer(3 << 20, static_cast<char>(i));
      jobkit::broadcast_into(buffer, 0);
    }
  }
  jobkit::barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "stress";
  const std::string arg = argc > 2 ? argv[2] : "";
  const std::string arg2 = argc > 3 ? argv[3] : "";
  return report_errors([&]() -> int {
    const auto& id = jobkit::current_identity();
    const int me = id.rank, last = id.world_size - 1;
    if (mode == "stress") return stress(std::stol(arg));
    if (mode == "groups") return groups();
    if (mode == "bulk") return bulk();
    if (mode == "bulk-sizes") {
      std::vector<double> values(me == last ? 1001 : 1000, 1.0);
      jobkit::broadcast_into(values, 0);
      std::printf("rank %d: different sizes passed silently\n", me);
      return 0;
    }
    if (mode == "bulk-sizes-gather") {
      const auto& id = jobkit::current_identity();
      const std::size_t count = id.local_rank == id.local_world_size - 1 ? 2001 : 2000;
      std::vector<double> mine(count, 1.0), all(count * static_cast<std::size_t>(id.local_world_size));
      jobkit::node_group().all_gather_into(mine, all);
      std::printf("rank %d: different sizes passed silently\n", me);
      return 0;
    }
    if (mode == "churn") return churn(std::stoi(arg));
    if (mode == "setup") return setup(std::stoi(arg));
    if (mode == "late") {
      jobkit::barrier();  // everyone connected: the lateness below is the only wait
      if (me == last) std::this_thread::sleep_for(seconds(std::stoi(arg)));
      const auto t0 = steady_clock::now();
      jobkit::barrier();
      std::printf("rank %d left the barrier after %.3f s\n", me, duration<double>(steady_clock::now() - t0).count());
      return 0;
    }
    if (me == 0 && (mode == "die" || mode == "node-death" || mode == "idle")) {
      const char* job = std::getenv("SLURM_JOB_ID");
      std::printf("job %s\n", job ? job : "none");
    }
    if (mode == "node-death") {
      const int victim = std::stoi(arg);
      try {
        for (int i = 0; i < 100; ++i) {
          if (i == 50 && me == victim) {
            std::printf("rank %d dies at %lld\n", me, wall_ns());
            std::fflush(stdout);
            ::kill(::getpid(), SIGKILL);
          }
          jobkit::barrier();
        }
      } catch (const jobkit::error&) {
        std::printf("rank %d noticed at %lld\n", me, wall_ns());
        throw;
      }
      std::printf("rank %d: finished without noticing the death\n", me);
      return 0;
    }
    if (mode == "idle") {
      jobkit::barrier();
      if (me == last) std::this_thread::sleep_for(seconds(std::stoi(arg)));
      const auto t0 = steady_clock::now();
      const double cpu0 = cpu_seconds();
      jobkit::barrier();
      const double cpu = cpu_seconds() - cpu0, wall = duration<double>(steady_clock::now() - t0).count();
      std::printf("rank %d waited %.3f s using %.2f ms of CPU: %.3f %% of a core\n", me, wall, cpu * 1e3,
                  100 * cpu / wall);
      return 0;
    }
    if (mode == "die") {
      try {
        die_during(arg, arg2, me, last);
      } catch (const jobkit::error&) {
        std::printf("rank %d noticed at %lld\n", me, wall_ns());
        throw;
      }
      std::printf("rank %d: finished without noticing the death\n", me);
      return 0;
    }
    if (mode == "slow-and-dead") {
      jobkit::barrier();
      const auto t0 = steady_clock::now();
      if (me == 8) ::kill(::getpid(), SIGKILL);
      if (me == 5) std::this_thread::sleep_for(seconds(10));
      try {
        jobkit::barrier();
      } catch (const jobkit::error& e) {
        std::printf("rank %d failed after %.1f s: %s\n", me, duration<double>(steady_clock::now() - t0).count(),
                    e.what());
        return 3;
      }
      std::printf("rank %d: finished without noticing the death\n", me);
      return 0;
    }
    if (mode == "mismatch") {
      jobkit::barrier();
      if (me == 0) {
        jobkit::broadcast(1);
      } else {
        jobkit::barrier();
      }
      jobkit::barrier();  // the root of a broadcast learns of the mismatch here at the latest
      std::printf("rank %d: paired different collectives silently\n", me);
      return 0;
    }
    if (mode == "timeout") {
      jobkit::barrier();
      if (me == last) std::this_thread::sleep_for(seconds(3));
      jobkit::barrier({.timeout = seconds(1)});
      std::printf("rank %d: the barrier did not time out\n", me);
      return 0;
    }
    if (mode == "throw") {
      jobkit::compute_and_broadcast([]() -> int { throw std::runtime_error("no space left on /scratch"); }, 1);
      std::printf("rank %d: the failure did not arrive\n", me);
      return 0;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  });
}
