#pragma once

#include "jobkit/runtime.hpp"
#include "rendezvous/rendezvous.hpp"

namespace jobkit::detail {

/// What jobkit's own subsystems reach inside a runtime.
struct runtime_access {
  /// The launcher's rendezvous (the PMIx client), for jobkit's one-time exchanges such as NCCL
  /// ids; nullptr without a PMIx server.
  static rendezvous* rendezvous_of(runtime& rt) noexcept;
};

}  // namespace jobkit::detail
