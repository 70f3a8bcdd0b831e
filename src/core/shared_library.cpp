#include "core/shared_library.hpp"

#include <dlfcn.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

namespace jobkit::detail {

std::vector<std::string> library_candidates(const library_request& request) {
  std::vector<std::string> candidates{request.soname};
  candidates.insert(candidates.end(), request.also.begin(), request.also.end());
  const std::string_view dirs = request.search_dirs;
  for (std::size_t start = 0; start < dirs.size();) {
    const auto end = std::min(dirs.find(':', start), dirs.size());
    if (end > start) candidates.push_back(fmt::format("{}/{}", dirs.substr(start, end - start), request.soname));
    start = end + 1;
  }
  return candidates;
}

std::optional<shared_library> try_open_shared_library(const library_request& request,
                                                      std::vector<library_failure>& failures) {
  for (auto& name : library_candidates(request)) {
    if (void* handle = ::dlopen(name.c_str(), request.mode)) {
      Dl_info info{};
      const void* symbol = ::dlsym(handle, std::string(request.probe).c_str());
      std::string path = symbol && ::dladdr(symbol, &info) && info.dli_fname ? info.dli_fname : name;
      return shared_library{request.soname, handle, std::move(path), std::move(name)};
    }
    const char* why = ::dlerror();
    failures.push_back({std::move(name), why ? why : "not loaded"});
  }
  return std::nullopt;
}

shared_library open_shared_library(const library_request& request) {
  std::vector<library_failure> failures;
  if (auto library = try_open_shared_library(request, failures)) return std::move(*library);
  std::string tried;
  for (const auto& failure : failures) tried += fmt::format("\n  {}: {}", failure.name, failure.why);
  throw error(request.code, fmt::format("{} needs {} ({}, which jobkit was built against) and it could not be "
                                        "loaded; tried:{}\nInstall it, or put its directory on LD_LIBRARY_PATH",
                                        request.needed_by, request.soname, request.built_against, tried));
}

void* library_symbol(const shared_library& library, const char* name, std::vector<std::string>& missing) {
  void* symbol = ::dlsym(library.handle, name);
  if (!symbol) missing.emplace_back(name);
  return symbol;
}

void require_symbols(const shared_library& library, const std::vector<std::string>& missing, errc code,
                     std::string_view built_against) {
  if (missing.empty()) return;
  throw error(code, fmt::format("{} ({}) lacks {}: it is older than {}, which jobkit was built against", library.soname,
                                library.path, fmt::join(missing, ", "), built_against));
}

}  // namespace jobkit::detail
