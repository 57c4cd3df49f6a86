/*
 * gpu_figures.c: emc-bench-gpu's figures (the list in emc_bench_gpu.c): 1 + 2 hit and miss,
 * 3 + 4 latency and throughput on the Criteo store with the per-table baseline, 5 streams,
 * 6 graph nodes, and --prewarm.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu_bench.h"

/* ------------------------------------------------------------------ 1 + 2: hit and miss */
void run_hit_miss(bench *b, results *R) {
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

void run_criteo(bench *b, results *R, double scale) {
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
void run_graph(results *R) {
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
