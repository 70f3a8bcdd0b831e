/* What the C PMIx benchmarks share: this process's PMIx identity, a check that ends the program
 * on any PMIx error naming the call, and integer job keys read whatever their width. */
#ifndef JOBKIT_BENCH_PEERS_PMIX_BENCH_H
#define JOBKIT_BENCH_PEERS_PMIX_BENCH_H

#include <pmix.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static pmix_proc_t g_self;
static const char* g_program = "pmix";

#define CHECK(call)                                                                                               \
  do {                                                                                                            \
    pmix_status_t rc_ = (call);                                                                                   \
    if (rc_ != PMIX_SUCCESS) {                                                                                    \
      fprintf(stderr, "%s: rank %u: %s failed: %s (%d)\n", g_program, g_self.rank, #call, PMIx_Error_string(rc_), \
              (int)rc_);                                                                                          \
      exit(1);                                                                                                    \
    }                                                                                                             \
  } while (0)

static inline uint32_t get_u32(const pmix_proc_t* who, const char* key) {
  pmix_value_t* val = NULL;
  CHECK(PMIx_Get(who, key, NULL, 0, &val));
  uint32_t out = 0;
  switch (val->type) {
    case PMIX_UINT32: out = val->data.uint32; break;
    case PMIX_UINT16: out = val->data.uint16; break;
    case PMIX_UINT64: out = (uint32_t)val->data.uint64; break;
    case PMIX_INT: out = (uint32_t)val->data.integer; break;
    case PMIX_SIZE: out = (uint32_t)val->data.size; break;
    default: fprintf(stderr, "%s: unexpected type %d for %s\n", g_program, (int)val->type, key); exit(1);
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

/* A job-level key (PMIX_JOB_SIZE, PMIX_NUM_NODES, ...). */
static inline uint32_t job_u32(const char* key) {
  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, g_self.nspace, PMIX_RANK_WILDCARD);
  return get_u32(&wild, key);
}

#endif
