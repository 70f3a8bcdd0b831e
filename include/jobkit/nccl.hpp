#pragma once

// NCCL communicators bootstrapped through PMIx: no MASTER_ADDR, no TCP store, no port.
// Exists only in builds with CUDA and NCCL (JOBKIT_HAS_NCCL in <jobkit/config.hpp>).

#include "jobkit/config.hpp"
#include "jobkit/export.hpp"

#if !JOBKIT_HAS_NCCL
#error "jobkit was built without NCCL: <jobkit/nccl.hpp> needs -Dnccl=enabled (CUDA and NCCL found)"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/detail/nccl_data_type.hpp"
#include "jobkit/error.hpp"

namespace jobkit::nccl {

/// A CUDA device as this process sees it.
struct device_info {
  int index = 0;           ///< the CUDA device index (after CUDA_VISIBLE_DEVICES)
  std::string uuid;        ///< "GPU-xxxxxxxx-..."
  std::string pci_bus_id;  ///< "0000:3b:00.0"
  std::string name;
};

/// The devices this process sees. @throws jobkit::error (cuda) naming the rank when CUDA fails,
/// e.g. no device or no driver
JOBKIT_API std::vector<device_info> visible_devices();

/// The device rule, honouring Slurm's GPU binding: a task that sees exactly one device uses it;
/// a task that sees at least local_world_size devices uses local_rank; anything else is an error
/// that names the rank, what it sees, CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS. Defined without CUDA
/// (src/nccl/device_rule.cpp): the Python module's jobkit.select_device is this rule.
JOBKIT_API int select_device(int visible_count, int local_rank, int local_world_size);

/// One rank's choice, for the duplicate check and jobkit doctor.
struct device_choice {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  int device = 0;
  std::string uuid;
};

/// A readable table of the devices chosen by more than one rank of a node, or nothing when every
/// choice is unique.
JOBKIT_API std::optional<std::string> duplicate_devices(const std::vector<device_choice>& choices);

/// Gathers every node-mate's choice (collective over `node`) and throws jobkit::error with the
/// duplicate_devices table on every member when two ranks chose the same GPU.
JOBKIT_API void check_unique_devices(group& node, const device_choice& mine, call_options options = {});

/// The ncclUniqueIds of a communicator over every rank of the job: ceil(world / ranks_per_root)
/// of them, each made by its root rank (spread evenly over the ranks), all handed to every rank
/// in one PMIx put + collecting fence + get. Collective over all ranks. For callers that
/// initialise NCCL themselves; communicator uses it. A fresh PMIx key is used on every call.
JOBKIT_API std::vector<ncclUniqueId> share_unique_ids(int ranks_per_root = 128, call_options options = {});

/// How long each phase of a communicator's creation took on this rank.
struct init_timing {
  std::chrono::microseconds device_selection{0};
  std::chrono::microseconds id_exchange{0};  ///< ncclGetUniqueId on the roots and the PMIx exchange
  std::chrono::microseconds nccl_init{0};    ///< ncclCommInitRank(Config|Scalable) until ready
};

struct communicator_options {
  /// Deadline of the id exchange and of NCCL's initialisation (default JOBKIT_TIMEOUT).
  call_options call;
  /// Use this device instead of the rule of select_device.
  std::optional<int> device;
  /// Ranks per bootstrap root: above it, ncclCommInitRankScalable with one id per root, all ids
  /// gathered in one PMIx exchange (NCCL >= 2.23; torch's default is also 128).
  int ranks_per_root = 128;
};

/// The version of the NCCL this process uses (ncclGetVersion: 22809 for 2.28.9). libjobkit loads
/// libnccl at its first NCCL call, this one included. @throws jobkit::error (nccl) when no
/// libnccl of jobkit's major version can be loaded, naming what was tried
JOBKIT_API int runtime_version();

/// A move-only NCCL communicator. Its end (destructor, move assignment) never waits without a
/// bound: it is aborted (ncclCommAbort) when it saw a failure (any of its NCCL or CUDA calls
/// failed or timed out, an asynchronous error), when a collective of jobkit's world group failed
/// on this rank (a peer died, timed out or aborted), or when it ends during stack unwinding;
/// otherwise it is finalised (ncclCommFinalize, polled) and destroyed within the deadline it was
/// made with (communicator_options::call, default JOBKIT_TIMEOUT), and aborted when that passes.
/// docs/nccl.md#teardown gives the NCCL rules this follows.
class JOBKIT_API communicator {
 public:
  /// Collective over every rank of the job: selects and sets this rank's device, checks that no
  /// two ranks of a node chose the same GPU, hands the ncclUniqueId(s) from the root rank(s) to
  /// every rank through one PMIx put + collecting fence + get, and initialises NCCL without
  /// blocking, polled against the deadline: a missing or dead rank gives jobkit::timeout_error
  /// (the communicator is aborted) instead of NCCL's endless wait.
  explicit communicator(communicator_options options = {});
  ~communicator();
  communicator(communicator&& other) noexcept;
  communicator& operator=(communicator&& other) noexcept;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  ncclComm_t native() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  const init_timing& timing() const noexcept { return timing_; }

  /// ncclCommSplit: ranks with the same color form a communicator, ordered by key.
  communicator split(int color, int key, call_options options = {});
  /// The ranks of this rank's node.
  communicator split_node(call_options options = {});
  /// Local rank 0 of every node; the other ranks get no communicator (nullopt), but must call too.
  std::optional<communicator> split_one_per_node(call_options options = {});

  /// Aborts the communicator (ncclCommAbort): pending operations end, the object becomes empty.
  void abort() noexcept;

  // The typed collectives enqueue on `stream` through the NCCL that libjobkit loaded (see
  // runtime_version()): a program that calls NCCL only through them need not link NCCL itself.
  template <class T>
  void all_reduce(const T* send, T* recv, std::size_t count, reduce_op op, cudaStream_t stream) {
    check_op<T>("all_reduce", op);
    enqueue(operation::all_reduce, send, recv, count, jobkit::detail::nccl_data_type_of<T>(), op, 0, stream);
  }
  template <class T>
  void broadcast(const T* send, T* recv, std::size_t count, int root, cudaStream_t stream) {
    enqueue(operation::broadcast, send, recv, count, jobkit::detail::nccl_data_type_of<T>(), reduce_op::sum, root,
            stream);
  }
  /// recv holds size() * send_count elements.
  template <class T>
  void all_gather(const T* send, T* recv, std::size_t send_count, cudaStream_t stream) {
    enqueue(operation::all_gather, send, recv, send_count, jobkit::detail::nccl_data_type_of<T>(), reduce_op::sum, 0,
            stream);
  }
  /// send holds size() * recv_count elements.
  template <class T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op, cudaStream_t stream) {
    check_op<T>("reduce_scatter", op);
    enqueue(operation::reduce_scatter, send, recv, recv_count, jobkit::detail::nccl_data_type_of<T>(), op, 0, stream);
  }
  template <class T>
  void send(const T* data, std::size_t count, int peer, cudaStream_t stream) {
    enqueue(operation::send, data, nullptr, count, jobkit::detail::nccl_data_type_of<T>(), reduce_op::sum, peer,
            stream);
  }
  template <class T>
  void recv(T* data, std::size_t count, int peer, cudaStream_t stream) {
    enqueue(operation::recv, nullptr, data, count, jobkit::detail::nccl_data_type_of<T>(), reduce_op::sum, peer,
            stream);
  }

  /// The scalar helpers of <jobkit/collectives.hpp>, through NCCL on this communicator's device:
  /// the value goes to the device, through the collective, and back (synchronising `stream`).
  template <class T>
  T all_reduce_value(T value, reduce_op op, cudaStream_t stream = nullptr) {
    return through_device(value, stream, [&](T* scratch) { all_reduce(scratch, scratch, 1, op, stream); });
  }
  template <class T>
  T broadcast_value(T value, int root, cudaStream_t stream = nullptr) {
    return through_device(value, stream, [&](T* scratch) { broadcast(scratch, scratch, 1, root, stream); });
  }

 private:
  struct empty {};
  explicit communicator(empty) {}
  enum class operation { all_reduce, broadcast, all_gather, reduce_scatter, send, recv };
  /// The library's rule of which op applies to which elements (avg: no integers), before NCCL,
  /// whose ncclAvg would divide integers.
  template <class T>
  static void check_op(const char* collective, reduce_op op) {
    jobkit::detail::check_reduce_op(collective, op, std::is_integral_v<T>);
  }
  /// One NCCL call on this communicator (`peer` is the root of a broadcast); waits while a
  /// non-blocking communicator answers ncclInProgress. @throws jobkit::error (nccl)
  void enqueue(operation op, const void* send, void* recv, std::size_t count, ncclDataType_t type, reduce_op reduction,
               int peer, cudaStream_t stream);
  /// Copies value to a device scratch buffer, runs collective on it, and copies it back.
  template <class T, class Collective>
  T through_device(T value, cudaStream_t stream, Collective collective) {
    static_assert(sizeof(T) <= sizeof(double) * 2, "scalar helpers take scalars");
    T* scratch_value = static_cast<T*>(scratch());
    copy_to_device(scratch_value, &value, sizeof(T), stream);
    collective(scratch_value);
    copy_to_host(&value, scratch_value, sizeof(T), stream);
    return value;
  }
  void* scratch();
  void copy_to_device(void* device, const void* host, std::size_t bytes, cudaStream_t stream);
  void copy_to_host(void* host, const void* device, std::size_t bytes, cudaStream_t stream);
  /// Ends the NCCL communicator (see the class comment; src/nccl/teardown.hpp), then frees the
  /// scratch buffer.
  void release() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  init_timing timing_;
  void* scratch_ = nullptr;
  int uncaught_at_creation_ = 0;
  bool failed_ = false;                                    ///< one of its calls failed: its end aborts
  std::shared_ptr<const std::atomic<bool>> peers_failed_;  ///< the world group's (set when it failed)
  std::chrono::milliseconds teardown_timeout_{0};          ///< the bound of a normal end
};

}  // namespace jobkit::nccl
