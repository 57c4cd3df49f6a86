/*
 * threads_common.h: what the parts of test_threads (and test_gpu_threads) share: the test
 * file's comment tells what they check. The parts, one executable with that executable's
 * EMCT_GPU:
 *   test_threads.c      the cases and main
 *   threads_workers.c   the threads: readers (each row checked against its key's generation
 *                       window), writers, flushers, stats readers
 *   threads_runner.c    a run: the cache and its world, the threads started and joined, the
 *                       checks after the traffic; runs under several seeds or for a time
 */
#ifndef EMC_TESTS_THREADS_COMMON_H
#define EMC_TESTS_THREADS_COMMON_H

#include "common.h"

#ifdef EMCT_GPU
#include <cuda_runtime_api.h>

#include "emc_cuda.h"
#endif

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Rows are generation rows (tests/common.h: emct_gen_row, emct_gen_decode). */
#ifdef EMCT_GPU
#define EMCT_GPU_ON 1
#else
#define EMCT_GPU_ON 0
#endif

#define HOT 64u
#define MAX_TABLES 3u

/* --------------------------------------------------------------- shared state */
typedef struct tinfo {
  emc_table_kind kind;
  emc_dtype dtype;
  uint32_t dim;
  size_t row_bytes;
  uint64_t universe; /* ranks [0, universe) */
  uint64_t present;  /* hashed: ranks [0, present) hold generation 1 at start */
} tinfo;

typedef struct shared {
  emc_cache *c;
  emc_store *store;
  const emct_world *w; /* ids of ranks (emct_id_of); static mode: reference rows */
  int static_mode;     /* 1: no writers; rows compared with w->ref / w->present */
  uint32_t n;
  tinfo tb[MAX_TABLES];
  uint32_t *started[MAX_TABLES]; /* per rank: largest generation published by its writer */
  uint32_t *done[MAX_TABLES];    /* per rank: last generation whose emc_insert returned */
  uint32_t n_writers;
  uint64_t reader_iters, writer_iters;
  uint32_t reader_ids, writer_ids; /* at most this many ids per table per batch */
  uint32_t big_ids; /* > 0: reader 0 looks up exactly this many hot ids per table per batch */
  uint64_t big_iters; /* ... in this many iterations */
  uint64_t high_bytes, capacity, index_bytes;
  int stop; /* atomic: readers and writers are done (flushers, stats threads stop) */
} shared;

typedef struct worker {
  shared *sh;
  uint32_t index;
  pthread_t th;
  emct_rng rng;
  int failed;
  char err[1024];
  /* results (read by the main thread after join) */
  uint64_t iters, positions, nowhere_positions, n_cache, n_store, n_absent;
  uint64_t range_errors;
  emc_stats last; /* stats threads: last snapshot */
} worker;

/* A worker's first failure (worker threads never call ck_assert: the main thread does). */
void wfail(worker *wk, const char *fmt, ...) EMC_PRINTF(2, 3);
void pause_us(long us);
const char *kind_name(emc_table_kind k);
const char *dtype_name(emc_dtype d);

/* The counters of emc_stats that never go backwards (the stats readers, the runner). */
#define STAT_COUNTERS(X)                                                                    \
  X(lookups) X(hits) X(misses) X(absent) X(admissions) X(admit_skipped) X(inserts)          \
  X(evictions) X(writebacks) X(evict_passes) X(retries) X(unified_hits)

/* --------------------------------------------------------------- threads (threads_workers.c) */
void *reader_main(void *arg);
void *writer_main(void *arg);
void *flusher_main(void *arg);
void *stats_main(void *arg);

/* --------------------------------------------------------------- runs (threads_runner.c) */
typedef struct run_config {
  const char *name;
  uint32_t n;
  emct_tspec spec[MAX_TABLES];
  size_t capacity;
  float t1, t2;
  uint32_t key_bits;
  uint64_t unified_rows;
  uint32_t readers, writers, flushers, statters;
  uint64_t reader_iters, writer_iters, big_iters; /* before emct_scale */
  uint32_t reader_ids, writer_ids, big_ids;
} run_config;

/* The case rc under EMCT_SEEDS seeds from base (or for EMCT_THREADS_SECONDS), its totals
 * printed. */
void run_seeds(const run_config *rc, uint64_t base);
uint64_t env_u64(const char *name, uint64_t dflt);
extern uint32_t n_cases; /* test cases of the suite, set by main (shares of the time) */

#endif
