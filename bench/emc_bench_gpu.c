/*
 * emc-bench-gpu: the CUDA backend of embcache, measured in one run.
 *
 *   1. hit:        all-hit lookups of 1 Mi uniform ids (device ids/out, host offsets) from a
 *                  cache holding every row of a 1 Mi x 64 f32 table, --reps of them back to
 *                  back; GB/s against as many device-to-device cudaMemcpyAsync of the same
 *                  bytes, back to back.
 *   2. miss:       lookups of the same table's 1 Mi distinct ids through a 1 MiB cache (rows
 *                  come from the registered host store), back to back; GB/s against pinned
 *                  H2D copies of the row bytes, back to back.
 *                  Every lookup figure (1, 2, 4, 5) includes the cache's writer stream: the
 *                  timed region ends after emc_flush (or a device synchronize), which waits
 *                  for the writer calls (admission, eviction) the lookups enqueued there.
 *   3. latency:    Criteo-Kaggle tables (26, --scale), Zipf(1.05) ids, cache 5 % of the store:
 *                  single lookups of 2,048 samples x 26 ids, p50 / p99 (wall and GPU).
 *   4. throughput: the same store and cache size, batches of 16,384 samples: ids/s, hit ratio,
 *                  index bytes per row; and in the same run the per-table baseline: one cache
 *                  per table over single-table stores, the same budget split by table size
 *                  (bench/per_table.c), on the same batches: its ids/s and hit ratio.
 *   5. streams:    2,048 x 26 lookups from one host thread on one stream, then the same number
 *                  from four host threads, each on a stream of its own (one cache): ids/s of
 *                  each (wall time to a device synchronize) and the ratio.
 *   6. launches:   one lookup captured into a CUDA graph (relaxed mode) and its nodes counted
 *                  (under capture the writer call that admits the misses is captured too);
 *                  -1 and the reason when capture fails (the bench goes on).
 *   7. --prewarm:  on the Criteo store and cache size, batches of 16,384 samples: an empty
 *                  cache against one warmed with the hot set of the first --prewarm-sample
 *                  batches (bench/warmup.c) and one that replayed them, each measured on the
 *                  --prewarm-batches after the sample ("prewarm" in the JSON line).
 * A human table goes to stderr, one JSON line to stdout (and appended to --out FILE).
 * Exit status: 0 ok; 1 wrong rows or the all-hit run missed; 2 an emc_* or CUDA call failed
 * (or out of memory); 64 bad command line; 77 no CUDA device answers.
 */
#define _POSIX_C_SOURCE 200809L

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

/* ------------------------------------------------------------------ failure helpers */
static void die_cuda(const char *what, cudaError_t e) {
  fprintf(stderr, "emc-bench-gpu: %s failed: %s: %s\n", what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  exit(EXIT_FAIL);
}
#define CU(call)                                   \
  do {                                             \
    cudaError_t e_ = (call);                       \
    if (e_ != cudaSuccess) die_cuda(#call, e_);    \
  } while (0)

static void die_emc(const char *what, emc_status st) {
  fprintf(stderr, "emc-bench-gpu: %s failed: %s: %s\n", what, emc_status_name(st),
          emc_last_error_detail());
  exit(st == EMC_ENODEV ? EXIT_NODEV : EXIT_FAIL);
}
#define EMC(call)                                  \
  do {                                             \
    emc_status s_ = (call);                        \
    if (s_ != EMC_OK) die_emc(#call, s_);          \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "emc-bench-gpu: out of memory (%zu bytes)\n", n);
    exit(EXIT_FAIL);
  }
  return p;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
/* Nearest-rank percentile q in (0, 1] of v[0 .. n); sorts v. */
static double pct(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, cmp_double);
  size_t k = (size_t)ceil(q * (double)n);
  return v[k ? k - 1 : 0];
}

/* ------------------------------------------------------------------ shared state */
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
static double ev_ms(const bench *b) {
  float ms = 0;
  CU(cudaEventSynchronize(b->e1));
  CU(cudaEventElapsedTime(&ms, b->e0, b->e1));
  return (double)ms;
}
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

static emc_store *make_store(const uint64_t *rows, uint32_t n_tables) {
  emc_table_desc d[EMCT_CRITEO_KAGGLE_TABLES] = {{0}};
  emc_store *s = NULL;
  for (uint32_t t = 0; t < n_tables; t++)
    d[t] = (emc_table_desc){.name = NULL, .kind = EMC_TABLE_DENSE, .rows = rows[t], .dim = DIM,
                            .dtype = EMC_DTYPE_F32};
  EMC(emc_store_create(d, n_tables, &s));
  for (uint32_t t = 0; t < n_tables; t++)
    EMC(emc_store_fill_uniform(s, t, -1.0f, 1.0f, SEED));
  return s;
}

/* A CUDA cache; t1/t2 of 0 keep the defaults. */
static emc_cache *make_cache(emc_store *s, size_t capacity, float t1, float t2) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = capacity;
  if (t1 > 0) cfg.evict_high = t1;
  if (t2 > 0) cfg.evict_low = t2;
  EMC(emc_cache_create(s, &cfg, &c));
  return c;
}

/* Stats once every call enqueued on b->st has run (emc_get_stats reads the device counters
 * on the cache's private stream, which is not ordered with ours). */
static emc_stats stats_now(const bench *b, const emc_cache *c) {
  emc_stats s;
  CU(cudaStreamSynchronize(b->st));
  EMC(emc_get_stats(c, &s));
  return s;
}

/* Compare N_CHECK random rows of a lookup's device output with emc_uniform_row. ids: host
 * copy of the batch; every table's segment holds `per_table` ids (n_tables segments).
 * Returns the number of wrong rows. */
static uint64_t check_rows(const bench *b, const unsigned char *d_out, const uint64_t *ids,
                           uint64_t per_table, uint32_t n_tables, emct_rng *r) {
  unsigned char got[ROW_BYTES], want[ROW_BYTES];
  uint64_t bad = 0, n = per_table * n_tables;
  CU(cudaStreamSynchronize(b->st));
  for (unsigned k = 0; k < N_CHECK; k++) {
    uint64_t p = emct_rng_below(r, n);
    CU(cudaMemcpy(got, d_out + p * ROW_BYTES, ROW_BYTES, cudaMemcpyDeviceToHost));
    EMC(emc_uniform_row(SEED, (uint32_t)(p / per_table), ids[p], -1.0f, 1.0f, DIM,
                        EMC_DTYPE_F32, want));
    bad += memcmp(got, want, ROW_BYTES) != 0;
  }
  return bad;
}

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

/* ------------------------------------------------------------------ 1 + 2: hit and miss */
static void run_hit_miss(bench *b, results *R) {
  const uint64_t n = b->hit_rows, rb = ROW_BYTES, stride = emcb_slot_stride(ROW_BYTES);
  const uint64_t chunk = n < WARM_CHUNK ? n : WARM_CHUNK, off_warm[2] = {0, chunk}, off[2] = {0, n};
  const size_t out_bytes = (size_t)(n * rb);
  uint64_t *ids = xmalloc(n * sizeof *ids), *d_ids = NULL;
  unsigned char *d_out = NULL;
  emct_rng rng;
  emct_rng_seed(&rng, SEED);
  emc_store *s = make_store(&n, 1);
  CU(cudaMalloc((void **)&d_ids, n * sizeof *d_ids));
  CU(cudaMalloc((void **)&d_out, out_bytes));

  /* ---- 1. hit: t1 = 1 and 3 % slack hold every row without an eviction pass */
  emc_cache *c = make_cache(s, (size_t)(n * stride + n * stride / 32), 1.0f, 0.9f);
  for (uint64_t i = 0; i < n; i++) ids[i] = i;
  CU(cudaMemcpyAsync(d_ids, ids, n * 8, cudaMemcpyHostToDevice, b->st));
  for (uint64_t i = 0; i < n; i += chunk) /* every row once: all admitted */
    EMC(emc_lookup(c, d_ids + i, off_warm, d_out, b->st));
  EMC(emc_flush(c, b->st)); /* and their admissions on the writer stream; ids[] is rewritten below */
  for (uint64_t i = 0; i < n; i++) ids[i] = emct_rng_below(&rng, n);
  CU(cudaMemcpyAsync(d_ids, ids, n * 8, cudaMemcpyHostToDevice, b->st));
  EMC(emc_lookup(c, d_ids, off, d_out, b->st)); /* untimed: sizes the call's scratch */
  emc_stats s0 = stats_now(b, c);
  BACK_TO_BACK_MS(b, c, R->hit_ms, EMC(emc_lookup(c, d_ids, off, d_out, b->st)));
  emc_stats s1 = stats_now(b, c);
  const uint64_t want = (uint64_t)b->reps * n;
  R->hit_all_hits = s1.hits - s0.hits == want && s1.lookups - s0.lookups == want;
  if (!R->hit_all_hits) {
    fprintf(stderr, "emc-bench-gpu: hit path: %" PRIu64 " hits of %" PRIu64 " lookups (want %"
            PRIu64 "); admit_skipped %" PRIu64 ", evictions %" PRIu64 "\n", s1.hits - s0.hits,
            s1.lookups - s0.lookups, want, s1.admit_skipped, s1.evictions);
    b->wrong = 1;
  }
  uint64_t bad = check_rows(b, d_out, ids, n, 1, &rng);
  EMC(emc_cache_destroy(c));
  /* key read + row read + row write */
  const double hit_bytes = (double)n * 8.0 + 2.0 * (double)n * (double)rb;
  R->hit_gbps = hit_bytes / (R->hit_ms * 1e-3) / 1e9;

  /* reference: a D2D copy of N bytes moves 2N (read + write); 2N = the lookup's bytes */
  const size_t cpy = (size_t)(hit_bytes / 2);
  void *d_a = NULL, *d_b = NULL;
  CU(cudaMalloc(&d_a, cpy));
  CU(cudaMalloc(&d_b, cpy));
  CU(cudaMemsetAsync(d_a, 1, cpy, b->st));
  CU(cudaMemcpyAsync(d_b, d_a, cpy, cudaMemcpyDeviceToDevice, b->st)); /* warm */
  BACK_TO_BACK_MS(b, (emc_cache *)NULL, R->d2d_ms,
                  CU(cudaMemcpyAsync(d_b, d_a, cpy, cudaMemcpyDeviceToDevice, b->st)));
  CU(cudaFree(d_a));
  CU(cudaFree(d_b));
  R->d2d_gbps = 2.0 * (double)cpy / (R->d2d_ms * 1e-3) / 1e9;
  R->hit_ratio_vs_copy = R->hit_gbps / R->d2d_gbps;

  /* ---- 2. miss: every lookup asks for all n rows once (a fixed permutation, so the ids
   * of a call are distinct) through a cache of ~4 K rows: nearly every row comes from the
   * host store over the bus */
  c = make_cache(s, MISS_CAPACITY, 0, 0);
  emct_perm perm;
  emct_perm_init(&perm, n, SEED ^ 0x5eedull);
  for (uint64_t i = 0; i < n; i++) ids[i] = emct_perm_apply(&perm, i);
  CU(cudaMemcpyAsync(d_ids, ids, n * 8, cudaMemcpyHostToDevice, b->st));
  EMC(emc_lookup(c, d_ids, off, d_out, b->st)); /* untimed: scratch */
  s0 = stats_now(b, c);
  BACK_TO_BACK_MS(b, c, R->miss_ms, EMC(emc_lookup(c, d_ids, off, d_out, b->st)));
  s1 = stats_now(b, c);
  R->miss_hit_ratio = (double)(s1.hits - s0.hits) / (double)(s1.lookups - s0.lookups);
  bad += check_rows(b, d_out, ids, n, 1, &rng);
  EMC(emc_cache_destroy(c));
  R->miss_gbps = (double)out_bytes / (R->miss_ms * 1e-3) / 1e9; /* row bytes over the bus */

  /* reference: pinned host -> device copy of the same row bytes */
  void *h_src = NULL;
  CU(cudaMallocHost(&h_src, out_bytes));
  memset(h_src, 1, out_bytes);
  CU(cudaMemcpyAsync(d_out, h_src, out_bytes, cudaMemcpyHostToDevice, b->st)); /* warm */
  BACK_TO_BACK_MS(b, (emc_cache *)NULL, R->h2d_ms,
                  CU(cudaMemcpyAsync(d_out, h_src, out_bytes, cudaMemcpyHostToDevice, b->st)));
  CU(cudaFreeHost(h_src));
  R->h2d_gbps = (double)out_bytes / (R->h2d_ms * 1e-3) / 1e9;
  R->miss_ratio_vs_copy = R->miss_gbps / R->h2d_gbps;

  if (bad) {
    fprintf(stderr, "emc-bench-gpu: hit/miss paths: %" PRIu64 " wrong rows\n", bad);
    b->wrong = 1;
  }
  CU(cudaFree(d_ids));
  CU(cudaFree(d_out));
  emc_store_destroy(s);
  free(ids);
}

/* ------------------------------------------------------------------ 3 + 4: Criteo */
/* A Zipf trace of n_batches batches of `batch` samples x n_tables ids, on host and device. */
static void make_trace(const uint64_t *rows, uint32_t nt, size_t batch, size_t n_batches,
                       uint64_t seed, uint64_t **h, uint64_t **d, uint64_t *offsets) {
  emct_gen g;
  const size_t per = batch * nt;
  if (emct_gen_init(&g, rows, nt, EMCT_DIST_ZIPF, ALPHA, seed) != 0) {
    fprintf(stderr, "emc-bench-gpu: trace generator setup failed\n");
    exit(EXIT_FAIL);
  }
  *h = xmalloc(n_batches * per * sizeof **h);
  for (size_t i = 0; i < n_batches; i++) emct_gen_batch(&g, batch, *h + i * per, offsets);
  emct_gen_free(&g);
  CU(cudaMalloc((void **)d, n_batches * per * sizeof **d));
  CU(cudaMemcpy(*d, *h, n_batches * per * sizeof **d, cudaMemcpyHostToDevice));
}

/* The per-table baseline's callbacks: device ids of batch i, a wait on the bench stream, and
 * rows checked against the single-table stores (emc_uniform_row(SEED, 0, id)). */
typedef struct pt_ctx {
  bench *b;
  const uint64_t *d_ids;
  size_t per;
  const uint64_t *h_ids;
  uint32_t nt;
} pt_ctx;
static const uint64_t *pt_ids(void *ctx, size_t i) {
  const pt_ctx *p = ctx;
  return p->d_ids + i * p->per;
}
static void pt_sync(void *ctx) { CU(cudaStreamSynchronize(((pt_ctx *)ctx)->b->st)); }
static int pt_check(void *ctx, size_t i, const unsigned char *d_out) {
  const pt_ctx *p = ctx;
  unsigned char got[ROW_BYTES], want[ROW_BYTES];
  for (size_t k = 0; k < p->per; k += p->per / 64 + 1) {
    CU(cudaMemcpy(got, d_out + k * ROW_BYTES, ROW_BYTES, cudaMemcpyDeviceToHost));
    EMC(emc_uniform_row(SEED, 0, p->h_ids[i * p->per + k], -1.0f, 1.0f, DIM, EMC_DTYPE_F32, want));
    if (memcmp(got, want, ROW_BYTES) != 0) return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ 7: --prewarm */
/* warmup.c's callbacks: host ids (counted), device ids (looked up), a wait on the bench
 * stream, and the warmed cache's first measured batch checked like the others. */
typedef struct pw_ctx {
  bench *b;
  const uint64_t *h, *d;
  size_t per;
  uint32_t nt;
  emct_rng rng;
} pw_ctx;
static const uint64_t *pw_host(void *ctx, size_t i) {
  const pw_ctx *p = ctx;
  return p->h + i * p->per;
}
static const uint64_t *pw_dev(void *ctx, size_t i) {
  const pw_ctx *p = ctx;
  return p->d + i * p->per;
}
static void pw_sync(void *ctx) { CU(cudaStreamSynchronize(((pw_ctx *)ctx)->b->st)); }
static int pw_check(void *ctx, size_t i, const void *d_out) {
  pw_ctx *p = ctx;
  return check_rows(p->b, d_out, pw_host(ctx, i), TP_BATCH, p->nt, &p->rng) != 0;
}

static void run_prewarm(bench *b, results *R, emc_store *s, const uint64_t *rows, uint32_t nt,
                        size_t cap) {
  uint64_t *h = NULL, *d = NULL, off[EMCT_CRITEO_KAGGLE_TABLES + 1];
  unsigned char *d_out = NULL;
  emc_cache_config cfg;
  pw_ctx px = {b, NULL, NULL, (size_t)TP_BATCH * nt, nt, {{0}}};
  fprintf(stderr, "emc-bench-gpu: --prewarm: %zu + %zu batches of %u x %u ids...\n",
          b->pw_sample, b->pw_batches, TP_BATCH, nt);
  make_trace(rows, nt, TP_BATCH, b->pw_sample + b->pw_batches, SEED + 6, &h, &d, off);
  CU(cudaMalloc((void **)&d_out, px.per * ROW_BYTES));
  emct_rng_seed(&px.rng, SEED + 7);
  px.h = h;
  px.d = d;
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = cap;
  const emcb_warm_setup ws = {.store = s, .cfg = &cfg, .offsets = off, .host_ids = pw_host,
                              .lookup_ids = pw_dev, .check = pw_check, .sync = pw_sync,
                              .ctx = &px, .out = d_out, .stream = b->st,
                              .sample_batches = b->pw_sample, .measure_batches = b->pw_batches};
  int st = emcb_warm_run(&ws, &R->pw);
  if (st != 0) die_emc("--prewarm", (emc_status)st);
  if (!R->pw.rows_ok) {
    fprintf(stderr, "emc-bench-gpu: --prewarm: the warmed cache returned wrong rows\n");
    b->wrong = 1;
  }
  free(h);
  CU(cudaFree(d));
  CU(cudaFree(d_out));
}

/* ------------------------------------------------------------------ 5: streams */
typedef struct st_worker {
  pthread_t th;
  emc_cache *c;
  const uint64_t *d, *off;
  size_t sper, first, nb, step;
  unsigned char *out;
  cudaStream_t st;
  pthread_barrier_t *go;
  int device;
} st_worker;

static void *st_run(void *arg) {
  st_worker *w = arg;
  CU(cudaSetDevice(w->device));
  pthread_barrier_wait(w->go);
  for (size_t i = w->first; i < w->nb; i += w->step) EMC(emc_lookup(w->c, w->d + i * w->sper, w->off, w->out, w->st));
  return NULL;
}

/* Seconds for lookups 0..nb-1 of the trace from `threads` host threads, thread k on stream k
 * issuing lookups k, k + threads, ...: from the start signal to a device synchronize (so the
 * cache's writer stream counts). */
static double run_streams(emc_cache *c, const uint64_t *d, size_t sper, const uint64_t *off,
                          unsigned char **outs, cudaStream_t *sts, size_t nb, unsigned threads) {
  st_worker w[ST_STREAMS];
  pthread_barrier_t go;
  double w0;
  int dev = 0;
  CU(cudaGetDevice(&dev));
  if (pthread_barrier_init(&go, NULL, threads + 1) != 0) die_emc("pthread_barrier_init", EMC_ENOMEM);
  for (unsigned k = 0; k < threads; k++) {
    w[k] = (st_worker){.c = c, .d = d, .off = off, .sper = sper, .first = k, .nb = nb, .step = threads,
                       .out = outs[k], .st = sts[k], .go = &go, .device = dev};
    if (pthread_create(&w[k].th, NULL, st_run, &w[k]) != 0) die_emc("pthread_create", EMC_ENOMEM);
  }
  w0 = now_s();
  pthread_barrier_wait(&go);
  for (unsigned k = 0; k < threads; k++) pthread_join(w[k].th, NULL);
  CU(cudaDeviceSynchronize());
  w0 = now_s() - w0;
  pthread_barrier_destroy(&go);
  return w0;
}

static void run_criteo(bench *b, results *R, double scale) {
  uint64_t rows[EMCT_CRITEO_KAGGLE_TABLES], total = 0, off[EMCT_CRITEO_KAGGLE_TABLES + 1];
  const uint32_t nt =
      emct_preset_rows("criteo-kaggle", scale, 0, 0, rows, EMCT_CRITEO_KAGGLE_TABLES);
  for (uint32_t t = 0; t < nt; t++) total += rows[t];
  const uint64_t stride = emcb_slot_stride(ROW_BYTES);
  size_t cap = (size_t)(CACHE_FRAC * (double)total * (double)stride);
  if (cap < 4 * stride) cap = 4 * stride; /* the library wants room for a row below t2 */
  R->crit_rows = (double)total;
  R->crit_capacity = (double)cap;
  fprintf(stderr, "emc-bench-gpu: criteo-kaggle store, scale %g: %" PRIu64 " rows (%.2f GB)...\n",
          scale, total, (double)total * ROW_BYTES / 1e9);
  double t0 = now_s();
  emc_store *s = make_store(rows, nt);
  fprintf(stderr, "emc-bench-gpu: store ready in %.1f s\n", now_s() - t0);
  emct_rng rng;
  emct_rng_seed(&rng, SEED + 3);
  uint64_t *h = NULL, *d = NULL, bad = 0;
  unsigned char *d_out = NULL;

  /* ---- 3. latency: 50 warm-up lookups, then 200 single lookups, each synchronized */
  const size_t lper = (size_t)LAT_BATCH * nt;
  double *wall = xmalloc(LAT_TIMED * sizeof *wall), *gpu = xmalloc(LAT_TIMED * sizeof *gpu);
  make_trace(rows, nt, LAT_BATCH, LAT_WARM + LAT_TIMED, SEED + 1, &h, &d, off);
  CU(cudaMalloc((void **)&d_out, lper * ROW_BYTES));
  emc_cache *c = make_cache(s, cap, 0, 0);
  for (unsigned i = 0; i < LAT_WARM; i++) EMC(emc_lookup(c, d + i * lper, off, d_out, b->st));
  emc_stats s0 = stats_now(b, c);
  for (unsigned i = 0; i < LAT_TIMED; i++) {
    const double w0 = now_s();
    CU(cudaEventRecord(b->e0, b->st));
    EMC(emc_lookup(c, d + (LAT_WARM + i) * lper, off, d_out, b->st));
    CU(cudaEventRecord(b->e1, b->st));
    CU(cudaStreamSynchronize(b->st));
    wall[i] = (now_s() - w0) * 1e6;
    gpu[i] = ev_ms(b) * 1e3;
  }
  emc_stats s1 = stats_now(b, c);
  R->lat_hit_ratio = (double)(s1.hits - s0.hits) / (double)(s1.lookups - s0.lookups);
  bad += check_rows(b, d_out, h + (size_t)(LAT_WARM + LAT_TIMED - 1) * lper, LAT_BATCH, nt, &rng);
  EMC(emc_cache_destroy(c));
  R->lat_p50_us = pct(wall, LAT_TIMED, 0.50);
  R->lat_p99_us = pct(wall, LAT_TIMED, 0.99);
  R->lat_gpu_p50_us = pct(gpu, LAT_TIMED, 0.50);
  R->lat_gpu_p99_us = pct(gpu, LAT_TIMED, 0.99);
  free(wall);
  free(gpu);
  free(h);
  CU(cudaFree(d));
  CU(cudaFree(d_out));

  /* ---- 4. throughput: a fresh cache, 20 warm-up batches, 50 back-to-back timed batches */
  const size_t tper = (size_t)TP_BATCH * nt;
  make_trace(rows, nt, TP_BATCH, TP_WARM + TP_TIMED, SEED + 2, &h, &d, off);
  CU(cudaMalloc((void **)&d_out, tper * ROW_BYTES));
  c = make_cache(s, cap, 0, 0);
  for (unsigned i = 0; i < TP_WARM; i++) EMC(emc_lookup(c, d + i * tper, off, d_out, b->st));
  s0 = stats_now(b, c);
  CU(cudaEventRecord(b->e0, b->st));
  for (unsigned i = 0; i < TP_TIMED; i++)
    EMC(emc_lookup(c, d + (TP_WARM + i) * tper, off, d_out, b->st));
  EMC(emc_flush(c, b->st)); /* the writer stream's admissions and evictions count too */
  CU(cudaEventRecord(b->e1, b->st));
  R->tp_seconds = ev_ms(b) * 1e-3;
  s1 = stats_now(b, c);
  R->tp_ids_per_s = (double)TP_TIMED * (double)tper / R->tp_seconds;
  R->tp_hit_ratio = (double)(s1.hits - s0.hits) / (double)(s1.lookups - s0.lookups);
  bad += check_rows(b, d_out, h + (size_t)(TP_WARM + TP_TIMED - 1) * tper, TP_BATCH, nt, &rng);
  {
    /* index and per-slot metadata per row the cache holds at t1 (default 0.95) */
    uint64_t rows_t1 = (uint64_t)((double)cap * (double)0.95f) / stride;
    R->tp_index_bytes_per_row = rows_t1 ? (double)s1.index_bytes / (double)rows_t1 : NAN;
  }
  EMC(emc_cache_destroy(c));

  /* ---- 4b. the per-table baseline on the same batches, same budget split by table size */
  {
    emcb_pt pt;
    emcb_pt_result pr;
    emc_cache_config cfg;
    pt_ctx px = {b, d, tper, h, nt};
    int pst;
    emc_cache_config_init(&cfg);
    cfg.backend = EMC_BACKEND_CUDA;
    fprintf(stderr, "emc-bench-gpu: per-table baseline: %u single-table stores...\n", nt);
    if ((pst = emcb_pt_init(&pt, rows, nt, DIM, EMC_DTYPE_F32, SEED)) != 0) die_emc("per-table stores", (emc_status)pst);
    pst = emcb_pt_run(&pt, &cfg, cap, pt_ids, off, ROW_BYTES, TP_WARM, TP_TIMED, 0, d_out, b->st,
                      pt_sync, 0, pt_check, NULL, NULL, &px, &pr);
    if (pst != 0) die_emc("the per-table baseline", (emc_status)pst);
    if (!pr.rows_ok) {
      fprintf(stderr, "emc-bench-gpu: per-table baseline: wrong rows\n");
      b->wrong = 1;
    }
    R->pt_hit_ratio = pr.hit_ratio;
    R->pt_ids_per_s = pr.lookups_per_s;
    R->pt_min_capacity = (double)pr.min_capacity;
    emcb_pt_free(&pt);
  }
  free(h);
  CU(cudaFree(d));
  CU(cudaFree(d_out));

  /* ---- 5. streams: the same lookups from one stream, then spread over four */
  {
    const size_t sper = (size_t)LAT_BATCH * nt, nb = ST_STREAMS * ST_LOOKUPS;
    cudaStream_t sts[ST_STREAMS];
    unsigned char *outs[ST_STREAMS];
    make_trace(rows, nt, LAT_BATCH, nb, SEED + 5, &h, &d, off);
    c = make_cache(s, cap, 0, 0);
    for (unsigned k = 0; k < ST_STREAMS; k++) {
      CU(cudaStreamCreateWithFlags(&sts[k], cudaStreamNonBlocking));
      CU(cudaMalloc((void **)&outs[k], sper * ROW_BYTES));
    }
    for (size_t i = 0; i < nb; i++) EMC(emc_lookup(c, d + i * sper, off, outs[0], sts[0])); /* warm */
    CU(cudaDeviceSynchronize());
    R->st1_ids_per_s = (double)nb * (double)sper / run_streams(c, d, sper, off, outs, sts, nb, 1);
    R->st4_ids_per_s = (double)nb * (double)sper / run_streams(c, d, sper, off, outs, sts, nb, ST_STREAMS);
    bad += check_rows(b, outs[(nb - 1) % ST_STREAMS], h + (nb - 1) * sper, LAT_BATCH, nt, &rng);
    EMC(emc_cache_destroy(c));
    for (unsigned k = 0; k < ST_STREAMS; k++) {
      CU(cudaStreamDestroy(sts[k]));
      CU(cudaFree(outs[k]));
    }
    free(h);
    CU(cudaFree(d));
  }
  if (b->prewarm) run_prewarm(b, R, s, rows, nt, cap);
  emc_store_destroy(s);
  if (bad) {
    fprintf(stderr, "emc-bench-gpu: criteo paths: %" PRIu64 " wrong rows\n", bad);
    b->wrong = 1;
  }
}

/* ------------------------------------------------------------------ 6: graph nodes */
/* One steady-state (all-hit, no eviction pass) lookup of 2,048 samples x 26 tables, captured
 * on a stream of its own, on a small throwaway store and cache (nothing measured depends on
 * it). The graph holds the lookup kernel and the writer call captured behind it. Never exits:
 * a failure is recorded in R->graph_error. */
static void run_graph(results *R) {
  uint64_t rows[EMCT_CRITEO_KAGGLE_TABLES], off[EMCT_CRITEO_KAGGLE_TABLES + 1], *h = NULL,
           *d = NULL;
  const uint32_t nt = emct_preset_rows("uniform", 1, EMCT_CRITEO_KAGGLE_TABLES, 4096, rows,
                                       EMCT_CRITEO_KAGGLE_TABLES);
  unsigned char *d_out = NULL;
  cudaStream_t cs = NULL;
  cudaGraph_t g = NULL;
  emc_store *s = make_store(rows, nt);
  emc_cache *c = make_cache(s, 64u << 20, 0, 0); /* holds all 26 x 4096 rows */
  make_trace(rows, nt, LAT_BATCH, 1, SEED + 4, &h, &d, off);
  CU(cudaMalloc((void **)&d_out, (size_t)LAT_BATCH * nt * ROW_BYTES));
  CU(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  for (int i = 0; i < 2; i++) EMC(emc_lookup(c, d, off, d_out, cs)); /* admit, then all hit */
  CU(cudaStreamSynchronize(cs));

  cudaError_t e = cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    snprintf(R->graph_error, sizeof R->graph_error, "cudaStreamBeginCapture: %s",
             cudaGetErrorString(e));
  } else {
    emc_status ls = emc_lookup(c, d, off, d_out, cs);
    char detail[200];
    snprintf(detail, sizeof detail, "%s", ls != EMC_OK ? emc_last_error_detail() : "");
    e = cudaStreamEndCapture(cs, &g);
    if (ls != EMC_OK)
      snprintf(R->graph_error, sizeof R->graph_error, "emc_lookup under capture: %s: %s",
               emc_status_name(ls), detail);
    else if (e != cudaSuccess)
      snprintf(R->graph_error, sizeof R->graph_error, "cudaStreamEndCapture: %s",
               cudaGetErrorString(e));
  }
  (void)cudaGetLastError(); /* capture errors are not sticky; clear them */
  size_t n = 0;
  if (g && !R->graph_error[0] && (e = cudaGraphGetNodes(g, NULL, &n)) == cudaSuccess) {
    cudaGraphNode_t *nodes = xmalloc((n ? n : 1) * sizeof *nodes);
    if ((e = cudaGraphGetNodes(g, nodes, &n)) == cudaSuccess) {
      R->graph_nodes = (double)n;
      R->graph_kernels = R->graph_memcpys = R->graph_memsets = 0;
      for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType ty;
        if (cudaGraphNodeGetType(nodes[i], &ty) != cudaSuccess) continue;
        R->graph_kernels += ty == cudaGraphNodeTypeKernel;
        R->graph_memcpys += ty == cudaGraphNodeTypeMemcpy;
        R->graph_memsets += ty == cudaGraphNodeTypeMemset;
      }
    }
    free(nodes);
  }
  if (e != cudaSuccess && !R->graph_error[0])
    snprintf(R->graph_error, sizeof R->graph_error, "cudaGraphGetNodes: %s",
             cudaGetErrorString(e));
  if (g) CU(cudaGraphDestroy(g));
  CU(cudaStreamDestroy(cs));
  CU(cudaFree(d_out));
  CU(cudaFree(d));
  free(h);
  emc_status ds = emc_cache_destroy(c);
  if (ds == EMC_OK) {
    emc_store_destroy(s);
  } else { /* the cache cannot be used after the capture: leave it (and its store) */
    fprintf(stderr, "emc-bench-gpu: note: the captured cache could not be destroyed (%s: %s); "
            "left to process exit\n", emc_status_name(ds), emc_last_error_detail());
    (void)cudaGetLastError();
  }
}

/* ------------------------------------------------------------------ main */
static void usage(FILE *f) {
  fprintf(f, "usage: emc-bench-gpu [--scale F] [--skip-criteo] [--reps N] [--prewarm] [--out FILE] [-h]\n"
             "  --scale F      criteo-kaggle rows = max(1, round(card * F)) (default 1.0:\n"
             "                 33.8 M rows, 8.6 GB of host memory)\n"
             "  --skip-criteo  run only the hit, miss and graph figures\n"
             "  --train        instead of the figures above: training steps (prefetch(i+1) ->\n"
             "                 lookup(i) -> backward -> SGD apply(i), device buffers) on the\n"
             "                 Criteo store at --scale: step time (CUDA events), host syncs per\n"
             "                 step, one step captured into a CUDA graph and replayed --reps times\n"
             "  --train-steps N --train-warmup W --train-batch B   (default 50, 10, 16384)\n"
             "  --prefetch-depth D  --train: cfg.prefetch_depth (default 1; 0..14)\n"
             "  --reps N       timed repetitions of the hit/miss lookups and copies (default 20)\n"
             "  --hit-rows N   rows of the hit/miss table and keys per lookup (default 1048576;\n"
             "                 a power of two from 4096; smaller for the CPU model)\n"
             "  --prewarm      figure 7: an empty cache against one warmed with the hot set of\n"
             "                 the first --prewarm-sample N batches (default 64), on the\n"
             "                 --prewarm-batches K after them (default 16); needs the Criteo part\n"
             "  --out FILE     append the JSON line to FILE too\n"
             "  -h, --help     this text\n"
             "Exit: 0 ok, 1 wrong rows, 2 embcache or CUDA error, 64 bad usage, 77 no CUDA\n"
             "device (skipped; the reason on stderr, e.g. no NVIDIA driver found).\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"scale", required_argument, NULL, 's'},
                                     {"skip-criteo", no_argument, NULL, 'k'},
                                     {"train", no_argument, NULL, 'T'},
                                     {"train-steps", required_argument, NULL, 'N'},
                                     {"train-warmup", required_argument, NULL, 'W'},
                                     {"train-batch", required_argument, NULL, 'Z'},
                                     {"prefetch-depth", required_argument, NULL, 'D'},
                                     {"reps", required_argument, NULL, 'r'},
                                     {"hit-rows", required_argument, NULL, 'H'},
                                     {"out", required_argument, NULL, 'o'},
                                     {"help", no_argument, NULL, 'h'},
                                     {"prewarm", no_argument, NULL, 'p'},
                                     {"prewarm-sample", required_argument, NULL, 'S'},
                                     {"prewarm-batches", required_argument, NULL, 'B'},
                                     {NULL, 0, NULL, 0}};
  double scale = 1.0;
  int skip_criteo = 0, c, train = 0;
  emcb_train_gpu_opts to = {.scale = 1.0, .batch = 16384, .warmup = 10, .steps = 50,
                            .prefetch_depth = 1, .cache_frac = CACHE_FRAC, .graph_reps = 20};
  const char *out_path = NULL;
  bench b = {.reps = 20, .pw_sample = 64, .pw_batches = 16, .hit_rows = HIT_ROWS};
  char *end = NULL;
  int li = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
    errno = 0;
    if (c == 's') {
      scale = strtod(optarg, &end);
      if (errno || *end || !(scale > 0) || !isfinite(scale)) goto bad;
    } else if (c == 'T') {
      train = 1;
    } else if (c == 'N' || c == 'W' || c == 'Z' || c == 'D') { /* --train's numbers */
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v > (c == 'D' ? 14ul : 1ul << 24) ||
          (v == 0 && c != 'W' && c != 'D'))
        goto bad;
      if (c == 'N') to.steps = v;
      else if (c == 'W') to.warmup = v;
      else if (c == 'Z') to.batch = v;
      else to.prefetch_depth = (uint32_t)v;
    } else if (c == 'r') {
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v == 0 || v > 100000) goto bad;
      b.reps = (unsigned)v;
    } else if (c == 'H') { /* a power of two from 4 Ki to 16 Mi */
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v < 4096 || v > (1ul << 24) || (v & (v - 1))) goto bad;
      b.hit_rows = v;
    } else if (c == 'k') {
      skip_criteo = 1;
    } else if (c == 'p') {
      b.prewarm = 1;
    } else if (c == 'S' || c == 'B') {
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v > 100000 || (c == 'B' && v == 0)) goto bad;
      *(c == 'S' ? &b.pw_sample : &b.pw_batches) = (size_t)v;
    } else if (c == 'o') {
      out_path = optarg;
    } else if (c == 'h') {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "emc-bench-gpu: unknown option or missing argument: %s\n", argv[optind - 1]);
      usage(stderr);
      return EXIT_USAGE;
    }
    continue;
  bad:
    fprintf(stderr, "emc-bench-gpu: bad value '%s' for --%s\n", optarg, lo[li].name);
    return EXIT_USAGE;
  }
  if (optind < argc) {
    fprintf(stderr, "emc-bench-gpu: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return EXIT_USAGE;
  }
  FILE *out_file = NULL;
  if (out_path && !(out_file = fopen(out_path, "a"))) {
    fprintf(stderr, "emc-bench-gpu: cannot open %s: %s\n", out_path, strerror(errno));
    return EXIT_USAGE;
  }

  int ndev = 0;
  emc_status dst = emc_device_count(&ndev); /* says "no NVIDIA driver found" where none is */
  if (dst != EMC_OK) {
    fprintf(stderr, "emc-bench-gpu: no CUDA device answers (%s: %s); nothing to measure, "
            "skipped (exit 77)\n", emc_status_name(dst), emc_last_error_detail());
    if (out_file) fclose(out_file);
    return EXIT_NODEV;
  }
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  CU(cudaSetDevice(0));
  CU(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
  CU(cudaEventCreate(&b.e0));
  CU(cudaEventCreate(&b.e1));
  fprintf(stderr, "emc-bench-gpu: %s, embcache %s, %u reps\n", prop.name, emc_version_string(),
          b.reps);
  if (train) { /* --train: the training figure only (train_gpu.c) */
    to.scale = scale;
    to.graph_reps = b.reps;
    int trc = emcb_train_gpu_main(&to, out_file);
    if (out_file) fclose(out_file);
    return trc;
  }

  results R;
  memset(&R, 0, sizeof R);
  R.crit_rows = R.crit_capacity = R.lat_p50_us = R.lat_p99_us = R.lat_gpu_p50_us =
      R.lat_gpu_p99_us = R.lat_hit_ratio = R.tp_ids_per_s = R.tp_hit_ratio = R.tp_seconds =
          R.tp_index_bytes_per_row = R.pt_hit_ratio = R.pt_ids_per_s = R.pt_min_capacity =
              R.st1_ids_per_s = R.st4_ids_per_s = NAN;
  R.graph_nodes = R.graph_kernels = R.graph_memcpys = R.graph_memsets = -1;
  run_hit_miss(&b, &R);
  if (!skip_criteo) run_criteo(&b, &R, scale);
  run_graph(&R);

  /* ---- report: one JSON line */
  jline j;
  jl_init(&j);
  jl_str(&j, "bench", "emc-bench-gpu");
  jl_str(&j, "version", emc_version_string());
  jl_str(&j, "device", prop.name);
  jl_str(&j, "dtype", "f32");
  jl_bool(&j, "hit_all_hits", R.hit_all_hits);
  jl_bool(&j, "criteo", !skip_criteo);
  const struct { const char *k; double v; } nums[] = {
      {"dim", DIM}, {"reps", b.reps}, {"hit_keys", (double)b.hit_rows}, {"hit_ms", R.hit_ms},
      {"hit_gb_per_s", R.hit_gbps}, {"d2d_copy_ms", R.d2d_ms},
      {"d2d_copy_gb_per_s", R.d2d_gbps}, {"hit_ratio_vs_d2d", R.hit_ratio_vs_copy},
      {"miss_keys", (double)b.hit_rows}, {"miss_capacity_bytes", MISS_CAPACITY}, {"miss_ms", R.miss_ms},
      {"miss_gb_per_s", R.miss_gbps}, {"h2d_copy_ms", R.h2d_ms},
      {"h2d_copy_gb_per_s", R.h2d_gbps}, {"miss_ratio_vs_h2d", R.miss_ratio_vs_copy},
      {"miss_hit_ratio", R.miss_hit_ratio}, {"criteo_scale", skip_criteo ? NAN : scale},
      {"criteo_rows", R.crit_rows}, {"criteo_capacity_bytes", R.crit_capacity},
      {"alpha", ALPHA}, {"latency_batch_ids", (double)LAT_BATCH * EMCT_CRITEO_KAGGLE_TABLES},
      {"latency_p50_us", R.lat_p50_us}, {"latency_p99_us", R.lat_p99_us},
      {"latency_gpu_p50_us", R.lat_gpu_p50_us}, {"latency_gpu_p99_us", R.lat_gpu_p99_us},
      {"latency_hit_ratio", R.lat_hit_ratio},
      {"throughput_batch_ids", (double)TP_BATCH * EMCT_CRITEO_KAGGLE_TABLES},
      {"throughput_seconds", R.tp_seconds}, {"throughput_ids_per_s", R.tp_ids_per_s},
      {"throughput_hit_ratio", R.tp_hit_ratio}, {"hit_ratio", R.tp_hit_ratio},
      {"lookups_per_s", R.tp_ids_per_s}, {"index_bytes_per_row", R.tp_index_bytes_per_row},
      {"per_table_hit_ratio", R.pt_hit_ratio}, {"per_table_lookups_per_s", R.pt_ids_per_s},
      {"per_table_min_capacity", R.pt_min_capacity},
      {"global_vs_per_table_speed", R.tp_ids_per_s / R.pt_ids_per_s},
      {"streams", ST_STREAMS}, {"one_stream_ids_per_s", R.st1_ids_per_s},
      {"streams_ids_per_s", R.st4_ids_per_s}, {"streams_speedup", R.st4_ids_per_s / R.st1_ids_per_s},
      {"graph_nodes", R.graph_nodes},
      {"graph_kernel_nodes", R.graph_kernels}, {"graph_memcpy_nodes", R.graph_memcpys},
      {"graph_memset_nodes", R.graph_memsets}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) jl_num(&j, nums[i].k, nums[i].v);
  if (b.prewarm && !skip_criteo) {
    char wjson[1024];
    if (emcb_warm_json(&R.pw, wjson, sizeof wjson) < 0) die_emc("--prewarm's JSON", EMC_ENOMEM);
    jl_key(&j, "prewarm");
    jl_raw(&j, "%s", wjson);
  }
  if (R.graph_error[0]) {
    for (char *p = R.graph_error; *p; p++) /* keep the JSON string plain */
      if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    jl_str(&j, "graph_error", R.graph_error);
  }
  jl_bool(&j, "rows_ok", !b.wrong);
  if (jl_end(&j) != 0) fputs("emc-bench-gpu: result line truncated\n", stderr);
  fputs(j.buf, stdout);
  fflush(stdout);
  if (out_file) {
    fputs(j.buf, out_file);
    fclose(out_file);
  }

  /* ---- report: the human table */
  fprintf(stderr, "\n%-34s %14s   %s\n", "figure", "value", "reference");
  char hit_label[64], miss_label[64];
  snprintf(hit_label, sizeof hit_label, "hit lookup, %" PRIu64 " ids", b.hit_rows);
  snprintf(miss_label, sizeof miss_label, "miss lookup, %" PRIu64 " ids, 1 MiB cache", b.hit_rows);
  fprintf(stderr, "%-34s %9.1f GB/s   D2D memcpy %.1f GB/s, ratio %.3f%s\n", hit_label,
          R.hit_gbps, R.d2d_gbps, R.hit_ratio_vs_copy, R.hit_all_hits ? "" : " (NOT all hits)");
  fprintf(stderr, "%-34s %9.1f GB/s   pinned H2D %.1f GB/s, ratio %.3f; hit ratio %.4f\n",
          miss_label, R.miss_gbps, R.h2d_gbps, R.miss_ratio_vs_copy,
          R.miss_hit_ratio);
  if (!skip_criteo) {
    fprintf(stderr, "%-34s %9.1f us     p99 %.1f us; GPU p50 %.1f / p99 %.1f us; hit %.4f\n",
            "latency p50, 2048 x 26 ids", R.lat_p50_us, R.lat_p99_us, R.lat_gpu_p50_us,
            R.lat_gpu_p99_us, R.lat_hit_ratio);
    fprintf(stderr, "%-34s %9.3g ids/s  hit ratio %.4f; index %.1f B/row\n",
            "throughput, 16384 x 26 ids", R.tp_ids_per_s, R.tp_hit_ratio, R.tp_index_bytes_per_row);
    fprintf(stderr, "%-34s %9.3g ids/s  hit ratio %.4f; global x%.2f faster\n",
            "per-table caches, same budget", R.pt_ids_per_s, R.pt_hit_ratio,
            R.tp_ids_per_s / R.pt_ids_per_s);
    fprintf(stderr, "%-34s %9.3g ids/s  one stream %.3g ids/s, x%.2f\n", "4 threads x 1 stream, 2048 x 26 ids",
            R.st4_ids_per_s, R.st1_ids_per_s, R.st4_ids_per_s / R.st1_ids_per_s);
    if (b.prewarm)
      fprintf(stderr, "%-34s %9.4f        cold %.4f, replayed sample %.4f; %" PRIu64 " rows, plan "
              "%.2f s, apply %.2f s\n", "prewarm: hit ratio warm, next batches", R.pw.hit_ratio_warm,
              R.pw.hit_ratio_cold, R.pw.hit_ratio_replay, R.pw.rows, R.pw.plan_s, R.pw.apply_s);
  }
  if (R.graph_nodes >= 0)
    fprintf(stderr, "%-34s %9.0f        %.0f kernels, %.0f memcpys, %.0f memsets\n",
            "graph nodes per lookup", R.graph_nodes, R.graph_kernels, R.graph_memcpys,
            R.graph_memsets);
  else
    fprintf(stderr, "%-34s %9s        capture failed: %s\n", "graph nodes per lookup", "-1",
            R.graph_error);

  CU(cudaEventDestroy(b.e0));
  CU(cudaEventDestroy(b.e1));
  CU(cudaStreamDestroy(b.st));
  return b.wrong ? EXIT_WRONG : 0;
}
