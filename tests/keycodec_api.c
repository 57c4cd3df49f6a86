/*
 * keycodec_api.c: test_keycodec through the public API (keycodec_common.h):
 * emc_cache_global_key against an independently built codec, and EMC_EKEYSPACE from
 * emc_cache_create naming the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keycodec_common.h"

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


void keycodec_api_tests(TCase *tc) {
  tcase_add_test(tc, public_global_key_agrees);
  tcase_add_test(tc, cache_create_keyspace);
  tcase_add_test(tc, cache_create_keyspace_real_store);
}
