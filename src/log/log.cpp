#include "jobkit/log.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <mutex>

#include "core/environment.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"
#include "log/library_log.hpp"

namespace jobkit {
namespace {

[[noreturn]] void bad_setting(std::string_view name, std::string_view value, std::string_view why) {
  throw error(errc::invalid_argument, fmt::format("{}='{}' {}", name, value, why));
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

log_level parse_level(std::string_view name, std::string_view text) {
  const auto value = lower(text);
  if (value == "debug") return log_level::debug;
  if (value == "info") return log_level::info;
  if (value == "warning" || value == "warn") return log_level::warning;
  if (value == "error") return log_level::error;
  if (value == "off") return log_level::off;
  bad_setting(name, text, "is not one of debug, info, warning, error, off");
}

std::string_view default_prefix(const identity& id) {
  return id.source == identity_source::defaults ? "{level}: " : "[rank: {rank}] {level}: ";
}

}  // namespace

std::string_view to_string(log_level level) noexcept {
  switch (level) {
    case log_level::debug: return "DEBUG";
    case log_level::info: return "INFO";
    case log_level::warning: return "WARNING";
    case log_level::error: return "ERROR";
    case log_level::off: return "OFF";
  }
  return "UNKNOWN";
}

rank_filter rank_filter::parse(std::string_view text, std::string_view setting_name) {
  rank_filter filter;
  const auto value = lower(text);
  if (value == "all") {
    filter.kind_ = kind::all;
  } else if (value == "main") {
    filter.kind_ = kind::main;
  } else if (value == "local-main") {
    filter.kind_ = kind::local_main;
  } else {
    filter.kind_ = kind::list;
    std::string_view rest = text;
    auto read_rank = [&]() {
      int rank = 0;
      auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), rank);
      if (ec != std::errc{} || rank < 0) {
        bad_setting(setting_name, text, "is not 'all', 'main', 'local-main' or a list of ranks such as '0,3-5'");
      }
      rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
      return rank;
    };
    if (rest.empty()) bad_setting(setting_name, text, "is empty");
    while (true) {
      const int first = read_rank();
      int last = first;
      if (!rest.empty() && rest.front() == '-') {
        rest.remove_prefix(1);
        last = read_rank();
        if (last < first) bad_setting(setting_name, text, "has a range whose end is below its start");
      }
      filter.ranges_.emplace_back(first, last);
      if (rest.empty()) break;
      if (rest.front() != ',') {
        bad_setting(setting_name, text, "is not 'all', 'main', 'local-main' or a list of ranks such as '0,3-5'");
      }
      rest.remove_prefix(1);
    }
  }
  return filter;
}

bool rank_filter::admits(const identity& id) const noexcept {
  switch (kind_) {
    case kind::all: return true;
    case kind::main: return id.rank == 0;
    case kind::local_main: return id.local_rank == 0;
    case kind::list:
      return std::any_of(ranges_.begin(), ranges_.end(),
                         [&](const auto& range) { return id.rank >= range.first && id.rank <= range.second; });
  }
  return false;
}

log_config log_config::from_environment() {
  const auto& env = detail::process_environment();
  log_config config;
  if (auto level = env.get("JOBKIT_LOG_LEVEL")) config.level = parse_level("JOBKIT_LOG_LEVEL", *level);
  if (auto ranks = env.get("JOBKIT_LOG_RANKS")) {
    config.ranks = rank_filter::parse(*ranks, "JOBKIT_LOG_RANKS");
  }
  if (auto prefix = env.get("JOBKIT_LOG_PREFIX")) config.prefix = *prefix;
  return config;
}

logger::logger(identity id, log_config config, int fd) : id_(std::move(id)), config_(std::move(config)), fd_(fd) {
  const std::string_view pattern = config_.prefix.empty() ? default_prefix(id_) : std::string_view(config_.prefix);
  for (auto level : {log_level::debug, log_level::info, log_level::warning, log_level::error}) {
    try {
      prefixes_[static_cast<int>(level)] =
          fmt::format(fmt::runtime(pattern), fmt::arg("rank", id_.rank), fmt::arg("world_size", id_.world_size),
                      fmt::arg("local_rank", id_.local_rank), fmt::arg("local_world_size", id_.local_world_size),
                      fmt::arg("node_rank", id_.node_rank), fmt::arg("num_nodes", id_.num_nodes),
                      fmt::arg("hostname", id_.hostname), fmt::arg("level", to_string(level)));
    } catch (const fmt::format_error& e) {
      bad_setting("log prefix pattern", pattern,
                  fmt::format("is not a valid pattern ({}); fields: {{rank}} {{world_size}} "
                              "{{local_rank}} {{local_world_size}} {{node_rank}} {{num_nodes}} "
                              "{{hostname}} {{level}}",
                              e.what()));
    }
  }
}

bool logger::enabled(log_level level) const noexcept {
  if (level == log_level::off || level < config_.level) return false;
  return level >= log_level::warning || config_.ranks.admits(id_);
}

std::string logger::format_line(log_level level, std::string_view message) const {
  std::string line = prefixes_[static_cast<int>(level)];
  line.reserve(line.size() + message.size() + 1);
  line += message;
  line += '\n';
  return line;
}

void logger::write(log_level level, std::string_view message) const noexcept {
  if (!enabled(level)) return;
  try {
    const std::string line = format_line(level, message);
    // One write per line, but for the rare partial write to a pipe or socket; a failed one is
    // dropped.
    (void)detail::write_file_all(fd_, line.data(), line.size());
  } catch (...) {
    // Logging must never take the program down (out of memory while formatting).
  }
}

std::string rank_prefixed_message(std::string_view message, const identity& id) {
  if (id.source == identity_source::defaults) return std::string(message);
  return fmt::format("[rank: {}] {}", id.rank, message);
}

namespace {
std::mutex identity_in_use_lock;
const identity* in_use_identity = nullptr;
}  // namespace

void detail::set_identity_in_use(const identity* id) noexcept {
  const std::scoped_lock hold(identity_in_use_lock);
  in_use_identity = id;
}

identity detail::identity_in_use() {
  const std::scoped_lock hold(identity_in_use_lock);
  return in_use_identity != nullptr ? *in_use_identity : identity{};
}

}  // namespace jobkit
