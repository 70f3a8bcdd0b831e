#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace jobkit::detail {

/// What run_bounded saw: the exit status (124 when it ran out of time, 127 when it could not
/// start, 128+N when signal N killed it), its stdout (at most 16 MiB) and its stderr apart.
struct command_result {
  int status = 127;
  std::string out;
  std::string err;
};

/// Runs argv (a program on PATH or a path) with stdin from /dev/null and both outputs read, and
/// ends it past `limit`: SIGTERM (srun then ends its step), SIGKILL a second later. The child gets
/// `environment` ("NAME=value" entries) when given, else this process's. Never throws for the
/// child's failures: they are in the result.
command_result run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds limit,
                           const std::vector<std::string>* environment = nullptr);

/// The first line of a command's message, for one-line errors; "(no message)" when it has none.
std::string first_line(std::string_view text);

}  // namespace jobkit::detail
