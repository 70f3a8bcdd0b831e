#pragma once

// The NCCL and CUDA runtime calls libjobkit makes, bound at first use: a program that never
// touches <jobkit/nccl.hpp> does not load libnccl or libcudart (the loader's work at every
// process's start, and a library that would not load at all on a node without them).

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobkit/collectives.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

// Each name goes through the CUDA headers' macros (cudaGetDeviceProperties is
// cudaGetDeviceProperties_v2 in CUDA 12 and later): the member and the symbol looked up follow.
#define JOBKIT_NCCL_CALLS(X) \
  X(ncclGetUniqueId)         \
  X(ncclCommInitRankConfig)  \
  X(ncclCommGetAsyncError)   \
  X(ncclCommAbort)           \
  X(ncclCommFinalize)        \
  X(ncclCommDestroy)         \
  X(ncclCommSplit)           \
  X(ncclCommUserRank)        \
  X(ncclCommCount)           \
  X(ncclGetErrorString)      \
  X(ncclGetLastError)        \
  X(ncclGetVersion)          \
  X(ncclAllReduce)           \
  X(ncclBroadcast)           \
  X(ncclAllGather)           \
  X(ncclReduceScatter)       \
  X(ncclSend)                \
  X(ncclRecv)                \
  JOBKIT_NCCL_SCALABLE_CALLS(X)

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
#define JOBKIT_NCCL_SCALABLE_CALLS(X) X(ncclCommInitRankScalable)
#else
#define JOBKIT_NCCL_SCALABLE_CALLS(X)
#endif

#define JOBKIT_CUDA_CALLS(X) \
  X(cudaGetDeviceCount)      \
  X(cudaGetDeviceProperties) \
  X(cudaDeviceGetPCIBusId)   \
  X(cudaSetDevice)           \
  X(cudaGetErrorName)        \
  X(cudaGetErrorString)      \
  X(cudaFree)                \
  X(cudaMemcpyAsync)         \
  X(cudaStreamSynchronize)

struct nccl_calls {
#define JOBKIT_POINTER(name) decltype(&::name) name = nullptr;
  JOBKIT_NCCL_CALLS(JOBKIT_POINTER)
};
struct cuda_calls {
  JOBKIT_CUDA_CALLS(JOBKIT_POINTER)
#undef JOBKIT_POINTER
  cudaError_t (*cudaMalloc)(void**, std::size_t) = nullptr;  // cuda_runtime.h overloads it with a template
};

/// NCCL's calls, from libnccl.so.<major> (open_shared_library: the loader's search, then the
/// directories it was found in at build time, JOBKIT_GPU_LIBRARY_DIRS), bound once.
/// @throws jobkit::error (nccl) naming the library, what was tried and what is missing
const nccl_calls& nccl_api();

/// The CUDA runtime's calls, found the same way (libcudart.so.<major>).
/// @throws jobkit::error (cuda) as nccl_api
const cuda_calls& cuda_api();

}  // namespace jobkit::detail

namespace jobkit::nccl {

/// Throws jobkit::error (nccl) with ncclGetErrorString, ncclGetLastError and what was called.
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* call, ncclComm_t comm);

/// NCCL's reduction for a jobkit::reduce_op (avg: ncclAvg). @throws jobkit::error for band, bor, bxor
ncclRedOp_t reduction_of(reduce_op op);

}  // namespace jobkit::nccl
