#include "jobkit/nccl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "core/failure.hpp"
#include "core/timeout.hpp"
#include "jobkit/helpers.hpp"
#include "jobkit/log.hpp"
#include "jobkit/runtime.hpp"
#include "log/library_log.hpp"
#include "nccl/device_rule.hpp"
#include "nccl/gpu_api.hpp"
#include "nccl/teardown.hpp"
#include "runtime/access.hpp"

namespace jobkit::nccl {
namespace {

using clock = std::chrono::steady_clock;

[[noreturn]] void throw_cuda(cudaError_t status, const std::string& call) {
  throw error(errc::cuda,
              fmt::format("{} failed on {}: {} ({})", call, detail::describe_self(),
                          detail::cuda_api().cudaGetErrorName(status), detail::cuda_api().cudaGetErrorString(status)),
              static_cast<int>(status));
}

std::string uuid_text(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0],
      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

std::chrono::microseconds since(clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - start);
}

/// Waits until a non-blocking communicator is ready. On error or deadline it aborts the
/// communicator, sets `comm` to null (the handle is freed) and throws.
void wait_for_communicator(ncclComm_t& comm, clock::time_point deadline, const std::string& what) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    const ncclResult_t polled = detail::nccl_api().ncclCommGetAsyncError(comm, &state);
    if (polled != ncclSuccess) state = polled;
    if (state != ncclInProgress) break;
    if (clock::now() >= deadline) {
      detail::nccl_api().ncclCommAbort(comm);
      comm = nullptr;
      throw timeout_error(fmt::format("{} timed out on {}: a rank never joined (it is late, stuck or dead); the "
                                      "communicator was aborted",
                                      what, detail::describe_self()),
                          static_cast<int>(ncclInProgress));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) {
    const std::string last = detail::nccl_api().ncclGetLastError(comm);
    detail::nccl_api().ncclCommAbort(comm);
    comm = nullptr;
    throw error(errc::nccl,
                fmt::format("{} failed on {}: {} ({})", what, detail::describe_self(),
                            detail::nccl_api().ncclGetErrorString(state), last),
                static_cast<int>(state));
  }
}

/// The teardown's calls on a communicator, through the NCCL that libjobkit loaded.
class nccl_teardown final : public detail::teardown_calls {
 public:
  explicit nccl_teardown(ncclComm_t comm) : comm_(comm) {}
  detail::nccl_state state() override {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t polled = detail::nccl_api().ncclCommGetAsyncError(comm_, &state);
    return answer(polled != ncclSuccess ? polled : state);
  }
  detail::nccl_state finalize() override { return answer(detail::nccl_api().ncclCommFinalize(comm_)); }
  void destroy() override { detail::nccl_api().ncclCommDestroy(comm_); }
  void abort() override { detail::nccl_api().ncclCommAbort(comm_); }
  clock::time_point now() override { return clock::now(); }
  void pause() override { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }

 private:
  static detail::nccl_state answer(ncclResult_t result) {
    if (result == ncclSuccess) return detail::nccl_state::ready;
    return result == ncclInProgress ? detail::nccl_state::in_progress : detail::nccl_state::failed;
  }
  ncclComm_t comm_;
};

/// A fresh PMIx key per communicator: PMIx 4.2 may read a re-put key's old value.
int next_communicator_number() {
  static int created = 0;
  return created++;
}

}  // namespace

std::vector<ncclUniqueId> share_unique_ids(int ranks_per_root, call_options options) {
  const auto timeout = detail::timeout_of(options.timeout, "share_unique_ids");
  if (ranks_per_root < 1) {
    throw error(errc::invalid_argument, fmt::format("ranks_per_root={} must be at least 1", ranks_per_root));
  }
  const auto& id = current_identity();
  const int n = id.world_size;
  int roots = 1;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  roots = (n + ranks_per_root - 1) / ranks_per_root;
#endif
  const auto root_rank = [&](int i) { return static_cast<int>(static_cast<long long>(i) * n / roots); };
  auto* pmix = n > 1 ? detail::runtime_access::rendezvous_of(default_runtime()) : nullptr;
  if (n > 1 && !pmix) {
    throw error(errc::invalid_environment,
                fmt::format("an NCCL communicator across {} ranks needs the launcher's PMIx server: launch with "
                            "srun --mpi=pmix (or mpirun)",
                            n));
  }
  const int number = next_communicator_number();
  const auto key = [&](int i) { return fmt::format("jobkit.nccl.{}.{}", number, i); };
  std::vector<ncclUniqueId> ids(static_cast<std::size_t>(roots));
  for (int i = 0; i < roots; ++i) {
    if (root_rank(i) != id.rank) continue;
    if (const auto result = detail::nccl_api().ncclGetUniqueId(&ids[static_cast<std::size_t>(i)]);
        result != ncclSuccess) {
      throw_nccl_error(result, "ncclGetUniqueId", nullptr);
    }
    if (pmix)
      pmix->put(key(i), {reinterpret_cast<const std::byte*>(&ids[static_cast<std::size_t>(i)]), sizeof(ncclUniqueId)});
  }
  if (!pmix) return ids;
  // With the world's connections up, a rank that dies during the PMIx fence is seen at once;
  // Slurm 22.05 does not always end the fence then.
  auto& all = world();
  all.setup(options);
  // Slurm 24.11's server has failed this fence (UNPACK_READ_PAST_END_OF_BUFFER), or ended it on
  // some ranks, while a root was dying: a failed fence and every read of an id also look for a
  // dead peer, so that the error names it.
  try {
    pmix->fence(timeout, [&] { all.check_peers("the NCCL id exchange (PMIx fence)"); });
  } catch (const error&) {
    all.check_peers("the NCCL id exchange (PMIx fence)");
    throw;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int i = 0; i < roots; ++i) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto check = [&] { all.check_peers("the NCCL id exchange (PMIx_Get of an id)"); };
    std::vector<std::byte> bytes;
    try {
      bytes = pmix->get(root_rank(i), key(i), std::max(left, std::chrono::milliseconds(0)), check);
    } catch (const error&) {
      check();  // Slurm 24.11 answered PMIX_ERR_NOT_FOUND on other nodes when the root had died
      throw;
    }
    if (bytes.size() != sizeof(ncclUniqueId)) {
      throw error(errc::pmix, fmt::format("the NCCL id from rank {} has {} bytes, not {}", root_rank(i), bytes.size(),
                                          sizeof(ncclUniqueId)));
    }
    std::memcpy(&ids[static_cast<std::size_t>(i)], bytes.data(), bytes.size());
  }
  return ids;
}

void throw_nccl_error(ncclResult_t result, const char* call, ncclComm_t comm) {
  throw error(errc::nccl,
              fmt::format("{} failed on {}: {} (last NCCL error: '{}')", call, detail::describe_self(),
                          detail::nccl_api().ncclGetErrorString(result), detail::nccl_api().ncclGetLastError(comm)),
              static_cast<int>(result));
}

ncclRedOp_t reduction_of(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::prod: return ncclProd;
    case reduce_op::min: return ncclMin;
    case reduce_op::max: return ncclMax;
    case reduce_op::avg: return ncclAvg;
    default: break;
  }
  throw error(errc::invalid_argument, fmt::format("NCCL has no reduction for op={}", to_string(op)));
}

std::vector<device_info> visible_devices() {
  int count = 0;
  if (const auto status = detail::cuda_api().cudaGetDeviceCount(&count); status != cudaSuccess) {
    throw_cuda(status, fmt::format("cudaGetDeviceCount ({})", visible_devices_variable()));
  }
  std::vector<device_info> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp properties{};
    if (const auto status = detail::cuda_api().cudaGetDeviceProperties(&properties, i); status != cudaSuccess) {
      throw_cuda(status, fmt::format("detail::cuda_api().cudaGetDeviceProperties({})", i));
    }
    char bus_id[32] = {};
    if (const auto status = detail::cuda_api().cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, i); status != cudaSuccess) {
      throw_cuda(status, fmt::format("detail::cuda_api().cudaDeviceGetPCIBusId({})", i));
    }
    devices.push_back({i, uuid_text(properties.uuid), bus_id, properties.name});
  }
  return devices;
}

std::optional<std::string> duplicate_devices(const std::vector<device_choice>& choices) {
  std::map<std::pair<std::string, std::string>, std::vector<const device_choice*>> by_gpu;  // (host, uuid)
  for (const auto& c : choices) by_gpu[{c.host, c.uuid}].push_back(&c);
  std::string table;
  for (const auto& [gpu, users] : by_gpu) {
    if (users.size() < 2) continue;
    for (const auto* c : users) {
      table += fmt::format("  {:<12} {:>6} {:>10} {:>6}  {}\n", c->host, c->rank, c->local_rank, c->device, c->uuid);
    }
  }
  if (table.empty()) return std::nullopt;
  return fmt::format(
      "several ranks chose the same GPU (NCCL would fail later with \"Duplicate GPU detected\"):\n"
      "  {:<12} {:>6} {:>10} {:>6}  {}\n{}",
      "host", "rank", "local_rank", "device", "uuid", table);
}

void check_unique_devices(group& node, const device_choice& mine, call_options options) {
  const auto all =
      node.all_gather(std::make_tuple(mine.rank, mine.local_rank, mine.host, mine.device, mine.uuid), options);
  std::vector<device_choice> choices;
  for (const auto& [rank, local_rank, host, device, uuid] : all)
    choices.push_back({rank, local_rank, host, device, uuid});
  if (const auto report = duplicate_devices(choices)) throw error(errc::invalid_environment, *report);
}

communicator::communicator(communicator_options options) : uncaught_at_creation_(std::uncaught_exceptions()) {
  const auto& id = current_identity();
  const auto timeout = detail::timeout_of(options.call.timeout, "communicator");
  const auto start = clock::now();

  const auto devices = visible_devices();
  device_ = options.device ? *options.device
                           : select_device(static_cast<int>(devices.size()), id.local_rank, id.local_world_size);
  if (device_ < 0 || device_ >= static_cast<int>(devices.size())) {
    throw error(errc::invalid_argument, fmt::format("communicator: device={} on {} which sees {} devices", device_,
                                                    detail::describe_self(), devices.size()));
  }
  if (const auto status = detail::cuda_api().cudaSetDevice(device_); status != cudaSuccess) {
    throw_cuda(status, fmt::format("detail::cuda_api().cudaSetDevice({})", device_));
  }
  if (id.local_world_size > 1) {
    check_unique_devices(node_group(), {id.rank, id.local_rank, id.hostname, device_, devices[device_].uuid},
                         options.call);
  }
  timing_.device_selection = since(start);

  const auto exchange_start = clock::now();
  const auto ids = share_unique_ids(options.ranks_per_root, {.timeout = timeout});
  const int n = id.world_size;
  const int roots = static_cast<int>(ids.size());
  timing_.id_exchange = since(exchange_start);

  const auto init_start = clock::now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclSuccess;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  if (roots > 1) {
    auto shared = ids;  // NCCL takes a non-const array
    result = detail::nccl_api().ncclCommInitRankScalable(&comm_, n, id.rank, roots, shared.data(), &config);
  } else
#endif
  {
    result = detail::nccl_api().ncclCommInitRankConfig(&comm_, n, ids.front(), id.rank, &config);
  }
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comm_) detail::nccl_api().ncclCommAbort(comm_);
    comm_ = nullptr;
    throw_nccl_error(result, roots > 1 ? "ncclCommInitRankScalable" : "ncclCommInitRankConfig", nullptr);
  }
  wait_for_communicator(comm_, init_start + timeout, "NCCL communicator initialisation");
  timing_.nccl_init = since(init_start);
  rank_ = id.rank;
  size_ = n;
  teardown_timeout_ = timeout;
  // The world's data path is up (share_unique_ids set it up): a collective of it that fails later
  // makes this communicator's end an abort.
  if (n > 1) peers_failed_ = detail::runtime_access::world_failed_flag(default_runtime());
  detail::library_log(
      log_level::debug,
      "NCCL communicator on device {} ({}): device selection {} us, id exchange {} us ({} root(s)), NCCL "
      "init {} us",
      device_, devices[device_].pci_bus_id, timing_.device_selection.count(), timing_.id_exchange.count(), roots,
      timing_.nccl_init.count());
}

communicator::~communicator() { release(); }

communicator::communicator(communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      size_(other.size_),
      device_(other.device_),
      timing_(other.timing_),
      scratch_(std::exchange(other.scratch_, nullptr)),
      uncaught_at_creation_(other.uncaught_at_creation_),
      failed_(other.failed_),
      peers_failed_(std::move(other.peers_failed_)),
      teardown_timeout_(other.teardown_timeout_) {}

communicator& communicator::operator=(communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    size_ = other.size_;
    device_ = other.device_;
    timing_ = other.timing_;
    scratch_ = std::exchange(other.scratch_, nullptr);
    uncaught_at_creation_ = other.uncaught_at_creation_;
    failed_ = other.failed_;
    peers_failed_ = std::move(other.peers_failed_);
    teardown_timeout_ = other.teardown_timeout_;
  }
  return *this;
}

void communicator::release() noexcept {
  if (comm_) {
    // The rules: src/nccl/teardown.hpp. An end during stack unwinding counts as a failure: peers
    // may be gone.
    const bool peers_failed = peers_failed_ && peers_failed_->load(std::memory_order_acquire);
    const bool unwinding = std::uncaught_exceptions() > uncaught_at_creation_;
    nccl_teardown calls(comm_);
    // teardown_timeout_ was set with comm_ (its creation's or its split's deadline, checked then).
    const auto end = detail::tear_down(calls, failed_ || peers_failed || unwinding, clock::now() + teardown_timeout_);
    detail::library_log(end == detail::teardown_end::aborted_at_deadline ? log_level::warning : log_level::debug,
                        "NCCL communicator (rank {} of {}) {}{}", rank_, size_, detail::to_string(end),
                        peers_failed ? " (a collective of jobkit's world group had failed)" : "");
    comm_ = nullptr;
  }
  // After NCCL's end: cudaFree waits for the device, and a kernel of a communicator that was not
  // aborted yet may wait for a dead peer.
  if (scratch_) detail::cuda_api().cudaFree(scratch_);
  scratch_ = nullptr;
}

void communicator::abort() noexcept {
  if (comm_) detail::nccl_api().ncclCommAbort(comm_);
  comm_ = nullptr;
}

void communicator::enqueue(operation op, const void* send, void* recv, std::size_t count, ncclDataType_t type,
                           reduce_op reduction, int peer, cudaStream_t stream) {
  const auto& api = detail::nccl_api();
  ncclResult_t result = ncclSuccess;
  const char* call = "";
  switch (op) {
    case operation::all_reduce:
      call = "ncclAllReduce";
      result = api.ncclAllReduce(send, recv, count, type, reduction_of(reduction), comm_, stream);
      break;
    case operation::broadcast:
      call = "ncclBroadcast";
      result = api.ncclBroadcast(send, recv, count, type, peer, comm_, stream);
      break;
    case operation::all_gather:
      call = "ncclAllGather";
      result = api.ncclAllGather(send, recv, count, type, comm_, stream);
      break;
    case operation::reduce_scatter:
      call = "ncclReduceScatter";
      result = api.ncclReduceScatter(send, recv, count, type, reduction_of(reduction), comm_, stream);
      break;
    case operation::send:
      call = "ncclSend";
      result = api.ncclSend(send, count, type, peer, comm_, stream);
      break;
    case operation::recv:
      call = "ncclRecv";
      result = api.ncclRecv(recv, count, type, peer, comm_, stream);
      break;
  }
  if (result == ncclSuccess) return;
  // A non-blocking communicator may answer ncclInProgress: wait for the call to be enqueued (on an
  // error or at the deadline wait_for_communicator aborts the communicator and throws).
  try {
    if (result == ncclInProgress) {
      wait_for_communicator(comm_, clock::now() + detail::default_timeout(), call);
      return;
    }
    throw_nccl_error(result, call, comm_);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

int runtime_version() {
  int version = 0;
  if (const auto result = detail::nccl_api().ncclGetVersion(&version); result != ncclSuccess) {
    throw_nccl_error(result, "ncclGetVersion", nullptr);
  }
  return version;
}

communicator communicator::split(int color, int key, call_options options) {
  const auto start = clock::now();
  const auto timeout = detail::timeout_of(options.timeout, "communicator::split");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  communicator part{empty{}};
  part.device_ = device_;
  part.uncaught_at_creation_ = std::uncaught_exceptions();
  part.peers_failed_ = peers_failed_;
  part.teardown_timeout_ = timeout;
  try {
    const ncclResult_t result = detail::nccl_api().ncclCommSplit(comm_, color, key, &part.comm_, &config);
    if (result != ncclSuccess && result != ncclInProgress) throw_nccl_error(result, "ncclCommSplit", comm_);
    wait_for_communicator(comm_, start + timeout, "ncclCommSplit");
  } catch (...) {
    failed_ = true;  // the parent saw the failure (an abort already emptied it at the deadline)
    throw;
  }
  if (part.comm_) {
    wait_for_communicator(part.comm_, start + timeout, "ncclCommSplit (new communicator)");
    detail::nccl_api().ncclCommUserRank(part.comm_, &part.rank_);
    detail::nccl_api().ncclCommCount(part.comm_, &part.size_);
  }
  part.timing_.nccl_init = since(start);
  return part;
}

communicator communicator::split_node(call_options options) {
  const auto& id = current_identity();
  return split(id.node_rank, id.local_rank, options);
}

std::optional<communicator> communicator::split_one_per_node(call_options options) {
  const auto& id = current_identity();
  auto part = split(id.local_rank == 0 ? 0 : NCCL_SPLIT_NOCOLOR, id.node_rank, options);
  if (!part.comm_) return std::nullopt;
  return part;
}

void* communicator::scratch() {
  if (!scratch_) {
    if (const auto status = detail::cuda_api().cudaMalloc(&scratch_, sizeof(double) * 2); status != cudaSuccess) {
      throw_cuda(status, "cudaMalloc (scalar scratch)");
    }
  }
  return scratch_;
}

void communicator::copy_to_device(void* device, const void* host, std::size_t bytes, cudaStream_t stream) {
  if (const auto status = detail::cuda_api().cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream);
      status != cudaSuccess) {
    failed_ = true;
    throw_cuda(status, "cudaMemcpyAsync (to the device)");
  }
}

void communicator::copy_to_host(void* host, const void* device, std::size_t bytes, cudaStream_t stream) {
  if (const auto status = detail::cuda_api().cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
      status != cudaSuccess) {
    failed_ = true;
    throw_cuda(status, "cudaMemcpyAsync (to the host)");
  }
  if (const auto status = detail::cuda_api().cudaStreamSynchronize(stream); status != cudaSuccess) {
    failed_ = true;  // an NCCL kernel on the stream may be what failed
    throw_cuda(status, "cudaStreamSynchronize");
  }
}

}  // namespace jobkit::nccl
