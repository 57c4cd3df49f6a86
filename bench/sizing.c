/*
 * sizing.c: see sizing.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "sizing.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "jline.h"

#ifndef EMC_BENCH_PYTHON
#define EMC_BENCH_PYTHON "python3"
#endif
#ifndef EMC_BENCH_PLOT_SCRIPT
#define EMC_BENCH_PLOT_SCRIPT "bench/plot_bench.py"
#endif

extern char **environ;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int sizing_feed(emct_mrc *m, const uint64_t *trace, size_t n_batches, size_t batch_ids,
                size_t first_counted, int replay_measured, const uint64_t *offsets,
                uint32_t n_tables, const uint64_t *key_base, uint64_t n_keys) {
  const size_t measured = n_batches - first_counted;
  const size_t feeds = n_batches + (replay_measured ? measured : 0);
  const double t0 = now_s();
  double last = t0;
  emct_dedup d;
  size_t *first = malloc((batch_ids ? batch_ids : 1) * sizeof *first);
  int rc = first && measured > 0 ? 0 : -1;
  emct_dedup_init(&d);
  /* distinct keys per batch <= ids per batch: the access log holds every feed */
  if (rc == 0) rc = emct_mrc_init(m, n_keys, (uint64_t)feeds * batch_ids);
  for (size_t f = 0; f < feeds && rc == 0; f++) {
    /* warm-up batches, [the measured batches once, uncounted,] then the measured batches */
    const size_t i = f < first_counted ? f : first_counted + (f - first_counted) % measured;
    if (f == feeds - measured) emct_mrc_count_from_now(m);
    rc = emct_mrc_batch(m, &d, first, trace + i * batch_ids, offsets, n_tables, key_base, NULL);
    const double t = now_s();
    if (t - last > 2.0) {
      fprintf(stderr, "emc-bench: mrc: stack distances %3.0f%% (%zu of %zu batches), %.1f s\n",
              100.0 * (double)(f + 1) / (double)feeds, f + 1, feeds, t - t0);
      last = t;
    }
  }
  emct_dedup_free(&d);
  free(first);
  if (rc != 0) {
    fprintf(stderr, "emc-bench: mrc: out of memory (%zu batches of %zu ids, %llu keys)\n", feeds,
            batch_ids, (unsigned long long)n_keys);
    emct_mrc_free(m);
    return -1;
  }
  emct_mrc_finish(m);
  fprintf(stderr, "emc-bench: mrc: %llu counted accesses, %llu distinct keys, LRU saturates at "
          "%llu rows, in %.2f s\n", (unsigned long long)emct_mrc_counted(m),
          (unsigned long long)m->distinct, (unsigned long long)emct_mrc_saturation(m),
          now_s() - t0);
  return 0;
}

double sizing_lru_ratio(const emct_mrc *m, uint64_t rows) {
  const uint64_t n = emct_mrc_counted(m);
  return n ? (double)emct_mrc_lru_hits(m, rows) / (double)n : NAN;
}

double sizing_opt_ratio(emct_mrc *m, uint64_t rows) {
  const uint64_t n = emct_mrc_counted(m);
  uint64_t h = 0;
  const double t0 = now_s();
  if (n == 0 || emct_mrc_opt_hits(m, rows, &h) != 0) return NAN;
  if (now_s() - t0 > 2.0)
    fprintf(stderr, "emc-bench: mrc: OPT at %llu rows took %.1f s\n", (unsigned long long)rows,
            now_s() - t0);
  return (double)h / (double)n;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

int sizing_report(emct_mrc *m, const sizing_trace *tr, const sizing_point *cfg, size_t n_cfg,
                  size_t points, size_t opt_points, void (*emit)(const char *line, void *ctx),
                  void *ctx) {
  const uint64_t sat = emct_mrc_saturation(m);
  /* three decades below saturation: smaller caches than that hold less than a batch */
  const uint64_t hi = sat > 1 ? sat : 1, lo = hi / 1000 > 1 ? hi / 1000 : 1;
  uint64_t *grid = malloc((points + n_cfg + 2) * sizeof *grid);
  size_t n = 0;
  if (!grid) return -1;
  /* log-spaced grid up to saturation (beyond it the curve is flat) */
  for (size_t i = 0; i < points; i++) {
    double f = points > 1 ? (double)i / (double)(points - 1) : 1.0;
    grid[n++] = (uint64_t)llround(exp(log((double)lo) + f * (log((double)hi) - log((double)lo))));
  }
  grid[n++] = hi;
  qsort(grid, n, sizeof *grid, cmp_u64);
  size_t u = 0;
  for (size_t i = 0; i < n; i++)
    if (u == 0 || grid[i] != grid[u - 1]) grid[u++] = grid[i];
  n = u;
  /* OPT on every (n / opt_points)-th grid size, the last one included */
  const size_t opt_every = opt_points ? (n + opt_points - 1) / opt_points : 0;

  size_t done = 0, total = n + n_cfg;
  for (size_t k = 0; k < total; k++) {
    const int is_cfg = k >= n;
    const uint64_t rows = is_cfg ? cfg[k - n].rows : grid[k];
    const int with_opt = is_cfg || (opt_every && ((n - 1 - k) % opt_every == 0));
    double opt = NAN;
    if (with_opt) {
      opt = sizing_opt_ratio(m, rows);
      if (isnan(opt) && emct_mrc_counted(m) > 0) {
        free(grid);
        return -1;
      }
      if (++done % 4 == 0)
        fprintf(stderr, "emc-bench: mrc: OPT at %zu sizes so far\n", done);
    }
    const double lru = sizing_lru_ratio(m, rows);
    jline j;
    jl_init(&j);
    jl_str(&j, "bench", "emc-bench");
    jl_str(&j, "record", "mrc");
    jl_str(&j, "version", tr->version);
    jl_str(&j, "preset", tr->preset);
    jl_num(&j, "scale", tr->scale);
    jl_u64(&j, "tables", tr->tables);
    jl_u64(&j, "total_rows", tr->total_rows);
    jl_u64(&j, "dim", tr->dim);
    jl_str(&j, "dtype", tr->dtype);
    jl_str(&j, "dist", tr->dist);
    jl_num(&j, "alpha", tr->alpha);
    jl_u64(&j, "batch", tr->batch);
    jl_u64(&j, "batches", tr->batches);
    jl_u64(&j, "warmup", tr->warmup);
    jl_u64(&j, "seed", tr->seed);
    jl_str(&j, "at", is_cfg ? cfg[k - n].at : "grid");
    jl_u64(&j, "cache_rows", rows);
    jl_u64(&j, "cache_bytes", rows * tr->stride);
    jl_num(&j, "cache_frac", (double)rows / (double)tr->total_rows);
    jl_num(&j, "lru_hit_ratio", lru);
    jl_num(&j, "lru_miss_ratio", 1.0 - lru);
    jl_num(&j, "opt_hit_ratio", opt);
    jl_u64(&j, "accesses", emct_mrc_counted(m));
    jl_u64(&j, "cold_misses", m->cold);
    jl_u64(&j, "lru_saturation_rows", sat);
    if (jl_end(&j) != 0) fputs("emc-bench: mrc line truncated\n", stderr);
    emit(j.buf, ctx);
  }
  free(grid);
  return 0;
}

int sizing_plot(const char *dir, const char *jsonl) {
  const char *py = getenv("EMC_BENCH_PYTHON"), *script = getenv("EMC_BENCH_PLOT_SCRIPT");
  if (!py || !*py) py = EMC_BENCH_PYTHON;
  if (!script || !*script) script = EMC_BENCH_PLOT_SCRIPT;
  /* "--out=DIR" and "--" before the file: a DIR that starts with '-' is not an option */
  size_t n = strlen(dir) + sizeof "--out=";
  char *out_arg = malloc(n);
  pid_t pid;
  int st = 0, e;
  if (!out_arg) return -1;
  snprintf(out_arg, n, "--out=%s", dir);
  char *argv[] = {(char *)py, (char *)script, out_arg, "--", (char *)jsonl, NULL};
  fprintf(stderr, "emc-bench: plot: %s %s %s -- %s\n", py, script, out_arg, jsonl);
  fflush(stdout);
  fflush(stderr);
  e = posix_spawnp(&pid, py, NULL, NULL, argv, environ);
  free(out_arg);
  if (e != 0) {
    fprintf(stderr, "emc-bench: plot: cannot run %s: %s\n", py, strerror(e));
    return -1;
  }
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  fprintf(stderr, "emc-bench: plot: %s ended by signal %d\n", script, WTERMSIG(st));
  return -1;
}
