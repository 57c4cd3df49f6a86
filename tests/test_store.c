/*
 * test_store: the host embedding store's API (lib/store/store.c); its file format is
 * test_store_file's. Both share a reference model (store_ref.h).
 *
 *   create/describe    descriptors copied (names, "t<i>" default), limits, bad descriptors
 *   write/read         dense and hashed, f32 and f16, odd row sizes, duplicates (last wins),
 *                      absent hashed ids read as zero rows, hashed capacity (all-or-nothing)
 *   uniform rows       fill_uniform == emc_uniform_row for every id, determinism per seed,
 *                      values in [lo, hi), f16 = f32 rounded to nearest even (reference)
 *   bad arguments      every failing call: the documented status, a fresh non-empty detail,
 *                      outputs untouched, the store unchanged (compared through a saved image)
 *   attached cache     a store with a cache attached refuses writes
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <float.h>
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

/* ------------------------------------------------------------------ helpers */
/* A byte image of the whole store: emc_store_save is deterministic and covers descriptors,
 * hashed ids in row order and every row. */
static unsigned char *snap(const emc_store *s, const char *dir, size_t *n) {
  char p[4200];
  unsigned char *b;
  snprintf(p, sizeof p, "%s/snapshot.emc", dir);
  EMCT_OK(emc_store_save(s, p));
  b = emct_read_file(p, n);
  unlink(p);
  return b;
}
static void check_same_snap(const emc_store *s, const char *dir, const unsigned char *before,
                            size_t nb, const char *what) {
  size_t na;
  unsigned char *after = snap(s, dir, &na);
  REQUIRE(na == nb && memcmp(after, before, nb) == 0,
                "%s: the store changed (image %zu -> %zu bytes, first diff at %ld)", what, nb, na,
                na == nb ? emct_first_diff(after, before, nb) : -1L);
  free(after);
}

/* ---------------------------------------------------------- f16 reference */
/* The value of binary16 bits, decoded independently of lib/. */
static double dec_f16(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexp((double)m, -24);
  else v = ldexp((double)(1024 + m), e - 25);
  return (h & 0x8000u) ? -v : v;
}
/* f rounded to binary16, nearest even (default rounding mode), overflow to infinity. */
static double ref_f16(float f) {
  double a = fabs((double)f), q, r;
  int e;
  if (a == 0) return (double)f;
  (void)frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (e < -14) e = -14;
  q = ldexp(1.0, e - 10);
  r = nearbyint(a / q) * q;
  if (r >= 65536.0) r = INFINITY;
  return signbit(f) ? -r : r;
}

/* ------------------------------------------------------------------ tests */
START_TEST(create_and_describe) {
  char name255[256], namebuf[16] = "mutable";
  emc_table_desc td[5] = {{namebuf, EMC_TABLE_DENSE, 7, 3, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {NULL, EMC_TABLE_HASHED, 4, 5, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {name255, EMC_TABLE_HASHED, 1, EMC_MAX_DIM, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {NULL, EMC_TABLE_DENSE, 3, 2, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s = NULL;
  uint32_t t;
  memset(name255, 'n', 255);
  name255[255] = 0;
  ck_assert_uint_eq(emc_dtype_size(EMC_DTYPE_F32), 4);
  ck_assert_uint_eq(emc_dtype_size(EMC_DTYPE_F16), 2);
  EMCT_OK(emc_store_create(td, 5, &s));
  strcpy(namebuf, "changed"); /* names are copied */
  ck_assert_uint_eq(emc_store_n_tables(s), 5);
  ck_assert_uint_eq(emc_store_n_tables(NULL), 0);
  for (t = 0; t < 5; t++) {
    emc_table_desc d;
    uint64_t cnt = 99;
    size_t rb = row_bytes_of(&td[t]);
    unsigned char *buf = malloc(rb), *zero = calloc(1, rb);
    uint64_t id = 0;
    ck_assert(buf && zero);
    EMCT_OK(emc_store_table(s, t, &d));
    ck_assert_int_eq(d.kind, td[t].kind);
    ck_assert_uint_eq(d.rows, td[t].rows);
    ck_assert_uint_eq(d.dim, td[t].dim);
    ck_assert_int_eq(d.dtype, td[t].dtype);
    if (t == 0) ck_assert_str_eq(d.name, "mutable");
    else if (t == 1) ck_assert_str_eq(d.name, "t1");
    else if (t == 4) ck_assert_str_eq(d.name, "t4");
    else ck_assert_str_eq(d.name, td[t].name);
    EMCT_OK(emc_store_table_count(s, t, &cnt));
    ck_assert_uint_eq(cnt, td[t].kind == EMC_TABLE_DENSE ? td[t].rows : 0);
    memset(buf, 0xee, rb);
    EMCT_OK(emc_store_read(s, t, &id, 1, buf));
    REQUIRE(memcmp(buf, zero, rb) == 0, "table %u: fresh row not zero", t);
    free(buf);
    free(zero);
  }
  emc_store_destroy(s);
  emc_store_destroy(NULL);
}
END_TEST

START_TEST(create_bad_args) {
  char name256[257];
  emc_table_desc ok = {"x", EMC_TABLE_DENSE, 4, 2, EMC_DTYPE_F32, EMC_STATE_NONE}, bad;
  emc_store *s = OUT_SENTINEL;
  emc_table_desc *many;
  uint32_t i;
  memset(name256, 'a', 256);
  name256[256] = 0;
  ST_FRESH(emc_store_create(NULL, 1, &s), EMC_EINVAL);
  ST_FRESH(emc_store_create(&ok, 1, NULL), EMC_EINVAL);
  ST_FRESH(emc_store_create(&ok, 0, &s), EMC_EINVAL);
#define BAD(field, value)                                \
  do {                                                   \
    bad = ok;                                            \
    bad.field = value;                                   \
    ST_FRESH(emc_store_create(&bad, 1, &s), EMC_EINVAL); \
  } while (0)
  BAD(rows, 0);
  BAD(rows, EMC_MAX_ROWS + 1u);
  BAD(dim, 0);
  BAD(dim, EMC_MAX_DIM + 1u);
  BAD(kind, (emc_table_kind)2);
  BAD(dtype, (emc_dtype)2);
  BAD(name, name256);
#undef BAD
  ck_assert(s == OUT_SENTINEL);
  /* the bad table need not be the first */
  {
    emc_table_desc two[2] = {ok, ok};
    two[1].dim = 0;
    ST_FRESH(emc_store_create(two, 2, &s), EMC_EINVAL);
    REQUIRE(strstr(emc_last_error_detail(), "table 1") != NULL, "detail: %s",
                  emc_last_error_detail());
    ck_assert(s == OUT_SENTINEL);
  }
  /* EMC_MAX_TABLES tables work, one more does not */
  many = calloc(EMC_MAX_TABLES + 1u, sizeof *many);
  ck_assert(many != NULL);
  for (i = 0; i <= EMC_MAX_TABLES; i++) {
    many[i].kind = (i & 1) ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
    many[i].rows = 1 + i % 3;
    many[i].dim = 1;
    many[i].dtype = EMC_DTYPE_F16;
  }
  ST_FRESH(emc_store_create(many, EMC_MAX_TABLES + 1u, &s), EMC_EINVAL);
  ck_assert(s == OUT_SENTINEL);
  EMCT_OK(emc_store_create(many, EMC_MAX_TABLES, &s));
  ck_assert_uint_eq(emc_store_n_tables(s), EMC_MAX_TABLES);
  {
    emc_table_desc d;
    EMCT_OK(emc_store_table(s, EMC_MAX_TABLES - 1u, &d));
    ck_assert_str_eq(d.name, "t4095");
  }
  emc_store_destroy(s);
  free(many);
}
END_TEST

/* Dense and hashed tables, f32 and f16, odd row sizes: random batches with duplicates, the
 * store always equals the reference model. */
START_TEST(write_read_roundtrip) {
  emc_table_desc td[6] = {{"d32", EMC_TABLE_DENSE, 300, 5, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"d16", EMC_TABLE_DENSE, 257, 3, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"h32", EMC_TABLE_HASHED, 200, 1, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h16", EMC_TABLE_HASHED, 150, 9, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"d16x1", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"wide", EMC_TABLE_DENSE, 4, 4097, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  refstore ref;
  uint64_t rng = 0x57043 + (uint64_t)_i, ids[64], universe[6][120];
  unsigned char *rows = malloc(64 * 4097 * 4), *got = malloc(64 * 4097 * 4);
  uint32_t step, t, steps = (uint32_t)emct_scale(400, 4);
  ck_assert(rows && got);
  ref_init(&ref, td, 6);
  EMCT_OK(emc_store_create(td, 6, &s));
  for (t = 0; t < 6; t++) {
    uint32_t k;
    for (k = 0; k < 120; k++) universe[t][k] = k < 3 ? (uint64_t[]){0, ~0ull, 1ull << 63}[k] : rng_next(&rng);
  }
  for (step = 0; step < steps; step++) {
    size_t n = 1 + rng_below(&rng, 64), i, rb;
    t = (uint32_t)rng_below(&rng, 6);
    rb = row_bytes_of(&td[t]);
    for (i = 0; i < n; i++) {
      if (td[t].kind == EMC_TABLE_DENSE) ids[i] = rng_below(&rng, td[t].rows);
      else ids[i] = universe[t][rng_below(&rng, 120)];
      if (i > 0 && rng_below(&rng, 4) == 0) ids[i] = ids[rng_below(&rng, i)]; /* duplicate */
    }
    if (rng_below(&rng, 3) == 0) {
      /* read: present rows from the reference, absent hashed ids zero */
      EMCT_OK(emc_store_read(s, t, ids, n, got));
      for (i = 0; i < n; i++) {
        int64_t k = ref_find(&ref, t, ids[i]);
        unsigned char *g = got + i * rb;
        if (k >= 0) {
          REQUIRE(memcmp(g, ref.rows[t] + (size_t)k * rb, rb) == 0,
                        "step %u table %u id %llx: row differs", step, t, (unsigned long long)ids[i]);
        } else {
          size_t j;
          for (j = 0; j < rb; j++) REQUIRE(g[j] == 0, "absent id %llx not zero", (unsigned long long)ids[i]);
        }
      }
    } else {
      emc_status st;
      uint64_t before = 0, fresh = 0;
      fill_rows(rows, n, &td[t], t, step * 100u, ids);
      if (td[t].kind == EMC_TABLE_HASHED) {
        /* distinct new ids of the batch */
        for (i = 0; i < n; i++) {
          size_t j;
          int dup = 0;
          if (ref_find(&ref, t, ids[i]) >= 0) continue;
          for (j = 0; j < i; j++) dup |= ids[j] == ids[i];
          fresh += !dup;
        }
      }
      EMCT_OK(emc_store_table_count(s, t, &before));
      st = emc_store_write(s, t, ids, n, rows);
      if (td[t].kind == EMC_TABLE_HASHED && fresh > td[t].rows - ref.count[t]) {
        REQUIRE(st == EMC_ERANGE, "over capacity: %s", emc_status_name(st));
      } else {
        REQUIRE(st == EMC_OK, "write: %s (%s)", emc_status_name(st), emc_last_error_detail());
        ref_write(&ref, t, ids, n, rows);
      }
    }
  }
  ref_check(&ref, s, "after random steps");
  emc_store_destroy(s);
  ref_free(&ref);
  free(rows);
  free(got);
}
END_TEST

/* Within one write call the last of duplicate ids wins; a hashed duplicate takes one row. */
START_TEST(write_duplicates_last_wins) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 10, 2, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 2, 2, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  uint64_t ids[5] = {3, 7, 3, 3, 7}, hids[5] = {42, 42, ~0ull, 42, ~0ull}, cnt;
  float rows[10] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, got[4];
  EMCT_OK(emc_store_create(td, 2, &s));
  EMCT_OK(emc_store_write(s, 0, ids, 5, rows));
  EMCT_OK(emc_store_read(s, 0, (uint64_t[]){3, 7}, 2, got));
  ck_assert(got[0] == 4 && got[1] == 4 && got[2] == 5 && got[3] == 5);
  /* two distinct ids in five positions fit a capacity of 2 */
  EMCT_OK(emc_store_write(s, 1, hids, 5, rows));
  EMCT_OK(emc_store_table_count(s, 1, &cnt));
  ck_assert_uint_eq(cnt, 2);
  EMCT_OK(emc_store_read(s, 1, (uint64_t[]){42, ~0ull}, 2, got));
  ck_assert(got[0] == 4 && got[1] == 4 && got[2] == 5 && got[3] == 5);
  emc_store_destroy(s);
}
END_TEST

/* A hashed table at capacity: new ids give EMC_ERANGE and write nothing (not even the rows of
 * ids already present in the same call); present ids can still be rewritten. */
START_TEST(hashed_capacity_exhaustion) {
  emc_table_desc td[2] = {{"h", EMC_TABLE_HASHED, 8, 3, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"d", EMC_TABLE_DENSE, 4, 3, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s;
  char dir[4096];
  uint64_t ids[12], cnt;
  uint16_t rows[12 * 3];
  unsigned char *img;
  size_t nimg;
  uint32_t i;
  emct_tmpdir(dir, sizeof dir);
  EMCT_OK(emc_store_create(td, 2, &s));
  for (i = 0; i < 12; i++) ids[i] = 1000 + i * 7919u;
  fill_rows(rows, 5, &td[0], 0, 1, ids);
  EMCT_OK(emc_store_write(s, 0, ids, 5, rows));
  /* 4 new distinct ids for 3 free rows (plus present ids and duplicates): refused */
  {
    uint64_t b[7] = {ids[0], ids[5], ids[6], ids[5], ids[7], ids[8], ids[1]};
    fill_rows(rows, 7, &td[0], 0, 50, b);
    img = snap(s, dir, &nimg);
    ST_FRESH(emc_store_write(s, 0, b, 7, rows), EMC_ERANGE);
    check_same_snap(s, dir, img, nimg, "over-capacity write");
    EMCT_OK(emc_store_table_count(s, 0, &cnt));
    ck_assert_uint_eq(cnt, 5);
    free(img);
  }
  /* exactly 3 new distinct ids (with duplicates and present ids): accepted, table full */
  {
    uint64_t b[6] = {ids[5], ids[0], ids[6], ids[5], ids[7], ids[7]};
    fill_rows(rows, 6, &td[0], 0, 60, b);
    EMCT_OK(emc_store_write(s, 0, b, 6, rows));
    EMCT_OK(emc_store_table_count(s, 0, &cnt));
    ck_assert_uint_eq(cnt, 8);
  }
  /* full: one new id among present ones is refused, nothing changes */
  img = snap(s, dir, &nimg);
  {
    uint64_t b[3] = {ids[0], ids[9], ids[1]};
    fill_rows(rows, 3, &td[0], 0, 70, b);
    ST_FRESH(emc_store_write(s, 0, b, 3, rows), EMC_ERANGE);
    ST_FRESH(emc_store_write(s, 0, &ids[11], 1, rows), EMC_ERANGE);
    check_same_snap(s, dir, img, nimg, "write to a full table");
    /* a new id still reads as zero */
    {
      uint16_t z[3] = {9, 9, 9};
      EMCT_OK(emc_store_read(s, 0, &ids[9], 1, z));
      ck_assert(z[0] == 0 && z[1] == 0 && z[2] == 0);
    }
  }
  free(img);
  /* present ids can be rewritten when full */
  {
    uint64_t b[2] = {ids[7], ids[2]};
    uint16_t got[6];
    fill_rows(rows, 2, &td[0], 0, 80, b);
    EMCT_OK(emc_store_write(s, 0, b, 2, rows));
    EMCT_OK(emc_store_read(s, 0, b, 2, got));
    ck_assert(memcmp(got, rows, sizeof got) == 0);
    EMCT_OK(emc_store_table_count(s, 0, &cnt));
    ck_assert_uint_eq(cnt, 8);
  }
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* emc_store_fill_uniform writes emc_uniform_row for every dense id and every present hashed id;
 * deterministic in the seed; absent hashed ids stay absent (zero). */
START_TEST(fill_uniform_matches_uniform_row) {
  emc_table_desc td[4] = {{"d32", EMC_TABLE_DENSE, 500, 7, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"d16", EMC_TABLE_DENSE, 333, 5, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"h32", EMC_TABLE_HASHED, 100, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h16", EMC_TABLE_HASHED, 100, 3, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *a, *b;
  char dir[4096];
  unsigned char *ia, *ib, row[64], want[64];
  size_t na, nb;
  uint64_t hid[60], seed = 0x5eedull, cnt;
  uint32_t t, i;
  emct_tmpdir(dir, sizeof dir);
  EMCT_OK(emc_store_create(td, 4, &a));
  EMCT_OK(emc_store_create(td, 4, &b));
  for (i = 0; i < 60; i++) hid[i] = emc__fmix64(i + 1);
  for (t = 2; t < 4; t++) {
    unsigned char *z = calloc(60, row_bytes_of(&td[t]));
    EMCT_OK(emc_store_write(a, t, hid, 60, z));
    EMCT_OK(emc_store_write(b, t, hid, 60, z));
    free(z);
  }
  for (t = 0; t < 4; t++) {
    EMCT_OK(emc_store_fill_uniform(a, t, -0.5f, 2.0f, seed));
    EMCT_OK(emc_store_fill_uniform(b, t, -0.5f, 2.0f, seed));
  }
  for (t = 0; t < 4; t++) {
    size_t rb = row_bytes_of(&td[t]);
    uint64_t n = td[t].kind == EMC_TABLE_DENSE ? td[t].rows : 60, k;
    for (k = 0; k < n; k++) {
      uint64_t id = td[t].kind == EMC_TABLE_DENSE ? k : hid[k];
      EMCT_OK(emc_store_read(a, t, &id, 1, row));
      EMCT_OK(emc_uniform_row(seed, t, id, -0.5f, 2.0f, td[t].dim, td[t].dtype, want));
      REQUIRE(memcmp(row, want, rb) == 0, "table %u id %llx: fill != emc_uniform_row", t,
                    (unsigned long long)id);
    }
    if (td[t].kind == EMC_TABLE_HASHED) {
      uint64_t absent = 12345;
      memset(row, 0x33, rb);
      EMCT_OK(emc_store_read(a, t, &absent, 1, row));
      for (i = 0; i < rb; i++) ck_assert_uint_eq(row[i], 0);
      EMCT_OK(emc_store_table_count(a, t, &cnt));
      ck_assert_uint_eq(cnt, 60);
    }
  }
  /* same seed -> same bytes */
  ia = snap(a, dir, &na);
  ib = snap(b, dir, &nb);
  REQUIRE(na == nb && memcmp(ia, ib, na) == 0, "same seed gave different stores");
  free(ib);
  /* different seed -> every table changes; refilling with the first seed restores it */
  for (t = 0; t < 4; t++) EMCT_OK(emc_store_fill_uniform(b, t, -0.5f, 2.0f, seed + 1));
  for (t = 0; t < 4; t++) {
    uint64_t id = td[t].kind == EMC_TABLE_DENSE ? 3 : hid[3];
    unsigned char ra[64], rbuf[64];
    EMCT_OK(emc_store_read(a, t, &id, 1, ra));
    EMCT_OK(emc_store_read(b, t, &id, 1, rbuf));
    REQUIRE(memcmp(ra, rbuf, row_bytes_of(&td[t])) != 0, "table %u: seed did not matter", t);
  }
  for (t = 0; t < 4; t++) EMCT_OK(emc_store_fill_uniform(b, t, -0.5f, 2.0f, seed));
  ib = snap(b, dir, &nb);
  REQUIRE(na == nb && memcmp(ia, ib, na) == 0, "refill with the same seed differs");
  free(ia);
  free(ib);
  emc_store_destroy(a);
  emc_store_destroy(b);
  emct_rmdir(dir);
}
END_TEST

/* emc_uniform_row: f32 elements in [lo, hi) (all lo when lo == hi), about half of them in the
 * upper half of the range (bounds whose difference overflows f32 too: every element was lo),
 * f16 rows are the f32 rows rounded to nearest even (checked against an independent
 * rounding), pure in its arguments. */
START_TEST(uniform_row_values) {
  static const float bounds[][2] = {{-1, 1},          {0, 1},         {-1e5f, 1e5f},
                                    {-1e-6f, 1e-6f},  {65000, 66000}, {3, 3},
                                    {-2.5f, -2.5f},   {1e-9f, 2e-9f}, {-3e38f, 3e38f},
                                    {-FLT_MAX, FLT_MAX}, {-2e38f, 3e38f}, {-FLT_MAX, 0}};
  enum { DIM = 97 };
  float f[DIM], f2[DIM];
  uint16_t h[DIM];
  size_t bi;
  uint64_t id, n_ids = emct_scale(400, 4);
  for (bi = 0; bi < sizeof bounds / sizeof *bounds; bi++) {
    float lo = bounds[bi][0], hi = bounds[bi][1];
    double mid = ((double)lo + (double)hi) / 2, upper = 0;
    for (id = 0; id < n_ids; id++) {
      uint32_t j, table = (uint32_t)(id % 5);
      EMCT_OK(emc_uniform_row(77, table, id * 0x9E37ull, lo, hi, DIM, EMC_DTYPE_F32, f));
      EMCT_OK(emc_uniform_row(77, table, id * 0x9E37ull, lo, hi, DIM, EMC_DTYPE_F16, h));
      EMCT_OK(emc_uniform_row(77, table, id * 0x9E37ull, lo, hi, DIM, EMC_DTYPE_F32, f2));
      REQUIRE(memcmp(f, f2, sizeof f) == 0, "not a pure function");
      for (j = 0; j < DIM; j++) {
        double want = ref_f16(f[j]), got = dec_f16(h[j]);
        if (lo < hi)
          REQUIRE(f[j] >= lo && f[j] < hi, "[%g, %g): element %g", (double)lo, (double)hi,
                        (double)f[j]);
        else
          REQUIRE(f[j] == lo, "lo == hi == %g: element %g", (double)lo, (double)f[j]);
        upper += (double)f[j] >= mid;
        REQUIRE(got == want && signbit(got) == signbit(want),
                      "f16 of %.9g is %04x (%.9g), nearest even is %.9g", (double)f[j], h[j],
                      got, want);
      }
    }
    upper /= (double)(n_ids * DIM); /* >= 388 elements: 0.5 +- 0.1 is over 4 deviations */
    if (lo < hi)
      REQUIRE(upper > 0.4 && upper < 0.6, "[%g, %g): %.3f of the elements in the upper half",
              (double)lo, (double)hi, upper);
  }
  /* a different seed, table or id changes the row */
  {
    float g[DIM];
    EMCT_OK(emc_uniform_row(1, 0, 5, -1, 1, DIM, EMC_DTYPE_F32, f));
    EMCT_OK(emc_uniform_row(2, 0, 5, -1, 1, DIM, EMC_DTYPE_F32, g));
    ck_assert(memcmp(f, g, sizeof f) != 0);
    EMCT_OK(emc_uniform_row(1, 1, 5, -1, 1, DIM, EMC_DTYPE_F32, g));
    ck_assert(memcmp(f, g, sizeof f) != 0);
    EMCT_OK(emc_uniform_row(1, 0, 6, -1, 1, DIM, EMC_DTYPE_F32, g));
    ck_assert(memcmp(f, g, sizeof f) != 0);
  }
  /* errors: out untouched */
  {
    float o[4] = {7, 7, 7, 7};
    ST_FRESH(emc_uniform_row(1, 0, 0, -1, 1, 4, EMC_DTYPE_F32, NULL), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, -1, 1, 0, EMC_DTYPE_F32, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, -1, 1, 4, (emc_dtype)2, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, 1, -1, 4, EMC_DTYPE_F32, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, NAN, 1, 4, EMC_DTYPE_F32, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, -1, NAN, 4, EMC_DTYPE_F32, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, -INFINITY, 1, 4, EMC_DTYPE_F32, o), EMC_EINVAL);
    ST_FRESH(emc_uniform_row(1, 0, 0, -1, INFINITY, 4, EMC_DTYPE_F32, o), EMC_EINVAL);
    ck_assert(o[0] == 7 && o[1] == 7 && o[2] == 7 && o[3] == 7);
  }
}
END_TEST

/* Every failing store call: the documented status, a fresh detail, outputs untouched, the
 * store unchanged. Also the n == 0 no-ops. */
START_TEST(bad_args_leave_store_unchanged) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 10, 3, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 5, 2, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s;
  char dir[4096];
  unsigned char *img, buf[256];
  size_t nimg;
  uint64_t ids[4] = {1, 2, 9, 0}, big[3] = {0, 10, 2}, cnt = 77;
  float rows[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  emc_table_desc d = {"zz", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F32, EMC_STATE_NONE};
  uint32_t t;
  emct_tmpdir(dir, sizeof dir);
  EMCT_OK(emc_store_create(td, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1, 1, 3));
  EMCT_OK(emc_store_write(s, 1, ids, 2, rows));
  img = snap(s, dir, &nimg);

  /* write */
  ST_FRESH(emc_store_write(NULL, 0, ids, 1, rows), EMC_EINVAL);
  ST_FRESH(emc_store_write(s, 2, ids, 1, rows), EMC_ERANGE);
  ST_FRESH(emc_store_write(s, UINT32_MAX, ids, 1, rows), EMC_ERANGE);
  ST_FRESH(emc_store_write(s, 0, NULL, 1, rows), EMC_EINVAL);
  ST_FRESH(emc_store_write(s, 0, ids, 1, NULL), EMC_EINVAL);
  ST_FRESH(emc_store_write(s, 0, big, 3, rows), EMC_ERANGE); /* ids[0] valid, ids[1] not */
  REQUIRE(strstr(emc_last_error_detail(), "'d'") != NULL, "detail: %s", emc_last_error_detail());
  {
    uint64_t huge = ~0ull;
    ST_FRESH(emc_store_write(s, 0, &huge, 1, rows), EMC_ERANGE);
  }
  EMCT_OK(emc_store_write(s, 0, NULL, 0, NULL)); /* n == 0: no-op */
  EMCT_OK(emc_store_write(s, 1, NULL, 0, NULL));
  EMCT_OK(emc_store_write(s, 0, ids, 0, rows));
  check_same_snap(s, dir, img, nimg, "failed writes");

  /* read: rows untouched on failure */
  memset(buf, 0xcd, sizeof buf);
  ST_FRESH(emc_store_read(NULL, 0, ids, 1, buf), EMC_EINVAL);
  ST_FRESH(emc_store_read(s, 2, ids, 1, buf), EMC_ERANGE);
  ST_FRESH(emc_store_read(s, 0, NULL, 1, buf), EMC_EINVAL);
  ST_FRESH(emc_store_read(s, 0, ids, 1, NULL), EMC_EINVAL);
  ST_FRESH(emc_store_read(s, 0, big, 3, buf), EMC_ERANGE);
  EMCT_OK(emc_store_read(s, 0, NULL, 0, NULL));
  EMCT_OK(emc_store_read(s, 1, NULL, 0, NULL));
  {
    size_t i;
    for (i = 0; i < sizeof buf; i++) REQUIRE(buf[i] == 0xcd, "read wrote byte %zu on failure", i);
  }

  /* fill_uniform */
  ST_FRESH(emc_store_fill_uniform(NULL, 0, -1, 1, 1), EMC_EINVAL);
  ST_FRESH(emc_store_fill_uniform(s, 2, -1, 1, 1), EMC_ERANGE);
  ST_FRESH(emc_store_fill_uniform(s, 0, 1, -1, 1), EMC_EINVAL);
  ST_FRESH(emc_store_fill_uniform(s, 0, NAN, 1, 1), EMC_EINVAL);
  ST_FRESH(emc_store_fill_uniform(s, 1, -1, INFINITY, 1), EMC_EINVAL);

  /* descriptors and counts: outputs untouched */
  d.rows = 4242;
  ST_FRESH(emc_store_table(s, 2, &d), EMC_ERANGE);
  ST_FRESH(emc_store_table(NULL, 0, &d), EMC_EINVAL);
  ST_FRESH(emc_store_table(s, 0, NULL), EMC_EINVAL);
  ck_assert(d.rows == 4242 && strcmp(d.name, "zz") == 0);
  ST_FRESH(emc_store_table_count(s, 2, &cnt), EMC_ERANGE);
  ST_FRESH(emc_store_table_count(NULL, 0, &cnt), EMC_EINVAL);
  ST_FRESH(emc_store_table_count(s, 0, NULL), EMC_EINVAL);
  ck_assert_uint_eq(cnt, 77);

  /* save/open argument errors */
  {
    emc_store *o = OUT_SENTINEL;
    ST_FRESH(emc_store_save(NULL, "x.emc"), EMC_EINVAL);
    ST_FRESH(emc_store_save(s, NULL), EMC_EINVAL);
    ST_FRESH(emc_store_open(NULL, &o), EMC_EINVAL);
    ST_FRESH(emc_store_open("x.emc", NULL), EMC_EINVAL);
    ck_assert(o == OUT_SENTINEL);
  }
  check_same_snap(s, dir, img, nimg, "failed calls");
  for (t = 0; t < 2; t++) {
    EMCT_OK(emc_store_table_count(s, t, &cnt));
    ck_assert_uint_eq(cnt, t == 0 ? 10 : 2);
  }
  free(img);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST

/* While a cache is attached, direct writes and fills are refused and change nothing; the
 * store cannot be destroyed (refused with a detail; it stays usable). */
START_TEST(attached_cache_refuses_writes) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 10, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 5, 4, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  emc_cache *c;
  emc_cache_config cfg;
  char dir[4096];
  unsigned char *img;
  size_t nimg;
  uint64_t id = 3;
  float row[4] = {1, 2, 3, 4}, got[4];
  emct_tmpdir(dir, sizeof dir);
  EMCT_OK(emc_store_create(td, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1, 1, 8));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1 << 16;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  img = snap(s, dir, &nimg);
  ST_FRESH(emc_store_write(s, 0, &id, 1, row), EMC_EUNSUPPORTED);
  ST_FRESH(emc_store_write(s, 1, &id, 1, row), EMC_EUNSUPPORTED);
  ST_FRESH(emc_store_fill_uniform(s, 0, -1, 1, 9), EMC_EUNSUPPORTED);
  prime_detail();
  emc_store_destroy(s); /* refused */
  REQUIRE(strcmp(emc_last_error_detail(), primed) != 0, "refused destroy left no detail");
  EMCT_OK(emc_store_read(s, 0, &id, 1, got));
  check_same_snap(s, dir, img, nimg, "writes while attached");
  EMCT_OK(emc_cache_destroy(c));
  EMCT_OK(emc_store_write(s, 0, &id, 1, row));
  EMCT_OK(emc_store_read(s, 0, &id, 1, got));
  ck_assert(memcmp(got, row, sizeof row) == 0);
  free(img);
  emc_store_destroy(s);
  emct_rmdir(dir);
}
END_TEST


int main(void) {
  Suite *s = suite_create("store");
  TCase *tc = tcase_create("store");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, create_and_describe);
  tcase_add_test(tc, create_bad_args);
  tcase_add_loop_test(tc, write_read_roundtrip, 0, 3);
  tcase_add_test(tc, write_duplicates_last_wins);
  tcase_add_test(tc, hashed_capacity_exhaustion);
  tcase_add_test(tc, fill_uniform_matches_uniform_row);
  tcase_add_test(tc, uniform_row_values);
  tcase_add_test(tc, bad_args_leave_store_unchanged);
  tcase_add_test(tc, attached_cache_refuses_writes);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
