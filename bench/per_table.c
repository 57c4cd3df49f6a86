/* per_table.c: the per-table-cache baseline (see per_table.h). */
#define _POSIX_C_SOURCE 200809L

#include "per_table.h"
#include "slot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int emcb_pt_init(emcb_pt *p, const uint64_t *rows, uint32_t n_tables, uint32_t dim, emc_dtype dtype,
                 uint64_t seed) {
  uint32_t t;
  memset(p, 0, sizeof *p);
  p->n_tables = n_tables;
  p->dim = dim;
  p->dtype = dtype;
  p->seed = seed;
  p->rows = calloc(n_tables, sizeof *p->rows);
  p->stores = calloc(n_tables, sizeof *p->stores);
  if (!p->rows || !p->stores) {
    emcb_pt_free(p);
    return EMC_ENOMEM;
  }
  for (t = 0; t < n_tables; t++) {
    emc_table_desc d = {.name = NULL, .kind = EMC_TABLE_DENSE, .rows = rows[t], .dim = dim,
                        .dtype = dtype}; /* designated: later fields start at 0 */
    emc_status st = emc_store_create(&d, 1, &p->stores[t]);
    if (st == EMC_OK) st = emc_store_fill_uniform(p->stores[t], 0, -1.0f, 1.0f, seed);
    if (st != EMC_OK) {
      emcb_pt_free(p);
      return st;
    }
    p->rows[t] = rows[t];
    p->total_rows += rows[t];
  }
  return 0;
}

void emcb_pt_free(emcb_pt *p) {
  uint32_t t;
  if (p->stores)
    for (t = 0; t < p->n_tables; t++) emc_store_destroy(p->stores[t]);
  free(p->stores);
  free(p->rows);
  memset(p, 0, sizeof *p);
}

int emcb_pt_run(emcb_pt *p, const emc_cache_config *cfg, size_t capacity,
                const uint64_t *(*ids)(void *ctx, size_t i), const uint64_t *offsets,
                size_t row_bytes, size_t warmup, size_t batches, int warm_measured,
                unsigned char *out, void *stream, void (*sync)(void *ctx), int sync_each,
                int (*check)(void *ctx, size_t i, const unsigned char *out), uint8_t *where,
                void (*distinct)(void *ctx, size_t i, const uint8_t *where, uint64_t *hits,
                                 uint64_t *keys),
                void *ctx, emcb_pt_result *r) {
  uint64_t d_hits = 0, d_keys = 0;
  uint32_t T = p->n_tables, t;
  emc_cache **caches = calloc(T, sizeof *caches);
  emc_stats *s0 = calloc(T, sizeof *s0);
  const size_t min_cap = (size_t)ceil((double)emcb_slot_stride(row_bytes) / (double)cfg->evict_low) + 1;
  size_t i;
  int st = 0;
  memset(r, 0, sizeof *r);
  r->min_capacity = SIZE_MAX;
  r->rows_ok = 1;
  if (!caches || !s0) {
    free(caches);
    free(s0);
    return EMC_ENOMEM;
  }
  for (t = 0; t < T && st == 0; t++) {
    emc_cache_config c = *cfg;
    c.capacity_bytes = (size_t)((double)capacity * (double)p->rows[t] / (double)p->total_rows);
    if (c.capacity_bytes < min_cap) c.capacity_bytes = min_cap;
    if (c.capacity_bytes < r->min_capacity) r->min_capacity = c.capacity_bytes;
    st = emc_cache_create(p->stores[t], &c, &caches[t]);
  }
  /* one call per table per batch: the table's segment of the batch, as its own batch */
#define RUN_BATCH(i)                                                                   \
  for (t = 0; t < T && st == 0; t++) {                                                 \
    uint64_t seg[2] = {0, offsets[t + 1] - offsets[t]};                                \
    st = emc_lookup_ex(caches[t], ids(ctx, (i)) + offsets[t], seg,                     \
                       out + offsets[t] * row_bytes, where ? where + offsets[t] : NULL, \
                       stream);                                                        \
  }                                                                                    \
  if (sync && sync_each && st == 0) sync(ctx);
  for (i = 0; i < warmup && st == 0; i++) {
    RUN_BATCH(i)
  }
  for (i = 0; warm_measured && i < batches && st == 0; i++) {
    RUN_BATCH(warmup + i)
  }
  if (sync && st == 0) sync(ctx);
  for (t = 0; t < T && st == 0; t++) st = emc_get_stats(caches[t], &s0[t]);
  if (st == 0) {
    double t0 = now_s();
    for (i = 0; i < batches && st == 0; i++) {
      RUN_BATCH(warmup + i)
      if (st == 0 && ((i == 0 && check) || (where && distinct))) { /* untimed */
        double tc = now_s();
        if (sync) sync(ctx);
        if (i == 0 && check && check(ctx, warmup + i, out) != 0) r->rows_ok = 0;
        if (where && distinct) distinct(ctx, warmup + i, where, &d_hits, &d_keys);
        t0 += now_s() - tc;
      }
    }
    if (sync && st == 0) sync(ctx);
    r->seconds = now_s() - t0;
  }
#undef RUN_BATCH
  for (t = 0; t < T && st == 0; t++) {
    emc_stats s1;
    st = emc_get_stats(caches[t], &s1);
    if (st == 0) {
      r->lookups += s1.lookups - s0[t].lookups;
      r->hits += s1.hits - s0[t].hits;
    }
  }
  for (t = 0; t < T; t++) {
    int d = emc_cache_destroy(caches[t]);
    if (st == 0) st = d;
  }
  r->hit_ratio = r->lookups ? (double)r->hits / (double)r->lookups : NAN;
  r->hit_ratio_distinct = d_keys ? (double)d_hits / (double)d_keys : NAN;
  r->lookups_per_s = r->seconds > 0 ? (double)r->lookups / r->seconds : NAN;
  free(caches);
  free(s0);
  return st;
}
