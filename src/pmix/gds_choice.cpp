#include "pmix/gds_choice.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "jobkit/error.hpp"
#include "pmix/library.hpp"

namespace jobkit::detail {
namespace {

/// Whether Slurm says this step has at most gds_choice::small_step_ranks ranks (unknown, or mpirun: no).
bool small_step() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return false;  // mpirun's, whatever Slurm says
  for (const char* variable : {"SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr) continue;
    long ranks = 0;
    const std::string_view text = value;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ranks);
    return ec == std::errc{} && end == text.data() + text.size() && ranks >= 1 && ranks <= gds_choice::small_step_ranks;
  }
  return false;
}

}  // namespace

gds_choice::gds_choice() {
  static constexpr const char* name = "PMIX_GDS_MODULE";
  const char* mode = std::getenv("JOBKIT_PMIX_GDS");
  const std::string_view setting = mode == nullptr || *mode == '\0' ? "auto" : mode;
  if (setting != "auto" && setting != "hash" && setting != "launcher") {
    throw error(errc::invalid_environment,
                fmt::format("JOBKIT_PMIX_GDS='{}' is not one of auto, hash, launcher", setting));
  }
  const std::string_view wanted = "hash";
  const char* offered = std::getenv(name);
  if (pmix_api().PMIx_Initialized()) return;
  hash_ = offered != nullptr && std::string_view(offered) == wanted;
  if (setting == "launcher" || offered == nullptr) return;
  if (setting == "auto" && !small_step()) return;
  std::string_view rest = offered;
  bool listed = false;
  while (!rest.empty() && !listed) {
    const auto comma = rest.find(',');
    listed = rest.substr(0, comma) == wanted;
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  if (!listed || hash_) return;
  original_ = offered;
  ::setenv(name, std::string(wanted).c_str(), 1);
  hash_ = true;
}

gds_choice::~gds_choice() {
  if (original_) ::setenv("PMIX_GDS_MODULE", original_->c_str(), 1);
}

}  // namespace jobkit::detail
