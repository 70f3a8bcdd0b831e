#include "nccl/gpu_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "jobkit/error.hpp"

#ifndef JOBKIT_GPU_LIBRARY_DIRS
#define JOBKIT_GPU_LIBRARY_DIRS ""
#endif

namespace jobkit::detail {
namespace {

#define JOBKIT_NAME_OF(name) JOBKIT_SPELLED(name)
#define JOBKIT_SPELLED(name) #name

template <class Calls>
Calls bind_calls(errc code, std::string_view probe, const std::string& soname, std::string_view built_against,
                 void (*each)(Calls&, const gpu_library&, std::vector<std::string>&)) {
  const auto library = open_gpu_library(soname, probe, code, built_against);
  Calls calls;
  std::vector<std::string> missing;
  each(calls, library, missing);
  require_gpu_symbols(library, missing, code, built_against);
  return calls;
}

template <class Pointer>
void look_up(Pointer& to, const gpu_library& library, const char* name, std::vector<std::string>& missing) {
  to = reinterpret_cast<Pointer>(gpu_symbol(library, name, missing));
}

}  // namespace

gpu_library open_gpu_library(const std::string& soname, std::string_view probe, errc code,
                             std::string_view built_against) {
  std::vector<std::string> candidates{soname};
  const std::string_view dirs = JOBKIT_GPU_LIBRARY_DIRS;
  for (std::size_t start = 0; start < dirs.size();) {
    const auto end = std::min(dirs.find(':', start), dirs.size());
    if (end > start) candidates.push_back(fmt::format("{}/{}", dirs.substr(start, end - start), soname));
    start = end + 1;
  }
  std::string tried;
  for (const auto& name : candidates) {
    // Local: the program's own later dlopen of the same soname gets this copy, by name.
    if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      Dl_info info{};
      const void* symbol = ::dlsym(handle, std::string(probe).c_str());
      return {soname, handle, symbol && ::dladdr(symbol, &info) && info.dli_fname ? info.dli_fname : name};
    }
    const char* why = ::dlerror();
    tried += fmt::format("\n  {}: {}", name, why ? why : "not loaded");
  }
  throw error(code, fmt::format("<jobkit/nccl.hpp> needs {} ({}, which jobkit was built against) and it could not be "
                                "loaded; tried:{}\nInstall it, or put its directory on LD_LIBRARY_PATH",
                                soname, built_against, tried));
}

void* gpu_symbol(const gpu_library& library, const char* name, std::vector<std::string>& missing) {
  void* symbol = ::dlsym(library.handle, name);
  if (!symbol) missing.emplace_back(name);
  return symbol;
}

void require_gpu_symbols(const gpu_library& library, const std::vector<std::string>& missing, errc code,
                         std::string_view built_against) {
  if (missing.empty()) return;
  throw error(code, fmt::format("{} ({}) lacks {}: it is older than {}, which jobkit was built against", library.soname,
                                library.path, fmt::join(missing, ", "), built_against));
}

const nccl_calls& nccl_api() {
  static const nccl_calls calls = bind_calls<nccl_calls>(
      errc::nccl, "ncclGetUniqueId", fmt::format("libnccl.so.{}", NCCL_MAJOR),
      "NCCL " JOBKIT_NAME_OF(NCCL_MAJOR) "." JOBKIT_NAME_OF(NCCL_MINOR) "." JOBKIT_NAME_OF(NCCL_PATCH),
      [](nccl_calls& c, const gpu_library& library, std::vector<std::string>& missing) {
#define JOBKIT_LOOK_UP(name) look_up(c.name, library, JOBKIT_NAME_OF(name), missing);
        JOBKIT_NCCL_CALLS(JOBKIT_LOOK_UP)
      });
  return calls;
}

const cuda_calls& cuda_api() {
  static const cuda_calls calls =
      bind_calls<cuda_calls>(errc::cuda, "cudaGetDeviceCount", fmt::format("libcudart.so.{}", CUDART_VERSION / 1000),
                             "the CUDA runtime " JOBKIT_NAME_OF(CUDART_VERSION),
                             [](cuda_calls& c, const gpu_library& library, std::vector<std::string>& missing) {
                               JOBKIT_CUDA_CALLS(JOBKIT_LOOK_UP)
#undef JOBKIT_LOOK_UP
                               look_up(c.cudaMalloc, library, "cudaMalloc", missing);
                             });
  return calls;
}

}  // namespace jobkit::detail
