#include "nccl/teardown.hpp"

namespace jobkit::detail {

std::string_view to_string(teardown_end end) noexcept {
  switch (end) {
    case teardown_end::destroyed: return "finalised and destroyed";
    case teardown_end::aborted_after_failure: return "aborted: it had seen a failure";
    case teardown_end::aborted_on_error: return "aborted: NCCL reported an error while it was ending";
    case teardown_end::aborted_at_deadline: return "aborted: its finalisation did not complete before the deadline";
  }
  return "?";
}

teardown_end tear_down(teardown_calls& nccl, bool failure_seen, std::chrono::steady_clock::time_point deadline) {
  const auto aborted = [&](teardown_end why) {
    nccl.abort();
    return why;
  };
  if (failure_seen) return aborted(teardown_end::aborted_after_failure);
  // Until NCCL says ready: a pending call (rule 2), then the finalisation (rule 3).
  const auto settle = [&]() -> teardown_end {
    while (true) {
      switch (nccl.state()) {
        case nccl_state::ready: return teardown_end::destroyed;
        case nccl_state::failed: return aborted(teardown_end::aborted_on_error);
        case nccl_state::in_progress: break;
      }
      if (nccl.now() >= deadline) return aborted(teardown_end::aborted_at_deadline);
      nccl.pause();
    }
  };
  if (const auto end = settle(); end != teardown_end::destroyed) return end;
  if (nccl.finalize() == nccl_state::failed) return aborted(teardown_end::aborted_on_error);
  if (const auto end = settle(); end != teardown_end::destroyed) return end;
  nccl.destroy();
  return teardown_end::destroyed;
}

}  // namespace jobkit::detail
