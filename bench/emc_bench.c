/*
 * emc-bench: throughput and hit ratio of an embcache cache on synthetic Zipf or uniform
 * traces (Criteo-Kaggle-shaped tables by default), against a plain gather from the store and,
 * optionally, against an exact byte-budget LRU at t2 * capacity and t1 * capacity.
 *
 * Outline, per run:
 *   1. build the store (one table per preset table) and fill it with emc_uniform_row values;
 *   2. per alpha of the sweep: generate the trace once (warm-up + measured batches);
 *   3. per cache size of the sweep: create a cache, run the warm-up batches through
 *      emc_lookup, time the measured batches through emc_lookup_ex (where[] gives hits per
 *      position and per distinct key), check some batches' rows against emc_uniform_row,
 *      time a plain emc_store_read gather of the same batches, optionally simulate exact
 *      LRU, and print one JSON line.
 * With --sweep-batch, 2 and 3 run once per batch size. With --mrc (sizing.c, mrc.c), each trace
 * also gets its exact LRU curve over every cache size (stack distances, one pass) and Belady's
 * OPT at the configured sizes and a few others, as "record":"mrc" JSON lines; --plot DIR
 * turns all lines into PNGs (bench/plot_bench.py). With --prewarm (warmup.c), each configuration
 * also compares an empty cache with one warmed from the hottest rows of the trace's first
 * batches, on the batches that follow them ("prewarm" in the JSON line). --admission picks
 * when the caches admit a lookup's misses; --threads T looks each measured batch up from T
 * threads at once (lookup_threads.c) and times one thread on the same batches beside it.
 * Progress goes to stderr, JSON lines to stdout (and to --out FILE, appended).
 * Exit status: 0 ok; 1 wrong rows or --all-hit not all hits; 2 an emc_* call failed or out
 * of memory; 3 --plot failed; 64 bad command line.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "embcache.h"
#include "jline.h"
#include "lookup_threads.h"
#include "options.h"
#include "procs.h"
#include "per_table.h"
#include "sizing.h"
#include "slot.h"
#include "trace.h"
#include "train.h"
#include "warmup.h"

#define EXIT_WRONG 1
#define EXIT_EMC 2
#define EXIT_PLOT 3
#define EXIT_USAGE 64
#define N_CHECK_BATCHES 3

/* ------------------------------------------------------------------ helpers */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die_emc(const char *what, emc_status st) {
  fprintf(stderr, "emc-bench: %s failed: %s: %s\n", what, emc_status_name(st),
          emc_last_error_detail());
  exit(EXIT_EMC);
}

#define EMC_CHECK(what, expr)                      \
  do {                                             \
    emc_status st_ = (expr);                       \
    if (st_ != EMC_OK) die_emc((what), st_);       \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "emc-bench: out of memory (%zu bytes)\n", n);
    exit(EXIT_EMC);
  }
  return p;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "emc-bench: out of memory (%zu x %zu bytes)\n", n, size);
    exit(EXIT_EMC);
  }
  return p;
}

static const char *admission_name(uint32_t a) {
  return a == EMC_ADMISSION_BACKGROUND ? "background" : a == EMC_ADMISSION_AUTO ? "auto" : "inline";
}

static const char *backend_name(emc_backend b) {
  switch (b) {
    case EMC_BACKEND_AUTO: return "auto";
    case EMC_BACKEND_HOST: return "host";
    case EMC_BACKEND_CUDA: return "cuda";
  }
  return "unknown";
}

/* Why a cache created with `requested` runs on `got`: the user's choice, or what AUTO saw
 * (emc_device_count, the test AUTO makes). */
static void backend_reason(emc_backend requested, emc_backend got, char *why, size_t len) {
  int n = 0;
  emc_status st;
  if (requested != EMC_BACKEND_AUTO) {
    snprintf(why, len, "requested (--backend %s)", backend_name(requested));
    return;
  }
  st = emc_device_count(&n);
  if (st == EMC_OK)
    snprintf(why, len, "auto: %d CUDA device%s answer%s, device 0 used", n, n == 1 ? "" : "s",
             n == 1 ? "s" : "");
  else if (st == EMC_EUNSUPPORTED)
    snprintf(why, len, "auto: this embcache was built without CUDA");
  else { /* the detail without its "emc_device_count: " prefix */
    const char *d = emc_last_error_detail(), *colon = strstr(d, ": ");
    snprintf(why, len, "auto: no CUDA device: %s", colon ? colon + 2 : d);
  }
  if ((got == EMC_BACKEND_CUDA) != (st == EMC_OK)) /* AUTO saw something else at create */
    snprintf(why + strlen(why), len - strlen(why), " (but the cache chose %s)", backend_name(got));
}

/* ------------------------------------------------------------------ the run */
typedef struct bench_ctx {
  const bench_opts *o;
  uint32_t n_tables;
  uint64_t *rows;          /* n_tables */
  uint64_t total_rows;
  uint64_t row_bytes;      /* packed bytes per row (all tables share dim and dtype) */
  uint64_t stride;         /* slot stride of a row */
  uint64_t total_bytes;    /* total_rows * stride */
  emc_store *store;
  size_t batch_ids;        /* ids per batch: n_tables * batch */
  size_t n_batches;        /* warm-up + measured */
  size_t n_trace;          /* batches generated: n_batches, or more for --prewarm */
  uint64_t *trace;         /* n_trace * batch_ids ids */
  uint64_t *offsets;       /* n_tables + 1, the same for every batch */
  size_t out_bytes;        /* emc_batch_bytes of one batch */
  unsigned char *out;      /* out_bytes */
  unsigned char *expect;   /* one row */
  uint8_t *where;          /* batch_ids */
  size_t *first;           /* batch_ids: distinct-key positions */
  emct_dedup dedup;
  FILE *out_file;
  emcb_pt pt;              /* per-table baseline stores (o->per_table) */
  emcb_train train;        /* --train: the stores trained with and without a cache */
  FILE *plot_file;         /* --plot: DIR/emc-bench.jsonl */
  uint64_t *key_base;      /* n_tables: the sizing key of (t, id) is key_base[t] + id */
  emct_mrc mrc;            /* --mrc: the current trace's curve (valid while have_mrc) */
  int have_mrc;
  sizing_point cfg[2 * MAX_SWEEP]; /* --mrc: this trace's configured sizes (t2, t1 rows) */
  size_t n_cfg;
  char backend_why[512];   /* why the cache runs where it does (backend_reason) */
  emcb_lt *lt;             /* --threads > 1: the callers of each measured batch */
} bench_ctx;

/* One JSON line to stdout, --out and --plot's file. */
static void emit_line(const char *line, void *ctx) {
  const bench_ctx *b = ctx;
  fputs(line, stdout);
  fflush(stdout);
  if (b->out_file) {
    fputs(line, b->out_file);
    fflush(b->out_file);
  }
  if (b->plot_file) fputs(line, b->plot_file);
}

static const uint64_t *batch_ids(const bench_ctx *b, size_t i) {
  return b->trace + i * b->batch_ids;
}

/* Compare every row of a looked-up batch with emc_uniform_row; returns mismatches. */
static uint64_t check_rows(bench_ctx *b, const uint64_t *ids, const unsigned char *rows,
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
static uint64_t trace_distinct_rows(const bench_ctx *b) {
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
static double lru_ratio(bench_ctx *b, uint64_t cap, int phased) {
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
static const uint64_t *pt_ids(void *ctx, size_t i) { return batch_ids((const bench_ctx *)ctx, i); }
static int pt_check(void *ctx, size_t i, const unsigned char *rows) {
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

/* ... and batch i's hits per distinct key, as the global cache's are counted. */
/* --prewarm: the warmed cache's first measured batch, checked as the main cache's rows are. */
static int warm_check(void *ctx, size_t i, const void *rows) {
  return check_rows(ctx, batch_ids(ctx, i), rows, "prewarmed cache") != 0;
}

static void pt_distinct(void *ctx, size_t i, const uint8_t *where, uint64_t *hits, uint64_t *keys) {
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
static double warm_up(bench_ctx *b, emc_cache *cache) {
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

/* What one pass over the measured batches saw (measure). */
typedef struct bench_pass {
  double seconds;                    /* wall time of the lookups, summed batch by batch */
  uint64_t where_hits, where_absent; /* positions, by where[] */
  uint64_t dist_hits, dist_total;    /* distinct keys per batch: hits, all */
  uint64_t checked;                  /* rows compared with emc_uniform_row */
  int wrong;                         /* ... and some differed */
  emc_stats s0, s1;                  /* the cache's stats before and after (flushed) */
} bench_pass;

/* The measured batches through cache with emc_lookup_ex, timed batch by batch: from this
 * thread, or with lt from all of lt's threads at once (a batch's wall time: from releasing
 * them to the last one done). Untimed: where[] counted per position and per distinct key, and
 * N_CHECK_BATCHES batches' rows checked; after the batches emc_flush (a background admission
 * completes), then the stats. */
static void measure(bench_ctx *b, emc_cache *cache, emcb_lt *lt, const char *what,
                    bench_pass *r) {
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
      uint64_t bad = check_rows(b, ids, b->out, what);
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

/* One configuration (alpha already in the trace, cache fraction frac). Returns the exit
 * status contribution (0 or EXIT_WRONG). */
static int run_config(bench_ctx *b, double alpha, double frac) {
  const bench_opts *o = b->o;
  int wrong = 0;

  /* ---- capacity */
  uint64_t distinct_rows = 0;
  double cap_d = frac * (double)b->total_bytes;
  if (o->all_hit) {
    /* The budget counts resident rows at the slot stride, and an admission evicts once use
     * would exceed t1 * capacity: every distinct row fits below t1 when capacity >=
     * distinct * stride / t1. 1% and a row per table of slack absorb t1's rounding (the
     * library takes it as a float). */
    distinct_rows = trace_distinct_rows(b);
    cap_d = (double)distinct_rows * (double)b->stride / (double)(float)o->t1 * 1.01 +
            (double)b->n_tables * (double)b->stride;
  }
  if (cap_d > (double)SIZE_MAX / 2) cap_d = (double)SIZE_MAX / 2;
  size_t capacity = (size_t)cap_d;
  /* the library wants room for one row below t2 */
  const size_t min_cap = (size_t)ceil((double)b->stride / (double)(float)o->t2) + 1;
  if (capacity < min_cap) capacity = min_cap;

  /* ---- cache */
  emc_cache_config cfg;
  emc_cache_config_init(&cfg);
  cfg.backend = o->backend;
  cfg.capacity_bytes = capacity;
  cfg.evict_high = (float)o->t1;
  cfg.evict_low = (float)o->t2;
  cfg.key_bits = o->key_bits;
  cfg.admission = o->admission;
  emc_cache *cache = NULL;
  EMC_CHECK("emc_cache_create", emc_cache_create(b->store, &cfg, &cache));
  emc_backend be = emc_cache_backend(cache);
  const emc_admission admission = emc_cache_admission(cache);
  if (o->threads > 1 && be == EMC_BACKEND_CUDA) { /* AUTO chose CUDA after all (see main) */
    fprintf(stderr, "emc-bench: --threads > 1 needs the host backend, and the cache runs on "
            "CUDA; drop --threads or use --backend host\n");
    emc_cache_destroy(cache);
    exit(EXIT_USAGE);
  }
  if (!b->backend_why[0]) {
    backend_reason(o->backend, be, b->backend_why, sizeof b->backend_why);
    fprintf(stderr, "emc-bench: backend %s (%s); host allocator: %s\n", backend_name(be),
            b->backend_why, emc_host_allocator());
  }
  fprintf(stderr, "emc-bench: alpha %g, cache %.4g of the store (%zu bytes), backend %s%s\n",
          alpha, (double)capacity / (double)b->total_bytes, capacity, backend_name(be),
          o->all_hit ? " (all-hit)" : "");

  /* ---- warm-up (untimed), then the measured batches: emc_lookup_ex, timed per batch (with
   * --threads, from all the callers at once) */
  const double tw = warm_up(b, cache);
  bench_pass mp;
  measure(b, cache, b->lt, o->threads > 1 ? "cache lookup (threads)" : "cache lookup", &mp);
  const emc_stats s0 = mp.s0, s1 = mp.s1;
  const uint64_t where_hits = mp.where_hits, where_absent = mp.where_absent;
  const uint64_t dist_hits = mp.dist_hits, dist_total = mp.dist_total;
  uint64_t checked = mp.checked;
  const double t_cache = mp.seconds;
  if (mp.wrong) wrong = 1;

  const uint64_t lookups = s1.lookups - s0.lookups, hits = s1.hits - s0.hits;
  const uint64_t positions = (uint64_t)o->batches * b->batch_ids;
  if (lookups != positions || hits != where_hits || where_absent != 0)
    fprintf(stderr, "emc-bench: warning: stats disagree with where[]: lookups %" PRIu64
            " (positions %" PRIu64 "), hits %" PRIu64 " (where %" PRIu64 "), absent %" PRIu64
            "\n", lookups, positions, hits, where_hits, where_absent);
  if (o->all_hit && (hits != lookups || where_hits != positions)) {
    fprintf(stderr, "emc-bench: --all-hit: %" PRIu64 " of %" PRIu64 " lookups hit (where: %"
            PRIu64 "); admit_skipped %" PRIu64 ", evictions %" PRIu64 "\n", hits, lookups,
            where_hits, s1.admit_skipped, s1.evictions);
    wrong = 1;
  }

  /* ---- plain gather of the same batches from the store */
  double t_gather = 0;
  for (size_t i = 0; i < o->batches; i++) {
    const uint64_t *ids = batch_ids(b, o->warmup + i);
    double t0 = now_s();
    for (uint32_t t = 0; t < b->n_tables; t++) {
      uint64_t lo = b->offsets[t], n = b->offsets[t + 1] - lo;
      emc_status st = emc_store_read(b->store, t, ids + lo, (size_t)n,
                                     b->out + lo * b->row_bytes);
      if (st != EMC_OK) die_emc("emc_store_read", st);
    }
    t_gather += now_s() - t0;
    if (i == 0 && check_rows(b, ids, b->out, "store gather") != 0) wrong = 1;
  }

  /* ---- exact LRU */
  double lru_t2 = NAN, lru_t1 = NAN, plru_t2 = NAN, plru_t1 = NAN;
  const uint64_t c2 = (uint64_t)((double)capacity * o->t2);
  const uint64_t c1 = (uint64_t)((double)capacity * o->t1);
  if (o->lru_check) {
    lru_t2 = lru_ratio(b, c2, 0);
    lru_t1 = lru_ratio(b, c1, 0);
    plru_t2 = lru_ratio(b, c2, 1);
    plru_t1 = lru_ratio(b, c1, 1);
  }

  /* ---- sizing (--mrc): the same two sizes on the stack-distance curve, and OPT there */
  double mrc_t2 = NAN, mrc_t1 = NAN, opt_t2 = NAN, opt_t1 = NAN;
  if (b->have_mrc) {
    mrc_t2 = sizing_lru_ratio(&b->mrc, c2 / b->stride);
    mrc_t1 = sizing_lru_ratio(&b->mrc, c1 / b->stride);
    opt_t2 = sizing_opt_ratio(&b->mrc, c2 / b->stride);
    opt_t1 = sizing_opt_ratio(&b->mrc, c1 / b->stride);
    if (b->n_cfg + 2 <= sizeof b->cfg / sizeof b->cfg[0]) {
      b->cfg[b->n_cfg++] = (sizing_point){c2 / b->stride, "t2"};
      b->cfg[b->n_cfg++] = (sizing_point){c1 / b->stride, "t1"};
    }
  }

  emc_stats gauges = s1;
  EMC_CHECK("emc_cache_destroy", emc_cache_destroy(cache));

  /* ---- --threads T > 1: one thread on the same batches through a fresh cache, created with
   * the same cfg and warmed the same way (one thread, then flushed), so both passes start from
   * the same contents, each right after its own warm-up, and run the same calls; only the
   * callers differ. It runs second (a store serves one cache at a time). */
  double lps1 = NAN, hit1 = NAN;
  if (o->threads > 1) {
    emc_cache *one = NULL;
    EMC_CHECK("emc_cache_create", emc_cache_create(b->store, &cfg, &one));
    warm_up(b, one);
    bench_pass p1;
    measure(b, one, NULL, "cache lookup (1 thread)", &p1);
    EMC_CHECK("emc_cache_destroy", emc_cache_destroy(one));
    const uint64_t l1 = p1.s1.lookups - p1.s0.lookups, h1 = p1.s1.hits - p1.s0.hits;
    if (p1.wrong || (o->all_hit && h1 != l1)) wrong = 1;
    checked += p1.checked;
    lps1 = (double)((uint64_t)o->batches * b->batch_ids) / p1.seconds;
    hit1 = l1 ? (double)h1 / (double)l1 : NAN;
  }

  /* ---- --train: training steps through a cache and without one, same batches (train.c) */
  emcb_train_result tres;
  char tjson[2048];
  if (o->train) {
    const emcb_train_args ta = {.cfg = &cfg, .prefetch_depth = o->prefetch_depth, .lr = 0.01f,
                                .ids = pt_ids, .ctx = b, .offsets = b->offsets,
                                .batch = o->batch, .n_batches = b->n_batches,
                                .warmup = o->warmup, .steps = o->batches};
    int tst = emcb_train_run(&b->train, &ta, &tres);
    if (tst != 0) die_emc("--train", (emc_status)tst);
    if (!tres.stores_equal) wrong = 1;
    if (emcb_train_json(&tres, tjson, sizeof tjson) < 0) die_emc("--train's JSON", EMC_ENOMEM);
  }

  /* ---- the per-table baseline: one cache per table, the same budget split by table size */
  emcb_pt_result pt;
  memset(&pt, 0, sizeof pt);
  if (o->per_table) {
    int pst = emcb_pt_run(&b->pt, &cfg, capacity, pt_ids, b->offsets, b->row_bytes, o->warmup,
                          o->batches, o->all_hit, b->out, NULL, NULL, 0, pt_check, b->where,
                          pt_distinct, b, &pt);
    if (pst != 0) die_emc("the per-table baseline", (emc_status)pst);
    if (!pt.rows_ok) {
      fprintf(stderr, "emc-bench: per-table baseline: wrong rows\n");
      wrong = 1;
    }
  }

  /* ---- --prewarm: an empty cache against one warmed from the trace's hot set (warmup.c) */
  emcb_warm_report wr;
  char wjson[1024];
  if (o->prewarm) {
    const emcb_warm_setup ws = {.store = b->store, .cfg = &cfg, .offsets = b->offsets,
                                .host_ids = pt_ids, .check = warm_check, .ctx = b, .out = b->out,
                                .sample_batches = o->prewarm_sample,
                                .measure_batches = o->prewarm_batches};
    int wst = emcb_warm_run(&ws, &wr);
    if (wst != 0) die_emc("--prewarm", (emc_status)wst);
    if (!wr.rows_ok) wrong = 1;
    if (emcb_warm_json(&wr, wjson, sizeof wjson) < 0) die_emc("--prewarm's JSON", EMC_ENOMEM);
  }

  /* ---- report */
  const double hit_ratio = lookups ? (double)hits / (double)lookups : NAN;
  const double hit_distinct = dist_total ? (double)dist_hits / (double)dist_total : NAN;
  const double lps = (double)positions / t_cache, glps = (double)positions / t_gather;
  /* The cache should sit between exact LRU at t2 and at t1 only when a batch's distinct rows
   * fit in t2 * capacity: otherwise exact LRU thrashes (each batch evicts the previous one
   * before its reuse) while the cache's pass-based eviction keeps part of it. Near that
   * point key-by-key LRU also loses hits the cache keeps (the cache resolves the whole batch
   * before admitting), which the phased simulation models. */
  const int in_range = hit_distinct >= lru_t2 && hit_distinct <= lru_t1;
  const int range_applies = (double)dist_total / (double)o->batches * (double)b->stride <=
                            o->t2 * (double)capacity;
  jline j;
  jl_init(&j);
  jl_str(&j, "bench", "emc-bench");
  jl_str(&j, "version", emc_version_string());
  jl_str(&j, "preset", o->preset);
  jl_num(&j, "scale", strcmp(o->preset, "criteo-kaggle") == 0 ? o->scale : NAN);
  jl_u64(&j, "tables", b->n_tables);
  jl_u64(&j, "total_rows", b->total_rows);
  jl_u64(&j, "dim", o->dim);
  jl_str(&j, "dtype", o->dtype == EMC_DTYPE_F16 ? "f16" : "f32");
  jl_str(&j, "dist", o->dist == EMCT_DIST_ZIPF ? "zipf" : "uniform");
  jl_num(&j, "alpha", o->dist == EMCT_DIST_ZIPF ? alpha : NAN);
  jl_u64(&j, "batch", o->batch);
  jl_u64(&j, "batches", o->batches);
  jl_u64(&j, "warmup", o->warmup);
  jl_num(&j, "cache_frac", (double)capacity / (double)b->total_bytes);
  jl_u64(&j, "capacity_bytes", capacity);
  jl_num(&j, "t1", o->t1);
  jl_num(&j, "t2", o->t2);
  jl_str(&j, "backend", backend_name(be));
  jl_str(&j, "backend_requested", backend_name(o->backend));
  jl_str(&j, "backend_reason", b->backend_why);
  jl_str(&j, "host_allocator", emc_host_allocator());
  jl_u64(&j, "key_bits", o->key_bits);
  jl_u64(&j, "seed", o->seed);
  jl_str(&j, "admission", admission_name(admission)); /* as run (auto resolved) */
  jl_str(&j, "admission_requested", admission_name(o->admission));
  jl_u64(&j, "threads", o->threads);
  jl_bool(&j, "all_hit", o->all_hit);
  if (o->all_hit) jl_u64(&j, "trace_distinct_rows", distinct_rows);
  jl_u64(&j, "lookups", lookups);
  jl_u64(&j, "hits", hits);
  jl_num(&j, "hit_ratio", hit_ratio);
  jl_num(&j, "hit_ratio_distinct", hit_distinct);
  jl_u64(&j, "distinct_lookups", dist_total);
  jl_num(&j, "batch_distinct_mean", (double)dist_total / (double)o->batches);
  if (o->lru_check) {
    jl_num(&j, "lru_hit_ratio_t2", lru_t2);
    jl_num(&j, "lru_hit_ratio_t1", lru_t1);
    jl_bool(&j, "lru_in_range", in_range);
    jl_bool(&j, "lru_range_applies", range_applies);
    jl_num(&j, "lru_phased_hit_ratio_t2", plru_t2);
    jl_num(&j, "lru_phased_hit_ratio_t1", plru_t1);
    jl_bool(&j, "lru_phased_in_range", hit_distinct >= plru_t2 && hit_distinct <= plru_t1);
  }
  if (b->have_mrc) {
    jl_u64(&j, "cache_rows", capacity / b->stride);
    jl_num(&j, "mrc_lru_hit_ratio_t2", mrc_t2);
    jl_num(&j, "mrc_lru_hit_ratio_t1", mrc_t1);
    jl_num(&j, "opt_hit_ratio_t2", opt_t2);
    jl_num(&j, "opt_hit_ratio_t1", opt_t1);
  }
  jl_num(&j, "seconds", t_cache);
  jl_num(&j, "warmup_seconds", tw);
  jl_num(&j, "lookups_per_s", lps);
  if (o->threads > 1) {
    jl_num(&j, "lookups_per_s_1thread", lps1);
    jl_num(&j, "thread_scaling", lps / lps1);
    jl_num(&j, "hit_ratio_1thread", hit1);
  }
  jl_num(&j, "rows_per_s", lps); /* one row out per lookup */
  jl_num(&j, "samples_per_s", (double)o->batches * (double)o->batch / t_cache);
  jl_num(&j, "gb_per_s", lps * (double)b->row_bytes / 1e9);
  jl_u64(&j, "bytes_in_use", gauges.bytes_in_use);
  jl_u64(&j, "bytes_reserved", gauges.bytes_reserved);
  jl_u64(&j, "index_bytes", gauges.index_bytes);
  /* index and per-slot metadata per row the cache holds when full (rows of the stride under
   * t1, the index's design load); and per row resident at the end */
  {
    uint64_t rows_t1 = (uint64_t)((double)capacity * (double)(float)o->t1) / b->stride;
    jl_num(&j, "index_bytes_per_row", rows_t1 ? (double)gauges.index_bytes / (double)rows_t1 : NAN);
    jl_num(&j, "index_bytes_per_cached_row",
           gauges.rows_cached ? (double)gauges.index_bytes / (double)gauges.rows_cached : NAN);
  }
  jl_u64(&j, "rows_cached", gauges.rows_cached);
  jl_u64(&j, "evictions", s1.evictions - s0.evictions);
  jl_u64(&j, "evict_passes", s1.evict_passes - s0.evict_passes);
  jl_u64(&j, "admissions", s1.admissions - s0.admissions);
  jl_u64(&j, "admit_skipped", s1.admit_skipped - s0.admit_skipped);
  jl_u64(&j, "retries", s1.retries - s0.retries);
  jl_num(&j, "gather_seconds", t_gather);
  jl_num(&j, "gather_lookups_per_s", glps);
  jl_num(&j, "ratio_vs_gather", lps / glps);
  if (o->train) {
    jl_key(&j, "train");
    jl_raw(&j, "%s", tjson);
  }
  if (o->per_table) {
    jl_num(&j, "per_table_hit_ratio", pt.hit_ratio);
    jl_num(&j, "per_table_hit_ratio_distinct", pt.hit_ratio_distinct);
    jl_num(&j, "per_table_lookups_per_s", pt.lookups_per_s);
    jl_u64(&j, "per_table_min_capacity", pt.min_capacity);
    jl_num(&j, "global_vs_per_table_speed", lps / pt.lookups_per_s);
  }
  if (o->prewarm) {
    jl_key(&j, "prewarm");
    jl_raw(&j, "%s", wjson);
  }
  jl_u64(&j, "rows_checked", checked);
  jl_bool(&j, "rows_ok", !wrong);
  if (jl_end(&j) != 0) fputs("emc-bench: result line truncated\n", stderr);
  emit_line(j.buf, b);

  fprintf(stderr, "emc-bench:   hit %.4f (distinct %.4f", hit_ratio, hit_distinct);
  if (o->lru_check)
    fprintf(stderr, "; exact LRU %.4f .. %.4f%s; phased %.4f .. %.4f", lru_t2, lru_t1,
            in_range ? "" : range_applies ? ", OUTSIDE" : ", outside; batch > t2*capacity",
            plru_t2, plru_t1);
  fprintf(stderr, "), %.3g lookups/s (%.2f GB/s), gather %.3g lookups/s, x%.2f; admission %s\n",
          lps, lps * (double)b->row_bytes / 1e9, glps, lps / glps, admission_name(admission));
  if (o->threads > 1)
    fprintf(stderr, "emc-bench:   threads: %u -> x%.2f over 1 thread on the same batches\n",
            o->threads, lps / lps1);
  if (be == EMC_BACKEND_HOST) /* what the first figure a user sees means (issue 19) */
    fprintf(stderr, "emc-bench:   host backend: cache and store share host memory, so x%.2f is a "
            "lookup through the cache against gathering the same rows straight from the store "
            "(above 1: caching pays even here)%s; the GPU figure, a cache in device memory in "
            "front of a host store, is emc-bench-gpu's\n", lps / glps,
            admission == EMC_ADMISSION_BACKGROUND
                ? ", with the misses admitted by the cache's thread beside the caller's"
                : ", the misses admitted inside the caller's lookups");
  if (o->train) emcb_train_print(stderr, "emc-bench", &tres);
  if (o->per_table)
    fprintf(stderr, "emc-bench:   per-table caches: hit %.4f, %.3g lookups/s (global x%.2f)\n",
            pt.hit_ratio, pt.lookups_per_s, lps / pt.lookups_per_s);
  if (o->prewarm)
    fprintf(stderr, "emc-bench:   prewarm: %" PRIu64 " rows (%.3g of %.3g MB) from %zu batches "
            "(plan %.3f s, apply %.3f s); next %zu batches hit cold %.4f, warm %.4f, replayed "
            "sample %.4f (%.3f s)\n", wr.rows, (double)wr.bytes / 1e6, (double)wr.budget_bytes / 1e6,
            o->prewarm_sample, wr.plan_s, wr.apply_s, o->prewarm_batches, wr.hit_ratio_cold,
            wr.hit_ratio_warm, wr.hit_ratio_replay, wr.replay_s);
  return wrong ? EXIT_WRONG : 0;
}

int main(int argc, char **argv) {
  bench_opts o;
  int pr = emcb_parse_args(argc, argv, &o);
  if (pr != 0) {
    if (pr < 0) emcb_usage(stderr);
    return pr > 0 ? 0 : EXIT_USAGE;
  }

  if (o.threads > 1 && o.backend == EMC_BACKEND_AUTO) {
    int n_dev = 0; /* AUTO picks CUDA (device 0) exactly when a device answers */
    if (emc_device_count(&n_dev) == EMC_OK) {
      fprintf(stderr, "emc-bench: --threads > 1 needs the host backend, and --backend auto "
              "would pick CUDA here (%d device%s); add --backend host\n", n_dev,
              n_dev == 1 ? "" : "s");
      return EXIT_USAGE;
    }
  }

  if (o.procs > 0) { /* before anything big is allocated: the workers fork from here */
    uint64_t rows[EMC_MAX_TABLES];
    FILE *of = NULL;
    int prc;
    emcb_procs_cfg pc;
    memset(&pc, 0, sizeof pc);
    if (o.backend == EMC_BACKEND_CUDA) {
      fprintf(stderr, "emc-bench: --procs measures host caches (a CUDA cache over a shared "
              "store waits for each lookup; --procs does not run it); drop --backend cuda\n");
      return EXIT_USAGE;
    }
    pc.n_tables = emct_preset_rows(o.preset, o.scale, o.tables, o.rows, rows, EMC_MAX_TABLES);
    if (pc.n_tables == 0) {
      fprintf(stderr, "emc-bench: bad preset arguments\n");
      return EXIT_USAGE;
    }
    if (o.out && !(of = fopen(o.out, "a"))) {
      fprintf(stderr, "emc-bench: cannot open %s: %s\n", o.out, strerror(errno));
      return EXIT_USAGE;
    }
    pc.procs = o.procs;
    pc.rows = rows;
    pc.dim = o.dim;
    pc.dtype = o.dtype;
    pc.alpha = o.alphas[0];
    pc.batch = (size_t)o.batch_sizes[0];
    pc.batches = o.batches;
    pc.warmup = o.warmup;
    pc.cache_frac = o.fracs[0];
    pc.t1 = o.t1;
    pc.t2 = o.t2;
    pc.key_bits = o.key_bits;
    pc.admission = o.admission;
    pc.seed = o.seed;
    prc = emcb_procs_run(&pc, stdout, of);
    if (of) fclose(of);
    return prc;
  }

  bench_ctx b;
  memset(&b, 0, sizeof b);
  b.o = &o;
  b.rows = xmalloc(EMC_MAX_TABLES * sizeof *b.rows);
  b.n_tables = emct_preset_rows(o.preset, o.scale, o.tables, o.rows, b.rows, EMC_MAX_TABLES);
  if (b.n_tables == 0) {
    fprintf(stderr, "emc-bench: bad preset arguments\n");
    return EXIT_USAGE;
  }
  for (uint32_t t = 0; t < b.n_tables; t++) b.total_rows += b.rows[t];
  b.row_bytes = (uint64_t)o.dim * emc_dtype_size(o.dtype);
  b.stride = emcb_slot_stride(b.row_bytes);
  b.total_bytes = b.total_rows * b.stride;
  if (o.out) {
    b.out_file = fopen(o.out, "a");
    if (!b.out_file) {
      fprintf(stderr, "emc-bench: cannot open %s: %s\n", o.out, strerror(errno));
      return EXIT_USAGE;
    }
  }
  char plot_jsonl[4096] = "";
  if (o.plot_dir) { /* every line also goes to DIR/emc-bench.jsonl, which the plot reads */
    snprintf(plot_jsonl, sizeof plot_jsonl, "%s/emc-bench.jsonl", o.plot_dir);
    if ((mkdir(o.plot_dir, 0777) != 0 && errno != EEXIST) ||
        !(b.plot_file = fopen(plot_jsonl, "w"))) {
      fprintf(stderr, "emc-bench: --plot %s: %s\n", o.plot_dir, strerror(errno));
      return EXIT_USAGE;
    }
  }
  b.key_base = xmalloc(b.n_tables * sizeof *b.key_base);
  for (uint32_t t = 0; t < b.n_tables; t++)
    b.key_base[t] = t ? b.key_base[t - 1] + b.rows[t - 1] : 0;

  /* ---- store */
  fprintf(stderr, "emc-bench: building store: %s, %" PRIu32 " tables, %" PRIu64
          " rows, dim %" PRIu32 " %s (%.1f MB)...\n", o.preset, b.n_tables, b.total_rows,
          o.dim, o.dtype == EMC_DTYPE_F16 ? "f16" : "f32", (double)b.total_bytes / 1e6);
  double t0 = now_s();
  emc_table_desc *desc = xcalloc(b.n_tables, sizeof *desc);
  for (uint32_t t = 0; t < b.n_tables; t++) {
    desc[t].name = NULL;
    desc[t].kind = EMC_TABLE_DENSE;
    desc[t].rows = b.rows[t];
    desc[t].dim = o.dim;
    desc[t].dtype = o.dtype;
  }
  EMC_CHECK("emc_store_create", emc_store_create(desc, b.n_tables, &b.store));
  free(desc);
  for (uint32_t t = 0; t < b.n_tables; t++)
    EMC_CHECK("emc_store_fill_uniform",
              emc_store_fill_uniform(b.store, t, -1.0f, 1.0f, o.seed));
  if (o.per_table) {
    int pst = emcb_pt_init(&b.pt, b.rows, b.n_tables, o.dim, o.dtype, o.seed);
    if (pst != 0) die_emc("per-table stores", (emc_status)pst);
  }
  if (o.train) {
    int tst = emcb_train_init(&b.train, b.rows, b.n_tables, o.dim, o.dtype, o.seed);
    if (tst != 0) die_emc("--train's stores", (emc_status)tst);
  }
  fprintf(stderr, "emc-bench: store ready in %.2f s\n", now_s() - t0);

  /* ---- buffers, sized for the largest batch of the sweep */
  size_t max_batch = 0;
  for (size_t i = 0; i < o.n_batch_sizes; i++)
    if ((size_t)o.batch_sizes[i] > max_batch) max_batch = (size_t)o.batch_sizes[i];
  b.batch_ids = (size_t)b.n_tables * max_batch;
  b.n_batches = o.warmup + o.batches;
  b.n_trace = b.n_batches; /* --prewarm reads batches [0, sample + measured) */
  if (o.prewarm && o.prewarm_sample + o.prewarm_batches > b.n_trace)
    b.n_trace = o.prewarm_sample + o.prewarm_batches;
  b.trace = xmalloc(b.n_trace * b.batch_ids * sizeof *b.trace);
  b.offsets = xmalloc((b.n_tables + 1) * sizeof *b.offsets);
  b.out = xmalloc(b.batch_ids * b.row_bytes);
  b.expect = xmalloc(b.row_bytes);
  b.where = xmalloc(b.batch_ids);
  b.first = xmalloc(b.batch_ids * sizeof *b.first);
  emct_dedup_init(&b.dedup);
  if (o.threads > 1) {
    int lst = emcb_lt_create(o.threads, &b.lt);
    if (lst != 0) die_emc("--threads' callers", (emc_status)lst);
  }

  int rc = 0;
  for (size_t bs = 0; bs < o.n_batch_sizes; bs++) {
    o.batch = (size_t)o.batch_sizes[bs];
    b.batch_ids = (size_t)b.n_tables * o.batch;
    for (uint32_t t = 0; t <= b.n_tables; t++) b.offsets[t] = (uint64_t)t * o.batch;
    EMC_CHECK("emc_batch_bytes", emc_batch_bytes(b.store, b.offsets, &b.out_bytes));
    if (b.out_bytes != b.batch_ids * b.row_bytes) {
      fprintf(stderr, "emc-bench: emc_batch_bytes gave %zu, expected %zu\n", b.out_bytes,
              (size_t)(b.batch_ids * b.row_bytes));
      return EXIT_WRONG;
    }
    if (b.lt) { /* every batch of this size has this layout */
      int lst = emcb_lt_plan(b.lt, b.store, b.offsets, b.n_tables);
      if (lst != 0) die_emc("--threads' split of the batch", (emc_status)lst);
    }
    for (size_t a = 0; a < o.n_alphas; a++) {
      /* ---- trace: generated once per alpha, reused for every cache size */
      t0 = now_s();
      emct_gen g;
      if (emct_gen_init(&g, b.rows, b.n_tables, o.dist, o.alphas[a],
                        o.seed ^ 0x7ace7ace7aceull) != 0) {
        fprintf(stderr, "emc-bench: trace generator setup failed\n");
        return EXIT_EMC;
      }
      uint64_t *off = xmalloc((b.n_tables + 1) * sizeof *off);
      for (size_t i = 0; i < b.n_trace; i++) /* batches past n_batches leave these unchanged */
        emct_gen_batch(&g, o.batch, b.trace + i * b.batch_ids, off);
      free(off);
      emct_gen_free(&g);
      fprintf(stderr, "emc-bench: trace of %zu batches x %zu ids (alpha %g) in %.2f s\n",
              b.n_trace, b.batch_ids, o.alphas[a], now_s() - t0);

      /* ---- sizing: the trace's LRU curve before the configurations (they report on it) */
      if (o.mrc) {
        if (sizing_feed(&b.mrc, b.trace, b.n_batches, b.batch_ids, o.warmup, o.all_hit,
                        b.offsets, b.n_tables, b.key_base, b.total_rows) != 0)
          return EXIT_EMC;
        b.have_mrc = 1;
        b.n_cfg = 0;
      }

      for (size_t f = 0; f < o.n_fracs; f++) {
        int r = run_config(&b, o.alphas[a], o.fracs[f]);
        if (r > rc) rc = r;
      }

      if (b.have_mrc) {
        const sizing_trace tr = {
            .version = emc_version_string(), .preset = o.preset,
            .dtype = o.dtype == EMC_DTYPE_F16 ? "f16" : "f32",
            .dist = o.dist == EMCT_DIST_ZIPF ? "zipf" : "uniform",
            .scale = strcmp(o.preset, "criteo-kaggle") == 0 ? o.scale : NAN,
            .alpha = o.dist == EMCT_DIST_ZIPF ? o.alphas[a] : NAN, .tables = b.n_tables,
            .total_rows = b.total_rows, .dim = o.dim, .batch = o.batch, .batches = o.batches,
            .warmup = o.warmup, .seed = o.seed, .stride = b.stride};
        if (sizing_report(&b.mrc, &tr, b.cfg, b.n_cfg, o.mrc_points, o.mrc_opt_points, emit_line,
                          &b) != 0) {
          fprintf(stderr, "emc-bench: mrc: out of memory\n");
          return EXIT_EMC;
        }
        emct_mrc_free(&b.mrc);
        b.have_mrc = 0;
      }
    }
  }

  if (b.plot_file) {
    fclose(b.plot_file);
    b.plot_file = NULL;
    int pst = sizing_plot(o.plot_dir, plot_jsonl);
    if (pst != 0) {
      fprintf(stderr, "emc-bench: --plot failed (status %d)\n", pst);
      if (rc == 0) rc = EXIT_PLOT;
    }
  }

  emcb_lt_destroy(b.lt);
  emct_dedup_free(&b.dedup);
  free(b.first);
  free(b.where);
  free(b.expect);
  free(b.out);
  free(b.offsets);
  free(b.trace);
  free(b.key_base);
  free(b.rows);
  emc_store_destroy(b.store);
  emcb_pt_free(&b.pt);
  if (o.train) emcb_train_free(&b.train);
  if (b.out_file) fclose(b.out_file);
  return rc;
}
