/* Timing helpers shared by the C peer benchmarks. */
#ifndef JOBKIT_BENCH_PEERS_TIMING_H
#define JOBKIT_BENCH_PEERS_TIMING_H

#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static inline double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* CPU time this process used so far, user and system (getrusage), in microseconds. */
static inline double cpu_us(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* Microseconds from bench/from_exec.sh's stamp (JOBKIT_BENCH_EXEC_NS: the wall clock just before
 * this process's exec) to now; negative when the variable is unset. */
static inline double us_since_exec(void) {
  const char* stamp = getenv("JOBKIT_BENCH_EXEC_NS");
  if (!stamp) return -1;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec - strtod(stamp, NULL)) / 1e3;
}

static inline int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts v in place. Median (mean of the two middle values for even n); p99 = nearest rank. */
static inline void stats(double* v, long n, double* median, double* p99) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  *median = (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  long k = (99 * n + 99) / 100; /* ceil(0.99 n) */
  if (k < 1) k = 1;
  *p99 = v[k - 1];
}

#endif
