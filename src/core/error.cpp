#include "jobkit/error.hpp"

namespace jobkit {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_environment: return "invalid_environment";
    case errc::invalid_argument: return "invalid_argument";
    case errc::pmix: return "pmix";
    case errc::timeout: return "timeout";
    case errc::peer_failure: return "peer_failure";
    case errc::nccl: return "nccl";
    case errc::cuda: return "cuda";
    case errc::io: return "io";
    case errc::scheduler: return "scheduler";
    case errc::internal: return "internal";
  }
  return "unknown";
}

error::error(errc code, const std::string& message, int native_status)
    : std::runtime_error(message), code_(code), native_status_(native_status) {}

}  // namespace jobkit
