/*
 * warmup.h: a hot-set warm-up for embcache caches (issue 10, item 5; the sampler of SEEDS.md
 * document C: "a sampler on the training set estimates access frequencies; a threshold picks
 * hot parameters"). Public API only (embcache.h), plus slot.h for the per-row cost.
 *
 *   count   feed the first batches of a trace (the library's batch format: ids grouped by
 *           table, offsets[n_tables + 1]) into a counter: accesses per (table, id), in an
 *           open-addressing hash map (linear probing, doubled at load 1/2), so counting is
 *           O(1) per id for any number of distinct keys.
 *   plan    the hottest rows whose summed cost fits a byte budget. A row costs its slot in
 *           the cache (emcb_slot_stride of its packed row bytes: what the cache charges it in
 *           bytes_in_use). Rows are taken greedily by count, highest first, ties broken by
 *           first occurrence in the sample; a row that no longer fits is skipped and the
 *           smaller rows after it are still considered (with one row size, that is "the top
 *           budget / stride rows"). Greedy is not the best packing when tables have different
 *           row sizes (that is a knapsack), but it never takes a colder row over a hotter row
 *           that fits, which is what a warm-up wants.
 *   apply   warm a cache with the plan: look its rows up with emc_lookup (a miss is admitted),
 *           coldest chunk first so the hottest rows hold the newest LRU stamps, then
 *           emc_flush, which on the CUDA backend runs on the writer stream after every
 *           admission enqueued before it and waits for it: once apply returns, every
 *           admission of the warm-up has completed (emc_get_stats alone does not wait: it may
 *           see a writer call half done). The default budget, t2 * capacity_bytes, keeps the
 *           warmed rows below the eviction thresholds, so warming evicts nothing and the first
 *           eviction pass (which frees down to t2) has no reason to drop them wholesale.
 *   run     what the benches report: two caches of one configuration over one store, one
 *           after the other (a store serves one cache at a time): a cold one and one warmed
 *           from the first `sample` batches, both then measured on the `measure` batches
 *           that follow the sample (held out: not the batches the plan was counted on); and a
 *           third warmed the plain way, by looking the sample batches up (replay).
 *
 * Functions return 0 or an emc_status (EMC_EINVAL for bad arguments, EMC_ENOMEM, or the
 * status of a failed emc_* call, whose detail is in emc_last_error_detail()). Objects are not
 * thread-safe; apply and run expect no other user of the cache while they work.
 */
#ifndef EMC_BENCH_WARMUP_H
#define EMC_BENCH_WARMUP_H

#include <stddef.h>
#include <stdint.h>

#include "embcache.h"

/* ------------------------------------------------------------------ count */
typedef struct emcb_warm_count {
  uint32_t n_tables;  /* tables of every batch fed */
  uint64_t n_keys;    /* distinct (table, id) seen, entries [0, n_keys) below */
  uint64_t cap_keys;  /* entries allocated */
  uint32_t *table;    /* cap_keys: entry k's table; entries in order of first occurrence */
  uint64_t *id;       /* cap_keys: entry k's id */
  uint64_t *count;    /* cap_keys: entry k's accesses */
  uint32_t *slots;    /* slot_mask + 1: entry + 1, 0 = empty (so at most 2^32 - 2 keys) */
  uint64_t slot_mask; /* slots - 1, a power of two minus one; n_keys <= (slot_mask + 1) / 2 */
  uint64_t accesses;  /* ids fed */
  uint64_t batches;   /* batches fed */
} emcb_warm_count;

/* An empty counter for batches of n_tables tables (n_tables >= 1). */
int emcb_warm_count_init(emcb_warm_count *w, uint32_t n_tables);
/* Free the counter; a zeroed one is fine. */
void emcb_warm_count_free(emcb_warm_count *w);
/* Count one batch: ids (offsets[n_tables],) host memory, offsets (n_tables + 1,) host,
 * offsets[0] == 0 and non-decreasing. On EMC_ENOMEM the ids counted before the failure stay
 * counted. */
int emcb_warm_count_batch(emcb_warm_count *w, const uint64_t *ids, const uint64_t *offsets);
/* The count of (table, id) so far (0 if never seen). */
uint64_t emcb_warm_count_of(const emcb_warm_count *w, uint32_t table, uint64_t id);

/* ------------------------------------------------------------------ plan */
typedef struct emcb_warm_plan {
  uint32_t n_tables;
  uint64_t *row_bytes; /* n_tables: packed bytes of a row of table t (lookup buffers) */
  uint64_t *row_cost;  /* n_tables: emcb_slot_stride(row_bytes[t]), a row's cost */
  uint64_t budget;     /* the byte budget the plan was made for */
  uint64_t n_rows;     /* rows chosen */
  uint64_t bytes;      /* their summed cost, <= budget */
  uint32_t *table;     /* n_rows, hottest first: a chosen row's table */
  uint64_t *id;        /* n_rows: its id */
  uint64_t *count;     /* n_rows: its accesses in the sample (non-increasing) */
  uint64_t sample_keys, sample_accesses, sample_batches; /* what the counter had seen */
} emcb_warm_plan;

/* The hottest rows of w that fit `budget` bytes (see the outline above) for the tables of
 * store s (w->n_tables must equal its table count). *p is overwritten (free an older plan
 * first); on failure it is zeroed. */
int emcb_warm_plan_make(const emcb_warm_count *w, const emc_store *s, uint64_t budget,
                        emcb_warm_plan *p);
void emcb_warm_plan_free(emcb_warm_plan *p);

/* The default budget for a cache of configuration cfg: t2 * capacity_bytes, rounded as the
 * library rounds it (so a plan of that size never brings use above t2). */
uint64_t emcb_warm_default_budget(const emc_cache_config *cfg);

/* ------------------------------------------------------------------ apply */
typedef struct emcb_warm_applied {
  uint64_t looked_up;  /* the plan's rows, each looked up once */
  uint64_t rows;       /* of which now cached: admitted, or resident already (stats' hits) */
  uint64_t bytes;      /* growth of emc_stats.bytes_in_use: on an empty cache, the warmed
                          rows' slots (= the plan's bytes when every row was admitted) */
  uint64_t absent;     /* hashed ids absent from the store (zero rows, never cached) */
  uint64_t skipped;    /* admit_skipped: misses the cache did not admit */
  uint64_t evictions;  /* rows evicted while warming (0 when the plan fits under t2) */
  double seconds;      /* wall time of the lookups and the flush */
} emcb_warm_applied;

/* Warm cache c with plan p: its rows looked up in calls of at most chunk_rows ids (0: 65,536),
 * coldest chunk first, on `stream` (NULL on the host backend), with host buffers; then
 * emc_flush(c, stream). c must be a cache over a store with the plan's tables. r may be NULL. */
int emcb_warm_apply(emc_cache *c, const emcb_warm_plan *p, size_t chunk_rows, void *stream,
                    emcb_warm_applied *r);

/* ------------------------------------------------------------------ run */
typedef struct emcb_warm_setup {
  emc_store *store;             /* the caches' store (one cache attached at a time) */
  const emc_cache_config *cfg;  /* every cache's configuration */
  const uint64_t *offsets;      /* host, n_tables + 1: the layout of every batch */
  const uint64_t *(*host_ids)(void *ctx, size_t i);   /* batch i's ids, host memory */
  const uint64_t *(*lookup_ids)(void *ctx, size_t i); /* batch i's ids as emc_lookup gets them
                                                         (device memory on a GPU); NULL: host_ids */
  int (*check)(void *ctx, size_t i, const void *out); /* NULL, or 0 when batch i's rows in out
                                                         are right (the warm cache's first
                                                         measured batch, after a sync) */
  void (*sync)(void *ctx);      /* NULL, or waits for the lookups enqueued on stream */
  void *ctx;                    /* passed to the callbacks */
  void *out;                    /* one batch's rows (where emc_lookup writes them) */
  void *stream;                 /* the lookups' stream (NULL on the host backend) */
  size_t sample_batches;        /* batches [0, sample) are counted (and replayed) */
  size_t measure_batches;       /* batches [sample, sample + measure) are measured */
  uint64_t budget;              /* the plan's budget; 0: emcb_warm_default_budget(cfg) */
} emcb_warm_setup;

typedef struct emcb_warm_report {
  uint64_t sample_batches, measure_batches;
  uint64_t sample_keys;      /* distinct (table, id) in the sample */
  uint64_t budget_bytes;     /* the plan's budget */
  uint64_t rows, bytes;      /* warmed: emcb_warm_applied's rows and bytes */
  uint64_t plan_rows;        /* rows in the plan (= rows unless some were absent or skipped) */
  uint64_t warm_skipped, warm_evictions; /* admit_skipped and evictions while warming */
  uint64_t measure_lookups;  /* ids looked up in the measured batches (each cache) */
  double hit_ratio_cold;     /* measured hits / lookups: the cold (empty) cache */
  double hit_ratio_warm;     /* ... the cache warmed with the plan */
  double hit_ratio_replay;   /* ... the cache that looked the sample batches up first */
  double plan_s;             /* counting the sample and making the plan */
  double apply_s;            /* emcb_warm_apply */
  double replay_s;           /* looking the sample batches up (the replayed cache's warm-up) */
  int rows_ok;               /* check() passed (1 when there is no check) */
} emcb_warm_report;

/* The three caches, one after the other (see the outline). 0 or an emc_status. */
int emcb_warm_run(const emcb_warm_setup *s, emcb_warm_report *r);

/* The report as one JSON object ({"sample_batches":..,...}, no newline) into buf: counts as
 * integers, ratios and seconds as jline.h writes numbers (%.6g; non-finite as null).
 * Returns its length, or -1 when it did not fit in len bytes (1 KiB is plenty). */
int emcb_warm_json(const emcb_warm_report *r, char *buf, size_t len);

#endif /* EMC_BENCH_WARMUP_H */
