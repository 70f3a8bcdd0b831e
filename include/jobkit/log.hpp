#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobkit/export.hpp"
#include "jobkit/identity.hpp"

namespace jobkit {

enum class log_level { debug, info, warning, error, off };

/// "DEBUG", "INFO", "WARNING", "ERROR" or "OFF".
JOBKIT_API std::string_view to_string(log_level level) noexcept;

/// Which ranks emit DEBUG and INFO lines: "all", "main" (rank 0), "local-main" (local rank 0 of
/// every node) or a list of ranks and ranges such as "0,3-5".
class JOBKIT_API rank_filter {
 public:
  /// The default: the main rank only.
  rank_filter() = default;
  /// @param setting_name named in the error message (e.g. "JOBKIT_LOG_RANKS")
  /// @throws jobkit::error (invalid_argument) naming setting_name and the text
  static rank_filter parse(std::string_view text, std::string_view setting_name = "rank filter");

  bool admits(const identity& id) const noexcept;

 private:
  enum class kind { all, main, local_main, list };
  kind kind_ = kind::main;
  std::vector<std::pair<int, int>> ranges_;  // inclusive
};

/// What a logger prints and where.
struct JOBKIT_API log_config {
  log_level level = log_level::info;
  rank_filter ranks;
  /// fmt-style pattern put before every line; fields: {rank} {world_size} {local_rank}
  /// {local_world_size} {node_rank} {num_nodes} {hostname} {level}. Empty: "[rank: {rank}] {level}: "
  /// in a launched step and "{level}: " without a launcher.
  std::string prefix;

  /// From JOBKIT_LOG_LEVEL, JOBKIT_LOG_RANKS and JOBKIT_LOG_PREFIX.
  /// @throws jobkit::error naming the variable and its value when one is malformed.
  static log_config from_environment();
};

/// A rank-aware line logger. DEBUG and INFO lines come from the ranks the filter admits, WARNING
/// and ERROR from every rank. Each line is written with one write(2), so lines of ranks sharing a
/// file or pipe never interleave mid-line. Thread-safe.
class JOBKIT_API logger {
 public:
  /// @param fd where lines go (stderr by default); not owned
  /// @throws jobkit::error when config.prefix is not a valid pattern
  explicit logger(identity id, log_config config = log_config::from_environment(), int fd = 2);

  bool enabled(log_level level) const noexcept;
  /// The full line for a message, with its prefix and a trailing newline.
  std::string format_line(log_level level, std::string_view message) const;
  /// Writes the line when the level is enabled; never throws.
  void write(log_level level, std::string_view message) const noexcept;

  template <class... T>
  void log(log_level level, fmt::format_string<T...> format, T&&... args) const {
    if (enabled(level)) write(level, fmt::format(format, std::forward<T>(args)...));
  }
  template <class... T>
  void debug(fmt::format_string<T...> format, T&&... args) const {
    log(log_level::debug, format, std::forward<T>(args)...);
  }
  template <class... T>
  void info(fmt::format_string<T...> format, T&&... args) const {
    log(log_level::info, format, std::forward<T>(args)...);
  }
  template <class... T>
  void warn(fmt::format_string<T...> format, T&&... args) const {
    log(log_level::warning, format, std::forward<T>(args)...);
  }
  template <class... T>
  void error(fmt::format_string<T...> format, T&&... args) const {
    log(log_level::error, format, std::forward<T>(args)...);
  }

  const identity& id() const noexcept { return id_; }

 private:
  identity id_;
  log_config config_;
  int fd_;
  std::string prefixes_[4];  // one per level below off
};

/// The process-wide logger: the identity of default_runtime() (made by the first use, when no
/// runtime is in use), configured from the environment.
JOBKIT_API const logger& default_logger();

/// "[rank: R] message" (the Lightning / SpeechBrain format); the message unchanged when no
/// launcher was detected.
JOBKIT_API std::string rank_prefixed_message(std::string_view message, const identity& id);
/// As above, with this process's identity.
JOBKIT_API std::string rank_prefixed_message(std::string_view message);

/// fmt-style logging through default_logger().
namespace log {
template <class... T>
void debug(fmt::format_string<T...> format, T&&... args) {
  default_logger().debug(format, std::forward<T>(args)...);
}
template <class... T>
void info(fmt::format_string<T...> format, T&&... args) {
  default_logger().info(format, std::forward<T>(args)...);
}
template <class... T>
void warn(fmt::format_string<T...> format, T&&... args) {
  default_logger().warn(format, std::forward<T>(args)...);
}
template <class... T>
void error(fmt::format_string<T...> format, T&&... args) {
  default_logger().error(format, std::forward<T>(args)...);
}
}  // namespace log

}  // namespace jobkit
