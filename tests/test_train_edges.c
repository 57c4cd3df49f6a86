/*
 * test_train_edges: the host backend's training calls at the edges of their contract
 * (issue 19). Host backend only; white-box where a state must be built exactly.
 *
 *   wide rows   a row whose slot is wider than (t1 - t2) * capacity, with the cache's use
 *               between t1 * capacity - stride and t2 * capacity: an eviction pass must free
 *               what the admission needs (use + stride <= t1 * capacity), not only down to
 *               t2. emc_prefetch pins the row (EMC_OK), and emc_lookup, emc_apply_gradients
 *               and emc_insert cache it instead of bypassing the cache.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static emc_stats stats_of(const emc_cache *c) {
  emc_stats s;
  EMCT_OK(emc_get_stats(c, &s));
  return s;
}

static uint64_t table_rows(const emc_cache *c, uint32_t t) {
  uint64_t n;
  EMCT_OK(emc_get_table_rows_cached(c, t, &n));
  return n;
}

/* ------------------------------------------------------------------ wide rows */
#define WIDE_DIM 32768u                      /* f32: 131,072 bytes, slot stride the same */
#define WIDE_STRIDE (WIDE_DIM * 4u)
#define WIDE_CAPACITY ((size_t)640 << 10)    /* t1 = 0.95: 622,592 B; t2 = 0.8: 524,288 B */
#define SMALL_DIM 16u                        /* f32: 64 bytes */
#define SMALL_ROWS 7800u                     /* 499,200 B: above t1 * cap - WIDE_STRIDE, below t2 */

typedef enum { WIDE_PREFETCH, WIDE_LOOKUP, WIDE_APPLY, WIDE_INSERT, WIDE_CALLS } wide_call;
static const char *const WIDE_CALL_NAME[WIDE_CALLS] = {"emc_prefetch", "emc_lookup",
                                                       "emc_apply_gradients", "emc_insert"};

/* A store of one wide and one narrow dense table, and a default-threshold cache holding
 * SMALL_ROWS unpinned narrow rows: use lies in (t1 * cap - WIDE_STRIDE, t2 * cap]. */
static void wide_setup(emc_store **s, emc_cache **c) {
  static const emc_table_desc td[2] = {
      {"wide", EMC_TABLE_DENSE, 4, WIDE_DIM, EMC_DTYPE_F32, EMC_STATE_NONE},
      {"narrow", EMC_TABLE_DENSE, 20000, SMALL_DIM, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_cache_config cfg;
  emc__cache_debug d;
  uint64_t *ids = malloc(SMALL_ROWS * sizeof *ids), offs[3] = {0, 0, SMALL_ROWS}, i;
  float *out = malloc((size_t)SMALL_ROWS * SMALL_DIM * 4);
  emc_stats st;
  ck_assert(ids && out);
  EMCT_OK(emc_store_create(td, 2, s));
  EMCT_OK(emc_store_fill_uniform(*s, 0, -1.0f, 1.0f, 11));
  EMCT_OK(emc_store_fill_uniform(*s, 1, -1.0f, 1.0f, 12));
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = WIDE_CAPACITY;
  EMCT_OK(emc_cache_create(*s, &cfg, c));
  for (i = 0; i < SMALL_ROWS; i++) ids[i] = i;
  EMCT_OK(emc_lookup(*c, ids, offs, out, NULL));
  EMCT_OK(emc__cache_get_debug(*c, &d));
  st = stats_of(*c);
  /* the state the defect needs: no room for the wide row under t1, t2 already met */
  ck_assert_uint_eq(st.rows_cached, SMALL_ROWS);
  ck_assert_uint_eq(st.evictions, 0);
  ck_assert_uint_gt(st.bytes_in_use + WIDE_STRIDE, d.high_bytes);
  ck_assert_uint_le(st.bytes_in_use, d.low_bytes);
  ck_assert_uint_lt(d.high_bytes - d.low_bytes, WIDE_STRIDE);
  free(ids);
  free(out);
}

/* Each call that brings a row into the cache, on a fresh cache in the state above: the wide
 * row ends up cached (prefetch: pinned, EMC_OK), within t1, the narrow rows paying for it. */
START_TEST(wide_row_is_admitted) {
  const wide_call call = (wide_call)_i;
  const char *name = WIDE_CALL_NAME[call];
  emc_store *s;
  emc_cache *c;
  emc_stats s0, s1;
  emc__cache_debug d;
  uint64_t id = 2, offs[3] = {0, 1, 1};
  float *row = calloc(WIDE_DIM, sizeof *row), *want = malloc(WIDE_STRIDE);
  uint8_t where = 0xee;
  emc_status st = EMC_OK;
  uint32_t j;
  ck_assert(row && want);
  wide_setup(&s, &c);
  EMCT_OK(emc_store_read(s, 0, &id, 1, want));
  s0 = stats_of(c);
  switch (call) {
    case WIDE_PREFETCH: st = emc_prefetch(c, &id, offs, NULL); break;
    case WIDE_LOOKUP: st = emc_lookup(c, &id, offs, row, NULL); break;
    case WIDE_APPLY: {
      emc_optimizer o;
      emc_optimizer_init(&o);
      o.lr = 0.5f;
      for (j = 0; j < WIDE_DIM; j++) row[j] = 1.0f; /* w - 0.5 */
      st = emc_apply_gradients(c, &id, offs, row, &o, NULL);
      for (j = 0; j < WIDE_DIM; j++) want[j] = fmaf(-0.5f, 1.0f, want[j]);
      break;
    }
    case WIDE_INSERT:
      for (j = 0; j < WIDE_DIM; j++) want[j] = row[j] = (float)j * 0.25f;
      st = emc_insert(c, &id, offs, row, NULL);
      break;
    case WIDE_CALLS: break;
  }
  ck_assert_msg(st == EMC_OK, "%s of a %u-byte row: %s (%s)", name, WIDE_STRIDE,
                emc_status_name(st), emc_last_error_detail());
  s1 = stats_of(c);
  EMCT_OK(emc__cache_get_debug(c, &d));
  ck_assert_msg(table_rows(c, 0) == 1,
                "%s: the %u-byte row was not cached (%llu bytes of unpinned narrow rows were "
                "evictable)", name, WIDE_STRIDE, (unsigned long long)s0.bytes_in_use);
  ck_assert_uint_le(s1.bytes_in_use, d.high_bytes);
  ck_assert_uint_gt(s1.evictions, s0.evictions);
  ck_assert_uint_eq(d.calls_above_high, 0);
  if (call == WIDE_PREFETCH) {
    ck_assert_uint_eq(s1.pinned_rows, 1);
    ck_assert_uint_eq(s1.pinned_bytes, WIDE_STRIDE);
    ck_assert_uint_eq(s1.pin_shortfall, s0.pin_shortfall);
    ck_assert_uint_eq(s1.prefetched, s0.prefetched + 1);
  }
  /* the row reads as it should, from the cache */
  memset(row, 0, WIDE_STRIDE);
  EMCT_OK(emc_lookup_ex(c, &id, offs, row, &where, NULL));
  ck_assert_int_eq(where, EMC_WHERE_CACHE);
  ck_assert_msg(memcmp(row, want, WIDE_STRIDE) == 0, "%s: the wide row reads wrong", name);
  EMCT_OK(emc__cache_check(c));
  EMCT_OK(emc_cache_destroy(c));
  EMCT_OK(emc_store_read(s, 0, &id, 1, row)); /* destroy wrote it back */
  ck_assert_msg(memcmp(row, want, WIDE_STRIDE) == 0, "%s: the store's wide row is wrong", name);
  emc_store_destroy(s);
  free(row);
  free(want);
}
END_TEST

/* ------------------------------------------------------------------ main */
int main(void) {
  Suite *s = suite_create("train_edges");
  TCase *tw = tcase_create("wide");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tw, wide_row_is_admitted, 0, WIDE_CALLS);
  tcase_set_timeout(tw, emct_timeout(60));
  suite_add_tcase(s, tw);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
