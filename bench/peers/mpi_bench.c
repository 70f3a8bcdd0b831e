/*
 * mpi_bench.c - PEER benchmark: Open MPI collectives.
 *
 * Not part of jobkit: this is a baseline jobkit's own collectives are compared against.
 *
 *   usage: mpi_bench [ITERS [WARMUP [LARGE_BYTES [LARGE_ITERS]]]]   (defaults: 2000, 100, 64 MiB, 5)
 *   launch: mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi_bench
 *           srun --mpi=pmix -N3 -n24 ./mpi_bench          (direct launch)
 *
 * Ops (each: WARMUP untimed iterations, then ITERS timed ones, on MPI_COMM_WORLD):
 *   barrier     MPI_Barrier
 *   allreduce   MPI_Allreduce of one double (MPI_SUM)                 bytes = 8
 *   bcast       MPI_Bcast from rank 0 of 64 bytes and of 1 KiB         bytes = 64 / 1024
 *               with an untimed MPI_Barrier between iterations ("iter_sep":"barrier"): otherwise
 *               the root runs ahead and the receivers' times measure the stream, not the latency
 *   allgather   MPI_Allgather of 8 bytes per rank                      bytes = 8 (per rank)
 *   bcast       MPI_Bcast from rank 0 of LARGE_BYTES (default 64 MiB)   bytes = LARGE_BYTES
 *   allgather   MPI_Allgather of LARGE_BYTES / ranks per rank         bytes = LARGE_BYTES (in all)
 *               (large ones: 1 warmup and LARGE_ITERS (default 5) timed iterations, barrier-separated)
 *   init        MPI_Init wall time on rank 0 (iters = 1, "timing":"rank0")
 *
 * Each op's loop starts right after an MPI_Barrier (synchronised start). Every rank times each
 * iteration (CLOCK_MONOTONIC); iteration i's time is the MAX over ranks of their times for it (the
 * slowest rank: for a bcast the root alone may return before the data arrived anywhere).
 * median_us / p99_us are over those per-iteration maxima; rank0_median_us is rank 0's own median;
 * loop_avg_us is the slowest rank's loop time over ITERS; cpu_pct the highest share of a core that a
 * rank's process used during the timed loop (getrusage: what waiting costs). bench/jobkit_loop.cpp
 * times jobkit with this same loop and these same statistics.
 * Rank 0 prints one JSON object per op on stdout:
 *   {"impl":"mpi","op":"barrier","ranks":24,"nodes":3,"bytes":0,"iters":2000,"median_us":...,
 *    "p99_us":...,"rank0_median_us":...,"timing":"max_over_ranks"}
 * "nodes" = number of distinct host names (MPI_Get_processor_name) among the ranks.
 * Errors are returned (MPI_ERRORS_RETURN) and checked: message on stderr, exit 1.
 */
#define _GNU_SOURCE
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timing.h"

static int g_rank = -1;

#define CHECK(call)                                                                \
  do {                                                                             \
    int rc_ = (call);                                                              \
    if (rc_ != MPI_SUCCESS) {                                                      \
      char msg_[MPI_MAX_ERROR_STRING];                                             \
      int len_ = 0;                                                                \
      MPI_Error_string(rc_, msg_, &len_);                                          \
      fprintf(stderr, "mpi_bench: rank %d: %s failed: %s\n", g_rank, #call, msg_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static int g_size, g_nodes;
static long g_iters, g_warmup;
static double *g_t, *g_tmax;
static double g_loop_us, g_cpu_us;

/* Collective: reduces the per-iteration times (MAX over ranks) to rank 0, which prints them. */
static void report(const char* op, long bytes, int sep) {
  CHECK(MPI_Reduce(g_t, g_tmax, (int)g_iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  double mine[2] = {g_loop_us / (double)g_iters, 100 * g_cpu_us / g_loop_us}, worst[2] = {0, 0};
  CHECK(MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
  if (g_rank != 0) return;
  double med, p99, med0, p99_0;
  stats(g_t, g_iters, &med0, &p99_0);
  stats(g_tmax, g_iters, &med, &p99);
  printf(
      "{\"impl\":\"mpi\",\"op\":\"%s\",\"ranks\":%d,\"nodes\":%d,\"bytes\":%ld,\"iters\":%ld,"
      "\"median_us\":%.2f,\"p99_us\":%.2f,\"rank0_median_us\":%.2f,\"loop_avg_us\":%.2f,\"cpu_pct\":%.1f,"
      "\"timing\":\"max_over_ranks\"%s",
      op, g_size, g_nodes, bytes, g_iters, med, p99, med0, worst[0], worst[1], sep ? ",\"iter_sep\":\"barrier\"" : "");
  if (bytes > 1024) printf(",\"mb_per_s\":%.1f", (double)bytes / med);
  printf("}\n");
  fflush(stdout);
}

/* Runs BODY WARMUP + ITERS times after a barrier, timing the last ITERS into g_t.
 * SEP: an untimed MPI_Barrier after each iteration (for rooted ops: without it the root runs ahead
 * and the receivers find the data already there, which times the stream, not the latency). */
#define TIMED(SEP, BODY)                           \
  do {                                             \
    CHECK(MPI_Barrier(MPI_COMM_WORLD));            \
    for (long i_ = 0; i_ < g_warmup; ++i_) {       \
      BODY;                                        \
      if (SEP) CHECK(MPI_Barrier(MPI_COMM_WORLD)); \
    }                                              \
    g_loop_us = now_us();                          \
    g_cpu_us = cpu_us();                           \
    for (long i_ = 0; i_ < g_iters; ++i_) {        \
      double t0_ = now_us();                       \
      BODY;                                        \
      g_t[i_] = now_us() - t0_;                    \
      if (SEP) CHECK(MPI_Barrier(MPI_COMM_WORLD)); \
    }                                              \
    g_loop_us = now_us() - g_loop_us;              \
    g_cpu_us = cpu_us() - g_cpu_us;                \
  } while (0)

static int count_nodes(void) {
  char name[MPI_MAX_PROCESSOR_NAME + 1];
  memset(name, 0, sizeof name);
  int len = 0;
  CHECK(MPI_Get_processor_name(name, &len));
  char* all = calloc((size_t)g_size, sizeof name);
  if (!all) {
    perror("calloc");
    exit(1);
  }
  CHECK(MPI_Allgather(name, (int)sizeof name, MPI_CHAR, all, (int)sizeof name, MPI_CHAR, MPI_COMM_WORLD));
  int distinct = 0;
  for (int i = 0; i < g_size; ++i) {
    int seen = 0;
    for (int j = 0; j < i && !seen; ++j)
      seen = strcmp(all + (size_t)i * sizeof name, all + (size_t)j * sizeof name) == 0;
    distinct += !seen;
  }
  free(all);
  return distinct;
}

int main(int argc, char** argv) {
  double t_init0 = now_us();
  int rc = MPI_Init(&argc, &argv);
  double t_init = now_us() - t_init0;
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "mpi_bench: MPI_Init failed (%d)\n", rc);
    return 1;
  }
  CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_size));

  g_iters = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
  g_warmup = argc > 2 ? strtol(argv[2], NULL, 10) : 100;
  long large = argc > 3 ? strtol(argv[3], NULL, 10) : 64L << 20;
  long large_iters = argc > 4 ? strtol(argv[4], NULL, 10) : 5;
  if (large_iters > g_iters) large_iters = g_iters;
  if (g_iters < 1 || g_warmup < 0) {
    if (g_rank == 0) fprintf(stderr, "usage: %s [ITERS>=1 [WARMUP>=0]]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  g_t = malloc(sizeof(double) * (size_t)g_iters);
  g_tmax = malloc(sizeof(double) * (size_t)g_iters);
  if (!g_t || !g_tmax) {
    perror("malloc");
    return 1;
  }
  g_nodes = count_nodes();

  if (g_rank == 0) {
    printf(
        "{\"impl\":\"mpi\",\"op\":\"init\",\"ranks\":%d,\"nodes\":%d,\"bytes\":0,\"iters\":1,"
        "\"median_us\":%.0f,\"p99_us\":%.0f,\"timing\":\"rank0\"}\n",
        g_size, g_nodes, t_init, t_init);
    fflush(stdout);
  }

  TIMED(0, CHECK(MPI_Barrier(MPI_COMM_WORLD)));
  report("barrier", 0, 0);

  double in = (double)g_rank, out = 0.0;
  TIMED(0, CHECK(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)));
  if (out != (double)g_size * (g_size - 1) / 2.0) {
    fprintf(stderr, "mpi_bench: rank %d: allreduce gave %g\n", g_rank, out);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  report("allreduce", 8, 0);

  unsigned char buf[1024];
  static const int bsizes[] = {64, 1024};
  for (int s = 0; s < 2; ++s) {
    int n = bsizes[s];
    memset(buf, g_rank == 0 ? 0xA5 : 0, sizeof buf);
    TIMED(1, CHECK(MPI_Bcast(buf, n, MPI_BYTE, 0, MPI_COMM_WORLD)));
    for (int i = 0; i < n; ++i)
      if (buf[i] != 0xA5) {
        fprintf(stderr, "mpi_bench: rank %d: bcast byte %d wrong\n", g_rank, i);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    report("bcast", n, 1);
  }

  uint64_t mine = (uint64_t)g_rank * 1000003u;
  uint64_t* all = calloc((size_t)g_size, sizeof *all);
  if (!all) {
    perror("calloc");
    return 1;
  }
  TIMED(0, CHECK(MPI_Allgather(&mine, 8, MPI_BYTE, all, 8, MPI_BYTE, MPI_COMM_WORLD)));
  for (int r = 0; r < g_size; ++r)
    if (all[r] != (uint64_t)r * 1000003u) {
      fprintf(stderr, "mpi_bench: rank %d: allgather slot %d wrong\n", g_rank, r);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  report("allgather", 8, 0);

  if (large > 0 && large_iters > 0) {
    long part = large / g_size, small_iters = g_iters, small_warmup = g_warmup;
    unsigned char* big = malloc((size_t)large);
    unsigned char* gathered = malloc((size_t)(part * g_size));
    if (!big || !gathered) {
      perror("malloc");
      return 1;
    }
    memset(big, g_rank == 0 ? 0xB5 : 0, (size_t)large);
    g_iters = large_iters;
    g_warmup = 1;
    TIMED(1, CHECK(MPI_Bcast(big, (int)large, MPI_BYTE, 0, MPI_COMM_WORLD)));
    if (big[large - 1] != 0xB5) {
      fprintf(stderr, "mpi_bench: rank %d: large bcast wrong\n", g_rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    report("bcast", large, 1);
    TIMED(1, CHECK(MPI_Allgather(big, (int)part, MPI_BYTE, gathered, (int)part, MPI_BYTE, MPI_COMM_WORLD)));
    report("allgather", part * g_size, 1);
    g_iters = small_iters;
    g_warmup = small_warmup;
    free(big);
    free(gathered);
  }

  free(all);
  free(g_t);
  free(g_tmax);
  CHECK(MPI_Finalize());
  return 0;
}
