// What progress tracking's watcher costs while nothing happens (issue 62: under 1 % of a core):
// this process's CPU time over SECONDS of sleep after one jobkit::progress() (which starts the
// watcher where tracking is on: JOBKIT_PROGRESS=1), against the same with JOBKIT_PROGRESS=0.
//
//   usage: JOBKIT_PROGRESS=1 progress_idle [SECONDS]   (default 60)
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "jobkit/progress.hpp"

namespace {
double cpu_us() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}
}  // namespace

int main(int argc, char** argv) {
  const long seconds = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 60;
  if (seconds <= 0) {
    std::fprintf(stderr, "progress_idle: SECONDS must be a positive whole number, not '%s'\n", argv[1]);
    return 2;
  }
  try {
    jobkit::progress();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "progress_idle: %s\n", e.what());
    return 1;
  }
  const double before = cpu_us();
  ::sleep(static_cast<unsigned>(seconds));
  const double used = cpu_us() - before;
  const char* setting = std::getenv("JOBKIT_PROGRESS");
  std::printf(
      "{\"op\":\"progress_idle\",\"JOBKIT_PROGRESS\":\"%s\",\"seconds\":%ld,\"cpu_us\":%.0f,\"core_pct\":%.5f}\n",
      setting ? setting : "", seconds, used, used / (static_cast<double>(seconds) * 1e6) * 100);
  return 0;
}
