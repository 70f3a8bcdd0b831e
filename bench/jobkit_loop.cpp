// jobkit's collectives timed with bench/peers/mpi_bench.c's loop, line for line, so that the two
// are compared by one method and one statistic (bench/compare.sh runs both in one allocation).
//
//   usage: jobkit_loop [ITERS [WARMUP [LARGE_BYTES [LARGE_ITERS [WORD...]]]]]
//          (defaults: 2000, 100, 64 MiB, 5; the word "values" adds bcast_value and allgather_value,
//          "steps" adds stop_requested and progress)
//   launch: srun --mpi=pmix -N3 -n24 build-dev/bench/jobkit_loop
//
// Ops, each: WARMUP untimed iterations (1 for large payloads), then ITERS timed ones, on the world:
//   barrier, allreduce (one double, sum), bcast from rank 0 of 64 B and 1 KiB, allgather of 8 B
//   per rank, then bcast of LARGE_BYTES and allgather of LARGE_BYTES / ranks per rank (LARGE_ITERS
//   timed iterations) into buffers allocated once, as mpi_bench does (broadcast_into,
//   all_gather_into); with "values", the same through the value forms, whose results are new
//   allocations. Rooted and large ops put an untimed barrier between iterations.
// With "steps" (the step boundaries of progress tracking, docs/progress.md): stop_requested, a
// stop_guard's agreement in every call (check_every 1: a collective), and progress,
// jobkit::progress() (a local mark: its median is the clock's resolution, loop_avg_us its cost),
// and train_step, a training step's shape: 1 ms of the rank's own work (a spin on the clock), 10
// all_reduces of one double and a stop agreement (what the bookkeeping costs per step).
// Every op's loop starts right after a barrier. Every rank times each iteration; iteration i's
// time is the MAX over ranks; median_us / p99_us are over those maxima, rank0_median_us is rank
// 0's own median, loop_avg_us the slowest rank's loop time over ITERS, cpu_pct the highest share
// of a core that a rank's process used during the timed loop (getrusage: what waiting costs).
// First, like mpi_bench's "init" (MPI_Init on rank 0), "init" is the time to a usable world group:
// identity discovery plus the data path's setup (the first barrier), on the slowest rank, and the
// CPU time a rank used from its start to then (cpu_ms_per_rank: the mean over ranks, getrusage).
// With JOBKIT_BENCH_SETUP_AT (a wall-clock time in ns since the epoch, after every rank's identity
// is ready: the dev cluster's nodes share one clock), every rank waits for that instant after
// identity discovery, and "setup" is the data path's setup and first barrier alone, without the
// launch's skew: from that instant to the slowest rank's end (late_us: how long after it the
// slowest rank's identity was ready, 0 when every rank waited); "init" then leaves that wait out.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "jobkit/jobkit.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double now_us() { return std::chrono::duration<double, std::micro>(clock_type::now().time_since_epoch()).count(); }
double wall_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double cpu_us() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

struct loop {
  std::vector<double> times;
  double total_us = 0, cpu = 0;
};

template <class Body>
loop timed(long iters, long warmup, bool separate, Body&& body) {
  loop l;
  jobkit::barrier();
  for (long i = 0; i < warmup; ++i) {
    body();
    if (separate) jobkit::barrier();
  }
  const double start = now_us(), cpu0 = cpu_us();
  for (long i = 0; i < iters; ++i) {
    const double t0 = now_us();
    body();
    l.times.push_back(now_us() - t0);
    if (separate) jobkit::barrier();
  }
  l.total_us = now_us() - start;
  l.cpu = cpu_us() - cpu0;
  return l;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void report(const char* op, long bytes, const loop& l, bool separate) {
  const auto& id = jobkit::current_identity();
  auto slowest = jobkit::all_reduce(l.times, jobkit::reduce_op::max);
  const double loop_avg = jobkit::all_reduce(l.total_us / static_cast<double>(l.times.size()), jobkit::reduce_op::max);
  const double cpu_pct = jobkit::all_reduce(100 * l.cpu / l.total_us, jobkit::reduce_op::max);
  if (id.rank != 0) return;
  const double median = median_of(slowest);
  std::sort(slowest.begin(), slowest.end());
  const auto k = std::max<std::size_t>(1, (99 * slowest.size() + 99) / 100);
  std::printf(
      "{\"impl\":\"jobkit\",\"op\":\"%s\",\"ranks\":%d,\"nodes\":%d,\"bytes\":%ld,\"iters\":%zu,\"median_us\":%.2f,"
      "\"p99_us\":%.2f,\"rank0_median_us\":%.2f,\"loop_avg_us\":%.2f,\"cpu_pct\":%.1f,\"timing\":\"max_over_ranks\"%s",
      op, id.world_size, id.num_nodes, bytes, l.times.size(), median, slowest[k - 1], median_of(l.times), loop_avg,
      cpu_pct, separate ? ",\"iter_sep\":\"barrier\"" : "");
  if (bytes > 1024) std::printf(",\"mb_per_s\":%.1f", static_cast<double>(bytes) / median);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const long iters = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 2000;
  const long warmup = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 100;
  const long large = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 64L << 20;
  const long large_iters = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 5;
  bool with_values = false;
  bool with_steps = false;
  for (int a = 5; a < argc; ++a) {
    with_values = with_values || std::string(argv[a]) == "values";
    with_steps = with_steps || std::string(argv[a]) == "steps";
  }
  try {
    const double t_start = now_us();
    const auto& id = jobkit::current_identity();
    const int n = id.world_size;
    const char* setup_at = std::getenv("JOBKIT_BENCH_SETUP_AT");
    const double at_us = setup_at ? static_cast<double>(std::strtoll(setup_at, nullptr, 10)) / 1e3 : 0;
    const double late = setup_at ? std::max(0.0, wall_us() - at_us) : 0;
    const double wait_start = now_us();
    if (setup_at) {
      while (wall_us() < at_us) ::usleep(static_cast<useconds_t>(std::min(100000.0, at_us - wall_us())));
    }
    const double waited = now_us() - wait_start;
    jobkit::barrier();  // the data path's setup
    const double setup_end = wall_us();
    const double own_setup = now_us() - t_start - waited;
    const double ready_wall = wall_us();
    const double own_setup_cpu = cpu_us();  // from the process's start: what 64 ranks on 2 cores share
    const double setup = jobkit::all_reduce(own_setup, jobkit::reduce_op::max);
    const double setup_cpu = jobkit::all_reduce(own_setup_cpu, jobkit::reduce_op::sum);
    // From the process's start (bench/from_exec.sh: the wall clock just before exec), so that the
    // dynamic loader's work before main counts too.
    const char* exec_ns = std::getenv("JOBKIT_BENCH_EXEC_NS");
    const double own_from_exec =
        exec_ns ? ready_wall - static_cast<double>(std::strtoll(exec_ns, nullptr, 10)) / 1e3 : -1;
    const double from_exec = jobkit::all_reduce(own_from_exec, jobkit::reduce_op::max);
    if (setup_at) {
      const double slowest_end = jobkit::all_reduce(setup_end, jobkit::reduce_op::max);
      const double latest = jobkit::all_reduce(late, jobkit::reduce_op::max);
      if (id.rank == 0) {
        std::printf(
            "{\"impl\":\"jobkit\",\"op\":\"setup\",\"ranks\":%d,\"nodes\":%d,\"bytes\":0,\"iters\":1,"
            "\"median_us\":%.0f,\"p99_us\":%.0f,\"rank0_median_us\":%.0f,\"late_us\":%.0f,"
            "\"timing\":\"slowest_end_from_common_start\"}\n",
            n, id.num_nodes, slowest_end - at_us, slowest_end - at_us, setup_end - at_us, latest);
      }
    }
    if (id.rank == 0) {
      std::printf(
          "{\"impl\":\"jobkit\",\"op\":\"init\",\"ranks\":%d,\"nodes\":%d,\"bytes\":0,\"iters\":1,"
          "\"median_us\":%.0f,\"p99_us\":%.0f,\"rank0_median_us\":%.0f,\"timing\":\"max_over_ranks\","
          "\"cpu_ms_per_rank\":%.1f",
          n, id.num_nodes, setup, setup, own_setup, setup_cpu / n / 1e3);
      if (exec_ns) std::printf(",\"from_exec_us\":%.0f,\"rank0_from_exec_us\":%.0f", from_exec, own_from_exec);
      std::printf("}\n");
    }

    report("barrier", 0, timed(iters, warmup, false, [] { jobkit::barrier(); }), false);

    double out = 0;
    report("allreduce", 8,
           timed(iters, warmup, false, [&] { out = jobkit::all_reduce(double(id.rank), jobkit::reduce_op::sum); }),
           false);
    if (out != static_cast<double>(n) * (n - 1) / 2) throw std::runtime_error("allreduce gave a wrong sum");

    for (const long size : {64L, 1024L}) {
      const std::string sent(static_cast<std::size_t>(size), '\xa5');
      std::string got;
      report("bcast", size, timed(iters, warmup, true, [&] { got = jobkit::broadcast(sent, 0); }), true);
      if (got != sent) throw std::runtime_error("bcast delivered wrong bytes");
    }

    const std::string mine = std::to_string(1000003L * id.rank);
    std::vector<std::string> all;
    report("allgather", 8, timed(iters, warmup, false, [&] { all = jobkit::all_gather(mine); }), false);
    for (int r = 0; r < n; ++r) {
      if (all[static_cast<std::size_t>(r)] != std::to_string(1000003L * r))
        throw std::runtime_error("allgather delivered a wrong value");
    }

    if (with_steps) {
      jobkit::stop_guard guard;
      bool stop = false;
      report("stop_requested", 0, timed(iters, warmup, false, [&] { stop = guard.stop_requested() || stop; }), false);
      if (stop) throw std::runtime_error("stop_requested: a stop nobody asked for");
      report("progress", 0, timed(iters, warmup, false, [] { jobkit::progress(); }), false);
      double sum = 0;
      report("train_step", 0,
             timed(iters, warmup, false,
                   [&] {
                     const double began = now_us();
                     while (now_us() - began < 1000) {
                     }
                     for (int c = 0; c < 10; ++c) sum = jobkit::all_reduce(1.0, jobkit::reduce_op::sum);
                     stop = guard.stop_requested() || stop;
                   }),
             false);
      if (sum != n || stop) throw std::runtime_error("train_step: a wrong sum or a stop nobody asked for");
    }

    if (large > 0) {
      // As mpi_bench does: buffers allocated once, MPI_Bcast and MPI_Allgather's forms.
      std::vector<unsigned char> big(static_cast<std::size_t>(large), id.rank == 0 ? 0xB5 : 0);
      report("bcast", large, timed(large_iters, 1, true, [&] { jobkit::broadcast_into(big, 0); }), true);
      if (big.back() != 0xB5) throw std::runtime_error("large bcast delivered wrong bytes");
      const auto part = static_cast<std::size_t>(large / n);
      std::vector<unsigned char> gathered(part * static_cast<std::size_t>(n));
      report("allgather", large / n * n,
             timed(large_iters, 1, true, [&] { jobkit::all_gather_into(std::span(big).first(part), gathered); }), true);
      if (with_values) {  // the value forms, which allocate their results
        const std::string text(static_cast<std::size_t>(large), 'b');
        std::string got;
        report("bcast_value", large, timed(large_iters, 1, true, [&] { got = jobkit::broadcast(text, 0); }), true);
        if (got != text) throw std::runtime_error("large value bcast delivered wrong bytes");
        const std::string piece(part, 'g');
        report("allgather_value", large / n * n, timed(large_iters, 1, true, [&] { all = jobkit::all_gather(piece); }),
               true);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jobkit_loop: %s\n", e.what());
    return 1;
  }
  return 0;
}
