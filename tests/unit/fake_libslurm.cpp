// A stand-in for libslurm, built several times with a different soname and behaviour
// (tests/meson.build), for jobkit's libslurm calls (src/preemption/slurm_api.cpp):
//   FAKE_SLURM_INIT=exit    slurm_init prints libslurm's fatal error and calls exit(1), as libslurm
//                           does when it finds no Slurm configuration
//   FAKE_SLURM_INIT=hang    slurm_init never returns
//   FAKE_SLURM_INIT=answer  slurm_init returns; the calls answer for job 1234 (see below)
//   FAKE_SLURM_ABI=44       slurm_get_rem_time(uint32_t), slurm_requeue(uint32_t, uint32_t)
//   FAKE_SLURM_ABI=45       both take slurm_step_id_t (Slurm 26.05), and check every field of it
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define FAKE_INIT_exit 1
#define FAKE_INIT_hang 2
#define FAKE_INIT_answer 3
#define FAKE_CAT(a, b) a##b
#define FAKE_INIT_OF(mode) FAKE_CAT(FAKE_INIT_, mode)

namespace {
constexpr long expected_job = 1234;
constexpr long pending_job = 1235;        // slurm_requeue: already pending (ESLURM_JOB_PENDING)
constexpr int eslurm_job_pending = 2024;  // its value in Slurm 22.05 to 26.11
constexpr int eslurm_disabled = 2037;     // ESLURM_DISABLED (22.05): --no-requeue
}  // namespace

extern "C" {

void slurm_init(const char*) {
  // Each call leaves a line in FAKE_SLURM_CALLS, when set.
  if (const char* calls = std::getenv("FAKE_SLURM_CALLS")) {
    if (std::FILE* log = std::fopen(calls, "a")) {
      std::fputs("slurm_init\n", log);
      std::fclose(log);
    }
  }
#if FAKE_INIT_OF(FAKE_SLURM_INIT) == FAKE_INIT_exit
  std::fprintf(stderr, "fatal: Could not establish a configuration source\n");
  std::exit(1);
#elif FAKE_INIT_OF(FAKE_SLURM_INIT) == FAKE_INIT_hang
  std::fprintf(stderr, "slurm_init: waiting forever\n");
  for (;;) ::pause();
#endif
}

char* slurm_strerror(int code) {
  static char text[64];
  std::snprintf(text, sizeof text, "fake Slurm error %d", code);
  return text;
}

#if FAKE_SLURM_ABI == 45
struct slurm_step_id_t {
  std::uint64_t sluid;
  std::uint32_t job_id;
  std::uint32_t step_het_comp;
  std::uint32_t step_id;
};
constexpr std::uint32_t no_val = 0xfffffffe;

static bool whole_job(const slurm_step_id_t& id) {
  return id.sluid == 0 && id.step_het_comp == no_val && id.step_id == no_val;
}

long slurm_get_rem_time(slurm_step_id_t id) {
  if (!whole_job(id)) return -2;
  return id.job_id == expected_job ? 4545 : -1;
}

int slurm_requeue(slurm_step_id_t id, std::uint32_t flags) {
  if (whole_job(id) && flags == 0 && id.job_id == expected_job) return 0;
  errno = whole_job(id) && id.job_id == pending_job ? eslurm_job_pending : eslurm_disabled;
  return -1;
}
#else
long slurm_get_rem_time(std::uint32_t job_id) { return job_id == expected_job ? 4242 : -1; }

int slurm_requeue(std::uint32_t job_id, std::uint32_t flags) {
  if (flags == 0 && job_id == expected_job) return 0;
  errno = job_id == pending_job ? eslurm_job_pending : eslurm_disabled;
  return -1;
}
#endif
}
