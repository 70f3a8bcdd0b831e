#pragma once

// A blocking call that cannot be cancelled (PMIx_Init, the PMI-2 fence), made on a detached
// thread of its own and awaited with a deadline: past it the caller goes on and the call is left
// running, writing its result, when it ever returns, into state that only the thread still holds.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace jobkit::detail {

/// The one wait of every call that may run a check meanwhile: waits on `signal` (under `lock`)
/// until `done()` or `deadline`, running `while_waiting` (when set) every 50 ms with the lock
/// released. Returns done(). An exception from while_waiting ends the wait and leaves `lock`
/// released.
bool checked_wait(std::unique_lock<std::mutex>& lock, std::condition_variable& signal,
                  std::chrono::steady_clock::time_point deadline, const std::function<bool()>& done,
                  const std::function<void()>& while_waiting);

/// One call of `Result()` running on a detached thread, from construction on.
///   bounded_call init([] { return PMIx_Init(...); });
///   if (const auto status = init.wait(std::chrono::steady_clock::now() + timeout)) ...
template <class Result>
class bounded_call {
 public:
  /// Starts `call` on a detached thread that holds the shared state.
  /// @throws std::system_error when no thread can be started (nothing runs then)
  template <class Call>
  explicit bounded_call(Call call) : state_(std::make_shared<state>()) {
    std::thread([state = state_, call = std::move(call)]() mutable {
      Result result = call();
      {
        std::lock_guard lock(state->mutex);
        state->result.emplace(std::move(result));
      }
      state->finished.notify_all();
    }).detach();
  }

  /// The call's result, or nullopt when `deadline` passed first (the call is left running).
  /// Runs `while_waiting` (when set) every 50 ms meanwhile, as checked_wait does; an exception
  /// from it ends the wait and is passed on, the call left running.
  std::optional<Result> wait(std::chrono::steady_clock::time_point deadline,
                             const std::function<void()>& while_waiting = {}) {
    std::unique_lock lock(state_->mutex);
    const auto returned = [&] { return state_->result.has_value(); };
    if (!checked_wait(lock, state_->finished, deadline, returned, while_waiting)) return std::nullopt;
    return std::move(state_->result);
  }

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable finished;
    std::optional<Result> result;
  };
  std::shared_ptr<state> state_;
};

template <class Call>
bounded_call(Call) -> bounded_call<std::invoke_result_t<Call&>>;

}  // namespace jobkit::detail
