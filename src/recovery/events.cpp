#include "recovery/events.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "core/json.hpp"
#include "core/parse.hpp"
#include "core/posix_io.hpp"
#include "jobkit/error.hpp"

namespace jobkit::detail {

std::optional<recovery_settings> recovery_settings_from(const environment& env) {
  const auto dir = env.get("JOBKIT_RECOVERY_DIR");
  if (!dir || dir->empty()) return std::nullopt;
  recovery_settings settings;
  settings.dir = *dir;
  if (const auto attempt = env.get("JOBKIT_RECOVERY_ATTEMPT")) {
    auto rest = std::string_view(*attempt);
    const auto n = take_decimal(rest);
    if (!n || !rest.empty() || *n > 1'000'000) {
      throw error(errc::invalid_environment,
                  fmt::format("JOBKIT_RECOVERY_ATTEMPT='{}' is not a whole number from 0 to 1000000", *attempt));
    }
    settings.attempt = *n;
  }
  if (const auto step = env.get("SLURM_STEP_ID")) settings.step = *step;
  return settings;
}

const std::optional<recovery_settings>& recovery_settings_of_process() {
  static const auto settings = recovery_settings_from(process_environment());
  return settings;
}

std::string event_line(std::string_view kind, const recovery_settings& settings, int rank, std::string_view host,
                       double unix_seconds, std::string_view fields) {
  auto line = fmt::format(R"({{"event":{},"attempt":{},"step":{},"rank":{},"host":{},"time":{:.3f})", json_string(kind),
                          settings.attempt, json_string(settings.step), rank, json_string(host), unix_seconds);
  if (!fields.empty()) {
    line += ',';
    line += fields;
  }
  line += "}\n";
  return line;
}

bool record_event(std::string_view kind, int rank, std::string_view host, std::string_view fields) noexcept {
  try {
    const auto& settings = recovery_settings_of_process();
    if (!settings) return false;
    const auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto line = event_line(kind, *settings, rank, host, now, fields);
    if (line.size() > event_line_limit) return false;
    const auto path = settings->dir / "events.jsonl";
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    const bool written = write_file_all(fd, line.data(), line.size()) == 0;
    ::close(fd);
    return written;
  } catch (...) {
    return false;
  }
}

}  // namespace jobkit::detail
