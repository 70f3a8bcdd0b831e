#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace jobkit::detail {

/// Read access to environment variables, so identity and logging rules can be tested on
/// synthetic environments.
class environment {
 public:
  virtual ~environment() = default;
  virtual std::optional<std::string> get(std::string_view name) const = 0;
  bool has(std::string_view name) const { return get(name).has_value(); }
};

/// The real process environment (getenv).
const environment& process_environment();

/// A fixed set of variables.
class map_environment final : public environment {
 public:
  map_environment() = default;
  map_environment(std::initializer_list<std::pair<const std::string, std::string>> vars) : vars_(vars) {}
  std::optional<std::string> get(std::string_view name) const override;
  void set(std::string name, std::string value) { vars_[std::move(name)] = std::move(value); }
  void unset(std::string_view name);

 private:
  std::map<std::string, std::string, std::less<>> vars_;
};

}  // namespace jobkit::detail
