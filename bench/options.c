/*
 * options.c: emc-bench's command line: the usage text and the parser (options.h).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lookup_threads.h"
#include "options.h"


void emcb_usage(FILE *f) {
  fprintf(f,
      "usage: emc-bench [options]\n"
      "  --preset criteo-kaggle|uniform  table shapes (default criteo-kaggle)\n"
      "  --scale F            criteo-kaggle rows = max(1, round(card * F)) (default 0.1)\n"
      "  --tables T --rows R  uniform preset: T tables of R rows (default 8 x 1000000)\n"
      "  --dim D              elements per row (default 64)\n"
      "  --dtype f32|f16      element type (default f32)\n"
      "  --alpha A            Zipf exponent (default 1.05)\n"
      "  --dist zipf|uniform  id distribution (default zipf)\n"
      "  --batch B            samples per batch; one id per table per sample (default 4096)\n"
      "  --batches N          measured batches (default 50)\n"
      "  --warmup W           warm-up batches (default 20)\n"
      "  --cache-frac F       capacity = F * bytes of all rows at the slot stride (default 0.10)\n"
      "  --t1 X --t2 Y        eviction thresholds (default 0.95 / 0.80)\n"
      "  --backend auto|host|cuda       (default auto)\n"
      "  --key-bits 32|64     global key width (default 64)\n"
      "  --seed S             store and trace seed (default 1)\n"
      "  --all-hit            size the cache for every distinct row of the trace and warm it;\n"
      "                       fail (exit 1) unless every measured lookup hits\n"
      "  --sweep-alpha a,b,.. one configuration per alpha (replaces --alpha)\n"
      "  --sweep-cache f,g,.. one configuration per cache fraction (replaces --cache-frac)\n"
      "  --lru-check / --no-lru-check   exact LRU at t2*capacity and t1*capacity (default on)\n"
      "  --per-table / --no-per-table   also run one cache per table, the budget split by\n"
      "                       table size, on the same batches (default: on for criteo-kaggle)\n"
      "  --train              per configuration, also train: --warmup then --batches steps of\n"
      "                       prefetch(i+1) -> lookup(i) -> synthetic backward -> SGD apply(i)\n"
      "                       through a cache on a copy of the store, and the same steps\n"
      "                       without a cache (gather + SGD on another copy); JSON: \"train\"\n"
      "  --prefetch-depth D   --train: pins live through D more prefetches (default 1; 0..14)\n"
      "  --sweep-batch b,c,.. one trace (and configuration set) per batch size (replaces\n"
      "                       --batch)\n"
      "  --mrc                sizing: exact LRU hit ratio over every cache size (stack\n"
      "                       distances) and Belady's OPT at the configured sizes, as JSON lines\n"
      "                       with \"record\":\"mrc\"; config lines gain mrc_* and opt_* fields\n"
      "  --mrc-points N       curve lines per trace (default 60)\n"
      "  --mrc-opt-points N   of which carry OPT (default 8; OPT costs O(N log N) each)\n"
      "  --plot DIR           write PNGs of the run (hit ratio vs cache size, lookups/s vs\n"
      "                       batch size) and DIR/emc-bench.jsonl; needs python3 + matplotlib\n"
      "  --prewarm            per configuration, an empty cache against one warmed with\n"
      "                       the hottest rows (up to t2*capacity) of the trace's first\n"
      "                       --prewarm-sample batches, on the --prewarm-batches after them\n"
      "                       (JSON: \"prewarm\"; independent of --warmup)\n"
      "  --prewarm-sample N --prewarm-batches K   (default 64 and 16)\n"
      "  --admission inline|background|auto   when every cache of the run (main, per-table,\n"
      "                       --train, --prewarm) admits a lookup's misses: inside the lookup,\n"
      "                       on a thread of the cache after it returns, or auto (the library's\n"
      "                       default: background where 2 or more CPUs are usable; the JSON\n"
      "                       says which ran). The main\n"
      "                       cache is emc_flush'ed (untimed) after the warm-up and after the\n"
      "                       measured batches, so admissions/admit_skipped are complete\n"
      "  --threads T          T caller threads (1..64, default 1; host backend only) look up\n"
      "                       each measured batch of the main cache at once, each a contiguous\n"
      "                       part of it (its own offsets, ids, out and where); lookups_per_s is\n"
      "                       wall time over the batches. T > 1 also times one thread on the\n"
      "                       same batches, after the T-thread pass, through a fresh cache built\n"
      "                       and warmed the same way (JSON: lookups_per_s_1thread,\n"
      "                       thread_scaling, hit_ratio_1thread). Warm-up, the gather baseline\n"
      "                       (ratio_vs_gather) and the per-table caches run on one thread\n"
      "  --procs P            instead of the configurations: P processes (1..64), each with\n"
      "                       its own host cache of --cache-frac, look up their own Zipf\n"
      "                       batches (--alpha, --batch, --warmup, --batches) over one shared\n"
      "                       store, then over a private store each, in the same run; JSON\n"
      "                       \"record\":\"procs\" per mode: machine_lookups_per_s, each\n"
      "                       process's rss_anon_kb / rss_shmem_kb, machine_resident_kb\n"
      "  --out FILE           append the JSON lines to FILE too\n"
      "  -h, --help\n"
      "One JSON line per configuration on stdout; counters (admissions, evictions, ...) are\n"
      "deltas over the measured batches, gauges (bytes_in_use, ...) are read after them.\n"
      "Hit ratios per distinct key per batch (hit_ratio_distinct, lru_*, opt_*, mrc lines)\n"
      "count each batch's distinct (table, id) keys once; hit_ratio counts every lookup.\n"
      "Integers are decimal. An option that needs another (--mrc-points: --mrc) or that the\n"
      "run would ignore (--tables without --preset uniform, --alpha with --dist uniform, most\n"
      "options with --procs) is refused as bad usage.\n"
      "Exit: 0 ok, 1 wrong rows or --all-hit failed, 2 embcache error or out of memory,\n"
      "3 --plot failed, 64 bad usage, 74 the results could not be written (stdout, --out).\n");
}

/* A decimal real: it starts with a digit or '.' (no blank, sign, "inf" or "nan"), and has no
 * hexadecimal form ("0x1p-2"), which strtod alone would take. */
static int parse_double(const char *s, double *out) {
  char *end = NULL;
  if (!((*s >= '0' && *s <= '9') || *s == '.') || strpbrk(s, "xX")) return -1;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* A decimal integer: digits only (strtoull alone would take leading blanks, a sign, and
 * octal "010" or hex "0x10"). */
static int parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  if (!(*s >= '0' && *s <= '9')) return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *out = (uint64_t)v;
  return 0;
}

/* "a,b,c" into out[0 .. *n); -1 on a bad number or more than MAX_SWEEP values. */
static int parse_list(const char *s, double *out, size_t *n) {
  char buf[1024];
  if (strlen(s) >= sizeof buf) return -1;
  memcpy(buf, s, strlen(s) + 1);
  size_t k = 0;
  for (char *p = buf;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    if (k == MAX_SWEEP || parse_double(p, &out[k]) != 0) return -1;
    k++;
    if (!comma) break;
    p = comma + 1;
  }
  *n = k;
  return 0;
}

enum {
  OPT_FIRST = 256, OPT_PRESET = OPT_FIRST, OPT_SCALE, OPT_TABLES, OPT_ROWS, OPT_DIM, OPT_DTYPE, OPT_ALPHA, OPT_DIST,
  OPT_BATCH, OPT_BATCHES, OPT_WARMUP, OPT_CACHE_FRAC, OPT_T1, OPT_T2, OPT_BACKEND, OPT_KEY_BITS,
  OPT_SEED, OPT_ALL_HIT, OPT_SWEEP_ALPHA, OPT_SWEEP_CACHE, OPT_LRU, OPT_NO_LRU, OPT_OUT, OPT_HELP,
  OPT_PER_TABLE, OPT_NO_PER_TABLE,
  OPT_SWEEP_BATCH, OPT_MRC, OPT_MRC_POINTS, OPT_MRC_OPT_POINTS, OPT_PLOT,
  OPT_PREWARM, OPT_PREWARM_SAMPLE, OPT_PREWARM_BATCHES, OPT_ADMISSION, OPT_THREADS, OPT_PROCS,
  OPT_TRAIN, OPT_PREFETCH_DEPTH, OPT_END
};
#define OPT_N (OPT_END - OPT_FIRST)

/* Options that only mean something with another one, and options --procs does not run:
 * refused (usage) rather than silently ignored. */
typedef struct opt_rule {
  int opt, needs;   /* needs: 0 for "not with --procs" */
  const char *why;
} opt_rule;

/* Returns 0, 1 for --help (exit 0), or -1 after printing what is wrong. */
int emcb_parse_args(int argc, char **argv, bench_opts *o) {
  static const struct option longopts[] = {
      {"preset", required_argument, NULL, OPT_PRESET},
      {"scale", required_argument, NULL, OPT_SCALE},
      {"tables", required_argument, NULL, OPT_TABLES},
      {"rows", required_argument, NULL, OPT_ROWS},
      {"dim", required_argument, NULL, OPT_DIM},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"alpha", required_argument, NULL, OPT_ALPHA},
      {"dist", required_argument, NULL, OPT_DIST},
      {"batch", required_argument, NULL, OPT_BATCH},
      {"batches", required_argument, NULL, OPT_BATCHES},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"cache-frac", required_argument, NULL, OPT_CACHE_FRAC},
      {"t1", required_argument, NULL, OPT_T1},
      {"t2", required_argument, NULL, OPT_T2},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"key-bits", required_argument, NULL, OPT_KEY_BITS},
      {"seed", required_argument, NULL, OPT_SEED},
      {"all-hit", no_argument, NULL, OPT_ALL_HIT},
      {"sweep-alpha", required_argument, NULL, OPT_SWEEP_ALPHA},
      {"sweep-cache", required_argument, NULL, OPT_SWEEP_CACHE},
      {"lru-check", no_argument, NULL, OPT_LRU},
      {"no-lru-check", no_argument, NULL, OPT_NO_LRU},
      {"out", required_argument, NULL, OPT_OUT},
      {"help", no_argument, NULL, OPT_HELP},
      {"train", no_argument, NULL, OPT_TRAIN},
      {"prefetch-depth", required_argument, NULL, OPT_PREFETCH_DEPTH},
      {"per-table", no_argument, NULL, OPT_PER_TABLE},
      {"no-per-table", no_argument, NULL, OPT_NO_PER_TABLE},
      {"sweep-batch", required_argument, NULL, OPT_SWEEP_BATCH},
      {"mrc", no_argument, NULL, OPT_MRC},
      {"mrc-points", required_argument, NULL, OPT_MRC_POINTS},
      {"mrc-opt-points", required_argument, NULL, OPT_MRC_OPT_POINTS},
      {"plot", required_argument, NULL, OPT_PLOT},
      {"prewarm", no_argument, NULL, OPT_PREWARM},
      {"prewarm-sample", required_argument, NULL, OPT_PREWARM_SAMPLE},
      {"prewarm-batches", required_argument, NULL, OPT_PREWARM_BATCHES},
      {"admission", required_argument, NULL, OPT_ADMISSION},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"procs", required_argument, NULL, OPT_PROCS},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->preset = "criteo-kaggle";
  o->scale = 0.1;
  o->tables = 8;
  o->rows = 1000000;
  o->dim = 64;
  o->dtype = EMC_DTYPE_F32;
  o->dist = EMCT_DIST_ZIPF;
  o->alphas[0] = 1.05;
  o->n_alphas = 1;
  o->fracs[0] = 0.10;
  o->n_fracs = 1;
  o->batch = 4096;
  o->batches = 50;
  o->warmup = 20;
  o->t1 = 0.95;
  o->t2 = 0.80;
  o->backend = EMC_BACKEND_AUTO;
  o->key_bits = 64;
  o->seed = 1;
  o->lru_check = 1;
  o->per_table = -1;
  o->prefetch_depth = 1;
  o->mrc_points = 60;
  o->mrc_opt_points = 8;
  o->prewarm_sample = 64;
  o->prewarm_batches = 16;
  o->admission = EMC_ADMISSION_AUTO; /* the library's default */
  o->threads = 1;

  int c;
  uint64_t u = 0;
  double d = 0;
  unsigned char given[OPT_N] = {0}; /* given[OPT_x - OPT_FIRST]: the option was on the line */
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    const char *a = optarg;
    if (c >= OPT_FIRST && c < OPT_FIRST + OPT_N) given[c - OPT_FIRST] = 1;
    switch (c) {
      case OPT_PRESET:
        if (strcmp(a, "criteo-kaggle") != 0 && strcmp(a, "uniform") != 0) goto bad;
        o->preset = a;
        break;
      case OPT_SCALE:
        if (parse_double(a, &d) != 0 || !(d > 0)) goto bad;
        o->scale = d;
        break;
      case OPT_TABLES:
        if (parse_u64(a, &u) != 0 || u == 0 || u > EMC_MAX_TABLES) goto bad;
        o->tables = (uint32_t)u;
        break;
      case OPT_ROWS:
        if (parse_u64(a, &u) != 0 || u == 0 || u > EMC_MAX_ROWS) goto bad;
        o->rows = u;
        break;
      case OPT_DIM:
        if (parse_u64(a, &u) != 0 || u == 0 || u > EMC_MAX_DIM) goto bad;
        o->dim = (uint32_t)u;
        break;
      case OPT_DTYPE:
        if (strcmp(a, "f32") == 0) o->dtype = EMC_DTYPE_F32;
        else if (strcmp(a, "f16") == 0) o->dtype = EMC_DTYPE_F16;
        else goto bad;
        break;
      case OPT_ALPHA: /* a --sweep-alpha list wins, whatever the order (as --sweep-batch) */
        if (parse_double(a, &d) != 0 || !(d > 0)) goto bad;
        if (!given[OPT_SWEEP_ALPHA - OPT_FIRST]) {
          o->alphas[0] = d;
          o->n_alphas = 1;
        }
        break;
      case OPT_DIST:
        if (strcmp(a, "zipf") == 0) o->dist = EMCT_DIST_ZIPF;
        else if (strcmp(a, "uniform") == 0) o->dist = EMCT_DIST_UNIFORM;
        else goto bad;
        break;
      case OPT_BATCH:
        if (parse_u64(a, &u) != 0 || u == 0 || u > (1u << 24)) goto bad;
        o->batch = (size_t)u;
        break;
      case OPT_BATCHES:
        if (parse_u64(a, &u) != 0 || u == 0 || u > 1000000) goto bad;
        o->batches = (size_t)u;
        break;
      case OPT_WARMUP:
        if (parse_u64(a, &u) != 0 || u > 1000000) goto bad;
        o->warmup = (size_t)u;
        break;
      case OPT_CACHE_FRAC: /* a --sweep-cache list wins, whatever the order */
        if (parse_double(a, &d) != 0 || !(d > 0)) goto bad;
        if (!given[OPT_SWEEP_CACHE - OPT_FIRST]) {
          o->fracs[0] = d;
          o->n_fracs = 1;
        }
        break;
      case OPT_T1:
        if (parse_double(a, &o->t1) != 0) goto bad;
        break;
      case OPT_T2:
        if (parse_double(a, &o->t2) != 0) goto bad;
        break;
      case OPT_BACKEND:
        if (strcmp(a, "auto") == 0) o->backend = EMC_BACKEND_AUTO;
        else if (strcmp(a, "host") == 0) o->backend = EMC_BACKEND_HOST;
        else if (strcmp(a, "cuda") == 0) o->backend = EMC_BACKEND_CUDA;
        else goto bad;
        break;
      case OPT_KEY_BITS:
        if (parse_u64(a, &u) != 0 || (u != 32 && u != 64)) goto bad;
        o->key_bits = (uint32_t)u;
        break;
      case OPT_SEED:
        if (parse_u64(a, &u) != 0) goto bad;
        o->seed = u;
        break;
      case OPT_ALL_HIT: o->all_hit = 1; break;
      case OPT_SWEEP_ALPHA:
        if (parse_list(a, o->alphas, &o->n_alphas) != 0) goto bad;
        for (size_t i = 0; i < o->n_alphas; i++)
          if (!(o->alphas[i] > 0)) goto bad;
        break;
      case OPT_SWEEP_CACHE:
        if (parse_list(a, o->fracs, &o->n_fracs) != 0) goto bad;
        for (size_t i = 0; i < o->n_fracs; i++)
          if (!(o->fracs[i] > 0)) goto bad;
        break;
      case OPT_LRU: o->lru_check = 1; break;
      case OPT_NO_LRU: o->lru_check = 0; break;
      case OPT_OUT: o->out = a; break;
      case OPT_TRAIN: o->train = 1; break;
      case OPT_PREFETCH_DEPTH:
        if (parse_u64(a, &u) != 0 || u > 14) goto bad;
        o->prefetch_depth = (uint32_t)u;
        break;
      case OPT_SWEEP_BATCH: /* integers, written as --batch takes them ("1e3" is not one) */
        if (parse_list(a, o->batch_sizes, &o->n_batch_sizes) != 0 || strpbrk(a, ".eE")) goto bad;
        for (size_t i = 0; i < o->n_batch_sizes; i++)
          if (!(o->batch_sizes[i] >= 1 && o->batch_sizes[i] <= (1u << 24)) ||
              o->batch_sizes[i] != floor(o->batch_sizes[i]))
            goto bad;
        break;
      case OPT_MRC: o->mrc = 1; break;
      case OPT_MRC_POINTS:
        if (parse_u64(a, &u) != 0 || u < 2 || u > 100000) goto bad;
        o->mrc_points = (size_t)u;
        break;
      case OPT_MRC_OPT_POINTS:
        if (parse_u64(a, &u) != 0 || u > 1000) goto bad;
        o->mrc_opt_points = (size_t)u;
        break;
      case OPT_PLOT: o->plot_dir = a; break;
      case OPT_PREWARM: o->prewarm = 1; break;
      case OPT_PREWARM_SAMPLE:
        if (parse_u64(a, &u) != 0 || u > 1000000) goto bad;
        o->prewarm_sample = (size_t)u;
        break;
      case OPT_PREWARM_BATCHES:
        if (parse_u64(a, &u) != 0 || u == 0 || u > 1000000) goto bad;
        o->prewarm_batches = (size_t)u;
        break;
      case OPT_ADMISSION:
        if (strcmp(a, "inline") == 0) o->admission = EMC_ADMISSION_INLINE;
        else if (strcmp(a, "background") == 0) o->admission = EMC_ADMISSION_BACKGROUND;
        else if (strcmp(a, "auto") == 0) o->admission = EMC_ADMISSION_AUTO;
        else goto bad;
        break;
      case OPT_THREADS:
        if (parse_u64(a, &u) != 0 || u == 0 || u > EMCB_LT_MAX_THREADS) goto bad;
        o->threads = (unsigned)u;
        break;
      case OPT_PROCS:
        if (parse_u64(a, &u) != 0 || u == 0 || u > 64) goto bad;
        o->procs = (unsigned)u;
        break;
      case 'h':
      case OPT_HELP: emcb_usage(stdout); return 1;
      case OPT_PER_TABLE: o->per_table = 1; break;
      case OPT_NO_PER_TABLE: o->per_table = 0; break;
      default:
        /* optopt: the short option getopt stopped at (argv[optind - 1] is then the word it
         * lies in, or the word before: "-xh"); 0 for a long option, which argv names */
        if (optopt > 0 && optopt < 256 && optopt != 'h')
          fprintf(stderr, "emc-bench: unknown option -%c\n", optopt);
        else
          fprintf(stderr, "emc-bench: unknown option or missing argument: %s\n",
                  argv[optind - 1]);
        return -1;
    }
    continue;
  bad:
    for (size_t k = 0; longopts[k].name; k++)
      if (longopts[k].val == c) fprintf(stderr, "emc-bench: bad value '%s' for --%s\n", a,
                                        longopts[k].name);
    return -1;
  }
  if (optind < argc) {
    fprintf(stderr, "emc-bench: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  /* checked as the library gets them, as floats: 0.8 and 0.79999999999 are one float */
  if (!(0 < (float)o->t2 && (float)o->t2 < (float)o->t1 && (float)o->t1 <= 1)) {
    fprintf(stderr, "emc-bench: need 0 < t2 < t1 <= 1 as 32-bit floats (got t1 %.9g, t2 %.9g: "
            "as floats %.9g, %.9g)\n", o->t1, o->t2, (double)(float)o->t1, (double)(float)o->t2);
    return -1;
  }
  {
    static const opt_rule rules[] = {
        {OPT_TABLES, -1, "--tables sets the uniform preset's tables: add --preset uniform"},
        {OPT_ROWS, -1, "--rows sets the uniform preset's rows: add --preset uniform"},
        {OPT_SCALE, -2, "--scale scales the criteo-kaggle preset, not --preset uniform"},
        {OPT_ALPHA, -3, "--alpha is the Zipf exponent: drop it with --dist uniform"},
        {OPT_SWEEP_ALPHA, -3, "--sweep-alpha sweeps the Zipf exponent: drop it with --dist "
                              "uniform"},
        {OPT_CACHE_FRAC, -4, "--all-hit sizes the cache itself: drop --cache-frac"},
        {OPT_MRC_POINTS, OPT_MRC, "--mrc-points needs --mrc"},
        {OPT_MRC_OPT_POINTS, OPT_MRC, "--mrc-opt-points needs --mrc"},
        {OPT_PREFETCH_DEPTH, OPT_TRAIN, "--prefetch-depth needs --train"},
        {OPT_PREWARM_SAMPLE, OPT_PREWARM, "--prewarm-sample needs --prewarm"},
        {OPT_PREWARM_BATCHES, OPT_PREWARM, "--prewarm-batches needs --prewarm"},
        {OPT_DIST, -5, "--dist uniform"}, {OPT_SWEEP_ALPHA, 0, "--sweep-alpha"},
        {OPT_SWEEP_CACHE, 0, "--sweep-cache"}, {OPT_SWEEP_BATCH, 0, "--sweep-batch"},
        {OPT_ALL_HIT, 0, "--all-hit"}, {OPT_LRU, 0, "--lru-check"},
        {OPT_PER_TABLE, 0, "--per-table"}, {OPT_TRAIN, 0, "--train"},
        {OPT_PREFETCH_DEPTH, 0, "--prefetch-depth"}, {OPT_MRC, 0, "--mrc"},
        {OPT_MRC_POINTS, 0, "--mrc-points"}, {OPT_MRC_OPT_POINTS, 0, "--mrc-opt-points"},
        {OPT_PLOT, 0, "--plot"}, {OPT_PREWARM, 0, "--prewarm"},
        {OPT_PREWARM_SAMPLE, 0, "--prewarm-sample"}, {OPT_PREWARM_BATCHES, 0, "--prewarm-batches"},
        {OPT_THREADS, -6, "--threads"}};
    const int uniform = strcmp(o->preset, "uniform") == 0;
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
      const opt_rule *r = &rules[k];
      int broken;
      if (!given[r->opt - OPT_FIRST]) continue;
      switch (r->needs) {
        case -1: broken = !uniform; break;
        case -2: broken = uniform; break;
        case -3: broken = o->dist == EMCT_DIST_UNIFORM; break;
        case -4: broken = o->all_hit; break;
        case 0: broken = o->procs > 0; break;
        case -5: broken = o->procs > 0 && o->dist == EMCT_DIST_UNIFORM; break;
        case -6: broken = o->procs > 0 && o->threads > 1; break;
        default: broken = !given[r->needs - OPT_FIRST]; break;
      }
      if (!broken) continue;
      if (r->needs == 0 || r->needs <= -5)
        fprintf(stderr, "emc-bench: --procs runs only its own measurement (--procs in --help): "
                "drop %s\n", r->why);
      else
        fprintf(stderr, "emc-bench: %s\n", r->why);
      return -1;
    }
  }
  if (o->per_table < 0) o->per_table = strcmp(o->preset, "criteo-kaggle") == 0;
  if (o->n_batch_sizes == 0) {
    o->batch_sizes[0] = (double)o->batch;
    o->n_batch_sizes = 1;
  }
  if (o->threads > 1 && o->backend == EMC_BACKEND_CUDA) {
    fprintf(stderr, "emc-bench: --threads > 1 needs the host backend (emc-bench gives the CUDA "
            "backend pageable host buffers on the default stream: its calls would wait for one "
            "another); drop --threads or use --backend host\n");
    return -1;
  }
  if (o->all_hit && o->n_fracs > 1) {
    fprintf(stderr, "emc-bench: --all-hit sizes the cache itself; drop --sweep-cache\n");
    return -1;
  }
  return 0;
}
