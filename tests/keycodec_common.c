/* keycodec_common.c: test_keycodec's helpers (keycodec_common.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "keycodec_common.h"

/* log-uniform in [1, 2^maxbits] */
uint64_t rng_logu(uint64_t *s, uint32_t maxbits) {
  uint32_t b = (uint32_t)rng_below(s, maxbits + 1u);
  uint64_t lo = b == 0 ? 1 : (1ull << (b - 1)) + 1, hi = 1ull << b;
  if (b == 0) return 1;
  return lo + rng_below(s, hi - lo + 1);
}

uint64_t lib_xxh3(uint64_t id, uint64_t seed) {
  unsigned char le[8];
  int i;
  for (i = 0; i < 8; i++) le[i] = (unsigned char)(id >> (8 * i));
  return XXH3_64bits_withSeed(le, 8, seed);
}

/* success iff every table leaves a code bit and sum 2^bits(T) + 2 <= 2^key_bits */
int codec_should_fit(const uint64_t *rows, uint32_t n, uint32_t key_bits) {
  u128 kraft = 2;
  uint32_t i;
  for (i = 0; i < n; i++) {
    uint32_t b = emc__bits_for_rows(rows[i]);
    if (b + 1u > key_bits) return 0;
    kraft += (u128)1 << b;
  }
  return kraft <= ((u128)1 << key_bits);
}

/* Optimal weighted code length of weights w[0..n) (Huffman by a binary min-heap). */
static u128 huffman_cost(const uint64_t *w, uint32_t n) {
  u128 *h = malloc(n * sizeof *h), cost = 0;
  uint32_t sz = 0, i;
  ck_assert(h != NULL);
#define HPUSH(v)                                                   \
  do {                                                             \
    uint32_t k_ = sz++;                                            \
    h[k_] = (v);                                                   \
    while (k_ > 0 && h[(k_ - 1) / 2] > h[k_]) {                    \
      u128 t_ = h[k_]; h[k_] = h[(k_ - 1) / 2]; h[(k_ - 1) / 2] = t_; \
      k_ = (k_ - 1) / 2;                                           \
    }                                                              \
  } while (0)
  for (i = 0; i < n; i++) HPUSH((u128)w[i]);
  while (sz > 1) {
    u128 a, b;
    uint32_t pass;
    u128 got[2];
    for (pass = 0; pass < 2; pass++) {
      uint32_t k = 0;
      got[pass] = h[0];
      h[0] = h[--sz];
      for (;;) {
        uint32_t l = 2 * k + 1, r = l + 1, m = k;
        if (l < sz && h[l] < h[m]) m = l;
        if (r < sz && h[r] < h[m]) m = r;
        if (m == k) break;
        { u128 t = h[k]; h[k] = h[m]; h[m] = t; }
        k = m;
      }
    }
    a = got[0];
    b = got[1];
    cost += a + b;
    HPUSH(a + b);
  }
#undef HPUSH
  free(h);
  return cost;
}

typedef struct ivl {
  uint64_t start; /* code left-aligned in 64 bits */
  uint32_t len, sym;
} ivl;
static int cmp_ivl(const void *a, const void *b) {
  const ivl *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->len < y->len ? -1 : x->len > y->len;
}
typedef struct lensym {
  uint32_t len, sym;
  uint64_t code;
} lensym;
static int cmp_lensym(const void *a, const void *b) {
  const lensym *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->sym < y->sym ? -1 : x->sym > y->sym;
}
typedef struct rowsym {
  uint64_t rows;
  uint32_t len, sym;
} rowsym;
static int cmp_rowsym(const void *a, const void *b) {
  const rowsym *x = a, *y = b;
  if (x->rows != y->rows) return x->rows < y->rows ? -1 : 1;
  return 0;
}

/* Structural properties of a built codec. */
void check_codec(const emc__codec *c, const uint64_t *rows, const emc_table_kind *kinds,
                 uint32_t n, uint32_t key_bits, uint64_t seed, const char *what) {
  uint32_t i, m = n + 1u, maxlen = 0;
  uint64_t empty = emc__key_empty(key_bits), tomb = emc__key_tomb(key_bits);
  ivl *iv = calloc(m, sizeof *iv);
  lensym *ls = calloc(m, sizeof *ls);
  rowsym *rs = calloc(n, sizeof *rs);
  u128 kraft = 0;
  ck_assert(iv && ls && rs);
  REQUIRE(c->key_bits == key_bits && c->n_tables == n && c->hash_seed == seed,
                "%s: codec header (%u bits, %u tables, seed %llx)", what, c->key_bits,
                c->n_tables, (unsigned long long)c->hash_seed);
  REQUIRE(key_bits == 32 ? empty == 0xffffffffull && tomb == 0xfffffffeull
                               : empty == ~0ull && tomb == ~0ull - 1u,
                "%s: EMPTY/TOMB patterns", what);
  /* reserved code: all ones, length <= key_bits - 1 (so TOMB, differing in the last bit, is
   * under it too) */
  REQUIRE(c->reserved_len >= 1 && c->reserved_len + 1u <= key_bits,
                "%s: reserved length %u with %u-bit keys", what, c->reserved_len, key_bits);
  REQUIRE(c->reserved_code == (1ull << c->reserved_len) - 1u,
                "%s: reserved code %llx of length %u is not all ones", what,
                (unsigned long long)c->reserved_code, c->reserved_len);
  REQUIRE(empty >> (key_bits - c->reserved_len) == c->reserved_code &&
                    tomb >> (key_bits - c->reserved_len) == c->reserved_code,
                "%s: EMPTY/TOMB not under the reserved code", what);
  REQUIRE(emc__codec_table_of(c, empty) == -1 && emc__codec_table_of(c, tomb) == -1,
                "%s: table_of(EMPTY) = %lld, table_of(TOMB) = %lld", what,
                (long long)emc__codec_table_of(c, empty), (long long)emc__codec_table_of(c, tomb));

  for (i = 0; i < n; i++) {
    const emc__table_code *tc = &c->tables[i];
    uint32_t b = emc__bits_for_rows(rows[i]);
    REQUIRE(tc->len >= 1 && tc->len < key_bits, "%s: table %u code length %u", what, i,
                  tc->len);
    REQUIRE(tc->fbits == key_bits - tc->len, "%s: table %u fbits %u, len %u", what, i,
                  tc->fbits, tc->len);
    REQUIRE(tc->fmask == (tc->fbits >= 64 ? ~0ull : (1ull << tc->fbits) - 1u),
                  "%s: table %u fmask %llx", what, i, (unsigned long long)tc->fmask);
    REQUIRE(tc->rows == rows[i] && tc->kind == (uint32_t)kinds[i],
                  "%s: table %u rows/kind copied wrong", what, i);
    REQUIRE(tc->code < (1ull << tc->len), "%s: table %u code %llx wider than %u bits", what,
                  i, (unsigned long long)tc->code, tc->len);
    REQUIRE(tc->len + b <= key_bits,
                  "%s: table %u (%llu rows, %u bits) got a %u-bit code: does not fit %u bits",
                  what, i, (unsigned long long)rows[i], b, tc->len, key_bits);
    REQUIRE((empty >> tc->fbits) != tc->code && (tomb >> tc->fbits) != tc->code,
                  "%s: table %u code prefixes EMPTY/TOMB", what, i);
    if (!c->used_huffman)
      REQUIRE(tc->len == key_bits - b, "%s: fallback length of table %u is %u, want %u",
                    what, i, tc->len, key_bits - b);
    iv[i].start = tc->code << (64u - tc->len);
    iv[i].len = tc->len;
    iv[i].sym = i;
    ls[i].len = tc->len;
    ls[i].sym = i;
    ls[i].code = tc->code;
    rs[i].rows = rows[i];
    rs[i].len = tc->len;
    rs[i].sym = i;
    kraft += (u128)1 << (64u - tc->len);
    if (tc->len > maxlen) maxlen = tc->len;
  }
  iv[n].start = c->reserved_code << (64u - c->reserved_len);
  iv[n].len = c->reserved_len;
  iv[n].sym = n;
  ls[n].len = c->reserved_len;
  ls[n].sym = n;
  ls[n].code = c->reserved_code;
  kraft += (u128)1 << (64u - c->reserved_len);

  /* prefix-free <=> the code intervals [start, start + 2^(64-len)) are disjoint */
  qsort(iv, m, sizeof *iv, cmp_ivl);
  for (i = 0; i + 1 < m; i++) {
    u128 end = (u128)iv[i].start + ((u128)1 << (64u - iv[i].len));
    REQUIRE(end <= (u128)iv[i + 1].start,
                  "%s: code of symbol %u (len %u) prefixes / overlaps symbol %u (len %u)", what,
                  iv[i].sym, iv[i].len, iv[i + 1].sym, iv[i + 1].len);
  }
  /* Kraft */
  REQUIRE(kraft <= ((u128)1 << 64), "%s: Kraft sum above 1", what);
  if (c->used_huffman) {
    REQUIRE(kraft == ((u128)1 << 64), "%s: Huffman code is not complete (Kraft < 1)", what);
    REQUIRE(c->reserved_len >= maxlen, "%s: reserved code (len %u) not the deepest (%u)",
                  what, c->reserved_len, maxlen);
  } else {
    REQUIRE(c->reserved_len == key_bits - 1u, "%s: fallback reserved length %u", what,
                  c->reserved_len);
  }

  /* canonical: in (length, index) order, consecutive codes (fallback: the tables only) */
  {
    uint32_t cnt = c->used_huffman ? m : n;
    qsort(ls, cnt, sizeof *ls, cmp_lensym);
    REQUIRE(ls[0].code == 0, "%s: first canonical code is %llx", what,
                  (unsigned long long)ls[0].code);
    for (i = 0; i + 1 < cnt; i++)
      REQUIRE(ls[i + 1].code == (ls[i].code + 1u) << (ls[i + 1].len - ls[i].len),
                    "%s: codes of symbols %u, %u are not canonical", what, ls[i].sym,
                    ls[i + 1].sym);
  }

  /* more rows -> code no longer */
  {
    uint32_t k = 0, minprev = UINT32_MAX;
    qsort(rs, n, sizeof *rs, cmp_rowsym);
    while (k < n) {
      uint32_t e = k, mingrp = UINT32_MAX;
      while (e < n && rs[e].rows == rs[k].rows) {
        REQUIRE(rs[e].len <= minprev,
                      "%s: table %u (%llu rows) has a %u-bit code, longer than a smaller table's %u",
                      what, rs[e].sym, (unsigned long long)rs[e].rows, rs[e].len, minprev);
        if (rs[e].len < mingrp) mingrp = rs[e].len;
        e++;
      }
      if (mingrp < minprev) minprev = mingrp;
      k = e;
    }
  }

  /* Huffman lengths are optimal for the weights (rows, reserved weight 0) */
  if (c->used_huffman) {
    uint64_t *w = calloc(m, sizeof *w);
    u128 got = 0, want;
    ck_assert(w != NULL);
    for (i = 0; i < n; i++) {
      w[i] = rows[i];
      got += (u128)rows[i] * c->tables[i].len;
    }
    w[n] = 0;
    want = huffman_cost(w, m);
    REQUIRE(got == want, "%s: weighted code length %llu, optimal %llu", what,
                  (unsigned long long)got, (unsigned long long)want);
    free(w);
  }
  free(iv);
  free(ls);
  free(rs);
}

/* One key: in range, not EMPTY/TOMB, decodes to (t, id). */
void check_key(const emc__codec *c, uint32_t t, uint64_t id, uint64_t key,
               const char *what) {
  const emc__table_code *tc = &c->tables[t];
  uint64_t mask = emc__key_mask(c->key_bits);
  int64_t got;
  REQUIRE((key & ~mask) == 0, "%s: table %u id %llu: key %llx wider than %u bits", what, t,
                (unsigned long long)id, (unsigned long long)key, c->key_bits);
  REQUIRE(key != emc__key_empty(c->key_bits) && key != emc__key_tomb(c->key_bits),
                "%s: table %u id %llu encodes to a reserved pattern %llx", what, t,
                (unsigned long long)id, (unsigned long long)key);
  REQUIRE((key >> tc->fbits) == tc->code, "%s: table %u id %llu: key %llx not under its code",
                what, t, (unsigned long long)id, (unsigned long long)key);
  got = emc__codec_table_of(c, key);
  REQUIRE(got == (int64_t)t, "%s: table_of(key of table %u id %llu) = %lld", what, t,
                (unsigned long long)id, (long long)got);
  if (tc->kind == EMC_TABLE_DENSE) {
    uint64_t back = emc__codec_dense_id(c, t, key);
    REQUIRE(back == id, "%s: dense table %u: id %llu -> key %llx -> id %llu", what, t,
                  (unsigned long long)id, (unsigned long long)key, (unsigned long long)back);
  } else {
    uint64_t want = (tc->code << tc->fbits) | (lib_xxh3(id, c->hash_seed) & tc->fmask);
    REQUIRE(key == want, "%s: hashed table %u id %llx: key %llx, libxxhash gives %llx", what,
                  t, (unsigned long long)id, (unsigned long long)key, (unsigned long long)want);
  }
}

/* Sampled round trip: ids 0, rows-1 and random ids below rows (dense) or any 64-bit ids. */
void check_sampled(const emc__codec *c, uint64_t *rng, uint32_t per_table,
                   const char *what) {
  uint32_t t, k;
  for (t = 0; t < c->n_tables; t++) {
    const emc__table_code *tc = &c->tables[t];
    for (k = 0; k < per_table + 2u; k++) {
      uint64_t id;
      if (tc->kind == EMC_TABLE_DENSE)
        id = k == 0 ? 0 : k == 1 ? tc->rows - 1u : rng_below(rng, tc->rows);
      else
        id = k == 0 ? 0 : k == 1 ? ~0ull : rng_next(rng);
      check_key(c, t, id, emc__global_key(tc, id, c->hash_seed), what);
    }
  }
}

/* Random keys decode to the table whose code prefixes them, or -1 if none does. */
void check_random_keys(const emc__codec *c, uint64_t *rng, uint32_t n_keys,
                       const char *what) {
  uint32_t k, t;
  for (k = 0; k < n_keys; k++) {
    uint64_t key = rng_next(rng) & emc__key_mask(c->key_bits);
    int64_t want = -1, got = emc__codec_table_of(c, key);
    for (t = 0; t < c->n_tables; t++)
      if ((key >> c->tables[t].fbits) == c->tables[t].code) {
        REQUIRE(want == -1, "%s: key %llx under two codes (%lld, %u)", what,
                      (unsigned long long)key, (long long)want, t);
        want = t;
      }
    REQUIRE(got == want, "%s: table_of(%llx) = %lld, want %lld", what,
                  (unsigned long long)key, (long long)got, (long long)want);
    if (want == -1 && c->used_huffman)
      REQUIRE(key >> (c->key_bits - c->reserved_len) == c->reserved_code,
                    "%s: complete code but key %llx is under no code", what,
                    (unsigned long long)key);
  }
}

const uint64_t criteo_rows[26] = {
  1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
  27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

void gen_config(cfgset *g, int gen, uint32_t key_bits, uint64_t *rng) {
  uint32_t i, n = 0;
  uint32_t maxbits = key_bits == 32 ? 30 : 62;
  switch (gen) {
    case GEN_CRITEO: n = 26; break;
    case GEN_LOGU: n = 1 + (uint32_t)rng_below(rng, 64); break;
    case GEN_ONES: { static const uint32_t ns[] = {1, 2, 3, 7, 100, 4096}; n = ns[rng_below(rng, 6)]; } break;
    case GEN_MANY: n = EMC_MAX_TABLES - (uint32_t)rng_below(rng, 3); break;
    case GEN_FIB: n = 2 + (uint32_t)rng_below(rng, 90); break;
    case GEN_EQUAL: n = 1 + (uint32_t)rng_below(rng, 300); break;
    case GEN_SKEW: n = 2 + (uint32_t)rng_below(rng, 1000); break;
  }
  g->n = n;
  g->rows = calloc(n, sizeof *g->rows);
  g->kinds = calloc(n, sizeof *g->kinds);
  ck_assert(g->rows && g->kinds);
  {
    uint64_t eq = rng_logu(rng, maxbits - 8), f0 = 1, f1 = 1, cap = 1ull << maxbits;
    for (i = 0; i < n; i++) {
      uint64_t r = 1;
      switch (gen) {
        case GEN_CRITEO: r = criteo_rows[i]; break;
        case GEN_LOGU: r = rng_logu(rng, maxbits); break;
        case GEN_ONES: r = 1; break;
        case GEN_MANY: r = rng_logu(rng, key_bits == 32 ? 16 : 40); break;
        case GEN_FIB: {
          uint64_t f2 = f0 + f1;
          r = f0 > cap ? cap : f0;
          f0 = f1;
          f1 = f2 > cap ? cap : f2;
        } break;
        case GEN_EQUAL: r = eq; break;
        case GEN_SKEW: r = i == 0 ? (1ull << maxbits) - rng_below(rng, 1000) : 1 + rng_below(rng, 10); break;
      }
      g->rows[i] = r;
      g->kinds[i] = (rng_next(rng) & 3u) == 0 ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
    }
  }
  snprintf(g->what, sizeof g->what, "gen %d, %u tables, %u-bit keys", gen, n, key_bits);
}

void free_config(cfgset *g) {
  free(g->rows);
  free(g->kinds);
}
