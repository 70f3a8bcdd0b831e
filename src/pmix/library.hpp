#pragma once

// libpmix's calls, bound at the first PMIx call: jobkit takes PMIx's headers at build time and
// opens libpmix at run time (core/shared_library.hpp), so that a process never launched by a PMIx
// launcher (a login node, a laptop, a CI runner) loads jobkit without it and gets the single-rank
// defaults, and so that a build of jobkit (a Python wheel) is not tied to one build of PMIx. Every
// PMIx call of jobkit goes through pmix_api(); the few of PMIx's macros that call into libpmix in
// one release and not in another are replaced by the functions below, the same on every release.

#include <pmix.h>

#include <string>

namespace jobkit::detail {

#define JOBKIT_PMIX_CALLS(X) \
  X(PMIx_Init)               \
  X(PMIx_Finalize)           \
  X(PMIx_Initialized)        \
  X(PMIx_Get)                \
  X(PMIx_Get_nb)             \
  X(PMIx_Put)                \
  X(PMIx_Commit)             \
  X(PMIx_Fence)              \
  X(PMIx_Fence_nb)           \
  X(PMIx_Resolve_nodes)      \
  X(PMIx_Resolve_peers)      \
  X(PMIx_Get_version)        \
  X(PMIx_Error_string)       \
  X(PMIx_Data_type_string)   \
  X(PMIx_Info_load)          \
  X(PMIx_Value_destruct)

struct pmix_calls {
#define JOBKIT_POINTER(name) decltype(&::name) name = nullptr;
  JOBKIT_PMIX_CALLS(JOBKIT_POINTER)
#undef JOBKIT_POINTER
};

/// libpmix's calls, from libpmix.so.2: the copy already in the process (MPI's, say), else where
/// the dynamic loader finds it, else in the directory PMIx was found in at build time
/// (JOBKIT_PMIX_LIBRARY_DIRS); opened once, global (PMIx's own plugins resolve against it).
/// @throws jobkit::error (pmix) naming the library, what was tried, the launcher's PMIx namespace
/// when set, and any call it lacks
const pmix_calls& pmix_api();

/// The PMIx version string of the libpmix that pmix_api() loads, or why none can be loaded;
/// never throws (for `jobkit doctor` and error messages).
std::string pmix_client_version();

/// PMIX_INFO_LOAD: key and a copy of the value.
void load_info(pmix_info_t& info, const char* key, const void* data, pmix_data_type_t type);
/// PMIX_INFO_DESTRUCT: frees what the value holds.
void destruct_info(pmix_info_t& info) noexcept;
/// PMIX_VALUE_RELEASE: a value PMIx allocated (PMIx_Get's), with what it holds; null is no-op.
void release_value(pmix_value_t* value) noexcept;
/// PMIX_LOAD_PROCID: the process `rank` of namespace `nspace`.
pmix_proc_t proc_of(const char* nspace, pmix_rank_t rank) noexcept;

}  // namespace jobkit::detail
