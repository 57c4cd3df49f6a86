/*
 * train_input.c: bad input changes nothing; the state reader; store files of version 2.
 * Part of test_train / test_gpu_train (train_common.h; the suite's comment in test_train.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

/* ------------------------------------------------------------------ bad input */
/* The store's rows and the training counters: what "nothing changed" compares. */
typedef struct snap {
  unsigned char *rows[MAX_T];
  uint64_t count[MAX_T];
  emc_stats s;
} snap;

static void snap_take(snap *z, emc_cache *c, const model *m) {
  uint32_t t;
  EMCT_OK(emc_flush(c, NULL));
  for (t = 0; t < m->n; t++) {
    uint64_t u = m->tb[t].universe, r;
    z->rows[t] = malloc(u * m->rb[t]);
    ck_assert(z->rows[t]);
    for (r = 0; r < u; r++) {
      uint64_t id = id_of(m, t, r);
      EMCT_OK(emc_store_read(m->store, t, &id, 1, z->rows[t] + r * m->rb[t]));
    }
    EMCT_OK(emc_store_table_count(m->store, t, &z->count[t]));
  }
  z->s = stats_of(c);
}

static void snap_same(const snap *a, emc_cache *c, const model *m, const char *what) {
  snap b;
  uint32_t t;
  snap_take(&b, c, m);
  for (t = 0; t < m->n; t++) {
    long d = emct_first_diff(a->rows[t], b.rows[t], m->tb[t].universe * m->rb[t]);
    ck_assert_msg(d < 0, "%s changed table %u at byte %ld", what, t, d);
    ck_assert_msg(a->count[t] == b.count[t], "%s changed table %u's id count", what, t);
    free(b.rows[t]);
  }
  ck_assert_msg(a->s.gradient_rows == b.s.gradient_rows && a->s.prefetched == b.s.prefetched &&
                    a->s.pinned_rows == b.s.pinned_rows && a->s.pinned_bytes == b.s.pinned_bytes,
                "%s changed the training counters", what);
}

static void snap_free(snap *z, const model *m) {
  uint32_t t;
  for (t = 0; t < m->n; t++) free(z->rows[t]);
}

/* A status the CUDA backend finds on the device with device ids: the call succeeds and the
 * next flush returns it; the host backend returns it from the call. */
static void expect_late(emc_status st, emc_cache *c, emc_status want) {
#ifdef EMCT_GPU
  EMCT_OK(st);
  st = emc_flush(c, NULL);
#else
  (void)c;
#endif
  EMCT_ST(st, want);
}

START_TEST(bad_input_changes_nothing) {
  model m;
  batch b;
  io x;
  emc_cache *c;
  emc_optimizer o, bad;
  snap z;
  uint64_t offs[MAX_T + 1], uids[64], uoffs[MAX_T + 1], keep;
  uint32_t inv[64], t;
  float nan = nanf(""), inf = INFINITY;
  emc_cache_config cfg;
  emc_cache *c2 = NULL;
  model_init(&m, TRAIN_TABLES, 4, EMC_STATE_NONE, 81);
  c = make_cache(&m, 1u << 20, 1);
  batch_alloc(&b, &m, 4000);
  io_init(&x, 16000, 16000 * 64, 16000 * 16);
  batch_make(&b, &m, 10);
  EMCT_OK(do_apply(&x, c, &b, m.n, (emc_optimizer_init(&o), &o))); /* some dirty rows */
  EMCT_OK(do_prefetch(&x, c, &b, m.n));
  snap_take(&z, c, &m);

  /* the optimizer */
  EMCT_ST(emc_apply_gradients(NULL, b.ids, b.offsets, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, NULL, NULL), EMC_EINVAL);
#define BAD_OPT(field, value)                                                   \
  do {                                                                          \
    bad = o;                                                                    \
    bad.field = value;                                                          \
    EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &bad, NULL), EMC_EINVAL); \
  } while (0)
  BAD_OPT(struct_size, 0);
  BAD_OPT(struct_size, sizeof(emc_optimizer) - 4);
  BAD_OPT(struct_size, sizeof(emc_optimizer) + 8);
  BAD_OPT(kind, (emc_optimizer_kind)2);
  BAD_OPT(kind, (emc_optimizer_kind)-1);
  BAD_OPT(merge, (emc_grad_merge)2);
  BAD_OPT(lr, nan);
  BAD_OPT(lr, inf);
  BAD_OPT(lr, -inf);
  BAD_OPT(eps, nan);
  BAD_OPT(eps, inf);
  BAD_OPT(eps, -1.0f);
  BAD_OPT(initial_accumulator, nan);
  BAD_OPT(initial_accumulator, inf);
  BAD_OPT(initial_accumulator, -0.5f);
  BAD_OPT(kind, EMC_OPT_ROWWISE_ADAGRAD); /* the tables keep no accumulator */
  ck_assert_msg(strstr(emc_last_error_detail(), "EMC_STATE_ADAGRAD") != NULL, "detail: %s",
                emc_last_error_detail());
  /* the batch */
  EMCT_ST(emc_apply_gradients(c, NULL, b.offsets, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, NULL, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, NULL, &o, NULL), EMC_EINVAL);
  memcpy(offs, b.offsets, sizeof offs);
  offs[0] = 1;
  EMCT_ST(emc_apply_gradients(c, b.ids, offs, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, offs, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, offs, uids, uoffs, inv, NULL), EMC_EINVAL);
  memcpy(offs, b.offsets, sizeof offs);
  offs[2] = offs[1] - 1;
  EMCT_ST(emc_apply_gradients(c, b.ids, offs, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, offs, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(NULL, b.ids, b.offsets, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, NULL, b.offsets, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, NULL, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(NULL, b.ids, b.offsets, uids, uoffs, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, NULL, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, NULL, uoffs, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, uoffs, NULL, NULL), EMC_EINVAL);
  snap_same(&z, c, &m, "refused calls");
  /* a dense id out of range (host memory: found by the call on both backends) */
  keep = b.ids[3];
  b.ids[3] = m.tb[0].rows + 5;
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &o, NULL), EMC_ERANGE);
  EMCT_ST(emc_prefetch(c, b.ids, b.offsets, NULL), EMC_ERANGE);
  memset(uoffs, 0xab, sizeof uoffs);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, uoffs, inv, NULL), EMC_ERANGE);
  for (t = 0; t <= m.n; t++) ck_assert_uint_eq(uoffs[t], 0xababababababababull); /* untouched */
  /* ... and from device memory on the CUDA backend: the next flush reports it */
  expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ERANGE);
  expect_late(do_prefetch(&x, c, &b, m.n), c, EMC_ERANGE);
  b.ids[3] = keep;
  snap_same(&z, c, &m, "dense ids out of range");
  /* a hashed table over its capacity: 3,500 new ids, 3,000 free */
  {
    uint64_t counts[MAX_T] = {0, 0, 3500, 0}, i;
    batch_make_counts(&b, &m, counts);
    for (i = 0; i < 3500; i++) b.ids[i] = id_of(&m, 2, 100000 + i);
    expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ERANGE);
  }
  snap_same(&z, c, &m, "a hashed table over capacity");
  snap_free(&z, &m);
  EMCT_OK(emc_cache_destroy(c));

  /* a batch larger than the cache: 2,000 distinct rows of 64 bytes, 64 KiB */
  c = make_cache(&m, 64u << 10, 1);
  snap_take(&z, c, &m);
  {
    uint64_t counts[MAX_T] = {2000, 0, 0, 0}, i;
    batch_make_counts(&b, &m, counts);
    for (i = 0; i < 2000; i++) b.ids[i] = b.ranks[i] = i;
    expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ECAPACITY);
    ck_assert_msg(strstr(emc_last_error_detail(), "capacity") != NULL, "detail: %s",
                  emc_last_error_detail());
  }
  snap_same(&z, c, &m, "a batch larger than the cache");
  snap_free(&z, &m);
  EMCT_OK(emc_cache_destroy(c));

  /* the configuration and the state reader */
  emct_cache_config_init(&cfg);
  ck_assert_uint_eq(cfg.prefetch_depth, 1);
  cfg.backend = BACKEND;
  cfg.prefetch_depth = 15;
  EMCT_ST(emc_cache_create(m.store, &cfg, &c2), EMC_EINVAL);
  ck_assert_ptr_null(c2);
  {
    float st1 = 7.0f;
    uint64_t id = 1;
    EMCT_ST(emc_store_read_state(NULL, 0, &id, 1, &st1), EMC_EINVAL);
    EMCT_ST(emc_store_read_state(m.store, 9, &id, 1, &st1), EMC_ERANGE);
    EMCT_ST(emc_store_read_state(m.store, 0, &id, 1, &st1), EMC_EINVAL); /* no state */
    ck_assert(st1 == 7.0f);
  }
  emc_optimizer_init(&o);
  ck_assert_uint_eq(o.struct_size, sizeof o);
  ck_assert(o.kind == EMC_OPT_SGD && o.merge == EMC_MERGE_SUM && o.lr == 0.01f &&
            o.eps == 1e-8f && o.initial_accumulator == 0.0f);
  emc_optimizer_init(NULL);
  io_free(&x);
  batch_free(&b);
  model_free(&m);
}
END_TEST

START_TEST(state_reader_and_table_desc) {
  static const mtab tb[2] = {{EMC_TABLE_DENSE, 100, 0, 0, 3, EMC_DTYPE_F16},
                             {EMC_TABLE_HASHED, 50, 40, 20, 4, EMC_DTYPE_F32}};
  model m;
  emc_table_desc d;
  emc_table_desc bad = {"x", EMC_TABLE_DENSE, 4, 2, EMC_DTYPE_F32, (emc_row_state)7};
  emc_store *s2 = NULL;
  float st[3] = {1, 2, 3};
  uint64_t ids[3] = {0, 99, 100};
  model_init(&m, tb, 2, EMC_STATE_ADAGRAD, 82);
  EMCT_OK(emc_store_table(m.store, 0, &d));
  ck_assert_int_eq(d.state, EMC_STATE_ADAGRAD);
  EMCT_OK(emc_store_read_state(m.store, 0, ids, 2, st));
  ck_assert(st[0] == 0.0f && st[1] == 0.0f && st[2] == 3.0f); /* zero at create, n honoured */
  EMCT_ST(emc_store_read_state(m.store, 0, ids, 3, st), EMC_ERANGE);
  EMCT_ST(emc_store_read_state(m.store, 0, NULL, 3, st), EMC_EINVAL);
  EMCT_OK(emc_store_read_state(m.store, 0, NULL, 0, NULL));
  /* n ids whose byte size overflows: refused, as emc_store_read refuses them (it read ids and
   * wrote out past their ends until it faulted), on both kinds of table */
  st[0] = 7;
  EMCT_ST(emc_store_read_state(m.store, 0, ids, SIZE_MAX / sizeof(uint64_t) + 1, st), EMC_EINVAL);
  EMCT_ST(emc_store_read_state(m.store, 1, ids, SIZE_MAX / sizeof(uint64_t) + 1, st), EMC_EINVAL);
  ck_assert(st[0] == 7.0f);
  ids[0] = 12345; /* a hashed id never written reads 0 */
  st[0] = 9;
  EMCT_OK(emc_store_read_state(m.store, 1, ids, 1, st));
  ck_assert(st[0] == 0.0f);
  EMCT_ST(emc_store_create(&bad, 1, &s2), EMC_EINVAL);
  ck_assert_ptr_null(s2);
  model_free(&m);
}
END_TEST

/* The file format: a store with Adagrad state saves as version 2 with its accumulators and
 * opens equal; one without state still saves as version 1; a version-2 descriptor's reserved
 * word must be zero. */
START_TEST(file_version_2_keeps_state) {
  static const mtab tb[2] = {{EMC_TABLE_DENSE, 300, 0, 0, 5, EMC_DTYPE_F16},
                             {EMC_TABLE_HASHED, 200, 150, 100, 4, EMC_DTYPE_F32}};
  model m, plain;
  batch b;
  emc_cache *c;
  emc_optimizer o;
  emc_store *o2 = NULL;
  char dir[512], path[600], path1[600];
  unsigned char *bytes;
  size_t n;
  uint32_t t, v;
  int step;
  model_init(&m, tb, 2, EMC_STATE_ADAGRAD, 83);
  c = make_cache(&m, 1u << 20, 1);
  batch_alloc(&b, &m, 64);
  emc_optimizer_init(&o);
  o.kind = EMC_OPT_ROWWISE_ADAGRAD;
  o.lr = 0.1f;
  for (step = 0; step < 20; step++) { /* accumulators and rows move, new hashed ids too */
    batch_make(&b, &m, 64);
    EMCT_OK(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &o, NULL));
    model_apply(&m, &b, &o);
  }
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_cache_destroy(c));
  emct_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/state.emc", dir);
  EMCT_OK(emc_store_save(m.store, path));
  bytes = emct_read_file(path, &n);
  memcpy(&v, bytes + 8, 4);
  ck_assert_uint_eq(v, 2);
  EMCT_OK(emc_store_open(path, &o2));
  emc_store_destroy(m.store);
  m.store = o2; /* the reference against the reopened store: rows and accumulators bitwise */
  check_store(&m, 0.0, "reopened");
  for (t = 0; t < 2; t++) {
    emc_table_desc d;
    EMCT_OK(emc_store_table(o2, t, &d));
    ck_assert_int_eq(d.state, EMC_STATE_ADAGRAD);
  }
  /* the first descriptor's reserved word (right after name_len and state) set: foreign */
  bytes[64 + 20] = 1;
  snprintf(path1, sizeof path1, "%s/bad.emc", dir);
  emct_write_file(path1, bytes, n);
  o2 = NULL;
  EMCT_ST(emc_store_open(path1, &o2), EMC_ECORRUPT);
  ck_assert_ptr_null(o2);
  free(bytes);
  /* no state: version 1, opens with state NONE */
  model_init(&plain, tb, 2, EMC_STATE_NONE, 84);
  snprintf(path1, sizeof path1, "%s/plain.emc", dir);
  EMCT_OK(emc_store_save(plain.store, path1));
  bytes = emct_read_file(path1, &n);
  memcpy(&v, bytes + 8, 4);
  ck_assert_uint_eq(v, 1);
  free(bytes);
  EMCT_OK(emc_store_open(path1, &o2));
  emc_store_destroy(plain.store);
  plain.store = o2;
  check_store(&plain, 0.0, "reopened version 1");
  {
    emc_table_desc d;
    EMCT_OK(emc_store_table(o2, 0, &d));
    ck_assert_int_eq(d.state, EMC_STATE_NONE);
  }
  batch_free(&b);
  model_free(&m);
  model_free(&plain);
  emct_rmdir(dir);
}
END_TEST

void train_input_tests(TCase *api) {
  tcase_add_test(api, bad_input_changes_nothing);
  tcase_add_test(api, state_reader_and_table_desc);
  tcase_add_test(api, file_version_2_keeps_state);
}
