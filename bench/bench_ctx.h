/*
 * bench/bench_ctx.h: emc-bench's state for one run (bench_ctx) and what its three files share.
 *   emc_bench.c  the run: the store, the traces, each configuration (run_config), main
 *   measure.c    passes over a trace: warm-up, the timed lookups, row checks, exact LRU, and
 *                the callbacks of the per-table baseline, --prewarm and --train
 *   report.c     a configuration's JSON line and summary lines (emcb_report)
 * Private to emc-bench (bench/CMakeLists.txt); emc-bench-gpu keeps its own. A file that
 * includes it defines _POSIX_C_SOURCE (200809L) first: now_s uses clock_gettime.
 */
#ifndef EMC_BENCH_CTX_H
#define EMC_BENCH_CTX_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "embcache.h"
#include "lookup_threads.h"
#include "options.h"
#include "per_table.h"
#include "sizing.h"
#include "trace.h"
#include "train.h"
#include "warmup.h"

#define EXIT_WRONG 1
#define EXIT_EMC 2
#define EXIT_PLOT 3
#define EXIT_USAGE 64
#define EXIT_IO 74 /* the results could not be written (sysexits' EX_IOERR) */
#define N_CHECK_BATCHES 3

/* ------------------------------------------------------------------ helpers */
static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void die_emc(const char *what, emc_status st) {
  fprintf(stderr, "emc-bench: %s failed: %s: %s\n", what, emc_status_name(st),
          emc_last_error_detail());
  exit(EXIT_EMC);
}

#define EMC_CHECK(what, expr)                      \
  do {                                             \
    emc_status st_ = (expr);                       \
    if (st_ != EMC_OK) die_emc((what), st_);       \
  } while (0)

static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "emc-bench: out of memory (%zu bytes)\n", n);
    exit(EXIT_EMC);
  }
  return p;
}

static inline void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "emc-bench: out of memory (%zu x %zu bytes)\n", n, size);
    exit(EXIT_EMC);
  }
  return p;
}

static inline const char *admission_name(uint32_t a) {
  return a == EMC_ADMISSION_BACKGROUND ? "background" : a == EMC_ADMISSION_AUTO ? "auto" : "inline";
}

static inline const char *backend_name(emc_backend b) {
  switch (b) {
    case EMC_BACKEND_AUTO: return "auto";
    case EMC_BACKEND_HOST: return "host";
    case EMC_BACKEND_CUDA: return "cuda";
  }
  return "unknown";
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

static inline const uint64_t *batch_ids(const bench_ctx *b, size_t i) {
  return b->trace + i * b->batch_ids;
}

/* ------------------------------------------------------------------ measure.c */
/* Compare every row of a looked-up batch with emc_uniform_row; returns mismatches. */
uint64_t emcb_check_rows(bench_ctx *b, const uint64_t *ids, const unsigned char *rows,
                         const char *what);
/* Distinct rows per table over the whole trace (bitmaps), summed. */
uint64_t emcb_trace_distinct_rows(const bench_ctx *b);
/* Exact LRU's distinct-key hit ratio of the measured batches at capacity `cap` (phased: a
 * batch's misses admitted after its lookups, as the cache does). */
double emcb_lru_ratio(bench_ctx *b, uint64_t cap, int phased);
/* Callbacks (ctx is the bench_ctx): batch i's ids; the per-table baseline's rows checked;
 * --prewarm's rows checked; the per-table baseline's hits per distinct key. */
const uint64_t *emcb_pt_ids(void *ctx, size_t i);
int emcb_pt_check(void *ctx, size_t i, const unsigned char *rows);
int emcb_warm_check(void *ctx, size_t i, const void *rows);
void emcb_pt_distinct(void *ctx, size_t i, const uint8_t *where, uint64_t *hits, uint64_t *keys);
/* A cache's untimed warm-up, then emc_flush; returns its seconds. */
double emcb_warm_up(bench_ctx *b, emc_cache *cache);

/* What one pass over the measured batches saw (emcb_measure). */
typedef struct emcb_pass {
  double seconds;                    /* wall time of the lookups, summed batch by batch */
  uint64_t where_hits, where_absent; /* positions, by where[] */
  uint64_t dist_hits, dist_total;    /* distinct keys per batch: hits, all */
  uint64_t checked;                  /* rows compared with emc_uniform_row */
  int wrong;                         /* ... and some differed */
  emc_stats s0, s1;                  /* the cache's stats before and after (flushed) */
} emcb_pass;

/* The measured batches through cache, timed batch by batch (from this thread, or from lt's
 * threads); where[] counted, some batches' rows checked; flushed, then the stats. */
void emcb_measure(bench_ctx *b, emc_cache *cache, emcb_lt *lt, const char *what, emcb_pass *r);

/* ------------------------------------------------------------------ report.c */
/* What one configuration measured (run_config), for its report. */
typedef struct emcb_result {
  double alpha;
  size_t capacity;
  emc_backend be;                 /* the backend and admission the cache ran with */
  emc_admission admission;
  uint64_t distinct_rows;         /* --all-hit: the trace's distinct rows */
  uint64_t lookups, hits, positions, dist_hits, dist_total, checked;
  double lru_t2, lru_t1, plru_t2, plru_t1, mrc_t2, mrc_t1, opt_t2, opt_t1; /* NAN: not run */
  double t_cache, tw, t_gather;   /* measured lookups, warm-up, gather (seconds) */
  double lps1, hit1;              /* --threads > 1: one thread's lookups/s and hit ratio */
  emc_stats s0, s1, gauges;       /* stats around the measured batches; gauges at the end */
  const emcb_train_result *tres;  /* --train, --per-table, --prewarm: their results */
  const char *tjson;
  const emcb_pt_result *pt;
  const emcb_warm_report *wr;
  const char *wjson;
  int wrong;                      /* some rows were wrong */
} emcb_result;

/* One JSON line to stdout, --out and --plot's file (ctx is the bench_ctx). */
void emcb_emit_line(const char *line, void *ctx);
/* A configuration's JSON line (emcb_emit_line) and its summary on stderr. */
void emcb_report(bench_ctx *b, const emcb_result *r);

#endif /* EMC_BENCH_CTX_H */
