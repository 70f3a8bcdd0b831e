#include "core/embedder.hpp"

#include <atomic>
#include <utility>

namespace jobkit::detail {

namespace {
std::atomic<interrupt_hook> installed_hook{nullptr};
thread_local const std::string* site_override = nullptr;
}  // namespace

void set_interrupt_hook(interrupt_hook hook) noexcept { installed_hook.store(hook); }

void interruption_point() {
  if (const auto hook = installed_hook.load()) hook();
}

call_site_override::call_site_override(std::string text) : text_(std::move(text)), previous_(site_override) {
  site_override = &text_;
}

call_site_override::~call_site_override() { site_override = previous_; }

const std::string* current_call_site_override() noexcept { return site_override; }

}  // namespace jobkit::detail
