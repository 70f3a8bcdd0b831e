/*
 * pmix_direct_get.c - what a PMIx_Get of another rank's key does with no fence at all (direct
 * modex): the facts a setup without the collecting fence would rest on (issue 26).
 *
 *   usage: pmix_direct_get [LATE_MS [TIMEOUT_S]]      (defaults: 0, 30)
 *   launch: srun --mpi=pmix -N3 --ntasks-per-node=2 ./pmix_direct_get 2000
 *
 * Rank 0 sleeps LATE_MS, then every rank puts one string under one key ("endpoint of rank R"),
 * commits and, with no fence, gets the key of rank+1, rank-1 and rank 0 (PMIX_TIMEOUT=TIMEOUT_S).
 * One JSON line per get: {"host","rank","peer","same_node","status","ok","us"}; ok when the value
 * is the peer's. Exit status 3 when any get failed. Measured: bench/RESULTS.md.
 */
#define _GNU_SOURCE
#include <pmix.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peers/pmix_bench.h"
#include "peers/timing.h"

int main(int argc, char** argv) {
  const long late_ms = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
  int timeout_s = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 30;
  if (late_ms < 0 || timeout_s < 1) {
    fprintf(stderr, "usage: %s [LATE_MS>=0 [TIMEOUT_S>=1]]\n", argv[0]);
    return 2;
  }
  g_program = "pmix_direct_get";
  memset(&g_self, 0, sizeof g_self);
  CHECK(PMIx_Init(&g_self, NULL, 0));
  const uint32_t ranks = job_u32(PMIX_JOB_SIZE);
  /* The ranks on this node (Slurm 22.05 serves no PMIX_NODEID of a rank). */
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, g_self.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* local = NULL;
  CHECK(PMIx_Get(&wild, PMIX_LOCAL_PEERS, NULL, 0, &local));
  char local_peers[4096] = ",";
  if (local->type == PMIX_STRING) strncat(local_peers, local->data.string, sizeof local_peers - 3);
  strcat(local_peers, ",");
  PMIX_VALUE_RELEASE(local);
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  if (g_self.rank == 0 && late_ms > 0) usleep((useconds_t)late_ms * 1000);

  char mine[64];
  snprintf(mine, sizeof mine, "endpoint of rank %u", g_self.rank);
  pmix_value_t val;
  PMIX_VALUE_LOAD(&val, mine, PMIX_STRING);
  CHECK(PMIx_Put(PMIX_GLOBAL, "bench.direct_get", &val));
  CHECK(PMIx_Commit());

  const uint32_t peers[3] = {(g_self.rank + 1) % ranks, (g_self.rank + ranks - 1) % ranks, 0};
  int bad = 0;
  for (int i = 0; i < 3; ++i) {
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, g_self.nspace, peers[i]);
    char needle[16];
    snprintf(needle, sizeof needle, ",%u,", peers[i]);
    const bool same_node = strstr(local_peers, needle) != NULL;
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout_s, PMIX_INT);
    pmix_value_t* got = NULL;
    const double t0 = now_us();
    const pmix_status_t rc = PMIx_Get(&peer, "bench.direct_get", &info, 1, &got);
    const double us = now_us() - t0;
    char want[64];
    snprintf(want, sizeof want, "endpoint of rank %u", peers[i]);
    const bool ok = rc == PMIX_SUCCESS && got && got->type == PMIX_STRING && strcmp(got->data.string, want) == 0;
    bad += !ok;
    printf("{\"host\":\"%s\",\"rank\":%u,\"peer\":%u,\"same_node\":%s,\"status\":\"%s\",\"ok\":%s,\"us\":%.0f}\n", host,
           g_self.rank, peers[i], same_node ? "true" : "false", PMIx_Error_string(rc), ok ? "true" : "false", us);
    if (got) PMIX_VALUE_RELEASE(got);
  }
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return bad ? 3 : 0;
}
