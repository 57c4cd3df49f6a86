/*
 * test_store_file: the store's file format (lib/store/store_io.c): emc_store_save and
 * emc_store_open. The reference model is test_store's (store_ref.h).
 *
 *   save/open          round trip of every row and descriptor, re-save byte-identical, the
 *                      file layout of README "Store file format" (independent parser)
 *   corruption         every byte of a small file flipped, strided + random flips of a larger
 *                      one, truncation at every length / section boundary, appended bytes,
 *                      field edits with recomputed checksums (semantic checks), foreign files:
 *                      EMC_ECORRUPT, *out untouched; EMC_EIO for missing paths and directories
 *   save errors        EMC_EIO for unwritable targets, no temporary left, an existing file kept
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include <xxhash.h>

#include "common.h"
#include "store_ref.h"

/* ------------------------------------------------------------------ files */
typedef struct layout {
  uint32_t n_tables;
  uint64_t desc_bytes, file_bytes;
  size_t desc_off[16];   /* start of each descriptor record */
  size_t desc_sum;       /* offset of the descriptor checksum */
  size_t data_off[16];   /* start of each data section */
  size_t data_len[16];
  uint32_t kind[16], dtype[16], dim[16], name_len[16];
  uint64_t rows[16], count[16];
} layout;

static uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* Parse a saved file as README "Store file format" describes it, checking every field. */
static void parse_file(const unsigned char *b, size_t n, layout *L) {
  size_t o = 64;
  uint32_t i;
  memset(L, 0, sizeof *L);
  ck_assert_uint_ge(n, 64);
  REQUIRE(memcmp(b, "EMBCSTOR", 8) == 0, "magic");
  ck_assert_uint_eq(rd32(b + 8), 1);
  L->n_tables = rd32(b + 12);
  L->desc_bytes = rd64(b + 16);
  L->file_bytes = rd64(b + 24);
  ck_assert_uint_eq(L->file_bytes, n);
  REQUIRE(rd64(b + 32) == 0 && rd64(b + 40) == 0 && rd64(b + 48) == 0, "reserved not zero");
  REQUIRE(rd64(b + 56) == XXH64(b, 56, 0), "header checksum");
  ck_assert_uint_le(L->n_tables, 16);
  for (i = 0; i < L->n_tables; i++) {
    uint32_t nl, pad, k;
    L->desc_off[i] = o;
    L->kind[i] = rd32(b + o);
    L->dtype[i] = rd32(b + o + 4);
    L->dim[i] = rd32(b + o + 8);
    L->name_len[i] = nl = rd32(b + o + 12);
    L->rows[i] = rd64(b + o + 16);
    L->count[i] = rd64(b + o + 24);
    L->data_len[i] = (size_t)rd64(b + o + 32);
    ck_assert_uint_le(nl, 255);
    pad = (8u - (nl & 7u)) & 7u;
    for (k = 0; k < pad; k++) REQUIRE(b[o + 40 + nl + k] == 0, "name padding not zero");
    ck_assert_uint_eq(L->data_len[i], (L->kind[i] == 1 ? L->count[i] * 8 : 0) +
                                          L->count[i] * L->dim[i] * (L->dtype[i] == 0 ? 4u : 2u));
    o += 40u + nl + pad;
  }
  ck_assert_uint_eq(o - 64, L->desc_bytes);
  L->desc_sum = o;
  REQUIRE(rd64(b + o) == XXH64(b + 64, L->desc_bytes, 0), "descriptor checksum");
  o += 8;
  for (i = 0; i < L->n_tables; i++) {
    L->data_off[i] = o;
    ck_assert_uint_le(o + L->data_len[i] + 8, n);
    REQUIRE(rd64(b + o + L->data_len[i]) == XXH64(b + o, L->data_len[i], 0),
                  "data checksum of table %u", i);
    o += L->data_len[i] + 8;
  }
  ck_assert_uint_eq(o, n);
}

/* Recompute every checksum of an edited file whose section layout is L. */
static void fix_sums(unsigned char *b, const layout *L) {
  uint32_t i;
  wr64(b + 56, XXH64(b, 56, 0));
  wr64(b + L->desc_sum, XXH64(b + 64, L->desc_bytes, 0));
  for (i = 0; i < L->n_tables; i++)
    wr64(b + L->data_off[i] + L->data_len[i], XXH64(b + L->data_off[i], L->data_len[i], 0));
}

/* small store: dense f32 (odd dim), hashed f16 partly filled, dense f16 1-element rows */
static emc_store *small_store(refstore *ref) {
  static const emc_table_desc td[3] = {{"dense_a", EMC_TABLE_DENSE, 5, 3, EMC_DTYPE_F32, EMC_STATE_NONE},
                                       {"hash_b", EMC_TABLE_HASHED, 6, 2, EMC_DTYPE_F16, EMC_STATE_NONE},
                                       {NULL, EMC_TABLE_DENSE, 2, 1, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s;
  uint64_t hid[3] = {17, ~0ull, 0}, did[5] = {0, 1, 2, 3, 4};
  unsigned char rows[5 * 12];
  EMCT_OK(emc_store_create(td, 3, &s));
  if (ref) ref_init(ref, td, 3);
  fill_rows(rows, 5, &td[0], 0, 1, did);
  EMCT_OK(emc_store_write(s, 0, did, 5, rows));
  if (ref) ref_write(ref, 0, did, 5, rows);
  fill_rows(rows, 3, &td[1], 1, 2, hid);
  EMCT_OK(emc_store_write(s, 1, hid, 3, rows));
  if (ref) ref_write(ref, 1, hid, 3, rows);
  fill_rows(rows, 2, &td[2], 2, 3, did);
  EMCT_OK(emc_store_write(s, 2, did, 2, rows));
  if (ref) ref_write(ref, 2, did, 2, rows);
  return s;
}

/* larger store for sampled corruption */
static emc_store *large_store(void) {
  static const emc_table_desc td[4] = {{"big_dense", EMC_TABLE_DENSE, 3000, 16, EMC_DTYPE_F32, EMC_STATE_NONE},
                                       {"big_hash", EMC_TABLE_HASHED, 2000, 8, EMC_DTYPE_F16, EMC_STATE_NONE},
                                       {"tiny", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                                       {"empty_hash", EMC_TABLE_HASHED, 10, 3, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  uint64_t ids[1500];
  unsigned char *z = calloc(1500, 16);
  uint32_t i;
  ck_assert(z != NULL);
  EMCT_OK(emc_store_create(td, 4, &s));
  for (i = 0; i < 1500; i++) ids[i] = emc__fmix64(i * 31u + 7u);
  EMCT_OK(emc_store_write(s, 1, ids, 1500, z));
  for (i = 0; i < 3; i++) EMCT_OK(emc_store_fill_uniform(s, i, -3, 3, 100 + i));
  free(z);
  return s;
}

START_TEST(save_open_roundtrip) {
  char name255[256], dir[4096], p1[4200], p2[4200];
  emc_table_desc td[6] = {{"users", EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"", EMC_TABLE_HASHED, 300, 3, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {name255, EMC_TABLE_DENSE, 2, 2049, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {NULL, EMC_TABLE_HASHED, 4, 1, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"full_hash", EMC_TABLE_HASHED, 50, 5, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"one", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s, *o = NULL, *o2 = NULL;
  refstore ref;
  uint64_t rng = 0x4011, ids[300];
  unsigned char *rows = malloc(300 * 64), *f1, *f2;
  size_t n1, n2;
  uint32_t i;
  layout L;
  ck_assert(rows != NULL);
  memset(name255, 'q', 255);
  name255[255] = 0;
  emct_tmpdir(dir, sizeof dir);
  path_in(p1, sizeof p1, dir, "a.emc");
  path_in(p2, sizeof p2, dir, "b.emc");
  EMCT_OK(emc_store_create(td, 6, &s));
  ref_init(&ref, td, 6);
  ref.desc[3].name = "t3";
  for (i = 0; i < 1000 && i < 300; i++) ids[i] = i;
  /* dense: uniform fill then some pattern rows */
  EMCT_OK(emc_store_fill_uniform(s, 0, -1, 1, 1));
  for (i = 0; i < 1000; i++) {
    uint64_t id = i;
    EMCT_OK(emc_uniform_row(1, 0, id, -1, 1, 16, EMC_DTYPE_F32, ref.rows[0] + (size_t)i * 64));
  }
  fill_rows(rows, 100, &td[0], 0, 9, ids);
  EMCT_OK(emc_store_write(s, 0, ids, 100, rows));
  ref_write(&ref, 0, ids, 100, rows);
  /* hashed, partly filled with random 64-bit ids */
  for (i = 0; i < 170; i++) ids[i] = rng_next(&rng);
  ids[0] = 0;
  ids[1] = ~0ull;
  fill_rows(rows, 170, &td[1], 1, 5, ids);
  EMCT_OK(emc_store_write(s, 1, ids, 170, rows));
  ref_write(&ref, 1, ids, 170, rows);
  /* wide f16 rows */
  {
    unsigned char *w = malloc(2 * 2049 * 2);
    uint64_t d2[2] = {0, 1};
    fill_rows(w, 2, &td[2], 2, 1, d2);
    EMCT_OK(emc_store_write(s, 2, d2, 2, w));
    ref_write(&ref, 2, d2, 2, w);
    free(w);
  }
  /* table 3 empty; table 4 full */
  for (i = 0; i < 50; i++) ids[i] = 1000000007ull * (i + 1);
  fill_rows(rows, 50, &td[4], 4, 2, ids);
  EMCT_OK(emc_store_write(s, 4, ids, 50, rows));
  ref_write(&ref, 4, ids, 50, rows);
  ref_check(&ref, s, "before save");

  EMCT_OK(emc_store_save(s, p1));
  EMCT_OK(emc_store_open(p1, &o));
  ck_assert(o != NULL && o != s);
  ref_check(&ref, o, "opened");
  /* descriptors, names included */
  for (i = 0; i < 6; i++) {
    emc_table_desc a, b;
    EMCT_OK(emc_store_table(s, i, &a));
    EMCT_OK(emc_store_table(o, i, &b));
    ck_assert_str_eq(a.name, b.name);
    ck_assert(a.kind == b.kind && a.rows == b.rows && a.dim == b.dim && a.dtype == b.dtype);
  }
  /* re-save: byte-identical */
  EMCT_OK(emc_store_save(o, p2));
  f1 = emct_read_file(p1, &n1);
  f2 = emct_read_file(p2, &n2);
  REQUIRE(n1 == n2 && memcmp(f1, f2, n1) == 0, "re-saved file differs (%zu vs %zu bytes)", n1, n2);
  parse_file(f1, n1, &L);
  ck_assert_uint_eq(L.n_tables, 6);
  for (i = 0; i < 6; i++) {
    ck_assert_uint_eq(L.kind[i], td[i].kind);
    ck_assert_uint_eq(L.dtype[i], td[i].dtype);
    ck_assert_uint_eq(L.dim[i], td[i].dim);
    ck_assert_uint_eq(L.rows[i], td[i].rows);
    ck_assert_uint_eq(L.count[i], ref.count[i]);
    ck_assert_uint_eq(L.name_len[i], strlen(i == 3 ? "t3" : td[i].name));
  }
  /* hashed ids in the file: row order, as written */
  {
    size_t k;
    for (k = 0; k < ref.count[1]; k++)
      ck_assert_uint_eq(rd64(f1 + L.data_off[1] + 8 * k), ref.ids[1][k]);
  }
  free(f2);
  /* the opened store is a normal store: hashed capacity continues, full table refuses */
  {
    uint64_t nid[130], cnt;
    for (i = 0; i < 130; i++) nid[i] = 0xabc00000ull + i;
    fill_rows(rows, 130, &td[1], 1, 77, nid);
    EMCT_OK(emc_store_write(o, 1, nid, 130, rows));
    EMCT_OK(emc_store_table_count(o, 1, &cnt));
    ck_assert_uint_eq(cnt, 300);
    ST_FRESH(emc_store_write(o, 1, (uint64_t[]){0xfff}, 1, rows), EMC_ERANGE);
    ST_FRESH(emc_store_write(o, 4, (uint64_t[]){0xfff}, 1, rows), EMC_ERANGE);
    ref_write(&ref, 1, nid, 130, rows);
    ref_check(&ref, o, "opened + writes");
  }
  /* saving over an existing file replaces it whole */
  EMCT_OK(emc_store_save(o, p1));
  EMCT_OK(emc_store_open(p1, &o2));
  ref_check(&ref, o2, "re-opened after overwrite");
  free(f1);
  f1 = emct_read_file(p1, &n1);
  parse_file(f1, n1, &L);
  ck_assert_uint_eq(L.count[1], 300);
  free(f1);
  emc_store_destroy(o2);
  emc_store_destroy(o);
  emc_store_destroy(s);
  ref_free(&ref);
  free(rows);
  emct_rmdir(dir);
}
END_TEST

/* Flip bits of every byte of a small saved file: each edit is detected (EMC_ECORRUPT), *out
 * untouched, fresh detail. */
START_TEST(corrupt_every_byte_small) {
  static const unsigned char masks[] = {0x01, 0x80, 0xff, 0x10};
  char dir[4096], p[4200], q[4200];
  emc_store *s = small_store(NULL), *o = NULL;
  unsigned char *f, *g;
  size_t n, pos, mi;
  layout L;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "small.emc");
  path_in(q, sizeof q, dir, "bad.emc");
  EMCT_OK(emc_store_save(s, p));
  f = emct_read_file(p, &n);
  parse_file(f, n, &L);
  g = malloc(n);
  ck_assert(g != NULL);
  for (pos = 0; pos < n; pos++)
    for (mi = 0; mi < sizeof masks; mi++) {
      char what[96];
      memcpy(g, f, n);
      g[pos] ^= masks[mi];
      emct_write_file(q, g, n);
      snprintf(what, sizeof what, "byte %zu of %zu ^ %02x", pos, n, masks[mi]);
      expect_open_fails(q, EMC_ECORRUPT, what);
    }
  /* the untouched file still opens */
  EMCT_OK(emc_store_open(p, &o));
  emc_store_destroy(o);
  free(f);
  free(g);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* Truncation at every length, and appended bytes, of a small file. */
START_TEST(truncate_every_length_small) {
  char dir[4096], p[4200], q[4200];
  emc_store *s = small_store(NULL);
  unsigned char *f, *g;
  size_t n, len;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "small.emc");
  path_in(q, sizeof q, dir, "cut.emc");
  EMCT_OK(emc_store_save(s, p));
  f = emct_read_file(p, &n);
  for (len = 0; len < n; len++) {
    char what[64];
    emct_write_file(q, f, len);
    snprintf(what, sizeof what, "truncated to %zu of %zu", len, n);
    expect_open_fails(q, EMC_ECORRUPT, what);
  }
  g = calloc(n + 64, 1);
  ck_assert(g != NULL);
  memcpy(g, f, n);
  for (len = n + 1; len <= n + 64; len += (len < n + 9 ? 1 : 8)) {
    char what[64];
    emct_write_file(q, g, len);
    snprintf(what, sizeof what, "%zu bytes appended", len - n);
    expect_open_fails(q, EMC_ECORRUPT, what);
  }
  free(g);
  free(f);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* A larger file: flips at a stride plus random positions, and truncation at every section
 * boundary +-1 plus a stride. */
START_TEST(corrupt_and_truncate_large) {
  char dir[4096], p[4200], q[4200];
  emc_store *s = large_store(), *o = NULL;
  unsigned char *f, *g;
  size_t n, pos, stride, k, n_rand = (size_t)emct_scale(300, 3);
  uint64_t rng = 0x1a29e;
  layout L;
  size_t cuts[64], nc = 0;
  uint32_t i;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "large.emc");
  path_in(q, sizeof q, dir, "bad.emc");
  EMCT_OK(emc_store_save(s, p));
  f = emct_read_file(p, &n);
  parse_file(f, n, &L);
  ck_assert_uint_gt(n, 200000);
  g = malloc(n);
  ck_assert(g != NULL);
  stride = n / emct_scale(600, 4) + 1;
  for (pos = 0; pos < n; pos += stride) {
    char what[64];
    memcpy(g, f, n);
    g[pos] ^= (unsigned char)(1u << (pos % 8));
    emct_write_file(q, g, n);
    snprintf(what, sizeof what, "byte %zu of %zu", pos, n);
    expect_open_fails(q, EMC_ECORRUPT, what);
  }
  for (k = 0; k < n_rand; k++) {
    char what[64];
    pos = (size_t)rng_below(&rng, n);
    memcpy(g, f, n);
    g[pos] ^= (unsigned char)(1u + rng_below(&rng, 255));
    emct_write_file(q, g, n);
    snprintf(what, sizeof what, "random byte %zu of %zu", pos, n);
    expect_open_fails(q, EMC_ECORRUPT, what);
  }
  /* every section boundary, +-1 */
  cuts[nc++] = 64;
  for (i = 0; i < L.n_tables; i++) cuts[nc++] = L.desc_off[i];
  cuts[nc++] = L.desc_sum;
  cuts[nc++] = L.desc_sum + 8;
  for (i = 0; i < L.n_tables; i++) {
    cuts[nc++] = L.data_off[i];
    cuts[nc++] = L.data_off[i] + L.data_len[i];
    cuts[nc++] = L.data_off[i] + L.data_len[i] + 8;
  }
  for (k = 0; k < nc; k++) {
    int d;
    for (d = -1; d <= 1; d++) {
      size_t len = cuts[k] + (size_t)(long)d;
      char what[64];
      if (len >= n) continue;
      emct_write_file(q, f, len);
      snprintf(what, sizeof what, "truncated to %zu of %zu", len, n);
      expect_open_fails(q, EMC_ECORRUPT, what);
    }
  }
  for (k = 0; k < 8; k++) {
    size_t len = k < 2 ? k : k == 7 ? n - 1 : (size_t)rng_below(&rng, n);
    char what[64];
    emct_write_file(q, f, len);
    snprintf(what, sizeof what, "truncated to %zu of %zu", len, n);
    expect_open_fails(q, EMC_ECORRUPT, what);
  }
  EMCT_OK(emc_store_open(p, &o));
  {
    size_t n2;
    unsigned char *f2;
    EMCT_OK(emc_store_save(o, q));
    f2 = emct_read_file(q, &n2);
    REQUIRE(n2 == n && memcmp(f2, f, n) == 0, "large store did not round-trip");
    free(f2);
  }
  emc_store_destroy(o);
  free(f);
  free(g);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* Field edits with every checksum recomputed: the semantic checks (not the checksums) must
 * reject them. A valid edit (hashed capacity 6 -> 7) is the control. */
START_TEST(crafted_fields_rejected) {
  char dir[4096], p[4200], q[4200];
  emc_store *s = small_store(NULL), *o = NULL;
  unsigned char *f, *g;
  size_t n;
  layout L;
  int k;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "small.emc");
  path_in(q, sizeof q, dir, "crafted.emc");
  EMCT_OK(emc_store_save(s, p));
  f = emct_read_file(p, &n);
  parse_file(f, n, &L);
  g = malloc(n);
  ck_assert(g != NULL);
  /* controls: recomputing unchanged sums is the identity; a valid edit opens */
  memcpy(g, f, n);
  fix_sums(g, &L);
  ck_assert(memcmp(g, f, n) == 0);
  wr64(g + L.desc_off[1] + 16, 7); /* hashed capacity 6 -> 7 */
  fix_sums(g, &L);
  emct_write_file(q, g, n);
  EMCT_OK(emc_store_open(q, &o));
  {
    emc_table_desc d;
    EMCT_OK(emc_store_table(o, 1, &d));
    ck_assert_uint_eq(d.rows, 7);
  }
  emc_store_destroy(o);
  o = NULL;

  for (k = 0;; k++) {
    const char *what = NULL;
    size_t d0 = L.desc_off[0], d1 = L.desc_off[1];
    memcpy(g, f, n);
    switch (k) {
      case 0: what = "magic"; g[3] = 'x'; break;
      case 1: what = "version 2"; wr32(g + 8, 2); break;
      case 2: what = "version 0"; wr32(g + 8, 0); break;
      case 3: what = "n_tables 0"; wr32(g + 12, 0); break;
      case 4: what = "n_tables 2"; wr32(g + 12, 2); break;
      case 5: what = "n_tables 4"; wr32(g + 12, 4); break;
      case 6: what = "n_tables 4097"; wr32(g + 12, EMC_MAX_TABLES + 1u); break;
      case 7: what = "desc_bytes + 8"; wr64(g + 16, L.desc_bytes + 8); break;
      case 8: what = "desc_bytes 0"; wr64(g + 16, 0); break;
      case 9: what = "file_bytes + 1"; wr64(g + 24, n + 1); break;
      case 10: what = "file_bytes - 1"; wr64(g + 24, n - 1); break;
      case 11: what = "kind 2"; wr32(g + d0, 2); break;
      case 12: what = "dtype 2"; wr32(g + d0 + 4, 2); break;
      case 13: what = "dim 0"; wr32(g + d0 + 8, 0); break;
      case 14: what = "dim 4 (data size)"; wr32(g + d0 + 8, 4); break;
      case 15: what = "dim huge"; wr32(g + d0 + 8, EMC_MAX_DIM + 1u); break;
      case 16: what = "name_len 256"; wr32(g + d0 + 12, 256); break;
      case 17: what = "name_len 0"; wr32(g + d0 + 12, 0); break;
      case 18: what = "name_len 8"; wr32(g + d0 + 12, 8); break;
      case 19: what = "dense rows 6 (count 5)"; wr64(g + d0 + 16, 6); break;
      case 20: what = "dense rows 0"; wr64(g + d0 + 16, 0); break;
      case 21: what = "dense count 4"; wr64(g + d0 + 24, 4); break;
      case 22: what = "hashed count 7 > rows 6"; wr64(g + d1 + 24, 7); break;
      case 23: what = "hashed count 2 (data size)"; wr64(g + d1 + 24, 2); break;
      case 24: what = "data_bytes + 4"; wr64(g + d0 + 32, rd64(g + d0 + 32) + 4); break;
      case 25: what = "NUL in name"; g[d0 + 40 + 2] = 0; break;
      case 26: what = "duplicate hashed id"; wr64(g + L.data_off[1] + 8, rd64(g + L.data_off[1])); break;
      case 27: what = "hashed rows > 2^40"; wr64(g + d1 + 16, EMC_MAX_ROWS + 1u); break;
      case 28: what = "kind dense->hashed"; wr32(g + d0, 1); break;
      case 29: what = "dtype f32->f16"; wr32(g + d0 + 4, 1); break;
      /* fields version 1 writes as zeros: a file with anything else there is foreign */
      case 30: what = "reserved[0] 1"; wr64(g + 32, 1); break;
      case 31: what = "reserved[1] 2^63"; wr64(g + 40, 1ull << 63); break;
      case 32: what = "reserved[2] byte 7"; g[55] = 0x80; break;
      case 33: what = "name padding ('dense_a' + 1 byte)"; g[d0 + 40 + 7] = ' '; break;
      case 34: /* sizes that agree with each other, the data past the end of the file */
        what = "dense rows, count and data_bytes of 2^20 rows";
        wr64(g + d0 + 16, 1u << 20);
        wr64(g + d0 + 24, 1u << 20);
        wr64(g + d0 + 32, (1ull << 20) * rd32(g + d0 + 8) * (rd32(g + d0 + 4) ? 2u : 4u));
        break;
      default: break;
    }
    if (!what) break;
    fix_sums(g, &L);
    emct_write_file(q, g, n);
    expect_open_fails(q, EMC_ECORRUPT, what);
    REQUIRE(strstr(emc_last_error_detail(), "checksum") == NULL,
                  "%s: rejected by a checksum, not by the field check (%s)", what,
                  emc_last_error_detail());
    if (k == 34) /* the detail says why (it once repeated one size as "expected") */
      REQUIRE(strstr(emc_last_error_detail(), "exceeds the file size") != NULL, "%s: %s", what,
              emc_last_error_detail());
  }
  free(f);
  free(g);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* Files that are not stores: EMC_ECORRUPT; paths that cannot be read as files: EMC_EIO. */
START_TEST(foreign_files_and_bad_paths) {
  static const size_t sizes[] = {0, 1, 8, 63, 64, 65, 100, 4096};
  char dir[4096], p[4200], sub[4200];
  unsigned char buf[4096];
  uint64_t rng = 0xf0e1;
  size_t i, j;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "foreign.bin");
  for (i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char what[64];
    for (j = 0; j < sizes[i]; j++) buf[j] = (unsigned char)rng_next(&rng);
    emct_write_file(p, buf, sizes[i]);
    snprintf(what, sizeof what, "%zu random bytes", sizes[i]);
    expect_open_fails(p, EMC_ECORRUPT, what);
  }
  {
    const char *txt = "name,rows,dim\nusers,1000,64\nitems,500000,32\n"
                      "this is a CSV file, not an embcache store; it is long enough for a header.\n";
    emct_write_file(p, txt, strlen(txt));
    expect_open_fails(p, EMC_ECORRUPT, "text file");
  }
  /* right magic, garbage after it */
  for (j = 0; j < sizeof buf; j++) buf[j] = (unsigned char)rng_next(&rng);
  memcpy(buf, "EMBCSTOR", 8);
  emct_write_file(p, buf, sizeof buf);
  expect_open_fails(p, EMC_ECORRUPT, "magic + garbage");
  /* 64 zero bytes */
  memset(buf, 0, 64);
  emct_write_file(p, buf, 64);
  expect_open_fails(p, EMC_ECORRUPT, "zero header");

  path_in(p, sizeof p, dir, "does_not_exist.emc");
  expect_open_fails(p, EMC_EIO, "nonexistent file");
  REQUIRE(strstr(emc_last_error_detail(), strerror(ENOENT)) != NULL, "detail: %s",
                emc_last_error_detail());
  path_in(p, sizeof p, dir, "no_dir/x.emc");
  expect_open_fails(p, EMC_EIO, "nonexistent directory");
  expect_open_fails(dir, EMC_EIO, "a directory");
  path_in(sub, sizeof sub, dir, "subdir");
  ck_assert(mkdir(sub, 0700) == 0);
  expect_open_fails(sub, EMC_EIO, "an empty directory");
  expect_open_fails("", EMC_EIO, "empty path");
  emct_rmdir(dir);
}
END_TEST

/* A FIFO is not a regular file: emc_store_open must return EMC_EIO, not block waiting for a
 * writer. Run in a child so a blocked open cannot hang the suite (2 s limit). */
START_TEST(open_fifo_does_not_block) {
  char dir[4096], p[4200];
  pid_t pid;
  int status = 0, waited_ms = 0;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "fifo.emc");
  ck_assert(mkfifo(p, 0600) == 0);
  pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    emc_store *o = OUT_SENTINEL;
    emc_status st = emc_store_open(p, &o);
    _exit(st == EMC_EIO && o == OUT_SENTINEL ? 0 : 10 + (int)st);
  }
  while (waitpid(pid, &status, WNOHANG) == 0 && waited_ms < 2000) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    waited_ms += 10;
  }
  if (waited_ms >= 2000) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    unlink(p);
    emct_rmdir(dir);
    ck_abort_msg("emc_store_open on a FIFO blocked for 2 s (it opens before checking the file type)");
  }
  unlink(p);
  emct_rmdir(dir);
  REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "emc_store_open on a FIFO: exit %d (want EMC_EIO, *out untouched)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
END_TEST

static int dir_has_tmp(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  ck_assert(d != NULL);
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, ".tmp") != NULL) found = 1; /* "<name>.tmp-<pid>-<hex>" */
  closedir(d);
  return found;
}

/* Save failures: EMC_EIO with the errno text; no temporary file left; an existing file at the
 * path is kept whole when the new one cannot be written. */
START_TEST(save_errors) {
  char dir[4096], p[8800], sub[4200];
  emc_store *s = small_store(NULL), *o = NULL;
  unsigned char *before, *after;
  size_t nb, na;
  emct_tmpdir(dir, sizeof dir);
  /* a missing directory */
  path_in(p, sizeof p, dir, "missing/x.emc");
  ST_FRESH(emc_store_save(s, p), EMC_EIO);
  REQUIRE(strstr(emc_last_error_detail(), strerror(ENOENT)) != NULL, "detail: %s",
                emc_last_error_detail());
  /* a regular file as the parent */
  path_in(p, sizeof p, dir, "plain");
  emct_write_file(p, "x", 1);
  path_in(p, sizeof p, dir, "plain/x.emc");
  ST_FRESH(emc_store_save(s, p), EMC_EIO);
  REQUIRE(strstr(emc_last_error_detail(), strerror(ENOTDIR)) != NULL, "detail: %s",
                emc_last_error_detail());
  /* the path is an existing (non-empty) directory: the rename fails, the temporary is removed */
  path_in(sub, sizeof sub, dir, "adir");
  ck_assert(mkdir(sub, 0700) == 0);
  path_in(p, sizeof p, sub, "keep");
  emct_write_file(p, "k", 1);
  ST_FRESH(emc_store_save(s, sub), EMC_EIO);
  REQUIRE(!dir_has_tmp(dir), "a temporary file was left behind in %s", dir);
  {
    struct stat sb;
    ck_assert(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode));
    ck_assert(stat(p, &sb) == 0 && sb.st_size == 1);
  }
  /* a FIFO at the path (as a device would be, say /dev/null for root): refused, not replaced */
  path_in(p, sizeof p, dir, "fifo");
  ck_assert(mkfifo(p, 0600) == 0);
  ST_FRESH(emc_store_save(s, p), EMC_EIO);
  REQUIRE(strstr(emc_last_error_detail(), "not a regular file") != NULL, "detail: %s",
          emc_last_error_detail());
  {
    struct stat sb;
    char lk[4200];
    ck_assert(lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode));
    /* ... and a link to it (as /dev/stdout links to a device): the link stays */
    path_in(lk, sizeof lk, dir, "fifo-link");
    ck_assert(symlink(p, lk) == 0);
    ST_FRESH(emc_store_save(s, lk), EMC_EIO);
    ck_assert(lstat(lk, &sb) == 0 && S_ISLNK(sb.st_mode));
    ck_assert(unlink(lk) == 0);
  }
  ck_assert(unlink(p) == 0);
  REQUIRE(!dir_has_tmp(dir), "a temporary file was left behind in %s", dir);
  /* an existing store file whose replacement cannot be written (the file size limit stops
   * the write): EIO, the old file unchanged, nothing left behind */
  path_in(p, sizeof p, dir, "store.emc");
  {
    emc_store *other;
    emc_table_desc td = {"other", EMC_TABLE_DENSE, 3, 2, EMC_DTYPE_F32, EMC_STATE_NONE};
    EMCT_OK(emc_store_create(&td, 1, &other));
    EMCT_OK(emc_store_fill_uniform(other, 0, -1, 1, 4));
    EMCT_OK(emc_store_save(other, p));
    emc_store_destroy(other);
  }
  before = emct_read_file(p, &nb);
  {
    struct rlimit old, small;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal */
    ck_assert(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 100; /* the small store's file is longer */
    ck_assert(setrlimit(RLIMIT_FSIZE, &small) == 0);
    ST_FRESH(emc_store_save(s, p), EMC_EIO);
    ck_assert(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, prev);
    REQUIRE(strstr(emc_last_error_detail(), strerror(EFBIG)) != NULL, "detail: %s",
            emc_last_error_detail());
  }
  after = emct_read_file(p, &na);
  REQUIRE(na == nb && memcmp(before, after, nb) == 0, "failed save changed the existing file");
  free(after);
  REQUIRE(!dir_has_tmp(dir), "a temporary was left behind");
  /* and a normal save over it succeeds and replaces it */
  EMCT_OK(emc_store_save(s, p));
  REQUIRE(!dir_has_tmp(dir), "a temporary was left behind after a good save");
  EMCT_OK(emc_store_open(p, &o));
  ck_assert_uint_eq(emc_store_n_tables(o), 3);
  emc_store_destroy(o);
  free(before);
  emc_store_destroy(s);
  emct_rmdir(sub);
  emct_rmdir(dir);
}
END_TEST

/* The small store round-trips every row through save/open (the reference of small_store). */
START_TEST(small_store_roundtrip_ref) {
  char dir[4096], p[4200];
  refstore ref;
  emc_store *s = small_store(&ref), *o = NULL;
  emct_tmpdir(dir, sizeof dir);
  path_in(p, sizeof p, dir, "s.emc");
  ref.desc[2].name = "t2";
  EMCT_OK(emc_store_save(s, p));
  EMCT_OK(emc_store_open(p, &o));
  ref_check(&ref, s, "small");
  ref_check(&ref, o, "small opened");
  emc_store_destroy(o);
  emc_store_destroy(s);
  ref_free(&ref);
  emct_rmdir(dir);
}
END_TEST


int main(void) {
  Suite *s = suite_create("store_file");
  TCase *tf = tcase_create("files");
  SRunner *sr;
  int failed;
  tcase_add_test(tf, save_open_roundtrip);
  tcase_add_test(tf, small_store_roundtrip_ref);
  tcase_add_test(tf, corrupt_every_byte_small);
  tcase_add_test(tf, truncate_every_length_small);
  tcase_add_test(tf, corrupt_and_truncate_large);
  tcase_add_test(tf, crafted_fields_rejected);
  tcase_add_test(tf, foreign_files_and_bad_paths);
  tcase_add_test(tf, save_errors);
  tcase_add_test(tf, open_fifo_does_not_block);
  tcase_set_timeout(tf, emct_timeout(60));
  suite_add_tcase(s, tf);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
