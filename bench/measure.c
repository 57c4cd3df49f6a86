/*
 * bench/measure.c: emc-bench's passes over a trace (bench_ctx.h): a cache's warm-up and its
 * timed lookups of the measured batches, the rows checked against emc_uniform_row, the
 * trace's distinct rows, exact LRU at a capacity, and the callbacks through which the
 * per-table baseline, --prewarm and --train read the trace.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "bench_ctx.h"

/* Compare every row of a looked-up batch with emc_uniform_row; returns mismatches. */
uint64_t emcb_check_rows(bench_ctx *b, const uint64_t *ids, const unsigned char *rows,
                         const char *what) {
  uint64_t bad = 0;
  for (uint32_t t = 0; t < b->n_tables; t++) {
    for (uint64_t p = b->offsets[t]; p < b->offsets[t + 1]; p++) {
      EMC_CHECK("emc_uniform_row", emc_uniform_row(b->o->seed, t, ids[p], -1.0f, 1.0f,
                                                   b->o->dim, b->o->dtype, b->expect));
      if (memcmp(rows + p * b->row_bytes, b->expect, b->row_bytes) != 0) {
        if (bad < 5)
          fprintf(stderr, "emc-bench: %s: wrong row at position %" PRIu64 " (table %" PRIu32
                  ", id %" PRIu64 ")\n", what, p, t, ids[p]);
        bad++;
      }
    }
  }
  return bad;
}

/* Distinct rows per table over the whole trace (bitmaps), summed. */
uint64_t emcb_trace_distinct_rows(const bench_ctx *b) {
  uint64_t total = 0;
  for (uint32_t t = 0; t < b->n_tables; t++) {
    uint64_t words = (b->rows[t] + 63) / 64, n = 0;
    uint64_t *bits = xcalloc((size_t)words, sizeof *bits);
    for (size_t i = 0; i < b->n_batches; i++) {
      const uint64_t *ids = batch_ids(b, i);
      for (uint64_t p = b->offsets[t]; p < b->offsets[t + 1]; p++) {
        uint64_t id = ids[p], m = 1ull << (id & 63);
        if (!(bits[id >> 6] & m)) {
          bits[id >> 6] |= m;
          n++;
        }
      }
    }
    free(bits);
    total += n;
  }
  return total;
}

/* Exact LRU at capacity `cap`: warm-up batches (plus, with --all-hit, the measured batches
 * once, mirroring the cache's warm pass) then the measured ones; distinct-key hit ratio of
 * the measured batches. phased: admit a batch's misses after all its lookups, as the cache
 * does (emct_lru_batch_phased), instead of key by key (emct_lru_batch). */
double emcb_lru_ratio(bench_ctx *b, uint64_t cap, int phased) {
  const bench_opts *o = b->o;
  uint64_t *rb = xmalloc(b->n_tables * sizeof *rb);
  for (uint32_t t = 0; t < b->n_tables; t++) rb[t] = b->stride;
  emct_lru l;
  if (emct_lru_init(&l, rb, b->n_tables, cap, b->total_rows) != 0) {
    fprintf(stderr, "emc-bench: LRU simulator: out of memory\n");
    exit(EXIT_EMC);
  }
  free(rb);
  int (*batch_fn)(emct_lru *, emct_dedup *, size_t *, const uint64_t *, const uint64_t *,
                  uint64_t *, uint64_t *) = phased ? emct_lru_batch_phased : emct_lru_batch;
  uint64_t hits = 0, distinct = 0;
  int rc = 0;
  for (size_t i = 0; i < o->warmup && rc == 0; i++)
    rc = batch_fn(&l, &b->dedup, b->first, batch_ids(b, i), b->offsets, NULL, NULL);
  if (o->all_hit)
    for (size_t i = 0; i < o->batches && rc == 0; i++)
      rc = batch_fn(&l, &b->dedup, b->first, batch_ids(b, o->warmup + i), b->offsets, NULL,
                    NULL);
  for (size_t i = 0; i < o->batches && rc == 0; i++)
    rc = batch_fn(&l, &b->dedup, b->first, batch_ids(b, o->warmup + i), b->offsets, &hits,
                  &distinct);
  emct_lru_free(&l);
  if (rc != 0) {
    fprintf(stderr, "emc-bench: LRU simulator: out of memory\n");
    exit(EXIT_EMC);
  }
  return distinct ? (double)hits / (double)distinct : NAN;
}

/* Per-table baseline callbacks: batch i's ids, and its rows checked against the per-table
 * stores' values (a single-table store fills with emc_uniform_row(seed, 0, id)). */
const uint64_t *emcb_pt_ids(void *ctx, size_t i) { return batch_ids((const bench_ctx *)ctx, i); }
int emcb_pt_check(void *ctx, size_t i, const unsigned char *rows) {
  bench_ctx *b = ctx;
  const uint64_t *ids = batch_ids(b, i);
  for (uint32_t t = 0; t < b->n_tables; t++)
    for (uint64_t p = b->offsets[t]; p < b->offsets[t + 1]; p++) {
      EMC_CHECK("emc_uniform_row", emc_uniform_row(b->o->seed, 0, ids[p], -1.0f, 1.0f, b->o->dim,
                                                   b->o->dtype, b->expect));
      if (memcmp(rows + p * b->row_bytes, b->expect, b->row_bytes) != 0) return 1;
    }
  return 0;
}

/* --prewarm: the warmed cache's first measured batch, checked as the main cache's rows are. */
int emcb_warm_check(void *ctx, size_t i, const void *rows) {
  return emcb_check_rows(ctx, batch_ids(ctx, i), rows, "prewarmed cache") != 0;
}

/* The per-table baseline's hits per distinct key of batch i, counted as the global cache's are. */
void emcb_pt_distinct(void *ctx, size_t i, const uint8_t *where, uint64_t *hits, uint64_t *keys) {
  bench_ctx *b = ctx;
  size_t m = 0;
  if (emct_dedup_batch(&b->dedup, batch_ids(b, i), b->offsets, b->n_tables, b->first, &m) != 0) {
    fprintf(stderr, "emc-bench: out of memory (dedup)\n");
    exit(EXIT_EMC);
  }
  for (size_t k = 0; k < m; k++) *hits += where[b->first[k]] == EMC_WHERE_CACHE;
  *keys += m;
}

/* A cache's warm-up (untimed, one thread, so that --threads' two caches start from the same
 * contents): the warm-up batches, and with --all-hit the measured ones once; then emc_flush,
 * so that misses still waiting for a background admission are admitted before the measured
 * part (and its counters) starts. Returns its seconds, the flush included. */
double emcb_warm_up(bench_ctx *b, emc_cache *cache) {
  const bench_opts *o = b->o;
  double tw = now_s();
  for (size_t i = 0; i < o->warmup; i++)
    EMC_CHECK("emc_lookup", emc_lookup(cache, batch_ids(b, i), b->offsets, b->out, NULL));
  if (o->all_hit)
    for (size_t i = 0; i < o->batches; i++)
      EMC_CHECK("emc_lookup", emc_lookup(cache, batch_ids(b, o->warmup + i), b->offsets,
                                         b->out, NULL));
  EMC_CHECK("emc_flush", emc_flush(cache, NULL));
  return now_s() - tw;
}

/* The measured batches through cache with emc_lookup_ex, timed batch by batch: from this
 * thread, or with lt from all of lt's threads at once (a batch's wall time: from releasing
 * them to the last one done). Untimed: where[] counted per position and per distinct key, and
 * N_CHECK_BATCHES batches' rows checked; after the batches emc_flush (a background admission
 * completes), then the stats. */
void emcb_measure(bench_ctx *b, emc_cache *cache, emcb_lt *lt, const char *what,
                  emcb_pass *r) {
  const bench_opts *o = b->o;
  const size_t check_at[N_CHECK_BATCHES] = {0, o->batches / 2, o->batches - 1};
  memset(r, 0, sizeof *r);
  EMC_CHECK("emc_get_stats", emc_get_stats(cache, &r->s0));
  for (size_t i = 0; i < o->batches; i++) {
    const uint64_t *ids = batch_ids(b, o->warmup + i);
    double t0 = now_s();
    emc_status st = lt ? emcb_lt_lookup(lt, cache, ids, b->out, b->where)
                       : emc_lookup_ex(cache, ids, b->offsets, b->out, b->where, NULL);
    r->seconds += now_s() - t0;
    if (st != EMC_OK && lt) {
      fprintf(stderr, "emc-bench: emc_lookup_ex (--threads %u) failed: %s: %s\n", o->threads,
              emc_status_name(st), emcb_lt_detail(lt));
      exit(EXIT_EMC);
    }
    if (st != EMC_OK) die_emc("emc_lookup_ex", st);

    for (size_t p = 0; p < b->batch_ids; p++) {
      r->where_hits += b->where[p] == EMC_WHERE_CACHE;
      r->where_absent += b->where[p] == EMC_WHERE_ABSENT;
    }
    size_t m = 0;
    if (emct_dedup_batch(&b->dedup, ids, b->offsets, b->n_tables, b->first, &m) != 0) {
      fprintf(stderr, "emc-bench: out of memory (dedup)\n");
      exit(EXIT_EMC);
    }
    for (size_t k = 0; k < m; k++) r->dist_hits += b->where[b->first[k]] == EMC_WHERE_CACHE;
    r->dist_total += m;

    for (int c = 0; c < N_CHECK_BATCHES; c++) {
      if (check_at[c] != i || (c > 0 && check_at[c - 1] == i)) continue;
      uint64_t bad = emcb_check_rows(b, ids, b->out, what);
      r->checked += b->batch_ids;
      if (bad) {
        fprintf(stderr, "emc-bench: %s: measured batch %zu: %" PRIu64 " wrong rows\n", what, i,
                bad);
        r->wrong = 1;
      }
    }
  }
  EMC_CHECK("emc_flush", emc_flush(cache, NULL));
  EMC_CHECK("emc_get_stats", emc_get_stats(cache, &r->s1));
}
