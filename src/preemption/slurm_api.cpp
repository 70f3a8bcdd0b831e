#include "preemption/slurm_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/posix_io.hpp"
#include "jobkit/config.hpp"
#include "jobkit/error.hpp"
#include "preemption/forked_call.hpp"

#if JOBKIT_HAS_SLURM_HEADERS
#include <slurm/slurm_errno.h>
#endif

namespace jobkit::detail {
namespace {

#if JOBKIT_HAS_SLURM_HEADERS

std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{} s", static_cast<double>(duration.count()) / 1000.0);
}

/// slurm_step_id_t of Slurm 26.05 (libslurm.so.45, slurm/slurm.h), declared here because jobkit
/// builds with older headers. Passed by value: 24 bytes, on the stack in the x86-64 SysV ABI.
struct slurm_step_id {
  std::uint64_t sluid;
  std::uint32_t job_id;
  std::uint32_t step_het_comp;
  std::uint32_t step_id;
};
static_assert(sizeof(slurm_step_id) == 24);
constexpr std::uint32_t slurm_no_val = 0xfffffffe;  // NO_VAL

/// SLURM_STEP_ID_INITIALIZER with the job id: the whole job, no step, no het component.
slurm_step_id step_id_of_job(std::uint32_t job_id) { return {0, job_id, slurm_no_val, slurm_no_val}; }

enum class slurm_call { remaining_seconds, requeue };

/// What the parent prepares before fork(): the child only reads it.
struct slurm_request {
  slurm_call call;
  std::uint32_t job_id;
  library_request library;
  std::string tried;  ///< the candidates, for a message
  bool chosen;        ///< the one candidate is JOBKIT_LIBSLURM
};

/// What the child writes back: a fixed size, no pointers.
struct slurm_report {
  std::int32_t answered;
  std::int32_t unused;
  std::int64_t value;
  char text[768];
};

// ---- In the child: no locks but malloc's and the loader's, nothing logged, no exceptions. The
// shared-library opener allocates (malloc's lock) and throws nothing but std::bad_alloc, which
// would end the child (SIGABRT: the parent reports it). ----

template <class... T>
void say(slurm_report& report, const char* format, T... args) noexcept {
  std::snprintf(report.text, sizeof report.text, format, args...);
}

/// DT_SONAME of a loaded library, from its dynamic section; nullptr when it has none.
const char* soname_of(const link_map* map) noexcept {
  if (!map || !map->l_ld) return nullptr;
  ElfW(Addr) strings = 0;
  const ElfW(Dyn)* soname = nullptr;
  for (const ElfW(Dyn)* entry = map->l_ld; entry->d_tag != DT_NULL; ++entry) {
    if (entry->d_tag == DT_STRTAB) strings = entry->d_un.d_ptr;
    if (entry->d_tag == DT_SONAME) soname = entry;
  }
  if (!soname || !strings) return nullptr;
  // glibc relocates DT_STRTAB in place on most targets, not on those with a read-only dynamic
  // section (MIPS, RISC-V): there it is still an offset from the load address.
  if (strings < map->l_addr) strings += map->l_addr;
  return reinterpret_cast<const char*>(strings + soname->d_un.d_val);
}

/// N of a soname "libslurm.so.N"; -1 for any other.
int libslurm_number(const char* soname) noexcept {
  constexpr std::string_view prefix = "libslurm.so.";
  const std::string_view name(soname);
  if (!name.starts_with(prefix) || name.size() > prefix.size() + 4) return -1;
  int number = -1;
  const auto digits = name.substr(prefix.size());
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size()) return -1;
  return number;
}

void call_in_child(const void* context, void* out) noexcept {
  const auto& request = *static_cast<const slurm_request*>(context);
  auto& report = *static_cast<slurm_report*>(out);
  std::vector<library_failure> failures;
  const auto opened = try_open_shared_library(request.library, failures);
  if (!opened && request.chosen) {
    return say(report, "JOBKIT_LIBSLURM='%s' could not be loaded: %s", request.tried.c_str(),
               failures.empty() ? "?" : failures.back().why.c_str());
  }
  if (!opened) {
    return say(report, "no libslurm could be loaded (tried %s; set JOBKIT_LIBSLURM to its path)",
               request.tried.c_str());
  }
  void* library = opened->handle;
  link_map* map = nullptr;
  ::dlinfo(library, RTLD_DI_LINKMAP, &map);
  const char* path = map && map->l_name && *map->l_name ? map->l_name : request.library.soname.c_str();
  const char* soname = soname_of(map);
  if (!soname) {
    return say(report, "'%s' has no soname, so its Slurm release and ABI are unknown (jobkit needs libslurm.so.N)",
               path);
  }
  const int number = libslurm_number(soname);
  if (number < 0) return say(report, "'%s' has soname '%s', not libslurm.so.N", path, soname);
  if (number > newest_known_libslurm || number < oldest_known_libslurm) {
    return say(report,
               "'%s' is %s, whose ABI jobkit does not know (it knows libslurm.so.%d to .%d, Slurm 21.08 to "
               "26.05; a newer Slurm may take other arguments): not called",
               path, soname, oldest_known_libslurm, newest_known_libslurm);
  }
  const bool step_ids = number >= 45;  // Slurm 26.05: slurm_step_id_t instead of a job id
  std::vector<std::string> missing;
  void* get_rem_time = library_symbol(*opened, "slurm_get_rem_time", missing);
  void* requeue = library_symbol(*opened, "slurm_requeue", missing);
  void* strerror = library_symbol(*opened, "slurm_strerror", missing);
  if (!missing.empty()) {
    return say(report, "'%s' lacks slurm_get_rem_time, slurm_requeue or slurm_strerror", path);
  }
  // Slurm 22.05 and later read slurm.conf (SLURM_CONF) here; they end the process when they
  // find none. Older releases read it at the first request (and have no slurm_init).
  std::vector<std::string> optional;
  if (void* init = library_symbol(*opened, "slurm_init", optional)) {
    reinterpret_cast<void (*)(const char*)>(init)(nullptr);
  }
  const std::uint32_t job = request.job_id;
  if (request.call == slurm_call::remaining_seconds) {
    report.value = step_ids ? reinterpret_cast<long (*)(slurm_step_id)>(get_rem_time)(step_id_of_job(job))
                            : reinterpret_cast<long (*)(std::uint32_t)>(get_rem_time)(job);
    report.answered = 1;
    return;
  }
  errno = 0;
  const int status = step_ids ? reinterpret_cast<int (*)(slurm_step_id, std::uint32_t)>(requeue)(step_id_of_job(job), 0)
                              : reinterpret_cast<int (*)(std::uint32_t, std::uint32_t)>(requeue)(job, 0);
  // libslurm keeps its error in errno (slurm_get_errno, gone in Slurm 24.11, returned errno).
  const int code = status == SLURM_SUCCESS ? 0 : (errno != 0 ? errno : -1);
  report.answered = 1;
  // Already requeued (by this call's twin on another rank, or by pre-emption): the wanted state.
  report.value = code == ESLURM_JOB_PENDING ? 0 : code;
  if (report.value != 0) {
    const char* text = reinterpret_cast<char* (*)(int)>(strerror)(code);
    say(report, "%s", text ? text : "unknown Slurm error");
  }
}

// ---- In the parent. ----

/// Why a child that gave no answer ended, with the tail of what it printed.
std::string no_answer(const forked_result& result, std::chrono::milliseconds deadline) {
  std::string output = result.output;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  for (std::size_t at = 0; (at = output.find('\n', at)) != std::string::npos;) output.replace(at, 1, " | ");
  std::string why;
  if (result.timed_out) {
    why = fmt::format("libslurm did not answer within {} (its process was killed)", seconds_text(deadline));
  } else if (result.exit_status >= 0) {
    why = fmt::format("libslurm exited with status {}", result.exit_status);
  } else if (result.signal != 0) {
    const char* name = detail::signal_abbreviation(result.signal);
    why = name ? fmt::format("libslurm's process was ended by SIG{}", name)
               : fmt::format("libslurm's process was ended by signal {}", result.signal);
  } else {
    why = "libslurm's process ended without an answer";
  }
  if (output.find("configuration") != std::string::npos || output.find("slurm.conf") != std::string::npos) {
    why += ": it found no Slurm configuration (is slurm.conf or SLURM_CONF reachable in this container?)";
  }
  if (!output.empty()) why += fmt::format("; it printed: {}", output);
  return why;
}

slurm_answer call_libslurm(slurm_call call, std::uint32_t job_id, std::chrono::milliseconds deadline) {
  slurm_request request{call, job_id, {}, {}, false};
  request.library = libslurm_request(&request.chosen);
  for (const auto& name : library_candidates(request.library)) {
    request.tried += (request.tried.empty() ? "" : ", ") + name;
  }
  const auto result = run_forked(call_in_child, &request, sizeof(slurm_report), deadline);
  if (!result.start_error.empty()) {
    return {false, 0, fmt::format("no process could be started for libslurm ({})", result.start_error)};
  }
  if (!result.reported) return {false, 0, no_answer(result, deadline)};
  slurm_report report;
  std::memcpy(&report, result.report.data(), sizeof report);
  report.text[sizeof report.text - 1] = '\0';
  return {report.answered == 1, static_cast<long>(report.value), report.text};
}

#else

enum class slurm_call { remaining_seconds, requeue };

slurm_answer call_libslurm(slurm_call, std::uint32_t, std::chrono::milliseconds) {
  return {false, 0, "jobkit was built without Slurm's headers (libslurm-dev)"};
}

#endif

}  // namespace

slurm_answer slurm_remaining_seconds(std::uint32_t job_id, std::chrono::milliseconds deadline) {
  return call_libslurm(slurm_call::remaining_seconds, job_id, deadline);
}

slurm_answer slurm_requeue(std::uint32_t job_id, std::chrono::milliseconds deadline) {
  return call_libslurm(slurm_call::requeue, job_id, deadline);
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

std::optional<std::chrono::system_clock::time_point> slurm_job_end_time() {
  const char* value = std::getenv("SLURM_JOB_END_TIME");
  if (!value) return std::nullopt;
  const std::string_view text(value);
  std::int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  // Digits only (Slurm writes "%lu"), at most 12 of them (years beyond 30000 are not an end time).
  if (text.empty() || text.size() > 12 || text.front() == '-' || ec != std::errc{} ||
      end != text.data() + text.size() || seconds == 0) {
    throw error(errc::invalid_environment,
                fmt::format("SLURM_JOB_END_TIME='{}' is not a time (seconds since 1970, as Slurm sets it)", text));
  }
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

library_request libslurm_request(bool* chosen) {
  if (chosen) *chosen = false;
  library_request request{
      "libslurm.so", "slurm_get_rem_time", "", RTLD_NOW | RTLD_GLOBAL, errc::invalid_environment, "", "", {}};
  if (const char* name = std::getenv("JOBKIT_LIBSLURM"); name && *name) {
    if (chosen) *chosen = true;
    request.soname = name;
    return request;
  }
  for (int soname = newest_known_libslurm; soname >= oldest_known_libslurm; --soname) {
    request.also.push_back(fmt::format("libslurm.so.{}", soname));
  }
  return request;
}

}  // namespace jobkit::detail
