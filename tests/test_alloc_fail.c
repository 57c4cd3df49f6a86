/*
 * test_alloc_fail: the library running out of memory at every point of a realistic scenario.
 *
 * The scenario drives the public API only: store create, fill, write (dense and hashed), save,
 * open, cache create, lookups and lookup_ex under constant eviction (the working set is about
 * twice t1), inserts (new hashed ids included), training steps (prefetch, dedup,
 * apply_gradients), flush, a save of the attached store, destroy.
 * A counting run (injection armed, nothing failing) numbers its failure points (every
 * allocation of the library, emc__alloc_in's jemalloc/posix_memalign included, every fdopen
 * and XXH64 state: lib/alloc.c). Then the scenario runs once per point with that point failing
 * (emc__inject_arm), and once more per point with every later point of the same call failing
 * too (sticky: cleanup paths that meet a second failure). For every run:
 *   - no crash, and sanitizer-clean (the suite runs in build-asan/ under make test);
 *   - a call that fails returns EMC_ENOMEM, documented at its declaration (contract.h), with a
 *     fresh non-empty detail;
 *   - its outputs are untouched (sentinels) and so is the state: stats unchanged, the store's
 *     rows, the saved file, the cache structure (emc__cache_check) as before the call;
 *   - the call is then repeated without injection and the scenario goes on; at the end, after
 *     flush and destroy, the store and the saved file equal a reference model: no data lost.
 * It prints the number of points and how long the sweep took.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "contract.h"

#define REQUIRE(cond, ...) ck_assert_msg((cond), __VA_ARGS__)

/* ------------------------------------------------------------------ the model */
#define NT 3
#define HASH_CAP 40      /* capacity of the hashed table */
#define HASH_UNIVERSE 48 /* ranks looked up; ranks >= HASH_CAP are never inserted */
#define MAX_BATCH 40
#define N_STEPS 18       /* lookup rounds; every third also inserts */

static const emc_table_desc k_desc[NT] = {{"dense_f32", EMC_TABLE_DENSE, 48, 5, EMC_DTYPE_F32, EMC_STATE_NONE},
                                          {"hashed_f16", EMC_TABLE_HASHED, HASH_CAP, 6, EMC_DTYPE_F16, EMC_STATE_NONE},
                                          {NULL, EMC_TABLE_DENSE, 24, 3, EMC_DTYPE_F16, EMC_STATE_NONE}};

typedef struct model {
  unsigned char *rows[NT]; /* universe * rb: the value of each rank */
  uint8_t *present[NT];    /* rank is present in the store (dense: always) */
  uint64_t universe[NT];
  uint32_t rb[NT];
} model;

static uint64_t id_of(uint32_t t, uint64_t rank) {
  return k_desc[t].kind == EMC_TABLE_DENSE ? rank : emc__fmix64(rank * 2654435761u + 0xabcdefull);
}

static void model_init(model *m) {
  uint32_t t;
  memset(m, 0, sizeof *m);
  for (t = 0; t < NT; t++) {
    m->universe[t] = k_desc[t].kind == EMC_TABLE_DENSE ? k_desc[t].rows : HASH_UNIVERSE;
    m->rb[t] = k_desc[t].dim * (uint32_t)emc_dtype_size(k_desc[t].dtype);
    m->rows[t] = calloc(m->universe[t], m->rb[t]);
    m->present[t] = calloc(m->universe[t], 1);
    ck_assert(m->rows[t] && m->present[t]);
    if (k_desc[t].kind == EMC_TABLE_DENSE) memset(m->present[t], 1, m->universe[t]);
  }
}

static void model_free(model *m) {
  uint32_t t;
  for (t = 0; t < NT; t++) {
    free(m->rows[t]);
    free(m->present[t]);
  }
}

/* The whole store (every rank of every table, absent hashed ranks as zero rows) equals m. */
static void check_store(emc_store *s, const model *m, const char *what) {
  unsigned char got[64], zero[64] = {0};
  uint32_t t;
  uint64_t r, count, present;
  for (t = 0; t < NT; t++) {
    present = 0;
    for (r = 0; r < m->universe[t]; r++) {
      uint64_t id = id_of(t, r);
      EMCT_OK(emc_store_read(s, t, &id, 1, got));
      REQUIRE(memcmp(got, m->present[t][r] ? m->rows[t] + r * m->rb[t] : zero, m->rb[t]) == 0,
              "%s: table %u rank %llu differs from the model", what, t, (unsigned long long)r);
      present += m->present[t][r];
    }
    EMCT_OK(emc_store_table_count(s, t, &count));
    REQUIRE(count == present, "%s: table %u holds %llu rows, the model %llu", what, t,
            (unsigned long long)count, (unsigned long long)present);
  }
}

/* ------------------------------------------------------------------ one run */
typedef struct run {
  long long point;  /* the failing point (-1: none) */
  int sticky;       /* every later point of the same call fails too */
  int failures;     /* calls that failed in this run */
  model m;
  emc_store *s;
  emc_cache *c;
  emct_rng rng;
  uint64_t tag;     /* row generator */
  char dir[4096], path[4200];
  const char *step; /* the step running, for messages */
  emc_stats stats;  /* the cache's, after the final flush */
} run;

static const char k_marker[] = "emc_store_table: s or out is NULL";

/* Make the next failure's detail recognisable as fresh: a known failure sets the marker. */
static void mark_detail(void) {
  ck_assert(emc_store_table(NULL, 0, NULL) == EMC_EINVAL);
  ck_assert(strncmp(emc_last_error_detail(), k_marker, sizeof k_marker - 1) == 0);
}

/* After a call: 0 if it succeeded; 1 if it failed, once the failure is checked (EMC_ENOMEM
 * with a fresh detail, while a point was failing) and injection is off for the retry. */
static int failed(run *R, emc_status st) {
  size_t bytes = 0;
  const char *kind = emc__inject_last(&bytes);
  if (st == EMC_OK) return 0;
  REQUIRE(emc__inject_failed() > 0,
          "point %lld: %s failed with %s but no allocation was made to fail (%s)", R->point,
          R->step, emc_status_name(st), emc_last_error_detail());
  REQUIRE(st == EMC_ENOMEM, "point %lld (%s of %zu bytes): %s returned %s, not EMC_ENOMEM (%s)",
          R->point, kind ? kind : "?", bytes, R->step, emc_status_name(st),
          emc_last_error_detail());
  REQUIRE(emc_last_error_detail()[0] != '\0' &&
              strncmp(emc_last_error_detail(), k_marker, sizeof k_marker - 1) != 0,
          "point %lld: %s failed with EMC_ENOMEM without a detail of its own", R->point, R->step);
  R->failures++;
  if (R->sticky) emc__inject_disarm(); /* the retry must not fail again */
  return 1;
}

static void gen_row(run *R, unsigned char *row, uint32_t rb) {
  uint32_t k;
  uint64_t st = ++R->tag * 0x9E3779B97F4A7C15ull;
  for (k = 0; k < rb; k += 8) {
    uint64_t v = emc__splitmix64(&st);
    memcpy(row + k, &v, rb - k < 8 ? rb - k : 8);
  }
}

/* Names in R->dir other than the saved file (a temporary left behind). */
static int stray_files(const run *R) {
  DIR *d = opendir(R->dir);
  struct dirent *e;
  int n = 0;
  const char *base = strrchr(R->path, '/') + 1;
  ck_assert(d != NULL);
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, base)) n++;
  closedir(d);
  return n;
}

/* The saved file: its bytes (NULL when absent). */
static unsigned char *file_bytes(const char *path, size_t *n) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    *n = 0;
    return NULL;
  }
  return emct_read_file(path, n);
}

static void step_save(run *R) {
  size_t n0, n1;
  unsigned char *before, *after;
  emc_status st;
  R->step = "emc_store_save";
  for (;;) {
    before = file_bytes(R->path, &n0);
    mark_detail();
    st = EMCT_CALL(emc_store_save, R->s, R->path);
    if (!failed(R, st)) break;
    after = file_bytes(R->path, &n1);
    REQUIRE(n0 == n1 && (n0 == 0 || memcmp(before, after, n0) == 0),
            "point %lld: a failed save changed the existing file", R->point);
    REQUIRE(stray_files(R) == 0, "point %lld: a failed save left a file behind", R->point);
    free(before);
    free(after);
  }
  free(before);
  REQUIRE(stray_files(R) == 0, "point %lld: a save left a temporary behind", R->point);
}

static void step_open_and_compare(run *R) {
  emc_store *o = (emc_store *)(uintptr_t)0x5a5a5a50;
  emc_status st;
  R->step = "emc_store_open";
  for (;;) {
    mark_detail();
    st = EMCT_CALL(emc_store_open, R->path, &o);
    if (!failed(R, st)) break;
    REQUIRE(o == (emc_store *)(uintptr_t)0x5a5a5a50, "point %lld: failed open wrote *out", R->point);
  }
  check_store(o, &R->m, "reopened store");
  emc_store_destroy(o);
}

static void step_store_setup(run *R) {
  emc_store *s = (emc_store *)(uintptr_t)0x5a5a5a50;
  unsigned char rows[MAX_BATCH * 64];
  uint64_t ids[MAX_BATCH], r;
  uint32_t t;
  emc_status st;
  R->step = "emc_store_create";
  for (;;) {
    mark_detail();
    st = EMCT_CALL(emc_store_create, k_desc, NT, &s);
    if (!failed(R, st)) break;
    REQUIRE(s == (emc_store *)(uintptr_t)0x5a5a5a50, "point %lld: failed create wrote *out", R->point);
  }
  R->s = s;
  /* dense tables: uniform rows */
  R->step = "emc_store_fill_uniform";
  for (t = 0; t < NT; t += 2) {
    while (failed(R, (mark_detail(), EMCT_CALL(emc_store_fill_uniform, R->s, t, -1.0f, 1.0f, 7 + t))))
      check_store(R->s, &R->m, "after a failed fill");
    for (r = 0; r < R->m.universe[t]; r++)
      EMCT_OK(emc_uniform_row(7 + t, t, r, -1.0f, 1.0f, k_desc[t].dim, k_desc[t].dtype,
                              R->m.rows[t] + r * R->m.rb[t]));
  }
  /* hashed: ranks 0..23 present; dense: a few ranks rewritten (duplicates: the last wins) */
  R->step = "emc_store_write";
  for (t = 0; t < NT; t++) {
    uint64_t n = t == 1 ? 24 : 6, k;
    for (k = 0; k < n; k++) {
      ids[k] = id_of(t, t == 1 ? k : (k * 7) % 5);
      gen_row(R, rows + k * R->m.rb[t], R->m.rb[t]);
    }
    while (failed(R, (mark_detail(), EMCT_CALL(emc_store_write, R->s, t, ids, (size_t)n, rows))))
      check_store(R->s, &R->m, "after a failed write");
    for (k = 0; k < n; k++) {
      uint64_t rank = t == 1 ? k : (k * 7) % 5;
      memcpy(R->m.rows[t] + rank * R->m.rb[t], rows + k * R->m.rb[t], R->m.rb[t]);
      R->m.present[t][rank] = 1;
    }
  }
}

static void step_cache_create(run *R) {
  emc_cache_config cfg;
  emc_cache *c = (emc_cache *)(uintptr_t)0x5a5a5a50;
  emc_status st;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 2048; /* t1 = 1228 bytes against a ~2.4 KB working set */
  cfg.evict_high = 0.6f;
  cfg.evict_low = 0.3f;
  cfg.unified_index_rows = 8;
  R->step = "emc_cache_create";
  for (;;) {
    mark_detail();
    st = EMCT_CALL(emc_cache_create, R->s, &cfg, &c);
    if (!failed(R, st)) break;
    REQUIRE(c == (emc_cache *)(uintptr_t)0x5a5a5a50, "point %lld: failed create wrote *out", R->point);
    { /* the store was left detached: a direct write is accepted (same value, no change) */
      uint64_t id = 0;
      R->step = "emc_store_write";
      REQUIRE(EMCT_CALL(emc_store_write, R->s, 0, &id, 1, R->m.rows[0]) == EMC_OK,
              "point %lld: after a failed emc_cache_create the store refuses writes: %s",
              R->point, emc_last_error_detail());
      R->step = "emc_cache_create";
    }
  }
  R->c = c;
}

/* A batch of n positions per table (duplicates and absent hashed ranks included). */
static void make_batch(run *R, uint32_t per_table, uint64_t max_hashed_rank, uint64_t *ids,
                       uint64_t *ranks, uint64_t *offsets) {
  uint32_t t, k;
  uint64_t i = 0;
  offsets[0] = 0;
  for (t = 0; t < NT; t++) {
    uint64_t u = t == 1 ? max_hashed_rank : R->m.universe[t];
    for (k = 0; k < per_table; k++, i++) {
      ranks[i] = emct_rng_below(&R->rng, u);
      ids[i] = id_of(t, ranks[i]);
    }
    offsets[t + 1] = i;
  }
}

static void check_rows(const run *R, const uint64_t *ranks, const uint64_t *offsets,
                       const unsigned char *out, const uint8_t *where, const char *what) {
  static const unsigned char zero[64];
  uint32_t t;
  uint64_t i;
  size_t pos = 0;
  for (t = 0; t < NT; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, pos += R->m.rb[t]) {
      int present = R->m.present[t][ranks[i]];
      REQUIRE(memcmp(out + pos, present ? R->m.rows[t] + ranks[i] * R->m.rb[t] : zero,
                     R->m.rb[t]) == 0,
              "point %lld: %s: table %u rank %llu differs from the model", R->point, what, t,
              (unsigned long long)ranks[i]);
      if (where)
        REQUIRE((where[i] == EMC_WHERE_ABSENT) == !present, "point %lld: %s: where[%llu] = %u",
                R->point, what, (unsigned long long)i, where[i]);
    }
}

static void step_lookup(run *R, int ex) {
  uint64_t ids[MAX_BATCH], ranks[MAX_BATCH], offsets[NT + 1];
  unsigned char out[MAX_BATCH * 64];
  uint8_t where[MAX_BATCH];
  emc_stats s0, s1;
  emc_status st;
  size_t i;
  make_batch(R, 8, HASH_UNIVERSE, ids, ranks, offsets);
  R->step = ex ? "emc_lookup_ex" : "emc_lookup";
  for (;;) {
    EMCT_OK(emc_get_stats(R->c, &s0));
    memset(out, 0xA5, sizeof out);
    memset(where, 0xA5, sizeof where);
    mark_detail();
    st = ex ? EMCT_CALL(emc_lookup_ex, R->c, ids, offsets, out, where, NULL)
            : EMCT_CALL(emc_lookup, R->c, ids, offsets, out, NULL);
    if (!failed(R, st)) break;
    EMCT_OK(emc_get_stats(R->c, &s1));
    REQUIRE(memcmp(&s0, &s1, sizeof s0) == 0, "point %lld: a failed lookup changed the stats",
            R->point);
    for (i = 0; i < sizeof out; i++)
      REQUIRE(out[i] == 0xA5, "point %lld: a failed lookup wrote out[%zu]", R->point, i);
    for (i = 0; i < sizeof where; i++)
      REQUIRE(where[i] == 0xA5, "point %lld: a failed lookup wrote where[%zu]", R->point, i);
    EMCT_OK(emc__cache_check(R->c));
  }
  check_rows(R, ranks, offsets, out, ex ? where : NULL, R->step);
}

static void step_insert(run *R) {
  uint64_t ids[MAX_BATCH], ranks[MAX_BATCH], offsets[NT + 1];
  unsigned char rows[MAX_BATCH * 64], out[MAX_BATCH * 64];
  emc_stats s0, s1;
  emc_status st;
  uint32_t t;
  uint64_t i;
  size_t pos;
  /* hashed ranks < HASH_CAP: new ids fit the capacity */
  make_batch(R, 5, HASH_CAP, ids, ranks, offsets);
  for (t = 0, pos = 0; t < NT; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, pos += R->m.rb[t]) gen_row(R, rows + pos, R->m.rb[t]);
  R->step = "emc_insert";
  for (;;) {
    EMCT_OK(emc_get_stats(R->c, &s0));
    mark_detail();
    st = EMCT_CALL(emc_insert, R->c, ids, offsets, rows, NULL);
    if (!failed(R, st)) break;
    EMCT_OK(emc_get_stats(R->c, &s1));
    REQUIRE(memcmp(&s0, &s1, sizeof s0) == 0, "point %lld: a failed insert changed the stats",
            R->point);
    EMCT_OK(emc__cache_check(R->c));
    /* nothing was written: the batch still reads the model's old rows */
    R->step = "emc_lookup";
    EMCT_OK(EMCT_CALL(emc_lookup, R->c, ids, offsets, out, NULL));
    check_rows(R, ranks, offsets, out, NULL, "lookup after a failed insert");
    R->step = "emc_insert";
  }
  for (t = 0, pos = 0; t < NT; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, pos += R->m.rb[t]) {
      memcpy(R->m.rows[t] + ranks[i] * R->m.rb[t], rows + pos, R->m.rb[t]);
      R->m.present[t][ranks[i]] = 1;
    }
}

/* emc_prefetch, emc_dedup and emc_apply_gradients (SGD) on one batch; the model follows. */
static void step_train(run *R) {
  uint64_t ids[MAX_BATCH], ranks[MAX_BATCH], offsets[NT + 1], uids[MAX_BATCH], uoffs[NT + 1];
  uint32_t inv[MAX_BATCH], t, j;
  float grads[MAX_BATCH * 8], g[8];
  unsigned char out[MAX_BATCH * 64];
  emc_optimizer o;
  emc_stats s0, s1;
  emc_status st;
  uint64_t i, k;
  size_t gf = 0, pos;
  /* hashed ranks < HASH_CAP: new ids fit; gradients are multiples of 1/8 */
  make_batch(R, 3, HASH_CAP, ids, ranks, offsets);
  for (t = 0; t < NT; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++)
      for (j = 0; j < k_desc[t].dim; j++) grads[gf++] = (float)((int)emct_rng_below(&R->rng, 17) - 8) / 8.0f;
  R->step = "emc_prefetch";
  for (;;) {
    EMCT_OK(emc_get_stats(R->c, &s0));
    mark_detail();
    st = EMCT_CALL(emc_prefetch, R->c, ids, offsets, NULL);
    if (st == EMC_ECAPACITY || !failed(R, st)) break; /* (ECAPACITY: pinned what fit) */
    EMCT_OK(emc_get_stats(R->c, &s1));
    REQUIRE(memcmp(&s0, &s1, sizeof s0) == 0, "point %lld: a failed prefetch changed the stats",
            R->point);
    EMCT_OK(emc__cache_check(R->c));
  }
  R->step = "emc_dedup";
  for (;;) {
    memset(uoffs, 0xA5, sizeof uoffs);
    memset(uids, 0xA5, sizeof uids);
    mark_detail();
    st = EMCT_CALL(emc_dedup, R->c, ids, offsets, uids, uoffs, inv, NULL);
    if (!failed(R, st)) break;
    for (t = 0; t <= NT; t++)
      REQUIRE(uoffs[t] == 0xA5A5A5A5A5A5A5A5ull, "point %lld: a failed dedup wrote its output",
              R->point);
  }
  for (i = 0; i < offsets[NT]; i++)
    REQUIRE(uids[inv[i]] == ids[i], "point %lld: dedup's inverse is wrong at %llu", R->point,
            (unsigned long long)i);
  emc_optimizer_init(&o);
  o.lr = 0.25f;
  R->step = "emc_apply_gradients";
  for (;;) {
    EMCT_OK(emc_get_stats(R->c, &s0));
    mark_detail();
    st = EMCT_CALL(emc_apply_gradients, R->c, ids, offsets, grads, &o, NULL);
    if (!failed(R, st)) break;
    EMCT_OK(emc_get_stats(R->c, &s1));
    REQUIRE(memcmp(&s0, &s1, sizeof s0) == 0,
            "point %lld: a failed apply_gradients changed the stats", R->point);
    EMCT_OK(emc__cache_check(R->c));
    R->step = "emc_lookup"; /* nothing was written: the batch still reads the model's rows */
    EMCT_OK(EMCT_CALL(emc_lookup, R->c, ids, offsets, out, NULL));
    check_rows(R, ranks, offsets, out, NULL, "lookup after a failed apply_gradients");
    R->step = "emc_apply_gradients";
  }
  /* the model: per distinct rank, its gradients summed in position order, w = fmaf(-lr, g, w) */
  for (t = 0, gf = 0; t < NT; t++) {
    uint32_t dim = k_desc[t].dim, dt = (uint32_t)k_desc[t].dtype;
    for (i = offsets[t]; i < offsets[t + 1]; i++, gf += dim) {
      unsigned char *row = R->m.rows[t] + ranks[i] * R->m.rb[t];
      for (k = offsets[t]; k < i && ranks[k] != ranks[i]; k++) {}
      if (k < i) continue;
      memcpy(g, grads + gf, dim * sizeof(float));
      for (k = i + 1, pos = gf + dim; k < offsets[t + 1]; k++, pos += dim)
        if (ranks[k] == ranks[i])
          for (j = 0; j < dim; j++) g[j] = g[j] + grads[pos + j];
      if (!R->m.present[t][ranks[i]]) {
        memset(row, 0, R->m.rb[t]);
        R->m.present[t][ranks[i]] = 1;
      }
      for (j = 0; j < dim; j++) emc__elem_set(row, dt, j, fmaf(-o.lr, g[j], emc__elem_get(row, dt, j)));
    }
  }
}

/* The whole scenario, with point R->point failing (-1: none). */
static void run_scenario(run *R) {
  int k;
  emct_rng_seed(&R->rng, 42);
  model_init(&R->m);
  emc__inject_arm(R->point, 0, R->sticky);
  step_store_setup(R);
  step_save(R);
  step_open_and_compare(R);
  step_cache_create(R);
  for (k = 0; k < N_STEPS; k++) {
    step_lookup(R, k & 1);
    if (k % 3 == 2) step_insert(R);
    if (k % 6 == 1) step_train(R);
  }
  R->step = "emc_flush";
  while (failed(R, (mark_detail(), EMCT_CALL(emc_flush, R->c, NULL)))) {}
  EMCT_OK(emc_get_stats(R->c, &R->stats));
  step_save(R); /* attached, flushed: the file holds the inserted rows */
  R->step = "emc_cache_destroy";
  while (failed(R, (mark_detail(), EMCT_CALL(emc_cache_destroy, R->c)))) EMCT_OK(emc__cache_check(R->c));
  R->c = NULL;
  emc__inject_disarm();
  /* no data lost: the store and the saved file are the model */
  check_store(R->s, &R->m, "final store");
  step_open_and_compare(R);
  emc_store_destroy(R->s);
  R->s = NULL;
  model_free(&R->m);
}

/* Count the scenario's failure points, then fail each in turn (single, then sticky). */
START_TEST(alloc_fail_sweep) {
  run R;
  long long n, p, failures = 0, quiet = 0;
  /* the kinds of failure point (alloc.c's names), tallied from the single-failure runs */
  static const char *const kinds[] = {"malloc", "calloc", "mallocx", "fdopen", "XXH64_createState"};
  long long by_kind[5] = {0};
  struct timespec t0, t1;
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
  int sticky;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  memset(&R, 0, sizeof R);
  /* a tmpfs when there is one: a save's fsyncs cost nothing there (the crash test covers disk) */
  if (base) {
    snprintf(R.dir, sizeof R.dir, "%s/emc_alloc_XXXXXX", base);
    ck_assert(mkdtemp(R.dir) != NULL);
  } else {
    emct_tmpdir(R.dir, sizeof R.dir);
  }
  snprintf(R.path, sizeof R.path, "%s/ckpt.emc", R.dir);
  R.point = -1;
  run_scenario(&R);
  n = emc__inject_count();
  REQUIRE(R.failures == 0, "the counting run failed %d calls", R.failures);
  /* the scenario does what it claims: constant eviction, dirty rows written back, hits */
  REQUIRE(R.stats.evict_passes >= N_STEPS / 4 && R.stats.evictions > 0 &&
              R.stats.writebacks > 0 && R.stats.hits > 0 && R.stats.absent > 0,
          "scenario: %llu passes, %llu evictions, %llu writebacks, %llu hits, %llu absent",
          (unsigned long long)R.stats.evict_passes, (unsigned long long)R.stats.evictions,
          (unsigned long long)R.stats.writebacks, (unsigned long long)R.stats.hits,
          (unsigned long long)R.stats.absent);
  ck_assert_msg(n > 50, "only %lld failure points: is injection wired up?", n);
  for (sticky = 0; sticky < 2; sticky++)
    for (p = 0; p < n; p++) {
      unlink(R.path);
      R.point = p;
      R.sticky = sticky;
      R.failures = 0;
      R.tag = 0;
      run_scenario(&R);
      if (!sticky) {
        const char *k = emc__inject_last(NULL);
        size_t j;
        REQUIRE(k != NULL, "point %lld was never reached (the scenario is not deterministic)", p);
        for (j = 0; j < 5; j++)
          if (strcmp(k, kinds[j]) == 0) by_kind[j]++;
      }
      failures += R.failures;
      quiet += R.failures == 0; /* the failed allocation was absorbed (e.g. admission skipped) */
    }
  unlink(R.path);
  rmdir(R.dir);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("alloc_fail_sweep: %lld failure points (%lld malloc, %lld calloc, %lld mallocx, "
         "%lld fdopen, %lld XXH64_createState), each failed alone and sticky: %lld runs, "
         "%lld failing calls (all EMC_ENOMEM), %lld runs absorbed the failure, %.2f s\n",
         n, by_kind[0], by_kind[1], by_kind[2], by_kind[3], by_kind[4], 2 * n, failures, quiet,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  emct_contract_check(1);
}
END_TEST

/* Issue 12 defect 1: emc_cache_create's failure path freed the cache state and then formatted
 * the detail from it (AddressSanitizer: heap-use-after-free; Release: a garbage byte count).
 * Each big allocation of a 64 MiB cache (the pool arena, its stamps, the index copies) fails
 * in turn: EMC_ENOMEM, *out untouched, the store detached, and the detail states the size of
 * the allocation that failed (in bytes, or in 8-byte index slots). */
START_TEST(cache_create_oom_detail) {
  /* 200,000 rows: an index is sized for the rows the store holds when the budget holds more */
  emc_table_desc td = {"rows", EMC_TABLE_DENSE, 200000, 16, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *s;
  emc_cache_config cfg;
  emc_cache *c;
  long long n, p;
  EMCT_OK(emc_store_create(&td, 1, &s));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = (size_t)64 << 20;
  /* count the allocations of at least 1 MiB */
  emc__inject_arm(-1, (size_t)1 << 20, 0);
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  n = emc__inject_disarm();
  EMCT_OK(emc_cache_destroy(c));
  ck_assert_msg(n >= 3, "a 64 MiB cache made only %lld allocations of 1 MiB or more", n);
  for (p = 0; p < n; p++) {
    size_t bytes = 0;
    const char *kind, *q;
    int named = 0;
    c = (emc_cache *)(uintptr_t)0x77;
    mark_detail();
    emc__inject_arm(p, (size_t)1 << 20, 0);
    EMCT_ST(EMCT_CALL(emc_cache_create, s, &cfg, &c), EMC_ENOMEM);
    emc__inject_disarm();
    kind = emc__inject_last(&bytes);
    REQUIRE(c == (emc_cache *)(uintptr_t)0x77, "failed create wrote *out");
    REQUIRE(strncmp(emc_last_error_detail(), k_marker, sizeof k_marker - 1) != 0,
            "big allocation %lld: no detail of its own", p);
    /* some decimal number in the detail is the failed size, in bytes or 8-byte slots */
    for (q = emc_last_error_detail(); *q; q++) {
      unsigned long long v;
      if (*q < '0' || *q > '9' || (q > emc_last_error_detail() && q[-1] >= '0' && q[-1] <= '9'))
        continue;
      v = strtoull(q, NULL, 10);
      named |= v == bytes || v * 8 == bytes;
    }
    REQUIRE(named, "big allocation %lld (%s of %zu bytes) failed; the detail does not state its "
            "size: %s", p, kind ? kind : "?", bytes, emc_last_error_detail());
    { /* detached: a direct write is accepted */
      uint64_t id = 3;
      unsigned char row[64] = {0};
      EMCT_OK(emc_store_write(s, 0, &id, 1, row));
    }
  }
  emc_store_destroy(s);
  emct_contract_check(0);
}
END_TEST

/* Issue 12 defect 6, the I/O half: an out-of-memory fdopen/fopen was reported as EMC_EIO.
 * Every failure point of one save and of one open fails in turn: each call returns EMC_ENOMEM
 * (never EMC_EIO), and the points include the stream and the hash state. */
START_TEST(save_open_report_enomem) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 10, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 10, 1, EMC_DTYPE_F16, EMC_STATE_NONE}};
  char dir[4096], path[4200];
  emc_store *s, *o;
  long long n, p;
  int round, saw_stream = 0, saw_hash = 0;
  emct_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/s.emc", dir);
  EMCT_OK(emc_store_create(td, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 5));
  for (round = 0; round < 2; round++) { /* 0: save, 1: open */
    emc__inject_arm(-1, 0, 0);
    if (round == 0) EMCT_OK(emc_store_save(s, path));
    else EMCT_OK(emc_store_open(path, &o));
    n = emc__inject_disarm();
    if (round == 1) emc_store_destroy(o);
    ck_assert_msg(n >= 4, "%s: only %lld failure points", round ? "open" : "save", n);
    for (p = 0; p < n; p++) {
      const char *kind;
      emc__inject_arm(p, 0, 0);
      o = (emc_store *)(uintptr_t)0x77;
      if (round == 0) EMCT_ST(EMCT_CALL(emc_store_save, s, path), EMC_ENOMEM);
      else EMCT_ST(EMCT_CALL(emc_store_open, path, &o), EMC_ENOMEM);
      emc__inject_disarm();
      REQUIRE(o == (emc_store *)(uintptr_t)0x77, "failed open wrote *out");
      kind = emc__inject_last(NULL);
      saw_stream |= kind && strcmp(kind, "fdopen") == 0;
      saw_hash |= kind && strcmp(kind, "XXH64_createState") == 0;
    }
    REQUIRE(saw_stream && saw_hash, "%s: the stream (%d) or the hash state (%d) was not a "
            "failure point", round ? "open" : "save", saw_stream, saw_hash);
    saw_stream = saw_hash = 0;
  }
  /* the file is the last good save */
  EMCT_OK(emc_store_open(path, &o));
  emc_store_destroy(o);
  emc_store_destroy(s);
  emct_rmdir(dir);
  emct_contract_check(0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc_fail");
  TCase *tc = tcase_create("alloc_fail");
  SRunner *sr;
  int failed_n;
  tcase_add_test(tc, alloc_fail_sweep);
  tcase_add_test(tc, cache_create_oom_detail);
  tcase_add_test(tc, save_open_report_enomem);
  tcase_set_timeout(tc, emct_timeout(120));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed_n = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed_n ? 1 : 0;
}
