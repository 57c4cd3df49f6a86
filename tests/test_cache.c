/*
 * test_cache: the host cache against a reference model.
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
 *                unified index, hashed key collisions, emc_lookup_ex's where[].
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ------------------------------------------------------------------ helpers */
static emc_cache *make_cache(emct_world *w, size_t capacity, float t1, float t2,
                             uint32_t key_bits, uint64_t unified_rows) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = capacity;
  cfg.evict_high = t1;
  cfg.evict_low = t2;
  cfg.key_bits = key_bits;
  cfg.unified_index_rows = unified_rows;
  EMCT_OK(emc_cache_create(w->store, &cfg, &c));
  ck_assert_int_eq(emc_cache_backend(c), EMC_BACKEND_HOST);
  return c;
}

/* Bytes of every row of the world's universes at the slot stride. */
static uint64_t world_stride_bytes(const emct_world *w) {
  uint64_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += w->spec[t].universe * emc__row_stride(w->row_bytes[t]);
  return b;
}

static size_t max_batch_bytes(const emct_world *w, uint64_t per_table) {
  size_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += (size_t)per_table * w->row_bytes[t];
  return b;
}

static emc_stats get_stats(const emc_cache *c) {
  emc_stats s;
  EMCT_OK(emc_get_stats(c, &s));
  return s;
}

static emc__cache_debug get_debug(const emc_cache *c) {
  emc__cache_debug d;
  EMCT_OK(emc__cache_get_debug(c, &d));
  return d;
}

/* One lookup through emc_lookup_ex: rows against the reference, where[] against presence and
 * against the stats deltas, then every cache invariant. */
static void lookup_checked(emc_cache *c, emct_world *w, const uint64_t *ids, const uint64_t *ranks,
                           const uint64_t *offsets, unsigned char *out, uint8_t *where,
                           int no_inserts, const char *what) {
  emc_stats s0 = get_stats(c), s1;
  uint64_t n = offsets[w->n], i, wc = 0, ws = 0, wa = 0;
  memset(where, 0xee, n ? n : 1);
  EMCT_OK(emc_lookup_ex(c, ids, offsets, out, where, NULL));
  emct_world_check_rows(w, ranks, offsets, out, where, what);
  for (i = 0; i < n; i++) {
    ck_assert_msg(where[i] <= EMC_WHERE_ABSENT, "%s: where[%llu] = %u", what,
                  (unsigned long long)i, where[i]);
    wc += where[i] == EMC_WHERE_CACHE;
    ws += where[i] == EMC_WHERE_STORE;
    wa += where[i] == EMC_WHERE_ABSENT;
  }
  s1 = get_stats(c);
  ck_assert_msg(s1.lookups - s0.lookups == n, "%s: lookups +%llu for %llu ids", what,
                (unsigned long long)(s1.lookups - s0.lookups), (unsigned long long)n);
  ck_assert_msg(s1.hits - s0.hits == wc && s1.misses - s0.misses == ws &&
                    s1.absent - s0.absent == wa,
                "%s: stats +%llu hits +%llu misses +%llu absent, where says %llu/%llu/%llu", what,
                (unsigned long long)(s1.hits - s0.hits), (unsigned long long)(s1.misses - s0.misses),
                (unsigned long long)(s1.absent - s0.absent), (unsigned long long)wc,
                (unsigned long long)ws, (unsigned long long)wa);
  ck_assert_msg(s1.unified_hits - s0.unified_hits <= ws, "%s: unified hits beyond misses", what);
  /* single-threaded: nothing is skipped for a busy lock; every admissible miss is admitted
   * or skipped (duplicates of the batch neither) */
  ck_assert_msg(s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped <= ws,
                "%s: more admissions than misses", what);
  emct_check_cache(c, w, no_inserts, what);
}

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
/* Pattern rows for an insert batch; tag makes each position's row unique. */
static void pattern_batch(const emct_world *w, const uint64_t *ids, const uint64_t *offsets,
                          uint64_t tag, unsigned char *rows) {
  uint32_t t;
  uint64_t i;
  unsigned char *p = rows;
  for (t = 0; t < w->n; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, p += w->row_bytes[t])
      emct_pattern_row(t, ids[i], tag * 1000003u + i, w->spec[t].dim, w->spec[t].dtype, p);
}

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
  tcase_add_test(te, empty_batches_and_segments);
  tcase_add_test(te, all_duplicate_batch);
  tcase_add_test(te, absent_hashed_ids);
  tcase_add_loop_test(te, unified_index, 0, 3);
  tcase_add_test(te, unified_entry_after_one_eviction);
  tcase_add_test(te, hashed_key_collision);
  tcase_add_test(te, lookup_ex_where);
  tcase_add_loop_test(te, index_sized_by_store, 0, 2);
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
