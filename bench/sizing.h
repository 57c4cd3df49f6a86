/*
 * sizing.h: emc-bench's sizing mode (--mrc, --plot), kept out of emc_bench.c.
 *
 *   sizing_feed    the trace into an emct_mrc (mrc.h) in the order the bench's exact-LRU
 *                  check uses: warm-up batches (and with --all-hit the measured ones once),
 *                  then the measured batches, counted; progress on stderr.
 *   sizing_report  one JSON line per cache size: exact LRU at every grid size, OPT at the
 *                  configured sizes and a few grid sizes.
 *   sizing_plot    runs bench/plot_bench.py over the JSON lines to write PNGs.
 *
 * The axis is the bench's "per distinct key per batch" (hit_ratio_distinct,
 * lru_hit_ratio_t2/t1): each batch's distinct (table, id) keys are one access each, table by
 * table in order of first occurrence; a cache of B bytes holds floor(B / stride) rows.
 */
#ifndef EMC_BENCH_SIZING_H
#define EMC_BENCH_SIZING_H

#include <stddef.h>
#include <stdint.h>

#include "mrc.h"

/* What a curve line says about the trace it came from (the config line's fields). */
typedef struct sizing_trace {
  const char *version, *preset, *dtype, *dist;
  double scale, alpha;  /* NAN when they do not apply (written as null) */
  uint32_t tables;
  uint64_t total_rows;  /* rows of all tables: cache_frac = rows / total_rows */
  uint64_t dim, batch, batches, warmup, seed;
  uint64_t stride;      /* slot bytes of a row: cache_bytes = rows * stride */
} sizing_trace;

/* A cache size the run configured (in rows), reported with OPT and a name ("t2", "t1"). */
typedef struct sizing_point {
  uint64_t rows;
  const char *at;
} sizing_point;

/* Feed n_batches batches of batch_ids ids each (trace), grouped by offsets, into m (which
 * sizing_feed initialises; emct_mrc_free it after): batches [0, first_counted) shape the
 * state, the rest count; with replay_measured, batches [first_counted, n_batches) are fed
 * twice, uncounted then counted (--all-hit's warm pass). key_base: n_tables keys of id 0.
 * Returns 0, or -1 when out of memory (said on stderr). */
int sizing_feed(emct_mrc *m, const uint64_t *trace, size_t n_batches, size_t batch_ids,
                size_t first_counted, int replay_measured, const uint64_t *offsets,
                uint32_t n_tables, const uint64_t *key_base, uint64_t n_keys);

/* Curve lines: `points` log-spaced sizes over the three decades below LRU's saturation (the
 * largest stack distance + 1: from there on only first accesses miss), plus the configured
 * sizes cfg[0 .. n_cfg); OPT at every configured size and at `opt_points` of the grid sizes.
 * Each line goes to emit(line, ctx). Returns 0, or -1 when out of memory. */
int sizing_report(emct_mrc *m, const sizing_trace *tr, const sizing_point *cfg, size_t n_cfg,
                  size_t points, size_t opt_points, void (*emit)(const char *line, void *ctx),
                  void *ctx);

/* OPT's hit ratio (per counted access) at `rows`; NAN when out of memory. */
double sizing_opt_ratio(emct_mrc *m, uint64_t rows);
/* Exact LRU's hit ratio at `rows`; NAN when nothing was counted. */
double sizing_lru_ratio(const emct_mrc *m, uint64_t rows);

/* Run `python plot_bench.py --out dir jsonl`: the interpreter is $EMC_BENCH_PYTHON, else the
 * one found at configure time, else python3; the script is $EMC_BENCH_PLOT_SCRIPT, else
 * bench/plot_bench.py of the source tree. Returns the script's exit status (0 ok), or -1
 * when it could not be started (said on stderr). */
int sizing_plot(const char *dir, const char *jsonl);

#endif
