/*
 * test_keycodec: the Huffman global-key codec (lib/keycodec.c, lib/emc_item.h).
 *
 * For many table-size sets (Criteo-like skew, 1-row tables, 4096 tables, Fibonacci weights
 * that force the Kraft fallback, exact Kraft boundaries), 32- and 64-bit keys:
 *   - the codes of the tables and the reserved code are prefix-free (disjoint intervals),
 *     Kraft sum <= 1 (== 1 for Huffman), canonical (consecutive in (length, index) order);
 *   - more rows never gives a longer code; Huffman lengths have the optimal weighted length;
 *   - every table fits: len + bits(rows) <= key_bits; fallback lengths are n - bits(T);
 *   - EMPTY (all ones) and TOMB (all ones - 1) lie under the reserved all-ones code, no table
 *     code prefixes them, and no encoded key equals them;
 *   - round trip: table_of(key) == table, dense_id(key) == id; hashed keys are
 *     code << fbits | XXH3_64bits_withSeed(le64(id), 8, seed) & fmask (libxxhash);
 *   - exhaustive on small configs: all keys of all dense tables distinct (and never shared
 *     across tables); sampled on big ones;
 *   - the codec builds iff a fitting prefix code exists (Kraft), else EMC_EKEYSPACE naming the
 *     table and the missing bits, also through emc_cache_create with table names;
 *   - emc_cache_global_key agrees with an independently built internal codec.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "common.h"

/* ck_assert_msg marks a point (a write to Check's channel) on every passing check, which
 * dominates hot loops: REQUIRE only reports failures. */
#define REQUIRE(cond, ...)                  \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* ------------------------------------------------------------------ helpers */
typedef unsigned __int128 u128;

static uint64_t rng_next(uint64_t *s) { return emc__splitmix64(s); }
static uint64_t rng_below(uint64_t *s, uint64_t n) { return n ? emc__mulhi(rng_next(s), n) : 0; }
/* log-uniform in [1, 2^maxbits] */
static uint64_t rng_logu(uint64_t *s, uint32_t maxbits) {
  uint32_t b = (uint32_t)rng_below(s, maxbits + 1u);
  uint64_t lo = b == 0 ? 1 : (1ull << (b - 1)) + 1, hi = 1ull << b;
  if (b == 0) return 1;
  return lo + rng_below(s, hi - lo + 1);
}

static uint64_t lib_xxh3(uint64_t id, uint64_t seed) {
  unsigned char le[8];
  int i;
  for (i = 0; i < 8; i++) le[i] = (unsigned char)(id >> (8 * i));
  return XXH3_64bits_withSeed(le, 8, seed);
}

/* success iff every table leaves a code bit and sum 2^bits(T) + 2 <= 2^key_bits */
static int codec_should_fit(const uint64_t *rows, uint32_t n, uint32_t key_bits) {
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
static void check_codec(const emc__codec *c, const uint64_t *rows, const emc_table_kind *kinds,
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
static void check_key(const emc__codec *c, uint32_t t, uint64_t id, uint64_t key,
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
static void check_sampled(const emc__codec *c, uint64_t *rng, uint32_t per_table,
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
static void check_random_keys(const emc__codec *c, uint64_t *rng, uint32_t n_keys,
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

typedef struct cfgset {
  uint64_t *rows;
  emc_table_kind *kinds;
  uint32_t n;
  char what[96];
} cfgset;

enum { GEN_CRITEO, GEN_LOGU, GEN_ONES, GEN_MANY, GEN_FIB, GEN_EQUAL, GEN_SKEW, GEN_COUNT };

static const uint64_t criteo_rows[26] = {
  1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
  27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

static void gen_config(cfgset *g, int gen, uint32_t key_bits, uint64_t *rng) {
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

static void free_config(cfgset *g) {
  free(g->rows);
  free(g->kinds);
}

/* ------------------------------------------------------------------ tests */
START_TEST(bits_for_rows_values) {
  uint32_t k;
  ck_assert_uint_eq(emc__bits_for_rows(1), 1);
  ck_assert_uint_eq(emc__bits_for_rows(2), 1);
  ck_assert_uint_eq(emc__bits_for_rows(3), 2);
  ck_assert_uint_eq(emc__bits_for_rows(4), 2);
  ck_assert_uint_eq(emc__bits_for_rows(5), 3);
  for (k = 1; k < 64; k++) {
    ck_assert_uint_eq(emc__bits_for_rows(1ull << k), k);
    ck_assert_uint_eq(emc__bits_for_rows((1ull << k) + 1u), k + 1u);
    if (k >= 2) ck_assert_uint_eq(emc__bits_for_rows((1ull << k) - 1u), k);
  }
  ck_assert_uint_eq(emc__bits_for_rows(~0ull), 64);
}
END_TEST

/* The device-friendly XXH3 twin equals libxxhash on the id's 8 little-endian bytes. */
START_TEST(xxh3_twin_matches_libxxhash) {
  static const uint64_t special[] = {0, 1, 0xff, 0x100, 0xffffffffull, 0x100000000ull,
                                     0x8000000000000000ull, ~0ull, ~0ull - 1u, 0x0123456789abcdefull};
  uint64_t rng = 0x5eed0001, k, n = emct_scale(400000, 10);
  size_t i, j;
  for (i = 0; i < sizeof special / sizeof *special; i++)
    for (j = 0; j < sizeof special / sizeof *special; j++)
      REQUIRE(emc__xxh3_u64(special[i], special[j]) == lib_xxh3(special[i], special[j]),
                    "id %llx seed %llx", (unsigned long long)special[i],
                    (unsigned long long)special[j]);
  for (k = 0; k < n; k++) {
    uint64_t id = rng_next(&rng), seed = (k & 1) ? rng_next(&rng) : (k & 2) ? 0 : k;
    uint64_t a = emc__xxh3_u64(id, seed), b = lib_xxh3(id, seed);
    REQUIRE(a == b, "xxh3 twin(%llx, seed %llx) = %llx, libxxhash %llx",
                  (unsigned long long)id, (unsigned long long)seed, (unsigned long long)a,
                  (unsigned long long)b);
  }
}
END_TEST

/* Random configs of every generator, 32- and 64-bit keys: builds iff Kraft allows, then all
 * structural properties plus sampled round trips and random-key decoding. */
START_TEST(codec_properties_random) {
  uint64_t rng = 0xc0dec0de00000001ull + (uint64_t)_i;
  uint32_t reps = (uint32_t)emct_scale(12, 4), r;
  int gen;
  for (gen = 0; gen < GEN_COUNT; gen++) {
    for (r = 0; r < reps; r++) {
      uint32_t kb;
      for (kb = 32; kb <= 64; kb += 32) {
        cfgset g;
        emc__codec c;
        emc_status st;
        uint64_t seed = r == 0 ? 0 : rng_next(&rng);
        int fit;
        gen_config(&g, gen, kb, &rng);
        fit = codec_should_fit(g.rows, g.n, kb);
        memset(&c, 0, sizeof c);
        st = emc__codec_build(g.rows, g.kinds, g.n, kb, seed, &c);
        if (!fit) {
          REQUIRE(st == EMC_EKEYSPACE, "%s: no prefix code fits but build gave %s", g.what,
                        emc_status_name(st));
          REQUIRE(strstr(emc_last_error_detail(), "lacks") != NULL,
                        "%s: EKEYSPACE detail '%s'", g.what, emc_last_error_detail());
        } else {
          uint32_t per = g.n > 1000 ? 3 : (uint32_t)emct_scale(200, 4);
          REQUIRE(st == EMC_OK, "%s: a prefix code fits but build gave %s (%s)", g.what,
                        emc_status_name(st), emc_last_error_detail());
          check_codec(&c, g.rows, g.kinds, g.n, kb, seed, g.what);
          check_sampled(&c, &rng, per, g.what);
          check_random_keys(&c, &rng, g.n > 1000 ? 200 : 2000, g.what);
          emc__codec_free(&c);
        }
        free_config(&g);
      }
    }
  }
}
END_TEST

/* Criteo Kaggle cardinalities: fit 32 bits with Huffman; the largest table gets the shortest
 * code, 3-row tables longer ones. */
START_TEST(codec_criteo_sizes) {
  emc_table_kind kinds[26];
  emc__codec c;
  uint32_t kb, i, big = 2, small = 8;
  uint64_t rng = 77;
  for (i = 0; i < 26; i++) kinds[i] = EMC_TABLE_DENSE;
  for (kb = 32; kb <= 64; kb += 32) {
    EMCT_OK(emc__codec_build(criteo_rows, kinds, 26, kb, 0, &c));
    REQUIRE(c.used_huffman == 1, "criteo %u bits: Huffman lengths should fit", kb);
    check_codec(&c, criteo_rows, kinds, 26, kb, 0, "criteo");
    for (i = 0; i < 26; i++)
      REQUIRE(c.tables[big].len <= c.tables[i].len, "largest table's code is not shortest");
    REQUIRE(c.tables[small].len > c.tables[big].len, "3-row table code %u vs largest %u",
                  c.tables[small].len, c.tables[big].len);
    check_sampled(&c, &rng, (uint32_t)emct_scale(5000, 10), "criteo");
    emc__codec_free(&c);
  }
}
END_TEST

/* Fibonacci weights make Huffman codes too long for 32 bits: the Kraft fallback takes over
 * and still satisfies every property. */
START_TEST(codec_kraft_fallback) {
  uint64_t rows[45], f0 = 1, f1 = 1, rng = 3;
  emc_table_kind kinds[45];
  emc__codec c;
  uint32_t i;
  for (i = 0; i < 45; i++) {
    uint64_t f2 = f0 + f1;
    rows[i] = f0;
    f0 = f1;
    f1 = f2;
    kinds[i] = (i % 3 == 0) ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
  }
  ck_assert(codec_should_fit(rows, 40, 32));
  EMCT_OK(emc__codec_build(rows, kinds, 40, 32, 9, &c));
  REQUIRE(c.used_huffman == 0, "Fibonacci weights over 40 tables should need the fallback");
  check_codec(&c, rows, kinds, 40, 32, 9, "fib40/32");
  check_sampled(&c, &rng, 500, "fib40/32");
  check_random_keys(&c, &rng, 5000, "fib40/32");
  emc__codec_free(&c);
  /* 64-bit keys: Huffman fits */
  EMCT_OK(emc__codec_build(rows, kinds, 45, 64, 9, &c));
  check_codec(&c, rows, kinds, 45, 64, 9, "fib45/64");
  check_sampled(&c, &rng, 500, "fib45/64");
  emc__codec_free(&c);
}
END_TEST

/* Exact Kraft boundary at 32 bits: 2^31, 2^30, ..., 2^1 rows plus the reserved code fill the
 * key space exactly; one more 1-row table does not fit. */
START_TEST(codec_kraft_boundary) {
  uint64_t rows[32], rng = 11;
  emc_table_kind kinds[32];
  emc__codec c;
  uint32_t i;
  for (i = 0; i < 31; i++) {
    rows[i] = 1ull << (31 - i);
    kinds[i] = EMC_TABLE_DENSE;
  }
  rows[31] = 1;
  kinds[31] = EMC_TABLE_DENSE;
  ck_assert(codec_should_fit(rows, 31, 32));
  EMCT_OK(emc__codec_build(rows, kinds, 31, 32, 0, &c));
  check_codec(&c, rows, kinds, 31, 32, 0, "boundary");
  for (i = 0; i < 31; i++)
    REQUIRE(c.tables[i].len == i + 1u, "table %u (2^%u rows) code length %u", i, 31 - i,
                  c.tables[i].len);
  check_sampled(&c, &rng, 2000, "boundary");
  emc__codec_free(&c);
  ck_assert(!codec_should_fit(rows, 32, 32));
  EMCT_ST(emc__codec_build(rows, kinds, 32, 32, 0, &c), EMC_EKEYSPACE);
  REQUIRE(strstr(emc_last_error_detail(), "lacks 1 bit") != NULL, "detail: %s",
                emc_last_error_detail());
  /* three tables that each need 62 bits fit 64 bits with 2-bit codes */
  {
    uint64_t r3[3] = {1ull << 62, 1ull << 62, 1ull << 62};
    emc_table_kind k3[3] = {EMC_TABLE_DENSE, EMC_TABLE_HASHED, EMC_TABLE_DENSE};
    EMCT_OK(emc__codec_build(r3, k3, 3, 64, 5, &c));
    check_codec(&c, r3, k3, 3, 64, 5, "3x2^62");
    check_sampled(&c, &rng, 2000, "3x2^62");
    emc__codec_free(&c);
    r3[2] = (1ull << 62) + 1u; /* needs 63 bits: 2^62 + 2^62 + 2^63 + 2 > 2^64 */
    EMCT_ST(emc__codec_build(r3, k3, 3, 64, 5, &c), EMC_EKEYSPACE);
  }
}
END_TEST

typedef struct keytab {
  uint64_t key;
  uint32_t table, kind;
  uint64_t id;
} keytab;
static int cmp_keytab(const void *a, const void *b) {
  const keytab *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->table < y->table ? -1 : x->table > y->table;
}

/* Every id of every table of small configs: round trip, and keys distinct across tables and
 * within dense tables (hashed tables may collide only with themselves). */
START_TEST(codec_exhaustive_small) {
  uint64_t rng = 0xe4a0571e + (uint64_t)_i;
  uint32_t rep, reps = (uint32_t)emct_scale(40, 4);
  for (rep = 0; rep < reps; rep++) {
    uint32_t n = 1 + (uint32_t)rng_below(&rng, 40), i, kb = (rep & 1) ? 64 : 32;
    uint64_t rows[40], total = 0, seed = rng_next(&rng), id;
    emc_table_kind kinds[40];
    emc__codec c;
    keytab *all;
    size_t k = 0;
    char what[64];
    for (i = 0; i < n; i++) {
      rows[i] = rep % 5 == 0 ? 1 : rng_logu(&rng, 11);
      kinds[i] = (rng_next(&rng) % 4 == 0) ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
      total += rows[i];
    }
    snprintf(what, sizeof what, "exhaustive rep %u (%u tables, %u bits)", rep, n, kb);
    EMCT_OK(emc__codec_build(rows, kinds, n, kb, seed, &c));
    check_codec(&c, rows, kinds, n, kb, seed, what);
    all = malloc(total * sizeof *all);
    ck_assert(all != NULL);
    for (i = 0; i < n; i++)
      for (id = 0; id < rows[i]; id++, k++) {
        all[k].key = emc__global_key(&c.tables[i], id, seed);
        all[k].table = i;
        all[k].kind = kinds[i];
        all[k].id = id;
        check_key(&c, i, id, all[k].key, what);
      }
    qsort(all, total, sizeof *all, cmp_keytab);
    for (k = 0; k + 1 < total; k++)
      if (all[k].key == all[k + 1].key)
        REQUIRE(all[k].table == all[k + 1].table && all[k].kind == EMC_TABLE_HASHED,
                      "%s: key %llx shared by table %u id %llu and table %u id %llu", what,
                      (unsigned long long)all[k].key, all[k].table,
                      (unsigned long long)all[k].id, all[k + 1].table,
                      (unsigned long long)all[k + 1].id);
    free(all);
    emc__codec_free(&c);
  }
}
END_TEST

/* The dense feature map is a bijection on w bits, inverted by emc__unmix: exhaustive for
 * w = 1..20, sampled up to 64. */
START_TEST(mix_is_bijection) {
  uint32_t w;
  uint64_t rng = 0x31415, x, k;
  for (w = 1; w <= 20; w++) {
    uint64_t n = 1ull << w;
    uint8_t *seen = calloc(n, 1);
    ck_assert(seen != NULL);
    for (x = 0; x < n; x++) {
      uint64_t y = emc__mix(x, w);
      REQUIRE(y < n, "mix(%llx, %u) = %llx out of range", (unsigned long long)x, w,
                    (unsigned long long)y);
      REQUIRE(!seen[y], "mix(., %u) maps two ids to %llx", w, (unsigned long long)y);
      seen[y] = 1;
      REQUIRE(emc__unmix(y, w) == x, "unmix(mix(%llx, %u)) != id", (unsigned long long)x, w);
    }
    free(seen);
  }
  for (w = 21; w <= 64; w++)
    for (k = 0; k < 20000; k++) {
      uint64_t mask = w >= 64 ? ~0ull : (1ull << w) - 1u, v = rng_next(&rng) & mask;
      REQUIRE((emc__mix(v, w) & ~mask) == 0, "mix leaves %u bits", w);
      REQUIRE(emc__unmix(emc__mix(v, w), w) == v, "w = %u: unmix(mix(%llx))", w,
                    (unsigned long long)v);
      REQUIRE(emc__mix(emc__unmix(v, w), w) == v, "w = %u: mix(unmix(%llx))", w,
                    (unsigned long long)v);
    }
}
END_TEST

/* Big tables (up to 2^40 rows and beyond), 64-bit keys: sampled round trips. */
START_TEST(codec_big_sampled) {
  uint64_t rows[6] = {1ull << 40, (1ull << 40) - 1u, 123456789012ull, 1ull << 33, 7, 1};
  emc_table_kind kinds[6] = {EMC_TABLE_DENSE, EMC_TABLE_HASHED, EMC_TABLE_DENSE,
                             EMC_TABLE_DENSE, EMC_TABLE_HASHED, EMC_TABLE_DENSE};
  emc__codec c;
  uint64_t rng = 0xb16;
  EMCT_OK(emc__codec_build(rows, kinds, 6, 64, 0xabcdef, &c));
  check_codec(&c, rows, kinds, 6, 64, 0xabcdef, "big");
  check_sampled(&c, &rng, (uint32_t)emct_scale(50000, 10), "big");
  check_random_keys(&c, &rng, 20000, "big");
  emc__codec_free(&c);
  /* one table of 2^63 rows: 63 feature bits and a 1-bit code */
  {
    uint64_t r1 = 1ull << 63;
    emc_table_kind k1 = EMC_TABLE_DENSE;
    EMCT_OK(emc__codec_build(&r1, &k1, 1, 64, 0, &c));
    ck_assert_uint_eq(c.tables[0].len, 1);
    ck_assert_uint_eq(c.tables[0].code, 0);
    check_codec(&c, &r1, &k1, 1, 64, 0, "2^63");
    check_sampled(&c, &rng, 10000, "2^63");
    emc__codec_free(&c);
    r1 = (1ull << 31);
    EMCT_OK(emc__codec_build(&r1, &k1, 1, 32, 0, &c));
    check_codec(&c, &r1, &k1, 1, 32, 0, "2^31/32");
    check_sampled(&c, &rng, 10000, "2^31/32");
    emc__codec_free(&c);
  }
}
END_TEST

/* EMC_EKEYSPACE: the detail names the table (index and name) and the missing bits. */
START_TEST(codec_keyspace_errors) {
  emc__codec c;
  emc_table_kind kinds[4] = {EMC_TABLE_DENSE, EMC_TABLE_DENSE, EMC_TABLE_HASHED, EMC_TABLE_DENSE};
  const char *names[4] = {"users", "items", "ads", NULL};
  char want[128];
  /* a single table too big for 32 bits */
  {
    uint64_t rows[4] = {100, 5, (1ull << 40), 3};
    const char *d;
    EMCT_ST(emc__codec_build_named(rows, kinds, names, 4, 32, 0, &c), EMC_EKEYSPACE);
    d = emc_last_error_detail();
    REQUIRE(strstr(d, "table 2") && strstr(d, "'ads'"), "detail does not name table 2 'ads': %s", d);
    REQUIRE(strstr(d, "lacks 9 bits") != NULL, "detail does not say 9 bits are missing: %s", d);
    REQUIRE(strstr(d, "1099511627776") != NULL, "detail does not give the rows: %s", d);
    rows[2] = 3;
    rows[3] = (1ull << 31) + 1u; /* 32 bits + a code bit: lacks 1 */
    EMCT_ST(emc__codec_build_named(rows, kinds, names, 4, 32, 0, &c), EMC_EKEYSPACE);
    d = emc_last_error_detail();
    REQUIRE(strstr(d, "table 3") && strstr(d, "lacks 1 bit"), "detail: %s", d);
    EMCT_ST(emc__codec_build(rows, kinds, 4, 32, 0, &c), EMC_EKEYSPACE);
    REQUIRE(strstr(emc_last_error_detail(), "table 3") != NULL, "detail: %s",
                  emc_last_error_detail());
    /* 64 bits: 2^64 - 1 rows need 64 feature bits */
    rows[3] = ~0ull;
    EMCT_ST(emc__codec_build_named(rows, kinds, names, 4, 64, 0, &c), EMC_EKEYSPACE);
    REQUIRE(strstr(emc_last_error_detail(), "lacks 1 bit") != NULL, "detail: %s",
                  emc_last_error_detail());
  }
  /* each table fits alone, together they do not: Kraft failure names the largest table */
  {
    uint64_t rows[4] = {1ull << 30, 1ull << 31, 1ull << 31, 5};
    const char *d;
    ck_assert(!codec_should_fit(rows, 4, 32));
    EMCT_ST(emc__codec_build_named(rows, kinds, names, 4, 32, 0, &c), EMC_EKEYSPACE);
    d = emc_last_error_detail();
    snprintf(want, sizeof want, "table 1 ('items')");
    REQUIRE(strstr(d, want) != NULL, "detail does not name %s: %s", want, d);
    /* 2^30 + 2^31 + 2^31 + 2^3 + 2 needs a 33-bit space: 1 bit missing */
    REQUIRE(strstr(d, "lacks 1 bit") != NULL, "detail: %s", d);
  }
  /* Kraft sum exactly 2^33 (3 * 2^31 + 2^30 + ... + 2^1 + 2): a 33-bit key would fit exactly,
   * so exactly 1 bit is missing */
  {
    uint64_t rows[33];
    emc_table_kind k33[33];
    uint32_t i;
    for (i = 0; i < 33; i++) {
      rows[i] = i < 3 ? 1ull << 31 : 1ull << (33 - i);
      k33[i] = EMC_TABLE_DENSE;
    }
    ck_assert_uint_eq(rows[32], 2);
    EMCT_ST(emc__codec_build(rows, k33, 33, 32, 0, &c), EMC_EKEYSPACE);
    REQUIRE(strstr(emc_last_error_detail(), "lacks 1 bit") != NULL, "detail: %s",
            emc_last_error_detail());
  }
  {
    uint64_t rows[64];
    emc_table_kind k64[64];
    uint32_t i;
    for (i = 0; i < 64; i++) {
      rows[i] = 1ull << 31;
      k64[i] = EMC_TABLE_DENSE;
    }
    EMCT_ST(emc__codec_build(rows, k64, 64, 32, 0, &c), EMC_EKEYSPACE);
    /* sum = 2^37 + 2: the smallest l with 2^(32+l) >= 2^37 + 2 is 6 */
    REQUIRE(strstr(emc_last_error_detail(), "lacks 6 bits") != NULL, "detail: %s",
                  emc_last_error_detail());
    REQUIRE(strstr(emc_last_error_detail(), "table 0") != NULL, "detail: %s",
                  emc_last_error_detail());
  }
}
END_TEST

START_TEST(codec_build_bad_args) {
  uint64_t rows[2] = {10, 20};
  emc_table_kind kinds[2] = {EMC_TABLE_DENSE, EMC_TABLE_HASHED}, bad[2] = {EMC_TABLE_DENSE, (emc_table_kind)7};
  uint64_t zero[2] = {10, 0};
  emc__codec c;
  EMCT_ST(emc__codec_build(NULL, kinds, 2, 64, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, NULL, 2, 64, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, kinds, 2, 64, 0, NULL), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, kinds, 0, 64, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, kinds, EMC_MAX_TABLES + 1u, 64, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, kinds, 2, 48, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, kinds, 2, 0, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(zero, kinds, 2, 64, 0, &c), EMC_EINVAL);
  EMCT_ST(emc__codec_build(rows, bad, 2, 64, 0, &c), EMC_EINVAL);
  EMCT_OK(emc__codec_build(rows, kinds, 2, 64, 0, &c));
  emc__codec_free(&c);
  emc__codec_free(&c); /* idempotent */
  emc__codec_free(NULL);
}
END_TEST

/* ---------------------------------------------------------- through the public API */
static emc_cache *make_cache(emc_store *s, uint32_t key_bits, uint64_t seed) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1u << 20;
  cfg.key_bits = key_bits;
  cfg.hash_seed = seed;
  cfg.unified_index_rows = 1024;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  ck_assert(c != NULL);
  return c;
}

/* emc_cache_global_key equals an independently built codec's key, code and length. */
START_TEST(public_global_key_agrees) {
  emc_table_desc td[5] = {{"a", EMC_TABLE_DENSE, 1000, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"b", EMC_TABLE_HASHED, 500, 8, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {NULL, EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"d", EMC_TABLE_DENSE, 70000, 2, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"e", EMC_TABLE_HASHED, 3, 3, EMC_DTYPE_F32, EMC_STATE_NONE}};
  uint64_t rows[5];
  emc_table_kind kinds[5];
  emc_store *s;
  uint32_t t, kb, i;
  uint64_t rng = 0x9b;
  for (t = 0; t < 5; t++) {
    rows[t] = td[t].rows;
    kinds[t] = td[t].kind;
  }
  EMCT_OK(emc_store_create(td, 5, &s));
  for (kb = 32; kb <= 64; kb += 32) {
    uint64_t seeds[2] = {0, 0xfeedface12345678ull};
    int si;
    for (si = 0; si < 2; si++) {
      emc_cache *c = make_cache(s, kb, seeds[si]);
      emc__codec ref;
      EMCT_OK(emc__codec_build(rows, kinds, 5, kb, seeds[si], &ref));
      check_codec(&ref, rows, kinds, 5, kb, seeds[si], "public");
      for (t = 0; t < 5; t++) {
        uint64_t code = 7, key = 7;
        uint32_t bits = 99;
        for (i = 0; i < 300; i++) {
          uint64_t id = td[t].kind == EMC_TABLE_DENSE ? (i < 2 ? i * (rows[t] - 1) : rng_below(&rng, rows[t]))
                                                      : (i == 0 ? ~0ull : rng_next(&rng));
          uint64_t want = emc__global_key(&ref.tables[t], id, seeds[si]);
          EMCT_OK(emc_cache_global_key(c, t, id, &key, &code, &bits));
          REQUIRE(key == want, "%u bits seed %d table %u id %llu: key %llx, codec %llx", kb,
                        si, t, (unsigned long long)id, (unsigned long long)key,
                        (unsigned long long)want);
          REQUIRE(code == ref.tables[t].code && bits == ref.tables[t].len,
                  "table %u: code %llx/%u, codec %llx/%u", t, (unsigned long long)code, bits,
                  (unsigned long long)ref.tables[t].code, ref.tables[t].len);
          check_key(&ref, t, id, key, "public");
        }
        /* NULL outputs are fine */
        EMCT_OK(emc_cache_global_key(c, t, 0, NULL, NULL, NULL));
      }
      /* errors leave outputs untouched */
      {
        uint64_t key = 0x1111, code = 0x2222;
        uint32_t bits = 0x3333;
        EMCT_ST(emc_cache_global_key(c, 5, 0, &key, &code, &bits), EMC_ERANGE);
        EMCT_ST(emc_cache_global_key(c, 0, 1000, &key, &code, &bits), EMC_ERANGE);
        EMCT_ST(emc_cache_global_key(c, 2, 1, &key, &code, &bits), EMC_ERANGE);
        EMCT_ST(emc_cache_global_key(NULL, 0, 0, &key, &code, &bits), EMC_EINVAL);
        ck_assert(key == 0x1111 && code == 0x2222 && bits == 0x3333);
        /* hashed: any id is fine */
        EMCT_OK(emc_cache_global_key(c, 4, 1000000, &key, NULL, NULL));
      }
      emc__codec_free(&ref);
      EMCT_OK(emc_cache_destroy(c));
    }
  }
  emc_store_destroy(s);
}
END_TEST

/* emc_cache_create with tables that cannot fit 32 bits: EMC_EKEYSPACE naming the table (by its
 * emc_table_desc name) and the missing bits; *out untouched; the store stays unattached; the
 * same store works with 64-bit keys.
 * The row counts are raised in the store after creation (white-box) so no gigabytes of rows
 * are allocated; the codec reads them from the store's tables. */
START_TEST(cache_create_keyspace) {
  emc_table_desc td[3] = {{"clicks", EMC_TABLE_DENSE, 64, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"giant_items", EMC_TABLE_HASHED, 64, 4, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {NULL, EMC_TABLE_DENSE, 8, 2, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  emc_cache *c = (emc_cache *)&td[0], *c64 = NULL;
  emc_cache_config cfg;
  const char *d;
  uint64_t saved_rows;
  EMCT_OK(emc_store_create(td, 3, &s));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1u << 20;
  cfg.key_bits = 32;
  saved_rows = s->tables[1].rows;
  s->tables[1].rows = 1ull << 36; /* 36 feature bits + 1 code bit: lacks 5 of 32 */
  EMCT_ST(emc_cache_create(s, &cfg, &c), EMC_EKEYSPACE);
  d = emc_last_error_detail();
  REQUIRE(strstr(d, "'giant_items'") != NULL, "detail does not name the table: %s", d);
  REQUIRE(strstr(d, "lacks 5 bits") != NULL, "detail does not give the missing bits: %s", d);
  REQUIRE(c == (emc_cache *)&td[0], "out changed on failure");
  /* Kraft failure: two tables of 2^31 rows, the NULL-named third table gets "t2" */
  s->tables[1].rows = saved_rows;
  s->tables[0].rows = 1ull << 31;
  s->tables[2].rows = 1ull << 31;
  EMCT_ST(emc_cache_create(s, &cfg, &c), EMC_EKEYSPACE);
  d = emc_last_error_detail();
  REQUIRE(strstr(d, "'clicks'") != NULL && strstr(d, "lacks 1 bit") != NULL, "detail: %s", d);
  s->tables[0].rows = 3;
  s->tables[2].rows = (1ull << 32);
  EMCT_ST(emc_cache_create(s, &cfg, &c), EMC_EKEYSPACE);
  d = emc_last_error_detail();
  REQUIRE(strstr(d, "'t2'") != NULL && strstr(d, "lacks 1 bit") != NULL, "detail: %s", d);
  s->tables[0].rows = td[0].rows;
  s->tables[2].rows = td[2].rows;
  REQUIRE(c == (emc_cache *)&td[0], "out changed on failure");
  /* not attached: direct writes still work, and a real cache can be made */
  {
    uint64_t id = 1;
    float row[4] = {1, 2, 3, 4};
    EMCT_OK(emc_store_write(s, 0, &id, 1, row));
  }
  cfg.key_bits = 32;
  EMCT_OK(emc_cache_create(s, &cfg, &c64));
  EMCT_OK(emc_cache_destroy(c64));
  emc_store_destroy(s);
}
END_TEST

/* The same through a real store (no white-box): one dense table of 2^31 + 1 rows (8 GiB of
 * untouched zero pages from jemalloc). Skipped under sanitizers, whose allocator would touch
 * every byte. */
START_TEST(cache_create_keyspace_real_store) {
#if !EMCT_SANITIZED
  emc_table_desc td[2] = {{"huge", EMC_TABLE_DENSE, (1ull << 31) + 1u, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"small", EMC_TABLE_DENSE, 10, 1, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s = NULL;
  emc_cache *c = NULL;
  emc_cache_config cfg;
  emc_status st = emc_store_create(td, 2, &s);
  if (st == EMC_ENOMEM) return; /* no 8 GiB of address space here: nothing to check */
  EMCT_OK(st);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1u << 20;
  cfg.key_bits = 32;
  EMCT_ST(emc_cache_create(s, &cfg, &c), EMC_EKEYSPACE);
  REQUIRE(strstr(emc_last_error_detail(), "'huge'") != NULL &&
                    strstr(emc_last_error_detail(), "lacks 1 bit") != NULL,
                "detail: %s", emc_last_error_detail());
  ck_assert(c == NULL);
  cfg.key_bits = 64;
  cfg.unified_index_rows = 0;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  {
    uint64_t key, code;
    uint32_t bits;
    EMCT_OK(emc_cache_global_key(c, 0, 1ull << 31, &key, &code, &bits));
    ck_assert_uint_le(bits + 32u, 64u);
  }
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(s);
#endif
}
END_TEST

int main(void) {
  Suite *s = suite_create("keycodec");
  TCase *tc = tcase_create("codec");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, bits_for_rows_values);
  tcase_add_test(tc, xxh3_twin_matches_libxxhash);
  tcase_add_loop_test(tc, codec_properties_random, 0, 3);
  tcase_add_test(tc, codec_criteo_sizes);
  tcase_add_test(tc, codec_kraft_fallback);
  tcase_add_test(tc, codec_kraft_boundary);
  tcase_add_loop_test(tc, codec_exhaustive_small, 0, 2);
  tcase_add_test(tc, mix_is_bijection);
  tcase_add_test(tc, codec_big_sampled);
  tcase_add_test(tc, codec_keyspace_errors);
  tcase_add_test(tc, codec_build_bad_args);
  tcase_add_test(tc, public_global_key_agrees);
  tcase_add_test(tc, cache_create_keyspace);
  tcase_add_test(tc, cache_create_keyspace_real_store);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
