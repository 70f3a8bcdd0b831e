#pragma once

// Hooks for a runtime that embeds jobkit (the Python module): its callers' locations are not
// std::source_locations, and its signal handlers must run while jobkit waits.

#include <string>

namespace jobkit::detail {

/// Called in the waiting thread where a wait can be abandoned: when a signal interrupts a
/// blocking call (EINTR), after each slice of a wait in which nothing arrived (a signal handled
/// while the thread was not blocked interrupts nothing: it is seen within a slice, 250 ms at
/// most), and between the retries of a polling wait (the workspace). It may throw to abandon the
/// wait; returning resumes it. Null: the wait resumes.
using interrupt_hook = void (*)();
void set_interrupt_hook(interrupt_hook hook) noexcept;
/// Runs the hook, if any.
void interruption_point();

/// While alive, site_text() gives `text` for every call site of the calling thread: jobkit's
/// messages name the embedder's caller rather than the binding's C++ line.
class call_site_override {
 public:
  explicit call_site_override(std::string text);
  ~call_site_override();
  call_site_override(const call_site_override&) = delete;
  call_site_override& operator=(const call_site_override&) = delete;

 private:
  std::string text_;
  const std::string* previous_;
};

/// The innermost override of the calling thread, null when none.
const std::string* current_call_site_override() noexcept;

}  // namespace jobkit::detail
