/*
 * gpu_bench.c: emc-bench-gpu's helpers (gpu_bench.h): failure exits, timing, the store, caches,
 * stats and row checks every figure uses.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu_bench.h"

/* ------------------------------------------------------------------ failure helpers */
void die_cuda(const char *what, cudaError_t e) {
  fprintf(stderr, "emc-bench-gpu: %s failed: %s: %s\n", what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  exit(EXIT_FAIL);
}

void die_emc(const char *what, emc_status st) {
  fprintf(stderr, "emc-bench-gpu: %s failed: %s: %s\n", what, emc_status_name(st),
          emc_last_error_detail());
  exit(st == EMC_ENODEV ? EXIT_NODEV : EXIT_FAIL);
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "emc-bench-gpu: out of memory (%zu bytes)\n", n);
    exit(EXIT_FAIL);
  }
  return p;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
double pct(double *v, size_t n, double q) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  size_t k = (size_t)ceil(q * (double)n);
  return v[k ? k - 1 : 0];
}

/* ------------------------------------------------------------------ the run's state */

/* Milliseconds between e0 and e1 once e1 has completed. */
double ev_ms(const bench *b) {
  float ms = 0;
  CU(cudaEventSynchronize(b->e1));
  CU(cudaEventElapsedTime(&ms, b->e0, b->e1));
  return (double)ms;
}

emc_store *make_store(const uint64_t *rows, uint32_t n_tables) {
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
emc_cache *make_cache(emc_store *s, size_t capacity, float t1, float t2) {
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
emc_stats stats_now(const bench *b, const emc_cache *c) {
  emc_stats s;
  CU(cudaStreamSynchronize(b->st));
  EMC(emc_get_stats(c, &s));
  return s;
}

/* Compare N_CHECK random rows of a lookup's device output with emc_uniform_row. ids: host
 * copy of the batch; every table's segment holds `per_table` ids (n_tables segments).
 * Returns the number of wrong rows. */
uint64_t check_rows(const bench *b, const unsigned char *d_out, const uint64_t *ids,
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
