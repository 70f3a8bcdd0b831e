#include "preemption/slurm_api.hpp"

#include <dlfcn.h>

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "jobkit/config.hpp"
#include "jobkit/error.hpp"

#if JOBKIT_HAS_SLURM_HEADERS
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#endif

namespace jobkit::detail {

#if JOBKIT_HAS_SLURM_HEADERS
struct slurm_api::symbols {
  void* library = nullptr;
  decltype(&::slurm_get_rem_time) get_rem_time = nullptr;
  decltype(&::slurm_requeue) requeue = nullptr;
  decltype(&::slurm_get_errno) get_errno = nullptr;
  decltype(&::slurm_strerror) strerror = nullptr;
  std::mutex lock;  // libslurm keeps its errno and configuration per process
};

namespace {

/// JOBKIT_LIBSLURM, else the development link, else the sonames of Slurm 21.08 to 25.x.
std::vector<std::string> library_candidates() {
  if (const char* chosen = std::getenv("JOBKIT_LIBSLURM"); chosen && *chosen) return {chosen};
  std::vector<std::string> names{"libslurm.so"};
  for (int soname = 45; soname >= 37; --soname) names.push_back(fmt::format("libslurm.so.{}", soname));
  return names;
}

}  // namespace

slurm_api::slurm_api() {
  std::string tried;
  void* library = nullptr;
  for (const auto& name : library_candidates()) {
    // Global: Slurm's own plugins (auth/munge, ...) resolve libslurm's symbols when it loads them.
    library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (library) break;
    tried += fmt::format("{}{}", tried.empty() ? "" : ", ", name);
  }
  if (!library) {
    why_ = fmt::format("no libslurm could be loaded (tried {}; set JOBKIT_LIBSLURM to its path)", tried);
    return;
  }
  auto* s = new symbols;
  s->library = library;
  s->get_rem_time = reinterpret_cast<decltype(s->get_rem_time)>(::dlsym(library, "slurm_get_rem_time"));
  s->requeue = reinterpret_cast<decltype(s->requeue)>(::dlsym(library, "slurm_requeue"));
  s->get_errno = reinterpret_cast<decltype(s->get_errno)>(::dlsym(library, "slurm_get_errno"));
  s->strerror = reinterpret_cast<decltype(s->strerror)>(::dlsym(library, "slurm_strerror"));
  if (!s->get_rem_time || !s->requeue || !s->get_errno || !s->strerror) {
    why_ = "the libslurm found lacks slurm_get_rem_time, slurm_requeue or slurm_strerror";
    delete s;
    return;
  }
  // Slurm 22.05 and later read slurm.conf (SLURM_CONF) in slurm_init; older releases on demand.
  using init_function = void (*)(const char*);
  if (auto init = reinterpret_cast<init_function>(::dlsym(library, "slurm_init"))) init(nullptr);
  symbols_ = s;
  available_ = true;
}

std::optional<long> slurm_api::remaining_seconds(std::uint32_t job_id) {
  std::scoped_lock hold(symbols_->lock);
  const long left = symbols_->get_rem_time(job_id);
  if (left < 0) return std::nullopt;
  return left;
}

int slurm_api::requeue(std::uint32_t job_id, std::string& message) {
  std::scoped_lock hold(symbols_->lock);
  if (symbols_->requeue(job_id, 0) == SLURM_SUCCESS) return 0;
  const int code = symbols_->get_errno();
  const char* text = symbols_->strerror(code);
  message = text ? text : fmt::format("Slurm error {}", code);
  // Already requeued (by this call's twin on another rank, or by pre-emption): the wanted state.
  if (code == ESLURM_JOB_PENDING) return 0;
  return code;
}

#else

struct slurm_api::symbols {};

slurm_api::slurm_api() : why_("jobkit was built without Slurm's headers (libslurm-dev)") {}

std::optional<long> slurm_api::remaining_seconds(std::uint32_t) { return std::nullopt; }

int slurm_api::requeue(std::uint32_t, std::string& message) {
  message = why_;
  return -1;
}

#endif

slurm_api& slurm_api::get() {
  static slurm_api instance;
  return instance;
}

std::optional<std::uint32_t> slurm_job_id() {
  const char* value = std::getenv("SLURM_JOB_ID");
  if (!value) return std::nullopt;
  const std::string_view text(value);
  std::uint32_t id = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || text.size() > 10 || ec != std::errc{} || end != text.data() + text.size() || id == 0) {
    throw error(errc::invalid_environment, fmt::format("SLURM_JOB_ID='{}' is not a Slurm job id", text));
  }
  return id;
}

}  // namespace jobkit::detail
