#include "pmix/library.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "core/shared_library.hpp"
#include "jobkit/error.hpp"

#ifndef JOBKIT_PMIX_LIBRARY_DIRS
#define JOBKIT_PMIX_LIBRARY_DIRS ""
#endif

namespace jobkit::detail {

const pmix_calls& pmix_api() {
  static const pmix_calls calls = [] {
    const std::string built_against =
        fmt::format("PMIx {}.{}.{}", PMIX_VERSION_MAJOR, PMIX_VERSION_MINOR, PMIX_VERSION_RELEASE);
    const char* nspace = std::getenv("PMIX_NAMESPACE");
    const std::string needed_by = nspace != nullptr
                                      ? fmt::format(
                                            "this process's launcher serves PMIx (PMIX_NAMESPACE='{}'), and jobkit's "
                                            "PMIx client",
                                            nspace)
                                      : std::string("jobkit's PMIx client");
    return bind_calls<pmix_calls>({"libpmix.so.2", "PMIx_Init", JOBKIT_PMIX_LIBRARY_DIRS, RTLD_NOW | RTLD_GLOBAL,
                                   errc::pmix, needed_by, built_against},
                                  [](pmix_calls& c, const shared_library& library, std::vector<std::string>& missing) {
#define JOBKIT_LOOK_UP(name) look_up(c.name, library, #name, missing);
                                    JOBKIT_PMIX_CALLS(JOBKIT_LOOK_UP)
#undef JOBKIT_LOOK_UP
                                  });
  }();
  return calls;
}

std::string pmix_client_version() {
  try {
    return pmix_api().PMIx_Get_version();
  } catch (const std::exception& e) {
    return fmt::format("none loaded ({})", e.what());
  }
}

void load_info(pmix_info_t& info, const char* key, const void* data, pmix_data_type_t type) {
  pmix_api().PMIx_Info_load(&info, key, data, type);
}

void destruct_info(pmix_info_t& info) noexcept { pmix_api().PMIx_Value_destruct(&info.value); }

void release_value(pmix_value_t* value) noexcept {
  if (value == nullptr) return;
  pmix_api().PMIx_Value_destruct(value);
  std::free(value);  // PMIx allocates values with malloc (PMIX_VALUE_CREATE)
}

pmix_proc_t proc_of(const char* nspace, pmix_rank_t rank) noexcept {
  pmix_proc_t proc;
  std::memset(&proc, 0, sizeof proc);
  std::strncpy(proc.nspace, nspace, PMIX_MAX_NSLEN);
  proc.rank = rank;
  return proc;
}

}  // namespace jobkit::detail
