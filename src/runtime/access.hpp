#pragma once

#include <atomic>
#include <memory>

#include "jobkit/runtime.hpp"
#include "rendezvous/rendezvous.hpp"

namespace jobkit::detail {

/// What jobkit's own subsystems reach inside a runtime.
struct runtime_access {
  /// The launcher's rendezvous (the PMIx client), for jobkit's one-time exchanges such as NCCL
  /// ids; nullptr without a PMIx server.
  static rendezvous* rendezvous_of(runtime& rt) noexcept;
  /// The world group's failure flag (transport::failed_flag): set once a collective of the world
  /// failed on this rank or another rank's abort reached it. Null until the world's data path is
  /// connected, and for a single rank.
  static std::shared_ptr<const std::atomic<bool>> world_failed_flag(runtime& rt) noexcept;
};

}  // namespace jobkit::detail
