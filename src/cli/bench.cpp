// jobkit bench: every collective timed under the launcher, next to the raw PMIx floor (a
// collecting PMIx_Fence with no data, the cheapest real barrier) measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "jobkit/jobkit.hpp"
#include "pmix/library.hpp"

namespace jobkit::cli {
namespace {

constexpr std::string_view bench_usage =
    "usage: jobkit bench [--json] [--iters N] [--warmup N] [--max-bytes BYTES] [--ops LIST] [--help]\n"
    "\n"
    "Time jobkit's collectives on every rank of the step and print, on rank 0, the median and p99\n"
    "latency of each operation and payload size. Iteration i's time is that of the slowest rank.\n"
    "Every small operation (8 B and 1 KiB) alternates with a raw collecting PMIx fence, timed the\n"
    "same way; 'fence' is that floor and 'ratio' the operation's median over it. Large payloads\n"
    "(64 KiB up to --max-bytes) report throughput instead. Run it under the launcher:\n"
    "  srun --mpi=pmix -N3 -n24 jobkit bench\n"
    "\n"
    "options:\n"
    "  --json             one JSON object per operation and size instead of a table\n"
    "  --iters N          timed iterations of each small operation (default 1000); large payloads\n"
    "                     run fewer, so that each moves about 256 MiB (at least 5)\n"
    "  --warmup N         untimed iterations first (default 50)\n"
    "  --max-bytes BYTES  largest payload (default 67108864, 64 MiB)\n"
    "  --ops LIST         comma-separated subset of barrier,broadcast,all_gather,all_reduce,gather,scatter\n"
    "  --help             show this help\n";

using clock = std::chrono::steady_clock;
using detail::load_info;
using detail::pmix_api;

double micros(clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct summary {
  double median = 0, p99 = 0, rank0_median = 0;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Per-iteration maxima over ranks, as the peers in bench/peers compute them.
std::optional<summary> summarise(const std::vector<double>& mine) {
  const auto all = jobkit::gather(mine, 0);
  if (all.empty()) return std::nullopt;
  std::vector<double> slowest(mine.size(), 0);
  for (const auto& times : all) {
    for (std::size_t i = 0; i < slowest.size() && i < times.size(); ++i) slowest[i] = std::max(slowest[i], times[i]);
  }
  summary s;
  s.median = median_of(slowest);
  std::sort(slowest.begin(), slowest.end());
  const auto k = std::max<std::size_t>(1, (99 * slowest.size() + 99) / 100);
  s.p99 = slowest.empty() ? 0 : slowest[k - 1];
  s.rank0_median = median_of(all.front());
  return s;
}

/// The raw floor: PMIx_Fence over all ranks, collecting data, nothing put.
class pmix_fence {
 public:
  pmix_fence() {
    pmix_proc_t self;
    if (pmix_api().PMIx_Init(&self, nullptr, 0) != PMIX_SUCCESS) return;
    active_ = true;
    load_info(collect_, PMIX_COLLECT_DATA, &yes_, PMIX_BOOL);
  }
  ~pmix_fence() {
    if (active_) pmix_api().PMIx_Finalize(nullptr, 0);
  }
  bool active() const { return active_; }
  void operator()() {
    const pmix_status_t rc = pmix_api().PMIx_Fence(nullptr, 0, &collect_, 1);
    if (rc != PMIX_SUCCESS) {
      throw error(errc::pmix, fmt::format("bench: PMIx_Fence failed: {}", pmix_api().PMIx_Error_string(rc)), rc);
    }
  }

 private:
  bool active_ = false;
  bool yes_ = true;
  pmix_info_t collect_;
};

struct options {
  bool json = false;
  long iters = 1000;
  long warmup = 50;
  std::size_t max_bytes = 64u << 20;
  std::vector<std::string> ops{"barrier", "broadcast", "all_gather", "all_reduce", "gather", "scatter"};
};

long parse_count(std::string_view option, std::string_view value, long min) {
  long n = -1;
  if (!value.empty() && value.size() < 12 && value.find_first_not_of("0123456789") == std::string_view::npos) {
    n = std::stol(std::string(value));
  }
  if (n < min) throw usage_error{fmt::format("bench: {}='{}' is not an integer >= {}", option, value, min)};
  return n;
}

class bench {
 public:
  explicit bench(const options& o) : o_(o), id_(jobkit::current_identity()) {}

  void run() {
    if (id_.rank == 0 && !o_.json) {
      std::printf("jobkit bench: %d ranks on %d nodes (times in us: slowest rank per iteration)\n", id_.world_size,
                  id_.num_nodes);
      std::printf("%-12s %10s %7s %12s %12s %12s %8s %10s\n", "op", "bytes", "iters", "median_us", "p99_us", "fence_us",
                  "ratio", "MB/s");
    }
    if (!fence_.active() && id_.rank == 0) {
      print_error_line("jobkit bench: no PMIx server, so no fence floor (run it under srun --mpi=pmix)");
    }
    jobkit::barrier();
    for (const auto& op : o_.ops) {
      for (const std::size_t bytes : sizes(op)) measure(op, bytes);
    }
    if (fence_.active()) {
      if (const auto s = summarise(all_fences_))
        report("pmix", "fence_collect_interleaved", 0, all_fences_.size(), *s, {});
    }
  }

 private:
  std::vector<std::size_t> sizes(const std::string& op) const {
    if (op == "barrier") return {0};
    std::vector<std::size_t> out{8, 1024};
    if (op == "broadcast" || op == "all_gather") {
      for (std::size_t b = 64 * 1024; b <= o_.max_bytes; b *= 16) out.push_back(b);
      if (o_.max_bytes > 1024 && std::find(out.begin(), out.end(), o_.max_bytes) == out.end())
        out.push_back(o_.max_bytes);
    }
    std::erase_if(out, [&](std::size_t b) { return b > o_.max_bytes; });
    return out;
  }

  std::function<void()> operation(const std::string& op, std::size_t bytes) {
    const int n = id_.world_size;
    if (op == "barrier") return [] { jobkit::barrier(); };
    if (op == "broadcast") {
      auto data = std::make_shared<std::string>(bytes, 'b');
      return [data] { jobkit::broadcast(*data, 0); };
    }
    if (op == "all_gather") {
      // Large payloads: each rank sends bytes / n, so every rank ends with `bytes`.
      const auto each = bytes <= 1024 ? bytes : std::max<std::size_t>(1, bytes / static_cast<std::size_t>(n));
      auto data = std::make_shared<std::string>(each, 'g');
      return [data] { jobkit::all_gather(*data); };
    }
    if (op == "all_reduce") {
      if (bytes == 8) return [] { jobkit::all_reduce(1.0, jobkit::reduce_op::sum); };
      auto data = std::make_shared<std::vector<double>>(bytes / sizeof(double), 1.0);
      return [data] { jobkit::all_reduce(*data, jobkit::reduce_op::sum); };
    }
    if (op == "gather") {
      auto data = std::make_shared<std::string>(bytes, 'g');
      return [data] { jobkit::gather(*data, 0); };
    }
    if (op == "scatter") {
      auto data = std::make_shared<std::vector<std::string>>();
      if (id_.rank == 0) data->assign(static_cast<std::size_t>(n), std::string(bytes, 's'));
      return [data] { jobkit::scatter(*data, 0); };
    }
    throw usage_error{fmt::format("bench: --ops names an unknown operation '{}'", op)};
  }

  void measure(const std::string& op, std::size_t bytes) {
    const auto run_op = operation(op, bytes);
    const bool small = bytes <= 1024;
    const long iters = small ? o_.iters : std::clamp<long>(static_cast<long>((256u << 20) / bytes), 5, o_.iters);
    const bool paired = small && fence_.active();
    for (long i = 0; i < (small ? o_.warmup : 2); ++i) {
      if (paired) fence_();
      run_op();
    }
    std::vector<double> op_times, fence_times;
    op_times.reserve(static_cast<std::size_t>(iters));
    for (long i = 0; i < iters; ++i) {
      if (paired) {
        const auto t0 = clock::now();
        fence_();
        fence_times.push_back(micros(clock::now() - t0));
      }
      const auto t0 = clock::now();
      run_op();
      op_times.push_back(micros(clock::now() - t0));
    }
    all_fences_.insert(all_fences_.end(), fence_times.begin(), fence_times.end());
    const auto s = summarise(op_times);
    std::optional<summary> floor;
    if (paired) floor = summarise(fence_times);
    if (s) report("jobkit", op, bytes, static_cast<std::size_t>(iters), *s, floor);
  }

  void report(const std::string& impl, const std::string& op, std::size_t bytes, std::size_t iters, const summary& s,
              const std::optional<summary>& floor) {
    const double mb_per_s = bytes > 0 && s.median > 0 ? static_cast<double>(bytes) / s.median : 0;
    if (o_.json) {
      std::string line = fmt::format(
          R"({{"impl":"{}","op":"{}","ranks":{},"nodes":{},"bytes":{},"iters":{},"median_us":{:.2f},"p99_us":{:.2f},"rank0_median_us":{:.2f},"timing":"max_over_ranks")",
          impl, op, id_.world_size, id_.num_nodes, bytes, iters, s.median, s.p99, s.rank0_median);
      if (floor)
        line += fmt::format(R"(,"fence_median_us":{:.2f},"ratio_to_fence":{:.3f})", floor->median,
                            s.median / floor->median);
      if (bytes > 1024) line += fmt::format(R"(,"mb_per_s":{:.1f})", mb_per_s);
      std::printf("%s}\n", line.c_str());
    } else {
      const auto name = impl == "pmix" ? std::string("fence") : op;
      std::printf("%-12s %10zu %7zu %12.1f %12.1f %12s %8s %10s\n", name.c_str(), bytes, iters, s.median, s.p99,
                  floor ? fmt::format("{:.1f}", floor->median).c_str() : "-",
                  floor ? fmt::format("{:.2f}", s.median / floor->median).c_str() : "-",
                  bytes > 1024 ? fmt::format("{:.1f}", mb_per_s).c_str() : "-");
    }
    std::fflush(stdout);
  }

  options o_;
  const identity& id_;
  pmix_fence fence_;
  std::vector<double> all_fences_;
};

}  // namespace

int run_bench(const std::vector<std::string_view>& args) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(bench_usage.data(), stdout);
      return 0;
    }
    if (arg == "--json") {
      o.json = true;
    } else if (arg == "--iters") {
      o.iters = parse_count(arg, option_value(args, i, "bench"), 1);
    } else if (arg == "--warmup") {
      o.warmup = parse_count(arg, option_value(args, i, "bench"), 0);
    } else if (arg == "--max-bytes") {
      o.max_bytes = static_cast<std::size_t>(parse_count(arg, option_value(args, i, "bench"), 8));
    } else if (arg == "--ops") {
      o.ops.clear();
      std::string list(option_value(args, i, "bench"));
      for (std::size_t at = 0; at <= list.size();) {
        const auto comma = std::min(list.find(',', at), list.size());
        o.ops.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
      for (const auto& op : o.ops) {
        if (op != "barrier" && op != "broadcast" && op != "all_gather" && op != "all_reduce" && op != "gather" &&
            op != "scatter") {
          throw usage_error{fmt::format("bench: --ops names an unknown operation '{}'", op)};
        }
      }
    } else {
      throw usage_error{"bench: unknown argument '" + std::string(arg) + "' (see jobkit bench --help)"};
    }
  }
  bench(o).run();
  return 0;
}

}  // namespace jobkit::cli
