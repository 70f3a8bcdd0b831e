/*
 * pmix_step_subset.c - whether a rank's key is read by every other rank in a step that runs on a
 * subset of its allocation's nodes (Slurm 22.05's direct modex on such a step: bench/RESULTS.md).
 *
 *   usage: pmix_step_subset MODE [TIMEOUT_S]      (MODE: direct or fence; TIMEOUT_S default 8)
 *   launch: (inside salloc -N3) srun --mpi=pmix -w c2,c3 -N2 -n4 ./pmix_step_subset direct
 *
 * Every rank puts one string under one key ("endpoint of rank R") and commits; with MODE fence it
 * then calls PMIx_Fence(all ranks) with PMIX_COLLECT_DATA=true, with direct no fence at all (a
 * remote key is fetched from its rank's node on demand: the direct modex). Then it gets the key
 * of every other rank (direct: after a second, so that its node-mates have committed) with PMIX_TIMEOUT=TIMEOUT_S, one
 * JSON line per get, written at once:
 *   {"host","rank","peer","peer_host","status","ok","us"}
 * (peer_host is PMIX_HOSTNAME of the peer, from the job's data). Exit status 3 when a get failed.
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
  const bool fence = argc > 1 && strcmp(argv[1], "fence") == 0;
  int timeout_s = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 8;
  if (argc < 2 || (!fence && strcmp(argv[1], "direct") != 0) || timeout_s < 1) {
    fprintf(stderr, "usage: %s direct|fence [TIMEOUT_S>=1]\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_program = "pmix_step_subset";
  memset(&g_self, 0, sizeof g_self);
  CHECK(PMIx_Init(&g_self, NULL, 0));
  const uint32_t ranks = job_u32(PMIX_JOB_SIZE);
  char host[64] = "";
  gethostname(host, sizeof host - 1);

  char mine[64];
  snprintf(mine, sizeof mine, "endpoint of rank %u", g_self.rank);
  pmix_value_t val;
  PMIX_VALUE_LOAD(&val, mine, PMIX_STRING);
  CHECK(PMIx_Put(PMIX_GLOBAL, "bench.step_subset", &val));
  CHECK(PMIx_Commit());
  if (fence) {
    pmix_info_t collect;
    bool yes = true;
    PMIX_INFO_CONSTRUCT(&collect);
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    CHECK(PMIx_Fence(NULL, 0, &collect, 1));
  } else {
    sleep(1);  // a node-mate's key read before its commit is NOT-FOUND at once: not this program's question
  }

  int bad = 0;
  for (uint32_t i = 1; i < ranks; ++i) {
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, g_self.nspace, (g_self.rank + i) % ranks);
    char peer_host[64] = "?";
    pmix_value_t* hv = NULL;
    if (PMIx_Get(&peer, PMIX_HOSTNAME, NULL, 0, &hv) == PMIX_SUCCESS && hv && hv->type == PMIX_STRING)
      snprintf(peer_host, sizeof peer_host, "%s", hv->data.string);
    if (hv) PMIX_VALUE_RELEASE(hv);
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout_s, PMIX_INT);
    pmix_value_t* got = NULL;
    const double t0 = now_us();
    const pmix_status_t rc = PMIx_Get(&peer, "bench.step_subset", &info, 1, &got);
    const double us = now_us() - t0;
    char want[64];
    snprintf(want, sizeof want, "endpoint of rank %u", peer.rank);
    const bool ok = rc == PMIX_SUCCESS && got && got->type == PMIX_STRING && strcmp(got->data.string, want) == 0;
    bad += !ok;
    printf("{\"host\":\"%s\",\"rank\":%u,\"peer\":%u,\"peer_host\":\"%s\",\"status\":\"%s\",\"ok\":%s,\"us\":%.0f}\n",
           host, g_self.rank, peer.rank, peer_host, PMIx_Error_string(rc), ok ? "true" : "false", us);
    if (got) PMIX_VALUE_RELEASE(got);
  }
  PMIx_Finalize(NULL, 0);
  return bad ? 3 : 0;
}
