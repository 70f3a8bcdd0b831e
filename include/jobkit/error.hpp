#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "jobkit/export.hpp"

namespace jobkit {

/// What kind of failure a jobkit::error reports.
enum class errc {
  invalid_environment,  ///< a launcher variable is malformed, partial or contradicts another source
  invalid_argument,     ///< a bad argument or configuration value passed by the caller
  pmix,                 ///< a PMIx (or PMI-2) call failed; native_status() is the pmix_status_t (PMI-2's return code)
  timeout,              ///< a deadline expired
  peer_failure,         ///< another rank died, closed its connection or called a different collective
  nccl,                 ///< an NCCL call failed; native_status() is the ncclResult_t
  cuda,                 ///< a CUDA runtime call failed; native_status() is the cudaError_t
  io,                   ///< a file or shared-memory operation failed; native_status() is the errno
  scheduler,            ///< the scheduler refused or failed a request; native_status() is Slurm's error code
  internal,             ///< a broken invariant inside jobkit
};

/// Name of an error category, e.g. "invalid_environment".
JOBKIT_API std::string_view to_string(errc code) noexcept;

/// The one exception type jobkit throws; specific failures derive from it.
class JOBKIT_API error : public std::runtime_error {
 public:
  /// @param native_status the status of the native library call that failed (0 when none)
  error(errc code, const std::string& message, int native_status = 0);

  errc code() const noexcept { return code_; }
  /// The native status (pmix_status_t, ncclResult_t, cudaError_t) as an int, 0 when none.
  int native_status() const noexcept { return native_status_; }

 private:
  errc code_;
  int native_status_;
};

/// A blocking operation ran past its deadline.
class JOBKIT_API timeout_error : public error {
 public:
  explicit timeout_error(const std::string& message, int native_status = 0)
      : error(errc::timeout, message, native_status) {}
};

}  // namespace jobkit
