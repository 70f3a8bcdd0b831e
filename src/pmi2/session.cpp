#include "pmi2/session.hpp"

#include <dlfcn.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>

#include "core/bounded_call.hpp"
#include "core/shared_library.hpp"
#include "jobkit/error.hpp"
#include "pmi2/wire.hpp"

#if __has_include(<slurm/pmi2.h>)
#include <slurm/pmi2.h>
#define JOBKIT_HAVE_PMI2_H 1
#endif

namespace jobkit::detail {
namespace {

// The functions of pmi2.h that jobkit calls, declared here so that building needs no libpmi2.
using init_fn = int (*)(int*, int*, int*, int*);
using finalize_fn = int (*)();
using initialized_fn = int (*)();
using job_get_id_fn = int (*)(char*, int);
using job_get_rank_fn = int (*)(int*);
using info_get_size_fn = int (*)(int*);
using kvs_put_fn = int (*)(const char*, const char*);
using kvs_fence_fn = int (*)();
using kvs_get_fn = int (*)(const char*, int, const char*, char*, int, int*);
using info_get_job_attr_fn = int (*)(const char*, char*, int, int*);

#ifdef JOBKIT_HAVE_PMI2_H
// Where Slurm's header is installed, the declarations above must match it.
static_assert(std::is_same_v<init_fn, decltype(&::PMI2_Init)>);
static_assert(std::is_same_v<finalize_fn, decltype(&::PMI2_Finalize)>);
static_assert(std::is_same_v<initialized_fn, decltype(&::PMI2_Initialized)>);
static_assert(std::is_same_v<job_get_id_fn, decltype(&::PMI2_Job_GetId)>);
static_assert(std::is_same_v<job_get_rank_fn, decltype(&::PMI2_Job_GetRank)>);
static_assert(std::is_same_v<info_get_size_fn, decltype(&::PMI2_Info_GetSize)>);
static_assert(std::is_same_v<kvs_put_fn, decltype(&::PMI2_KVS_Put)>);
static_assert(std::is_same_v<kvs_fence_fn, decltype(&::PMI2_KVS_Fence)>);
static_assert(std::is_same_v<kvs_get_fn, decltype(&::PMI2_KVS_Get)>);
static_assert(std::is_same_v<info_get_job_attr_fn, decltype(&::PMI2_Info_GetJobAttr)>);
static_assert(PMI2_MAX_KEYLEN == pmi2_max_key_chars + 1 && PMI2_MAX_VALLEN == pmi2_max_value_chars + 1);
#endif

/// "PMI2_ERR_INVALID_KEY (4)"-style text for a PMI-2 return code.
std::string pmi2_status_text(int rc) {
  static constexpr const char* names[] = {"PMI2_SUCCESS",
                                          "PMI2_ERR_INIT",
                                          "PMI2_ERR_NOMEM",
                                          "PMI2_ERR_INVALID_ARG",
                                          "PMI2_ERR_INVALID_KEY",
                                          "PMI2_ERR_INVALID_KEY_LENGTH",
                                          "PMI2_ERR_INVALID_VAL",
                                          "PMI2_ERR_INVALID_VAL_LENGTH",
                                          "PMI2_ERR_INVALID_LENGTH",
                                          "PMI2_ERR_INVALID_NUM_ARGS",
                                          "PMI2_ERR_INVALID_ARGS",
                                          "PMI2_ERR_INVALID_NUM_PARSED",
                                          "PMI2_ERR_INVALID_KEYVALP",
                                          "PMI2_ERR_INVALID_SIZE",
                                          "PMI2_ERR_OTHER"};
  if (rc == -1) return "PMI2_FAIL (-1)";
  if (rc >= 0 && rc < static_cast<int>(std::size(names))) return fmt::format("{} ({})", names[rc], rc);
  return fmt::format("PMI-2 error {}", rc);
}

/// Slurm's libpmi2: JOBKIT_LIBPMI2, else libpmi2.so.0, else libpmi2.so.
library_request libpmi2_request() {
  library_request request{"libpmi2.so.0", "PMI2_Init", "", RTLD_NOW | RTLD_LOCAL, errc::pmix, "", "", {"libpmi2.so"}};
  if (const char* chosen = std::getenv("JOBKIT_LIBPMI2"); chosen && *chosen) {
    request.soname = chosen;
    request.also.clear();
  }
  return request;
}

std::string text_of(const char* buffer, std::size_t size) { return {buffer, ::strnlen(buffer, size)}; }

}  // namespace

struct pmi2_session::connection {
  void* library = nullptr;
  std::string library_name;
  init_fn init = nullptr;
  finalize_fn finalize = nullptr;
  initialized_fn initialized = nullptr;
  job_get_id_fn job_get_id = nullptr;
  job_get_rank_fn job_get_rank = nullptr;
  info_get_size_fn info_get_size = nullptr;
  kvs_put_fn kvs_put = nullptr;
  kvs_fence_fn kvs_fence = nullptr;
  kvs_get_fn kvs_get = nullptr;
  info_get_job_attr_fn get_job_attr = nullptr;

  bool initialised_here = false;  ///< PMI2_Init was jobkit's (else MPI's): jobkit finalises it
  int rank = 0, size = 1;
  std::string job_id;

  /// One PMI-2 call at a time; fence_pending and unusable are read and written under it.
  std::mutex mutex;
  bool fence_pending = false;
  std::string unusable;  ///< why no call may be made any more; empty while usable

  /// Under mutex.
  void require_usable(std::string_view what) const {
    if (!unusable.empty()) {
      throw error(errc::pmix, fmt::format("the PMI-2 connection cannot {}: {}", what, unusable));
    }
    if (fence_pending) {
      throw error(errc::pmix, fmt::format("the PMI-2 connection cannot {} while a fence is pending", what));
    }
  }

  static std::shared_ptr<connection> open();
};

namespace {

std::mutex open_mutex;
// The process's one PMI-2 connection, kept until exit (PMI-2 cannot be initialised again).
std::shared_ptr<pmi2_session::connection>* opened = nullptr;

}  // namespace

std::shared_ptr<pmi2_session::connection> pmi2_session::connection::open() {
  std::lock_guard hold(open_mutex);
  if (opened) return *opened;
  auto c = std::make_shared<connection>();
  std::vector<library_failure> failures;
  const auto library = try_open_shared_library(libpmi2_request(), failures);
  if (!library) {
    std::string tried;
    for (const auto& f : failures) tried += fmt::format("{}{} ({})", tried.empty() ? "" : ", ", f.name, f.why);
    throw error(errc::pmix,
                fmt::format("the environment advertises a PMI-2 server (PMI_FD), but no PMI-2 client library could "
                            "be loaded: tried {}. Install Slurm's libpmi2 (Debian: libpmi2-0) or set JOBKIT_LIBPMI2 "
                            "to its path",
                            tried));
  }
  c->library = library->handle;
  c->library_name = library->name;
  const auto& n = c->library_name;
  std::vector<std::string> missing;
  look_up(c->init, *library, "PMI2_Init", missing);
  look_up(c->finalize, *library, "PMI2_Finalize", missing);
  look_up(c->initialized, *library, "PMI2_Initialized", missing);
  look_up(c->job_get_id, *library, "PMI2_Job_GetId", missing);
  look_up(c->job_get_rank, *library, "PMI2_Job_GetRank", missing);
  look_up(c->info_get_size, *library, "PMI2_Info_GetSize", missing);
  look_up(c->kvs_put, *library, "PMI2_KVS_Put", missing);
  look_up(c->kvs_fence, *library, "PMI2_KVS_Fence", missing);
  look_up(c->kvs_get, *library, "PMI2_KVS_Get", missing);
  look_up(c->get_job_attr, *library, "PMI2_Info_GetJobAttr", missing);
  if (!missing.empty()) {
    throw error(errc::pmix, fmt::format("the libpmi2 loaded from {} lacks {}", n, fmt::join(missing, ", ")));
  }

  if (c->initialized()) {  // MPI (MPICH, MVAPICH, Intel MPI over Slurm's libpmi2) came first
    int rc = c->job_get_rank(&c->rank);
    if (rc == 0) rc = c->info_get_size(&c->size);
    if (rc != 0)
      throw error(errc::pmix, fmt::format("PMI2_Job_GetRank/PMI2_Info_GetSize failed: {}", pmi2_status_text(rc)), rc);
  } else {
    int spawned = 0, appnum = 0;
    const int rc = c->init(&spawned, &c->size, &c->rank, &appnum);
    if (rc != 0) {
      const char* fd = std::getenv("PMI_FD");
      throw error(errc::pmix,
                  fmt::format("PMI2_Init ({}) failed: {}; the environment advertises a PMI-2 server (PMI_FD='{}') "
                              "that cannot be reached (PMI-2 is initialised once per task: a program that an "
                              "initialised one exec'd, as `jobkit exec` does, cannot initialise it again)",
                              n, pmi2_status_text(rc), fd ? fd : ""),
                  rc);
    }
    c->initialised_here = true;
  }
  if (c->size < 1 || c->rank < 0 || c->rank >= c->size) {
    throw error(errc::pmix, fmt::format("the PMI-2 server reported rank {} of a job of {}", c->rank, c->size));
  }
  char id[1024] = {};
  if (const int rc = c->job_get_id(id, sizeof id - 1); rc != 0) {
    throw error(errc::pmix, fmt::format("PMI2_Job_GetId failed: {}", pmi2_status_text(rc)), rc);
  }
  c->job_id = text_of(id, sizeof id);
  opened = new std::shared_ptr<connection>(c);
  if (c->initialised_here) {
    // A pending fence holds the socket: finalising then would only garble it.
    std::atexit([] {
      auto& conn = **opened;
      std::lock_guard lock(conn.mutex);
      if (!conn.fence_pending) conn.finalize();
    });
  }
  return c;
}

pmi2_session::pmi2_session() : connection_(connection::open()) {}

pmi2_session::~pmi2_session() = default;

void pmi2_session::put(const std::string& key, std::span<const std::byte> bytes) {
  auto& c = *connection_;
  const auto parts = encode_pmi2_value(bytes);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < parts.size(); ++i) keys.push_back(pmi2_key(key, c.rank, i));
  std::lock_guard lock(c.mutex);
  c.require_usable("put " + key);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (const int rc = c.kvs_put(keys[i].c_str(), parts[i].c_str()); rc != 0) {
      throw error(errc::pmix, fmt::format("PMI2_KVS_Put({}) failed: {}", keys[i], pmi2_status_text(rc)), rc);
    }
  }
}

void pmi2_session::fence(const time_bound& bound, const std::function<void()>& while_waiting) {
  auto& c = *connection_;
  {
    std::lock_guard lock(c.mutex);
    c.require_usable("fence");
    c.fence_pending = true;
  }
  // On a thread of its own, which outlives the caller when the fence never returns.
  std::optional<bounded_call<int>> call;
  try {
    call.emplace([conn = connection_] {
      const int rc = conn->kvs_fence();
      std::lock_guard lock(conn->mutex);
      conn->fence_pending = false;
      return rc;
    });
  } catch (const std::system_error& e) {
    std::lock_guard lock(c.mutex);
    c.fence_pending = false;
    throw error(errc::internal, fmt::format("no thread for the PMI-2 fence: {}", e.what()));
  }
  const auto abandon = [&](const std::string& why) {
    std::lock_guard lock(c.mutex);
    if (c.unusable.empty()) c.unusable = why;
  };
  std::optional<int> rc;
  try {
    rc = call->wait(bound.deadline, while_waiting);
  } catch (...) {
    abandon("an earlier fence was abandoned while pending (PMI-2 cannot cancel one)");
    throw;
  }
  if (!rc) {
    abandon(fmt::format("an earlier fence timed out after {} ms and is still pending (PMI-2 cannot cancel one)",
                        bound.timeout.count()));
    throw timeout_error(fmt::format(
        "the PMI-2 fence over all ranks timed out after {} ms: a rank never arrived (it is late or stuck, or it "
        "exited before reaching jobkit: Slurm's mpi/pmi2 does not end a fence when a rank exits)",
        bound.timeout.count()));
  }
  if (*rc != 0) {
    throw error(errc::pmix, fmt::format("PMI2_KVS_Fence failed: {}", pmi2_status_text(*rc)), *rc);
  }
}

std::vector<std::byte> pmi2_session::get(int rank, const std::string& key, std::chrono::milliseconds,
                                         const std::function<void()>&) {
  auto& c = *connection_;
  std::lock_guard lock(c.mutex);
  c.require_usable("get " + key);
  std::vector<std::byte> bytes;
  std::size_t parts = 1;
  for (std::size_t i = 0; i < parts; ++i) {
    const auto name = pmi2_key(key, rank, i);
    char value[pmi2_max_value_chars + 1] = {};
    int length = 0;
    if (const int rc = c.kvs_get(c.job_id.c_str(), rank, name.c_str(), value, sizeof value, &length); rc != 0) {
      throw error(errc::pmix,
                  fmt::format("PMI2_KVS_Get({}) of rank {} failed: {} (not put before the last fence?)", name, rank,
                              pmi2_status_text(rc)),
                  rc);
    }
    const auto text = text_of(value, sizeof value);
    if (i == 0) parts = pmi2_value_parts(text);
    decode_pmi2_part(text, i == 0, bytes);
  }
  return bytes;
}

rendezvous::roll_call pmi2_session::ranks_without(const std::string&, int, std::chrono::milliseconds) { return {}; }

pmi2_facts pmi2_session::query_facts() const {
  auto& c = *connection_;
  pmi2_facts facts;
  facts.rank = c.rank;
  facts.world_size = c.size;
  facts.job_id = c.job_id;
  std::lock_guard lock(c.mutex);
  c.require_usable("read PMI_process_mapping");
  char mapping[pmi2_max_mapping_chars + 1] = {};
  int found = 0;
  const int rc = c.get_job_attr("PMI_process_mapping", mapping, sizeof mapping, &found);
  if (rc != 0) {
    facts.mapping_problem = fmt::format("PMI2_Info_GetJobAttr(PMI_process_mapping) failed: {}", pmi2_status_text(rc));
  } else if (!found) {
    facts.mapping_problem = "the PMI-2 server does not provide PMI_process_mapping";
  } else {
    facts.process_mapping = text_of(mapping, sizeof mapping);
  }
  return facts;
}

}  // namespace jobkit::detail
