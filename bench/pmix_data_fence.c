/*
 * pmix_data_fence.c - the raw PMIx fence WITH data, for bench/delay_scale.sh.
 *
 *   usage: pmix_data_fence [ITERS [WARMUP [BYTES]]]      (defaults: 20, 2, 64)
 *   launch: srun --mpi=pmix -N16 -n16 ./pmix_data_fence
 *
 * Each iteration: every rank puts BYTES under one key (the same key every iteration), commits, and
 * calls PMIx_Fence(all ranks) with PMIX_COLLECT_DATA=true; Slurm's mpi/pmix runs such a fence as a
 * ring over the nodes (a fence without data as a tree: bench/peers/pmix_floor's fence_collect).
 * The loop starts right after a collecting fence. Rank 0 times each iteration (CLOCK_MONOTONIC)
 * and prints one JSON line:
 *   {"impl":"pmix","op":"fence_data","ranks":16,"nodes":16,"bytes":64,"iters":20,
 *    "median_us":...,"p99_us":...,"timing":"rank0"}
 * Any PMIx error: message on stderr, exit 1.
 */
#define _GNU_SOURCE
#include <pmix.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peers/pmix_bench.h"
#include "peers/timing.h"

int main(int argc, char** argv) {
  long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 20;
  long warmup = argc > 2 ? strtol(argv[2], NULL, 10) : 2;
  long bytes = argc > 3 ? strtol(argv[3], NULL, 10) : 64;
  if (iters < 1 || warmup < 0 || bytes < 1 || bytes > 1 << 20) {
    fprintf(stderr, "usage: %s [ITERS>=1 [WARMUP>=0 [BYTES 1..1MiB]]]\n", argv[0]);
    return 2;
  }
  g_program = "pmix_data_fence";
  memset(&g_self, 0, sizeof g_self);
  CHECK(PMIx_Init(&g_self, NULL, 0));
  const uint32_t ranks = job_u32(PMIX_JOB_SIZE), nodes = job_u32(PMIX_NUM_NODES);

  bool yes = true;
  pmix_info_t collect;
  PMIX_INFO_CONSTRUCT(&collect);
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  char* payload = malloc((size_t)bytes);
  double* t = malloc(sizeof(double) * (size_t)iters);
  if (!payload || !t) {
    perror("malloc");
    return 1;
  }
  CHECK(PMIx_Fence(NULL, 0, &collect, 1)); /* synchronised start */
  for (long i = -warmup; i < iters; ++i) {
    memset(payload, (int)(i & 0xff), (size_t)bytes);
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = payload;
    val.data.bo.size = (size_t)bytes;
    const double t0 = now_us();
    CHECK(PMIx_Put(PMIX_GLOBAL, "bench.data_fence", &val)); /* PMIx copies the value */
    CHECK(PMIx_Commit());
    CHECK(PMIx_Fence(NULL, 0, &collect, 1));
    if (i >= 0) t[i] = now_us() - t0;
  }
  if (g_self.rank == 0) {
    double med, p99;
    stats(t, iters, &med, &p99);
    printf(
        "{\"impl\":\"pmix\",\"op\":\"fence_data\",\"ranks\":%u,\"nodes\":%u,\"bytes\":%ld,\"iters\":%ld,"
        "\"median_us\":%.1f,\"p99_us\":%.1f,\"timing\":\"rank0\"}\n",
        ranks, nodes, bytes, iters, med, p99);
    fflush(stdout);
  }
  PMIX_INFO_DESTRUCT(&collect);
  free(payload);
  free(t);
  CHECK(PMIx_Finalize(NULL, 0));
  return 0;
}
