/*
 * test_train_edges: the host backend's training calls at the edges of their contract
 * (issue 19). Host backend only; white-box where a state must be built exactly.
 *
 *   wide rows   a row whose slot is wider than (t1 - t2) * capacity, with the cache's use
 *               between t1 * capacity - stride and t2 * capacity: an eviction pass must free
 *               what the admission needs (use + stride <= t1 * capacity), not only down to
 *               t2. emc_prefetch pins the row (EMC_OK), and emc_lookup, emc_apply_gradients
 *               and emc_insert cache it instead of bypassing the cache.
 *   collisions  32-bit keys: two hashed ids a, b of one table whose global keys are equal
 *               (found by brute force with emc_cache_global_key). emc_prefetch(b) while a
 *               holds the key unpinned (clean, dirty, or as a unified-index entry) evicts a
 *               and pins b (EMC_OK, a's value kept); while a is pinned, b is reported
 *               (EMC_ECAPACITY, counted in pin_shortfall); a batch holding both pins the first
 *               and reports the second. Every row reads right throughout.
 *   mixed       row-wise Adagrad on a store whose tables do not all keep Adagrad state: a
 *               batch whose ids all lie in tables with state is applied (rows and
 *               accumulators bitwise the reference arithmetic; the stateless table is not
 *               touched), and a batch with ids in a table without state is refused with
 *               EMC_EINVAL, changing nothing; SGD still trains every table.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "host_cache.h"

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
  emct_cache_config_init(&cfg);
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

/* ------------------------------------------------------------------ collisions */
#define COL_DIM 4u
#define COL_FILL 2000u                 /* filler ids that push a out of a small cache */
#define COL_FILL_BASE 0x100000000ull   /* above every id the search tries */
#define COL_SEARCH (1u << 19)          /* ids tried: ~20 colliding pairs expected at 31 bits */
static const emc_table_desc COL_TABLES[2] = {
    {"dense", EMC_TABLE_DENSE, 1000, COL_DIM, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"hashed", EMC_TABLE_HASHED, 4096, COL_DIM, EMC_DTYPE_F32, EMC_STATE_NONE}};

typedef struct keyed {
  uint64_t key, id;
} keyed;

static int keyed_cmp(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

static emc_cache *col_cache(emc_store *s, size_t capacity) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.key_bits = 32;
  cfg.capacity_bytes = capacity;
  cfg.prefetch_depth = 1;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  return c;
}

/* Two ids of table 1 whose 32-bit global keys collide under the codec COL_TABLES give
 * (searched once per run, by the tcase's unchecked fixture: its tests, forked from the
 * runner, inherit them). */
static uint64_t col_a, col_b;
static void find_collision(uint64_t *a, uint64_t *b) {
  emc_store *s;
  emc_cache *c;
  keyed *k = malloc(COL_SEARCH * sizeof *k);
  uint64_t i;
  ck_assert(k);
  EMCT_OK(emc_store_create(COL_TABLES, 2, &s));
  c = col_cache(s, 1u << 20);
  for (i = 0; i < COL_SEARCH; i++) {
    k[i].id = i * 0x9E3779B97F4A7C15ull >> 20; /* scattered ids below 2^44 */
    EMCT_OK(emc_cache_global_key(c, 1, k[i].id, &k[i].key, NULL, NULL));
  }
  qsort(k, COL_SEARCH, sizeof *k, keyed_cmp);
  for (i = 1; i < COL_SEARCH && (k[i].key != k[i - 1].key || k[i].id == k[i - 1].id); i++) {}
  ck_assert_msg(i < COL_SEARCH, "no 32-bit key collision among %u hashed ids", COL_SEARCH);
  *a = k[i - 1].id;
  *b = k[i].id;
  free(k);
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(s);
}

static void col_search(void) { find_collision(&col_a, &col_b); }

typedef struct col_world {
  emc_store *s;
  emc_cache *c;
  uint64_t a, b, key;
  float row_a[COL_DIM], row_b[COL_DIM];
} col_world;

/* The store holds a, b and the fillers (pattern rows); a 32-bit-key cache of `capacity`. */
static void col_setup(col_world *w, size_t capacity) {
  uint64_t ka, kb, i;
  float row[COL_DIM];
  memset(w, 0, sizeof *w);
  w->a = col_a;
  w->b = col_b;
  EMCT_OK(emc_store_create(COL_TABLES, 2, &w->s));
  emct_pattern_row(1, w->a, 1, COL_DIM, EMC_DTYPE_F32, w->row_a);
  emct_pattern_row(1, w->b, 1, COL_DIM, EMC_DTYPE_F32, w->row_b);
  EMCT_OK(emc_store_write(w->s, 1, &w->a, 1, w->row_a));
  EMCT_OK(emc_store_write(w->s, 1, &w->b, 1, w->row_b));
  for (i = 0; i < COL_FILL; i++) {
    uint64_t id = COL_FILL_BASE + i;
    emct_pattern_row(1, id, 1, COL_DIM, EMC_DTYPE_F32, row);
    EMCT_OK(emc_store_write(w->s, 1, &id, 1, row));
  }
  w->c = col_cache(w->s, capacity);
  EMCT_OK(emc_cache_global_key(w->c, 1, w->a, &ka, NULL, NULL));
  EMCT_OK(emc_cache_global_key(w->c, 1, w->b, &kb, NULL, NULL));
  ck_assert_msg(ka == kb && w->a != w->b, "ids %llu and %llu: keys %llx, %llx",
                (unsigned long long)w->a, (unsigned long long)w->b, (unsigned long long)ka,
                (unsigned long long)kb);
  w->key = ka;
}

static void col_free(col_world *w) {
  EMCT_OK(emc__cache_check(w->c));
  EMCT_OK(emc_cache_destroy(w->c));
  emc_store_destroy(w->s);
}

/* A lookup of one hashed id: the row (checked against want) and where it came from. */
static emc_where col_read(const col_world *w, uint64_t id, const float *want) {
  uint64_t offs[3] = {0, 0, 1};
  float got[COL_DIM];
  uint8_t where = 0xee;
  EMCT_OK(emc_lookup_ex(w->c, &id, offs, got, &where, NULL));
  ck_assert_msg(memcmp(got, want, sizeof got) == 0, "id %llu reads a wrong row",
                (unsigned long long)id);
  return (emc_where)where;
}

static emc_status col_prefetch(const col_world *w, const uint64_t *ids, uint64_t n) {
  uint64_t offs[3] = {0, 0, n};
  return emc_prefetch(w->c, ids, offs, NULL);
}

/* The entry holding the shared key: a unified-index entry (1), a pool entry (0), none (-1). */
static int col_entry_unified(const col_world *w) {
  const emc__host_cache *h = w->c->host;
  int64_t pos = emc__index_find(&h->ix, w->key);
  if (pos < 0) return -1;
  return (emc__lm_loc(emc__ix_lm(&h->ix, (uint64_t)pos)) & EMC__LOC_HOST) != 0;
}

typedef enum { HOLD_CLEAN, HOLD_DIRTY, HOLD_UNIFIED, HOLD_KINDS } holder_kind;
static const char *const HOLDER_NAME[HOLD_KINDS] = {"clean", "dirty", "unified-index"};

/* a holds the key unpinned: emc_prefetch(b) evicts it and pins b. */
START_TEST(collision_unpinned_holder_gives_way) {
  const holder_kind kind = (holder_kind)_i;
  const char *name = HOLDER_NAME[kind];
  col_world w;
  emc_stats s0, s1;
  emc_status st;
  uint64_t offs[3] = {0, 0, 1};
  col_setup(&w, 4u << 10); /* ~240 rows of 16 bytes */
  if (kind == HOLD_DIRTY) { /* a new value for a, cached dirty: it must reach the store */
    emct_pattern_row(1, w.a, 2, COL_DIM, EMC_DTYPE_F32, w.row_a);
    EMCT_OK(emc_insert(w.c, &w.a, offs, w.row_a, NULL));
  }
  ck_assert_int_eq(col_read(&w, w.a, w.row_a), kind == HOLD_DIRTY ? EMC_WHERE_CACHE : EMC_WHERE_STORE);
  ck_assert_int_eq(col_entry_unified(&w), 0); /* a is cached */
  if (kind == HOLD_UNIFIED) { /* lookups of the fillers evict a into a unified-index entry */
    uint64_t ids[100], i, k;
    float out[100 * COL_DIM];
    uint64_t o[3] = {0, 0, 100};
    for (k = 0; k < COL_FILL; k += 100) {
      for (i = 0; i < 100; i++) ids[i] = COL_FILL_BASE + k + i;
      EMCT_OK(emc_lookup(w.c, ids, o, out, NULL));
    }
    ck_assert_int_eq(col_entry_unified(&w), 1);
  }
  s0 = stats_of(w.c);
  st = col_prefetch(&w, &w.b, 1);
  s1 = stats_of(w.c);
  ck_assert_msg(st == EMC_OK, "%s holder: prefetch(b): %s (%s)", name, emc_status_name(st),
                emc_last_error_detail());
  ck_assert_msg(s1.prefetched == s0.prefetched + 1 && s1.pinned_rows == 1 &&
                    s1.pin_shortfall == s0.pin_shortfall,
                "%s holder: prefetch(b) returned EMC_OK but pinned %llu rows (pinned now %llu, "
                "shortfall +%llu): b, whose key a holds, is neither pinned nor reported",
                name, (unsigned long long)(s1.prefetched - s0.prefetched),
                (unsigned long long)s1.pinned_rows,
                (unsigned long long)(s1.pin_shortfall - s0.pin_shortfall));
  ck_assert_int_eq(col_entry_unified(&w), 0);
  ck_assert_int_eq(col_read(&w, w.b, w.row_b), EMC_WHERE_CACHE);
  ck_assert_int_eq(col_read(&w, w.a, w.row_a), EMC_WHERE_STORE); /* its value kept */
  EMCT_OK(emc__cache_check(w.c));
  EMCT_OK(emc__pins_check(w.c));
  EMCT_OK(emc_flush(w.c, NULL));
  {
    float got[COL_DIM];
    EMCT_OK(emc_store_read(w.s, 1, &w.a, 1, got));
    ck_assert_msg(memcmp(got, w.row_a, sizeof got) == 0, "%s holder: a's value was lost", name);
  }
  col_free(&w);
}
END_TEST

/* a pinned by the live window: b cannot be admitted, and the prefetch says so. */
START_TEST(collision_pinned_holder_is_shortfall) {
  col_world w;
  emc_stats s0, s1;
  emc_status st;
  col_setup(&w, 64u << 10);
  EMCT_OK(col_prefetch(&w, &w.a, 1));
  s0 = stats_of(w.c);
  st = col_prefetch(&w, &w.b, 1); /* depth 1: a's pin lives through this call */
  s1 = stats_of(w.c);
  ck_assert_msg(st == EMC_ECAPACITY, "prefetch(b) while a holds its key pinned: %s, pinned "
                "+%llu, shortfall +%llu (want EMC_ECAPACITY, shortfall +1)",
                emc_status_name(st), (unsigned long long)(s1.prefetched - s0.prefetched),
                (unsigned long long)(s1.pin_shortfall - s0.pin_shortfall));
  ck_assert_msg(strstr(emc_last_error_detail(), "key") != NULL, "detail: %s",
                emc_last_error_detail());
  ck_assert_uint_eq(s1.pin_shortfall, s0.pin_shortfall + 1);
  ck_assert_uint_eq(s1.prefetched, s0.prefetched);
  ck_assert_uint_eq(s1.pinned_rows, 1);
  ck_assert_int_eq(col_read(&w, w.a, w.row_a), EMC_WHERE_CACHE);
  ck_assert_int_eq(col_read(&w, w.b, w.row_b), EMC_WHERE_STORE);
  EMCT_OK(emc__pins_check(w.c));
  col_free(&w);
}
END_TEST

/* Both ids in one batch (either order, neither cached before): the first is pinned, the
 * second reported. */
START_TEST(collision_in_one_batch) {
  col_world w;
  emc_stats s0, s1;
  emc_status st;
  uint64_t ids[3];
  const float *first, *second;
  col_setup(&w, 64u << 10);
  ids[0] = _i ? w.b : w.a;
  ids[1] = _i ? w.a : w.b;
  ids[2] = ids[0]; /* a duplicate changes nothing */
  first = _i ? w.row_b : w.row_a;
  second = _i ? w.row_a : w.row_b;
  s0 = stats_of(w.c);
  st = col_prefetch(&w, ids, 3);
  s1 = stats_of(w.c);
  ck_assert_msg(st == EMC_ECAPACITY, "prefetch of a batch holding two ids with one key: %s, "
                "pinned +%llu, shortfall +%llu (want EMC_ECAPACITY, 1 pinned, shortfall +1)",
                emc_status_name(st), (unsigned long long)(s1.prefetched - s0.prefetched),
                (unsigned long long)(s1.pin_shortfall - s0.pin_shortfall));
  ck_assert_uint_eq(s1.prefetched, s0.prefetched + 1);
  ck_assert_uint_eq(s1.pin_shortfall, s0.pin_shortfall + 1);
  ck_assert_uint_eq(s1.pinned_rows, 1);
  ck_assert_int_eq(col_read(&w, ids[0], first), EMC_WHERE_CACHE);
  ck_assert_int_eq(col_read(&w, ids[1], second), EMC_WHERE_STORE);
  EMCT_OK(emc__pins_check(w.c));
  col_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ mixed optimizers */
#define MIX_DIM 6u
static const emc_table_desc MIX_TABLES[3] = {
    {"adagrad_dense", EMC_TABLE_DENSE, 50, MIX_DIM, EMC_DTYPE_F32, EMC_STATE_ADAGRAD},
    {"sgd_dense", EMC_TABLE_DENSE, 40, MIX_DIM, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"adagrad_hashed", EMC_TABLE_HASHED, 64, MIX_DIM, EMC_DTYPE_F32, EMC_STATE_ADAGRAD}};

/* emc_item.h's row-wise Adagrad, written out: acc += mean(g^2); w -= lr * g / (sqrt(init +
 * acc) + eps), every operation rounded in f32. */
static void adagrad_ref(float *w, float *acc, const float *g, const emc_optimizer *o) {
  float sum = 0.0f, den;
  uint32_t j;
  for (j = 0; j < MIX_DIM; j++) sum = sum + g[j] * g[j];
  *acc = *acc + sum / (float)MIX_DIM;
  den = sqrtf(o->initial_accumulator + *acc) + o->eps;
  for (j = 0; j < MIX_DIM; j++) w[j] = w[j] - (o->lr * g[j]) / den;
}

START_TEST(adagrad_on_a_store_mixing_optimizers) {
  emc_store *s;
  emc_cache *c;
  emc_cache_config cfg;
  emc_optimizer ada, sgd;
  /* a batch of tables 0 and 2 only (table 1's segment empty), duplicates included */
  uint64_t ids[4] = {3, 7, 3, 0xabcdef12345ull}, offs[4] = {0, 3, 3, 4};
  uint64_t ids1[1] = {5}, offs1[4] = {0, 0, 1, 1}, offs_all[4] = {0, 3, 4, 5}, ids_all[5];
  float g[5 * MIX_DIM], w[2][MIX_DIM], acc[2] = {0, 0}, got[MIX_DIM], st, t1_before[MIX_DIM];
  emc_stats s0, s1;
  uint32_t j;
  EMCT_OK(emc_store_create(MIX_TABLES, 3, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 5));
  EMCT_OK(emc_store_fill_uniform(s, 1, -1.0f, 1.0f, 6));
  EMCT_OK(emc_store_read(s, 0, &ids[0], 1, w[0]));
  EMCT_OK(emc_store_read(s, 0, &ids[1], 1, w[1]));
  EMCT_OK(emc_store_read(s, 1, &ids1[0], 1, t1_before));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1u << 20;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  emc_optimizer_init(&ada);
  ada.kind = EMC_OPT_ROWWISE_ADAGRAD;
  ada.lr = 0.1f;
  ada.eps = 1e-6f;
  ada.initial_accumulator = 0.01f;
  emc_optimizer_init(&sgd);
  for (j = 0; j < 5 * MIX_DIM; j++) g[j] = (float)((int)(j * 7 % 17) - 8) / 8.0f;
  /* tables with ids all keep state: applied */
  s0 = stats_of(c);
  {
    emc_status r = emc_apply_gradients(c, ids, offs, g, &ada, NULL);
    ck_assert_msg(r == EMC_OK, "row-wise Adagrad on a batch of tables with state only, in a "
                  "store with a stateless table: %s (%s)", emc_status_name(r),
                  emc_last_error_detail());
  }
  s1 = stats_of(c);
  ck_assert_uint_eq(s1.gradient_rows, s0.gradient_rows + 3);
  {
    float gm[MIX_DIM];
    for (j = 0; j < MIX_DIM; j++) gm[j] = g[j] + g[2 * MIX_DIM + j]; /* id 3 twice: summed */
    adagrad_ref(w[0], &acc[0], gm, &ada);
    adagrad_ref(w[1], &acc[1], g + MIX_DIM, &ada);
  }
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_store_read(s, 0, &ids[0], 1, got));
  ck_assert_msg(memcmp(got, w[0], sizeof got) == 0, "table 0 id 3: not the reference step");
  EMCT_OK(emc_store_read_state(s, 0, &ids[0], 1, &st));
  ck_assert(st == acc[0]);
  EMCT_OK(emc_store_read(s, 0, &ids[1], 1, got));
  ck_assert_msg(memcmp(got, w[1], sizeof got) == 0, "table 0 id 7: not the reference step");
  EMCT_OK(emc_store_read_state(s, 0, &ids[1], 1, &st));
  ck_assert(st == acc[1]);
  { /* the new hashed row: zeros stepped once from accumulator 0 */
    float wz[MIX_DIM] = {0}, az = 0.0f;
    adagrad_ref(wz, &az, g + 3 * MIX_DIM, &ada);
    EMCT_OK(emc_store_read(s, 2, &ids[3], 1, got));
    ck_assert_msg(memcmp(got, wz, sizeof got) == 0, "table 2: not the reference step");
    EMCT_OK(emc_store_read_state(s, 2, &ids[3], 1, &st));
    ck_assert(st == az);
  }
  /* ids in the stateless table: refused, nothing changed */
  s0 = stats_of(c);
  EMCT_ST(emc_apply_gradients(c, ids1, offs1, g, &ada, NULL), EMC_EINVAL);
  ck_assert_msg(strstr(emc_last_error_detail(), "sgd_dense") != NULL &&
                    strstr(emc_last_error_detail(), "EMC_STATE_ADAGRAD") != NULL,
                "detail: %s", emc_last_error_detail());
  ids_all[0] = 3;
  ids_all[1] = 7;
  ids_all[2] = 3;
  ids_all[3] = 5;
  ids_all[4] = ids[3];
  EMCT_ST(emc_apply_gradients(c, ids_all, offs_all, g, &ada, NULL), EMC_EINVAL);
  s1 = stats_of(c);
  ck_assert_uint_eq(s1.gradient_rows, s0.gradient_rows);
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_store_read(s, 0, &ids[0], 1, got));
  ck_assert(memcmp(got, w[0], sizeof got) == 0);
  EMCT_OK(emc_store_read(s, 1, &ids1[0], 1, got));
  ck_assert(memcmp(got, t1_before, sizeof got) == 0);
  /* SGD trains every table, the stateless one included */
  EMCT_OK(emc_apply_gradients(c, ids_all, offs_all, g, &sgd, NULL));
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_store_read(s, 1, &ids1[0], 1, got));
  for (j = 0; j < MIX_DIM; j++) ck_assert(got[j] == fmaf(-sgd.lr, g[3 * MIX_DIM + j], t1_before[j]));
  EMCT_OK(emc__cache_check(c));
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ main */
int main(void) {
  Suite *s = suite_create("train_edges");
  TCase *tw = tcase_create("wide"), *tc = tcase_create("collisions"), *tm = tcase_create("mixed");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tw, wide_row_is_admitted, 0, WIDE_CALLS);
  tcase_add_unchecked_fixture(tc, col_search, NULL);
  tcase_add_loop_test(tc, collision_unpinned_holder_gives_way, 0, HOLD_KINDS);
  tcase_add_test(tc, collision_pinned_holder_is_shortfall);
  tcase_add_loop_test(tc, collision_in_one_batch, 0, 2);
  tcase_add_test(tm, adagrad_on_a_store_mixing_optimizers);
  tcase_set_timeout(tw, emct_timeout(60));
  tcase_set_timeout(tm, emct_timeout(60));
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tw);
  suite_add_tcase(s, tc);
  suite_add_tcase(s, tm);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
