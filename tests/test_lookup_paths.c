/*
 * test_lookup_paths: the pipelined read against the per-row path (host backend).
 *
 * The host lookup has two read paths, chosen per cache by the white-box hook
 * emc__cache_set_pipelined (lib/internal.h): the software-pipelined batched read (1, the
 * default) and the per-row reference path (0: read_row for every position).
 *
 *   twins      two caches built identically over two identical stores (same tables, same
 *              config, INLINE admission), one pipelined, one per-row, fed the same calls.
 *              The pipelined one's distance between stages changes each round: the one
 *              the lookup chooses for the batch, EMC__PIPE_D_MIN, EMC__PIPE_D_MAX; and, in
 *              alternate rounds, whether it copies a repeated (table, id) from its earlier
 *              position (emc__cache_set_repeats 1, the default) or reads it again (0).
 *              After every call: out bytes equal (memcmp; each cache's buffer pre-filled with
 *              another byte, so a byte one path leaves unwritten differs), where[] equal,
 *              every emc_stats counter and gauge equal, the white-box debug counters and the
 *              per-table rows equal, emc__cache_check (with the stats invariants of
 *              emct_check_cache) on both, every row equal to the reference model of common.c
 *              and where[] equal to presence; nothing written past out or where (guard
 *              bytes; under ASan every buffer is exactly the batch's size, so a read past ids
 *              or a write past out is an ASan report). Tables: dense and hashed, f32 and f16,
 *              dims 2, 3 (f16: 6-byte rows), 4, 16, 64, 256; 64- and 32-bit keys; caches of
 *              2-3 % of the rows, so every call evicts; unified-index entries. Batches: Zipf
 *              mixes; all duplicates of one id (dense, hashed present, hashed absent); all
 *              misses (ids never looked up nor inserted, absent hashed ids among them: no
 *              hit); tiny ones (1, 2, 3 positions, anywhere among empty segments) and long
 *              ones (5000-9000 positions over every table); empty batches and segments;
 *              inserts between lookups (rows updated in place, cached dirty, new hashed ids,
 *              colliding ids written through) and a lookup of the inserted ids right after;
 *              flushes; with 32-bit keys, pairs of hashed ids sharing one global key, both in
 *              batches, cached and not (the second is never a hit while the first holds the
 *              key). The runs must show hits, misses, absent ids, evictions, write-backs,
 *              unified hits, and the narrow-row configuration (8-byte slots: the index near
 *              its design load, plus a churn batch each round) tombstones in the index and
 *              completed re-pack sweeps (emc__cache_get_debug), so they provably cover them.
 *
 * The pipelined read under concurrent writers is test_lookup_writers.c; background admission
 * is test_admission.c; the helpers the three share are lookup_common.c.
 *
 * Check's passing assertions each write a record to its message file, so per-row checks here
 * reach ck_assert only on a failure (emct_world_check_rows / _store do so).
 * EMCT_VERBOSE=1 prints what each case covered.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include "lookup_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes after out and where that no call may write (0 under ASan: buffers are then exact, and
 * ASan's redzones see any access past them). */
#ifdef EMCT_ASAN
#define GUARD 0u
#else
#define GUARD 64u
#endif

/* ------------------------------------------------------------------ helpers */
static uint64_t world_stride_bytes(const emct_world *w) {
  uint64_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += w->spec[t].universe * emc__row_stride(w->row_bytes[t]);
  return b;
}

/* A copy of ids of exactly n entries (NULL for n == 0): a read past the batch is an ASan
 * report. */
static uint64_t *exact_ids(const uint64_t *ids, uint64_t n) {
  uint64_t *p;
  if (n == 0) return NULL;
  p = xmalloc(n * sizeof *p);
  memcpy(p, ids, n * sizeof *p);
  return p;
}

static int guard_ok(const unsigned char *p, size_t n, unsigned char v) {
  size_t i;
  for (i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* ================================================================== twins */
#define TW_MAX_TABLES 5u
#define TW_MAX_BATCH 12000u

typedef struct twin_cfg {
  const char *name;
  uint32_t n;
  emct_tspec spec[TW_MAX_TABLES];
  uint32_t zipf_ids[TW_MAX_TABLES]; /* mean ids per table in a Zipf batch */
  double frac;                      /* capacity: this fraction of every row's slot bytes */
  uint32_t key_bits;
  uint64_t unified;
  float t2;          /* evict_low (t1 is 0.95) */
  int expect_repack; /* the index reaches the load where tombstones stay and re-pack sweeps
                        run (a churn batch each round): both are asserted */
} twin_cfg;

static const twin_cfg twin_cfgs[] = {
    {"mixed tables, 64-bit keys", 5,
     {{EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_HASHED, 131072, 3, EMC_DTYPE_F16, 131072, 65536},
      {EMC_TABLE_DENSE, 3000, 64, EMC_DTYPE_F16, 0, 0},
      {EMC_TABLE_HASHED, 1500, 256, EMC_DTYPE_F32, 1500, 1000},
      {EMC_TABLE_DENSE, 5000, 3, EMC_DTYPE_F16, 0, 0}},
     {200, 200, 80, 30, 150}, 0.02, 64, 4096, 0.80f, 0},
    {"mixed tables, 32-bit keys", 5,
     {{EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_HASHED, 131072, 3, EMC_DTYPE_F16, 131072, 65536},
      {EMC_TABLE_DENSE, 3000, 64, EMC_DTYPE_F16, 0, 0},
      {EMC_TABLE_HASHED, 1500, 256, EMC_DTYPE_F32, 1500, 1000},
      {EMC_TABLE_DENSE, 5000, 3, EMC_DTYPE_F16, 0, 0}},
     {200, 200, 80, 30, 150}, 0.02, 32, 4096, 0.80f, 0},
    /* narrow rows (8-byte slots) dominate: the index runs near its design load, so evictions
     * leave tombstones in full buckets and the re-pack sweeps run */
    {"narrow rows, 32-bit keys", 4,
     {{EMC_TABLE_DENSE, 30000, 3, EMC_DTYPE_F16, 0, 0},
      {EMC_TABLE_HASHED, 131072, 4, EMC_DTYPE_F16, 131072, 65536},
      {EMC_TABLE_DENSE, 20000, 2, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_HASHED, 600, 256, EMC_DTYPE_F32, 600, 400}},
     {250, 300, 200, 2}, 0.03, 32, 128, 0.70f, 1},
};
#define N_TWIN_CFG (sizeof twin_cfgs / sizeof twin_cfgs[0])

typedef struct twins {
  const twin_cfg *cfg;
  emct_world w[2];
  emc_cache *c[2]; /* 0: pipelined, 1: per-row */
  uint32_t nt;
  uint8_t *seen[TW_MAX_TABLES]; /* rank looked up or inserted at least once */
  emct_rng rng;
  uint64_t calls;
  /* hashed key collisions (32-bit keys): pairs of ranks of table coll_t sharing a key */
  uint32_t coll_t, n_coll;
  uint64_t coll[4][2];
  /* what the run covered */
  uint64_t max_tombs, store_positions, cache_positions, absent_positions;
  uint64_t coll_lookups_cached; /* lookups of a colliding id while its partner was cached */
  uint64_t last_wc, last_ws, last_wa; /* where[] counts of the last lookup */
  unsigned char *rows; /* insert rows */
} twins;

#define STAT_FIELDS(X)                                                                      \
  X(lookups) X(hits) X(misses) X(absent) X(admissions) X(admit_skipped) X(inserts)          \
  X(evictions) X(writebacks) X(evict_passes) X(retries) X(unified_hits) X(rows_cached)      \
  X(bytes_in_use) X(bytes_reserved) X(capacity_bytes) X(index_bytes) X(dirty_rows)          \
  X(prefetched) X(pinned_rows) X(pinned_bytes) X(pin_shortfall) X(gradient_rows)            \
  X(host_syncs)

#define DEBUG_FIELDS(X)                                                                     \
  X(passes) X(index_tombs) X(index_slots) X(passes_above_low) X(max_bytes_after_pass)       \
  X(calls_above_high) X(low_bytes) X(high_bytes) X(index_rebuilds)

/* The two caches agree on every counter, gauge and white-box figure, and both pass their
 * checks. */
static void twins_agree(twins *tw, const char *what) {
  emc_stats s0 = get_stats(tw->c[0]), s1 = get_stats(tw->c[1]);
  emc__cache_debug d0 = get_debug(tw->c[0]), d1 = get_debug(tw->c[1]);
  uint32_t t;
#define CMP_STAT(f)                                                                         \
  ck_assert_msg(s0.f == s1.f, "%s: stats." #f ": pipelined %llu, per-row %llu", what,       \
                (unsigned long long)s0.f, (unsigned long long)s1.f);
  STAT_FIELDS(CMP_STAT)
#undef CMP_STAT
  ck_assert_msg(memcmp(&s0, &s1, sizeof s0) == 0, "%s: emc_stats differ", what);
#define CMP_DBG(f)                                                                          \
  ck_assert_msg(d0.f == d1.f, "%s: debug." #f ": pipelined %llu, per-row %llu", what,       \
                (unsigned long long)d0.f, (unsigned long long)d1.f);
  DEBUG_FIELDS(CMP_DBG)
#undef CMP_DBG
  for (t = 0; t < tw->nt; t++) {
    uint64_t r0 = 0, r1 = 0;
    EMCT_OK(emc_get_table_rows_cached(tw->c[0], t, &r0));
    EMCT_OK(emc_get_table_rows_cached(tw->c[1], t, &r1));
    ck_assert_msg(r0 == r1, "%s: table %u: %llu rows cached (pipelined), %llu (per-row)", what,
                  t, (unsigned long long)r0, (unsigned long long)r1);
  }
  if (d0.index_tombs > tw->max_tombs) tw->max_tombs = d0.index_tombs;
  emct_check_cache(tw->c[0], &tw->w[0], 0, what);
  emct_check_cache(tw->c[1], &tw->w[1], 0, what);
}

static const char *table_desc(const twins *tw, uint32_t t, char *buf, size_t cap) {
  const emct_tspec *s = &tw->w[0].spec[t];
  snprintf(buf, cap, "table %u (%s %s dim %u)", t, s->kind == EMC_TABLE_DENSE ? "dense" : "hashed",
           s->dtype == EMC_DTYPE_F32 ? "f32" : "f16", s->dim);
  return buf;
}

/* One lookup on both caches. use_where: emc_lookup_ex with where[], else emc_lookup. */
static void twin_lookup(twins *tw, const uint64_t *ids, const uint64_t *ranks,
                        const uint64_t *offsets, int use_where, const char *what0) {
  const emct_world *w = &tw->w[0];
  uint64_t n = offsets[tw->nt], i, wc = 0, ws = 0, wa = 0;
  size_t bytes = emct_world_batch_bytes(w, offsets);
  unsigned char *out[2];
  uint8_t *where[2];
  emc_stats before[2], after;
  static const unsigned char fill[2] = {0xa5, 0x5a};
  char what[256], td[96];
  int k;
  long d;
  tw->calls++;
  snprintf(what, sizeof what, "%s [%s, call %llu, %llu ids]", what0, tw->cfg->name,
           (unsigned long long)tw->calls, (unsigned long long)n);
  for (k = 0; k < 2; k++) {
    uint64_t *xids = exact_ids(ids, n);
    before[k] = get_stats(tw->c[k]);
    out[k] = bytes + GUARD ? xmalloc(bytes + GUARD) : NULL;
    where[k] = use_where && n + GUARD ? xmalloc(n + GUARD) : NULL;
    if (out[k]) memset(out[k], fill[k], bytes + GUARD);
    if (where[k]) memset(where[k], 0xee, n + GUARD);
    if (use_where)
      EMCT_OK(emc_lookup_ex(tw->c[k], xids, offsets, n ? out[k] : NULL, n ? where[k] : NULL, NULL));
    else
      EMCT_OK(emc_lookup(tw->c[k], xids, offsets, n ? out[k] : NULL, NULL));
    free(xids);
    ck_assert_msg(!out[k] || guard_ok(out[k] + bytes, GUARD, fill[k]),
                  "%s: the %s path wrote past the end of out", what, k ? "per-row" : "pipelined");
    ck_assert_msg(!where[k] || guard_ok(where[k] + n, GUARD, 0xee),
                  "%s: the %s path wrote past the end of where", what, k ? "per-row" : "pipelined");
  }
  /* out: byte for byte */
  d = bytes ? emct_first_diff(out[0], out[1], bytes) : -1;
  if (d >= 0) {
    uint32_t t = 0;
    size_t off = 0;
    char h0[64], h1[64];
    while (t < tw->nt && off + (offsets[t + 1] - offsets[t]) * w->row_bytes[t] <= (size_t)d) {
      off += (offsets[t + 1] - offsets[t]) * w->row_bytes[t];
      t++;
    }
    i = offsets[t] + ((size_t)d - off) / w->row_bytes[t];
    ck_assert_msg(0, "%s: out differs at byte %ld: %s id %llu (rank %llu) at position %llu: "
                  "pipelined %s, per-row %s", what, d, table_desc(tw, t, td, sizeof td),
                  (unsigned long long)ids[i], (unsigned long long)ranks[i],
                  (unsigned long long)i,
                  emct_hex(out[0] + off + (i - offsets[t]) * w->row_bytes[t], w->row_bytes[t], h0, sizeof h0),
                  emct_hex(out[1] + off + (i - offsets[t]) * w->row_bytes[t], w->row_bytes[t], h1, sizeof h1));
  }
  if (use_where) {
    for (i = 0; i < n; i++) {
      if (where[0][i] != where[1][i]) {
        uint32_t t = 0;
        while (offsets[t + 1] <= i) t++;
        ck_assert_msg(0, "%s: where[%llu] (%s id %llu, rank %llu): pipelined %u, per-row %u", what,
                      (unsigned long long)i, table_desc(tw, t, td, sizeof td),
                      (unsigned long long)ids[i], (unsigned long long)ranks[i], where[0][i],
                      where[1][i]);
      }
      if (where[0][i] > EMC_WHERE_ABSENT)
        ck_assert_msg(0, "%s: where[%llu] = %u is no emc_where", what, (unsigned long long)i,
                      where[0][i]);
      wc += where[0][i] == EMC_WHERE_CACHE;
      ws += where[0][i] == EMC_WHERE_STORE;
      wa += where[0][i] == EMC_WHERE_ABSENT;
    }
  }
  /* both against the reference model (equal out: checking one checks both) */
  if (n) emct_world_check_rows(w, ranks, offsets, out[0], use_where ? where[0] : NULL, what);
  after = get_stats(tw->c[0]);
  ck_assert_msg(after.lookups - before[0].lookups == n, "%s: lookups +%llu for %llu ids", what,
                (unsigned long long)(after.lookups - before[0].lookups), (unsigned long long)n);
  if (use_where) {
    ck_assert_msg(after.hits - before[0].hits == wc && after.misses - before[0].misses == ws &&
                      after.absent - before[0].absent == wa,
                  "%s: stats +%llu hits +%llu misses +%llu absent, where[] says %llu/%llu/%llu",
                  what, (unsigned long long)(after.hits - before[0].hits),
                  (unsigned long long)(after.misses - before[0].misses),
                  (unsigned long long)(after.absent - before[0].absent), (unsigned long long)wc,
                  (unsigned long long)ws, (unsigned long long)wa);
    tw->last_wc = wc;
    tw->last_ws = ws;
    tw->last_wa = wa;
    tw->cache_positions += wc;
    tw->store_positions += ws;
    tw->absent_positions += wa;
  }
  if (n == 0)
    ck_assert_msg(memcmp(&before[0], &after, sizeof after) == 0, "%s: an empty batch changed the stats", what);
  twins_agree(tw, what);
  for (k = 0; k < 2; k++) {
    free(out[k]);
    free(where[k]);
  }
  for (i = 0; i < n; i++) {
    uint32_t t = 0;
    while (offsets[t + 1] <= i) t++;
    tw->seen[t][ranks[i]] = 1;
  }
}

static void twin_lookup_bb(twins *tw, bbuild *b, int use_where, const char *what) {
  bb_group(b, &tw->w[0]);
  twin_lookup(tw, b->ids, b->ranks, b->offsets, use_where, what);
}

/* Insert pattern rows for the batch on both caches and in both references. */
static void twin_insert(twins *tw, bbuild *b, uint64_t tag, const char *what0) {
  uint64_t n, *xids;
  size_t bytes;
  char what[256];
  int k;
  bb_group(b, &tw->w[0]);
  n = b->n;
  bytes = emct_world_batch_bytes(&tw->w[0], b->offsets);
  snprintf(what, sizeof what, "%s [%s, insert of %llu ids]", what0, tw->cfg->name,
           (unsigned long long)n);
  pattern_batch(&tw->w[0], b->ids, b->offsets, tag, tw->rows);
  for (k = 0; k < 2; k++) {
    unsigned char *rows = xmalloc(bytes);
    memcpy(rows, tw->rows, bytes);
    xids = exact_ids(b->ids, n);
    EMCT_OK(emc_insert(tw->c[k], xids, b->offsets, n ? rows : NULL, NULL));
    emct_world_apply_insert(&tw->w[k], b->ranks, b->offsets, rows);
    free(xids);
    free(rows);
  }
  for (k = 0; k < (int)n; k++) {
    uint32_t t = 0;
    while (b->offsets[t + 1] <= (uint64_t)k) t++;
    tw->seen[t][b->ranks[k]] = 1;
  }
  twins_agree(tw, what);
}

static uint64_t zipf_rank(twins *tw, uint32_t t) {
  const emct_world *w = &tw->w[0];
  return emct_perm_apply(&w->perm[t], emct_zipf_sample(&w->zipf[t], &tw->rng));
}

/* A rank of table t never looked up nor inserted (hashed: present in the store or absent);
 * UINT64_MAX when 64 draws found none. */
static uint64_t unseen_rank(twins *tw, uint32_t t) {
  uint64_t u = tw->w[0].spec[t].universe, r;
  int tries;
  for (tries = 0; tries < 64; tries++) {
    r = emct_rng_below(&tw->rng, u);
    if (!tw->seen[t][r]) return r;
  }
  return UINT64_MAX;
}

/* A rank of hashed table t absent from the store (UINT64_MAX when 64 draws found none). */
static uint64_t absent_rank(twins *tw, uint32_t t) {
  uint64_t u = tw->w[0].spec[t].universe, r;
  int tries;
  for (tries = 0; tries < 64; tries++) {
    r = emct_rng_below(&tw->rng, u);
    if (!tw->w[0].present[t][r]) return r;
  }
  return UINT64_MAX;
}

/* A Zipf batch: about zipf_ids[t] * scale ids per table (a segment is empty one time in 5),
 * now and then a colliding hashed id. */
static void add_zipf(twins *tw, bbuild *b, double scale) {
  uint32_t t;
  uint64_t i;
  for (t = 0; t < tw->nt; t++) {
    uint64_t m = (uint64_t)(tw->cfg->zipf_ids[t] * scale);
    if (emct_rng_below(&tw->rng, 5) == 0) continue;
    m = m / 2 + emct_rng_below(&tw->rng, m + 1);
    for (i = 0; i < m; i++) bb_add(b, t, zipf_rank(tw, t));
  }
  for (i = 0; i < tw->n_coll; i++)
    if (emct_rng_below(&tw->rng, 3) == 0) bb_add(b, tw->coll_t, tw->coll[i][emct_rng_below(&tw->rng, 2)]);
}

/* Colliding ids a and c (roles swap every round): a twice (cached by the first lookup unless
 * c holds the key), then, when the second lookup of a hit, c must come from the store (or be
 * absent): one key, one cached id. Then both interleaved among a Zipf mix. */
static void collision_round(twins *tw, bbuild *b, uint64_t round) {
  uint64_t p, i;
  char what[96];
  for (p = 0; p < tw->n_coll; p++) {
    uint64_t a = tw->coll[p][round & 1], c = tw->coll[p][!(round & 1)];
    b->n = 0;
    bb_add(b, tw->coll_t, a);
    snprintf(what, sizeof what, "collision pair %llu: first id", (unsigned long long)p);
    twin_lookup_bb(tw, b, 1, what);
    twin_lookup_bb(tw, b, 1, what);
    if (tw->last_wc == 1) {
      b->n = 0;
      bb_add(b, tw->coll_t, c);
      bb_add(b, tw->coll_t, c);
      snprintf(what, sizeof what, "collision pair %llu: second id while the first is cached",
               (unsigned long long)p);
      twin_lookup_bb(tw, b, 1, what);
      ck_assert_msg(tw->last_wc == 0, "%s: a hit for an id whose key another id holds", what);
      tw->coll_lookups_cached++;
    }
    b->n = 0;
    for (i = 0; i < 6; i++) bb_add(b, tw->coll_t, i & 1 ? c : a);
    add_zipf(tw, b, 0.2);
    snprintf(what, sizeof what, "collision pair %llu: both ids", (unsigned long long)p);
    twin_lookup_bb(tw, b, 1, what);
  }
}

/* Find pairs of ranks of hashed table t sharing a 32-bit global key (a cache over w with the
 * twins' config computes the keys), make the first two pairs present in both stores. */
typedef struct kr {
  uint64_t key, rank;
} kr;
static int cmp_kr(const void *x, const void *y) {
  const kr *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static void find_collisions(twins *tw, uint32_t t, uint64_t hash_seed) {
  emct_world *w = &tw->w[0];
  uint64_t u = w->spec[t].universe, r, p;
  kr *v = xmalloc(u * sizeof *v);
  emc_cache *c = make_cache(w, (size_t)1 << 16, 32, tw->cfg->unified, hash_seed, EMC_ADMISSION_INLINE);
  for (r = 0; r < u; r++) {
    v[r].rank = r;
    EMCT_OK(emc_cache_global_key(c, t, emct_id_of(w, t, r), &v[r].key, NULL, NULL));
  }
  EMCT_OK(emc_cache_destroy(c));
  qsort(v, u, sizeof *v, cmp_kr);
  tw->coll_t = t;
  tw->n_coll = 0;
  for (r = 1; r < u && tw->n_coll < 4; r++)
    if (v[r].key == v[r - 1].key) {
      tw->coll[tw->n_coll][0] = v[r - 1].rank;
      tw->coll[tw->n_coll][1] = v[r].rank;
      tw->n_coll++;
    }
  free(v);
  ck_assert_msg(tw->n_coll >= 3, "test sizes: only %u pairs of colliding 32-bit keys among %llu ids",
                tw->n_coll, (unsigned long long)u);
  /* pairs 0 and 1: both ids present in the store (written before the caches exist); the
   * others as they are (a present id may share its key with an absent one) */
  for (p = 0; p < 2; p++) {
    int j;
    for (j = 0; j < 2; j++) {
      uint64_t rk = tw->coll[p][j], id = emct_id_of(w, t, rk);
      int k;
      unsigned char row[1024];
      if (w->present[t][rk]) continue;
      emct_pattern_row(t, id, 777 + p, w->spec[t].dim, w->spec[t].dtype, row);
      for (k = 0; k < 2; k++) {
        EMCT_OK(emc_store_write(tw->w[k].store, t, &id, 1, row));
        memcpy(tw->w[k].ref[t] + rk * tw->w[k].row_bytes[t], row, tw->w[k].row_bytes[t]);
        tw->w[k].present[t][rk] = 1;
      }
    }
  }
}

START_TEST(twins_same_results) {
  const twin_cfg *cfg = &twin_cfgs[_i];
  twins tw;
  bbuild b;
  uint64_t round, rounds = emct_gpu_scale(emct_scale(12, 2), 2), i, seed = 9100 + (uint64_t)_i;
  uint64_t hash_seed = 0x5eed0000u + (uint64_t)_i;
  uint32_t t;
  size_t cap;
  int k;
  emc_stats s;
  emc__cache_debug d;
  double t0 = now_s();
  memset(&tw, 0, sizeof tw);
  tw.cfg = cfg;
  tw.nt = cfg->n;
  emct_rng_seed(&tw.rng, seed * 31);
  for (k = 0; k < 2; k++) emct_world_init(&tw.w[k], cfg->spec, cfg->n, 1.0, seed);
  for (t = 0; t < tw.nt; t++) {
    tw.seen[t] = calloc(tw.w[0].spec[t].universe, 1);
    ck_assert(tw.seen[t] != NULL);
  }
  tw.rows = xmalloc((size_t)TW_MAX_BATCH * 1024);
  if (cfg->key_bits == 32) find_collisions(&tw, 1, hash_seed);
  cap = (size_t)((double)world_stride_bytes(&tw.w[0]) * cfg->frac);
  for (k = 0; k < 2; k++) {
    tw.c[k] = make_cache_t2(&tw.w[k], cap, cfg->t2, cfg->key_bits, cfg->unified, hash_seed,
                            EMC_ADMISSION_INLINE);
    EMCT_OK(emc__cache_set_pipelined(tw.c[k], k == 0));
  }
  /* a distance outside EMC__PIPE_D_MIN..MAX is refused */
  ck_assert_int_eq(emc__cache_set_pipelined(tw.c[0], 2), EMC_EINVAL);
  ck_assert_int_eq(emc__cache_set_pipelined(tw.c[0], EMC__PIPE_D_MAX + 1), EMC_EINVAL);
  ck_assert_int_eq(emc__cache_set_repeats(tw.c[0], 2), EMC_EINVAL);
  ck_assert_int_eq(emc__cache_set_repeats(NULL, 1), EMC_EINVAL);
  bb_init(&b, tw.nt, TW_MAX_BATCH);
  twins_agree(&tw, "fresh caches");

  for (round = 0; round < rounds; round++) {
    /* the pipelined twin's distance between stages: chosen per batch, the least, the most */
    static const int dist[3] = {1, EMC__PIPE_D_MIN, EMC__PIPE_D_MAX};
    uint64_t m;
    EMCT_OK(emc__cache_set_pipelined(tw.c[0], dist[round % 3]));
    /* and whether it copies repeated ids from their earlier position or reads each again:
     * both in any 2 rounds, every distance with both over 6 */
    EMCT_OK(emc__cache_set_repeats(tw.c[0], round % 2 == 0));
    /* a Zipf mix, through emc_lookup_ex and emc_lookup */
    b.n = 0;
    add_zipf(&tw, &b, 1.0);
    twin_lookup_bb(&tw, &b, 1, "zipf mix");
    b.n = 0;
    add_zipf(&tw, &b, 0.5);
    twin_lookup_bb(&tw, &b, 0, "zipf mix without where");

    /* tiny batches: 1, 2, 3 positions anywhere, the other segments empty */
    for (m = 1; m <= 3; m++) {
      b.n = 0;
      for (i = 0; i < m; i++) {
        uint32_t tt = (uint32_t)emct_rng_below(&tw.rng, tw.nt);
        bb_add(&b, tt, emct_rng_below(&tw.rng, 2) ? zipf_rank(&tw, tt)
                                                  : emct_rng_below(&tw.rng, tw.w[0].spec[tt].universe));
      }
      twin_lookup_bb(&tw, &b, 1, "tiny batch");
      twin_lookup_bb(&tw, &b, 1, "tiny batch again");
    }
    /* one position in the last table only, then in the first only */
    b.n = 0;
    bb_add(&b, tw.nt - 1, zipf_rank(&tw, tw.nt - 1));
    twin_lookup_bb(&tw, &b, 1, "one id, last table");
    b.n = 0;
    bb_add(&b, 0, zipf_rank(&tw, 0));
    twin_lookup_bb(&tw, &b, 0, "one id, first table");

    /* an empty batch */
    b.n = 0;
    twin_lookup_bb(&tw, &b, 1, "empty batch");

    /* all duplicates of one id, 1 to 2500 times: a dense id, a present hashed id, an absent
     * hashed id (tables in turn) */
    for (m = 0; m < 3; m++) {
      uint32_t cand[TW_MAX_TABLES], nc = 0, tt;
      uint64_t r, reps = 1 + emct_rng_below(&tw.rng, 2500);
      for (t = 0; t < tw.nt; t++)
        if ((tw.w[0].spec[t].kind == EMC_TABLE_DENSE) == (m == 0)) cand[nc++] = t;
      ck_assert(nc > 0);
      tt = cand[round % nc];
      r = m == 2 ? absent_rank(&tw, tt) : zipf_rank(&tw, tt);
      if (m == 1 && !tw.w[0].present[tt][r]) r = 0; /* rank 0 is present */
      ck_assert_msg(r != UINT64_MAX && (m == 2) != tw.w[0].present[tt][r], "test sizes: dup id");
      b.n = 0;
      for (i = 0; i < reps; i++) bb_add(&b, tt, r);
      twin_lookup_bb(&tw, &b, 1, m == 0 ? "all duplicates, dense" : m == 1 ? "all duplicates, hashed"
                                                                         : "all duplicates, absent");
      twin_lookup_bb(&tw, &b, 1, "all duplicates, again");
      if (m == 2) ck_assert_uint_eq(tw.last_wa, reps);
    }

    /* all misses: ids never looked up nor inserted (absent hashed ids among them) */
    {
      uint64_t cnt = 0;
      b.n = 0;
      for (t = 0; t < tw.nt; t++) {
        uint64_t want = 20 + emct_rng_below(&tw.rng, 200);
        if (t == (uint32_t)(round % tw.nt)) continue; /* an empty segment */
        for (i = 0; i < want; i++) {
          uint64_t r = unseen_rank(&tw, t);
          if (r == UINT64_MAX) break;
          tw.seen[t][r] = 1; /* not twice in this batch */
          bb_add(&b, t, r);
          cnt++;
        }
      }
      ck_assert_msg(cnt > 0, "test sizes: no unseen id left");
      bb_group(&b, &tw.w[0]);
      twin_lookup(&tw, b.ids, b.ranks, b.offsets, 1, "all misses");
      ck_assert_msg(tw.last_wc == 0, "round %llu: %llu hits among ids never looked up",
                    (unsigned long long)round, (unsigned long long)tw.last_wc);
      ck_assert_uint_eq(tw.last_ws + tw.last_wa, cnt);
    }

    /* inserts: hot ids (cached: updated in place, dirty), unseen ids, new hashed ids, colliding
     * ids; then a lookup of exactly those ids, then a Zipf mix */
    {
      bbuild ib;
      bb_init(&ib, tw.nt, 2000);
      for (t = 0; t < tw.nt; t++) {
        uint64_t hot = 10 + emct_rng_below(&tw.rng, 60), cold = emct_rng_below(&tw.rng, 20);
        for (i = 0; i < hot; i++) bb_add(&ib, t, zipf_rank(&tw, t));
        for (i = 0; i < cold; i++) {
          uint64_t r = unseen_rank(&tw, t); /* hashed: may be new to the store */
          if (r != UINT64_MAX) bb_add(&ib, t, r);
        }
      }
      if (tw.n_coll && round % 2 == 1)
        bb_add(&ib, tw.coll_t, tw.coll[round / 2 % tw.n_coll][round / 4 % 2]);
      twin_insert(&tw, &ib, round + 1, "insert");
      twin_lookup(&tw, ib.ids, ib.ranks, ib.offsets, 1, "the inserted ids");
      bb_free(&ib);
    }
    b.n = 0;
    add_zipf(&tw, &b, 1.0);
    twin_lookup_bb(&tw, &b, 1, "zipf mix after insert");

    /* a long batch over every table: thousands of positions, hot and cold */
    if (round % 2 == 0) {
      b.n = 0;
      for (t = 0; t < tw.nt; t++) {
        uint64_t m2 = 1200 + emct_rng_below(&tw.rng, 600);
        for (i = 0; i < m2; i++)
          bb_add(&b, t, i % 4 == 3 ? emct_rng_below(&tw.rng, tw.w[0].spec[t].universe)
                                   : zipf_rank(&tw, t));
      }
      twin_lookup_bb(&tw, &b, round % 4 == 0, "long batch");
      twin_lookup_bb(&tw, &b, 1, "long batch again");
    }

    /* churn: a long batch of uniformly drawn ids of the narrow tables (mostly misses): the
     * cache turns over, evictions leave tombstones in full buckets, re-pack sweeps run */
    if (cfg->expect_repack) {
      b.n = 0;
      for (t = 0; t < tw.nt; t++)
        if (tw.w[0].row_bytes[t] <= 8)
          for (i = 0; i < 2500; i++) bb_add(&b, t, emct_rng_below(&tw.rng, tw.w[0].spec[t].universe));
      twin_lookup_bb(&tw, &b, 1, "churn");
    }

    /* hashed key collisions */
    if (tw.n_coll) collision_round(&tw, &b, round);

    if (round % 5 == 4) {
      for (k = 0; k < 2; k++) EMCT_OK(emc_flush(tw.c[k], NULL));
      twins_agree(&tw, "flush");
      ck_assert_uint_eq(get_stats(tw.c[0]).dirty_rows, 0);
    }
  }

  /* what the run covered: each of these makes a path of the read run under test */
  s = get_stats(tw.c[0]);
  d = get_debug(tw.c[0]);
  if (getenv("EMCT_VERBOSE"))
    fprintf(stderr,
            "twins %s: %llu calls, %llu lookups (cache %llu, store %llu, absent %llu), "
            "%llu inserts, %llu evictions in %llu passes, %llu write-backs, %llu unified hits, "
            "%llu admissions, %llu skipped, max tombstones %llu (of %llu slots), "
            "%llu re-pack sweeps, %.2f s\n",
            cfg->name, (unsigned long long)tw.calls, (unsigned long long)s.lookups,
            (unsigned long long)tw.cache_positions, (unsigned long long)tw.store_positions,
            (unsigned long long)tw.absent_positions, (unsigned long long)s.inserts,
            (unsigned long long)s.evictions, (unsigned long long)s.evict_passes,
            (unsigned long long)s.writebacks, (unsigned long long)s.unified_hits,
            (unsigned long long)s.admissions, (unsigned long long)s.admit_skipped,
            (unsigned long long)tw.max_tombs, (unsigned long long)d.index_slots,
            (unsigned long long)d.index_rebuilds, now_s() - t0);
  ck_assert_msg(s.hits > 0 && s.misses > 0 && s.absent > 0, "%s: hits %llu misses %llu absent %llu",
                cfg->name, (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent);
  ck_assert_msg(s.evictions > 0 && s.writebacks > 0, "%s: evictions %llu write-backs %llu",
                cfg->name, (unsigned long long)s.evictions, (unsigned long long)s.writebacks);
  ck_assert_msg(s.unified_hits > 0, "%s: no lookup went through a unified-index entry", cfg->name);
  if (cfg->expect_repack) {
    ck_assert_msg(tw.max_tombs > 0, "%s: the index never held a tombstone", cfg->name);
    ck_assert_msg(d.index_rebuilds > 0, "%s: no index re-pack sweep completed", cfg->name);
  }
  if (tw.n_coll)
    ck_assert_msg(tw.coll_lookups_cached > 0,
                  "%s: no colliding id was looked up while its partner was cached", cfg->name);

  for (k = 0; k < 2; k++) EMCT_OK(emc_flush(tw.c[k], NULL));
  twins_agree(&tw, "final flush");
  for (k = 0; k < 2; k++) {
    EMCT_OK(emc_cache_destroy(tw.c[k]));
    emct_world_check_store(&tw.w[k], k ? "per-row twin's store" : "pipelined twin's store");
  }
  bb_free(&b);
  free(tw.rows);
  for (t = 0; t < tw.nt; t++) free(tw.seen[t]);
  for (k = 0; k < 2; k++) emct_world_free(&tw.w[k]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lookup_paths");
  TCase *tt = tcase_create("twins");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tt, twins_same_results, 0, (int)N_TWIN_CFG);
  tcase_set_timeout(tt, emct_timeout(60));
  suite_add_tcase(s, tt);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
