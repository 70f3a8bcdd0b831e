#pragma once

// A shared library that jobkit opens at run time for its calls (libpmix, libnccl, libcudart)
// rather than linking it: a program that never makes those calls neither loads the library nor
// needs it to start, and one library built here loads on a machine that has another build of it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobkit/error.hpp"

namespace jobkit::detail {

/// A library opened by soname for its calls.
struct shared_library {
  std::string soname;
  void* handle = nullptr;
  std::string path;  ///< where the loader found it
  std::string name;  ///< the candidate that loaded: the soname, another name, a path
};

/// What to open and how to name it when it cannot be opened.
struct library_request {
  std::string soname;                  ///< e.g. libpmix.so.2
  std::string_view probe;              ///< one of its symbols: where it resolves names the file loaded
  std::string_view search_dirs;        ///< colon-separated, tried after the loader's own search
  int mode = 0;                        ///< dlopen's flags
  errc code = errc::invalid_argument;  ///< of the error thrown
  std::string_view needed_by;          ///< who needs it: "<jobkit/nccl.hpp>"
  std::string_view built_against;      ///< "NCCL 2.28.9"
  std::vector<std::string> also = {};  ///< other names, tried after soname (libpmi2.so after libpmi2.so.0)
};

/// Every name open_shared_library tries, in order: soname, also, then soname in each search_dirs.
std::vector<std::string> library_candidates(const library_request& request);

/// A candidate that could not be opened, and the loader's reason.
struct library_failure {
  std::string name;
  std::string why;
};

/// The first of the request's candidates that loads, or nullopt with `failures` naming every one
/// tried; throws nothing but std::bad_alloc (a caller with its own message, libslurm's forked child).
std::optional<shared_library> try_open_shared_library(const library_request& request,
                                                      std::vector<library_failure>& failures);

/// Opens the request's soname: the copy already in the process when the program linked or opened
/// it (dlopen returns that one), else where the dynamic loader finds it (LD_LIBRARY_PATH, the
/// loader's cache), else its other names, else in each of the request's search_dirs.
/// @throws jobkit::error (request.code) naming who needs it, the soname, what jobkit was built
/// against, and every path tried with the loader's reason
shared_library open_shared_library(const library_request& request);

/// The symbol `name`, or null with `name` added to `missing`.
void* library_symbol(const shared_library& library, const char* name, std::vector<std::string>& missing);

/// @throws jobkit::error (code) naming the library, its path and the missing calls, when any
void require_symbols(const shared_library& library, const std::vector<std::string>& missing, errc code,
                     std::string_view built_against);

/// Opens the request's library and binds a table of its calls: each(calls, library, missing)
/// looks every one up; any missing one is an error naming them all.
template <class Calls, class Each>
Calls bind_calls(const library_request& request, Each each) {
  const auto library = open_shared_library(request);
  Calls calls;
  std::vector<std::string> missing;
  each(calls, library, missing);
  require_symbols(library, missing, request.code, request.built_against);
  return calls;
}

/// Sets `to` to the symbol `name` of library (library_symbol).
template <class Pointer>
void look_up(Pointer& to, const shared_library& library, const char* name, std::vector<std::string>& missing) {
  to = reinterpret_cast<Pointer>(library_symbol(library, name, missing));
}

}  // namespace jobkit::detail
