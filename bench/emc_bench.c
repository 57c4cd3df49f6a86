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
 * of memory; 3 --plot failed; 64 bad command line; 74 the JSON lines could not be written
 * (stdout or --out: a full disk, a closed pipe), whatever the run found.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_ctx.h"
#include "jline.h"
#include "procs.h"
#include "slot.h"

/* ------------------------------------------------------------------ helpers */
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
    distinct_rows = emcb_trace_distinct_rows(b);
    cap_d = (double)distinct_rows * (double)b->stride / (double)(float)o->t1 * 1.01 +
            (double)b->n_tables * (double)b->stride;
  }
  size_t capacity = emcb_budget_bytes(cap_d);
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
  const double tw = emcb_warm_up(b, cache);
  emcb_pass mp;
  emcb_measure(b, cache, b->lt, o->threads > 1 ? "cache lookup (threads)" : "cache lookup", &mp);
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
    if (i == 0 && emcb_check_rows(b, ids, b->out, "store gather") != 0) wrong = 1;
  }

  /* ---- exact LRU */
  double lru_t2 = NAN, lru_t1 = NAN, plru_t2 = NAN, plru_t1 = NAN;
  const uint64_t c2 = (uint64_t)((double)capacity * o->t2);
  const uint64_t c1 = (uint64_t)((double)capacity * o->t1);
  if (o->lru_check) {
    lru_t2 = emcb_lru_ratio(b, c2, 0);
    lru_t1 = emcb_lru_ratio(b, c1, 0);
    plru_t2 = emcb_lru_ratio(b, c2, 1);
    plru_t1 = emcb_lru_ratio(b, c1, 1);
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
    emcb_warm_up(b, one);
    emcb_pass p1;
    emcb_measure(b, one, NULL, "cache lookup (1 thread)", &p1);
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
                                .ids = emcb_pt_ids, .ctx = b, .offsets = b->offsets,
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
    int pst = emcb_pt_run(&b->pt, &cfg, capacity, emcb_pt_ids, b->offsets, b->row_bytes, o->warmup,
                          o->batches, o->all_hit, b->out, NULL, NULL, 0, emcb_pt_check, b->where,
                          emcb_pt_distinct, b, &pt);
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
                                .host_ids = emcb_pt_ids, .check = emcb_warm_check, .ctx = b,
                                .out = b->out,
                                .sample_batches = o->prewarm_sample,
                                .measure_batches = o->prewarm_batches};
    int wst = emcb_warm_run(&ws, &wr);
    if (wst != 0) die_emc("--prewarm", (emc_status)wst);
    if (!wr.rows_ok) wrong = 1;
    if (emcb_warm_json(&wr, wjson, sizeof wjson) < 0) die_emc("--prewarm's JSON", EMC_ENOMEM);
  }

  /* ---- report (report.c) */
  const emcb_result res = {
      .alpha = alpha, .capacity = capacity, .be = be, .admission = admission,
      .distinct_rows = distinct_rows, .lookups = lookups, .hits = hits, .positions = positions,
      .dist_hits = dist_hits, .dist_total = dist_total, .checked = checked,
      .lru_t2 = lru_t2, .lru_t1 = lru_t1, .plru_t2 = plru_t2, .plru_t1 = plru_t1,
      .mrc_t2 = mrc_t2, .mrc_t1 = mrc_t1, .opt_t2 = opt_t2, .opt_t1 = opt_t1,
      .t_cache = t_cache, .tw = tw, .t_gather = t_gather, .lps1 = lps1, .hit1 = hit1,
      .s0 = s0, .s1 = s1, .gauges = gauges, .tres = &tres, .tjson = tjson, .pt = &pt,
      .wr = &wr, .wjson = wjson, .wrong = wrong};
  emcb_report(b, &res);
  return wrong ? EXIT_WRONG : 0;
}

/* The tables' shapes fit what a store takes, and the store's bytes fit 64 bits: else a usage
 * error naming the cause (a --scale of 1e300 used to wrap the row total). */
static int shape_ok(const uint64_t *rows, uint32_t n, uint32_t dim, emc_dtype dtype) {
  const uint64_t stride = emcb_slot_stride((uint64_t)dim * emc_dtype_size(dtype));
  uint64_t total = 0;
  for (uint32_t t = 0; t < n; t++) {
    if (rows[t] > EMC_MAX_ROWS) {
      fprintf(stderr, "emc-bench: table %u would have %.6g rows, more than a store takes "
              "(2^40): a smaller --scale or --rows\n", t, (double)rows[t]);
      return 0;
    }
    total += rows[t]; /* no wrap: n <= EMC_MAX_TABLES rows of <= 2^40 each */
  }
  if (stride && total > UINT64_MAX / stride) {
    fprintf(stderr, "emc-bench: %u tables of %llu rows in all at %llu bytes a row do not fit "
            "64-bit sizes\n", n, (unsigned long long)total, (unsigned long long)stride);
    return 0;
  }
  return 1;
}

/* The run's exit status once stdout and the --out file (closed here) are known to hold every
 * line: EXIT_IO when they lost lines and the run had nothing worse to say. */
static int results_written(FILE *out_file, const char *out_name, int rc) {
  return jl_results_lost(out_file, out_name, "emc-bench") && rc == 0 ? EXIT_IO : rc;
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
    if (!shape_ok(rows, pc.n_tables, o.dim, o.dtype)) return EXIT_USAGE;
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
    return results_written(of, o.out, prc);
  }

  bench_ctx b;
  memset(&b, 0, sizeof b);
  b.o = &o;
  b.rows = xmalloc(EMC_MAX_TABLES * sizeof *b.rows);
  b.n_tables = emct_preset_rows(o.preset, o.scale, o.tables, o.rows, b.rows, EMC_MAX_TABLES);
  if (b.n_tables == 0 || !shape_ok(b.rows, b.n_tables, o.dim, o.dtype)) {
    if (b.n_tables == 0) fprintf(stderr, "emc-bench: bad preset arguments\n");
    free(b.rows);
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
        if (sizing_report(&b.mrc, &tr, b.cfg, b.n_cfg, o.mrc_points, o.mrc_opt_points,
                          emcb_emit_line, &b) != 0) {
          fprintf(stderr, "emc-bench: mrc: out of memory\n");
          return EXIT_EMC;
        }
        emct_mrc_free(&b.mrc);
        b.have_mrc = 0;
      }
    }
  }

  if (b.plot_file) {
    int bad = ferror(b.plot_file) | (fclose(b.plot_file) != 0);
    b.plot_file = NULL;
    if (bad) { /* the results were not written; no plot from a cut file */
      fprintf(stderr, "emc-bench: writing %s failed\n", plot_jsonl);
      if (rc == 0) rc = EXIT_IO;
    } else {
      int pst = sizing_plot(o.plot_dir, plot_jsonl);
      if (pst != 0) {
        fprintf(stderr, "emc-bench: --plot failed (status %d)\n", pst);
        if (rc == 0) rc = EXIT_PLOT;
      }
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
  return results_written(b.out_file, o.out, rc);
}
