// Two runtimes in a row against a PMIx server that never completes PMIx_Init: the first gives up at
// JOBKIT_PMIX_INIT_TIMEOUT with a timeout_error, the second is refused at once (the first PMIx_Init
// still runs), and the program then returns normally. Prints one line per attempt.
#include <chrono>
#include <cstdio>

#include "jobkit/jobkit.hpp"

int main() {
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    try {
      jobkit::runtime rt;
      std::printf("attempt %d: connected, rank %d\n", attempt, rt.identity().rank);
    } catch (const jobkit::timeout_error& e) {
      std::printf(
          "attempt %d: timeout_error after %lld ms: %s\n", attempt,
          static_cast<long long>(
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()),
          e.what());
    } catch (const jobkit::error& e) {
      std::printf(
          "attempt %d: error (%s) after %lld ms: %s\n", attempt, std::string(jobkit::to_string(e.code())).c_str(),
          static_cast<long long>(
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()),
          e.what());
    }
  }
  std::fflush(stdout);
  return 0;
}
