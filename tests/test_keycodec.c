/*
 * test_keycodec: the Huffman global-key codec (lib/keycodec.c, lib/emc_item.h); its parts:
 * keycodec_common.h.
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

#include "keycodec_common.h"

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
  keycodec_api_tests(tc);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
