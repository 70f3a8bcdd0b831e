// The check program of scripts/gpu-check.sh: <jobkit/nccl.hpp> on one GPU, through the public API only.
// Every mode prints one tab-separated line per result, which the script gathers into its report:
//   CHECK <name> <PASS|FAIL|SKIP|WARN> <detail>     (WARN: a benchmark target missed; not a failure)
//   TIME  <name> <value> <unit> <detail>
//   INFO  <key> <value>
// and exits 1 when a check failed, 0 otherwise.
//
// Modes:
//   checks [expect-gpu]     world size 1 (run it with JOBKIT_IDENTITY=default): without a GPU, the
//                           GPU-free rules and the clean error of communicator creation; with one, a
//                           communicator, every collective for every element type, split, abort,
//                           moves, destruction and the clean errors; expect-gpu: no GPU is a failure
//   bench [quick]           (GPU) communicator creation through jobkit against raw ncclCommInitRank,
//                           and the per-call cost of the typed wrapper against raw NCCL calls
//   child world2 S          run with torchrun variables of world size 2 and no PMIx server: the
//                           communicator cannot be made, and says why, at once
//   child raw-deadline S    (GPU) raw NCCL, what jobkit's deadline relies on: a non-blocking
//                           ncclCommInitRankConfig of 2 ranks with one present stays in progress for
//                           S seconds, and ncclCommAbort ends it
//   launched ids S          (mpirun -np 2) the NCCL ids through PMIx: the same bytes on both ranks
//   launched fence S        (mpirun -np 2) rank 1 never joins the id exchange: rank 0's deadline
//   launched init S         (mpirun -np 2, GPU) rank 1 takes the ids but never initialises NCCL:
//                           rank 0's communicator gives timeout_error after about S seconds
//   launched pair S         (mpirun -np 2, GPU) two ranks: a world-2 communicator when 2 GPUs are
//                           visible, else the duplicate-GPU error on both ranks
//   launched teardown S     (mpirun -np 2, 2 GPUs) the end of a communicator whose peer never
//                           finalises: bounded by the communicator's deadline (S) when nothing
//                           reported a failure, and an abort at once when jobkit's world group had
//                           reported the peer's failure (a program that caught it and returns)
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "jobkit/jobkit.hpp"
#include "jobkit/nccl.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using jobkit::reduce_op;
namespace nccl = jobkit::nccl;

// Every element type the wrapper accepts, mapped at compile time.
static_assert(jobkit::detail::nccl_data_type_of<std::int8_t>() == ncclInt8 &&
              jobkit::detail::nccl_data_type_of<char>() == ncclInt8);
static_assert(jobkit::detail::nccl_data_type_of<std::uint8_t>() == ncclUint8);
static_assert(jobkit::detail::nccl_data_type_of<std::int32_t>() == ncclInt32 &&
              jobkit::detail::nccl_data_type_of<std::uint32_t>() == ncclUint32);
static_assert(jobkit::detail::nccl_data_type_of<std::int64_t>() == ncclInt64 &&
              jobkit::detail::nccl_data_type_of<std::uint64_t>() == ncclUint64);
static_assert(jobkit::detail::nccl_data_type_of<__half>() == ncclFloat16 &&
              jobkit::detail::nccl_data_type_of<__nv_bfloat16>() == ncclBfloat16);
static_assert(jobkit::detail::nccl_data_type_of<float>() == ncclFloat32 &&
              jobkit::detail::nccl_data_type_of<double>() == ncclFloat64);

std::string clean(std::string text) {
  for (auto& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

struct reporter {
  std::string prefix;  // "rank N." in launched modes
  int failed = 0;

  void result(const std::string& name, std::string_view status, const std::string& detail) {
    std::printf("CHECK\t%s%s\t%.*s\t%s\n", prefix.c_str(), name.c_str(), static_cast<int>(status.size()), status.data(),
                clean(detail).c_str());
    std::fflush(stdout);
  }
  bool check(const std::string& name, bool ok, const std::string& detail = {}) {
    result(name, ok ? "PASS" : "FAIL", detail);
    if (!ok) ++failed;
    return ok;
  }
  void skip(const std::string& name, const std::string& why) { result(name, "SKIP", why); }
  void warn(const std::string& name, const std::string& detail) { result(name, "WARN", detail); }
  void timing(const std::string& name, double value, const char* unit, const std::string& detail = {}) {
    std::printf("TIME\t%s%s\t%.3f\t%s\t%s\n", prefix.c_str(), name.c_str(), value, unit, clean(detail).c_str());
    std::fflush(stdout);
  }
  void info(const std::string& key, const std::string& value) {
    std::printf("INFO\t%s%s\t%s\n", prefix.c_str(), key.c_str(), clean(value).c_str());
    std::fflush(stdout);
  }
  /// Runs body; an exception it lets out is this check's failure (and the others go on).
  void guarded(const std::string& name, const std::function<void()>& body) {
    try {
      body();
    } catch (const std::exception& e) {
      check(name, false, std::string("unexpected exception: ") + e.what());
    }
  }
  /// body must throw jobkit::error of kind `code` whose text holds `part`.
  void expect_error(const std::string& name, jobkit::errc code, const std::string& part,
                    const std::function<void()>& body) {
    try {
      body();
      check(name, false, "no error");
    } catch (const jobkit::error& e) {
      const bool ok = e.code() == code && std::string(e.what()).find(part) != std::string::npos;
      check(name, ok,
            std::string(jobkit::to_string(e.code())) + ": " + e.what() +
                (ok ? "" : " (expected " + std::string(jobkit::to_string(code)) + " naming '" + part + "')"));
    } catch (const std::exception& e) {
      check(name, false, std::string("not a jobkit::error: ") + e.what());
    }
  }
};

void cuda_ok(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                             ")");
  }
}

void nccl_ok(ncclResult_t result, const char* call) {
  if (result != ncclSuccess) throw std::runtime_error(std::string(call) + ": " + ncclGetErrorString(result));
}

/// Waits for a non-blocking communicator's pending work (ncclInProgress) as the wrapper does.
void wait_comm(ncclComm_t comm, const char* call) {
  ncclResult_t state = ncclInProgress;
  const auto deadline = clock_type::now() + std::chrono::seconds(60);
  while (state == ncclInProgress) {
    nccl_ok(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state == ncclInProgress && clock_type::now() > deadline) {
      throw std::runtime_error(std::string(call) + " still in progress after 60 s");
    }
  }
  nccl_ok(state, call);
}

void group_end(ncclComm_t comm) {
  const ncclResult_t result = ncclGroupEnd();
  if (result == ncclInProgress) {
    wait_comm(comm, "ncclGroupEnd");
  } else {
    nccl_ok(result, "ncclGroupEnd");
  }
}

std::string nccl_version_text(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::string cuda_version_text(int code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }

int visible_gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// ---- element values: small integers, exact in every type, as bytes ----

template <class T>
std::array<unsigned char, sizeof(T)> encode(int k) {
  std::array<unsigned char, sizeof(T)> bytes{};
  if constexpr (std::is_same_v<T, __half>) {
    // k in [1, 2047]: exponent e = floor(log2 k), 10 mantissa bits
    int e = 0;
    while ((k >> (e + 1)) != 0) ++e;
    const auto bits = static_cast<std::uint16_t>(((e + 15) << 10) | ((k - (1 << e)) << (10 - e)));
    std::memcpy(bytes.data(), &bits, sizeof bits);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const float value = static_cast<float>(k);  // k < 256: exact in 8 significant bits
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    const auto top = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(bytes.data(), &top, sizeof top);
  } else {
    const T value = static_cast<T>(k);
    std::memcpy(bytes.data(), &value, sizeof value);
  }
  return bytes;
}

/// count elements for `seed`, as bytes.
template <class T>
std::vector<unsigned char> values(std::size_t count, int seed) {
  std::vector<unsigned char> out(count * sizeof(T));
  for (std::size_t i = 0; i < count; ++i) {
    const int k = 1 + static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 100);
    const auto bytes = encode<T>(k);
    std::memcpy(out.data() + i * sizeof(T), bytes.data(), sizeof(T));
  }
  return out;
}

/// Device buffers with a guard zone after each: a wrapper that passes the wrong type or count
/// writes too little (the result differs) or too much (the guard changes).
struct device_buffer {
  static constexpr std::size_t guard = 256;
  std::size_t bytes = 0;
  void* data = nullptr;
  explicit device_buffer(std::size_t n) : bytes(n) { cuda_ok(cudaMalloc(&data, n + guard), "cudaMalloc"); }
  ~device_buffer() { cudaFree(data); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  // Both end with the device idle: the collectives run on a non-blocking stream, which does not wait
  // for the legacy default stream that cudaMemset and cudaMemcpy use.
  void fill(unsigned char value) {
    cuda_ok(cudaMemset(data, value, bytes + guard), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void upload(const std::vector<unsigned char>& host) {
    fill(0xAB);
    cuda_ok(cudaMemcpy(data, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy (to the device)");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> host(bytes + guard);
    cuda_ok(cudaMemcpy(host.data(), data, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy (to the host)");
    return host;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

/// The first `expected.size()` bytes equal expected and the guard still holds 0xAB.
std::string compare(const device_buffer& buffer, const std::vector<unsigned char>& expected) {
  const auto got = buffer.download();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (got[i] != expected[i]) return "byte " + std::to_string(i) + " differs";
  }
  for (std::size_t i = expected.size(); i < got.size(); ++i) {
    if (got[i] != 0xAB) return "wrote past the end (byte " + std::to_string(i) + ")";
  }
  return {};
}

constexpr std::array<reduce_op, 4> nccl_ops{reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max};

/// Every collective of the wrapper for element type T at world size 1: the result must be the
/// input, exactly count elements, for every reduction, out of place and in place.
template <class T>
void check_type(reporter& r, nccl::communicator& comm, cudaStream_t stream, const std::string& type) {
  constexpr std::size_t count = 1000;
  const std::size_t bytes = count * sizeof(T);
  device_buffer send(bytes), recv(bytes);
  const auto input = values<T>(count, static_cast<int>(sizeof(T)));
  std::vector<std::string> problems;
  const auto verify = [&](const std::string& what, const device_buffer& buffer) {
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (auto problem = compare(buffer, input); !problem.empty()) problems.push_back(what + ": " + problem);
  };
  for (const auto op : nccl_ops) {
    const std::string name(jobkit::to_string(op));
    send.upload(input);
    recv.fill(0xAB);
    comm.all_reduce(send.as<const T>(), recv.as<T>(), count, op, stream);
    verify("all_reduce " + name, recv);
    comm.all_reduce(send.as<const T>(), send.as<T>(), count, op, stream);  // in place
    verify("all_reduce in place " + name, send);
    recv.fill(0xAB);
    comm.reduce_scatter(send.as<const T>(), recv.as<T>(), count, op, stream);
    verify("reduce_scatter " + name, recv);
  }
  send.upload(input);
  recv.fill(0xAB);
  comm.broadcast(send.as<const T>(), recv.as<T>(), count, 0, stream);
  verify("broadcast", recv);
  comm.broadcast(send.as<const T>(), send.as<T>(), count, 0, stream);
  verify("broadcast in place", send);
  recv.fill(0xAB);
  comm.all_gather(send.as<const T>(), recv.as<T>(), count, stream);
  verify("all_gather", recv);
  recv.fill(0xAB);
  ncclGroupStart();
  comm.send(send.as<const T>(), count, 0, stream);
  comm.recv(recv.as<T>(), count, 0, stream);
  group_end(comm.native());
  verify("send/recv to self", recv);
  std::string detail = std::to_string(count) +
                       " elements: all_reduce, all_reduce in place, reduce_scatter "
                       "(sum, prod, min, max), broadcast, broadcast in place, all_gather, send/recv to self";
  for (const auto& p : problems) detail += "; " + p;
  r.check("collectives." + type, problems.empty(), detail);
}

template <class T>
void check_scalar(reporter& r, nccl::communicator& comm, T value, const std::string& type) {
  const T reduced = comm.all_reduce_value(value, reduce_op::sum);
  const T broadcast = comm.broadcast_value(value, 0);
  r.check("scalar_helpers." + type, reduced == value && broadcast == value,
          "all_reduce_value(sum) and broadcast_value(root 0) return the value at world size 1");
}

// ---- GPU-free checks ----

void gpu_free_checks(reporter& r) {
  r.check(
      "types.compile_time", true,
      "nccl_data_type_of: int8, char, uint8, int32, uint32, int64, uint64, half, bf16, float, double (static_assert)");
  r.guarded("device_rule", [&] {
    const bool rule =
        nccl::select_device(1, 3, 4) == 0 && nccl::select_device(4, 2, 4) == 2 && nccl::select_device(8, 3, 4) == 3;
    r.check("device_rule", rule, "one visible device -> 0; at least local_world_size -> local_rank");
  });
  r.expect_error("device_rule.too_few", jobkit::errc::invalid_environment, "sees 2 CUDA devices",
                 [] { nccl::select_device(2, 0, 4); });
  r.expect_error("device_rule.none", jobkit::errc::invalid_environment, "sees no CUDA device",
                 [] { nccl::select_device(0, 0, 1); });
  // reduction_of and throw_nccl_error are the library's own: tests/unit/test_nccl.cpp checks them.
  r.guarded("ids.world1", [&] {
    const auto a = nccl::share_unique_ids();
    const auto b = nccl::share_unique_ids();
    const bool fresh = a.size() == 1 && b.size() == 1 && std::memcmp(&a[0], &b[0], sizeof(ncclUniqueId)) != 0;
    r.check("ids.world1", fresh, "share_unique_ids at world size 1: one id, made locally, a new one per call");
  });
  r.expect_error("ids.ranks_per_root", jobkit::errc::invalid_argument, "ranks_per_root=0",
                 [] { nccl::share_unique_ids(0); });
}

void no_gpu_checks(reporter& r) {
  const auto start = clock_type::now();
  r.expect_error("no_gpu.visible_devices", jobkit::errc::cuda, "cudaGetDeviceCount", [] { nccl::visible_devices(); });
  r.expect_error("no_gpu.communicator", jobkit::errc::cuda, "cudaGetDeviceCount", [] { nccl::communicator comm; });
  const double elapsed = seconds_since(start);
  r.check("no_gpu.prompt", elapsed < 10, "both errors within " + std::to_string(elapsed) + " s");
}

// ---- GPU checks ----

void gpu_checks(reporter& r) {
  const auto devices = nccl::visible_devices();
  for (const auto& d : devices) {
    r.info("device." + std::to_string(d.index), d.name + " " + d.uuid + " " + d.pci_bus_id);
  }
  r.check("visible_devices", !devices.empty(), std::to_string(devices.size()) + " device(s)");

  std::optional<nccl::communicator> comm;
  const auto start = clock_type::now();
  try {
    comm.emplace();
  } catch (const std::exception& e) {
    r.check("communicator.create", false, e.what());
    return;  // nothing else can run without it
  }
  const double created = seconds_since(start);
  const auto& t = comm->timing();
  r.check("communicator.create",
          comm->native() != nullptr && comm->rank() == 0 && comm->size() == 1 && comm->device() >= 0 &&
              comm->device() < static_cast<int>(devices.size()),
          "rank " + std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) + " on device " +
              std::to_string(comm->device()) + " in " + std::to_string(created * 1e3) + " ms");
  r.timing("create.select", static_cast<double>(t.device_selection.count()) / 1e3, "ms");
  r.timing("create.ids", static_cast<double>(t.id_exchange.count()) / 1e3, "ms");
  r.timing("create.nccl_init", static_cast<double>(t.nccl_init.count()) / 1e3, "ms");
  r.check("communicator.timing", t.nccl_init.count() > 0, "phases recorded by timing()");
  int nccl_device = -1, nccl_rank = -1, nccl_count = -1;
  ncclCommCuDevice(comm->native(), &nccl_device);
  ncclCommUserRank(comm->native(), &nccl_rank);
  ncclCommCount(comm->native(), &nccl_count);
  r.check("communicator.native", nccl_device == comm->device() && nccl_rank == 0 && nccl_count == 1,
          "NCCL's own view: device " + std::to_string(nccl_device) + ", rank " + std::to_string(nccl_rank) + " of " +
              std::to_string(nccl_count));

  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

  const auto typed = [&](const std::string& type, auto tag) {
    using T = decltype(tag);
    r.guarded("collectives." + type, [&] { check_type<T>(r, *comm, stream, type); });
  };
  typed("int8", std::int8_t{});
  typed("char", char{});
  typed("uint8", std::uint8_t{});
  typed("int32", std::int32_t{});
  typed("uint32", std::uint32_t{});
  typed("int64", std::int64_t{});
  typed("uint64", std::uint64_t{});
  typed("half", __half{});
  typed("bf16", __nv_bfloat16{});
  typed("float", float{});
  typed("double", double{});

  r.guarded("scalar_helpers", [&] {
    check_scalar(r, *comm, 2.5f, "float");
    check_scalar(r, *comm, -7.25, "double");
    check_scalar(r, *comm, std::int64_t{1} << 40, "int64");
    check_scalar(r, *comm, std::int32_t{-12345}, "int32");
  });
  r.guarded("scalar_helpers.stream", [&] {
    r.check("scalar_helpers.stream", comm->all_reduce_value(3.0f, reduce_op::max, stream) == 3.0f,
            "all_reduce_value on a non-default stream");
  });

  // Reductions NCCL lacks are refused before any NCCL call.
  r.guarded("errors.bitwise_op", [&] {
    device_buffer buffer(64);
    r.expect_error("errors.bitwise_op", jobkit::errc::invalid_argument, "NCCL has no reduction for op=band",
                   [&] { comm->all_reduce(buffer.as<const int>(), buffer.as<int>(), 16, reduce_op::band, stream); });
  });
  r.guarded("errors.avg_integral", [&] {
    device_buffer buffer(64);
    r.expect_error("errors.avg_integral", jobkit::errc::invalid_argument, "avg takes floating-point",
                   [&] { comm->all_reduce(buffer.as<const int>(), buffer.as<int>(), 16, reduce_op::avg, stream); });
  });

  // split, split_node, split_one_per_node, and a color that takes no part.
  r.guarded("split", [&] {
    auto part = comm->split(0, 0);
    const float v = part.all_reduce_value(4.0f, reduce_op::sum);
    r.check("split", part.native() != nullptr && part.rank() == 0 && part.size() == 1 && v == 4.0f,
            "split(0, 0): rank " + std::to_string(part.rank()) + " of " + std::to_string(part.size()) +
                ", all_reduce_value works on it, " + std::to_string(part.timing().nccl_init.count()) + " us");
    auto none = comm->split(NCCL_SPLIT_NOCOLOR, 0);
    r.check("split.nocolor", none.native() == nullptr, "NCCL_SPLIT_NOCOLOR gives an empty communicator");
    auto node = comm->split_node();
    auto leaders = comm->split_one_per_node();
    r.check("split.node", node.size() == 1 && leaders.has_value() && leaders->size() == 1,
            "split_node() and split_one_per_node() at world size 1");
  });

  // Two communicators at once, each with its own PMIx-free id.
  r.guarded("communicator.second", [&] {
    nccl::communicator second;
    const double a = comm->all_reduce_value(1.5, reduce_op::sum);
    const double b = second.all_reduce_value(2.5, reduce_op::sum);
    r.check("communicator.second", a == 1.5 && b == 2.5 && second.native() != comm->native(),
            "a second communicator beside the first, both working");
  });

  // Moves.
  r.guarded("communicator.move", [&] {
    nccl::communicator first;
    const ncclComm_t native = first.native();
    nccl::communicator moved(std::move(first));
    bool ok = first.native() == nullptr && moved.native() == native &&  // NOLINT(bugprone-use-after-move)
              moved.all_reduce_value(6, reduce_op::sum) == 6;
    nccl::communicator other;
    other = std::move(moved);  // releases other's own communicator first
    ok = ok && other.native() == native && other.all_reduce_value(7, reduce_op::sum) == 7;
    r.check("communicator.move", ok, "move construction and move assignment keep the NCCL communicator");
  });

  // abort(), and a call on the aborted communicator.
  r.guarded("communicator.abort", [&] {
    nccl::communicator doomed;
    const auto t0 = clock_type::now();
    doomed.abort();
    const double took = seconds_since(t0);
    r.check("communicator.abort", doomed.native() == nullptr,
            "abort() empties it in " + std::to_string(took * 1e3) + " ms");
    device_buffer buffer(64);
    r.expect_error("errors.after_abort", jobkit::errc::nccl, "ncclAllReduce failed", [&] {
      doomed.all_reduce(buffer.as<const float>(), buffer.as<float>(), 16, reduce_op::sum, stream);
    });
  });  // the aborted communicator's destructor has nothing left to do

  // An argument error NCCL always checks (pointers it checks only with NCCL_CHECK_POINTERS=1): a root
  // outside the communicator. On a non-blocking communicator NCCL also records it as the
  // communicator's asynchronous error, so it gets a communicator of its own, destroyed after.
  r.guarded("errors.invalid_root", [&] {
    const auto t0 = clock_type::now();
    {
      nccl::communicator spoiled;
      device_buffer buffer(64);
      r.expect_error("errors.invalid_root", jobkit::errc::nccl, "ncclBroadcast failed",
                     [&] { spoiled.broadcast(buffer.as<const float>(), buffer.as<float>(), 16, 5, stream); });
    }
    r.check("errors.invalid_root.destroy", seconds_since(t0) < 60,
            "the communicator that saw the error is destroyed (finalised or aborted) in " +
                std::to_string(seconds_since(t0) * 1e3) + " ms");
  });

  r.expect_error("errors.device_out_of_range", jobkit::errc::invalid_argument, "device=99", [] {
    nccl::communicator_options options;
    options.device = 99;
    nccl::communicator comm(options);
  });
  r.expect_error("errors.device_negative", jobkit::errc::invalid_argument, "device=-1", [] {
    nccl::communicator_options options;
    options.device = -1;
    nccl::communicator comm(options);
  });

  // Destruction: normally (ncclCommFinalize + ncclCommDestroy), and during stack unwinding (abort).
  r.guarded("communicator.destroy", [&] {
    std::optional<nccl::communicator> plain;
    plain.emplace();
    plain->all_reduce_value(1.0f, reduce_op::sum);
    const auto t0 = clock_type::now();
    plain.reset();
    const double took = seconds_since(t0);
    r.timing("checks.destroy", took * 1e3, "ms", "finalize + destroy after one all_reduce");
    r.check("communicator.destroy", took < 60, "destroyed in " + std::to_string(took * 1e3) + " ms");
  });
  r.guarded("communicator.unwind", [&] {
    clock_type::time_point thrown;
    double took = -1;
    std::string what;
    try {
      nccl::communicator during;
      during.all_reduce_value(1.0f, reduce_op::sum);
      thrown = clock_type::now();
      throw std::runtime_error("planned");
    } catch (const std::runtime_error& e) {
      took = seconds_since(thrown);  // the communicator's destructor ran in between
      what = e.what();
    }
    r.timing("checks.unwind", took * 1e3, "ms", "throw to catch, across the communicator's destructor (abort)");
    r.check("communicator.unwind", what == "planned" && took < 60,
            "a communicator left by an exception is aborted in " + std::to_string(took * 1e3) +
                " ms, and the exception goes on");
  });

  comm.reset();
  cuda_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

// ---- benchmark ----

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

std::string spread(const std::vector<double>& v, const char* unit) {
  char text[128];
  std::snprintf(text, sizeof text, "median of %zu, min %.3f %s, max %.3f %s", v.size(), minimum(v), unit,
                *std::max_element(v.begin(), v.end()), unit);
  return text;
}

void bench(reporter& r, bool quick) {
  const int creations = quick ? 4 : 11;
  const int iterations = quick ? 2000 : 20000;
  const int repeats = quick ? 5 : 9;
  r.info("bench.settings", std::to_string(creations) + " creations of each kind; " + std::to_string(iterations) +
                               " calls per loop, " + std::to_string(repeats) + " loops of each");
  int device = 0;
  {
    nccl::communicator warm;  // CUDA context, NCCL's one-time setup
    device = warm.device();
  }
  cuda_ok(cudaSetDevice(device), "cudaSetDevice");

  // Creation: jobkit's communicator against raw ncclGetUniqueId + ncclCommInitRank (blocking), and
  // raw non-blocking ncclCommInitRankConfig polled without sleeping (how jobkit creates it).
  std::vector<double> jobkit_create, raw_create, raw_nb_create, jobkit_destroy, raw_destroy;
  std::vector<double> phase_ids, phase_init;
  for (int i = 0; i < creations; ++i) {
    {
      auto t0 = clock_type::now();
      auto comm = std::make_optional<nccl::communicator>();
      jobkit_create.push_back(seconds_since(t0) * 1e3);
      phase_ids.push_back(static_cast<double>(comm->timing().id_exchange.count()) / 1e3);
      phase_init.push_back(static_cast<double>(comm->timing().nccl_init.count()) / 1e3);
      t0 = clock_type::now();
      comm.reset();
      jobkit_destroy.push_back(seconds_since(t0) * 1e3);
    }
    {
      auto t0 = clock_type::now();
      ncclUniqueId id;
      nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
      ncclComm_t raw = nullptr;
      nccl_ok(ncclCommInitRank(&raw, 1, id, 0), "ncclCommInitRank");
      raw_create.push_back(seconds_since(t0) * 1e3);
      t0 = clock_type::now();
      nccl_ok(ncclCommDestroy(raw), "ncclCommDestroy");
      raw_destroy.push_back(seconds_since(t0) * 1e3);
    }
    {
      const auto t0 = clock_type::now();
      ncclUniqueId id;
      nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
      ncclComm_t raw = nullptr;
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t result = ncclCommInitRankConfig(&raw, 1, id, 0, &config);
      if (result != ncclInProgress) nccl_ok(result, "ncclCommInitRankConfig");
      wait_comm(raw, "ncclCommInitRankConfig");
      raw_nb_create.push_back(seconds_since(t0) * 1e3);
      nccl_ok(ncclCommDestroy(raw), "ncclCommDestroy");
    }
  }
  r.timing("create.jobkit", median(jobkit_create), "ms", spread(jobkit_create, "ms"));
  r.timing("create.jobkit.ids", median(phase_ids), "ms", "id exchange phase: " + spread(phase_ids, "ms"));
  r.timing("create.jobkit.nccl_init", median(phase_init), "ms",
           "NCCL init phase (polled every 1 ms): " + spread(phase_init, "ms"));
  r.timing("create.raw_blocking", median(raw_create), "ms",
           "ncclGetUniqueId + ncclCommInitRank: " + spread(raw_create, "ms"));
  r.timing("create.raw_nonblocking", median(raw_nb_create), "ms",
           "ncclGetUniqueId + ncclCommInitRankConfig(blocking=0), busy poll: " + spread(raw_nb_create, "ms"));
  r.timing("create.jobkit_minus_raw", median(jobkit_create) - median(raw_create), "ms", "difference of the medians");
  r.timing("destroy.jobkit", median(jobkit_destroy), "ms", "finalize + destroy: " + spread(jobkit_destroy, "ms"));
  r.timing("destroy.raw", median(raw_destroy), "ms", "ncclCommDestroy: " + spread(raw_destroy, "ms"));

  // Per call: the same non-blocking communicator through the wrapper and through raw NCCL, and a
  // raw blocking communicator for reference; host time around a loop ended by a stream synchronise.
  nccl::communicator comm;
  ncclUniqueId id;
  nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t blocking = nullptr;
  nccl_ok(ncclCommInitRank(&blocking, 1, id, 0), "ncclCommInitRank");
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  device_buffer buffer(1 << 20);
  buffer.fill(0);
  const ncclComm_t native = comm.native();

  struct loop_result {
    std::vector<double> total_us, enqueue_us;
  };
  const auto measure = [&](const std::function<void()>& call, loop_result& out) {
    for (int i = 0; i < 50; ++i) call();  // warm-up
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const auto t0 = clock_type::now();
    for (int i = 0; i < iterations; ++i) call();
    const auto t1 = clock_type::now();
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double total = seconds_since(t0);
    out.total_us.push_back(total * 1e6 / iterations);
    out.enqueue_us.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e6 / iterations);
  };
  const auto raw_call = [](ncclResult_t result, ncclComm_t c, const char* what) {
    if (result == ncclInProgress) {
      wait_comm(c, what);
    } else {
      nccl_ok(result, what);
    }
  };
  bool all_within_target = true;
  for (const std::size_t count : {std::size_t{1}, std::size_t{1024}}) {
    const std::string size = std::to_string(count * sizeof(float)) + "B";
    struct variant {
      std::string name;
      std::function<void()> call;
      loop_result result;
    };
    float* data = buffer.as<float>();
    std::vector<variant> variants;
    variants.push_back(
        {"all_reduce.wrapper", [&, data, count] { comm.all_reduce(data, data, count, reduce_op::sum, stream); }, {}});
    variants.push_back({"all_reduce.raw",
                        [&, data, count] {
                          raw_call(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, native, stream), native,
                                   "ncclAllReduce");
                        },
                        {}});
    variants.push_back({"all_reduce.raw_blocking",
                        [&, data, count] {
                          raw_call(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, blocking, stream), blocking,
                                   "ncclAllReduce");
                        },
                        {}});
    variants.push_back({"broadcast.wrapper", [&, data, count] { comm.broadcast(data, data, count, 0, stream); }, {}});
    variants.push_back({"broadcast.raw",
                        [&, data, count] {
                          raw_call(ncclBroadcast(data, data, count, ncclFloat32, 0, native, stream), native,
                                   "ncclBroadcast");
                        },
                        {}});
    for (int rep = 0; rep < repeats; ++rep) {  // interleaved, so drift hits every variant alike
      for (auto& v : variants) measure(v.call, v.result);
    }
    for (const auto& v : variants) {
      r.timing("call." + v.name + "." + size, median(v.result.total_us), "us",
               "per call, synchronised loop: " + spread(v.result.total_us, "us") + "; enqueue only " +
                   std::to_string(median(v.result.enqueue_us)) + " us");
    }
    for (const std::string op : {"all_reduce", "broadcast"}) {
      const auto& wrapper =
          std::find_if(variants.begin(), variants.end(), [&](auto& v) { return v.name == op + ".wrapper"; })->result;
      const auto& raw =
          std::find_if(variants.begin(), variants.end(), [&](auto& v) { return v.name == op + ".raw"; })->result;
      const double overhead = median(wrapper.total_us) - median(raw.total_us);
      const double overhead_enqueue = median(wrapper.enqueue_us) - median(raw.enqueue_us);
      r.timing("overhead." + op + "." + size, overhead, "us",
               "wrapper minus raw NCCL on the same communicator (medians); enqueue only " +
                   std::to_string(overhead_enqueue) + " us");
      all_within_target = all_within_target && overhead <= 1.0;
    }
  }
  if (all_within_target) {
    r.result("bench.wrapper_overhead_target", "PASS", "the wrapper costs at most 1 us per call over raw NCCL");
  } else {
    r.warn("bench.wrapper_overhead_target",
           "the wrapper costs more than 1 us per call over raw NCCL somewhere "
           "(see overhead.*); a benchmark target, not a failure");
  }
  cuda_ok(cudaStreamDestroy(stream), "cudaStreamDestroy");
  nccl_ok(ncclCommDestroy(blocking), "ncclCommDestroy");
}

// ---- modes run in a process of their own ----

/// Under torchrun variables of world size 2 and no PMIx server: the communicator cannot exchange its
/// ids, and says so at once (not after a deadline).
void child_world2(reporter& r, int seconds) {
  const auto& id = jobkit::current_identity();
  r.info("identity", jobkit::to_string(id));
  const auto start = clock_type::now();
  const bool gpu = visible_gpu_count() > 0;
  r.expect_error("world2.ids", jobkit::errc::invalid_environment, "needs the launcher's PMIx server",
                 [&] { nccl::share_unique_ids(128, {.timeout = std::chrono::seconds(seconds)}); });
  if (gpu) {
    r.expect_error("world2.communicator", jobkit::errc::invalid_environment, "needs the launcher's PMIx server", [&] {
      nccl::communicator_options options;
      options.call.timeout = std::chrono::seconds(seconds);
      nccl::communicator comm(options);
    });
  } else {
    r.expect_error("world2.communicator", jobkit::errc::cuda, "cudaGetDeviceCount", [&] {
      nccl::communicator_options options;
      options.call.timeout = std::chrono::seconds(seconds);
      nccl::communicator comm(options);
    });
  }
  const double took = seconds_since(start);
  r.check("world2.prompt", took < seconds,
          "refused in " + std::to_string(took * 1e3) + " ms, before the " + std::to_string(seconds) + " s deadline");
}

/// Raw NCCL: a 2-rank non-blocking initialisation with one rank stays in progress, and ncclCommAbort
/// ends it. jobkit's deadline (poll, then abort) rests on exactly this.
void child_raw_deadline(reporter& r, int seconds) {
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  ncclUniqueId id;
  nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto start = clock_type::now();
  const ncclResult_t result = ncclCommInitRankConfig(&comm, 2, id, 0, &config);
  ncclResult_t state = result;
  while (state == ncclInProgress && seconds_since(start) < seconds) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.check("raw_deadline.in_progress", state == ncclInProgress,
          std::string("2 ranks, 1 present: still ncclInProgress after ") + std::to_string(seconds) + " s (got " +
              ncclGetErrorString(state) + ")");
  if (comm == nullptr) return;
  const auto t0 = clock_type::now();
  const ncclResult_t aborted = ncclCommAbort(comm);
  const double took = seconds_since(t0);
  r.timing("raw_deadline.abort", took * 1e3, "ms");
  r.check("raw_deadline.abort", aborted == ncclSuccess,
          std::string("ncclCommAbort: ") + ncclGetErrorString(aborted) + " in " + std::to_string(took * 1e3) + " ms");
}

int launched(reporter& r, const std::string& what, int seconds) {
  const auto& id = jobkit::current_identity();
  r.prefix = "rank" + std::to_string(id.rank) + ".";
  r.info("identity", jobkit::to_string(id));
  if (id.world_size != 2) {
    r.check("launched.world_size", false,
            "launched modes need exactly 2 ranks (mpirun -np 2), got " + std::to_string(id.world_size));
    return 1;
  }
  const jobkit::call_options deadline{.timeout = std::chrono::seconds(seconds)};
  if (what == "ids") {
    const auto ids = nccl::share_unique_ids(128, deadline);
    const std::string bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(ncclUniqueId));
    const auto everyone = jobkit::all_gather(bytes);
    r.check("ids", ids.size() == 1 && everyone.size() == 2 && everyone[0] == everyone[1],
            "one id, the same bytes on both ranks, through PMIx");
  } else if (what == "fence" || what == "init") {
    jobkit::barrier(deadline);  // the world's connections are up: only the exchange is missing
    if (id.rank == 1) {
      if (what == "init") {
        // Join the duplicate-GPU check and the id exchange, then never initialise NCCL.
        nccl::check_unique_devices(jobkit::node_group(), {1, id.local_rank, id.hostname, 1, "GPU-rank-1-stays-out"},
                                   deadline);
        nccl::share_unique_ids(128, deadline);
      }
      std::this_thread::sleep_for(std::chrono::seconds(seconds + 3));
      r.check("stayed_out", true,
              what == "init" ? "took the ids, never initialised NCCL" : "never joined the exchange");
      return 0;
    }
    const auto start = clock_type::now();
    try {
      if (what == "fence") {
        nccl::share_unique_ids(128, deadline);
      } else {
        nccl::communicator_options options;
        options.call = deadline;
        options.device = 0;
        nccl::communicator comm(options);
      }
      r.check("deadline." + what, false, "no error although rank 1 stayed out");
    } catch (const jobkit::timeout_error& e) {
      const double took = seconds_since(start);
      r.timing("deadline." + what, took * 1e3, "ms", "deadline " + std::to_string(seconds) + " s");
      r.check("deadline." + what, took >= seconds * 0.9 && took < seconds + 10,
              "timeout_error after " + std::to_string(took) + " s: " + e.what());
    } catch (const std::exception& e) {
      r.check("deadline." + what, false, std::string("not a timeout_error: ") + e.what());
    }
  } else if (what == "pair") {
    const int gpus = visible_gpu_count();
    nccl::communicator_options options;
    options.call = deadline;
    if (gpus >= 2) {
      nccl::communicator comm(options);
      const int sum = comm.all_reduce_value(id.rank + 1, reduce_op::sum);
      const double root = comm.broadcast_value(id.rank == 0 ? 42.5 : -1.0, 0);
      r.check("pair.world2", sum == 3 && root == 42.5 && comm.size() == 2,
              "a 2-rank communicator on 2 GPUs: all_reduce_value and broadcast_value across ranks");
    } else {
      r.expect_error("pair.duplicate_gpu", jobkit::errc::invalid_environment, "several ranks chose the same GPU",
                     [&] { nccl::communicator comm(options); });
    }
  } else if (what == "teardown") {
    if (visible_gpu_count() < 2) {
      r.skip("teardown", "needs 2 GPUs (one per rank): " + std::to_string(visible_gpu_count()) + " visible");
      return 0;
    }
    nccl::communicator_options options;
    options.call = deadline;
    // 1. The peer never finalises and nothing reported it: the end waits for the deadline, then aborts.
    {
      std::optional<nccl::communicator> comm(std::in_place, options);
      comm->all_reduce_value(1, reduce_op::sum);
      if (id.rank == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(seconds + 3));
        comm->abort();
      } else {
        const auto start = clock_type::now();
        comm.reset();
        const double took = seconds_since(start);
        r.timing("teardown.silent_peer", took * 1e3, "ms", "deadline " + std::to_string(seconds) + " s");
        r.check("teardown.silent_peer", took >= seconds * 0.9 && took < seconds + 10,
                "ended in " + std::to_string(took) + " s: finalisation polled until the communicator's " +
                    std::to_string(seconds) + " s deadline, then ncclCommAbort");
      }
    }
    jobkit::barrier(deadline);
    // 2. The peer failed and jobkit's world group said so (caught here): the end aborts at once,
    //    although no exception is in flight.
    {
      options.call.timeout = std::chrono::seconds(120);  // a finalisation would wait this long
      std::optional<nccl::communicator> comm(std::in_place, options);
      comm->all_reduce_value(1, reduce_op::sum);
      if (id.rank == 1) {
        jobkit::world().abort("rank 1 failed on purpose (gpu_check teardown)");
        std::this_thread::sleep_for(std::chrono::seconds(seconds + 3));
        comm->abort();
      } else {
        bool reported = false;
        try {
          jobkit::barrier(deadline);
        } catch (const jobkit::error& e) {
          reported = std::string(e.what()).find("failed on purpose") != std::string::npos;
        }
        r.check("teardown.peer_failure_reported", reported, "the barrier reported rank 1's failure");
        const auto start = clock_type::now();
        comm.reset();
        const double took = seconds_since(start);
        r.timing("teardown.after_peer_failure", took * 1e3, "ms");
        r.check("teardown.after_peer_failure", took < 5,
                "ended in " + std::to_string(took) + " s (ncclCommAbort at once, not a 120 s finalisation)");
      }
    }
  } else {
    std::fprintf(stderr, "unknown launched mode '%s'\n", what.c_str());
    return 2;
  }
  return r.failed ? 1 : 0;
}

int usage() {
  std::fputs(
      "usage: gpu_check checks [expect-gpu] | bench [quick] | child world2|raw-deadline S | launched "
      "ids|fence|init|pair|teardown S\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage();
  reporter r;
  const std::string& mode = args[0];
  const int seconds = args.size() > 2 ? std::stoi(args[2]) : 5;
  try {
    if (mode == "checks") {
      int runtime_version = 0, driver_version = 0, nccl_version = 0;
      cudaRuntimeGetVersion(&runtime_version);
      cudaDriverGetVersion(&driver_version);
      ncclGetVersion(&nccl_version);
      r.info("cuda_runtime", cuda_version_text(runtime_version));
      r.info("cuda_driver_api", driver_version ? cuda_version_text(driver_version) : "none (no driver)");
      r.info("nccl_runtime", nccl_version_text(nccl_version));
      r.info("nccl_header", nccl_version_text(NCCL_VERSION_CODE));
      const auto& id = jobkit::current_identity();
      r.info("identity", jobkit::to_string(id));
      r.check("identity.world1", id.world_size == 1 && id.source == jobkit::identity_source::defaults,
              jobkit::to_string(id) + " (run with JOBKIT_IDENTITY=default)");
      gpu_free_checks(r);
      const int gpus = visible_gpu_count();
      r.info("gpu_count", std::to_string(gpus));
      if (gpus == 0 && args.size() > 1 && args[1] == "expect-gpu") {
        int count = 0;
        const cudaError_t status = cudaGetDeviceCount(&count);
        r.check("gpu.visible", false,
                std::string("the driver lists a GPU but CUDA sees none: cudaGetDeviceCount: ") +
                    cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
      }
      if (gpus == 0) {
        no_gpu_checks(r);
      } else {
        gpu_checks(r);
      }
    } else if (mode == "bench") {
      if (visible_gpu_count() == 0) {
        r.skip("bench", "no GPU");
      } else {
        bench(r, args.size() > 1 && args[1] == "quick");
      }
    } else if (mode == "child" && args.size() > 1 && args[1] == "world2") {
      child_world2(r, seconds);
    } else if (mode == "child" && args.size() > 1 && args[1] == "raw-deadline") {
      child_raw_deadline(r, seconds);
    } else if (mode == "launched" && args.size() > 1) {
      return launched(r, args[1], seconds);
    } else {
      return usage();
    }
  } catch (const std::exception& e) {
    r.check(mode + ".unexpected", false, e.what());
  }
  return r.failed ? 1 : 0;
}
