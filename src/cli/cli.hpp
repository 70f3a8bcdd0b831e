#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "jobkit/collectives.hpp"

namespace jobkit::cli {

/// The step name of jobkit run's deputy (docs/recovery.md), which runs no ranks: jobkit where
/// leaves it out.
inline constexpr std::string_view deputy_step_name = "jobkit-run-deputy";

/// Bad input or a bad environment: one line on stderr, exit status 2.
struct usage_error {
  std::string message;
};

/// The value after an option, e.g. the "5" of "--timeout 5"; advances i.
inline std::string_view option_value(const std::vector<std::string_view>& args, std::size_t& i,
                                     std::string_view command) {
  if (i + 1 >= args.size()) {
    throw usage_error{std::string(command) + ": " + std::string(args[i]) + " needs a value"};
  }
  return args[++i];
}

/// The call options of a `--timeout SECONDS` value; a bad value is a usage error naming it.
call_options timeout_option(std::string_view value);

/// jobkit bench (bench.cpp).
/// Writes line and a newline to standard error in one write(2), so that lines of processes sharing
/// it (the tasks of a step, processes started inside one task) never interleave. fprintf to the
/// unbuffered stderr does not promise that: glibc 2.37 and later (Debian 13) write it in pieces of
/// 128 bytes.
void print_error_line(std::string_view line);

int run_bench(const std::vector<std::string_view>& args);
/// jobkit on-main, once-per-node, n-at-a-time, zero-first (step_commands.cpp).
int run_step_helper(std::string_view name, const std::vector<std::string_view>& args);
/// jobkit doctor (doctor.cpp).
int run_doctor(const std::vector<std::string_view>& args);
/// jobkit checkpoint, requeue and time-left (preemption_commands.cpp).
int run_checkpoint(const std::vector<std::string_view>& args);
int run_requeue(const std::vector<std::string_view>& args);
int run_time_left(const std::vector<std::string_view>& args);
/// jobkit fold (fold_command.cpp).
int run_fold(const std::vector<std::string_view>& args);
/// jobkit where (where_command.cpp).
int run_where(const std::vector<std::string_view>& args);
/// jobkit run (run_command.cpp).
int run_run(const std::vector<std::string_view>& args);
/// jobkit exec and jobkit env (step_commands.cpp).
int run_exec(std::string_view name, const std::vector<std::string_view>& args);

}  // namespace jobkit::cli
