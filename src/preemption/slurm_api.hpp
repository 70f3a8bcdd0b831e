#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace jobkit::detail {

/// The few calls of Slurm's C API jobkit makes, from the libslurm found at run time (dlopen), so
/// that jobkit neither links libslurm nor ties itself to one Slurm release.
/// Each call sends one request to slurmctld. Thread-safe.
class slurm_api {
 public:
  /// The process-wide instance: libslurm is looked for on first use.
  static slurm_api& get();

  /// False when no libslurm was found or jobkit was built without Slurm's headers;
  /// unavailable_reason() then says why.
  bool available() const noexcept { return available_; }
  const std::string& unavailable_reason() const noexcept { return why_; }

  /// Seconds left before the job's end time; nullopt when Slurm does not know the job.
  std::optional<long> remaining_seconds(std::uint32_t job_id);
  /// 0 on success, else Slurm's error code with its text in `message`.
  int requeue(std::uint32_t job_id, std::string& message);

 private:
  slurm_api();
  struct symbols;
  symbols* symbols_ = nullptr;
  bool available_ = false;
  std::string why_;
};

/// SLURM_JOB_ID as a Slurm job id; nullopt when unset.
/// @throws jobkit::error (invalid_environment) naming the variable when it is not a job id
std::optional<std::uint32_t> slurm_job_id();

}  // namespace jobkit::detail
