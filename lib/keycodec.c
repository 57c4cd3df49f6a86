/*
 * keycodec.c: the Huffman global-key codec.
 *
 * global_key(T, F) = code(T) << (n - m) | f(F)    (emc_item.h: emc__global_key)
 *
 * Construction
 *   1. Symbols: every table, weighted by its row count, plus one reserved symbol of weight 0
 *      ordered after all tables. The reserved symbol ends up with the all-ones code of the
 *      longest length, so the index's EMPTY (all ones) and TOMBSTONE (all ones - 1) keys lie
 *      under a code no table has.
 *   2. Huffman code lengths (two-queue method over the weight-sorted leaves: O(n log n)).
 *      Larger tables get shorter codes and so more bits for their features.
 *   3. Check every table: len(T) + bits(T) <= n, bits(T) = ceil(log2(rows(T))). Huffman
 *      minimizes the weighted code length, which is not the same as fitting every table: if it
 *      leaves some table short while a prefix code that fits exists (Kraft:
 *      sum 2^-(n - bits(T)) + 2^-(n-1) <= 1), use those lengths instead. If none exists the
 *      key width is too small: EMC_EKEYSPACE naming the table and the bits it lacks.
 *   4. Canonical codes: sort by (length, symbol index), assign consecutive codes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint32_t emc__bits_for_rows(uint64_t rows) {
  uint32_t b = 1;
  while (b < 64 && (1ull << b) < rows) b++;
  return b;
}

typedef struct sym_w {
  uint64_t w;
  uint32_t idx;
} sym_w;

static int cmp_sym_w(const void *a, const void *b) {
  const sym_w *x = a, *y = b;
  if (x->w != y->w) return x->w < y->w ? -1 : 1;
  /* equal weights: the later symbol first, so the reserved symbol (last index) goes deepest */
  return x->idx > y->idx ? -1 : x->idx < y->idx;
}

/* Huffman code lengths of n >= 2 symbols into len[]. Nodes: leaves 0..n-1 (in sorted order),
 * internal n..2n-2; parent[] links; depths computed top-down. */
static emc_status huffman_lengths(const uint64_t *w, uint32_t n, uint32_t *len) {
  sym_w *leaf = emc__calloc(n, sizeof *leaf);
  uint64_t *nw = emc__calloc(2u * n, sizeof *nw);
  uint32_t *parent = emc__calloc(2u * n, sizeof *parent), *depth = emc__calloc(2u * n, sizeof *depth);
  uint32_t i, lq = 0, iq = n, next = n;
  if (!leaf || !nw || !parent || !depth) {
    free(leaf); free(nw); free(parent); free(depth);
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate %u Huffman nodes", 2u * n);
  }
  for (i = 0; i < n; i++) { leaf[i].w = w[i]; leaf[i].idx = i; }
  qsort(leaf, n, sizeof *leaf, cmp_sym_w);
  for (i = 0; i < n; i++) nw[i] = leaf[i].w;
  /* Two queues: leaves in [lq, n), internal nodes in [iq, next) are both non-decreasing. */
  while (next < 2u * n - 1u) {
    uint32_t pick[2], k;
    for (k = 0; k < 2; k++) {
      if (lq < n && (iq >= next || nw[lq] <= nw[iq])) pick[k] = lq++;
      else pick[k] = iq++;
    }
    nw[next] = nw[pick[0]] + nw[pick[1]];
    if (nw[next] < nw[pick[0]]) nw[next] = UINT64_MAX; /* saturate */
    parent[pick[0]] = parent[pick[1]] = next;
    next++;
  }
  depth[2u * n - 2u] = 0;
  for (i = 2u * n - 2u; i-- > 0;) depth[i] = depth[parent[i]] + 1u;
  for (i = 0; i < n; i++) len[leaf[i].idx] = depth[i];
  free(leaf); free(nw); free(parent); free(depth);
  return EMC_OK;
}

typedef struct sym_l {
  uint32_t len, idx;
} sym_l;

static int cmp_sym_l(const void *a, const void *b) {
  const sym_l *x = a, *y = b;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Canonical codes for lengths len[0..n) (all in 1..63, Kraft sum <= 1). */
static emc_status canonical_codes(const uint32_t *len, uint32_t n, uint64_t *code) {
  sym_l *s = emc__calloc(n, sizeof *s);
  uint64_t c = 0;
  uint32_t i, prev = 0;
  if (!s) return EMC_FAIL(EMC_ENOMEM, "cannot allocate %u symbols", n);
  for (i = 0; i < n; i++) { s[i].len = len[i]; s[i].idx = i; }
  qsort(s, n, sizeof *s, cmp_sym_l);
  for (i = 0; i < n; i++) {
    if (i > 0) c++;
    c <<= (s[i].len - prev);
    prev = s[i].len;
    code[s[i].idx] = c;
  }
  free(s);
  return EMC_OK;
}

static void name_of(char *buf, size_t cap, const char *const *names, uint32_t t) {
  if (names && names[t]) snprintf(buf, cap, "table %u ('%s')", t, names[t]);
  else snprintf(buf, cap, "table %u", t);
}

emc_status emc__codec_build(const uint64_t *rows, const emc_table_kind *kinds, uint32_t n_tables,
                            uint32_t key_bits, uint64_t hash_seed, emc__codec *out) {
  return emc__codec_build_named(rows, kinds, NULL, n_tables, key_bits, hash_seed, out);
}

emc_status emc__codec_build_named(const uint64_t *rows, const emc_table_kind *kinds,
                                  const char *const *names, uint32_t n_tables, uint32_t key_bits,
                                  uint64_t hash_seed, emc__codec *out) {
  uint32_t n = n_tables + 1u, i, *len = NULL, *bits = NULL;
  uint64_t *w = NULL, *code = NULL;
  emc__table_code *tc = NULL;
  emc_status st = EMC_OK;
  int fits = 1;
  char nm[300];

  if (!rows || !kinds || !out) return EMC_FAIL(EMC_EINVAL, "NULL argument");
  if (n_tables == 0 || n_tables > EMC_MAX_TABLES)
    return EMC_FAIL(EMC_EINVAL, "n_tables = %u, must be 1..%u", n_tables, EMC_MAX_TABLES);
  if (key_bits != 32 && key_bits != 64)
    return EMC_FAIL(EMC_EINVAL, "key_bits = %u, must be 32 or 64", key_bits);
  for (i = 0; i < n_tables; i++) {
    if (rows[i] == 0) return EMC_FAIL(EMC_EINVAL, "table %u has 0 rows", i);
    if (kinds[i] != EMC_TABLE_DENSE && kinds[i] != EMC_TABLE_HASHED)
      return EMC_FAIL(EMC_EINVAL, "table %u has kind %d", i, (int)kinds[i]);
  }

  len = emc__calloc(n, sizeof *len);
  bits = emc__calloc(n, sizeof *bits);
  w = emc__calloc(n, sizeof *w);
  code = emc__calloc(n, sizeof *code);
  tc = emc__calloc(n_tables, sizeof *tc);
  if (!len || !bits || !w || !code || !tc) {
    st = EMC_FAIL(EMC_ENOMEM, "cannot allocate codec for %u tables", n_tables);
    goto done;
  }

  /* A table alone must leave room for a 1-bit code. */
  for (i = 0; i < n_tables; i++) {
    bits[i] = emc__bits_for_rows(rows[i]);
    if (bits[i] + 1u > key_bits) {
      name_of(nm, sizeof nm, names, i);
      st = EMC_FAIL(EMC_EKEYSPACE,
                    "%s with %llu rows needs %u feature bits plus a code bit; a %u-bit key lacks %u bits",
                    nm, (unsigned long long)rows[i], bits[i], key_bits, bits[i] + 1u - key_bits);
      goto done;
    }
    w[i] = rows[i];
  }
  w[n_tables] = 0; /* reserved symbol */

  st = huffman_lengths(w, n, len);
  if (st != EMC_OK) goto done;
  for (i = 0; i < n_tables && fits; i++) fits = len[i] + bits[i] <= key_bits;
  fits = fits && len[n_tables] + 1u <= key_bits;
  out->used_huffman = fits;

  if (!fits) {
    /* Kraft fallback: the longest code each table can afford, reserved code of length n-1. */
    /* Exact Kraft sum in units of 2^-n: table T costs 2^bits(T), the reserved code 2. */
    unsigned __int128 kraft = 2, space = (unsigned __int128)1 << key_bits;
    uint32_t worst = 0;
    for (i = 0; i < n_tables; i++) {
      len[i] = key_bits - bits[i];
      kraft += (unsigned __int128)1 << bits[i];
      if (rows[i] > rows[worst]) worst = i;
    }
    if (kraft > space) {
      uint32_t lack = 0;
      while (((unsigned __int128)1 << (key_bits + lack)) < kraft) lack++;
      name_of(nm, sizeof nm, names, worst);
      st = EMC_FAIL(EMC_EKEYSPACE,
                    "the %u tables need more than a %u-bit key space (no prefix code fits); "
                    "%s with %llu rows needs %u feature bits; the key lacks %u bits",
                    n_tables, key_bits, nm, (unsigned long long)rows[worst], bits[worst], lack);
      goto done;
    }
    len[n_tables] = 0; /* assigned below, after the tables' canonical codes */
    st = canonical_codes(len, n_tables, code);
    if (st != EMC_OK) goto done;
    len[n_tables] = key_bits - 1u;
    code[n_tables] = (1ull << (key_bits - 1u)) - 1u;
  } else {
    st = canonical_codes(len, n, code);
    if (st != EMC_OK) goto done;
  }

  for (i = 0; i < n_tables; i++) {
    tc[i].code = code[i];
    tc[i].len = len[i];
    tc[i].fbits = key_bits - len[i];
    tc[i].fmask = tc[i].fbits >= 64 ? ~0ull : ((1ull << tc[i].fbits) - 1u);
    tc[i].rows = rows[i];
    tc[i].kind = (uint32_t)kinds[i];
  }
  out->key_bits = key_bits;
  out->n_tables = n_tables;
  out->hash_seed = hash_seed;
  out->tables = tc;
  out->reserved_code = code[n_tables];
  out->reserved_len = len[n_tables];
  tc = NULL;

done:
  free(len); free(bits); free(w); free(code); free(tc);
  return st;
}

void emc__codec_free(emc__codec *c) {
  if (!c) return;
  free(c->tables);
  c->tables = NULL;
  c->n_tables = 0;
}

int64_t emc__codec_table_of(const emc__codec *c, uint64_t key) {
  uint32_t t;
  for (t = 0; t < c->n_tables; t++) {
    const emc__table_code *tc = &c->tables[t];
    uint64_t prefix = tc->fbits >= 64 ? 0 : (key >> tc->fbits);
    if (prefix == tc->code) return t;
  }
  return -1;
}

uint64_t emc__codec_dense_id(const emc__codec *c, uint32_t table, uint64_t key) {
  const emc__table_code *tc = &c->tables[table];
  return emc__unmix(key & tc->fmask, tc->fbits);
}
