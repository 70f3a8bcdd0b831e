/*
 * pmix_floor.c - PEER benchmark: the raw PMIx fence floor.
 *
 * Not part of jobkit: this is the baseline jobkit's own barrier is compared against.
 *
 *   usage: pmix_floor [ITERS [WARMUP]]      (defaults: 2000, 100)
 *   launch: srun --mpi=pmix -N3 -n24 ./pmix_floor
 *           mpirun --allow-run-as-root --oversubscribe -np 4 ./pmix_floor
 *
 * Ops (each: WARMUP untimed iterations, then ITERS timed ones):
 *   fence_collect   PMIx_Fence(all ranks) with PMIX_COLLECT_DATA=true and nothing put.
 *                   This is the cheapest REAL barrier PMIx offers under Slurm.
 *   fence_nocollect PMIx_Fence(all ranks) with no info. Reference only: under Slurm 22.05 it is
 *                   NOT a barrier across nodes (ranks on other nodes may leave it at once).
 *
 * First, "init": from the start of main to the end of the first collecting fence (PMIx_Init and
 * one barrier: the PMIx floor of a usable world), the slowest rank's and rank 0's, and the CPU time
 * a rank used from its start to then (cpu_ms_per_rank, the mean over ranks); run through
 * bench/from_exec.sh, also from the process's start (from_exec_us, rank0_from_exec_us).
 * PMIX_FLOOR_GDS=hash: PMIx_Init asks for the "hash" data store, as jobkit does for steps of at most
 * 16 ranks (src/pmix/session.cpp), instead of the launcher's shared-memory store ("gds" in the line).
 * Each op's loop starts right after a collecting fence (synchronised start). Every rank times each
 * iteration (CLOCK_MONOTONIC); iteration i's time is the MAX over ranks of their times for it (the
 * slowest rank). median_us / p99_us are over those per-iteration maxima; rank0_median_us is rank 0's
 * own median. The per-rank times travel to rank 0 AFTER all timed loops (one PMIx_Put of a byte
 * object per rank, one collecting fence, PMIx_Get on rank 0), so the timed fences carry no data.
 * Rank 0 prints one JSON object per op on stdout:
 *   {"impl":"pmix","op":"fence_collect","ranks":24,"nodes":3,"bytes":0,"iters":2000,
 *    "median_us":...,"p99_us":...,"rank0_median_us":...,"timing":"max_over_ranks"}
 * Any PMIx error: message on stderr, exit 1.
 */
#define _GNU_SOURCE
#include <pmix.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmix_bench.h"
#include "timing.h"

int main(int argc, char** argv) {
  const double t_main = now_us();
  long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
  long warmup = argc > 2 ? strtol(argv[2], NULL, 10) : 100;
  if (iters < 1 || warmup < 0) {
    fprintf(stderr, "usage: %s [ITERS>=1 [WARMUP>=0]]\n", argv[0]);
    return 2;
  }

  const char* gds = getenv("PMIX_FLOOR_GDS");
  if (gds && *gds) setenv("PMIX_GDS_MODULE", gds, 1);
  g_program = "pmix_floor";
  memset(&g_self, 0, sizeof g_self);
  CHECK(PMIx_Init(&g_self, NULL, 0));

  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, g_self.nspace, PMIX_RANK_WILDCARD);
  uint32_t ranks = get_u32(&wild, PMIX_JOB_SIZE);
  uint32_t nodes = get_u32(&wild, PMIX_NUM_NODES);

  bool yes = true;
  pmix_info_t collect;
  PMIX_INFO_CONSTRUCT(&collect);
  PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  CHECK(PMIx_Fence(NULL, 0, &collect, 1));
  const double init_us = now_us() - t_main, init_from_exec_us = us_since_exec();
  const double init_cpu_us = cpu_us();

  enum { NOPS = 2 };
  static const struct {
    const char* op;
    bool collect;
    const char* note;
  } ops[NOPS] = {
      {"fence_collect", true, NULL},
      {"fence_nocollect", false, "not a barrier across nodes"},
  };
  enum { NINIT = 3 }; /* init_us, init_from_exec_us, init_cpu_us after the ops' times */
  size_t nt = (size_t)iters * NOPS + NINIT;
  double* t = malloc(sizeof(double) * nt);    /* this rank's times, op-major */
  double* tmax = malloc(sizeof(double) * nt); /* rank 0: max over ranks */
  double* tmp = malloc(sizeof(double) * (size_t)iters);
  if (!t || !tmax || !tmp) {
    perror("malloc");
    return 1;
  }

  t[nt - 3] = init_us;
  t[nt - 2] = init_from_exec_us;
  t[nt - 1] = init_cpu_us;
  for (size_t o = 0; o < NOPS; ++o) {
    pmix_info_t* info = ops[o].collect ? &collect : NULL;
    size_t ninfo = ops[o].collect ? 1 : 0;
    double* to = t + o * (size_t)iters;
    CHECK(PMIx_Fence(NULL, 0, &collect, 1)); /* synchronised start */
    for (long i = 0; i < warmup; ++i) CHECK(PMIx_Fence(NULL, 0, info, ninfo));
    for (long i = 0; i < iters; ++i) {
      double t0 = now_us();
      CHECK(PMIx_Fence(NULL, 0, info, ninfo));
      to[i] = now_us() - t0;
    }
  }

  /* Untimed: bring every rank's times to rank 0 (one key per rank, one collecting fence). */
  static const char key[] = "peers.pmix_floor.times";
  pmix_value_t val;
  PMIX_VALUE_CONSTRUCT(&val);
  val.type = PMIX_BYTE_OBJECT;
  val.data.bo.bytes = (char*)t;
  val.data.bo.size = sizeof(double) * nt;
  CHECK(PMIx_Put(PMIX_GLOBAL, key, &val)); /* PMIx copies the value */
  CHECK(PMIx_Commit());
  CHECK(PMIx_Fence(NULL, 0, &collect, 1));
  if (g_self.rank == 0) {
    memcpy(tmax, t, sizeof(double) * nt);
    double cpu_sum_us = t[nt - 1];
    for (uint32_t r = 1; r < ranks; ++r) {
      pmix_proc_t peer;
      PMIX_LOAD_PROCID(&peer, g_self.nspace, r);
      pmix_value_t* pv = NULL;
      CHECK(PMIx_Get(&peer, key, NULL, 0, &pv));
      if (pv->type != PMIX_BYTE_OBJECT || pv->data.bo.size != sizeof(double) * nt) {
        fprintf(stderr, "pmix_floor: rank %u's times have type %d, size %zu\n", r, (int)pv->type,
                pv->type == PMIX_BYTE_OBJECT ? pv->data.bo.size : 0);
        return 1;
      }
      const double* rt = (const double*)(void*)pv->data.bo.bytes;
      for (size_t i = 0; i < nt; ++i)
        if (rt[i] > tmax[i]) tmax[i] = rt[i];
      cpu_sum_us += rt[nt - 1];
      PMIX_VALUE_RELEASE(pv);
    }
    printf(
        "{\"impl\":\"pmix\",\"op\":\"init\",\"ranks\":%u,\"nodes\":%u,\"bytes\":0,\"iters\":1,"
        "\"median_us\":%.0f,\"p99_us\":%.0f,\"rank0_median_us\":%.0f,\"timing\":\"max_over_ranks\","
        "\"gds\":\"%s\",\"cpu_ms_per_rank\":%.1f",
        ranks, nodes, tmax[nt - 3], tmax[nt - 3], t[nt - 3], gds && *gds ? gds : "launcher", cpu_sum_us / ranks / 1e3);
    if (init_from_exec_us >= 0) printf(",\"from_exec_us\":%.0f,\"rank0_from_exec_us\":%.0f", tmax[nt - 2], t[nt - 2]);
    printf("}\n");
    for (size_t o = 0; o < NOPS; ++o) {
      double med, p99, med0, p99_0;
      memcpy(tmp, t + o * (size_t)iters, sizeof(double) * (size_t)iters);
      stats(tmp, iters, &med0, &p99_0);
      stats(tmax + o * (size_t)iters, iters, &med, &p99);
      printf(
          "{\"impl\":\"pmix\",\"op\":\"%s\",\"ranks\":%u,\"nodes\":%u,\"bytes\":0,"
          "\"iters\":%ld,\"median_us\":%.1f,\"p99_us\":%.1f,\"rank0_median_us\":%.1f,"
          "\"timing\":\"max_over_ranks\"%s%s%s}\n",
          ops[o].op, ranks, nodes, iters, med, p99, med0, ops[o].note ? ",\"note\":\"" : "",
          ops[o].note ? ops[o].note : "", ops[o].note ? "\"" : "");
    }
    fflush(stdout);
  }

  CHECK(PMIx_Fence(NULL, 0, &collect, 1)); /* rank 0 has read everything */
  PMIX_INFO_DESTRUCT(&collect);
  free(t);
  free(tmax);
  free(tmp);
  CHECK(PMIx_Finalize(NULL, 0));
  return 0;
}
