/*
 * per_table.h: the per-table-cache baseline both benches measure beside the global cache: one
 * single-table embcache cache per table, each over a single-table store of its own, the total
 * budget split between them by table size (rows), which is how per-table GPU caches such as
 * HugeCTR's gpu_cache are deployed. The same batches go through them (one call per table per
 * batch) in the same run as the global cache, so the two hit ratios and throughputs compare.
 * Public API only.
 */
#ifndef EMC_BENCH_PER_TABLE_H
#define EMC_BENCH_PER_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "embcache.h"

typedef struct emcb_pt {
  uint32_t n_tables;
  uint64_t *rows;      /* n_tables */
  uint64_t total_rows;
  uint32_t dim;
  emc_dtype dtype;
  uint64_t seed;
  emc_store **stores;  /* one single-table store per table, rows emc_uniform_row(seed, 0, id) */
} emcb_pt;

typedef struct emcb_pt_result {
  uint64_t lookups, hits;
  double hit_ratio;      /* hits / lookups over the measured batches */
  double hit_ratio_distinct; /* hits per distinct key per batch (NAN without `distinct`) */
  double seconds;        /* wall time of the measured batches (each synced) */
  double lookups_per_s;
  size_t min_capacity;   /* the smallest table budget handed out */
  int rows_ok;           /* the first measured batch's rows are the stores' rows */
} emcb_pt_result;

/* Build the per-table stores (dense tables of the given rows, filled uniformly). 0 or an
 * emc_status (the detail in emc_last_error_detail()). */
int emcb_pt_init(emcb_pt *p, const uint64_t *rows, uint32_t n_tables, uint32_t dim, emc_dtype dtype,
                 uint64_t seed);
void emcb_pt_free(emcb_pt *p);

/* Run warm-up then measured batches of the trace through per-table caches whose budgets add
 * up to `capacity` (split by rows; each at least what one row needs below t2). cfg: the global
 * cache's configuration (backend, thresholds, key bits). ids(i): batch i's ids (host or device
 * memory, as the backend takes them), laid out by `offsets` (host); out: a buffer for one batch
 * (host or device); sync(ctx) waits for the calls enqueued so far (NULL: the calls block): it
 * ends the timed loop, and runs after each batch with sync_each. check(ctx, i, out) returns 0
 * when batch i's rows in out are right (NULL: not checked). where: host memory for one
 * batch's emc_where values (NULL: not asked for); with it, distinct(ctx, i, where, &hits,
 * &keys) adds measured batch i's distinct-key hits and distinct keys. 0 or an emc_status. */
int emcb_pt_run(emcb_pt *p, const emc_cache_config *cfg, size_t capacity,
                const uint64_t *(*ids)(void *ctx, size_t i), const uint64_t *offsets,
                size_t row_bytes, size_t warmup, size_t batches, int warm_measured,
                unsigned char *out, void *stream, void (*sync)(void *ctx), int sync_each,
                int (*check)(void *ctx, size_t i, const unsigned char *out), uint8_t *where,
                void (*distinct)(void *ctx, size_t i, const uint8_t *where, uint64_t *hits,
                                 uint64_t *keys),
                void *ctx, emcb_pt_result *r);

#endif /* EMC_BENCH_PER_TABLE_H */
