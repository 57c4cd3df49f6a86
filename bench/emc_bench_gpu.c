/*
 * emc-bench-gpu: the CUDA backend of embcache, measured in one run.
 *
 *   1. hit:        all-hit lookups of 1 Mi uniform ids (device ids/out, host offsets) from a
 *                  cache holding every row of a 1 Mi x 64 f32 table, --reps of them back to
 *                  back; GB/s against as many device-to-device cudaMemcpyAsync of the same
 *                  bytes, back to back.
 *   2. miss:       lookups of the same table's 1 Mi distinct ids through a 1 MiB cache (rows
 *                  come from the registered host store), back to back; GB/s against pinned
 *                  H2D copies of the row bytes, back to back.
 *                  Every lookup figure (1, 2, 4, 5) includes the cache's writer stream: the
 *                  timed region ends after emc_flush (or a device synchronize), which waits
 *                  for the writer calls (admission, eviction) the lookups enqueued there.
 *   3. latency:    Criteo-Kaggle tables (26, --scale), Zipf(1.05) ids, cache 5 % of the store:
 *                  single lookups of 2,048 samples x 26 ids, p50 / p99 (wall and GPU).
 *   4. throughput: the same store and cache size, batches of 16,384 samples: ids/s, hit ratio,
 *                  index bytes per row; and in the same run the per-table baseline: one cache
 *                  per table over single-table stores, the same budget split by table size
 *                  (bench/per_table.c), on the same batches: its ids/s and hit ratio.
 *   5. streams:    2,048 x 26 lookups from one host thread on one stream, then the same number
 *                  from four host threads, each on a stream of its own (one cache): ids/s of
 *                  each (wall time to a device synchronize) and the ratio.
 *   6. launches:   one lookup captured into a CUDA graph (relaxed mode) and its nodes counted
 *                  (under capture the writer call that admits the misses is captured too);
 *                  -1 and the reason when capture fails (the bench goes on).
 *   7. --prewarm:  on the Criteo store and cache size, batches of 16,384 samples: an empty
 *                  cache against one warmed with the hot set of the first --prewarm-sample
 *                  batches (bench/warmup.c) and one that replayed them, each measured on the
 *                  --prewarm-batches after the sample ("prewarm" in the JSON line).
 * A human table goes to stderr, one JSON line to stdout (and appended to --out FILE).
 * Exit status: 0 ok; 1 wrong rows or the all-hit run missed; 2 an emc_* or CUDA call failed
 * (or out of memory); 64 bad command line; 74 the result line could not be written (stdout,
 * --out); 77 no CUDA device answers.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpu_bench.h"

/* ------------------------------------------------------------------ main */
static void usage(FILE *f) {
  fprintf(f, "usage: emc-bench-gpu [--scale F] [--skip-criteo] [--reps N] [--prewarm] [--out FILE] [-h]\n"
             "  --scale F      criteo-kaggle rows = max(1, round(card * F)) (default 1.0:\n"
             "                 33.8 M rows, 8.6 GB of host memory)\n"
             "  --skip-criteo  run only the hit, miss and graph figures\n"
             "  --train        instead of the figures above: training steps (prefetch(i+1) ->\n"
             "                 lookup(i) -> backward -> SGD apply(i), device buffers) on the\n"
             "                 Criteo store at --scale: step time (CUDA events), host syncs per\n"
             "                 step, one step captured into a CUDA graph and replayed --reps times\n"
             "  --train-steps N --train-warmup W --train-batch B   (default 50, 10, 16384)\n"
             "  --prefetch-depth D  --train: cfg.prefetch_depth (default 1; 0..14)\n"
             "  --reps N       timed repetitions of the hit/miss lookups and copies (default 20)\n"
             "  --hit-rows N   rows of the hit/miss table and keys per lookup (default 1048576;\n"
             "                 a power of two from 4096; smaller for the CPU model)\n"
             "  --prewarm      figure 7: an empty cache against one warmed with the hot set of\n"
             "                 the first --prewarm-sample N batches (default 64), on the\n"
             "                 --prewarm-batches K after them (default 16); needs the Criteo part\n"
             "  --out FILE     append the JSON line to FILE too\n"
             "  -h, --help     this text\n"
             "Exit: 0 ok, 1 wrong rows, 2 embcache or CUDA error, 64 bad usage, 74 the result\n"
             "line could not be written, 77 no CUDA\n"
             "device (skipped; the reason on stderr, e.g. no NVIDIA driver found).\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {{"scale", required_argument, NULL, 's'},
                                     {"skip-criteo", no_argument, NULL, 'k'},
                                     {"train", no_argument, NULL, 'T'},
                                     {"train-steps", required_argument, NULL, 'N'},
                                     {"train-warmup", required_argument, NULL, 'W'},
                                     {"train-batch", required_argument, NULL, 'Z'},
                                     {"prefetch-depth", required_argument, NULL, 'D'},
                                     {"reps", required_argument, NULL, 'r'},
                                     {"hit-rows", required_argument, NULL, 'H'},
                                     {"out", required_argument, NULL, 'o'},
                                     {"help", no_argument, NULL, 'h'},
                                     {"prewarm", no_argument, NULL, 'p'},
                                     {"prewarm-sample", required_argument, NULL, 'S'},
                                     {"prewarm-batches", required_argument, NULL, 'B'},
                                     {NULL, 0, NULL, 0}};
  double scale = 1.0;
  int skip_criteo = 0, c, train = 0;
  emcb_train_gpu_opts to = {.scale = 1.0, .batch = 16384, .warmup = 10, .steps = 50,
                            .prefetch_depth = 1, .cache_frac = CACHE_FRAC, .graph_reps = 20};
  const char *out_path = NULL;
  bench b = {.reps = 20, .pw_sample = 64, .pw_batches = 16, .hit_rows = HIT_ROWS};
  char *end = NULL;
  int li = 0;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", lo, &li)) != -1) {
    errno = 0;
    if (c == 's') {
      scale = strtod(optarg, &end);
      if (errno || *end || !(scale > 0) || !isfinite(scale)) goto bad;
    } else if (c == 'T') {
      train = 1;
    } else if (c == 'N' || c == 'W' || c == 'Z' || c == 'D') { /* --train's numbers */
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v > (c == 'D' ? 14ul : 1ul << 24) ||
          (v == 0 && c != 'W' && c != 'D'))
        goto bad;
      if (c == 'N') to.steps = v;
      else if (c == 'W') to.warmup = v;
      else if (c == 'Z') to.batch = v;
      else to.prefetch_depth = (uint32_t)v;
    } else if (c == 'r') {
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v == 0 || v > 100000) goto bad;
      b.reps = (unsigned)v;
    } else if (c == 'H') { /* a power of two from 4 Ki to 16 Mi */
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v < 4096 || v > (1ul << 24) || (v & (v - 1))) goto bad;
      b.hit_rows = v;
    } else if (c == 'k') {
      skip_criteo = 1;
    } else if (c == 'p') {
      b.prewarm = 1;
    } else if (c == 'S' || c == 'B') {
      unsigned long v = strtoul(optarg, &end, 10);
      if (errno || *end || optarg[0] == '-' || v > 100000 || (c == 'B' && v == 0)) goto bad;
      *(c == 'S' ? &b.pw_sample : &b.pw_batches) = (size_t)v;
    } else if (c == 'o') {
      out_path = optarg;
    } else if (c == 'h') {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "emc-bench-gpu: unknown option or missing argument: %s\n", argv[optind - 1]);
      usage(stderr);
      return EXIT_USAGE;
    }
    continue;
  bad:
    fprintf(stderr, "emc-bench-gpu: bad value '%s' for --%s\n", optarg, lo[li].name);
    return EXIT_USAGE;
  }
  if (optind < argc) {
    fprintf(stderr, "emc-bench-gpu: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return EXIT_USAGE;
  }
  FILE *out_file = NULL;
  if (out_path && !(out_file = fopen(out_path, "a"))) {
    fprintf(stderr, "emc-bench-gpu: cannot open %s: %s\n", out_path, strerror(errno));
    return EXIT_USAGE;
  }

  int ndev = 0;
  emc_status dst = emc_device_count(&ndev); /* says "no NVIDIA driver found" where none is */
  if (dst != EMC_OK) {
    fprintf(stderr, "emc-bench-gpu: no CUDA device answers (%s: %s); nothing to measure, "
            "skipped (exit 77)\n", emc_status_name(dst), emc_last_error_detail());
    if (out_file) fclose(out_file);
    return EXIT_NODEV;
  }
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  CU(cudaSetDevice(0));
  CU(cudaStreamCreateWithFlags(&b.st, cudaStreamNonBlocking));
  CU(cudaEventCreate(&b.e0));
  CU(cudaEventCreate(&b.e1));
  fprintf(stderr, "emc-bench-gpu: %s, embcache %s, %u reps\n", prop.name, emc_version_string(),
          b.reps);
  if (train) { /* --train: the training figure only (train_gpu.c) */
    to.scale = scale;
    to.graph_reps = b.reps;
    int trc = emcb_train_gpu_main(&to, out_file);
    return jl_results_lost(out_file, out_path, "emc-bench-gpu") && trc == 0 ? EXIT_IO : trc;
  }

  results R;
  memset(&R, 0, sizeof R);
  R.crit_rows = R.crit_capacity = R.lat_p50_us = R.lat_p99_us = R.lat_gpu_p50_us =
      R.lat_gpu_p99_us = R.lat_hit_ratio = R.tp_ids_per_s = R.tp_hit_ratio = R.tp_seconds =
          R.tp_index_bytes_per_row = R.pt_hit_ratio = R.pt_ids_per_s = R.pt_min_capacity =
              R.st1_ids_per_s = R.st4_ids_per_s = NAN;
  R.graph_nodes = R.graph_kernels = R.graph_memcpys = R.graph_memsets = -1;
  run_hit_miss(&b, &R);
  if (!skip_criteo) run_criteo(&b, &R, scale);
  run_graph(&R);

  /* ---- report: one JSON line */
  jline j;
  jl_init(&j);
  jl_str(&j, "bench", "emc-bench-gpu");
  jl_str(&j, "version", emc_version_string());
  jl_str(&j, "device", prop.name);
  jl_str(&j, "dtype", "f32");
  jl_bool(&j, "hit_all_hits", R.hit_all_hits);
  jl_bool(&j, "criteo", !skip_criteo);
  const struct { const char *k; double v; } nums[] = {
      {"dim", DIM}, {"reps", b.reps}, {"hit_keys", (double)b.hit_rows}, {"hit_ms", R.hit_ms},
      {"hit_gb_per_s", R.hit_gbps}, {"d2d_copy_ms", R.d2d_ms},
      {"d2d_copy_gb_per_s", R.d2d_gbps}, {"hit_ratio_vs_d2d", R.hit_ratio_vs_copy},
      {"miss_keys", (double)b.hit_rows}, {"miss_capacity_bytes", MISS_CAPACITY}, {"miss_ms", R.miss_ms},
      {"miss_gb_per_s", R.miss_gbps}, {"h2d_copy_ms", R.h2d_ms},
      {"h2d_copy_gb_per_s", R.h2d_gbps}, {"miss_ratio_vs_h2d", R.miss_ratio_vs_copy},
      {"miss_hit_ratio", R.miss_hit_ratio}, {"criteo_scale", skip_criteo ? NAN : scale},
      {"criteo_rows", R.crit_rows}, {"criteo_capacity_bytes", R.crit_capacity},
      {"alpha", ALPHA}, {"latency_batch_ids", (double)LAT_BATCH * EMCT_CRITEO_KAGGLE_TABLES},
      {"latency_p50_us", R.lat_p50_us}, {"latency_p99_us", R.lat_p99_us},
      {"latency_gpu_p50_us", R.lat_gpu_p50_us}, {"latency_gpu_p99_us", R.lat_gpu_p99_us},
      {"latency_hit_ratio", R.lat_hit_ratio},
      {"throughput_batch_ids", (double)TP_BATCH * EMCT_CRITEO_KAGGLE_TABLES},
      {"throughput_seconds", R.tp_seconds}, {"throughput_ids_per_s", R.tp_ids_per_s},
      {"throughput_hit_ratio", R.tp_hit_ratio}, {"hit_ratio", R.tp_hit_ratio},
      {"lookups_per_s", R.tp_ids_per_s}, {"index_bytes_per_row", R.tp_index_bytes_per_row},
      {"per_table_hit_ratio", R.pt_hit_ratio}, {"per_table_lookups_per_s", R.pt_ids_per_s},
      {"per_table_min_capacity", R.pt_min_capacity},
      {"global_vs_per_table_speed", R.tp_ids_per_s / R.pt_ids_per_s},
      {"streams", ST_STREAMS}, {"one_stream_ids_per_s", R.st1_ids_per_s},
      {"streams_ids_per_s", R.st4_ids_per_s}, {"streams_speedup", R.st4_ids_per_s / R.st1_ids_per_s},
      {"graph_nodes", R.graph_nodes},
      {"graph_kernel_nodes", R.graph_kernels}, {"graph_memcpy_nodes", R.graph_memcpys},
      {"graph_memset_nodes", R.graph_memsets}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) jl_num(&j, nums[i].k, nums[i].v);
  if (b.prewarm && !skip_criteo) {
    char wjson[1024];
    if (emcb_warm_json(&R.pw, wjson, sizeof wjson) < 0) die_emc("--prewarm's JSON", EMC_ENOMEM);
    jl_key(&j, "prewarm");
    jl_raw(&j, "%s", wjson);
  }
  if (R.graph_error[0]) {
    for (char *p = R.graph_error; *p; p++) /* keep the JSON string plain */
      if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    jl_str(&j, "graph_error", R.graph_error);
  }
  jl_bool(&j, "rows_ok", !b.wrong);
  if (jl_end(&j) != 0) fputs("emc-bench-gpu: result line truncated\n", stderr);
  fputs(j.buf, stdout);
  if (out_file) fputs(j.buf, out_file);
  const int write_failed = jl_results_lost(out_file, out_path, "emc-bench-gpu");

  /* ---- report: the human table */
  fprintf(stderr, "\n%-34s %14s   %s\n", "figure", "value", "reference");
  char hit_label[64], miss_label[64];
  snprintf(hit_label, sizeof hit_label, "hit lookup, %" PRIu64 " ids", b.hit_rows);
  snprintf(miss_label, sizeof miss_label, "miss lookup, %" PRIu64 " ids, 1 MiB cache", b.hit_rows);
  fprintf(stderr, "%-34s %9.1f GB/s   D2D memcpy %.1f GB/s, ratio %.3f%s\n", hit_label,
          R.hit_gbps, R.d2d_gbps, R.hit_ratio_vs_copy, R.hit_all_hits ? "" : " (NOT all hits)");
  fprintf(stderr, "%-34s %9.1f GB/s   pinned H2D %.1f GB/s, ratio %.3f; hit ratio %.4f\n",
          miss_label, R.miss_gbps, R.h2d_gbps, R.miss_ratio_vs_copy,
          R.miss_hit_ratio);
  if (!skip_criteo) {
    fprintf(stderr, "%-34s %9.1f us     p99 %.1f us; GPU p50 %.1f / p99 %.1f us; hit %.4f\n",
            "latency p50, 2048 x 26 ids", R.lat_p50_us, R.lat_p99_us, R.lat_gpu_p50_us,
            R.lat_gpu_p99_us, R.lat_hit_ratio);
    fprintf(stderr, "%-34s %9.3g ids/s  hit ratio %.4f; index %.1f B/row\n",
            "throughput, 16384 x 26 ids", R.tp_ids_per_s, R.tp_hit_ratio, R.tp_index_bytes_per_row);
    fprintf(stderr, "%-34s %9.3g ids/s  hit ratio %.4f; global x%.2f faster\n",
            "per-table caches, same budget", R.pt_ids_per_s, R.pt_hit_ratio,
            R.tp_ids_per_s / R.pt_ids_per_s);
    fprintf(stderr, "%-34s %9.3g ids/s  one stream %.3g ids/s, x%.2f\n", "4 threads x 1 stream, 2048 x 26 ids",
            R.st4_ids_per_s, R.st1_ids_per_s, R.st4_ids_per_s / R.st1_ids_per_s);
    if (b.prewarm)
      fprintf(stderr, "%-34s %9.4f        cold %.4f, replayed sample %.4f; %" PRIu64 " rows, plan "
              "%.2f s, apply %.2f s\n", "prewarm: hit ratio warm, next batches", R.pw.hit_ratio_warm,
              R.pw.hit_ratio_cold, R.pw.hit_ratio_replay, R.pw.rows, R.pw.plan_s, R.pw.apply_s);
  }
  if (R.graph_nodes >= 0)
    fprintf(stderr, "%-34s %9.0f        %.0f kernels, %.0f memcpys, %.0f memsets\n",
            "graph nodes per lookup", R.graph_nodes, R.graph_kernels, R.graph_memcpys,
            R.graph_memsets);
  else
    fprintf(stderr, "%-34s %9s        capture failed: %s\n", "graph nodes per lookup", "-1",
            R.graph_error);

  CU(cudaEventDestroy(b.e0));
  CU(cudaEventDestroy(b.e1));
  CU(cudaStreamDestroy(b.st));
  return b.wrong ? EXIT_WRONG : write_failed ? EXIT_IO : 0;
}
