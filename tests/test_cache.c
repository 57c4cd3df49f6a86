/*
 * test_cache: the host cache against a reference model (its parts: cache_common.h).
 *
 *   zipf         lookups on Zipf batches equal the reference (dense, hashed, mixed; f32, f16;
 *                several dims) with caches small enough to evict all the time; the cache's
 *                structure and stats invariants are checked after every call.
 *   insert       inserts are seen by lookups, reach the store on flush, on eviction (without a
 *                flush) and on destroy; duplicates in one insert: the last wins; new hashed ids.
 *   big batch    a batch with more distinct rows than the whole cache.
 *   invariants   resident + evicted == admitted, use <= t1 after every call, <= t2 after every
 *                pass, per-table rows add up.
 *   hit ratio    between exact LRU at t2 * capacity and at t1 * capacity (1 point of slack).
 *   edges        empty batches and segments, all-duplicate batches, absent hashed ids, the
 *                unified index, hashed key collisions, emc_lookup_ex's where[] (cache_edges.c).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_common.h"

typedef struct zcfg {
  const char *name;
  emct_tspec spec[4];
  uint32_t n;
  double frac;        /* capacity as a fraction of all rows' stride bytes */
  uint64_t per_table; /* ids per table per batch */
  uint32_t key_bits;
} zcfg;

static const zcfg zcfgs[] = {
    {"dense f32", {{EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0},
                   {EMC_TABLE_DENSE, 3000, 5, EMC_DTYPE_F32, 0, 0}}, 2, 0.03, 200, 64},
    {"dense f16 32-bit keys", {{EMC_TABLE_DENSE, 9000, 24, EMC_DTYPE_F16, 0, 0},
                               {EMC_TABLE_DENSE, 700, 3, EMC_DTYPE_F16, 0, 0}}, 2, 0.05, 150, 32},
    {"hashed f16", {{EMC_TABLE_HASHED, 6000, 8, EMC_DTYPE_F16, 8000, 5000},
                    {EMC_TABLE_HASHED, 2000, 33, EMC_DTYPE_F16, 2000, 2000}}, 2, 0.04, 200, 64},
    {"hashed f32", {{EMC_TABLE_HASHED, 5000, 12, EMC_DTYPE_F32, 5000, 4000}}, 1, 0.05, 300, 32},
    {"mixed", {{EMC_TABLE_DENSE, 10000, 7, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 4000, 33, EMC_DTYPE_F16, 5000, 3000},
               {EMC_TABLE_DENSE, 50, 1, EMC_DTYPE_F16, 0, 0},
               {EMC_TABLE_HASHED, 3000, 64, EMC_DTYPE_F32, 3000, 2500}}, 4, 0.03, 150, 64},
};
#define N_ZCFG (sizeof zcfgs / sizeof zcfgs[0])

/* ------------------------------------------------------------------ (a) Zipf */
START_TEST(zipf_lookups_match_reference) {
  const zcfg *z = &zcfgs[_i];
  emct_world w;
  emc_cache *c;
  uint64_t counts[4], per = z->per_table, b, nb = emct_scale(60, 4), total, t;
  uint64_t *ids, *ranks, offsets[5];
  unsigned char *out;
  uint8_t *where;
  emc_stats s;
  emc__cache_debug d;
  char what[128];
  uint64_t absent_possible = 0;
  emct_world_init(&w, z->spec, z->n, 1.05, 1000 + (uint64_t)_i);
  c = make_cache(&w, (size_t)((double)world_stride_bytes(&w) * z->frac), 0.95f, 0.80f,
                 z->key_bits, 65536);
  for (t = 0; t < z->n; t++) {
    counts[t] = per;
    absent_possible |= w.spec[t].present < w.spec[t].universe;
  }
  ids = malloc(per * z->n * sizeof *ids);
  ranks = malloc(per * z->n * sizeof *ranks);
  where = malloc(per * z->n);
  out = malloc(max_batch_bytes(&w, per));
  ck_assert(ids && ranks && where && out);
  emct_check_cache(c, &w, 1, "fresh cache");
  for (b = 0; b < nb; b++) {
    total = emct_world_batch(&w, counts, ids, ranks, offsets);
    ck_assert_uint_eq(total, per * z->n);
    snprintf(what, sizeof what, "%s: batch %llu", z->name, (unsigned long long)b);
    lookup_checked(c, &w, ids, ranks, offsets, out, where, 1, what);
    /* the same batch again: still right (rows admitted by the first pass may be evicted) */
    if (b % 7 == 3) lookup_checked(c, &w, ids, ranks, offsets, out, where, 1, what);
  }
  s = get_stats(c);
  d = get_debug(c);
  ck_assert_msg(s.evictions > 0 && s.evict_passes > 0, "%s: no evictions (%llu) or passes (%llu)",
                z->name, (unsigned long long)s.evictions, (unsigned long long)s.evict_passes);
  ck_assert_msg(s.hits > 0 && s.misses > 0 && s.admissions > 0, "%s: hits %llu misses %llu",
                z->name, (unsigned long long)s.hits, (unsigned long long)s.misses);
  ck_assert_msg(d.max_bytes_after_pass <= d.low_bytes, "%s: a pass ended at %llu > t2 %llu",
                z->name, (unsigned long long)d.max_bytes_after_pass, (unsigned long long)d.low_bytes);
  if (absent_possible) ck_assert_msg(s.absent > 0, "%s: no absent hashed id looked up", z->name);
  else ck_assert_uint_eq(s.absent, 0);
  ck_assert_uint_eq(s.inserts, 0);
  ck_assert_uint_eq(s.writebacks, 0);
  EMCT_OK(emc_cache_destroy(c));
  /* nothing was inserted: the store is unchanged */
  emct_world_check_store(&w, z->name);
  free(ids); free(ranks); free(where); free(out);
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ (b) inserts */
static const emct_tspec ins_spec[3] = {
    {EMC_TABLE_DENSE, 5000, 12, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_HASHED, 3000, 6, EMC_DTYPE_F16, 3000, 1000},
    {EMC_TABLE_DENSE, 800, 40, EMC_DTYPE_F16, 0, 0}};

/* _i: 0 = a cache big enough for everything, 1 = a small cache that evicts all the time */
START_TEST(insert_lookup_flush) {
  emct_world w;
  emc_cache *c;
  uint64_t counts[3] = {60, 40, 30}, lcounts[3] = {100, 80, 50}, offsets[4], loff[4];
  uint64_t ids[400], ranks[400], lids[400], lranks[400], r, rounds = emct_scale(80, 4);
  unsigned char *rows, *out;
  uint8_t where[400];
  uint64_t count0, count1;
  emc_stats s;
  char what[96];
  emct_world_init(&w, ins_spec, 3, 0.9, 77 + (uint64_t)_i);
  rows = malloc(max_batch_bytes(&w, 400));
  out = malloc(max_batch_bytes(&w, 400));
  ck_assert(rows && out);
  c = make_cache(&w, _i == 0 ? (size_t)world_stride_bytes(&w) * 2 : 24000, 0.9f, 0.6f, 64, 1024);
  EMCT_OK(emc_store_table_count(w.store, 1, &count0));
  ck_assert_uint_eq(count0, 1000);
  for (r = 0; r < rounds; r++) {
    uint64_t n = emct_world_batch(&w, counts, ids, ranks, offsets), k;
    /* the first round inserts ids never looked up (not cached) */
    pattern_batch(&w, ids, offsets, r + 1, rows);
    EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
    emct_world_apply_insert(&w, ranks, offsets, rows);
    snprintf(what, sizeof what, "round %llu insert", (unsigned long long)r);
    emct_check_cache(c, &w, 0, what);
    /* the inserted ids themselves: every row is the last inserted value */
    lookup_checked(c, &w, ids, ranks, offsets, out, where, 0, what);
    for (k = 0; k < n; k++)
      ck_assert_msg(where[k] != EMC_WHERE_ABSENT, "%s: inserted id absent", what);
    /* and a Zipf batch */
    emct_world_batch(&w, lcounts, lids, lranks, loff);
    snprintf(what, sizeof what, "round %llu lookup", (unsigned long long)r);
    lookup_checked(c, &w, lids, lranks, loff, out, where, 0, what);
    if (r % 16 == 15) {
      if (_i == 0 && r == 15) { /* big cache: nothing written back before the first flush */
        ck_assert_uint_eq(get_stats(c).writebacks, 0);
        ck_assert_msg(get_stats(c).dirty_rows > 0, "big cache: no dirty rows");
      }
      EMCT_OK(emc_flush(c, NULL));
      s = get_stats(c);
      ck_assert_uint_eq(s.dirty_rows, 0);
      emct_world_check_store(&w, "after a flush mid-run");
      emct_check_cache(c, &w, 0, "after flush");
    }
  }
  s = get_stats(c);
  ck_assert_uint_eq(s.inserts, rounds * (counts[0] + counts[1] + counts[2]));
  if (_i == 0) {
    ck_assert_uint_eq(s.evictions, 0);
  } else {
    ck_assert_msg(s.evictions > 0 && s.writebacks > 0, "small cache: evictions %llu writebacks %llu",
                  (unsigned long long)s.evictions, (unsigned long long)s.writebacks);
  }
  /* new hashed ids reserved store rows */
  EMCT_OK(emc_store_table_count(w.store, 1, &count1));
  ck_assert_msg(count1 > count0, "no new hashed id was inserted (%llu)", (unsigned long long)count1);
  EMCT_OK(emc_flush(c, NULL));
  s = get_stats(c);
  ck_assert_uint_eq(s.dirty_rows, 0);
  emct_check_cache(c, &w, 0, "final flush");
  emct_world_check_store(&w, "after the final flush");
  /* a flush with nothing dirty writes nothing */
  EMCT_OK(emc_flush(c, NULL));
  ck_assert_uint_eq(get_stats(c).writebacks, s.writebacks);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "after destroy");
  free(rows); free(out);
  emct_world_free(&w);
}
END_TEST

/* Duplicates in one insert: the last one wins, in a big cache and in a one-row cache (where
 * every insert evicts the previous row and writes it back). */
START_TEST(insert_duplicates_last_wins) {
  static const emct_tspec spec[2] = {{EMC_TABLE_DENSE, 100, 4, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_HASHED, 16, 3, EMC_DTYPE_F16, 16, 2}};
  emct_world w;
  emc_cache *c;
  size_t caps[2];
  int k;
  emct_world_init(&w, spec, 2, 1.0, 5);
  caps[0] = 1 << 20;
  caps[1] = 17; /* t1 = 0.95: 16 bytes, one dense row; t2 = 0.5: 8 bytes */
  for (k = 0; k < 2; k++) {
    /* table 0: 7, 9, 7, 7, 3, 9; table 1: a new id twice, a present id, the new id again */
    uint64_t ids[10], ranks[10] = {7, 9, 7, 7, 3, 9, 10 + (uint64_t)k, 1, 10 + (uint64_t)k, 0};
    uint64_t offsets[3] = {0, 6, 10}, i, before;
    unsigned char rows[6 * 16 + 4 * 6], out[6 * 16 + 4 * 6];
    uint8_t where[10];
    emc_stats s;
    for (i = 0; i < 10; i++) ids[i] = emct_id_of(&w, i < 6 ? 0 : 1, ranks[i]);
    EMCT_OK(emc_store_table_count(w.store, 1, &before));
    c = make_cache(&w, caps[k], 0.95f, 0.5f, 64, 16);
    pattern_batch(&w, ids, offsets, 900 + (uint64_t)k, rows);
    /* the rows differ between duplicate positions */
    ck_assert(memcmp(rows + 0 * 16, rows + 2 * 16, 16) != 0);
    EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
    emct_world_apply_insert(&w, ranks, offsets, rows); /* last wins in the reference */
    ck_assert(memcmp(w.ref[0] + 7 * 16, rows + 3 * 16, 16) == 0);
    emct_check_cache(c, &w, 0, "duplicate insert");
    s = get_stats(c);
    ck_assert_uint_eq(s.inserts, 10);
    EMCT_OK(emc_store_table_count(w.store, 1, &i));
    ck_assert_uint_eq(i, before + 1); /* one new hashed id, however often repeated */
    if (k == 0) {
      ck_assert_uint_eq(s.rows_cached, 6); /* 7, 9, 3 and three hashed ids */
      ck_assert_uint_eq(s.dirty_rows, 6);
    } else {
      ck_assert_uint_le(s.rows_cached, 2); /* one dense row or two hashed rows fit */
      ck_assert_msg(s.writebacks > 0, "one-row cache: nothing written back");
    }
    lookup_checked(c, &w, ids, ranks, offsets, out, where, 0, "lookup after duplicate insert");
    EMCT_OK(emc_flush(c, NULL));
    emct_world_check_store(&w, "duplicates after flush");
    EMCT_OK(emc_cache_destroy(c));
  }
  emct_world_free(&w);
}
END_TEST

/* Dirty rows reach the store when evicted, without any flush. */
START_TEST(writeback_on_eviction) {
  static const emct_tspec spec[1] = {{EMC_TABLE_DENSE, 4000, 16, EMC_DTYPE_F32, 0, 0}};
  emct_world w;
  emc_cache *c;
  uint64_t ids[200], ranks[200], offsets[2], i, j, wb0, still;
  unsigned char rows[200 * 64], out[200 * 64], cur[64];
  uint8_t where[200];
  emc_stats s;
  emct_world_init(&w, spec, 1, 1.0, 11);
  /* 64-byte rows; 12800 bytes: t1 = 190 rows, t2 = 160 rows */
  c = make_cache(&w, 12800, 0.95f, 0.80f, 64, 0);
  for (i = 0; i < 100; i++) ranks[i] = ids[i] = i * 3;
  offsets[0] = 0;
  offsets[1] = 100;
  pattern_batch(&w, ids, offsets, 1, rows);
  EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
  s = get_stats(c);
  ck_assert_uint_eq(s.rows_cached, 100);
  ck_assert_uint_eq(s.dirty_rows, 100);
  ck_assert_uint_eq(s.writebacks, 0);
  /* the store still holds the old rows: they are only in the cache */
  for (i = 0; i < 100; i++) {
    EMCT_OK(emc_store_read(w.store, 0, &ids[i], 1, cur));
    ck_assert_msg(memcmp(cur, w.ref[0] + ids[i] * 64, 64) == 0, "store changed before write-back");
  }
  emct_world_apply_insert(&w, ranks, offsets, rows);
  emct_check_cache(c, &w, 0, "after insert");
  /* 1: a few other rows: some dirty rows are evicted (they are the oldest), some stay */
  for (i = 0; i < 120; i++) ranks[i] = ids[i] = 1000 + i;
  offsets[1] = 120;
  lookup_checked(c, &w, ids, ranks, offsets, out, where, 0, "partial eviction");
  s = get_stats(c);
  ck_assert_msg(s.writebacks > 0 && s.writebacks < 100, "writebacks %llu",
                (unsigned long long)s.writebacks);
  ck_assert_uint_eq(s.dirty_rows, 100 - s.writebacks);
  /* exactly the written-back rows hold their new value in the store */
  still = 0;
  for (i = 0; i < 100; i++) {
    uint64_t id = i * 3;
    EMCT_OK(emc_store_read(w.store, 0, &id, 1, cur));
    if (memcmp(cur, w.ref[0] + id * 64, 64) == 0) continue;
    still++;
    EMCT_OK(emc_uniform_row(w.seed, 0, id, EMCT_LO, EMCT_HI, 16, EMC_DTYPE_F32, out));
    ck_assert_msg(memcmp(cur, out, 64) == 0, "store row %llu is neither old nor new",
                  (unsigned long long)id);
  }
  ck_assert_uint_eq(still, s.dirty_rows);
  /* 2: many other rows: every dirty row is evicted and written back */
  wb0 = s.writebacks;
  for (j = 0; j < 10; j++) {
    for (i = 0; i < 200; i++) ranks[i] = ids[i] = 2000 + j * 200 + i;
    offsets[1] = 200;
    lookup_checked(c, &w, ids, ranks, offsets, out, where, 0, "full eviction");
  }
  s = get_stats(c);
  ck_assert_uint_eq(s.dirty_rows, 0);
  ck_assert_uint_eq(s.writebacks, 100);
  ck_assert_uint_gt(s.writebacks, wb0);
  emct_world_check_store(&w, "evicted dirty rows, no flush");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "after destroy");
  emct_world_free(&w);
}
END_TEST

/* Dirty rows reach the store on destroy; a new cache on the store then serves them. */
START_TEST(writeback_on_destroy) {
  emct_world w;
  emc_cache *c;
  uint64_t counts[3] = {50, 50, 20}, ids[120], ranks[120], offsets[4], r;
  unsigned char rows[120 * 48], out[120 * 80];
  uint8_t where[120];
  emc_stats s;
  emct_world_init(&w, ins_spec, 3, 0.8, 21);
  c = make_cache(&w, 1 << 20, 0.95f, 0.8f, 64, 65536);
  for (r = 0; r < 5; r++) {
    emct_world_batch(&w, counts, ids, ranks, offsets);
    pattern_batch(&w, ids, offsets, 50 + r, rows);
    EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
    emct_world_apply_insert(&w, ranks, offsets, rows);
  }
  s = get_stats(c);
  ck_assert_uint_gt(s.dirty_rows, 0);
  ck_assert_uint_eq(s.writebacks, 0);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "after destroy without flush");
  /* the store is detached: direct writes work again, and a second cache attaches */
  c = make_cache(&w, 1 << 16, 0.95f, 0.8f, 32, 0);
  emct_world_batch(&w, counts, ids, ranks, offsets);
  lookup_checked(c, &w, ids, ranks, offsets, out, where, 1, "second cache");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ (c) big batch */
START_TEST(batch_larger_than_cache) {
  static const emct_tspec spec[2] = {{EMC_TABLE_DENSE, 20000, 8, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_HASHED, 6000, 20, EMC_DTYPE_F16, 6000, 5000}};
  emct_world w;
  emc_cache *c;
  uint64_t n0 = 3000, n1 = 2000, n = n0 + n1, i, *ids, *ranks, offsets[3] = {0, 3000, 5000};
  unsigned char *out, *rows;
  uint8_t *where;
  emc_stats s;
  emct_world_init(&w, spec, 2, 1.0, 31);
  ids = malloc(n * sizeof *ids);
  ranks = malloc(n * sizeof *ranks);
  where = malloc(n);
  out = malloc(emct_world_batch_bytes(&w, offsets));
  rows = malloc(emct_world_batch_bytes(&w, offsets));
  ck_assert(ids && ranks && where && out && rows);
  /* distinct rows (every 6th position repeats an earlier one) far beyond ~100 slots */
  for (i = 0; i < n0; i++) ranks[i] = (i % 6 == 5) ? (i * 7) % 20000 / 2 : (i * 7) % 20000;
  for (i = 0; i < n1; i++) ranks[n0 + i] = (i * 13) % 6000; /* some absent (>= 5000) */
  for (i = 0; i < n; i++) ids[i] = emct_id_of(&w, i < n0 ? 0 : 1, ranks[i]);
  c = make_cache(&w, 4096, 0.95f, 0.8f, 64, 65536);
  lookup_checked(c, &w, ids, ranks, offsets, out, where, 1, "big batch 1");
  lookup_checked(c, &w, ids, ranks, offsets, out, where, 1, "big batch 2");
  s = get_stats(c);
  ck_assert_uint_gt(s.evictions, 0);
  ck_assert_uint_gt(s.evict_passes, 1);
  ck_assert_uint_gt(s.admissions, 100);
  /* an insert batch beyond the cache: rows are written back or through, none lost */
  pattern_batch(&w, ids, offsets, 4242, rows);
  EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
  emct_world_apply_insert(&w, ranks, offsets, rows);
  emct_check_cache(c, &w, 0, "big insert");
  lookup_checked(c, &w, ids, ranks, offsets, out, where, 0, "big batch after insert");
  EMCT_OK(emc_flush(c, NULL));
  emct_world_check_store(&w, "big insert flushed");
  EMCT_OK(emc_cache_destroy(c));
  free(ids); free(ranks); free(where); free(out); free(rows);
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ (d) invariants */
START_TEST(invariants_explicit) {
  static const emct_tspec spec[3] = {{EMC_TABLE_DENSE, 30000, 10, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_HASHED, 4000, 16, EMC_DTYPE_F16, 4000, 4000},
                                     {EMC_TABLE_DENSE, 2000, 100, EMC_DTYPE_F16, 0, 0}};
  const float t1s[3] = {0.95f, 0.7f, 1.0f}, t2s[3] = {0.8f, 0.69f, 0.1f};
  int k;
  for (k = 0; k < 3; k++) {
    emct_world w;
    emc_cache *c;
    uint64_t counts[3] = {150, 100, 40}, ids[290], ranks[290], offsets[4], b, t;
    unsigned char out[290 * 200];
    uint64_t prev_passes = 0, cap = 60000, strides[3];
    emct_world_init(&w, spec, 3, 1.1, 41 + (uint64_t)k);
    for (t = 0; t < 3; t++) strides[t] = emc__row_stride(w.row_bytes[t]);
    c = make_cache(&w, cap, t1s[k], t2s[k], 64, 100);
    {
      emc__cache_debug d = get_debug(c);
      ck_assert_uint_eq(d.high_bytes, (uint64_t)((double)cap * t1s[k]));
      ck_assert_uint_eq(d.low_bytes, (uint64_t)((double)cap * t2s[k]));
    }
    for (b = 0; b < emct_scale(150, 5); b++) {
      emc_stats s;
      emc__cache_debug d;
      uint64_t sum = 0, bytes = 0;
      emct_world_batch(&w, counts, ids, ranks, offsets);
      EMCT_OK(emc_lookup(c, ids, offsets, out, NULL));
      emct_world_check_rows(&w, ranks, offsets, out, NULL, "invariants");
      s = get_stats(c);
      d = get_debug(c);
      ck_assert_uint_eq(s.rows_cached + s.evictions, s.admissions);
      ck_assert_uint_eq(s.hits + s.misses + s.absent, s.lookups);
      ck_assert_uint_eq(s.lookups, (b + 1) * 290);
      ck_assert_uint_le(s.bytes_in_use, d.high_bytes);
      ck_assert_uint_le(s.bytes_in_use, s.bytes_reserved);
      ck_assert_uint_eq(s.capacity_bytes, cap);
      ck_assert_uint_gt(s.index_bytes, 0);
      ck_assert_uint_eq(s.dirty_rows, 0);
      ck_assert_uint_eq(s.admit_skipped, 0);
      ck_assert_uint_ge(s.evict_passes, prev_passes);
      if (s.evict_passes > 0)
        ck_assert_msg(d.max_bytes_after_pass <= d.low_bytes, "pass ended at %llu > t2 %llu",
                      (unsigned long long)d.max_bytes_after_pass, (unsigned long long)d.low_bytes);
      ck_assert_uint_eq(d.passes_above_low, 0);
      ck_assert_uint_eq(d.calls_above_high, 0);
      prev_passes = s.evict_passes;
      for (t = 0; t < 3; t++) {
        uint64_t r;
        EMCT_OK(emc_get_table_rows_cached(c, (uint32_t)t, &r));
        sum += r;
        bytes += r * strides[t];
      }
      ck_assert_uint_eq(sum, s.rows_cached);
      ck_assert_uint_eq(bytes, s.bytes_in_use);
      ck_assert_int_eq(emc__cache_check(c), EMC_OK);
    }
    ck_assert_uint_gt(prev_passes, 0);
    EMCT_OK(emc_cache_destroy(c));
    emct_world_free(&w);
  }
}
END_TEST

/* ------------------------------------------------------------------ (e) hit ratio */
START_TEST(hit_ratio_between_lru_bounds) {
  uint64_t rows[EMCT_CRITEO_KAGGLE_TABLES], counts[EMCT_CRITEO_KAGGLE_TABLES];
  emct_tspec spec[EMCT_CRITEO_KAGGLE_TABLES];
  uint32_t nt = emct_preset_rows("criteo-kaggle", 0.002, 0, 0, rows, EMCT_CRITEO_KAGGLE_TABLES), t;
  emct_world w;
  emc_cache *c;
  emct_lru lru[4];
  emct_dedup dd;
  uint64_t total_rows = 0, per = 256, n, b, warm = 20, meas = emct_scale(50, 2), stride, cap;
  uint64_t *ids, *ranks, offsets[EMCT_CRITEO_KAGGLE_TABLES + 1], lh[4] = {0, 0, 0, 0}, ld = 0;
  uint64_t dist_hits = 0, dist_total = 0, *rbs;
  size_t *first, m, k;
  unsigned char *out;
  uint8_t *where;
  emc__cache_debug d;
  double hr, lr[4], lo, hi;
  ck_assert_uint_eq(nt, EMCT_CRITEO_KAGGLE_TABLES);
  for (t = 0; t < nt; t++) {
    spec[t].kind = EMC_TABLE_DENSE;
    spec[t].rows = rows[t];
    spec[t].dim = 16;
    spec[t].dtype = EMC_DTYPE_F32;
    spec[t].universe = spec[t].present = 0;
    counts[t] = per;
    total_rows += rows[t];
  }
  emct_world_init(&w, spec, nt, 1.05, 2024);
  stride = emc__row_stride(w.row_bytes[0]);
  cap = total_rows * stride / 10;
  c = make_cache(&w, (size_t)cap, 0.95f, 0.80f, 64, 65536);
  d = get_debug(c);
  rbs = malloc(nt * sizeof *rbs);
  n = per * nt;
  ids = malloc(n * sizeof *ids);
  ranks = malloc(n * sizeof *ranks);
  first = malloc(n * sizeof *first);
  where = malloc(n);
  out = malloc(n * w.row_bytes[0]);
  ck_assert(rbs && ids && ranks && first && where && out);
  for (t = 0; t < nt; t++) rbs[t] = stride;
  /* 0, 1: key by key at t2, t1; 2, 3: phased (the cache's batch phases) at t2, t1 */
  ck_assert_int_eq(emct_lru_init(&lru[0], rbs, nt, d.low_bytes, total_rows), 0);
  ck_assert_int_eq(emct_lru_init(&lru[1], rbs, nt, d.high_bytes, total_rows), 0);
  ck_assert_int_eq(emct_lru_init(&lru[2], rbs, nt, d.low_bytes, total_rows), 0);
  ck_assert_int_eq(emct_lru_init(&lru[3], rbs, nt, d.high_bytes, total_rows), 0);
  emct_dedup_init(&dd);
  for (b = 0; b < warm + meas; b++) {
    int mm = b >= warm;
    emct_world_batch(&w, counts, ids, ranks, offsets);
    EMCT_OK(emc_lookup_ex(c, ids, offsets, out, where, NULL));
    if (b % 10 == 0) {
      emct_world_check_rows(&w, ranks, offsets, out, where, "hit ratio trace");
      emct_check_cache(c, &w, 1, "hit ratio trace");
    }
    for (k = 0; k < 4; k++)
      ck_assert_int_eq((k < 2 ? emct_lru_batch : emct_lru_batch_phased)(
                           &lru[k], &dd, first, ids, offsets, mm ? &lh[k] : NULL,
                           mm && k == 0 ? &ld : NULL), 0);
    if (!mm) continue;
    ck_assert_int_eq(emct_dedup_batch(&dd, ids, offsets, nt, first, &m), 0);
    for (k = 0; k < m; k++) dist_hits += where[first[k]] == EMC_WHERE_CACHE;
    dist_total += m;
  }
  ck_assert_uint_eq(dist_total, ld);
  /* the range applies: a batch's distinct rows fit in t2 * capacity */
  ck_assert_uint_le(dist_total / meas * stride, d.low_bytes);
  hr = (double)dist_hits / (double)dist_total;
  for (k = 0; k < 4; k++) lr[k] = (double)lh[k] / (double)ld;
  lo = lr[0] < lr[2] ? lr[0] : lr[2];
  hi = lr[1] > lr[3] ? lr[1] : lr[3];
  ck_assert_msg(lo < hi, "LRU at t2 (%g) not below LRU at t1 (%g)", lo, hi);
  ck_assert_msg(hr >= lo - 0.01 && hr <= hi + 0.01,
                "distinct-key hit ratio %.4f outside exact LRU [%.4f (t2), %.4f (t1)] +- 0.01 "
                "(key by key %.4f..%.4f, phased %.4f..%.4f)",
                hr, lo, hi, lr[0], lr[1], lr[2], lr[3]);
  ck_assert_uint_gt(get_stats(c).evictions, 0);
  for (k = 0; k < 4; k++) emct_lru_free(&lru[k]);
  emct_dedup_free(&dd);
  EMCT_OK(emc_cache_destroy(c));
  free(rbs); free(ids); free(ranks); free(first); free(where); free(out);
  emct_world_free(&w);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cache");
  TCase *tz = tcase_create("zipf"), *ti = tcase_create("insert"), *tb = tcase_create("bounds"),
        *te = tcase_create("edges");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tz, zipf_lookups_match_reference, 0, (int)N_ZCFG);
  tcase_add_loop_test(ti, insert_lookup_flush, 0, 2);
  tcase_add_test(ti, insert_duplicates_last_wins);
  tcase_add_test(ti, writeback_on_eviction);
  tcase_add_test(ti, writeback_on_destroy);
  tcase_add_test(tb, batch_larger_than_cache);
  tcase_add_test(tb, invariants_explicit);
  tcase_add_test(tb, hit_ratio_between_lru_bounds);
  cache_edges_tests(te);
  tcase_set_timeout(tz, emct_timeout(60));
  tcase_set_timeout(ti, emct_timeout(60));
  tcase_set_timeout(tb, emct_timeout(60));
  tcase_set_timeout(te, emct_timeout(60));
  suite_add_tcase(s, tz);
  suite_add_tcase(s, ti);
  suite_add_tcase(s, tb);
  suite_add_tcase(s, te);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
