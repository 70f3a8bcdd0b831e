/*
 * futex_floor.c - PEER benchmark: the cheapest barrier N processes of one machine can run.
 *
 * Not part of jobkit: a reference for what scheduling alone costs when many ranks share few cores.
 *
 *   usage: futex_floor N [ITERS [SPIN_US]]     (defaults: 1000, 0)
 *
 * Forks N processes that share one counter and one generation word (anonymous shared memory). The
 * last to arrive bumps the generation and wakes everyone with one FUTEX_WAKE; the others spin for
 * SPIN_US calling sched_yield, as jobkit's node segment does, then sleep with FUTEX_WAIT. Every
 * process times each iteration (CLOCK_MONOTONIC) after 50 untimed ones; iteration i's time is the
 * MAX over processes; prints one JSON line with the median and p99 of those maxima, the statistic of
 * bench/jobkit_loop and bench/peers/pmix_floor. No launcher and no PMIx: run it on the machine itself.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timing.h"

struct shared {
  _Atomic uint32_t arrived;
  _Atomic uint32_t generation;
  double times[]; /* process-major: times[p * iters + i] */
};

static void barrier(struct shared* s, uint32_t n, double spin_us) {
  const uint32_t generation = atomic_load(&s->generation);
  if (atomic_fetch_add(&s->arrived, 1) + 1 == n) {
    atomic_store(&s->arrived, 0);
    atomic_fetch_add(&s->generation, 1);
    syscall(SYS_futex, &s->generation, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    return;
  }
  const double spin_end = now_us() + spin_us;
  while (now_us() < spin_end) {
    if (atomic_load(&s->generation) != generation) return;
    sched_yield();
  }
  while (atomic_load(&s->generation) == generation)
    syscall(SYS_futex, &s->generation, FUTEX_WAIT, generation, NULL, NULL, 0);
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
  const long iters = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
  const double spin_us = argc > 3 ? strtod(argv[3], NULL) : 0;
  if (n < 2 || n > 4096 || iters < 1 || iters > 1000000 || spin_us < 0 || spin_us > 1e6) {
    fprintf(stderr, "usage: %s N(2-4096) [ITERS(1-1000000) [SPIN_US(0-1000000)]]\n", argv[0]);
    return 2;
  }
  const size_t bytes = sizeof(struct shared) + sizeof(double) * (size_t)n * (size_t)iters;
  struct shared* s = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("futex_floor: mmap");
    return 1;
  }
  for (long p = 0; p < n; ++p) {
    const pid_t pid = fork();
    if (pid < 0) {
      perror("futex_floor: fork");
      return 1;
    }
    if (pid > 0) continue;
    for (int i = 0; i < 50; ++i) barrier(s, (uint32_t)n, spin_us);
    for (long i = 0; i < iters; ++i) {
      const double t0 = now_us();
      barrier(s, (uint32_t)n, spin_us);
      s->times[p * iters + i] = now_us() - t0;
    }
    _exit(0);
  }
  int failed = 0;
  for (long p = 0; p < n; ++p) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed) {
    fprintf(stderr, "futex_floor: a process failed\n");
    return 1;
  }
  double* slowest = calloc((size_t)iters, sizeof(double));
  if (!slowest) return 1;
  for (long i = 0; i < iters; ++i)
    for (long p = 0; p < n; ++p)
      if (s->times[p * iters + i] > slowest[i]) slowest[i] = s->times[p * iters + i];
  double median, p99;
  stats(slowest, iters, &median, &p99);
  printf(
      "{\"impl\":\"futex_floor\",\"op\":\"barrier\",\"ranks\":%ld,\"nodes\":1,\"bytes\":0,\"iters\":%ld,"
      "\"median_us\":%.1f,\"p99_us\":%.1f,\"spin_us\":%.0f,\"timing\":\"max_over_ranks\"}\n",
      n, iters, median, p99, spin_us);
  free(slowest);
  return 0;
}
