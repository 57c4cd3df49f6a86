/*
 * fuzz_keycodec.c: the Huffman global-key codec (lib/keycodec.c, emc__codec_build).
 *
 * Input (bytes past the end come from a deterministic stream, see fuzz_common.h):
 *   u8 shape     bit 7 set: n_tables = u16 % 4100 (may exceed EMC_MAX_TABLES);
 *                otherwise n_tables = 1 + shape % 24
 *   u8 kb        key_bits: 64 (kb % 8 < 5), 32 (< 7), else one of 0, 16, 63, 65 (invalid)
 *   u64 seed     hash seed
 *   per table: u8 r, u8 k, u8 x:  rows = 2^(r % 41) adjusted by x (+x, -x, *x...),
 *                0 when r == 255 (invalid); kind = k & 1 (2 when k == 255: invalid)
 *
 * On success: every code fits (len >= 1, len + bits(rows) <= key_bits), the codes of the
 * tables and the reserved code are prefix-free with a Kraft sum <= 1, the reserved code is
 * all ones and at least as long as any table's, EMPTY/TOMB decode to no table, and sampled
 * ids (0, rows-1, rows/2, pseudo-random) map to keys that are not EMPTY/TOMB, fit the key
 * width, decode back to their table and (dense) to their id.
 * On failure: EMC_EINVAL exactly when an argument is invalid, otherwise EMC_EKEYSPACE, and
 * EMC_EKEYSPACE exactly when no prefix code with a reserved (key_bits-1)-bit code fits.
 * Every failure leaves a detail.
 */
#include "fuzz_common.h"

#define MAX_N 4100u

static uint64_t rows_from(uint8_t r, uint8_t x) {
  uint32_t e = r % 41u;
  uint64_t base = 1ull << e;
  if (r == 255) return 0;
  switch (x >> 6) {
    case 0: return base;
    case 1: return base + (x & 63u);
    case 2: return base > (uint64_t)(x & 63u) + 1u ? base - (x & 63u) : 1u;
    default: return base * (1u + (x & 63u)) > EMC_MAX_ROWS ? EMC_MAX_ROWS : base * (1u + (x & 63u));
  }
}

/* Is some prefix code feasible, the way the codec defines it: every table T gets a code of
 * at most n - bits(T) bits, plus a reserved code of n - 1 bits. In units of 2^-n. */
static int feasible(const uint64_t *rows, uint32_t nt, uint32_t key_bits) {
  unsigned __int128 sum = 2, space = (unsigned __int128)1 << key_bits;
  uint32_t i;
  for (i = 0; i < nt; i++) {
    uint32_t b = emc__bits_for_rows(rows[i]);
    if (b + 1u > key_bits) return 0;
    sum += (unsigned __int128)1 << b;
  }
  return sum <= space;
}

static void check_ids(const emc__codec *c, uint32_t t, fz *f) {
  const emc__table_code *tc = &c->tables[t];
  uint64_t empty = emc__key_empty(c->key_bits), tomb = emc__key_tomb(c->key_bits);
  uint64_t mask = emc__key_mask(c->key_bits), ids[7];
  uint32_t k, n = 0;
  uint64_t r = fz_u64(f);
  if (tc->kind == EMC_TABLE_DENSE) {
    ids[n++] = 0;
    ids[n++] = tc->rows - 1;
    ids[n++] = tc->rows / 2;
    ids[n++] = r % tc->rows;
    ids[n++] = (r >> 17) % tc->rows;
  } else {
    ids[n++] = 0;
    ids[n++] = UINT64_MAX;
    ids[n++] = tc->rows;
    ids[n++] = r;
    ids[n++] = r ^ (1ull << 63);
    ids[n++] = 1ull << 63;
  }
  for (k = 0; k < n; k++) {
    uint64_t key = emc__global_key(tc, ids[k], c->hash_seed);
    int64_t back = emc__codec_table_of(c, key);
    FZ_CHECK(key != empty && key != tomb, "table %u id %llu: key %#llx is EMPTY/TOMB", t,
             (unsigned long long)ids[k], (unsigned long long)key);
    FZ_CHECK((key & ~mask) == 0, "table %u id %llu: key %#llx wider than %u bits", t,
             (unsigned long long)ids[k], (unsigned long long)key, c->key_bits);
    FZ_CHECK(back == (int64_t)t, "table %u id %llu: key %#llx decodes to table %lld", t,
             (unsigned long long)ids[k], (unsigned long long)key, (long long)back);
    if (tc->kind == EMC_TABLE_DENSE) {
      uint64_t id2 = emc__codec_dense_id(c, t, key);
      FZ_CHECK(id2 == ids[k], "table %u: id %llu -> key %#llx -> id %llu", t,
               (unsigned long long)ids[k], (unsigned long long)key, (unsigned long long)id2);
    }
  }
}

typedef struct lcode {
  uint64_t v; /* code left-aligned in 64 bits */
  uint32_t len, idx;
} lcode;

static int cmp_lcode(const void *x, const void *y) {
  const lcode *a = x, *b = y;
  if (a->v != b->v) return a->v < b->v ? -1 : 1;
  return a->len < b->len ? -1 : a->len > b->len;
}

static void check_codec(const emc__codec *c, const uint64_t *rows, const emc_table_kind *kinds,
                        uint32_t nt, uint32_t key_bits, uint64_t seed, fz *f) {
  uint32_t i, maxlen = 0;
  unsigned __int128 kraft = 0, one;
  FZ_CHECK(c->key_bits == key_bits && c->n_tables == nt && c->hash_seed == seed && c->tables,
           "codec header: key_bits %u n_tables %u", c->key_bits, c->n_tables);
  FZ_CHECK(c->reserved_len >= 1 && c->reserved_len <= key_bits - 1,
           "reserved code length %u (key_bits %u)", c->reserved_len, key_bits);
  FZ_CHECK(c->reserved_code == (1ull << c->reserved_len) - 1u,
           "reserved code %#llx of length %u is not all ones",
           (unsigned long long)c->reserved_code, c->reserved_len);
  for (i = 0; i < nt; i++) {
    const emc__table_code *tc = &c->tables[i];
    uint32_t b = emc__bits_for_rows(rows[i]);
    FZ_CHECK(tc->rows == rows[i] && tc->kind == (uint32_t)kinds[i], "table %u: rows/kind", i);
    FZ_CHECK(tc->len >= 1 && tc->len + b <= key_bits,
             "table %u: code length %u + %u feature bits > %u", i, tc->len, b, key_bits);
    FZ_CHECK(tc->fbits == key_bits - tc->len, "table %u: fbits %u, len %u", i, tc->fbits, tc->len);
    FZ_CHECK(tc->fmask == (tc->fbits >= 64 ? ~0ull : (1ull << tc->fbits) - 1u),
             "table %u: fmask %#llx", i, (unsigned long long)tc->fmask);
    FZ_CHECK(tc->code >> tc->len == 0, "table %u: code %#llx longer than %u bits", i,
             (unsigned long long)tc->code, tc->len);
    if (tc->len > maxlen) maxlen = tc->len;
    kraft += (unsigned __int128)1 << (64u - tc->len);
  }
  kraft += (unsigned __int128)1 << (64u - c->reserved_len);
  one = (unsigned __int128)1 << 64;
  FZ_CHECK(kraft <= one, "Kraft sum above 1 over %u tables", nt);
  FZ_CHECK(c->reserved_len >= maxlen, "reserved code length %u < longest table code %u",
           c->reserved_len, maxlen);
  /* prefix-free: sort the codes (and the reserved one) left-aligned, shorter first on ties;
   * a code that prefixes another then prefixes its successor */
  {
    lcode *lc = calloc(nt + 1u, sizeof *lc);
    if (!lc) abort();
    for (i = 0; i < nt; i++) {
      lc[i].v = c->tables[i].code << (64u - c->tables[i].len);
      lc[i].len = c->tables[i].len;
      lc[i].idx = i;
    }
    lc[nt].v = c->reserved_code << (64u - c->reserved_len);
    lc[nt].len = c->reserved_len;
    lc[nt].idx = nt;
    qsort(lc, nt + 1u, sizeof *lc, cmp_lcode);
    for (i = 0; i + 1 < nt + 1u; i++) {
      uint64_t a = lc[i].v >> (64u - lc[i].len), b = lc[i + 1].v >> (64u - lc[i].len);
      FZ_CHECK(a != b, "code of symbol %u (%u bits) is a prefix of symbol %u's (%u bits; "
               "symbol %u is the reserved code)", lc[i].idx, lc[i].len, lc[i + 1].idx,
               lc[i + 1].len, nt);
    }
    free(lc);
  }
  {
    uint64_t empty = emc__key_empty(key_bits), tomb = emc__key_tomb(key_bits);
    FZ_CHECK(emc__codec_table_of(c, empty) == -1, "EMPTY decodes to a table");
    FZ_CHECK(emc__codec_table_of(c, tomb) == -1, "TOMBSTONE decodes to a table");
  }
  for (i = 0; i < nt; i++) {
    if (nt > 64 && i % 37 != 0 && i != nt - 1) continue; /* sample big codecs */
    check_ids(c, i, f);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f;
  uint8_t shape, kb;
  uint32_t nt, key_bits, i;
  uint64_t seed, *rows;
  emc_table_kind *kinds;
  emc__codec codec;
  emc_status st;
  int invalid = 0;
  static const uint32_t bad_bits[4] = {0, 16, 63, 65};

  fz_init(&f, data, size);
  shape = fz_u8(&f);
  nt = (shape & 0x80u) ? fz_u16(&f) % MAX_N : 1u + shape % 24u;
  kb = fz_u8(&f);
  key_bits = kb % 8 < 5 ? 64u : kb % 8 < 7 ? 32u : bad_bits[(kb >> 3) & 3u];
  seed = fz_u64(&f);
  rows = calloc(nt ? nt : 1, sizeof *rows);
  kinds = calloc(nt ? nt : 1, sizeof *kinds);
  if (!rows || !kinds) abort();
  for (i = 0; i < nt; i++) {
    uint8_t r = fz_u8(&f), k = fz_u8(&f), x = fz_u8(&f);
    rows[i] = rows_from(r, x);
    kinds[i] = k == 255 ? (emc_table_kind)2 : (emc_table_kind)(k & 1u);
    if (rows[i] == 0 || k == 255) invalid = 1;
  }
  if (nt == 0 || nt > EMC_MAX_TABLES || (key_bits != 32 && key_bits != 64)) invalid = 1;

  memset(&codec, 0, sizeof codec);
  st = emc__codec_build(rows, kinds, nt, key_bits, seed, &codec);
  if (st == EMC_OK) {
    FZ_CHECK(!invalid, "codec built from invalid arguments (n_tables %u, key_bits %u)", nt,
             key_bits);
    FZ_CHECK(feasible(rows, nt, key_bits), "codec built although no prefix code fits");
    check_codec(&codec, rows, kinds, nt, key_bits, seed, &f);
    emc__codec_free(&codec);
  } else {
    FZ_CHECK(emc_last_error_detail()[0] != '\0', "failure %s with an empty detail",
             emc_status_name(st));
    if (invalid) {
      FZ_CHECK(st == EMC_EINVAL, "invalid arguments gave %s, expected EMC_EINVAL",
               emc_status_name(st));
    } else {
      FZ_CHECK(st == EMC_EKEYSPACE, "valid arguments gave %s (n_tables %u, key_bits %u)",
               emc_status_name(st), nt, key_bits);
      FZ_CHECK(!feasible(rows, nt, key_bits),
               "EMC_EKEYSPACE although a prefix code fits (n_tables %u, key_bits %u)", nt,
               key_bits);
    }
    FZ_CHECK(codec.tables == NULL, "failed build left tables allocated");
  }
  free(rows);
  free(kinds);
  return 0;
}
