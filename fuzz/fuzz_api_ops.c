/*
 * fuzz_api_ops.c: sequences of public API calls on one store and its cache, checked against
 * a reference model (a plain copy of every row's current value).
 *
 * Input (bytes past the end of the input come from a deterministic stream for the setup;
 * the operation loop stops when the input runs out, or after MAX_OPS operations):
 *   u8 n_tables-1 (mod 3), then per table u8 shape (kind, dtype, dim), u8 rows-1 (mod 16),
 *   u8 init (dense: fill_uniform seed, or zeros; hashed: how many ids to pre-write),
 *   a cache config (see read_config), then operations, one u8 opcode each (low 3 bits):
 *     0,1 lookup / lookup_ex      2 insert        3 flush
 *     4 stats, or with bit 3 a training call (prefetch, dedup, apply_gradients: op_train)
 *     5 destroy + recreate cache when bits 3-4 are 0, else lookup
 *     6 store calls (read; write/fill: EUNSUPPORTED while attached)
 *     7 global keys and NULL / bad-argument calls
 *   Batches: per table u8 count (mod 6), ids from u8 pickers (valid, rows, out-of-range,
 *   special 64-bit values, a small pool of hashed ids so duplicates and capacity limits
 *   happen), u8 corrupt (0xE8..0xEF: offsets declaring 2^61+ ids; 0xF0..0xFF: offsets[0] != 0
 *   or decreasing offsets).
 *
 * Every call's status is predicted: EMC_EINVAL for bad offsets/config, EMC_ERANGE for a dense
 * id >= rows or a hashed table over capacity, EMC_EUNSUPPORTED for store writes while a cache
 * is attached, EMC_ECAPACITY for gradients of a batch larger than t1 (a prefetch may return
 * it whenever its rows do not all fit the pin budget), else EMC_OK. Successful lookups must return the model's rows (absent hashed
 * ids: zero rows, where = ABSENT, counted in stats.absent), stats must add up; failing calls
 * must leave out, stats and contents untouched. Counter invariants (cheap_check) hold after
 * every operation; emc__cache_check walks the whole cache every CHECK_EVERY operations and
 * before every destroy; after a flush or a destroy the store itself must equal the model.
 */
#include <math.h>

#include "fuzz_common.h"

#define MAX_T 3u
#define MAX_PER_T 5u
#define MAX_IDS (MAX_T * MAX_PER_T)
#define MAX_OPS 256u
#define MAX_DIM 40u

typedef struct mtable {
  emc_table_kind kind;
  emc_dtype dtype;
  uint32_t dim, rb;
  uint64_t rows;
  unsigned char *dense; /* dense: rows * rb */
  uint64_t *hids;       /* hashed: count ids */
  unsigned char *hrows; /* hashed: rows * rb */
  uint64_t count;
} mtable;

typedef struct world {
  emc_store *s;
  emc_cache *c;
  emc_cache_config cfg;
  uint32_t nt, max_stride;
  mtable t[MAX_T];
  uint64_t gen; /* row-value generator */
} world;

static const uint64_t k_pool[12] = {0, 1, 2, 3, 4, 5, 6, 7, 1000, 0x8000000000000000ull,
                                    UINT64_MAX, 0x123456789abcdefull};
static const unsigned char k_zero[MAX_DIM * 4];

/* Buffers are filled with 0xA5 before a call; a failed call must leave them so. (memcmp, not
 * a byte loop: a loop's compares are traced, thousands per failing call.) */
static unsigned char k_a5[MAX_IDS * MAX_DIM * 4 + 16];
static int untouched(const unsigned char *p, size_t n) {
  if (k_a5[0] != 0xA5) memset(k_a5, 0xA5, sizeof k_a5);
  return n <= sizeof k_a5 && memcmp(p, k_a5, n) == 0;
}

/* ------------------------------------------------------------------ model */
static int64_t m_find(const mtable *m, uint64_t id) {
  uint64_t k;
  for (k = 0; k < m->count; k++)
    if (m->hids[k] == id) return (int64_t)k;
  return -1;
}

/* The model's row of id, or NULL for an absent hashed id. Dense ids must be < rows. */
static const unsigned char *m_row(const mtable *m, uint64_t id) {
  int64_t k;
  if (m->kind == EMC_TABLE_DENSE) return m->dense + id * m->rb;
  k = m_find(m, id);
  return k < 0 ? NULL : m->hrows + (uint64_t)k * m->rb;
}

static void m_set(mtable *m, uint64_t id, const unsigned char *row) {
  int64_t k;
  if (m->kind == EMC_TABLE_DENSE) {
    memcpy(m->dense + id * m->rb, row, m->rb);
    return;
  }
  k = m_find(m, id);
  if (k < 0) {
    FZ_CHECK(m->count < m->rows, "model: hashed table over capacity");
    k = (int64_t)m->count++;
    m->hids[k] = id;
  }
  memcpy(m->hrows + (uint64_t)k * m->rb, row, m->rb);
}

/* Distinct ids of ids[0..n) absent from the model. */
static uint64_t m_new_ids(const mtable *m, const uint64_t *ids, size_t n) {
  uint64_t fresh = 0;
  size_t i, j;
  for (i = 0; i < n; i++) {
    int dup = 0;
    if (m_find(m, ids[i]) >= 0) continue;
    for (j = 0; j < i && !dup; j++) dup = ids[j] == ids[i];
    fresh += !dup;
  }
  return fresh;
}

static void gen_row(world *w, unsigned char *row, uint32_t rb) {
  uint32_t k;
  uint64_t st = ++w->gen * 0x9E3779B97F4A7C15ull;
  for (k = 0; k < rb; k += 8) {
    uint64_t v = emc__splitmix64(&st);
    memcpy(row + k, &v, rb - k < 8 ? rb - k : 8);
  }
}

/* ------------------------------------------------------------------ checks */
/* The full white-box walk (every page, slot and index entry: O(capacity)). It runs before
 * every destroy (so after the last operation too) and every CHECK_EVERY operations;
 * cheap_check (O(tables)) runs after every operation. Walking after every operation made the
 * walk ~70% of the run time (about 250 inputs/s); a broken structure still shows up within
 * CHECK_EVERY operations, and at the latest at the end of the input. */
#define CHECK_EVERY 32u

static void cache_check(world *w, const char *after) {
  emc_status st;
  if (!w->c) return;
  st = emc__cache_check(w->c);
  FZ_CHECK(st == EMC_OK, "emc__cache_check after %s: %s", after, emc_status_name(st));
}

/* Invariants that hold after every call, from counters only: stats add up, bytes in use
 * within t1 and within the pages held, no call returned above t1, no pass ended above t2. */
static void cheap_check(world *w, const char *after) {
  emc_stats s;
  emc__cache_debug d;
  uint64_t sum = 0, r;
  uint32_t t;
  if (!w->c) return;
  FZ_STATUS(emc_get_stats(w->c, &s), EMC_OK, "emc_get_stats");
  FZ_STATUS(emc__cache_get_debug(w->c, &d), EMC_OK, "emc__cache_get_debug");
  for (t = 0; t < w->nt; t++) {
    FZ_STATUS(emc_get_table_rows_cached(w->c, t, &r), EMC_OK, "emc_get_table_rows_cached");
    sum += r;
  }
  FZ_CHECK(sum == s.rows_cached, "after %s: rows_cached %llu, per-table sum %llu", after,
           (unsigned long long)s.rows_cached, (unsigned long long)sum);
  FZ_CHECK(s.hits + s.misses + s.absent == s.lookups, "after %s: hits + misses + absent != lookups",
           after);
  FZ_CHECK(s.dirty_rows <= s.rows_cached, "after %s: dirty %llu > cached %llu", after,
           (unsigned long long)s.dirty_rows, (unsigned long long)s.rows_cached);
  FZ_CHECK(s.bytes_in_use <= s.bytes_reserved && s.bytes_in_use <= d.high_bytes,
           "after %s: bytes in use %llu, reserved %llu, t1 %llu", after,
           (unsigned long long)s.bytes_in_use, (unsigned long long)s.bytes_reserved,
           (unsigned long long)d.high_bytes);
  FZ_CHECK(d.calls_above_high == 0 && d.passes_above_low == 0,
           "after %s: %llu calls returned above t1, %llu passes ended above t2", after,
           (unsigned long long)d.calls_above_high, (unsigned long long)d.passes_above_low);
}

/* The store (read directly) equals the model. Needs no dirty rows in an attached cache. */
static void check_store(world *w, const char *after) {
  uint32_t t;
  unsigned char got[16 * MAX_DIM * 4];
  uint64_t ids[16];
  for (t = 0; t < w->nt; t++) {
    const mtable *m = &w->t[t];
    const unsigned char *want = m->kind == EMC_TABLE_DENSE ? m->dense : m->hrows;
    uint64_t k, cnt, n = m->kind == EMC_TABLE_DENSE ? m->rows : m->count, probe;
    FZ_STATUS(emc_store_table_count(w->s, t, &cnt), EMC_OK, "emc_store_table_count");
    FZ_CHECK(cnt == n, "after %s: table %u count %llu, model %llu", after, t,
             (unsigned long long)cnt, (unsigned long long)n);
    /* every row in one call: the model keeps them packed in the same order */
    for (k = 0; k < n; k++) ids[k] = m->kind == EMC_TABLE_DENSE ? k : m->hids[k];
    FZ_STATUS(emc_store_read(w->s, t, ids, (size_t)n, got), EMC_OK, "emc_store_read");
    if (memcmp(got, want, (size_t)n * m->rb) != 0)
      for (k = 0; k < n; k++)
        FZ_CHECK(memcmp(got + k * m->rb, want + k * m->rb, m->rb) == 0,
                 "after %s: store table %u id %llu differs", after, t, (unsigned long long)ids[k]);
    if (m->kind == EMC_TABLE_HASHED) {
      for (probe = 0; m_find(m, probe) >= 0; probe++) {}
      FZ_STATUS(emc_store_read(w->s, t, &probe, 1, got), EMC_OK, "emc_store_read(absent)");
      FZ_CHECK(memcmp(got, k_zero, m->rb) == 0, "after %s: absent id %llu reads non-zero", after,
               (unsigned long long)probe);
    }
  }
}

/* ------------------------------------------------------------------ cache config */
static void read_config(world *w, fz *f, emc_status *expect) {
  /* The tables hold at most 3 x 16 rows of <= 160 bytes (7.7 KB): 8192 already caches all of
   * them. The last entry is 12288, or 65536 (where the page size grows) when b bit 7 is set:
   * a big budget costs a big index to build and to walk on every input that draws it. */
  static const size_t caps[8] = {0, 16, 64, 200, 512, 2048, 8192, 12288};
  static const float thr[8][2] = {{0.95f, 0.80f}, {0.5f, 0.25f}, {1.0f, 0.99f}, {0.3f, 0.1f},
                                  {0.2f, 0.01f},  {0.9f, 0.9f},  {0.5f, 0.6f}, {1.1f, 0.5f}};
  static const uint64_t uni[4] = {0, 1, 8, 64};
  uint8_t a = fz_u8(f), b = fz_u8(f);
  emc_cache_config *cfg = &w->cfg;
  emc_cache_config_init(cfg);
  (void)b; /* the fuzzer drives the host backend (its checks are white-box) */
  cfg->backend = EMC_BACKEND_HOST;
  /* inline admission: the checks after each call expect its misses admitted when it returns
   * (test_admission covers the admission thread) */
  cfg->admission = EMC_ADMISSION_INLINE;
  cfg->capacity_bytes = caps[a & 7u] + (size_t)(a >> 3) * 8u * (caps[a & 7u] > 100);
  if ((b & 0x80u) && (a & 7u) == 7) cfg->capacity_bytes = 65536;
  cfg->evict_high = thr[(a >> 5) & 7u][0];
  cfg->evict_low = thr[(a >> 5) & 7u][1];
  cfg->key_bits = (b & 3u) == 3u ? 48u : (b & 1u) ? 32u : 64u;
  cfg->unified_index_rows = uni[(b >> 2) & 3u];
  cfg->hash_seed = (b >> 4) & 7u;
  /* b bit 7 with capacity entry 0: a capacity near SIZE_MAX, more pages than the pool can
   * index (its page count once wrapped to a handful) */
  if ((b & 0x80u) && (a & 7u) == 0) cfg->capacity_bytes = SIZE_MAX - (size_t)a * 4093u;
  *expect = EMC_OK;
  if (!(cfg->evict_low > 0.0f && cfg->evict_low < cfg->evict_high && cfg->evict_high <= 1.0f) ||
      (cfg->key_bits != 32 && cfg->key_bits != 64) || cfg->capacity_bytes == 0 ||
      cfg->capacity_bytes > ((size_t)1 << 60)) {
    *expect = EMC_EINVAL;
  } else {
    uint64_t high = (uint64_t)((double)cfg->capacity_bytes * cfg->evict_high);
    uint64_t low = (uint64_t)((double)cfg->capacity_bytes * cfg->evict_low);
    if (high < w->max_stride || low == 0) *expect = EMC_EINVAL;
  }
}

static void create_cache(world *w, fz *f) {
  emc_status expect, st;
  emc_cache *c = (emc_cache *)(uintptr_t)0x5a5a5a5a5a5a5a50ull, *sentinel = c;
  read_config(w, f, &expect);
  st = emc_cache_create(w->s, &w->cfg, &c);
  FZ_STATUS(st, expect, "emc_cache_create");
  if (st == EMC_OK) {
    FZ_CHECK(c != NULL && c != sentinel, "emc_cache_create: no cache");
    FZ_CHECK(emc_cache_backend(c) == EMC_BACKEND_HOST, "backend %d", (int)emc_cache_backend(c));
    w->c = c; /* (a second cache on this store: op_misc) */
  } else {
    FZ_CHECK(c == sentinel, "failed emc_cache_create changed *out");
    w->c = NULL;
  }
  cheap_check(w, "create"); /* the first full walk comes within CHECK_EVERY operations */
}

static void destroy_cache(world *w, const char *why) {
  if (!w->c) return;
  cache_check(w, why);
  FZ_STATUS(emc_cache_destroy(w->c), EMC_OK, "emc_cache_destroy");
  w->c = NULL;
  check_store(w, why);
}

/* ------------------------------------------------------------------ batches */
typedef struct batch {
  uint64_t ids[MAX_IDS];
  uint64_t offsets[MAX_T + 1]; /* as passed (maybe corrupted) */
  uint64_t good[MAX_T + 1];    /* the real segments */
  uint64_t n;
  size_t bytes;
  emc_status expect; /* EINVAL (offsets), ERANGE (dense id), or OK so far */
} batch;

static uint64_t pick_id(const mtable *m, fz *f) {
  uint8_t b = fz_u8(f);
  if (m->kind == EMC_TABLE_HASHED) {
    if ((b >> 6) < 3) return k_pool[b % 12u];
    return fz_u64(f);
  }
  switch (b >> 6) {
    case 0:
    case 1: return b % m->rows;
    case 2: return (b & 1u) ? m->rows - 1 : m->rows; /* the edge, valid or one past it */
    default: {
      static const uint64_t far[4] = {UINT64_MAX, 0x8000000000000000ull, 1ull << 40, 17};
      return (b & 4u) ? m->rows + (b & 3u) : far[b & 3u];
    }
  }
}

static void read_batch(world *w, fz *f, batch *bt) {
  uint32_t t;
  uint8_t corrupt;
  bt->n = 0;
  bt->bytes = 0;
  bt->offsets[0] = 0;
  bt->expect = EMC_OK;
  for (t = 0; t < w->nt; t++) {
    const mtable *m = &w->t[t];
    uint32_t cnt = fz_u8(f) % (MAX_PER_T + 1u), k;
    for (k = 0; k < cnt; k++) {
      uint64_t id = pick_id(m, f);
      if (m->kind == EMC_TABLE_DENSE && id >= m->rows) bt->expect = EMC_ERANGE;
      bt->ids[bt->n++] = id;
      bt->bytes += m->rb;
    }
    bt->offsets[t + 1] = bt->good[t + 1] = bt->n;
  }
  bt->good[0] = 0;
  corrupt = fz_u8(f);
  if (corrupt >= 0xE8u && corrupt < 0xF0u) {
    /* offsets declaring 2^61 ids or more: no ids array that large can exist, refused before
     * any id is read (the scratch size computed from them once wrapped) */
    static const uint64_t huge[4] = {1ull << 61, 1ull << 62, 1ull << 63, 3ull << 62};
    bt->offsets[w->nt] += huge[corrupt & 3u];
    bt->expect = EMC_EINVAL;
  } else if (corrupt >= 0xF0u) {
    if ((corrupt & 1u) || w->nt == 1 || bt->n == 0) {
      bt->offsets[0] = 1u + (corrupt & 2u); /* offsets[0] != 0 */
    } else {
      uint32_t t2 = 1u + (corrupt >> 1) % (w->nt - 1u);  /* a decrease at t2 < nt */
      bt->offsets[t2] = bt->offsets[w->nt] + 1u;
    }
    bt->expect = EMC_EINVAL;
  }
}

static void stats(world *w, emc_stats *s) {
  FZ_STATUS(emc_get_stats(w->c, s), EMC_OK, "emc_get_stats");
}

/* ------------------------------------------------------------------ operations */
static void op_lookup(world *w, fz *f, int ex) {
  batch bt;
  unsigned char out[MAX_IDS * MAX_DIM * 4 + 16];
  uint8_t where[MAX_IDS + 1], *wp;
  emc_stats s0, s1;
  emc_status st;
  uint64_t absent = 0, hits = 0, i;
  uint32_t t;
  size_t pos = 0, bb;
  read_batch(w, f, &bt);
  if (!w->c) { /* no cache: read the store directly, one table */
    t = fz_u8(f) % w->nt;
    {
      const mtable *m = &w->t[t];
      uint64_t n = bt.good[t + 1] - bt.good[t];
      const uint64_t *ids = bt.ids + bt.good[t];
      emc_status expect = EMC_OK;
      for (i = 0; i < n; i++)
        if (m->kind == EMC_TABLE_DENSE && ids[i] >= m->rows) expect = EMC_ERANGE;
      memset(out, 0xA5, sizeof out);
      st = emc_store_read(w->s, t, ids, (size_t)n, out);
      FZ_STATUS(st, expect, "emc_store_read");
      for (i = 0; i < n && st == EMC_OK; i++) {
        const unsigned char *r = m_row(m, ids[i]);
        FZ_CHECK(memcmp(out + i * m->rb, r ? r : k_zero, m->rb) == 0,
                 "emc_store_read table %u id %llu differs", t, (unsigned long long)ids[i]);
      }
      if (st != EMC_OK)
        FZ_CHECK(untouched(out, sizeof out), "failed read wrote its output");
    }
    return;
  }
  stats(w, &s0);
  memset(out, 0xA5, sizeof out);
  memset(where, 0xA5, sizeof where);
  wp = ex && (fz_u8(f) & 1u) ? where : NULL;
  st = ex ? emc_lookup_ex(w->c, bt.ids, bt.offsets, out, wp, NULL)
          : emc_lookup(w->c, bt.ids, bt.offsets, out, NULL);
  FZ_STATUS(st, bt.expect, ex ? "emc_lookup_ex" : "emc_lookup");
  stats(w, &s1);
  if (st != EMC_OK) {
    FZ_CHECK(untouched(out, sizeof out), "failed lookup wrote its output");
    FZ_CHECK(untouched(where, sizeof where), "failed lookup wrote where");
    FZ_CHECK(memcmp(&s0, &s1, sizeof s0) == 0, "failed lookup changed the stats");
    return;
  }
  FZ_STATUS(emc_batch_bytes(w->s, bt.offsets, &bb), EMC_OK, "emc_batch_bytes");
  FZ_CHECK(bb == bt.bytes, "emc_batch_bytes %zu, expected %zu", bb, bt.bytes);
  for (t = 0; t < w->nt; t++) {
    const mtable *m = &w->t[t];
    for (i = bt.offsets[t]; i < bt.offsets[t + 1]; i++, pos += m->rb) {
      const unsigned char *r = m_row(m, bt.ids[i]);
      FZ_CHECK(memcmp(out + pos, r ? r : k_zero, m->rb) == 0,
               "lookup table %u position %llu id %llu: row differs from the model", t,
               (unsigned long long)i, (unsigned long long)bt.ids[i]);
      absent += r == NULL;
      if (wp) {
        FZ_CHECK(where[i] <= EMC_WHERE_ABSENT, "where[%llu] = %u", (unsigned long long)i, where[i]);
        FZ_CHECK((where[i] == EMC_WHERE_ABSENT) == (r == NULL),
                 "where[%llu] = %u for a %s id", (unsigned long long)i, where[i],
                 r ? "present" : "absent");
        hits += where[i] == EMC_WHERE_CACHE;
      }
    }
  }
  FZ_CHECK(out[pos] == 0xA5, "lookup wrote past its batch");
  FZ_CHECK(s1.lookups - s0.lookups == bt.n, "stats.lookups +%llu for %llu ids",
           (unsigned long long)(s1.lookups - s0.lookups), (unsigned long long)bt.n);
  FZ_CHECK((s1.hits - s0.hits) + (s1.misses - s0.misses) + (s1.absent - s0.absent) == bt.n,
           "hits + misses + absent != %llu", (unsigned long long)bt.n);
  FZ_CHECK(s1.absent - s0.absent == absent, "stats.absent +%llu, model says %llu absent",
           (unsigned long long)(s1.absent - s0.absent), (unsigned long long)absent);
  if (wp) {
    FZ_CHECK(where[bt.n] == 0xA5, "lookup_ex wrote where past its batch");
    FZ_CHECK(s1.hits - s0.hits == hits, "stats.hits +%llu, where says %llu",
             (unsigned long long)(s1.hits - s0.hits), (unsigned long long)hits);
  }
  FZ_CHECK(s1.inserts == s0.inserts, "a lookup changed stats.inserts");
}

static void op_insert(world *w, fz *f) {
  batch bt;
  unsigned char rows[MAX_IDS * MAX_DIM * 4 + 1];
  emc_stats s0, s1;
  emc_status st, expect;
  uint32_t t;
  size_t pos = 0;
  read_batch(w, f, &bt);
  { /* fresh row values for every position (by the real segments) */
    uint64_t i;
    for (t = 0, pos = 0; t < w->nt; t++)
      for (i = bt.good[t]; i < bt.good[t + 1]; i++, pos += w->t[t].rb)
        gen_row(w, rows + pos, w->t[t].rb);
  }
  expect = bt.expect;
  if (expect == EMC_OK)
    for (t = 0; t < w->nt; t++) {
      const mtable *m = &w->t[t];
      size_t n = (size_t)(bt.good[t + 1] - bt.good[t]);
      if (m->kind == EMC_TABLE_HASHED && m_new_ids(m, bt.ids + bt.good[t], n) > m->rows - m->count)
        expect = EMC_ERANGE;
    }
  if (!w->c) { /* no cache: emc_store_write on one table */
    const mtable *m;
    uint64_t n, i;
    t = fz_u8(f) % w->nt;
    m = &w->t[t];
    n = bt.good[t + 1] - bt.good[t];
    pos = 0;
    for (i = 0; i < t; i++) pos += (size_t)(bt.good[i + 1] - bt.good[i]) * w->t[i].rb;
    expect = EMC_OK;
    for (i = 0; i < n; i++)
      if (m->kind == EMC_TABLE_DENSE && bt.ids[bt.good[t] + i] >= m->rows) expect = EMC_ERANGE;
    if (expect == EMC_OK && m->kind == EMC_TABLE_HASHED &&
        m_new_ids(m, bt.ids + bt.good[t], (size_t)n) > m->rows - m->count)
      expect = EMC_ERANGE;
    st = emc_store_write(w->s, t, bt.ids + bt.good[t], (size_t)n, rows + pos);
    FZ_STATUS(st, expect, "emc_store_write");
    if (st == EMC_OK)
      for (i = 0; i < n; i++) m_set(&w->t[t], bt.ids[bt.good[t] + i], rows + pos + i * m->rb);
    return;
  }
  stats(w, &s0);
  st = emc_insert(w->c, bt.ids, bt.offsets, rows, NULL);
  FZ_STATUS(st, expect, "emc_insert");
  stats(w, &s1);
  if (st != EMC_OK) {
    FZ_CHECK(memcmp(&s0, &s1, sizeof s0) == 0, "failed insert changed the stats");
    return;
  }
  for (t = 0, pos = 0; t < w->nt; t++) {
    uint64_t i;
    for (i = bt.offsets[t]; i < bt.offsets[t + 1]; i++, pos += w->t[t].rb)
      m_set(&w->t[t], bt.ids[i], rows + pos);
  }
  FZ_CHECK(s1.inserts - s0.inserts == bt.n, "stats.inserts +%llu for %llu rows",
           (unsigned long long)(s1.inserts - s0.inserts), (unsigned long long)bt.n);
  FZ_CHECK(s1.lookups == s0.lookups, "an insert changed stats.lookups");
}

static void op_flush(world *w) {
  emc_stats s;
  if (!w->c) return;
  FZ_STATUS(emc_flush(w->c, NULL), EMC_OK, "emc_flush");
  stats(w, &s);
  FZ_CHECK(s.dirty_rows == 0, "%llu dirty rows after a flush", (unsigned long long)s.dirty_rows);
  check_store(w, "flush");
}

static void op_stats(world *w) {
  emc_stats s;
  uint64_t sum = 0, r;
  uint32_t t;
  if (!w->c) return;
  stats(w, &s);
  for (t = 0; t < w->nt; t++) {
    FZ_STATUS(emc_get_table_rows_cached(w->c, t, &r), EMC_OK, "emc_get_table_rows_cached");
    sum += r;
  }
  FZ_STATUS(emc_get_table_rows_cached(w->c, w->nt, &r), EMC_ERANGE,
            "emc_get_table_rows_cached(n_tables)");
  FZ_CHECK(sum == s.rows_cached, "rows_cached %llu, per-table sum %llu",
           (unsigned long long)s.rows_cached, (unsigned long long)sum);
  FZ_CHECK(s.dirty_rows <= s.rows_cached, "dirty %llu > cached %llu",
           (unsigned long long)s.dirty_rows, (unsigned long long)s.rows_cached);
  FZ_CHECK(s.capacity_bytes == w->cfg.capacity_bytes, "capacity_bytes %llu",
           (unsigned long long)s.capacity_bytes);
  FZ_CHECK(s.hits + s.misses + s.absent == s.lookups, "hits + misses + absent != lookups");
  FZ_CHECK(s.bytes_in_use <= s.bytes_reserved, "bytes in use %llu > reserved %llu",
           (unsigned long long)s.bytes_in_use, (unsigned long long)s.bytes_reserved);
}

static void op_store(world *w, fz *f) {
  uint8_t b = fz_u8(f);
  uint32_t t = b % w->nt;
  mtable *m = &w->t[t];
  if (w->c) {
    unsigned char row[MAX_DIM * 4];
    uint64_t id = 0;
    memset(row, 1, sizeof row);
    if (b & 0x10u) {
      FZ_STATUS(emc_store_write(w->s, t, &id, 1, row), EMC_EUNSUPPORTED,
                "emc_store_write (cache attached)");
    } else if (b & 0x20u) {
      FZ_STATUS(emc_store_fill_uniform(w->s, t, -1.0f, 1.0f, 7), EMC_EUNSUPPORTED,
                "emc_store_fill_uniform (cache attached)");
    } else if (b & 0x40u) {
      /* refused: the store stays alive with its cache */
      emc_store_destroy(w->s);
      FZ_CHECK(emc_last_error_detail()[0] != '\0', "refused store destroy left no detail");
      FZ_CHECK(emc_store_n_tables(w->s) == w->nt, "store destroyed under its cache");
    } else {
      FZ_STATUS(emc_flush(w->c, NULL), EMC_OK, "emc_flush");
      check_store(w, "store op flush");
    }
  } else if (b & 0x10u) {
    float lo = (b & 0x20u) ? -0.5f : 0.0f, hi = (b & 0x40u) ? 2.0f : 0.0f;
    uint64_t seed = fz_u8(f), k, n = m->kind == EMC_TABLE_DENSE ? m->rows : m->count;
    unsigned char row[MAX_DIM * 4];
    FZ_STATUS(emc_store_fill_uniform(w->s, t, lo, hi, seed), EMC_OK, "emc_store_fill_uniform");
    for (k = 0; k < n; k++) {
      uint64_t id = m->kind == EMC_TABLE_DENSE ? k : m->hids[k];
      FZ_STATUS(emc_uniform_row(seed, t, id, lo, hi, m->dim, m->dtype, row), EMC_OK,
                "emc_uniform_row");
      m_set(m, id, row);
    }
    check_store(w, "fill_uniform");
  } else {
    check_store(w, "store op");
  }
}

/* Training calls on a batch: prefetch (then a lookup of it is all hits when it returned
 * EMC_OK), dedup (first-occurrence order and inverse), apply_gradients (SGD, SUM or MEAN; the
 * model steps each distinct row the same way: gradients summed in position order, then
 * w = fmaf(-lr, g, w)). Every status is predicted. */
static void op_train(world *w, fz *f) {
  batch bt;
  uint8_t b;
  emc_stats s0, s1;
  emc__cache_debug d;
  emc_status st, expect;
  uint32_t t;
  uint64_t i, j;
  read_batch(w, f, &bt);
  if (!w->c) return;
  b = fz_u8(f);
  stats(w, &s0);
  FZ_STATUS(emc__cache_get_debug(w->c, &d), EMC_OK, "emc__cache_get_debug");
  if ((b & 3u) == 0) {
    st = emc_prefetch(w->c, bt.ids, bt.offsets, NULL);
    if (bt.expect == EMC_OK)
      FZ_CHECK(st == EMC_OK || st == EMC_ECAPACITY, "emc_prefetch returned %s (%s)",
               emc_status_name(st), emc_last_error_detail());
    else
      FZ_STATUS(st, bt.expect, "emc_prefetch");
    stats(w, &s1);
    FZ_CHECK(s1.pinned_bytes <= d.low_bytes, "pinned bytes %llu above t2 (%llu)",
             (unsigned long long)s1.pinned_bytes, (unsigned long long)d.low_bytes);
    if (st != EMC_OK && st != EMC_ECAPACITY) {
      FZ_CHECK(memcmp(&s0, &s1, sizeof s0) == 0, "failed prefetch changed the stats");
      return;
    }
    if (st == EMC_OK && w->cfg.key_bits == 64) { /* pinned whole: every present row a hit */
      unsigned char out[MAX_IDS * MAX_DIM * 4 + 16];
      uint8_t where[MAX_IDS + 1];
      FZ_STATUS(emc_lookup_ex(w->c, bt.ids, bt.offsets, out, where, NULL), EMC_OK,
                "emc_lookup_ex after a prefetch");
      for (t = 0; t < w->nt; t++)
        for (i = bt.offsets[t]; i < bt.offsets[t + 1]; i++)
          FZ_CHECK(where[i] == (m_row(&w->t[t], bt.ids[i]) ? EMC_WHERE_CACHE : EMC_WHERE_ABSENT),
                   "position %llu of a prefetched batch: where %u", (unsigned long long)i, where[i]);
    }
    return;
  }
  if ((b & 3u) == 1) {
    uint64_t uids[MAX_IDS + 1], uoffs[MAX_T + 1];
    uint32_t inv[MAX_IDS + 1];
    memset(uids, 0xA5, sizeof uids);
    memset(uoffs, 0xA5, sizeof uoffs);
    memset(inv, 0xA5, sizeof inv);
    st = emc_dedup(w->c, bt.ids, bt.offsets, uids, uoffs, inv, NULL);
    FZ_STATUS(st, bt.expect, "emc_dedup");
    if (st != EMC_OK) {
      FZ_CHECK(untouched((const unsigned char *)uids, sizeof uids) &&
                   untouched((const unsigned char *)uoffs, sizeof uoffs) &&
                   untouched((const unsigned char *)inv, sizeof inv),
               "failed dedup wrote its outputs");
      return;
    }
    FZ_CHECK(uoffs[0] == 0, "unique_offsets[0] = %llu", (unsigned long long)uoffs[0]);
    for (t = 0; t < w->nt; t++) {
      uint64_t u = uoffs[t];
      for (i = bt.offsets[t]; i < bt.offsets[t + 1]; i++) {
        int first = 1;
        for (j = bt.offsets[t]; j < i && first; j++) first = bt.ids[j] != bt.ids[i];
        if (first) FZ_CHECK(uids[u++] == bt.ids[i], "dedup: not in first-occurrence order");
        FZ_CHECK(inv[i] >= uoffs[t] && inv[i] < uoffs[t + 1] && uids[inv[i]] == bt.ids[i],
                 "dedup: inverse[%llu] = %u", (unsigned long long)i, inv[i]);
      }
      FZ_CHECK(u == uoffs[t + 1], "dedup: table %u has %llu unique ids, offsets say %llu", t,
               (unsigned long long)(u - uoffs[t]), (unsigned long long)(uoffs[t + 1] - uoffs[t]));
    }
    FZ_CHECK(uids[uoffs[w->nt]] == 0xA5A5A5A5A5A5A5A5ull, "dedup wrote past its unique ids");
    return;
  }
  {
    float grads[MAX_IDS * MAX_DIM], g[MAX_DIM];
    emc_optimizer o;
    size_t gf = 0, pos;
    uint64_t bytes = 0, distinct = 0;
    unsigned char row[MAX_DIM * 4];
    emc_optimizer_init(&o);
    o.merge = (b & 4u) ? EMC_MERGE_MEAN : EMC_MERGE_SUM;
    o.lr = (b & 8u) ? 0.5f : 0.125f;
    for (t = 0; t < w->nt; t++)
      for (i = bt.good[t]; i < bt.good[t + 1]; i++)
        for (j = 0; j < w->t[t].dim; j++) grads[gf++] = (float)(int8_t)fz_u8(f) / 8.0f;
    expect = bt.expect;
    for (t = 0; t < w->nt && expect == EMC_OK; t++) {
      const mtable *m = &w->t[t];
      size_t n = (size_t)(bt.good[t + 1] - bt.good[t]);
      if (m->kind == EMC_TABLE_HASHED && m_new_ids(m, bt.ids + bt.good[t], n) > m->rows - m->count)
        expect = EMC_ERANGE;
      for (i = bt.good[t]; i < bt.good[t + 1]; i++) {
        int first = 1;
        for (j = bt.good[t]; j < i && first; j++) first = bt.ids[j] != bt.ids[i];
        if (first) bytes += emc__row_stride(m->rb);
      }
    }
    if (expect == EMC_OK && bytes > d.high_bytes) expect = EMC_ECAPACITY;
    st = emc_apply_gradients(w->c, bt.ids, bt.offsets, grads, &o, NULL);
    FZ_STATUS(st, expect, "emc_apply_gradients");
    stats(w, &s1);
    if (st != EMC_OK) {
      FZ_CHECK(memcmp(&s0, &s1, sizeof s0) == 0, "failed apply_gradients changed the stats");
      return;
    }
    for (t = 0, gf = 0; t < w->nt; t++) {
      mtable *m = &w->t[t];
      for (i = bt.offsets[t]; i < bt.offsets[t + 1]; i++, gf += m->dim) {
        const unsigned char *cur;
        uint32_t cnt = 1, k;
        int first = 1;
        for (j = bt.offsets[t]; j < i && first; j++) first = bt.ids[j] != bt.ids[i];
        if (!first) continue;
        distinct++;
        memcpy(g, grads + gf, m->dim * sizeof(float));
        for (j = i + 1, pos = gf + m->dim; j < bt.offsets[t + 1]; j++, pos += m->dim)
          if (bt.ids[j] == bt.ids[i]) {
            for (k = 0; k < m->dim; k++) g[k] = g[k] + grads[pos + k];
            cnt++;
          }
        if (o.merge == EMC_MERGE_MEAN && cnt > 1)
          for (k = 0; k < m->dim; k++) g[k] = g[k] / (float)cnt;
        cur = m_row(m, bt.ids[i]);
        if (cur) memcpy(row, cur, m->rb);
        else memset(row, 0, m->rb); /* a new hashed id: a zero row, then the step */
        for (k = 0; k < m->dim; k++)
          emc__elem_set(row, (uint32_t)m->dtype, k, fmaf(-o.lr, g[k], emc__elem_get(row, (uint32_t)m->dtype, k)));
        m_set(m, bt.ids[i], row);
      }
    }
    FZ_CHECK(s1.gradient_rows - s0.gradient_rows == distinct, "stats.gradient_rows +%llu for %llu rows",
             (unsigned long long)(s1.gradient_rows - s0.gradient_rows), (unsigned long long)distinct);
  }
}

static void op_misc(world *w, fz *f) {
  uint8_t b = fz_u8(f);
  uint64_t key, code, id, off[MAX_T + 1] = {0}, one = 1;
  uint32_t t = b % (w->nt + 1u), bits;
  unsigned char out[MAX_DIM * 4];
  emc_stats s;
  size_t bytes;
  if (!w->c) {
    FZ_STATUS(emc_lookup(NULL, &one, off, out, NULL), EMC_EINVAL, "emc_lookup(NULL cache)");
    return;
  }
  switch ((b >> 4) & 7u) {
    case 0:
    case 1:
    case 2: {
      emc_status expect = EMC_OK;
      id = t < w->nt ? pick_id(&w->t[t], f) : 0;
      if (t >= w->nt || (w->t[t].kind == EMC_TABLE_DENSE && id >= w->t[t].rows)) expect = EMC_ERANGE;
      FZ_STATUS(emc_cache_global_key(w->c, t, id, &key, &code, &bits), expect,
                "emc_cache_global_key");
      if (expect == EMC_OK) {
        uint64_t empty = emc__key_empty(w->cfg.key_bits);
        FZ_CHECK(key != empty && key != empty - 1u, "global key is EMPTY/TOMB");
        FZ_CHECK(bits >= 1 && bits < w->cfg.key_bits && key >> (w->cfg.key_bits - bits) == code,
                 "table %u: key %#llx does not start with its code %#llx/%u", t,
                 (unsigned long long)key, (unsigned long long)code, bits);
        FZ_STATUS(emc_cache_global_key(w->c, t, id, NULL, NULL, NULL), EMC_OK,
                  "emc_cache_global_key(NULL outputs)");
      }
      break;
    }
    case 3: /* NULL ids with ids > 0, NULL out with bytes > 0, NULL offsets */
      off[1] = 1;
      for (t = 1; t <= w->nt; t++) off[t] = 1;
      FZ_STATUS(emc_lookup(w->c, NULL, off, out, NULL), EMC_EINVAL, "emc_lookup(NULL ids)");
      FZ_STATUS(emc_insert(w->c, &one, off, NULL, NULL), EMC_EINVAL, "emc_insert(NULL rows)");
      FZ_STATUS(emc_lookup(w->c, &one, NULL, out, NULL), EMC_EINVAL, "emc_lookup(NULL offsets)");
      break;
    case 4:
      FZ_STATUS(emc_get_stats(w->c, NULL), EMC_EINVAL, "emc_get_stats(NULL)");
      FZ_STATUS(emc_get_stats(NULL, &s), EMC_EINVAL, "emc_get_stats(NULL cache)");
      FZ_STATUS(emc_flush(NULL, NULL), EMC_EINVAL, "emc_flush(NULL)");
      FZ_STATUS(emc_cache_destroy(NULL), EMC_OK, "emc_cache_destroy(NULL)");
      break;
    case 5: /* empty batch: a no-op */
      FZ_STATUS(emc_lookup(w->c, NULL, off, NULL, NULL), EMC_OK, "emc_lookup(empty)");
      FZ_STATUS(emc_insert(w->c, NULL, off, NULL, NULL), EMC_OK, "emc_insert(empty)");
      FZ_STATUS(emc_batch_bytes(w->s, off, &bytes), EMC_OK, "emc_batch_bytes(empty)");
      FZ_CHECK(bytes == 0, "empty batch has %zu bytes", bytes);
      break;
    default: { /* bad struct_size, or a second cache: a store serves one cache */
      emc_cache_config cfg = w->cfg;
      emc_cache *c = NULL;
      if (b & 2u) {
        FZ_STATUS(emc_cache_create(w->s, &cfg, &c), EMC_EUNSUPPORTED, "second emc_cache_create");
      } else {
        cfg.struct_size = (b & 1u) ? 8u : sizeof cfg + 8u;
        FZ_STATUS(emc_cache_create(w->s, &cfg, &c), EMC_EINVAL, "emc_cache_create(struct_size)");
      }
      FZ_CHECK(c == NULL, "failed emc_cache_create changed *out");
      break;
    }
  }
}

/* ------------------------------------------------------------------ setup */
static int setup(world *w, fz *f) {
  static const uint32_t dims[8] = {1, 2, 3, 4, 5, 8, 16, MAX_DIM};
  emc_table_desc d[MAX_T];
  uint32_t t;
  memset(w, 0, sizeof *w);
  memset(d, 0, sizeof d);
  w->nt = 1u + fz_u8(f) % MAX_T;
  for (t = 0; t < w->nt; t++) {
    uint8_t shape = fz_u8(f), r = fz_u8(f);
    mtable *m = &w->t[t];
    m->kind = (emc_table_kind)(shape & 1u);
    m->dtype = (emc_dtype)((shape >> 1) & 1u);
    m->dim = dims[(shape >> 2) & 7u];
    m->rb = m->dim * (uint32_t)emc_dtype_size(m->dtype);
    m->rows = 1u + r % 16u;
    if (emc__row_stride(m->rb) > w->max_stride) w->max_stride = (uint32_t)emc__row_stride(m->rb);
    if (m->kind == EMC_TABLE_DENSE) {
      m->dense = calloc(m->rows, m->rb);
      if (!m->dense) abort();
    } else {
      m->hids = calloc(m->rows, sizeof *m->hids);
      m->hrows = calloc(m->rows, m->rb);
      if (!m->hids || !m->hrows) abort();
    }
    d[t].name = (shape & 0x80u) ? NULL : "fuzz";
    d[t].kind = m->kind;
    d[t].rows = m->rows;
    d[t].dim = m->dim;
    d[t].dtype = m->dtype;
  }
  FZ_STATUS(emc_store_create(d, w->nt, &w->s), EMC_OK, "emc_store_create");
  for (t = 0; t < w->nt; t++) {
    mtable *m = &w->t[t];
    uint8_t init = fz_u8(f);
    unsigned char row[MAX_DIM * 4];
    uint64_t k;
    if (m->kind == EMC_TABLE_DENSE) {
      if (!(init & 1u)) continue;
      FZ_STATUS(emc_store_fill_uniform(w->s, t, -1.0f, 1.0f, init), EMC_OK, "fill_uniform");
      for (k = 0; k < m->rows; k++) {
        FZ_STATUS(emc_uniform_row(init, t, k, -1.0f, 1.0f, m->dim, m->dtype, row), EMC_OK,
                  "emc_uniform_row");
        m_set(m, k, row);
      }
    } else {
      uint64_t n = (init & 15u) % (m->rows + 1u);
      for (k = 0; k < n; k++) {
        uint64_t id = k_pool[(k * 5u + (init >> 4)) % 12u];
        gen_row(w, row, m->rb);
        if (m_find(m, id) < 0 && m->count >= m->rows) break;
        FZ_STATUS(emc_store_write(w->s, t, &id, 1, row), EMC_OK, "emc_store_write");
        m_set(m, id, row);
      }
    }
  }
  check_store(w, "setup");
  create_cache(w, f);
  return 1;
}

static void teardown(world *w) {
  uint32_t t;
  destroy_cache(w, "final destroy");
  emc_store_destroy(w->s);
  for (t = 0; t < w->nt; t++) {
    free(w->t[t].dense);
    free(w->t[t].hids);
    free(w->t[t].hrows);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f;
  world w;
  uint32_t ops = 0;
  fz_init(&f, data, size);
  setup(&w, &f);
  while (!fz_done(&f) && ops++ < MAX_OPS) {
    uint8_t op = fz_u8(&f);
    switch (op & 7u) {
      case 0: op_lookup(&w, &f, 0); break;
      case 1: op_lookup(&w, &f, 1); break;
      case 2: op_insert(&w, &f); break;
      case 3: op_flush(&w); break;
      case 4: /* stats, or (bit 3) a training call */
        if (op & 0x08u) op_train(&w, &f);
        else op_stats(&w);
        break;
      case 5:
        /* destroy + recreate costs about five lookups (a fresh index and pool each time);
         * 1 opcode in 32 does it (5, as the scripted seeds use it, or 0x25, 0x45, ...), the
         * other three quarters of the 5s look up */
        if (op & 0x18u) {
          op_lookup(&w, &f, 0);
          break;
        }
        destroy_cache(&w, "destroy");
        create_cache(&w, &f);
        break;
      case 6: op_store(&w, &f); break;
      default: op_misc(&w, &f); break;
    }
    cheap_check(&w, "an operation");
    if (ops % CHECK_EVERY == 0) cache_check(&w, "an operation");
  }
  teardown(&w); /* destroy_cache walks the cache one last time */
  return 0;
}
