#include "core/environment.hpp"

#include <cstdlib>

namespace jobkit::detail {
namespace {

class process_environment_t final : public environment {
 public:
  std::optional<std::string> get(std::string_view name) const override {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }
};

}  // namespace

const environment& process_environment() {
  static const process_environment_t env;
  return env;
}

std::optional<std::string> map_environment::get(std::string_view name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

void map_environment::unset(std::string_view name) {
  auto it = vars_.find(name);
  if (it != vars_.end()) vars_.erase(it);
}

}  // namespace jobkit::detail
