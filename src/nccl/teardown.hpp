#pragma once

// How a communicator ends, apart from NCCL itself: the path (finalise and destroy, or abort) and
// the deadline, over an interface that release() implements with libnccl's calls and the unit
// tests with a script (tests/unit/test_nccl.cpp).
//
// NCCL's teardown rules, 2.18 to 2.32, that this follows (docs/nccl.md#teardown has them with
// their sources):
//  1. A communicator that saw an error (a failed call, an asynchronous error from
//     ncclCommGetAsyncError), or whose peer failed, is ended with ncclCommAbort, never
//     finalised: finalising synchronises with the other ranks, and a dead one never answers. From
//     2.16 every rank of a node must abort too, or abort may hang or crash its node-mates: a rank
//     that saw the failure itself, or through jobkit's world group, aborts at once; one that saw
//     nothing finalises, and aborts when its deadline passes (rule 4).
//  2. A non-blocking communicator (config.blocking = 0, as jobkit makes them) answers
//     ncclInProgress while a call is still being carried out; no other NCCL call may be made on it
//     until ncclCommGetAsyncError says ncclSuccess. So a pending call is waited for first.
//  3. ncclCommFinalize on a non-blocking communicator returns at once (ncclInProgress); it is done
//     when ncclCommGetAsyncError says ncclSuccess, and only then may ncclCommDestroy be called.
//     An error instead means rule 1.
//  4. ncclCommDestroy and ncclCommAbort block even on a non-blocking communicator, and neither
//     takes a timeout: since 2.31 (NCCL commit 08016686e) ncclCommDestroy also waits, untimed, for
//     every rank of the node. So destroy is called only after a finalisation that completed
//     (every rank took part in it, none is known to have failed); a deadline that passes during
//     rule 2 or 3 means abort.
//  5. ncclCommAbort may be called at any point of a non-blocking communicator's life, but not
//     while another thread is inside an NCCL call on it.

#include <chrono>
#include <string_view>

namespace jobkit::detail {

/// What ncclCommGetAsyncError or a non-blocking call answered: ncclSuccess, ncclInProgress, or
/// any other result (an error).
enum class nccl_state { ready, in_progress, failed };

/// The calls a teardown makes on one communicator.
class teardown_calls {
 public:
  virtual nccl_state state() = 0;     ///< ncclCommGetAsyncError
  virtual nccl_state finalize() = 0;  ///< ncclCommFinalize (non-blocking)
  virtual void destroy() = 0;         ///< ncclCommDestroy
  virtual void abort() = 0;           ///< ncclCommAbort
  virtual std::chrono::steady_clock::time_point now() = 0;
  virtual void pause() = 0;  ///< between two looks at the state (1 ms)

 protected:
  ~teardown_calls() = default;
};

/// How a teardown ended.
enum class teardown_end {
  destroyed,              ///< finalised within the deadline, then destroyed
  aborted_after_failure,  ///< it had seen a failure (rule 1)
  aborted_on_error,       ///< NCCL reported an error during the teardown (rule 1)
  aborted_at_deadline,    ///< the deadline passed while a call or the finalisation was pending
};

std::string_view to_string(teardown_end end) noexcept;

/// Ends the communicator behind `nccl` by the rules above: abort at once when `failure_seen`;
/// else wait for a pending call, finalise, poll until done, destroy; abort as soon as NCCL
/// reports an error or `deadline` passes. Returns within the deadline plus one ncclCommDestroy
/// or ncclCommAbort.
teardown_end tear_down(teardown_calls& nccl, bool failure_seen, std::chrono::steady_clock::time_point deadline);

}  // namespace jobkit::detail
