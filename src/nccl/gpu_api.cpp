#include "nccl/gpu_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/shared_library.hpp"
#include "jobkit/error.hpp"

#ifndef JOBKIT_GPU_LIBRARY_DIRS
#define JOBKIT_GPU_LIBRARY_DIRS ""
#endif

namespace jobkit::detail {
namespace {

#define JOBKIT_NAME_OF(name) JOBKIT_SPELLED(name)
#define JOBKIT_SPELLED(name) #name

/// The request for a GPU library: the loader's search, then where it was found at build time
/// (JOBKIT_GPU_LIBRARY_DIRS). Local: the program's own later dlopen of the same soname gets this
/// copy, by name.
library_request gpu_request(std::string soname, std::string_view probe, errc code, std::string_view built_against) {
  return {std::move(soname),   probe,        JOBKIT_GPU_LIBRARY_DIRS, RTLD_NOW | RTLD_LOCAL, code,
          "<jobkit/nccl.hpp>", built_against};
}

}  // namespace

const nccl_calls& nccl_api() {
  static const nccl_calls calls = bind_calls<nccl_calls>(
      gpu_request(fmt::format("libnccl.so.{}", NCCL_MAJOR), "ncclGetUniqueId", errc::nccl,
                  "NCCL " JOBKIT_NAME_OF(NCCL_MAJOR) "." JOBKIT_NAME_OF(NCCL_MINOR) "." JOBKIT_NAME_OF(NCCL_PATCH)),
      [](nccl_calls& c, const shared_library& library, std::vector<std::string>& missing) {
#define JOBKIT_LOOK_UP(name) look_up(c.name, library, JOBKIT_NAME_OF(name), missing);
        JOBKIT_NCCL_CALLS(JOBKIT_LOOK_UP)
      });
  return calls;
}

const cuda_calls& cuda_api() {
  static const cuda_calls calls =
      bind_calls<cuda_calls>(gpu_request(fmt::format("libcudart.so.{}", CUDART_VERSION / 1000), "cudaGetDeviceCount",
                                         errc::cuda, "the CUDA runtime " JOBKIT_NAME_OF(CUDART_VERSION)),
                             [](cuda_calls& c, const shared_library& library, std::vector<std::string>& missing) {
                               JOBKIT_CUDA_CALLS(JOBKIT_LOOK_UP)
#undef JOBKIT_LOOK_UP
                               look_up(c.cudaMalloc, library, "cudaMalloc", missing);
                             });
  return calls;
}

}  // namespace jobkit::detail
