/*
 * pmix_resolve_peers.c - whether a rank can read the whole step's layout (every rank's node) from
 * the launcher's job data alone, with no exchange: PMIx_Resolve_nodes, then PMIx_Resolve_peers of
 * each node. A setup in log2 rounds (issue 26) needs every rank's node without a collecting fence.
 *
 *   launch: srun --mpi=pmix -N3 -n7 ./pmix_resolve_peers      (or mpirun -n 4 ./pmix_resolve_peers)
 *
 * One JSON line per rank: {"rank","host","slurm_nodeid","local_rank","nodes":"c1,c2,c3",
 * "peers":{"c1":"0,3",...} or the status of a failed call}. bench/RESULTS.md compares them with
 * the layout the launcher was asked for.
 */
#define _GNU_SOURCE
#include <pmix.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peers/pmix_bench.h"

int main(void) {
  g_program = "pmix_resolve_peers";
  memset(&g_self, 0, sizeof g_self);
  CHECK(PMIx_Init(&g_self, NULL, 0));
  pmix_value_t* value = NULL;
  int local_rank = -1;
  if (PMIx_Get(&g_self, PMIX_LOCAL_RANK, NULL, 0, &value) == PMIX_SUCCESS && value != NULL) {
    local_rank = value->type == PMIX_UINT16 ? value->data.uint16 : -2;
    PMIX_VALUE_RELEASE(value);
  }
  const char* slurm_node = getenv("SLURM_NODEID");
  char* nodes = NULL;
  const pmix_status_t listed = PMIx_Resolve_nodes(g_self.nspace, &nodes);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  printf("{\"rank\":%u,\"host\":\"%s\",\"slurm_nodeid\":\"%s\",\"local_rank\":%d,", g_self.rank, host,
         slurm_node ? slurm_node : "", local_rank);
  if (listed != PMIX_SUCCESS || nodes == NULL) {
    printf("\"nodes_status\":\"%s\"}\n", PMIx_Error_string(listed));
  } else {
    printf("\"nodes\":\"%s\",\"peers\":{", nodes);
    char* saveptr = NULL;
    const char* separator = "";
    for (char* node = strtok_r(nodes, ",", &saveptr); node != NULL; node = strtok_r(NULL, ",", &saveptr)) {
      pmix_proc_t* procs = NULL;
      size_t nprocs = 0;
      const pmix_status_t status = PMIx_Resolve_peers(node, g_self.nspace, &procs, &nprocs);
      printf("%s\"%s\":\"", separator, node);
      separator = ",";
      if (status != PMIX_SUCCESS) {
        printf("%s\"", PMIx_Error_string(status));
        continue;
      }
      for (size_t i = 0; i < nprocs; ++i) printf("%s%u", i ? "," : "", procs[i].rank);
      printf("\"");
      if (procs != NULL) PMIX_PROC_FREE(procs, nprocs);
    }
    printf("}}\n");
    free(nodes);
  }
  fflush(stdout);
  PMIx_Finalize(NULL, 0);
  return 0;
}
