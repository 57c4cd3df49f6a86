/*
 * bench/report.c: what emc-bench prints for a configuration (bench_ctx.h): its JSON line (to
 * stdout, --out and --plot's file) and its summary lines on stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "bench_ctx.h"
#include "jline.h"

void emcb_emit_line(const char *line, void *ctx) {
  const bench_ctx *b = ctx;
  fputs(line, stdout);
  fflush(stdout);
  if (b->out_file) {
    fputs(line, b->out_file);
    fflush(b->out_file);
  }
  if (b->plot_file) fputs(line, b->plot_file);
}

void emcb_report(bench_ctx *b, const emcb_result *r) {
  const bench_opts *o = b->o;
  const double alpha = r->alpha;
  const size_t capacity = r->capacity;
  const emc_backend be = r->be;
  const emc_admission admission = r->admission;
  const uint64_t distinct_rows = r->distinct_rows, lookups = r->lookups, hits = r->hits;
  const uint64_t positions = r->positions, dist_hits = r->dist_hits, dist_total = r->dist_total;
  const uint64_t checked = r->checked;
  const double lru_t2 = r->lru_t2, lru_t1 = r->lru_t1, plru_t2 = r->plru_t2, plru_t1 = r->plru_t1;
  const double mrc_t2 = r->mrc_t2, mrc_t1 = r->mrc_t1, opt_t2 = r->opt_t2, opt_t1 = r->opt_t1;
  const double t_cache = r->t_cache, tw = r->tw, t_gather = r->t_gather;
  const double lps1 = r->lps1, hit1 = r->hit1;
  const emc_stats s0 = r->s0, s1 = r->s1, gauges = r->gauges;
  const int wrong = r->wrong;
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
    jl_raw(&j, "%s", r->tjson);
  }
  if (o->per_table) {
    jl_num(&j, "per_table_hit_ratio", r->pt->hit_ratio);
    jl_num(&j, "per_table_hit_ratio_distinct", r->pt->hit_ratio_distinct);
    jl_num(&j, "per_table_lookups_per_s", r->pt->lookups_per_s);
    jl_u64(&j, "per_table_min_capacity", r->pt->min_capacity);
    jl_num(&j, "global_vs_per_table_speed", lps / r->pt->lookups_per_s);
  }
  if (o->prewarm) {
    jl_key(&j, "prewarm");
    jl_raw(&j, "%s", r->wjson);
  }
  jl_u64(&j, "rows_checked", checked);
  jl_bool(&j, "rows_ok", !wrong);
  if (jl_end(&j) != 0) fputs("emc-bench: result line truncated\n", stderr);
  emcb_emit_line(j.buf, b);

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
            "(above 1: caching pays even here; the lookup copies a batch's repeated ids, the "
            "gather reads each)%s; the GPU figure, a cache in device memory in "
            "front of a host store, is emc-bench-gpu's\n", lps / glps,
            admission == EMC_ADMISSION_BACKGROUND
                ? ", with the misses admitted by the cache's thread beside the caller's"
                : ", the misses admitted inside the caller's lookups");
  if (o->train) emcb_train_print(stderr, "emc-bench", r->tres);
  if (o->per_table)
    fprintf(stderr, "emc-bench:   per-table caches: hit %.4f, %.3g lookups/s (global x%.2f)\n",
            r->pt->hit_ratio, r->pt->lookups_per_s, lps / r->pt->lookups_per_s);
  if (o->prewarm) {
    const emcb_warm_report *wr = r->wr;
    fprintf(stderr, "emc-bench:   prewarm: %" PRIu64 " rows (%.3g of %.3g MB) from %zu batches "
            "(plan %.3f s, apply %.3f s); next %zu batches hit cold %.4f, warm %.4f, replayed "
            "sample %.4f (%.3f s)\n", wr->rows, (double)wr->bytes / 1e6,
            (double)wr->budget_bytes / 1e6, o->prewarm_sample, wr->plan_s, wr->apply_s,
            o->prewarm_batches, wr->hit_ratio_cold, wr->hit_ratio_warm, wr->hit_ratio_replay,
            wr->replay_s);
  }
}
