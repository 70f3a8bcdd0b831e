#pragma once

// NCCL's data type for an element type, for the typed collectives of <jobkit/nccl.hpp>; not part
// of jobkit's API.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <cstdint>
#include <type_traits>

namespace jobkit::detail {

template <class T>
constexpr ncclDataType_t nccl_data_type_of() {
  if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, char>)
    return ncclInt8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return ncclUint8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return ncclInt32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return ncclUint32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return ncclInt64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return ncclUint64;
  else if constexpr (std::is_same_v<T, __half>)
    return ncclFloat16;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else
    static_assert(!sizeof(T), "NCCL has no data type for this element type");
}

}  // namespace jobkit::detail
