/*
 * cache_edges.c: test_cache's edge cases (cache_common.h): empty batches and segments,
 * all-duplicate batches, absent hashed ids, the unified index, hashed key collisions,
 * emc_lookup_ex's where[], the index sized by the store, a table that finds no page.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_common.h"

/* ------------------------------------------------------------------ (f) edges */
static const emct_tspec edge_spec[3] = {{EMC_TABLE_DENSE, 1000, 4, EMC_DTYPE_F32, 0, 0},
                                        {EMC_TABLE_HASHED, 500, 9, EMC_DTYPE_F16, 600, 300},
                                        {EMC_TABLE_DENSE, 200, 2, EMC_DTYPE_F16, 0, 0}};

START_TEST(empty_batches_and_segments) {
  emct_world w;
  emc_cache *c;
  uint64_t zero[4] = {0, 0, 0, 0}, ids[8], ranks[8], offs[4];
  unsigned char out[256], rows[256];
  uint8_t where[8];
  emc_stats s0, s1;
  size_t bytes = 1;
  emct_world_init(&w, edge_spec, 3, 1.0, 51);
  c = make_cache(&w, 1 << 16, 0.95f, 0.8f, 64, 1000);
  s0 = get_stats(c);
  /* an empty batch: NULL ids, out and where are fine */
  EMCT_OK(emc_batch_bytes(w.store, zero, &bytes));
  ck_assert_uint_eq(bytes, 0);
  EMCT_OK(emc_lookup(c, NULL, zero, NULL, NULL));
  EMCT_OK(emc_lookup_ex(c, NULL, zero, NULL, NULL, NULL));
  EMCT_OK(emc_insert(c, NULL, zero, NULL, NULL));
  EMCT_OK(emc_lookup(c, ids, zero, out, NULL));
  s1 = get_stats(c);
  ck_assert_msg(memcmp(&s0, &s1, sizeof s0) == 0, "an empty batch changed the stats");
  emct_check_cache(c, &w, 1, "empty batch");
  /* empty first, middle and last segments */
  {
    uint64_t cnt[3][3] = {{0, 3, 2}, {3, 0, 2}, {2, 3, 0}};
    int k;
    for (k = 0; k < 3; k++) {
      emct_world_batch(&w, cnt[k], ids, ranks, offs);
      EMCT_OK(emc_batch_bytes(w.store, offs, &bytes));
      ck_assert_uint_eq(bytes, emct_world_batch_bytes(&w, offs));
      lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "empty segment");
      lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "empty segment again");
    }
    /* insert with an empty segment */
    emct_world_batch(&w, cnt[1], ids, ranks, offs);
    pattern_batch(&w, ids, offs, 61, rows);
    EMCT_OK(emc_insert(c, ids, offs, rows, NULL));
    emct_world_apply_insert(&w, ranks, offs, rows);
    lookup_checked(c, &w, ids, ranks, offs, out, where, 0, "insert with empty segment");
    EMCT_OK(emc_flush(c, NULL));
    emct_world_check_store(&w, "empty segments");
  }
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

START_TEST(all_duplicate_batch) {
  emct_world w;
  emc_cache *c;
  enum { N = 300 };
  uint64_t ids[N], ranks[N], offs[4] = {0, N, N, N}, i;
  unsigned char out[N * 18];
  uint8_t where[N];
  emc_stats s;
  emct_world_init(&w, edge_spec, 3, 1.0, 52);
  c = make_cache(&w, 1 << 16, 0.95f, 0.8f, 64, 1000);
  for (i = 0; i < N; i++) ranks[i] = ids[i] = 417;
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "all duplicates, cold");
  for (i = 0; i < N; i++) ck_assert_int_eq(where[i], EMC_WHERE_STORE);
  s = get_stats(c);
  ck_assert_uint_eq(s.misses, N);
  ck_assert_uint_eq(s.admissions, 1);
  ck_assert_uint_eq(s.rows_cached, 1);
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "all duplicates, warm");
  for (i = 0; i < N; i++) ck_assert_int_eq(where[i], EMC_WHERE_CACHE);
  s = get_stats(c);
  ck_assert_uint_eq(s.hits, N);
  ck_assert_uint_eq(s.admissions, 1);
  /* a present hashed id repeated */
  offs[1] = 0;
  offs[2] = offs[3] = N;
  for (i = 0; i < N; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = 5);
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "hashed duplicates");
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "hashed duplicates warm");
  for (i = 0; i < N; i++) ck_assert_int_eq(where[i], EMC_WHERE_CACHE);
  ck_assert_uint_eq(get_stats(c).rows_cached, 2);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

START_TEST(absent_hashed_ids) {
  emct_world w;
  emc_cache *c;
  uint64_t ids[40], ranks[40], offs[4] = {0, 0, 40, 40}, i, cnt;
  unsigned char out[40 * 18];
  uint8_t where[40];
  emc_stats s;
  emct_world_init(&w, edge_spec, 3, 1.0, 53);
  c = make_cache(&w, 1 << 16, 0.95f, 0.8f, 64, 1000);
  for (i = 0; i < 40; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = 300 + (i % 20)); /* absent */
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "absent ids");
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "absent ids again");
  for (i = 0; i < 40 * 18; i++) ck_assert_int_eq(out[i], 0);
  for (i = 0; i < 40; i++) ck_assert_int_eq(where[i], EMC_WHERE_ABSENT);
  s = get_stats(c);
  ck_assert_uint_eq(s.absent, 80);
  ck_assert_uint_eq(s.misses, 0);
  ck_assert_uint_eq(s.hits, 0);
  ck_assert_uint_eq(s.admissions, 0);
  ck_assert_uint_eq(s.admit_skipped, 0);
  ck_assert_uint_eq(s.rows_cached, 0);
  /* a lookup does not create the id in the store */
  EMCT_OK(emc_store_table_count(w.store, 1, &cnt));
  ck_assert_uint_eq(cnt, 300);
  /* mixed present and absent ids in one segment */
  for (i = 0; i < 40; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = (i * 37) % 600);
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "mixed present/absent");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* Evicted hashed rows leave unified-index (HOST) entries; lookups through them are right,
 * counted as unified hits, and re-admit; inserts onto them work. _i: unified_index_rows
 * 65536, 8, 0. */
START_TEST(unified_index) {
  static const emct_tspec spec[2] = {{EMC_TABLE_HASHED, 4000, 16, EMC_DTYPE_F32, 4000, 3500},
                                     {EMC_TABLE_DENSE, 2000, 8, EMC_DTYPE_F16, 0, 0}};
  static const uint64_t urows[3] = {65536, 8, 0};
  emct_world w;
  emc_cache *c;
  uint64_t counts[2] = {200, 50}, ids[250], ranks[250], offs[3], b;
  unsigned char out[250 * 64], rows[250 * 64];
  uint8_t where[250];
  emc_stats s;
  emct_world_init(&w, spec, 2, 0.9, 61 + (uint64_t)_i);
  c = make_cache(&w, 300 * 64, 0.95f, 0.8f, 64, urows[_i]);
  for (b = 0; b < emct_scale(80, 4); b++) {
    emct_world_batch(&w, counts, ids, ranks, offs);
    lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "unified lookups");
  }
  s = get_stats(c);
  ck_assert_uint_gt(s.evictions, 0);
  if (urows[_i] == 0) ck_assert_uint_eq(s.unified_hits, 0);
  else ck_assert_msg(s.unified_hits > 0, "no unified hit with %llu entries",
                     (unsigned long long)urows[_i]);
  /* inserts over ids that may hold HOST entries, and new ids */
  for (b = 0; b < 10; b++) {
    emct_world_batch(&w, counts, ids, ranks, offs);
    pattern_batch(&w, ids, offs, 70 + b, rows);
    EMCT_OK(emc_insert(c, ids, offs, rows, NULL));
    emct_world_apply_insert(&w, ranks, offs, rows);
    emct_check_cache(c, &w, 0, "unified insert");
    emct_world_batch(&w, counts, ids, ranks, offs);
    lookup_checked(c, &w, ids, ranks, offs, out, where, 0, "unified after insert");
  }
  EMCT_OK(emc_flush(c, NULL));
  emct_world_check_store(&w, "unified flush");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* The smallest case: one hashed row is evicted by a pass and demoted to a unified entry; the
 * next lookup of it must resolve through that entry (a unified hit). */
START_TEST(unified_entry_after_one_eviction) {
  static const emct_tspec spec[1] = {{EMC_TABLE_HASHED, 100, 16, EMC_DTYPE_F32, 100, 100}};
  emct_world w;
  emc_cache *c;
  uint64_t ids[10], ranks[10], offs[2], i, n_store = 0;
  unsigned char out[10 * 64];
  uint8_t where[10];
  emc_stats s;
  emct_world_init(&w, spec, 1, 1.0, 81);
  /* 64-byte rows, capacity 640: t1 = 608 bytes (9 rows), t2 = 512 bytes (8 rows) */
  c = make_cache(&w, 640, 0.95f, 0.80f, 64, 65536);
  for (i = 0; i < 8; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = i);
  offs[0] = 0;
  offs[1] = 8;
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "8 rows");
  for (i = 0; i < 2; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = 8 + i);
  offs[1] = 2;
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "2 more rows: one pass");
  s = get_stats(c);
  ck_assert_uint_eq(s.evict_passes, 1);
  ck_assert_uint_eq(s.evictions, 1);
  for (i = 0; i < 8; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = i);
  offs[1] = 8;
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "the first 8 again");
  for (i = 0; i < 8; i++) n_store += where[i] == EMC_WHERE_STORE;
  ck_assert_uint_eq(n_store, 1);
  s = get_stats(c);
  ck_assert_msg(s.unified_hits == 1,
                "the evicted hashed row did not resolve through a unified-index entry "
                "(unified_hits %llu, unified_index_rows 65536)", (unsigned long long)s.unified_hits);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

typedef struct kid {
  uint64_t key, id;
} kid;
static int cmp_kid(const void *a, const void *b) {
  const kid *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Two hashed ids with the same 32-bit global key: both served right; the second never cached;
 * an insert of it is written through. */
START_TEST(hashed_key_collision) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 1000, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 64, 4, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *st;
  emc_cache *c;
  emc_cache_config cfg;
  enum { N = 1 << 18 };
  kid *v = malloc(N * sizeof *v);
  uint64_t i, a = 0, bb = 0, ka, kb, ids[2], offs[3] = {0, 0, 1};
  float ra[4] = {1, 2, 3, 4}, rb[4] = {5, 6, 7, 8}, rn[4] = {9, 10, 11, 12}, got[4], two[8];
  uint8_t where[2];
  int found = 0;
  emc_stats s;
  ck_assert(v != NULL);
  EMCT_OK(emc_store_create(td, 2, &st));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.key_bits = 32;
  cfg.capacity_bytes = 1 << 16;
  cfg.hash_seed = 12345;
  EMCT_OK(emc_cache_create(st, &cfg, &c));
  for (i = 0; i < N; i++) {
    v[i].id = emc__fmix64(i + 1);
    EMCT_OK(emc_cache_global_key(c, 1, v[i].id, &v[i].key, NULL, NULL));
  }
  EMCT_OK(emc_cache_destroy(c));
  qsort(v, N, sizeof *v, cmp_kid);
  for (i = 1; i < N && !found; i++)
    if (v[i].key == v[i - 1].key) {
      a = v[i - 1].id;
      bb = v[i].id;
      found = 1;
    }
  free(v);
  ck_assert_msg(found, "no 32-bit key collision among %d hashed ids", N);
  ck_assert(a != bb);
  EMCT_OK(emc_store_write(st, 1, &a, 1, ra));
  EMCT_OK(emc_store_write(st, 1, &bb, 1, rb));
  EMCT_OK(emc_cache_create(st, &cfg, &c));
  EMCT_OK(emc_cache_global_key(c, 1, a, &ka, NULL, NULL));
  EMCT_OK(emc_cache_global_key(c, 1, bb, &kb, NULL, NULL));
  ck_assert_uint_eq(ka, kb);
  /* a first: admitted */
  ids[0] = a;
  EMCT_OK(emc_lookup_ex(c, ids, offs, got, where, NULL));
  ck_assert(memcmp(got, ra, 16) == 0);
  ck_assert_int_eq(where[0], EMC_WHERE_STORE);
  ck_assert_uint_eq(get_stats(c).rows_cached, 1);
  /* b: from the store, right row, not admitted */
  ids[0] = bb;
  EMCT_OK(emc_lookup_ex(c, ids, offs, got, where, NULL));
  ck_assert_msg(memcmp(got, rb, 16) == 0, "colliding id got the other id's row");
  ck_assert_int_eq(where[0], EMC_WHERE_STORE);
  s = get_stats(c);
  ck_assert_uint_eq(s.rows_cached, 1);
  ck_assert_uint_eq(s.admissions, 1);
  /* both in one batch */
  ids[0] = a;
  ids[1] = bb;
  offs[2] = 2;
  EMCT_OK(emc_lookup_ex(c, ids, offs, two, where, NULL));
  ck_assert(memcmp(two, ra, 16) == 0 && memcmp(two + 4, rb, 16) == 0);
  ck_assert_int_eq(where[0], EMC_WHERE_CACHE);
  ck_assert_int_eq(where[1], EMC_WHERE_STORE);
  /* insert b: written through to the store at once */
  offs[2] = 1;
  ids[0] = bb;
  EMCT_OK(emc_insert(c, ids, offs, rn, NULL));
  s = get_stats(c);
  ck_assert_uint_eq(s.dirty_rows, 0);
  ck_assert_uint_eq(s.rows_cached, 1);
  EMCT_OK(emc_store_read(st, 1, &bb, 1, got));
  ck_assert(memcmp(got, rn, 16) == 0);
  EMCT_OK(emc_lookup(c, ids, offs, got, NULL));
  ck_assert(memcmp(got, rn, 16) == 0);
  ids[0] = a;
  EMCT_OK(emc_lookup(c, ids, offs, got, NULL));
  ck_assert(memcmp(got, ra, 16) == 0);
  ck_assert_int_eq(emc__cache_check(c), EMC_OK);
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(st);
}
END_TEST

/* ------------------------------------------------------------------ (g) lookup_ex */
START_TEST(lookup_ex_where) {
  emct_world w;
  emc_cache *c;
  uint64_t ids[60], ranks[60], offs[4] = {0, 20, 50, 60}, i;
  unsigned char out1[60 * 18], out2[60 * 18];
  uint8_t where[60];
  emct_world_init(&w, edge_spec, 3, 1.0, 71);
  c = make_cache(&w, 1 << 20, 0.95f, 0.8f, 64, 1000);
  for (i = 0; i < 20; i++) ranks[i] = i / 2; /* duplicates */
  for (i = 20; i < 50; i++) ranks[i] = (i - 20) * 20; /* 0..580: 300+ absent */
  for (i = 50; i < 60; i++) ranks[i] = i;
  for (i = 0; i < 60; i++) ids[i] = emct_id_of(&w, i < 20 ? 0 : i < 50 ? 1 : 2, ranks[i]);
  lookup_checked(c, &w, ids, ranks, offs, out1, where, 1, "cold");
  for (i = 0; i < 60; i++) {
    int absent = i >= 20 && i < 50 && ranks[i] >= 300;
    ck_assert_int_eq(where[i], absent ? EMC_WHERE_ABSENT : EMC_WHERE_STORE);
  }
  ck_assert_uint_eq(get_stats(c).admissions, 10 + 15 + 10);
  lookup_checked(c, &w, ids, ranks, offs, out2, where, 1, "warm");
  for (i = 0; i < 60; i++) {
    int absent = i >= 20 && i < 50 && ranks[i] >= 300;
    ck_assert_int_eq(where[i], absent ? EMC_WHERE_ABSENT : EMC_WHERE_CACHE);
  }
  ck_assert(memcmp(out1, out2, emct_world_batch_bytes(&w, offs)) == 0);
  /* emc_lookup (where NULL) gives the same rows */
  memset(out2, 0x5a, sizeof out2);
  EMCT_OK(emc_lookup(c, ids, offs, out2, NULL));
  ck_assert(memcmp(out1, out2, emct_world_batch_bytes(&w, offs)) == 0);
  EMCT_OK(emc_lookup_ex(c, ids, offs, out2, NULL, NULL));
  ck_assert(memcmp(out1, out2, emct_world_batch_bytes(&w, offs)) == 0);
  /* bytes past the batch are untouched */
  ck_assert_int_eq(out2[emct_world_batch_bytes(&w, offs)], 0x5a);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* A budget larger than the store: the index is sized for the rows the store can hold (dense
 * rows + hashed capacity), not for the rows the budget could hold (an eviction pass walks the
 * whole index). The cache then takes every row of the store, the index at its design load, and
 * serves them all as hits. _i: 32- and 64-bit keys. */
START_TEST(index_sized_by_store) {
  static const emct_tspec spec[2] = {{EMC_TABLE_DENSE, 1000, 4, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_HASHED, 500, 8, EMC_DTYPE_F16, 500, 400}};
  const uint64_t rows = 1000 + 500, bound = ((uint64_t)((double)rows / 0.92 / 8) + 2) * 8;
  emct_world w;
  emc_cache *c;
  uint64_t ids[1500], ranks[1500], offs[3] = {0, 1000, 1400}, i;
  unsigned char out[1500 * 16], rows_in[100 * 16];
  uint8_t where[1500];
  emc__cache_debug d;
  emct_world_init(&w, spec, 2, 1.0, 83 + (uint64_t)_i);
  c = make_cache(&w, (size_t)64 << 20, 0.95f, 0.8f, _i ? 64 : 32, (uint64_t)1 << 20);
  d = get_debug(c);
  ck_assert_msg(d.index_slots >= rows && d.index_slots <= bound,
                "index of %llu entries for a store of %llu rows (expected at most %llu)",
                (unsigned long long)d.index_slots, (unsigned long long)rows,
                (unsigned long long)bound);
  for (i = 0; i < 1000; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = i);
  for (i = 1000; i < 1400; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = i - 1000);
  lookup_checked(c, &w, ids, ranks, offs, out, where, 1, "every row, cold");
  /* the hashed table's last 100 ids are created by an insert: the store is then full */
  {
    uint64_t ioffs[3] = {0, 0, 100};
    for (i = 0; i < 100; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = 400 + i);
    pattern_batch(&w, ids, ioffs, 7, rows_in);
    EMCT_OK(emc_insert(c, ids, ioffs, rows_in, NULL));
    emct_world_apply_insert(&w, ranks, ioffs, rows_in);
    emct_check_cache(c, &w, 0, "store full");
  }
  offs[2] = 1500;
  for (i = 0; i < 1000; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = i);
  for (i = 1000; i < 1500; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = i - 1000);
  lookup_checked(c, &w, ids, ranks, offs, out, where, 0, "every row, warm");
  for (i = 0; i < rows; i++) ck_assert_int_eq(where[i], EMC_WHERE_CACHE);
  ck_assert_uint_eq(get_stats(c).rows_cached, rows);
  ck_assert_uint_eq(get_stats(c).evictions, 0);
  EMCT_OK(emc_flush(c, NULL));
  emct_world_check_store(&w, "flush");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* A page belongs to one table until it is empty. Table 0's rows, evicted in LRU order by
 * the passes of a uniform load, leave free slots in every page table 0 holds; when the load
 * moves to table 1, its misses find no page, the bytes in use stay under t1, and no pass
 * runs: table 1 kept 180 of a 250-row working set for good, every later miss skipped, with
 * 55 KiB of a 64 KiB cache in use and table 0's rows never read again. A table that finds no
 * page must take one back: the page whose newest row is oldest, its rows evicted. Loop 0:
 * table 0's rows looked up; 1: inserted (dirty: a page taken back writes them back first); 2:
 * looked up, then 8 of them pinned by emc_prefetch (their pages are not taken). */
START_TEST(a_table_without_pages_takes_one_back) {
  static const emct_tspec spec[2] = {{EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0}};
  enum { A_BATCH = 100, A_BATCHES = 300, B_ROWS = 250, B_REPS = 8, PINS = 8 };
  static uint64_t ids[B_ROWS], ranks[B_ROWS], pin_ids[PINS];
  static unsigned char out[B_ROWS * 64], rows[A_BATCH * 64];
  static uint8_t where[B_ROWS];
  emct_world w;
  emct_rng rng;
  emc_cache *c;
  emc_stats st;
  uint64_t offs[3], i;
  int b;
  emct_world_init(&w, spec, 2, 1.0, 91);
  c = make_cache(&w, 64u << 10, 0.95f, 0.8f, 64, 0);
  emct_rng_seed(&rng, 7);
  for (b = 0; b < A_BATCHES; b++) { /* table 0, uniform: LRU passes leave holes everywhere */
    for (i = 0; i < A_BATCH; i++) ids[i] = emct_id_of(&w, 0, ranks[i] = emct_rng_below(&rng, 20000));
    offs[0] = 0, offs[1] = A_BATCH, offs[2] = A_BATCH;
    if (_i == 1) {
      pattern_batch(&w, ids, offs, (uint64_t)b, rows);
      EMCT_OK(emc_insert(c, ids, offs, rows, NULL));
      emct_world_apply_insert(&w, ranks, offs, rows);
    } else {
      EMCT_OK(emc_lookup(c, ids, offs, out, NULL));
    }
  }
  ck_assert_uint_gt(get_stats(c).evictions, 0);
  if (_i == 2) { /* the last batch's first ids, pinned */
    memcpy(pin_ids, ids, sizeof pin_ids);
    offs[0] = 0, offs[1] = PINS, offs[2] = PINS;
    EMCT_OK(emc_prefetch(c, pin_ids, offs, NULL));
    ck_assert_uint_gt(get_stats(c).pinned_rows, 0);
  }
  for (b = 0; b < B_REPS; b++) { /* then table 1 only */
    uint64_t skipped = get_stats(c).admit_skipped;
    for (i = 0; i < B_ROWS; i++) ids[i] = emct_id_of(&w, 1, ranks[i] = i);
    offs[0] = 0, offs[1] = 0, offs[2] = B_ROWS;
    lookup_checked(c, &w, ids, ranks, offs, out, where, _i != 1, "table 1");
    st = get_stats(c);
    if (b == 0) continue;
    for (i = 0; i < B_ROWS; i++)
      ck_assert_msg(where[i] == EMC_WHERE_CACHE, "repeat %d: table 1 row %llu missed (%llu of "
                    "%llu bytes in use, %llu bytes of pages held, %llu misses skipped)", b,
                    (unsigned long long)i, (unsigned long long)st.bytes_in_use,
                    (unsigned long long)st.capacity_bytes, (unsigned long long)st.bytes_reserved,
                    (unsigned long long)st.admit_skipped);
    ck_assert_uint_eq(st.admit_skipped, skipped);
  }
  if (_i == 2) { /* the pinned rows stayed */
    offs[0] = 0, offs[1] = PINS, offs[2] = PINS;
    for (i = 0; i < PINS; i++) ranks[i] = pin_ids[i];
    lookup_checked(c, &w, pin_ids, ranks, offs, out, where, 1, "pinned rows");
    for (i = 0; i < PINS; i++) ck_assert_int_eq(where[i], EMC_WHERE_CACHE);
  }
  EMCT_OK(emc_flush(c, NULL));
  emct_world_check_store(&w, "after pages were taken back"); /* dirty rows written back */
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

void cache_edges_tests(TCase *te) {
  tcase_add_test(te, empty_batches_and_segments);
  tcase_add_test(te, all_duplicate_batch);
  tcase_add_test(te, absent_hashed_ids);
  tcase_add_loop_test(te, unified_index, 0, 3);
  tcase_add_test(te, unified_entry_after_one_eviction);
  tcase_add_test(te, hashed_key_collision);
  tcase_add_test(te, lookup_ex_where);
  tcase_add_loop_test(te, index_sized_by_store, 0, 2);
  tcase_add_loop_test(te, a_table_without_pages_takes_one_back, 0, 3);
}
