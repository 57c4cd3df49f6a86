/*
 * test_warmup: the hot-set warm-up (bench/warmup.{c,h}, emc-bench --prewarm) on the host
 * backend, against brute force.
 *
 *   stride_is_the_library_s  bench/slot.h's emcb_slot_stride equals lib/emc_item.h's
 *                            emc__row_stride for every row size a table can have
 *   plan_is_brute_force      on random batches over tables of four row costs, the plan is
 *                            exactly what sorting every (table, id) by (count desc, first
 *                            occurrence asc) and taking greedily what fits gives, for budgets
 *                            from 0 to beyond the whole sample; counts equal a recount; the
 *                            budget is never exceeded; a budget >= the sample takes every key
 *   plan_skips_what_does_not_fit  a hot wide row that no longer fits is skipped, colder
 *                            narrow rows after it are still taken
 *   count_millions           millions of distinct keys: counts, first-occurrence ties
 *   apply_makes_resident     after apply every planned row of the store is in the cache
 *                            (lookup's where says EMC_WHERE_CACHE, rows equal the store's),
 *                            absent hashed ids are reported and not cached, bytes == the
 *                            planned rows' slots, nothing evicted or skipped, the cache's
 *                            white-box check passes
 *   apply_hottest_newest     a plan larger than the cache: the hottest chunk (applied last)
 *                            is the one that stays
 *   warm_beats_cold          emcb_warm_run on a Zipf trace: warm >= cold (and > here), rows
 *                            right, figures consistent
 *   bad_use                  bad arguments are refused; the JSON object is whole or -1
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "slot.h"
#include "warmup.h"

/* A dense table's descriptor; designated, so fields the header may add later start at 0. */
#define DENSE(rows_, dim_, dtype_) \
  {.name = NULL, .kind = EMC_TABLE_DENSE, .rows = (rows_), .dim = (dim_), .dtype = (dtype_)}

/* ------------------------------------------------------------------ stride */
START_TEST(stride_is_the_library_s) {
  for (uint64_t rb = 1; rb <= (uint64_t)EMC_MAX_DIM * 4; rb++)
    ck_assert_msg(emcb_slot_stride(rb) == emc__row_stride(rb), "row of %llu bytes: %llu vs %llu",
                  (unsigned long long)rb, (unsigned long long)emcb_slot_stride(rb),
                  (unsigned long long)emc__row_stride(rb));
}
END_TEST

/* ------------------------------------------------------------------ brute force */
/* Four tables whose rows cost 4, 32, 32 and 8 bytes; table 2 is hashed with a third of its
 * ids absent from the store. */
#define NT 4
static const emct_tspec SPEC[NT] = {
    {EMC_TABLE_DENSE, 500, 1, EMC_DTYPE_F32, 0, 0},        /* 4 B rows, stride 4 */
    {EMC_TABLE_DENSE, 2000, 5, EMC_DTYPE_F32, 0, 0},       /* 20 B, stride 32 */
    {EMC_TABLE_HASHED, 4000, 16, EMC_DTYPE_F16, 3000, 2000}, /* 32 B, stride 32 */
    {EMC_TABLE_DENSE, 300, 3, EMC_DTYPE_F16, 0, 0}};       /* 6 B, stride 8 */

typedef struct access {
  uint32_t table;
  uint64_t id, seq; /* seq: position in the order the batches were fed */
} access;

typedef struct key {
  uint32_t table;
  uint64_t id, count, first;
} key;

static int cmp_access(const void *a, const void *b) {
  const access *x = a, *y = b;
  if (x->table != y->table) return x->table < y->table ? -1 : 1;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static int cmp_hot(const void *a, const void *b) {
  const key *x = a, *y = b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  return (x->first > y->first) - (x->first < y->first);
}

/* Random batches: each table gets 0 .. 40 Zipf ids per batch (empty segments included). */
typedef struct sample {
  size_t n_batches;
  uint64_t *ids[64], *offsets[64];
  access *acc;
  size_t n_acc;
} sample;

static void make_sample(emct_world *w, size_t n_batches, sample *s) {
  memset(s, 0, sizeof *s);
  ck_assert(n_batches <= 64);
  s->n_batches = n_batches;
  s->acc = malloc(n_batches * NT * 40 * sizeof *s->acc);
  ck_assert_ptr_nonnull(s->acc);
  for (size_t b = 0; b < n_batches; b++) {
    uint64_t counts[NT], ranks[NT * 40];
    for (uint32_t t = 0; t < NT; t++) counts[t] = emct_rng_below(&w->rng, 41);
    s->ids[b] = malloc(NT * 40 * sizeof *s->ids[b]);
    s->offsets[b] = malloc((NT + 1) * sizeof *s->offsets[b]);
    ck_assert(s->ids[b] && s->offsets[b]);
    emct_world_batch(w, counts, s->ids[b], ranks, s->offsets[b]);
    for (uint32_t t = 0; t < NT; t++)
      for (uint64_t p = s->offsets[b][t]; p < s->offsets[b][t + 1]; p++, s->n_acc++)
        s->acc[s->n_acc] = (access){t, s->ids[b][p], s->n_acc};
  }
}

static void free_sample(sample *s) {
  for (size_t b = 0; b < s->n_batches; b++) {
    free(s->ids[b]);
    free(s->offsets[b]);
  }
  free(s->acc);
}

/* Every distinct key of the sample with its count and first occurrence, hottest first. */
static key *brute_keys(const sample *s, size_t *n_keys) {
  access *a = malloc(s->n_acc * sizeof *a);
  key *k = malloc((s->n_acc ? s->n_acc : 1) * sizeof *k);
  size_t n = 0;
  ck_assert(a && k);
  memcpy(a, s->acc, s->n_acc * sizeof *a);
  qsort(a, s->n_acc, sizeof *a, cmp_access);
  for (size_t i = 0; i < s->n_acc; i++) {
    if (n && k[n - 1].table == a[i].table && k[n - 1].id == a[i].id) {
      k[n - 1].count++;
      continue;
    }
    k[n++] = (key){a[i].table, a[i].id, 1, a[i].seq}; /* sorted by seq within a key */
  }
  qsort(k, n, sizeof *k, cmp_hot);
  free(a);
  *n_keys = n;
  return k;
}

START_TEST(plan_is_brute_force) {
  emct_world w;
  emcb_warm_count c;
  sample s;
  size_t n_keys;
  uint64_t cost[NT], total = 0;
  emct_world_init(&w, SPEC, NT, 0.7 + 0.25 * _i, 100 + (uint64_t)_i);
  make_sample(&w, 24, &s);
  ck_assert_int_eq(emcb_warm_count_init(&c, NT), 0);
  for (size_t b = 0; b < s.n_batches; b++)
    ck_assert_int_eq(emcb_warm_count_batch(&c, s.ids[b], s.offsets[b]), 0);
  key *k = brute_keys(&s, &n_keys);
  ck_assert_uint_eq(c.n_keys, n_keys);
  ck_assert_uint_eq(c.accesses, s.n_acc);
  ck_assert_uint_eq(c.batches, s.n_batches);
  for (uint32_t t = 0; t < NT; t++) cost[t] = emc__row_stride(w.row_bytes[t]);
  for (size_t i = 0; i < n_keys; i++) {
    ck_assert_uint_eq(emcb_warm_count_of(&c, k[i].table, k[i].id), k[i].count);
    total += cost[k[i].table];
  }
  ck_assert_uint_eq(emcb_warm_count_of(&c, 0, 1u << 30), 0); /* never seen */

  uint64_t budgets[16] = {0, 3, 4, 31, 100, 1000, total / 3, total / 2, total - 1, total,
                          total + 1, UINT64_MAX};
  size_t nb = 12;
  emct_rng r;
  emct_rng_seed(&r, 7 + (uint64_t)_i);
  while (nb < 16) budgets[nb++] = emct_rng_below(&r, total + 1);
  for (size_t bi = 0; bi < nb; bi++) {
    const uint64_t budget = budgets[bi];
    emcb_warm_plan p;
    ck_assert_int_eq(emcb_warm_plan_make(&c, w.store, budget, &p), 0);
    /* brute force: greedy over the sorted keys */
    uint64_t bytes = 0, n = 0;
    for (size_t i = 0; i < n_keys; i++) {
      if (cost[k[i].table] > budget - bytes) continue;
      ck_assert_msg(n < p.n_rows, "budget %llu: the plan stops at %llu rows",
                    (unsigned long long)budget, (unsigned long long)p.n_rows);
      ck_assert_msg(p.table[n] == k[i].table && p.id[n] == k[i].id && p.count[n] == k[i].count,
                    "budget %llu, row %llu: plan (%u, %llu) x%llu, brute force (%u, %llu) x%llu",
                    (unsigned long long)budget, (unsigned long long)n, p.table[n],
                    (unsigned long long)p.id[n], (unsigned long long)p.count[n], k[i].table,
                    (unsigned long long)k[i].id, (unsigned long long)k[i].count);
      bytes += cost[k[i].table];
      n++;
    }
    ck_assert_uint_eq(p.n_rows, n);
    ck_assert_uint_eq(p.bytes, bytes);
    ck_assert_msg(p.bytes <= budget, "plan of %llu bytes over a budget of %llu",
                  (unsigned long long)p.bytes, (unsigned long long)budget);
    ck_assert_uint_eq(p.budget, budget);
    ck_assert_uint_eq(p.sample_keys, n_keys);
    for (uint32_t t = 0; t < NT; t++) ck_assert_uint_eq(p.row_cost[t], cost[t]);
    if (budget >= total) { /* everything fits: every sampled key is planned */
      ck_assert_uint_eq(p.n_rows, n_keys);
      ck_assert_uint_eq(p.bytes, total);
    }
    for (uint64_t i = 1; i < p.n_rows; i++) ck_assert_uint_ge(p.count[i - 1], p.count[i]);
    emcb_warm_plan_free(&p);
  }
  free(k);
  emcb_warm_count_free(&c);
  free_sample(&s);
  emct_world_free(&w);
}
END_TEST

START_TEST(plan_skips_what_does_not_fit) {
  /* table 0 rows cost 64 bytes, table 1 rows 4 */
  const emc_table_desc d[2] = {DENSE(10, 16, EMC_DTYPE_F32),
                               DENSE(10, 1, EMC_DTYPE_F32)};
  /* counts: (0, 3) x3, (1, 5) x2, (1, 2) x1, (0, 4) x1; (1, 2) occurs before (0, 4) */
  const uint64_t ids[7] = {3, 3, 3, 5, 5, 2, 4}, off_a[3] = {0, 3, 6}, off_b[3] = {0, 0, 0};
  const uint64_t ids_b[1] = {4}, off_c[3] = {0, 1, 1};
  emc_store *s;
  emcb_warm_count c;
  emcb_warm_plan p;
  EMCT_OK(emc_store_create(d, 2, &s));
  ck_assert_int_eq(emcb_warm_count_init(&c, 2), 0);
  ck_assert_int_eq(emcb_warm_count_batch(&c, ids, off_a), 0);
  ck_assert_int_eq(emcb_warm_count_batch(&c, NULL, off_b), 0); /* an empty batch */
  ck_assert_int_eq(emcb_warm_count_batch(&c, ids_b, off_c), 0);
  ck_assert_uint_eq(c.n_keys, 4);
  /* 10 bytes: the hottest row (64 B) does not fit, the two 4-byte rows do */
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 10, &p), 0);
  ck_assert_uint_eq(p.n_rows, 2);
  ck_assert(p.table[0] == 1 && p.id[0] == 5 && p.count[0] == 2);
  ck_assert(p.table[1] == 1 && p.id[1] == 2 && p.count[1] == 1);
  ck_assert_uint_eq(p.bytes, 8);
  emcb_warm_plan_free(&p);
  /* 135 bytes: the hot wide row and both narrow rows; the second wide row no longer fits */
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 135, &p), 0);
  ck_assert_uint_eq(p.n_rows, 3);
  ck_assert(p.table[0] == 0 && p.id[0] == 3 && p.count[0] == 3);
  ck_assert(p.table[1] == 1 && p.id[1] == 5);
  ck_assert(p.table[2] == 1 && p.id[2] == 2);
  ck_assert_uint_eq(p.bytes, 64 + 4 + 4);
  emcb_warm_plan_free(&p);
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 136, &p), 0); /* ... and now it does */
  ck_assert_uint_eq(p.n_rows, 4);
  ck_assert(p.table[3] == 0 && p.id[3] == 4 && p.count[3] == 1);
  emcb_warm_plan_free(&p);
  emcb_warm_count_free(&c);
  emc_store_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ scale */
START_TEST(count_millions) {
  /* ids [0, n) of two tables once each, in batches of 65,536 per table, then every id
   * divisible by 7 once more: 2n keys, the multiples of 7 counted twice */
  const uint64_t n = emct_scale(1500000, 10), chunk = 65536;
  const emc_table_desc d[2] = {DENSE(n, 1, EMC_DTYPE_F32),
                               DENSE(n, 1, EMC_DTYPE_F32)};
  uint64_t *ids = malloc(2 * chunk * sizeof *ids), off[3];
  emcb_warm_count c;
  emcb_warm_plan p;
  emc_store *s;
  ck_assert_ptr_nonnull(ids);
  ck_assert_int_eq(emcb_warm_count_init(&c, 2), 0);
  for (uint64_t lo = 0; lo < n; lo += chunk) {
    uint64_t m = n - lo < chunk ? n - lo : chunk;
    for (uint64_t i = 0; i < m; i++) ids[i] = ids[m + i] = lo + i;
    off[0] = 0, off[1] = m, off[2] = 2 * m;
    ck_assert_int_eq(emcb_warm_count_batch(&c, ids, off), 0);
  }
  uint64_t sevens = 0;
  for (uint64_t i = 0; i < n; i += 7) {
    ids[0] = ids[1] = i;
    off[0] = 0, off[1] = 1, off[2] = 2;
    ck_assert_int_eq(emcb_warm_count_batch(&c, ids, off), 0);
    sevens++;
  }
  ck_assert_uint_eq(c.n_keys, 2 * n);
  ck_assert_uint_eq(c.accesses, 2 * n + 2 * sevens);
  ck_assert_uint_le(2 * c.n_keys, c.slot_mask + 1);
  for (uint64_t i = 0; i < n; i += 997) {
    ck_assert_uint_eq(emcb_warm_count_of(&c, 0, i), i % 7 ? 1 : 2);
    ck_assert_uint_eq(emcb_warm_count_of(&c, 1, i), i % 7 ? 1 : 2);
  }
  /* 1,000 rows of 4 bytes: the first 1,000 twice-counted keys in order of first occurrence,
   * which is table 0's multiples of 7 in the first batch (65,536 / 7 > 1,000) */
  EMCT_OK(emc_store_create(d, 2, &s));
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 4000, &p), 0);
  ck_assert_uint_eq(p.n_rows, 1000);
  for (uint64_t i = 0; i < p.n_rows; i++)
    ck_assert_msg(p.table[i] == 0 && p.id[i] == 7 * i && p.count[i] == 2,
                  "row %llu: (%u, %llu) x%llu", (unsigned long long)i, p.table[i],
                  (unsigned long long)p.id[i], (unsigned long long)p.count[i]);
  emcb_warm_plan_free(&p);
  /* the whole sample: every key, the twice-counted ones first */
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, UINT64_MAX, &p), 0);
  ck_assert_uint_eq(p.n_rows, 2 * n);
  ck_assert_uint_eq(p.count[2 * sevens - 1], 2);
  ck_assert_uint_eq(p.count[2 * sevens], 1);
  emcb_warm_plan_free(&p);
  emcb_warm_count_free(&c);
  emc_store_destroy(s);
  free(ids);
}
END_TEST

/* ------------------------------------------------------------------ apply */
/* Look the plan's rows up (one call each, so the check's own admissions cannot evict a
 * planned row) and count those found in the cache; absent hashed ids counted apart. Each row
 * must equal the store's. */
static void check_resident(emc_cache *c, const emct_world *w, const emcb_warm_plan *p,
                           uint64_t first, uint64_t n, uint64_t *cached, uint64_t *absent) {
  unsigned char out[64], want[64];
  *cached = *absent = 0;
  for (uint64_t i = first; i < first + n; i++) {
    uint64_t off[NT + 1];
    uint8_t where = 255;
    for (uint32_t t = 0; t <= NT; t++) off[t] = t > p->table[i];
    EMCT_OK(emc_lookup_ex(c, &p->id[i], off, out, &where, NULL));
    EMCT_OK(emc_store_read(w->store, p->table[i], &p->id[i], 1, want));
    ck_assert_msg(memcmp(out, want, w->row_bytes[p->table[i]]) == 0,
                  "planned row (%u, %llu) differs from the store's", p->table[i],
                  (unsigned long long)p->id[i]);
    ck_assert_msg(where == EMC_WHERE_CACHE || (where == EMC_WHERE_ABSENT &&
                                               w->spec[p->table[i]].kind == EMC_TABLE_HASHED),
                  "planned row %llu (%u, %llu): where %u", (unsigned long long)i, p->table[i],
                  (unsigned long long)p->id[i], where);
    *cached += where == EMC_WHERE_CACHE;
    *absent += where == EMC_WHERE_ABSENT;
  }
}

static emc_cache *host_cache(emct_world *w, size_t capacity) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = capacity;
  EMCT_OK(emc_cache_create(w->store, &cfg, &c));
  return c;
}

START_TEST(apply_makes_resident) {
  emct_world w;
  emcb_warm_count cnt;
  emcb_warm_plan p;
  emcb_warm_applied a;
  emc_cache_config cfg;
  sample s;
  emct_world_init(&w, SPEC, NT, 0.9, 300 + (uint64_t)_i);
  make_sample(&w, 40, &s);
  ck_assert_int_eq(emcb_warm_count_init(&cnt, NT), 0);
  for (size_t b = 0; b < s.n_batches; b++)
    ck_assert_int_eq(emcb_warm_count_batch(&cnt, s.ids[b], s.offsets[b]), 0);
  /* a cache that holds part of the sample: the plan is cut by the default budget */
  emct_cache_config_init(&cfg);
  cfg.capacity_bytes = 16384;
  const uint64_t budget = emcb_warm_default_budget(&cfg);
  ck_assert_uint_eq(budget, (uint64_t)(16384 * (double)0.80f));
  ck_assert_int_eq(emcb_warm_plan_make(&cnt, w.store, budget, &p), 0);
  ck_assert_uint_lt(p.n_rows, cnt.n_keys);
  ck_assert_uint_le(p.bytes, budget);
  ck_assert_uint_gt(p.bytes + 32, budget); /* the plan is full to within a row */

  emc_cache *c = host_cache(&w, cfg.capacity_bytes);
  /* chunks of 1, 7 or all rows */
  const size_t chunks[3] = {1, 7, 0};
  ck_assert_int_eq(emcb_warm_apply(c, &p, chunks[_i], NULL, &a), 0);
  uint64_t absent_cost = 0, absent = 0;
  for (uint64_t i = 0; i < p.n_rows; i++) {
    uint8_t present = 1;
    if (w.spec[p.table[i]].kind == EMC_TABLE_HASHED) { /* the id's rank, then its presence */
      present = 0;
      for (uint64_t rank = 0; rank < w.spec[p.table[i]].universe; rank++)
        if (emct_id_of(&w, p.table[i], rank) == p.id[i]) {
          present = w.present[p.table[i]][rank];
          break;
        }
    }
    if (!present) {
      absent++;
      absent_cost += p.row_cost[p.table[i]];
    }
  }
  ck_assert_uint_eq(a.looked_up, p.n_rows);
  ck_assert_uint_eq(a.absent, absent);
  ck_assert_uint_eq(a.rows, p.n_rows - absent);
  ck_assert_uint_eq(a.bytes, p.bytes - absent_cost); /* the library's accounting = the plan's */
  ck_assert_uint_eq(a.skipped, 0);
  ck_assert_uint_eq(a.evictions, 0);
  emct_check_cache(c, &w, 1, "after apply");
  emc_stats st;
  EMCT_OK(emc_get_stats(c, &st));
  ck_assert_uint_eq(st.rows_cached, a.rows);
  ck_assert_uint_eq(st.bytes_in_use, a.bytes);
  uint64_t cached, absent_seen;
  check_resident(c, &w, &p, 0, p.n_rows, &cached, &absent_seen);
  ck_assert_uint_eq(cached, p.n_rows - absent);
  ck_assert_uint_eq(absent_seen, absent);
  EMCT_OK(emc_get_stats(c, &st));
  ck_assert_uint_eq(st.evictions, 0);
  EMCT_OK(emc_cache_destroy(c));
  emcb_warm_plan_free(&p);
  emcb_warm_count_free(&cnt);
  free_sample(&s);
  emct_world_free(&w);
}
END_TEST

START_TEST(apply_hottest_newest) {
  /* every sampled key planned into a cache that holds a fraction of them: warming evicts,
   * and the hottest chunk, applied last, survives */
  emct_world w;
  emcb_warm_count cnt;
  emcb_warm_plan p;
  emcb_warm_applied a;
  const emct_tspec dense[2] = {{EMC_TABLE_DENSE, 3000, 4, EMC_DTYPE_F32, 0, 0},
                               {EMC_TABLE_DENSE, 3000, 4, EMC_DTYPE_F32, 0, 0}};
  emct_world_init(&w, dense, 2, 0.5, 400);
  ck_assert_int_eq(emcb_warm_count_init(&cnt, 2), 0);
  for (int b = 0; b < 40; b++) {
    uint64_t counts[2] = {60, 60}, ids[120], ranks[120], off[3];
    emct_world_batch(&w, counts, ids, ranks, off);
    ck_assert_int_eq(emcb_warm_count_batch(&cnt, ids, off), 0);
  }
  ck_assert_int_eq(emcb_warm_plan_make(&cnt, w.store, UINT64_MAX, &p), 0);
  ck_assert_uint_eq(p.n_rows, cnt.n_keys);
  emc_cache *c = host_cache(&w, 4096); /* 256 rows of 16 bytes; the plan has more */
  ck_assert_uint_gt(p.bytes, 4096);
  ck_assert_int_eq(emcb_warm_apply(c, &p, 16, NULL, &a), 0);
  ck_assert_uint_gt(a.evictions, 0);
  ck_assert_uint_eq(a.rows, p.n_rows);
  uint64_t cached = 0;
  for (uint64_t i = 0; i < 16; i++) {
    uint64_t off[3] = {0, p.table[i] == 0, 1};
    uint8_t where;
    unsigned char out[16];
    EMCT_OK(emc_lookup_ex(c, &p.id[i], off, out, &where, NULL));
    cached += where == EMC_WHERE_CACHE;
  }
  ck_assert_uint_eq(cached, 16);
  EMCT_OK(emc_cache_destroy(c));
  emcb_warm_plan_free(&p);
  emcb_warm_count_free(&cnt);
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ run */
typedef struct run_ctx {
  uint64_t *trace;
  size_t per;        /* ids per batch */
  uint64_t *offsets;
  uint32_t dim;
  uint64_t seed;
  int checked;
} run_ctx;

static const uint64_t *run_ids(void *ctx, size_t i) {
  run_ctx *r = ctx;
  return r->trace + i * r->per;
}

static int run_check(void *ctx, size_t i, const void *out) {
  run_ctx *r = ctx;
  const uint64_t *ids = run_ids(ctx, i);
  float want[8];
  r->checked++;
  for (uint32_t t = 0; t < 3; t++)
    for (uint64_t p = r->offsets[t]; p < r->offsets[t + 1]; p++) {
      EMCT_OK(emc_uniform_row(r->seed, t, ids[p], -1.0f, 1.0f, r->dim, EMC_DTYPE_F32, want));
      if (memcmp((const char *)out + p * r->dim * 4, want, r->dim * 4) != 0) return 1;
    }
  return 0;
}

START_TEST(warm_beats_cold) {
  const uint64_t rows[3] = {20000, 5000, 50000};
  const size_t batch = 256, sample_n = 32, measure_n = 8;
  const uint32_t dim = 8;
  emc_table_desc d[3];
  emc_store *s;
  emct_gen g;
  run_ctx rc = {0};
  uint64_t offsets[4], total = 0;
  for (uint32_t t = 0; t < 3; t++) {
    d[t] = (emc_table_desc)DENSE(rows[t], dim, EMC_DTYPE_F32);
    total += rows[t];
  }
  EMCT_OK(emc_store_create(d, 3, &s));
  for (uint32_t t = 0; t < 3; t++) EMCT_OK(emc_store_fill_uniform(s, t, -1.0f, 1.0f, 5));
  rc.per = 3 * batch;
  rc.offsets = offsets;
  rc.dim = dim;
  rc.seed = 5;
  rc.trace = malloc((sample_n + measure_n) * rc.per * sizeof *rc.trace);
  ck_assert_ptr_nonnull(rc.trace);
  ck_assert_int_eq(emct_gen_init(&g, rows, 3, EMCT_DIST_ZIPF, 1.05, 9 + (uint64_t)_i), 0);
  for (size_t i = 0; i < sample_n + measure_n; i++) emct_gen_batch(&g, batch, rc.trace + i * rc.per, offsets);
  emct_gen_free(&g);

  emc_cache_config cfg;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = (size_t)(0.05 * (double)total * (double)emcb_slot_stride(dim * 4));
  unsigned char *out = malloc(rc.per * dim * 4);
  ck_assert_ptr_nonnull(out);
  emcb_warm_setup su = {.store = s, .cfg = &cfg, .offsets = offsets, .host_ids = run_ids,
                        .check = run_check, .ctx = &rc, .out = out,
                        .sample_batches = sample_n, .measure_batches = measure_n};
  emcb_warm_report r;
  ck_assert_int_eq(emcb_warm_run(&su, &r), 0);
  ck_assert_int_eq(rc.checked, 1);
  ck_assert(r.rows_ok);
  ck_assert_uint_eq(r.sample_batches, sample_n);
  ck_assert_uint_eq(r.measure_batches, measure_n);
  ck_assert_uint_eq(r.measure_lookups, measure_n * rc.per);
  ck_assert_uint_eq(r.budget_bytes, emcb_warm_default_budget(&cfg));
  ck_assert_uint_le(r.bytes, r.budget_bytes);
  ck_assert_uint_eq(r.rows, r.plan_rows); /* dense tables: every planned row admitted */
  ck_assert_uint_eq(r.bytes, r.rows * emcb_slot_stride(dim * 4));
  ck_assert_uint_eq(r.warm_evictions, 0);
  ck_assert_uint_eq(r.warm_skipped, 0);
  ck_assert_msg(r.hit_ratio_cold >= 0 && r.hit_ratio_cold <= 1 && r.hit_ratio_warm <= 1 &&
                    r.hit_ratio_replay >= 0 && r.hit_ratio_replay <= 1,
                "ratios %g %g %g", r.hit_ratio_cold, r.hit_ratio_warm, r.hit_ratio_replay);
  ck_assert_msg(r.hit_ratio_warm > r.hit_ratio_cold, "warm %g <= cold %g", r.hit_ratio_warm,
                r.hit_ratio_cold);
  /* the measurement is deterministic on the host backend: a second run agrees */
  emcb_warm_report r2;
  ck_assert_int_eq(emcb_warm_run(&su, &r2), 0);
  ck_assert(r2.hit_ratio_cold == r.hit_ratio_cold && r2.hit_ratio_warm == r.hit_ratio_warm &&
            r2.rows == r.rows && r2.bytes == r.bytes);

  char js[1024];
  int n = emcb_warm_json(&r, js, sizeof js);
  ck_assert_int_gt(n, 0);
  ck_assert_int_eq((int)strlen(js), n);
  ck_assert(js[0] == '{' && js[n - 1] == '}');
  const char *keys[] = {"\"sample_batches\":", "\"measure_batches\":", "\"rows\":", "\"bytes\":",
                        "\"budget_bytes\":", "\"hit_ratio_cold\":", "\"hit_ratio_warm\":",
                        "\"plan_s\":", "\"apply_s\":", "\"hit_ratio_replay\":"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    ck_assert_msg(strstr(js, keys[i]) != NULL, "%s missing from %s", keys[i], js);
  ck_assert_int_eq(emcb_warm_json(&r, js, 20), -1); /* cut off: said so */
  free(out);
  free(rc.trace);
  emc_store_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ misuse */
START_TEST(bad_use) {
  const emc_table_desc d[2] = {DENSE(10, 4, EMC_DTYPE_F32),
                               DENSE(10, 4, EMC_DTYPE_F32)};
  const uint64_t ids[2] = {1, 2}, bad_off[3] = {0, 2, 1}, bad_first[3] = {1, 1, 2};
  emcb_warm_count c;
  emcb_warm_plan p;
  emcb_warm_report r;
  emc_store *s;
  EMCT_OK(emc_store_create(d, 2, &s));
  ck_assert_int_eq(emcb_warm_count_init(&c, 0), EMC_EINVAL);
  ck_assert_int_eq(emcb_warm_count_init(&c, 3), 0);
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 100, &p), EMC_EINVAL); /* 3 tables vs 2 */
  ck_assert_uint_eq(p.n_rows, 0);
  emcb_warm_count_free(&c);
  ck_assert_int_eq(emcb_warm_count_init(&c, 2), 0);
  ck_assert_int_eq(emcb_warm_count_batch(&c, ids, bad_off), EMC_EINVAL);
  ck_assert_int_eq(emcb_warm_count_batch(&c, ids, bad_first), EMC_EINVAL);
  ck_assert_int_eq(emcb_warm_count_batch(&c, ids, NULL), EMC_EINVAL);
  ck_assert_uint_eq(c.accesses, 0);
  ck_assert_int_eq(emcb_warm_plan_make(&c, NULL, 100, &p), EMC_EINVAL);
  ck_assert_int_eq(emcb_warm_plan_make(&c, s, 100, &p), 0); /* nothing counted: empty */
  ck_assert_uint_eq(p.n_rows, 0);
  ck_assert_int_eq(emcb_warm_apply(NULL, &p, 0, NULL, NULL), EMC_EINVAL);
  emcb_warm_plan_free(&p);
  emcb_warm_plan_free(NULL);
  emcb_warm_count_free(&c);
  ck_assert_int_eq(emcb_warm_run(NULL, &r), EMC_EINVAL);
  emcb_warm_setup su = {0};
  ck_assert_int_eq(emcb_warm_run(&su, &r), EMC_EINVAL);
  ck_assert_uint_eq(emcb_warm_default_budget(NULL), 0);
  emc_store_destroy(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("warmup");
  TCase *tc = tcase_create("warmup");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, stride_is_the_library_s);
  tcase_add_loop_test(tc, plan_is_brute_force, 0, 4);
  tcase_add_test(tc, plan_skips_what_does_not_fit);
  tcase_add_test(tc, count_millions);
  tcase_add_loop_test(tc, apply_makes_resident, 0, 3);
  tcase_add_test(tc, apply_hottest_newest);
  tcase_add_loop_test(tc, warm_beats_cold, 0, 2);
  tcase_add_test(tc, bad_use);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
