/*
 * test_readme: the two C snippets of README.md, verbatim, compiled and run.
 * If you edit one, edit the other: tests/check_readme.py (a CTest test) compares them.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- README: An inference server ---- */
#include <embcache.h>
#include <stdio.h>

int serve(void);
int serve(void) {
  emc_table_desc tables[2] = {
    {"user", EMC_TABLE_DENSE, 1000000, 64, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"item", EMC_TABLE_HASHED, 500000, 32, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *store; emc_cache *cache; emc_cache_config cfg;
  if (emc_store_open("model.emc", &store) != EMC_OK &&        /* or build one: */
      emc_store_create(tables, 2, &store) != EMC_OK) return 1;
  emc_cache_config_init(&cfg);
  cfg.capacity_bytes = 256u << 20;                             /* 256 MiB of hot rows */
  if (emc_cache_create(store, &cfg, &cache) != EMC_OK) {
    fprintf(stderr, "%s\n", emc_last_error_detail()); return 1; }
  uint64_t ids[5] = {7, 42, 7, 0xdeadbeef, 12}, offsets[3] = {0, 3, 5};
  static unsigned char out[3 * 64 * 4 + 2 * 32 * 2];           /* emc_batch_bytes() */
  emc_status st = emc_lookup(cache, ids, offsets, out, NULL);  /* table 0: 3 ids, table 1: 2 */
  if (st != EMC_OK) fprintf(stderr, "%s: %s\n", emc_status_name(st), emc_last_error_detail());
  emc_cache_destroy(cache);
  emc_store_destroy(store);
  return st != EMC_OK;
}

/* ---- README: A trainer ---- */
emc_status train_step(emc_cache *cache, const uint64_t *ids, const uint64_t *offsets,
                      float *rows, const float *grads, size_t n_floats, float lr);
/* step: look rows up, update them, write them back through the cache */
emc_status train_step(emc_cache *cache, const uint64_t *ids, const uint64_t *offsets,
                      float *rows, const float *grads, size_t n_floats, float lr) {
  emc_status st = emc_lookup(cache, ids, offsets, rows, NULL);  /* rows: (n, dim) packed */
  if (st != EMC_OK) return st;
  for (size_t i = 0; i < n_floats; i++) rows[i] -= lr * grads[i];
  return emc_insert(cache, ids, offsets, rows, NULL);            /* dirty until evicted */
}
/* ... at a checkpoint: emc_flush(cache, NULL); emc_store_save(store, "ckpt.emc"); */
/* ---- end of README snippets ---- */

START_TEST(inference_snippet_runs) { ck_assert_int_eq(serve(), 0); }
END_TEST

/* The trainer snippet, run for a few steps against a plain reference of the same updates. */
START_TEST(trainer_snippet_matches_reference) {
  enum { ROWS = 5000, DIM = 8, N = 64, STEPS = 200 };
  emc_table_desc td = {"emb", EMC_TABLE_DENSE, ROWS, DIM, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *store;
  emc_cache *cache;
  emc_cache_config cfg;
  float *ref = calloc((size_t)ROWS * DIM, sizeof *ref), rows[N * DIM], grads[N * DIM], got[DIM];
  uint64_t ids[N], offsets[2] = {0, N}, seed = 99;
  int step, i, j;
  ck_assert_int_eq(emc_store_create(&td, 1, &store), EMC_OK);
  ck_assert_int_eq(emc_store_fill_uniform(store, 0, -1, 1, 5), EMC_OK);
  for (i = 0; i < ROWS; i++)
    ck_assert_int_eq(emc_uniform_row(5, 0, (uint64_t)i, -1, 1, DIM, EMC_DTYPE_F32, ref + i * DIM), EMC_OK);
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 40000; /* far fewer rows than the table: evictions write rows back */
  ck_assert_int_eq(emc_cache_create(store, &cfg, &cache), EMC_OK);
  for (step = 0; step < STEPS; step++) {
    for (i = 0; i < N; i++)
      ids[i] = ((seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33) % ROWS;
    for (i = 0; i < N * DIM; i++) grads[i] = (float)((i * 7 + step) % 13) / 13.0f;
    ck_assert_int_eq(train_step(cache, ids, offsets, rows, grads, N * DIM, 0.1f), EMC_OK);
    /* the reference: each position reads the row as it was before the step; duplicates:
     * the last position's update wins, as emc_insert documents */
    for (i = 0; i < N; i++)
      for (j = 0; j < DIM; j++) ck_assert_float_eq(rows[i * DIM + j], ref[ids[i] * DIM + j] - 0.1f * grads[i * DIM + j]);
    for (i = 0; i < N; i++) memcpy(ref + ids[i] * DIM, rows + i * DIM, sizeof(float) * DIM);
  }
  ck_assert_int_eq(emc_flush(cache, NULL), EMC_OK);
  for (i = 0; i < ROWS; i++) {
    uint64_t id = (uint64_t)i;
    ck_assert_int_eq(emc_store_read(store, 0, &id, 1, got), EMC_OK);
    ck_assert_msg(memcmp(got, ref + i * DIM, sizeof got) == 0, "row %d differs after flush", i);
  }
  ck_assert_int_eq(emc_cache_destroy(cache), EMC_OK);
  emc_store_destroy(store);
  free(ref);
}
END_TEST

int main(void) {
  Suite *s = suite_create("readme");
  TCase *tc = tcase_create("snippets");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, inference_snippet_runs);
  tcase_add_test(tc, trainer_snippet_matches_reference);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
