/*
 * trace.c: see trace.h. libc and libm only.
 */
#include "trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ PRNG */
uint64_t emct_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void emct_rng_seed(emct_rng *r, uint64_t seed) {
  uint64_t st = seed;
  for (int i = 0; i < 4; i++) r->s[i] = emct_splitmix64(&st);
  /* splitmix64 is a bijection of its counter, so four zero outputs in a row cannot happen;
   * keep the guard anyway: xoshiro must never start from the all-zero state. */
  if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t emct_rng_next(emct_rng *r) {
  uint64_t *s = r->s;
  const uint64_t result = rotl64(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

double emct_rng_double(emct_rng *r) {
  return (double)(emct_rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t emct_rng_below(emct_rng *r, uint64_t n) {
  /* Lemire: the high word of x * n is uniform once the low word's biased zone is rejected. */
  unsigned __int128 m = (unsigned __int128)emct_rng_next(r) * n;
  uint64_t lo = (uint64_t)m;
  if (lo < n) {
    uint64_t thresh = (0 - n) % n;
    while (lo < thresh) {
      m = (unsigned __int128)emct_rng_next(r) * n;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

/* ----------------------------------------------------------- permutation */
void emct_perm_init(emct_perm *p, uint64_t n, uint64_t seed) {
  if (n == 0) n = 1;
  uint32_t bits = 0;
  while (bits < 64 && (bits == 0 ? 1ull : (1ull << bits)) < n) bits++;
  p->n = n;
  p->mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
  p->shift = bits / 2 > 0 ? bits / 2 : 1;
  uint64_t st = seed ^ 0x5851f42d4c957f2dull;
  for (int i = 0; i < 3; i++) {
    p->mul[i] = emct_splitmix64(&st) | 1u;
    p->add[i] = emct_splitmix64(&st);
  }
}

/* One pass of the bijection of [0, 2^b): every step is invertible mod 2^b (odd multiplier,
 * addition, x ^= x >> s), so the composition is too. */
static inline uint64_t perm_round(const emct_perm *p, uint64_t x) {
  for (int i = 0; i < 3; i++) {
    x = (x * p->mul[i] + p->add[i]) & p->mask;
    x ^= x >> p->shift;
  }
  return x;
}

uint64_t emct_perm_apply(const emct_perm *p, uint64_t x) {
  /* Cycle-walking: x's cycle in [0, 2^b) returns to x, so the walk stops at the first
   * element of the cycle that lies in [0, n) - a bijection of [0, n). */
  do {
    x = perm_round(p, x);
  } while (x >= p->n);
  return x;
}

/* ------------------------------------------------------------------ Zipf
 * Rejection-inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates
 * from monotone discrete distributions", 1996), in the form of Apache Commons RNG's
 * RejectionInversionZipfSampler. Ranks are 1-based inside: h(x) = x^-alpha is the hat, H its
 * integral, written through helpers that stay accurate as alpha -> 1 (where H becomes log). */

/* log1p(x) / x, continuous at 0. */
static double helper1(double x) {
  if (fabs(x) > 1e-8) return log1p(x) / x;
  return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* expm1(x) / x, continuous at 0. */
static double helper2(double x) {
  if (fabs(x) > 1e-8) return expm1(x) / x;
  return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

static double zipf_h(double alpha, double x) { return exp(-alpha * log(x)); }

/* H(x) = (x^(1-alpha) - 1) / (1 - alpha), log(x) at alpha == 1. */
static double zipf_hint(double alpha, double x) {
  double lx = log(x);
  return helper2((1.0 - alpha) * lx) * lx;
}

static double zipf_hint_inv(double alpha, double x) {
  double t = x * (1.0 - alpha);
  if (t < -1.0) t = -1.0; /* rounding guard: H's range ends at t == -1 */
  return exp(helper1(t) * x);
}

int emct_zipf_init(emct_zipf *z, uint64_t n, double alpha) {
  if (n == 0 || !(alpha > 0.0) || !isfinite(alpha)) return -1;
  z->n = n;
  z->alpha = alpha;
  z->h_x1 = zipf_hint(alpha, 1.5) - 1.0;
  z->h_n = zipf_hint(alpha, (double)n + 0.5);
  z->s = 2.0 - zipf_hint_inv(alpha, zipf_hint(alpha, 2.5) - zipf_h(alpha, 2.0));
  return 0;
}

uint64_t emct_zipf_sample(const emct_zipf *z, emct_rng *r) {
  const double nd = (double)z->n;
  for (;;) {
    /* u uniform in (H(1.5) - 1, H(n + 0.5)]; invert H, round to the nearest rank. */
    double u = z->h_n + emct_rng_double(r) * (z->h_x1 - z->h_n);
    double x = zipf_hint_inv(z->alpha, u);
    double kd = floor(x + 0.5);
    if (kd < 1.0) kd = 1.0;
    if (kd > nd) kd = nd;
    /* Accept when u falls under the histogram bar of rank k: the squeeze k - x <= s avoids
     * the H evaluation most of the time. */
    if (kd - x <= z->s || u >= zipf_hint(z->alpha, kd + 0.5) - zipf_h(z->alpha, kd)) {
      uint64_t k = (uint64_t)kd;
      if (k < 1) k = 1;
      if (k > z->n) k = z->n;
      return k - 1;
    }
  }
}

/* --------------------------------------------------------------- presets */
const uint64_t emct_criteo_kaggle_rows[EMCT_CRITEO_KAGGLE_TABLES] = {
    1460,  583,   10131227, 2202608, 305,  24,    12517,   633, 3,
    93145, 5683,  8351593,  3194,    27,   14992, 5461306, 10,  5652,
    2173,  4,     7046547,  18,      15,   286181, 105,    142572};

uint64_t emct_scale_rows(uint64_t card, double scale) {
  double v = round((double)card * scale);
  if (!(v >= 1.0)) return 1;
  if (v >= 18446744073709551615.0) return UINT64_MAX;
  return (uint64_t)v;
}

uint32_t emct_preset_rows(const char *name, double scale, uint32_t uniform_tables,
                          uint64_t uniform_rows, uint64_t *rows, uint32_t max_tables) {
  if (name == NULL || rows == NULL) return 0;
  if (strcmp(name, "criteo-kaggle") == 0) {
    if (!(scale > 0.0) || !isfinite(scale) || max_tables < EMCT_CRITEO_KAGGLE_TABLES) return 0;
    for (uint32_t t = 0; t < EMCT_CRITEO_KAGGLE_TABLES; t++)
      rows[t] = emct_scale_rows(emct_criteo_kaggle_rows[t], scale);
    return EMCT_CRITEO_KAGGLE_TABLES;
  }
  if (strcmp(name, "uniform") == 0) {
    if (uniform_tables == 0 || uniform_tables > max_tables || uniform_rows == 0) return 0;
    for (uint32_t t = 0; t < uniform_tables; t++) rows[t] = uniform_rows;
    return uniform_tables;
  }
  return 0;
}

/* ------------------------------------------------------------- generator */
int emct_gen_init(emct_gen *g, const uint64_t *rows, uint32_t n_tables, emct_dist dist,
                  double alpha, uint64_t seed) {
  memset(g, 0, sizeof *g);
  if (rows == NULL || n_tables == 0) return -1;
  if (dist != EMCT_DIST_ZIPF && dist != EMCT_DIST_UNIFORM) return -1;
  emct_table_gen *tg = calloc(n_tables, sizeof *tg);
  if (tg == NULL) return -1;
  uint64_t st = seed;
  for (uint32_t t = 0; t < n_tables; t++) {
    if (rows[t] == 0) {
      free(tg);
      return -1;
    }
    tg[t].rows = rows[t];
    /* A Zipf sampler is set up for the uniform case too (alpha 1): it is unused there. */
    if (emct_zipf_init(&tg[t].zipf, rows[t], dist == EMCT_DIST_ZIPF ? alpha : 1.0) != 0) {
      free(tg);
      return -1;
    }
    emct_perm_init(&tg[t].perm, rows[t], emct_splitmix64(&st));
    emct_rng_seed(&tg[t].rng, emct_splitmix64(&st));
  }
  g->n_tables = n_tables;
  g->dist = dist;
  g->alpha = alpha;
  g->tables = tg;
  return 0;
}

void emct_gen_free(emct_gen *g) {
  if (g == NULL) return;
  free(g->tables);
  memset(g, 0, sizeof *g);
}

uint64_t emct_gen_rank_to_id(const emct_gen *g, uint32_t t, uint64_t rank) {
  return emct_perm_apply(&g->tables[t].perm, rank);
}

void emct_gen_batch(emct_gen *g, size_t batch, uint64_t *ids, uint64_t *offsets) {
  for (uint32_t t = 0; t < g->n_tables; t++) {
    emct_table_gen *tg = &g->tables[t];
    uint64_t *seg = ids + (size_t)t * batch;
    offsets[t] = (uint64_t)t * batch;
    if (g->dist == EMCT_DIST_UNIFORM) {
      for (size_t i = 0; i < batch; i++) seg[i] = emct_rng_below(&tg->rng, tg->rows);
    } else {
      for (size_t i = 0; i < batch; i++)
        seg[i] = emct_perm_apply(&tg->perm, emct_zipf_sample(&tg->zipf, &tg->rng));
    }
  }
  offsets[g->n_tables] = (uint64_t)g->n_tables * batch;
}

/* ----------------------------------------------------------------- dedup */
static inline uint64_t mix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

void emct_dedup_init(emct_dedup *d) { memset(d, 0, sizeof *d); }

void emct_dedup_free(emct_dedup *d) {
  if (d == NULL) return;
  free(d->keys);
  free(d->stamp);
  memset(d, 0, sizeof *d);
}

static int dedup_reserve(emct_dedup *d, size_t n) {
  if (d->cap >= 2 * n && d->cap >= 16) return 0;
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  uint64_t *keys = malloc(cap * sizeof *keys);
  uint32_t *stamp = calloc(cap, sizeof *stamp);
  if (keys == NULL || stamp == NULL) {
    free(keys);
    free(stamp);
    return -1;
  }
  free(d->keys);
  free(d->stamp);
  d->keys = keys;
  d->stamp = stamp;
  d->cap = cap;
  d->gen = 0;
  return 0;
}

int emct_dedup_first(emct_dedup *d, const uint64_t *ids, size_t n, size_t *first,
                     size_t *n_first) {
  *n_first = 0;
  if (n == 0) return 0;
  if (dedup_reserve(d, n) != 0) return -1;
  if (++d->gen == 0) { /* stamps wrapped: forget them all once every 2^32 calls */
    memset(d->stamp, 0, d->cap * sizeof *d->stamp);
    d->gen = 1;
  }
  const size_t mask = d->cap - 1;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t id = ids[i];
    size_t b = (size_t)mix64(id) & mask;
    for (;;) {
      if (d->stamp[b] != d->gen) { /* empty in this generation: first occurrence */
        d->stamp[b] = d->gen;
        d->keys[b] = id;
        first[m++] = i;
        break;
      }
      if (d->keys[b] == id) break;
      b = (b + 1) & mask;
    }
  }
  *n_first = m;
  return 0;
}

int emct_dedup_batch(emct_dedup *d, const uint64_t *ids, const uint64_t *offsets,
                     uint32_t n_tables, size_t *first, size_t *n_first) {
  size_t m = 0;
  for (uint32_t t = 0; t < n_tables; t++) {
    size_t lo = (size_t)offsets[t], n = (size_t)(offsets[t + 1] - offsets[t]), k = 0;
    if (emct_dedup_first(d, ids + lo, n, first + m, &k) != 0) return -1;
    for (size_t i = 0; i < k; i++) first[m + i] += lo;
    m += k;
  }
  *n_first = m;
  return 0;
}

/* ------------------------------------------------------------------- LRU */
static inline uint64_t lru_home(const emct_lru *l, uint32_t table, uint64_t id) {
  return mix64(id + (uint64_t)table * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) &
         l->slot_mask;
}

int emct_lru_init(emct_lru *l, const uint64_t *row_bytes, uint32_t n_tables,
                  uint64_t capacity_bytes, uint64_t max_keys) {
  memset(l, 0, sizeof *l);
  if (row_bytes == NULL || n_tables == 0) return -1;
  uint64_t min_rb = UINT64_MAX;
  for (uint32_t t = 0; t < n_tables; t++) {
    if (row_bytes[t] == 0) return -1;
    if (row_bytes[t] < min_rb) min_rb = row_bytes[t];
  }
  uint64_t nodes = capacity_bytes / min_rb;
  if (max_keys != 0 && nodes > max_keys) nodes = max_keys;
  if (nodes > (uint64_t)EMCT_NIL - 1) return -1;
  if (nodes == 0) nodes = 1; /* keeps the arrays non-empty; nothing is ever admitted */
  uint64_t slots = 16;
  while (slots < 2 * nodes) slots *= 2;

  l->row_bytes = malloc(n_tables * sizeof *l->row_bytes);
  l->node_id = malloc(nodes * sizeof *l->node_id);
  l->node_table = malloc(nodes * sizeof *l->node_table);
  l->prev = malloc(nodes * sizeof *l->prev);
  l->next = malloc(nodes * sizeof *l->next);
  l->slots = calloc(slots, sizeof *l->slots);
  if (!l->row_bytes || !l->node_id || !l->node_table || !l->prev || !l->next || !l->slots) {
    emct_lru_free(l);
    return -1;
  }
  memcpy(l->row_bytes, row_bytes, n_tables * sizeof *l->row_bytes);
  l->n_tables = n_tables;
  l->capacity = capacity_bytes;
  l->max_nodes = (uint32_t)nodes;
  l->free_head = EMCT_NIL;
  l->head = l->tail = EMCT_NIL;
  l->slot_mask = slots - 1;
  return 0;
}

void emct_lru_free(emct_lru *l) {
  if (l == NULL) return;
  free(l->row_bytes);
  free(l->node_id);
  free(l->node_table);
  free(l->prev);
  free(l->next);
  free(l->slots);
  memset(l, 0, sizeof *l);
}

static void lru_unlink(emct_lru *l, uint32_t x) {
  uint32_t p = l->prev[x], n = l->next[x];
  if (p != EMCT_NIL) l->next[p] = n; else l->head = n;
  if (n != EMCT_NIL) l->prev[n] = p; else l->tail = p;
}

static void lru_push_front(emct_lru *l, uint32_t x) {
  l->prev[x] = EMCT_NIL;
  l->next[x] = l->head;
  if (l->head != EMCT_NIL) l->prev[l->head] = x; else l->tail = x;
  l->head = x;
}

/* Remove index slot i, then shift later members of its probe run back so that every key
 * stays reachable from its home slot without tombstones (Knuth's algorithm R). */
static void lru_slot_delete(emct_lru *l, uint64_t i) {
  const uint64_t mask = l->slot_mask;
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    uint32_t v = l->slots[j];
    if (v == 0) break;
    uint64_t k = lru_home(l, l->node_table[v - 1], l->node_id[v - 1]);
    /* Move j's entry into the hole at i unless its home lies cyclically in (i, j]. */
    int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      l->slots[i] = v;
      i = j;
    }
  }
  l->slots[i] = 0;
}

static void lru_evict_tail(emct_lru *l) {
  uint32_t x = l->tail;
  uint64_t b = lru_home(l, l->node_table[x], l->node_id[x]);
  while (l->slots[b] != x + 1) b = (b + 1) & l->slot_mask;
  lru_slot_delete(l, b);
  lru_unlink(l, x);
  l->used -= l->row_bytes[l->node_table[x]];
  l->resident--;
  l->evictions++;
  l->next[x] = l->free_head;
  l->free_head = x;
}

int emct_lru_touch(emct_lru *l, uint32_t table, uint64_t id) {
  uint64_t b = lru_home(l, table, id);
  for (;;) {
    uint32_t v = l->slots[b];
    if (v == 0) break;
    if (l->node_id[v - 1] == id && l->node_table[v - 1] == table) {
      l->hits++;
      if (l->head != v - 1) {
        lru_unlink(l, v - 1);
        lru_push_front(l, v - 1);
      }
      return 1;
    }
    b = (b + 1) & l->slot_mask;
  }
  l->misses++;
  return 0;
}

int emct_lru_access(emct_lru *l, uint32_t table, uint64_t id) {
  if (emct_lru_touch(l, table, id)) return 1;
  emct_lru_admit(l, table, id);
  return 0;
}

void emct_lru_admit(emct_lru *l, uint32_t table, uint64_t id) {
  uint64_t b;
  const uint64_t rb = l->row_bytes[table];
  if (rb > l->capacity) return;
  while (l->tail != EMCT_NIL && (l->used + rb > l->capacity ||
                                 (l->free_head == EMCT_NIL && l->n_nodes == l->max_nodes)))
    lru_evict_tail(l);
  uint32_t x;
  if (l->free_head != EMCT_NIL) {
    x = l->free_head;
    l->free_head = l->next[x];
  } else {
    x = l->n_nodes++;
  }
  l->node_id[x] = id;
  l->node_table[x] = table;
  lru_push_front(l, x);
  l->used += rb;
  l->resident++;
  /* Evictions may have shifted the probe run: find the insertion slot afresh. */
  b = lru_home(l, table, id);
  while (l->slots[b] != 0) b = (b + 1) & l->slot_mask;
  l->slots[b] = x + 1;
}

int emct_lru_batch(emct_lru *l, emct_dedup *d, size_t *first, const uint64_t *ids,
                   const uint64_t *offsets, uint64_t *hits, uint64_t *distinct) {
  uint64_t h = 0;
  size_t m = 0;
  for (uint32_t t = 0; t < l->n_tables; t++) {
    const uint64_t *seg = ids + offsets[t];
    size_t k = 0;
    if (emct_dedup_first(d, seg, (size_t)(offsets[t + 1] - offsets[t]), first, &k) != 0)
      return -1;
    for (size_t i = 0; i < k; i++) h += (uint64_t)emct_lru_access(l, t, seg[first[i]]);
    m += k;
  }
  if (hits) *hits += h;
  if (distinct) *distinct += m;
  return 0;
}

int emct_lru_batch_phased(emct_lru *l, emct_dedup *d, size_t *first, const uint64_t *ids,
                          const uint64_t *offsets, uint64_t *hits, uint64_t *distinct) {
  size_t m = 0, n_miss = 0;
  uint64_t h = 0;
  if (emct_dedup_batch(d, ids, offsets, l->n_tables, first, &m) != 0) return -1;
  /* phase 1: look every distinct key up; keep the misses' positions at the front of first[]
   * (in order, so table order is kept) */
  uint32_t t = 0;
  for (size_t k = 0; k < m; k++) {
    size_t p = first[k];
    while (p >= offsets[t + 1]) t++;
    if (emct_lru_touch(l, t, ids[p])) h++;
    else first[n_miss++] = p;
  }
  /* phase 2: admit the misses */
  t = 0;
  for (size_t k = 0; k < n_miss; k++) {
    size_t p = first[k];
    while (p >= offsets[t + 1]) t++;
    emct_lru_admit(l, t, ids[p]);
  }
  if (hits) *hits += h;
  if (distinct) *distinct += m;
  return 0;
}
