/*
 * gpu_bench.h: what the parts of emc-bench-gpu share (emc_bench_gpu.c: the run, its command
 * line and report; gpu_figures.c: figures 1-6 and --prewarm; gpu_bench.c: the helpers
 * below; --train has its own, train.h): the sizes every figure uses, failure exits, the
 * run's state and its results.
 */
#ifndef EMC_BENCH_GPU_BENCH_H
#define EMC_BENCH_GPU_BENCH_H

#include <cuda_runtime_api.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embcache.h"
#include "jline.h"
#include "per_table.h"
#include "slot.h"
#include "trace.h"
#include "train.h"
#include "warmup.h"

#define EXIT_WRONG 1
#define EXIT_FAIL 2
#define EXIT_USAGE 64
#define EXIT_IO 74 /* the result line could not be written (stdout, --out) */
#define EXIT_NODEV 77

#define DIM 64u                   /* f32 elements per row: 256-byte rows everywhere */
#define ROW_BYTES (DIM * 4u)
#define SEED 1u                   /* store fill and trace seed */
#define HIT_ROWS (1u << 20)       /* hit/miss table rows, also the keys per lookup (--hit-rows) */
#define WARM_CHUNK (1u << 18)     /* ids per warm-up lookup of the hit cache */
#define MISS_CAPACITY (1u << 20)  /* the miss cache: 1 MiB */
#define ALPHA 1.05
#define CACHE_FRAC 0.05
#define LAT_BATCH 2048u
#define LAT_WARM 50u
#define LAT_TIMED 200u
#define TP_BATCH 16384u
#define TP_WARM 20u
#define TP_TIMED 50u
#define N_CHECK 2048u             /* rows compared with emc_uniform_row per checked lookup */
#define ST_STREAMS 4u             /* streams of the multi-stream figure */
#define ST_LOOKUPS 64u            /* 2,048 x 26 lookups per stream */

/* ------------------------------------------------------------------ failure helpers
 * A failed CUDA or emc_* call ends the run (EXIT_FAIL; EXIT_NODEV where no device answers). */
void die_cuda(const char *what, cudaError_t e);
void die_emc(const char *what, emc_status st);
#define CU(call)                                   \
  do {                                             \
    cudaError_t e_ = (call);                       \
    if (e_ != cudaSuccess) die_cuda(#call, e_);    \
  } while (0)
#define EMC(call)                                  \
  do {                                             \
    emc_status s_ = (call);                        \
    if (s_ != EMC_OK) die_emc(#call, s_);          \
  } while (0)
void *xmalloc(size_t n);
double now_s(void);
/* Nearest-rank percentile q in (0, 1] of v[0 .. n); sorts v. NAN for n == 0. */
double pct(double *v, size_t n, double q);

/* ------------------------------------------------------------------ the run's state */
typedef struct bench {
  unsigned reps;         /* timed repetitions of the hit/miss lookups and copies */
  cudaStream_t st;       /* every lookup and copy is ordered on this stream */
  cudaEvent_t e0, e1;    /* timing events */
  int wrong;             /* a check failed: exit 1 */
  int prewarm;           /* --prewarm: figure 7 */
  size_t pw_sample, pw_batches; /* its sample and measured batches */
  uint64_t hit_rows;     /* figures 1 and 2: table rows and keys per lookup */
} bench;

/* Milliseconds between e0 and e1 once e1 has completed. */
double ev_ms(const bench *b);
/* Milliseconds per run of `work`, b->reps runs back to back on b->st, timed by events; with
 * cache c (or NULL) the region ends after emc_flush(c, b->st), which orders the cache's writer
 * stream (the calls' admission and eviction) before it on b->st. */
#define BACK_TO_BACK_MS(b, c, out_ms, work)                         \
  do {                                                              \
    CU(cudaStreamSynchronize((b)->st));                             \
    CU(cudaEventRecord((b)->e0, (b)->st));                          \
    for (unsigned r_ = 0; r_ < (b)->reps; r_++) {                   \
      work;                                                         \
    }                                                               \
    if (c) EMC(emc_flush((c), (b)->st));                            \
    CU(cudaEventRecord((b)->e1, (b)->st));                          \
    (out_ms) = ev_ms(b) / (double)(b)->reps;                        \
  } while (0)

/* The dense f32 store of n_tables tables of rows[t] rows, DIM wide, filled (SEED). */
emc_store *make_store(const uint64_t *rows, uint32_t n_tables);
/* A CUDA cache; t1/t2 of 0 keep the defaults. */
emc_cache *make_cache(emc_store *s, size_t capacity, float t1, float t2);
/* Stats once every call enqueued on b->st has run (emc_get_stats reads the device counters
 * on the cache's private stream, which is not ordered with ours). */
emc_stats stats_now(const bench *b, const emc_cache *c);
/* Compare N_CHECK random rows of a lookup's device output with emc_uniform_row. ids: host
 * copy of the batch; every table's segment holds `per_table` ids (n_tables segments).
 * Returns the number of wrong rows. */
uint64_t check_rows(const bench *b, const unsigned char *d_out, const uint64_t *ids,
                    uint64_t per_table, uint32_t n_tables, emct_rng *r);

/* ------------------------------------------------------------------ results */
typedef struct results {
  double hit_ms, hit_gbps, d2d_ms, d2d_gbps, hit_ratio_vs_copy;
  int hit_all_hits;
  double miss_ms, miss_gbps, h2d_ms, h2d_gbps, miss_ratio_vs_copy, miss_hit_ratio;
  double crit_rows, crit_capacity, lat_p50_us, lat_p99_us, lat_gpu_p50_us, lat_gpu_p99_us,
      lat_hit_ratio, tp_ids_per_s, tp_hit_ratio, tp_seconds, tp_index_bytes_per_row;
  double pt_hit_ratio, pt_ids_per_s, pt_min_capacity;
  double st1_ids_per_s, st4_ids_per_s;
  double graph_nodes, graph_kernels, graph_memcpys, graph_memsets;
  char graph_error[256];
  emcb_warm_report pw;   /* --prewarm */
} results;

/* ------------------------------------------------------------------ figures (gpu_figures.c) */
void run_hit_miss(bench *b, results *R); /* 1 + 2 */
void run_criteo(bench *b, results *R, double scale); /* 3, 4, 5 and --prewarm */
void run_graph(results *R); /* 6 */

#endif
