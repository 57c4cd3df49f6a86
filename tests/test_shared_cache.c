/*
 * test_shared_cache: host caches over one shared store (issue 20): write-through, the update
 * log, and what a lookup may return.
 *
 *   one process   two caches over two mappings of one store: each sees the other's inserts,
 *                 gradient steps and hashed ids, the store's own writes, a table refill and a
 *                 write longer than the log (the wrapped path); a row pinned by emc_prefetch
 *                 is refreshed in place (still a hit); rows are never dirty; a store with a
 *                 cache is not destroyed; a CUDA cache over a shared store is refused; a
 *                 write refused before it changed a row drops no other cache's copies
 *   written over  another process's scribbles: a hashed count past its rows (inserts, steps,
 *                 writes and refills return EMC_ECORRUPT, no other row changes), a version left
 *                 odd (a writing call repairs it instead of waiting for ever; a lookup of the
 *                 row returns it whole), a log counter thrown far ahead (the next writes still
 *                 reach every cache)
 *   processes     four processes with small host caches (constant eviction; inline and
 *                 background admission; one pins its batches) look up Zipf batches while a
 *                 fifth writes generation-encoded rows, through the store and through its own
 *                 cache, new hashed ids among them, and now and then more rows at once than
 *                 the log holds: every row returned is whole and no older than a write that
 *                 completed before its lookup began; at the end every process reads the rows
 *                 last written
 */
#define _GNU_SOURCE 1
#include "common.h"
#include "store/seg.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

EMCT_SHARED_LOCK_TSAN_OPTIONS

/* Compiled with EMCT_GPU it is test_gpu_shared_cache (label gpu): the caches under test are
 * CUDA caches (cuda/sync.cu), on the CPU model of the device in make test; the references stay
 * host caches. This process never touches the device: each test runs in a child (Check's fork
 * mode) and the device is probed in one too, so that children fork their own processes. */
#ifdef EMCT_GPU
#include <cuda_runtime_api.h>

#include "emc_cuda.h"
#define BACKEND EMC_BACKEND_CUDA
#define CACHE_CHECK(c) emc__cuda_check(c)
#else
#define BACKEND EMC_BACKEND_HOST
#define CACHE_CHECK(c) emc__cache_check(c)
#endif

#define DROWS 1024u  /* dense ranks */
#define HCAP 1024u   /* hashed capacity */
#define HUNIV 512u   /* hashed ranks used; [0, HSTART) exist at start */
#define HSTART 256u
#define DIM0 16u     /* dense f32 */
#define DIM1 8u      /* hashed f16 */
#define LOG_CAP 32768u /* more entries than any update log holds (lib/store/seg.h) */

static const emc_table_desc TABLES[2] = {
    {"dense", EMC_TABLE_DENSE, DROWS, DIM0, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"hashed", EMC_TABLE_HASHED, HCAP, DIM1, EMC_DTYPE_F16, EMC_STATE_NONE}};
static const emc_table_desc TABLES_ADAGRAD[2] = {
    {"dense", EMC_TABLE_DENSE, DROWS, DIM0, EMC_DTYPE_F32, EMC_STATE_ADAGRAD},
    {"hashed", EMC_TABLE_HASHED, HCAP, DIM1, EMC_DTYPE_F16, EMC_STATE_ADAGRAD}};

static uint32_t dim_of(uint32_t t) { return t == 0 ? DIM0 : DIM1; }
static emc_dtype dt_of(uint32_t t) { return t == 0 ? EMC_DTYPE_F32 : EMC_DTYPE_F16; }
static size_t rb_of(uint32_t t) { return dim_of(t) * emc_dtype_size(dt_of(t)); }
static uint64_t hid(uint64_t k) { return 0x9e3779b97f4a7c15ull * (k + 1u) >> 9; }
static uint64_t id_of(uint32_t t, uint64_t r) { return t == 0 ? r : hid(r); }

/* Names made by this process, removed at exit whatever happened. */
static char g_made[8][64];
static unsigned g_n_made;
static void unlink_made(void) {
  unsigned i;
  for (i = 0; i < g_n_made; i++) shm_unlink(g_made[i]);
}
static const char *fresh_name(void) {
  static unsigned n;
  char *b = g_made[g_n_made < 8 ? g_n_made : 7];
  snprintf(b, sizeof g_made[0], "/emct-sc-%d-%u", (int)getpid(), n++);
  shm_unlink(b);
  if (g_n_made == 0) atexit(unlink_made);
  if (g_n_made < 8) g_n_made++;
  return b;
}

/* Write generation g of ranks rk[0..n) of table t, through the store or through cache c. */
static emc_status write_gens(emc_store *s, emc_cache *c, uint32_t t, const uint64_t *rk, size_t n,
                             const uint32_t *g) {
  size_t rb = rb_of(t), i;
  unsigned char *rows = malloc(n * rb + 1);
  uint64_t *ids = malloc(n * sizeof *ids + 1), off[3] = {0, 0, 0};
  emc_status st;
  for (i = 0; i < n; i++) {
    ids[i] = id_of(t, rk[i]);
    emct_gen_row(t, rk[i], g[i], dim_of(t), dt_of(t), rows + i * rb);
  }
  if (c) {
    off[1] = t == 0 ? n : 0;
    off[2] = n;
    st = emc_insert(c, ids, off, rows, NULL);
  } else {
    st = emc_store_write(s, t, ids, n, rows);
  }
  free(rows);
  free(ids);
  return st;
}

/* Look up ranks rk[0..n) of table t through c: each row's generation into gen (-1 torn or
 * wrong, -2 a zero row), its where code into where. */
static void read_gens(emc_cache *c, uint32_t t, const uint64_t *rk, size_t n, int64_t *gen,
                      uint8_t *where) {
  size_t rb = rb_of(t), i;
  unsigned char *rows = malloc(n * rb + 1), scratch[64];
  uint64_t *ids = malloc(n * sizeof *ids + 1), off[3] = {0, t == 0 ? n : 0, n};
  for (i = 0; i < n; i++) ids[i] = id_of(t, rk[i]);
  EMCT_OK(emc_lookup_ex(c, ids, off, rows, where, NULL));
  for (i = 0; i < n; i++) {
    const unsigned char *r = rows + i * rb;
    gen[i] = emct_is_zero(r, rb) ? -2 : emct_gen_decode(t, rk[i], dim_of(t), dt_of(t), r, scratch);
  }
  free(rows);
  free(ids);
}

static emc_cache *cache_of(emc_store *s, emc_backend be, size_t capacity, uint32_t admission,
                           uint32_t key_bits) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = be;
  cfg.capacity_bytes = capacity;
  cfg.admission = admission;
  cfg.key_bits = key_bits;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  return c;
}
/* A cache under test (BACKEND). */
static emc_cache *test_cache(emc_store *s, size_t capacity, uint32_t admission, uint32_t key_bits) {
  return cache_of(s, BACKEND, capacity, admission, key_bits);
}

/* Every rank of table t through c holds generation want[r] (-2: absent). */
static void expect_all(emc_cache *c, uint32_t t, uint64_t n, const int64_t *want, const char *what) {
  uint64_t *rk = malloc(n * sizeof *rk);
  int64_t *gen = malloc(n * sizeof *gen);
  uint8_t *where = malloc(n);
  uint64_t r;
  for (r = 0; r < n; r++) rk[r] = r;
  read_gens(c, t, rk, n, gen, where);
  for (r = 0; r < n; r++)
    ck_assert_msg(gen[r] == want[r], "%s: table %u rank %llu holds generation %lld, expected %lld",
                  what, t, (unsigned long long)r, (long long)gen[r], (long long)want[r]);
  free(rk);
  free(gen);
  free(where);
}

/* The 64 rows of ids (`bytes` in all) and their optimizer states, bitwise equal in stores a
 * and b (got, want: scratch of `bytes`). */
static void same_rows_and_states(emc_store *a, emc_store *b, uint32_t t, const uint64_t *ids,
                                 size_t bytes, unsigned char *got, unsigned char *want) {
  float sa[64], sb[64];
  EMCT_OK(emc_store_read(a, t, ids, 64, got));
  EMCT_OK(emc_store_read(b, t, ids, 64, want));
  ck_assert_int_eq(emct_first_diff(got, want, bytes), -1);
  EMCT_OK(emc_store_read_state(a, t, ids, 64, sa));
  EMCT_OK(emc_store_read_state(b, t, ids, 64, sb));
  ck_assert_int_eq(emct_first_diff(sa, sb, sizeof sa), -1);
}

static void check_clean(emc_cache *c, const char *what) {
  emc_stats st;
  EMCT_OK(emc_get_stats(c, &st));
  ck_assert_msg(st.dirty_rows == 0, "%s: %llu dirty rows over a shared store", what,
                (unsigned long long)st.dirty_rows);
  ck_assert_msg(CACHE_CHECK(c) == EMC_OK, "%s: %s", what, emc_last_error_detail());
}

/* ================================================================= one process */
START_TEST(caches_see_each_others_writes) {
  const char *name = fresh_name();
  emc_store *s = NULL, *s2 = NULL;
  emc_cache *a, *b, *au = NULL;
  emc_cache_config cfg;
  static uint64_t rk[LOG_CAP + 256];
  static uint32_t g[LOG_CAP + 256];
  static int64_t want0[DROWS], want1[HUNIV], gen[DROWS];
  static uint8_t where[DROWS];
  uint64_t r, i;
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  EMCT_OK(emc_store_attach(name, &s2)); /* another mapping: another process's view */
  for (r = 0; r < DROWS; r++) rk[r] = r, g[r] = 1, want0[r] = 1;
  EMCT_OK(write_gens(s, NULL, 0, rk, DROWS, g));
  EMCT_OK(write_gens(s, NULL, 1, rk, HSTART, g));
  for (r = 0; r < HUNIV; r++) want1[r] = r < HSTART ? 1 : -2;
  a = test_cache(s, 4u << 20, EMC_ADMISSION_INLINE, 64);
  b = test_cache(s2, 4u << 20, EMC_ADMISSION_BACKGROUND, 32);
  /* AUTO picks the host backend over a shared store; a store with a cache is not destroyed */
  emct_cache_config_init(&cfg);
  EMCT_OK(emc_cache_create(s, &cfg, &au));
  ck_assert_int_eq(emc_cache_backend(au), EMC_BACKEND_HOST);
  EMCT_OK(emc_cache_destroy(au));
  emc_store_destroy(s);
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "attached cache"));

  expect_all(a, 0, DROWS, want0, "a, first");
  expect_all(a, 0, DROWS, want0, "a, cached");
  expect_all(b, 0, DROWS, want0, "b, first");
  EMCT_OK(emc_flush(b, NULL)); /* b's admissions done */
  expect_all(a, 1, HUNIV, want1, "a, hashed");

  /* b's inserts reach a (which holds the old rows) */
  for (r = 0; r < 100; r++) g[r] = 2, want0[r] = 2;
  EMCT_OK(write_gens(NULL, b, 0, rk, 100, g));
  read_gens(a, 0, rk, DROWS, gen, where);
  for (r = 0; r < DROWS; r++) {
    ck_assert_int_eq(gen[r], want0[r]);
#ifndef EMCT_GPU
    if (r < 100) ck_assert_int_eq(where[r], EMC_WHERE_STORE); /* a's copy was dropped */
#else
    if (r < 100) ck_assert_int_eq(where[r], EMC_WHERE_CACHE); /* a's copy was refreshed */
#endif
  }
  expect_all(b, 0, DROWS, want0, "b after its inserts");

  /* the store's own writes, through the other mapping */
  for (r = 50; r < 150; r++) g[r - 50] = 3, want0[r] = 3;
  EMCT_OK(write_gens(s2, NULL, 0, rk + 50, 100, g));
  expect_all(a, 0, DROWS, want0, "a after a store write");
  expect_all(b, 0, DROWS, want0, "b after a store write");

  /* a row pinned in a is refreshed in place: still a hit, and current */
  {
    uint64_t ids[10], off[3] = {0, 10, 10};
    for (r = 0; r < 10; r++) ids[r] = r;
    EMCT_OK(emc_prefetch(a, ids, off, NULL));
    for (r = 0; r < 10; r++) g[r] = 4, want0[r] = 4;
    EMCT_OK(write_gens(NULL, b, 0, rk, 10, g));
    read_gens(a, 0, rk, 10, gen, where);
    for (r = 0; r < 10; r++) {
      ck_assert_int_eq(gen[r], 4);
      ck_assert_int_eq(where[r], EMC_WHERE_CACHE);
    }
  }
  check_clean(a, "a");
  check_clean(b, "b");

  /* hashed ids created by b are seen by a */
  for (r = HSTART; r < HSTART + 40; r++) g[r - HSTART] = 1, want1[r] = 1;
  EMCT_OK(write_gens(NULL, b, 1, rk + HSTART, 40, g));
  expect_all(a, 1, HUNIV, want1, "a, new hashed ids");

  /* more entries in one write than the log holds: everyone behind drops the table */
  for (i = 0; i < LOG_CAP + 256; i++) rk[i] = i % DROWS, g[i] = 5;
  for (r = 0; r < DROWS; r++) want0[r] = 5;
  EMCT_OK(write_gens(s, NULL, 0, rk, LOG_CAP + 256, g));
  for (r = 0; r < DROWS; r++) rk[r] = r;
  expect_all(a, 0, DROWS, want0, "a after a wrapped log");
  expect_all(b, 0, DROWS, want0, "b after a wrapped log");
  expect_all(a, 1, HUNIV, want1, "a, hashed rows kept");
  check_clean(a, "a after the wrap");
  check_clean(b, "b after the wrap");

  /* a table refilled in place: caches read the refill */
  EMCT_OK(emc_store_fill_uniform(s2, 0, -1.0f, 1.0f, 77));
  {
    static unsigned char got[DROWS * DIM0 * 4], ref[DROWS * DIM0 * 4];
    uint64_t ids[DROWS], off[3] = {0, DROWS, DROWS};
    for (r = 0; r < DROWS; r++) ids[r] = r;
    EMCT_OK(emc_store_read(s, 0, ids, DROWS, ref));
    EMCT_OK(emc_lookup(a, ids, off, got, NULL));
    ck_assert_int_eq(emct_first_diff(got, ref, sizeof ref), -1);
    EMCT_OK(emc_lookup(b, ids, off, got, NULL));
    ck_assert_int_eq(emct_first_diff(got, ref, sizeof ref), -1);
  }
  EMCT_OK(emc_cache_destroy(a));
  EMCT_OK(emc_cache_destroy(b));
  emc_store_destroy(s2);
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
}
END_TEST

/* Gradient steps of one cache reach the other and the store (rows and Adagrad state), bit for
 * bit what a private store with a host cache computes: config 0 row-wise Adagrad and SUM over
 * the dense f32 table, config 1 SGD and MEAN over both tables (new hashed f16 ids every step),
 * config 2 Adagrad and MEAN over both. The GPU build passes every other step's ids and
 * gradients in device memory. */
/* A write refused before it changed a row (a hashed table without room; more distinct rows
 * than the cache holds) withdraws its announcement in the update log: another cache that has
 * read the log keeps its copies (it used to drop them, and count the drops as evictions). A
 * cache further behind than the log's ring still drops whole tables (seg_log.c). */
START_TEST(refused_writes_drop_no_copies) {
  static const emc_table_desc T[2] = {
      {"d", EMC_TABLE_DENSE, 64, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
      {"h", EMC_TABLE_HASHED, 1, 4, EMC_DTYPE_F32, EMC_STATE_NONE}};
  const char *name = fresh_name();
  emc_store *s = NULL, *s2 = NULL, *s3 = NULL;
  emc_cache *a, *b, *small;
  emc_optimizer o;
  uint64_t x = 3, ox[3] = {0, 1, 1}, ids[64], off[3] = {0, 1, 3}, big[3] = {0, 64, 64};
  static float out[4], rows[64 * 4], g[64 * 4];
  uint8_t where = 0xff;
  int k;
  EMCT_OK(emc_store_create_shared(name, T, 2, &s));
  EMCT_OK(emc_store_attach(name, &s2));
  EMCT_OK(emc_store_attach(name, &s3));
  a = test_cache(s, 1u << 20, EMC_ADMISSION_INLINE, 64);
  b = cache_of(s2, EMC_BACKEND_HOST, 1u << 20, EMC_ADMISSION_INLINE, 64);
  small = cache_of(s3, EMC_BACKEND_HOST, 256, EMC_ADMISSION_INLINE, 64);
  EMCT_OK(emc_lookup(b, &x, ox, out, NULL)); /* b caches (0, 3) */
  emc_optimizer_init(&o);
  ids[0] = 3, ids[1] = 100, ids[2] = 200; /* two new hashed ids, room for one */
  for (k = 0; k < 3; k++) {
    emc_stats s0, s1;
    emc_status st;
    EMCT_OK(emc_get_stats(b, &s0));
    if (k == 0) {
      st = emc_insert(a, ids, off, rows, NULL);
      ck_assert_msg(st == EMC_ERANGE, "insert: %s", emc_status_name(st));
    } else if (k == 1) {
      st = emc_apply_gradients(a, ids, off, g, &o, NULL);
      ck_assert_msg(st == EMC_ERANGE, "apply: %s", emc_status_name(st));
    } else { /* 64 distinct rows of 16 bytes in a 256-byte cache */
      uint64_t r;
      for (r = 0; r < 64; r++) ids[r] = r;
      st = emc_apply_gradients(small, ids, big, g, &o, NULL);
      ck_assert_msg(st == EMC_ECAPACITY, "apply over capacity: %s", emc_status_name(st));
    }
    EMCT_OK(emc_lookup_ex(b, &x, ox, out, &where, NULL));
    EMCT_OK(emc_get_stats(b, &s1));
    ck_assert_msg(where == EMC_WHERE_CACHE && s1.evictions == s0.evictions,
                  "refused call %d: b's copy of (0, 3) dropped (where %u, evictions +%llu)", k,
                  where, (unsigned long long)(s1.evictions - s0.evictions));
  }
  EMCT_OK(emc_cache_destroy(small));
  EMCT_OK(emc_cache_destroy(b));
  EMCT_OK(emc_cache_destroy(a));
  emc_store_destroy(s3);
  emc_store_destroy(s2);
  emc_store_destroy(s);
}
END_TEST

START_TEST(gradient_steps_reach_every_cache) {
  const char *name = fresh_name();
  emc_store *s = NULL, *s2 = NULL, *ref = NULL;
  emc_cache *a, *b, *rc;
  emc_optimizer o;
  enum { ND = 48, NH = 16 };
  uint64_t ids[ND + NH], off[3], r, step, nh = _i == 0 ? 0 : NH;
  float grads[ND * DIM0 + NH * DIM1];
  static unsigned char got[64 * DIM0 * 4 + NH * DIM1 * 2], want[64 * DIM0 * 4 + NH * DIM1 * 2];
  size_t bytes = ND * DIM0 * 4 + nh * DIM1 * 2;
#ifdef EMCT_GPU
  void *ids_d = NULL, *grads_d = NULL;
  ck_assert_int_eq(cudaMalloc(&ids_d, sizeof ids), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(&grads_d, sizeof grads), cudaSuccess);
#endif
  EMCT_OK(emc_store_create_shared(name, TABLES_ADAGRAD, 2, &s));
  EMCT_OK(emc_store_attach(name, &s2));
  EMCT_OK(emc_store_create(TABLES_ADAGRAD, 2, &ref));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 5));
  EMCT_OK(emc_store_fill_uniform(ref, 0, -1.0f, 1.0f, 5));
  a = test_cache(s, 1u << 20, EMC_ADMISSION_INLINE, 64);
  b = test_cache(s2, 1u << 20, EMC_ADMISSION_INLINE, 32);
  rc = cache_of(ref, EMC_BACKEND_HOST, 1u << 20, EMC_ADMISSION_INLINE, 64);
  emc_optimizer_init(&o);
  o.kind = _i == 1 ? EMC_OPT_SGD : EMC_OPT_ROWWISE_ADAGRAD;
  o.merge = _i == 0 ? EMC_MERGE_SUM : EMC_MERGE_MEAN;
  o.lr = 0.25f;
  for (step = 0; step < 20; step++) {
    emc_cache *w = step % 2 ? a : b, *other = step % 2 ? b : a;
    const uint64_t *idp = ids;
    const float *gp = grads;
    for (r = 0; r < ND; r++) ids[r] = (step * 7 + r * r) % 64;
    for (r = 0; r < nh; r++) ids[ND + r] = hid((step * 5 + r * 3) % 90); /* new ones, and dups */
    for (r = 0; r < ND * DIM0 + nh * DIM1; r++) grads[r] = (float)((int)((step + r) % 9) - 4) * 0.125f;
    off[0] = 0, off[1] = ND, off[2] = ND + nh;
    EMCT_OK(emc_lookup(other, ids, off, got, NULL)); /* the other caches the old rows */
#ifdef EMCT_GPU
    if (step % 4 >= 2) { /* device memory */
      ck_assert_int_eq(cudaMemcpy(ids_d, ids, sizeof ids, cudaMemcpyHostToDevice), cudaSuccess);
      ck_assert_int_eq(cudaMemcpy(grads_d, grads, sizeof grads, cudaMemcpyHostToDevice), cudaSuccess);
      idp = ids_d;
      gp = grads_d;
    }
#endif
    EMCT_OK(emc_apply_gradients(w, idp, off, gp, &o, NULL));
    EMCT_OK(emc_apply_gradients(rc, ids, off, grads, &o, NULL));
    EMCT_OK(emc_lookup(other, ids, off, got, NULL));
    EMCT_OK(emc_lookup(rc, ids, off, want, NULL));
    ck_assert_msg(emct_first_diff(got, want, bytes) == -1, "config %d, step %llu: rows differ", _i,
                  (unsigned long long)step);
    EMCT_OK(emc_lookup(w, ids, off, got, NULL));
    ck_assert_msg(emct_first_diff(got, want, bytes) == -1, "config %d, step %llu: the stepping "
                  "cache's rows differ", _i, (unsigned long long)step);
    check_clean(w, "stepping cache");
  }
  for (r = 0; r < 64; r++) ids[r] = r;
  EMCT_OK(emc_flush(rc, NULL));
  same_rows_and_states(s2, ref, 0, ids, 64 * DIM0 * 4, got, want);
  if (nh) { /* the hashed rows and states, every id stepped */
    for (r = 0; r < 64; r++) ids[r] = hid(r);
    same_rows_and_states(s2, ref, 1, ids, 64 * DIM1 * 2, got, want);
  }
  EMCT_OK(emc_cache_destroy(a));
  EMCT_OK(emc_cache_destroy(b));
  EMCT_OK(emc_cache_destroy(rc));
  emc_store_destroy(s2);
  emc_store_destroy(s);
  emc_store_destroy(ref);
  EMCT_OK(emc_store_unlink(name));
#ifdef EMCT_GPU
  cudaFree(ids_d);
  cudaFree(grads_d);
#endif
}
END_TEST

/* ================================================================= written over */
START_TEST(scribbles_of_another_process) {
  const char *name = fresh_name();
  emc_store *s = NULL;
  emc_cache *a, *b;
  emc_optimizer o;
  static uint64_t rk[DROWS];
  static uint32_t g[DROWS];
  static int64_t want0[DROWS];
  uint64_t r, cnt, id, off[3];
  float grad[DIM1];
  unsigned char before[DIM0 * 4], after[DIM0 * 4], row[DIM1 * 2];
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  for (r = 0; r < DROWS; r++) rk[r] = r, g[r] = 1, want0[r] = 1;
  EMCT_OK(write_gens(s, NULL, 0, rk, DROWS, g));
  EMCT_OK(write_gens(s, NULL, 1, rk, 8, g));
  a = test_cache(s, 1u << 20, EMC_ADMISSION_INLINE, 64);
  b = test_cache(s, 1u << 20, EMC_ADMISSION_INLINE, 64);
  /* a hashed count past the table: nothing is written outside it */
  cnt = __atomic_load_n(&s->seg_recs[1].count, __ATOMIC_RELAXED);
  __atomic_store_n(&s->seg_recs[1].count, (uint64_t)HCAP + 5, __ATOMIC_RELAXED);
  id = DROWS - 1;
  EMCT_OK(emc_store_read(s, 0, &id, 1, before));
  id = hid(900);
  off[0] = 0, off[1] = 0, off[2] = 1;
  memset(row, 0x3c, sizeof row);
  EMCT_ST(emc_insert(a, &id, off, row, NULL), EMC_ECORRUPT);
  emc_optimizer_init(&o);
  memset(grad, 0, sizeof grad);
  EMCT_ST(emc_apply_gradients(a, &id, off, grad, &o, NULL), EMC_ECORRUPT);
  EMCT_ST(emc_store_write(s, 1, &id, 1, row), EMC_ECORRUPT);
  EMCT_ST(emc_store_fill_uniform(s, 1, -1.0f, 1.0f, 3), EMC_ECORRUPT);
  id = DROWS - 1;
  EMCT_OK(emc_store_read(s, 0, &id, 1, after));
  ck_assert_int_eq(emct_first_diff(before, after, sizeof before), -1);
  __atomic_store_n(&s->seg_recs[1].count, cnt, __ATOMIC_RELAXED);
  /* a version left odd with the lock free: a writing call does not wait for it for ever */
  __atomic_store_n(&s->stripes[emc__store_stripe(0, 5)], 7u, __ATOMIC_RELAXED);
  id = 5;
  off[0] = 0, off[1] = 1, off[2] = 1;
  {
    float gd[DIM0];
    memset(gd, 0, sizeof gd);
    EMCT_OK(emc_apply_gradients(a, &id, off, gd, &o, NULL));
  }
  /* a version left odd with the lock free, of a row no cache holds: a lookup still returns
   * the row whole (the CUDA backend's kernel leaves it to the host, which never waits for
   * ever either: the lock is free, so it repairs the version) */
  {
    int64_t gen1;
    uint8_t wh;
    uint32_t *v = &s->stripes[emc__store_stripe(0, 700)];
    rk[0] = 700;
    __atomic_store_n(v, 9u, __ATOMIC_RELAXED);
    read_gens(a, 0, rk, 1, &gen1, &wh);
    ck_assert_int_eq(gen1, 1);
    ck_assert_int_eq(wh, EMC_WHERE_STORE);
    ck_assert_uint_eq(__atomic_load_n(v, __ATOMIC_RELAXED) & 1u, 0);
    rk[0] = 0;
  }
  /* the log's pending counter thrown far ahead: writes still reach the other cache */
  expect_all(b, 0, DROWS, want0, "b, before");
  __atomic_store_n(&s->seg->log_pending, UINT64_MAX - 2, __ATOMIC_RELAXED);
  for (r = 0; r < 5; r++) g[r] = 2, want0[r + 5] = 2;
  EMCT_OK(write_gens(s, NULL, 0, rk + 5, 5, g));
  for (r = 0; r < 5; r++) g[r] = 3, want0[r + 20] = 3;
  EMCT_OK(write_gens(s, NULL, 0, rk + 20, 5, g));
  expect_all(b, 0, DROWS, want0, "b after writes behind a scribbled log counter");
  __atomic_store_n(&s->seg->log_seq, (1ull << 62) + 7, __ATOMIC_RELAXED);
  for (r = 0; r < 5; r++) g[r] = 4, want0[r + 40] = 4;
  EMCT_OK(write_gens(s, NULL, 0, rk + 40, 5, g));
  expect_all(b, 0, DROWS, want0, "b after writes behind a log counter near its end");
  check_clean(a, "a");
  check_clean(b, "b");
  EMCT_OK(emc_cache_destroy(a));
  EMCT_OK(emc_cache_destroy(b));
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
}
END_TEST

/* ================================================================= processes */
typedef struct ctl {
  uint32_t done[2][DROWS]; /* generation whose write completed (release), per rank */
  uint32_t stop;           /* the writer finished */
  uint32_t ready;          /* readers attached */
} ctl;


#define BATCH 256u

/* Reader k: Zipf batches over both tables until the writer stops, then one full read. */
static void reader(const char *name, ctl *cl, unsigned k) {
  emc_store *s = NULL;
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_rng rng;
  emct_zipf z0, z1;
  uint64_t ids[2 * BATCH], rk[2 * BATCH], off[3] = {0, BATCH, 2 * BATCH}, it = 0, r;
  uint32_t snap[2 * BATCH];
  static unsigned char rows[BATCH * DIM0 * 4 + BATCH * DIM1 * 2], scratch[64];
  uint8_t where[2 * BATCH];
  int last = 0;
  CHILD_CHECK(emc_store_attach(name, &s) == EMC_OK, "attach");
  emct_cache_config_init(&cfg);
  cfg.backend = BACKEND;
  cfg.capacity_bytes = 64u << 10; /* an eighth of the rows or so: evictions all the time */
  cfg.admission = k == 2 ? EMC_ADMISSION_BACKGROUND : EMC_ADMISSION_INLINE;
  cfg.key_bits = k == 1 ? 32 : 64;
  CHILD_CHECK(emc_cache_create(s, &cfg, &c) == EMC_OK, "cache");
  emct_rng_seed(&rng, 1000 + k);
  emct_zipf_init(&z0, DROWS, 0.9);
  emct_zipf_init(&z1, HUNIV, 0.9);
  __atomic_fetch_add(&cl->ready, 1, __ATOMIC_RELEASE);
  while (!last) {
    uint64_t i;
    /* (a few batches at least: the cache must churn even when the writer is quick) */
    last = __atomic_load_n(&cl->stop, __ATOMIC_ACQUIRE) != 0 && it >= 24;
    for (i = 0; i < 2 * BATCH; i++) {
      uint32_t t = i >= BATCH;
      rk[i] = t == 0 ? emct_zipf_sample(&z0, &rng) : emct_zipf_sample(&z1, &rng);
      ids[i] = id_of(t, rk[i]);
    }
    if (k == 3) { /* pins: the batch's rows are refreshed in place when written */
      emc_status pst = emc_prefetch(c, ids, off, NULL);
      CHILD_CHECK(pst == EMC_OK || pst == EMC_ECAPACITY, "prefetch: %s", emc_status_name(pst));
    }
    /* what completed before the lookup began */
    for (i = 0; i < 2 * BATCH; i++)
      snap[i] = __atomic_load_n(&cl->done[i >= BATCH][rk[i]], __ATOMIC_ACQUIRE);
    CHILD_CHECK(emc_lookup_ex(c, ids, off, rows, where, NULL) == EMC_OK, "lookup");
    for (i = 0; i < 2 * BATCH; i++) {
      uint32_t t = i >= BATCH;
      const unsigned char *row = t == 0 ? rows + i * DIM0 * 4 : rows + BATCH * DIM0 * 4 + (i - BATCH) * DIM1 * 2;
      int64_t gg = emct_is_zero(row, rb_of(t)) ? 0 : emct_gen_decode(t, rk[i], dim_of(t), dt_of(t), row, scratch);
      CHILD_CHECK(gg >= 0, "reader %u, batch %llu: table %u rank %llu is torn", k,
                  (unsigned long long)it, t, (unsigned long long)rk[i]);
      CHILD_CHECK((uint64_t)gg >= snap[i], "reader %u, batch %llu: table %u rank %llu holds "
                  "generation %lld, but %u was written before the lookup began (where %u)", k,
                  (unsigned long long)it, t, (unsigned long long)rk[i], (long long)gg, snap[i],
                  where[i]);
      if (last) /* nothing is written any more: exactly the last generation */
        CHILD_CHECK((uint64_t)gg == snap[i], "reader %u, at the end: table %u rank %llu holds "
                    "generation %lld, the last written is %u", k, t, (unsigned long long)rk[i],
                    (long long)gg, snap[i]);
    }
    it++;
  }
  /* the end: every rank, whole tables */
  for (r = 0; r < DROWS; r += BATCH) {
    uint64_t i;
    for (i = 0; i < 2 * BATCH; i++) {
      rk[i] = i < BATCH ? r + i : (r + i - BATCH) % HUNIV;
      ids[i] = id_of(i >= BATCH, rk[i]);
    }
    CHILD_CHECK(emc_lookup(c, ids, off, rows, NULL) == EMC_OK, "lookup");
    for (i = 0; i < 2 * BATCH; i++) {
      uint32_t t = i >= BATCH;
      const unsigned char *row = t == 0 ? rows + i * DIM0 * 4 : rows + BATCH * DIM0 * 4 + (i - BATCH) * DIM1 * 2;
      int64_t gg = emct_is_zero(row, rb_of(t)) ? 0 : emct_gen_decode(t, rk[i], dim_of(t), dt_of(t), row, scratch);
      uint32_t want = __atomic_load_n(&cl->done[t][rk[i]], __ATOMIC_ACQUIRE);
      CHILD_CHECK(gg == (int64_t)want, "reader %u, final read: table %u rank %llu holds %lld, "
                  "the last written is %u", k, t, (unsigned long long)rk[i], (long long)gg, want);
    }
  }
  {
    emc_stats st;
    /* (the CUDA backend admits and evicts on its writer stream, after the lookups returned:
     * the counters are whole once a flush has waited for it) */
    CHILD_CHECK(emc_flush(c, NULL) == EMC_OK, "flush: %s", emc_last_error_detail());
    CHILD_CHECK(emc_get_stats(c, &st) == EMC_OK && st.dirty_rows == 0, "dirty rows");
    CHILD_CHECK(st.evictions > 0, "reader %u: no evictions (the cache is meant to churn): "
                "%llu batches, %llu hits, %llu misses, %llu admissions, %llu skipped, %llu rows, "
                "%llu bytes, %llu bytes of pages held, %llu passes", k, (unsigned long long)it, (unsigned long long)st.hits,
                (unsigned long long)st.misses, (unsigned long long)st.admissions,
                (unsigned long long)st.admit_skipped, (unsigned long long)st.rows_cached,
                (unsigned long long)st.bytes_in_use, (unsigned long long)st.bytes_reserved,
                (unsigned long long)st.evict_passes);
  }
  CHILD_CHECK(CACHE_CHECK(c) == EMC_OK, "cache check: %s", emc_last_error_detail());
  CHILD_CHECK(emc_cache_destroy(c) == EMC_OK, "destroy");
  emc_store_destroy(s);
  _exit(0);
}

/* The writer: random ranks, the next generation of each, through the store or its cache. */
static void writer(const char *name, ctl *cl, uint64_t batches) {
  emc_store *s = NULL;
  emc_cache *c = NULL;
  emc_cache_config cfg;
  emct_rng rng;
  static uint32_t gen[2][DROWS];
  static uint64_t rk[LOG_CAP + 64];
  static uint32_t g[LOG_CAP + 64];
  uint64_t b, i;
  uint64_t hmax = HSTART;
  CHILD_CHECK(emc_store_attach(name, &s) == EMC_OK, "attach");
  emct_cache_config_init(&cfg);
  cfg.backend = BACKEND;
  cfg.capacity_bytes = 32u << 10;
  CHILD_CHECK(emc_cache_create(s, &cfg, &c) == EMC_OK, "cache");
  for (i = 0; i < DROWS; i++) gen[0][i] = 1;
  for (i = 0; i < HSTART; i++) gen[1][i] = 1;
  emct_rng_seed(&rng, 77);
  for (b = 0; b < batches; b++) {
    uint32_t t = (uint32_t)(b % 3 == 2);
    uint64_t n = 1 + emct_rng_below(&rng, 64), universe = t == 0 ? DROWS : hmax;
    int big = t == 0 && b % 97 == 50;
    if (t == 1 && hmax < HUNIV && b % 5 == 2) universe = ++hmax; /* a new hashed id, maybe */
    if (big) n = LOG_CAP + 64; /* more than the log holds */
    for (i = 0; i < n; i++) {
      uint64_t r = big ? i % DROWS : emct_rng_below(&rng, universe);
      rk[i] = r;
      if ((!big || i < DROWS) && gen[t][r] < emct_gen_max(dt_of(t))) gen[t][r]++;
    }
    /* duplicates in a batch: every occurrence holds the rank's newest generation */
    for (i = 0; i < n; i++) g[i] = gen[t][rk[i]];
    CHILD_CHECK(write_gens(s, b % 2 ? c : NULL, t, rk, n, g) == EMC_OK, "write batch %llu",
                (unsigned long long)b);
    for (i = 0; i < n; i++) __atomic_store_n(&cl->done[t][rk[i]], g[i], __ATOMIC_RELEASE);
  }
  CHILD_CHECK(emc_cache_destroy(c) == EMC_OK, "destroy");
  emc_store_destroy(s);
  _exit(0);
}

START_TEST(processes_never_read_outdated_rows) {
  const char *name = fresh_name();
  emc_store *s = NULL;
  ctl *cl = mmap(NULL, sizeof *cl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t kids[5];
  uint64_t r;
  static uint64_t rk[DROWS];
  static uint32_t g[DROWS];
  unsigned k;
  ck_assert(cl != MAP_FAILED);
  memset(cl, 0, sizeof *cl);
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  for (r = 0; r < DROWS; r++) rk[r] = r, g[r] = 1, cl->done[0][r] = 1;
  for (r = 0; r < HSTART; r++) cl->done[1][r] = 1;
  EMCT_OK(write_gens(s, NULL, 0, rk, DROWS, g));
  EMCT_OK(write_gens(s, NULL, 1, rk, HSTART, g));
  for (k = 0; k < 4; k++) {
    fflush(NULL);
    if ((kids[k] = fork()) == 0) reader(name, cl, k);
    ck_assert_int_gt(kids[k], 0);
  }
  while (__atomic_load_n(&cl->ready, __ATOMIC_ACQUIRE) < 4) usleep(1000);
  fflush(NULL);
  if ((kids[4] = fork()) == 0) writer(name, cl, emct_gpu_scale(emct_scale(3000, 4), 10));
  ck_assert_int_gt(kids[4], 0);
  {
    int stt = 0;
    ck_assert_int_eq(waitpid(kids[4], &stt, 0), kids[4]);
    __atomic_store_n(&cl->stop, 1, __ATOMIC_RELEASE);
    if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0)
      for (k = 0; k < 4; k++) kill(kids[k], SIGKILL);
    ck_assert_msg(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "the writer failed (status %d)", stt);
  }
  for (k = 0; k < 4; k++) {
    int stt = 0;
    ck_assert_int_eq(waitpid(kids[k], &stt, 0), kids[k]);
    ck_assert_msg(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "reader %u failed (status %d)", k, stt);
  }
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
  munmap(cl, sizeof *cl);
}
END_TEST


int main(void) {
  Suite *su;
  TCase *tc;
  SRunner *sr;
  int failed;
#ifdef EMCT_GPU
  { /* (before Check allocates: nothing leaks) */
    int dev = emct_gpu_present_in_child("test_gpu_shared_cache");
    if (dev != 0) return dev;
  }
#endif
  su = suite_create("shared_cache");
  tc = tcase_create("shared_cache");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, caches_see_each_others_writes);
  tcase_add_loop_test(tc, gradient_steps_reach_every_cache, 0, 3);
  tcase_add_test(tc, refused_writes_drop_no_copies);
  tcase_add_test(tc, scribbles_of_another_process);
  tcase_add_test(tc, processes_never_read_outdated_rows);
  suite_add_tcase(su, tc);
  sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
