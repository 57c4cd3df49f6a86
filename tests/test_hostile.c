/*
 * test_hostile: the public API as a hostile caller uses it, against the header's contract.
 *
 *   header_documents_every_call   the parser of contract.h finds every emc_status function of
 *                                 embcache.h, each with its "Errors:" list (guards the parser)
 *   capacity_near_size_max        issue 12 defect 4: capacities whose page count wrapped
 *   offsets_declaring_huge_batches  issue 12 defect 5: offsets declaring 2^59 .. 2^63 ids
 *   store_buffers_overflow        n ids / rows whose byte size overflows size_t
 *   hostile_arguments             NULLs, out-of-range tables and ids, bad offsets, bad configs,
 *                                 bad paths and files, calls in the wrong state: each returns
 *                                 its expected status, leaves its outputs untouched, and every
 *                                 status observed is listed at the call's declaration
 *
 * Hashed tables with 2-byte rows are used for the huge batches: validation then reads no id,
 * so a library that fails before touching the (tiny) ids array is exactly what is tested.
 * Allocations of 2^62 bytes must fail with NULL, not abort, under the sanitizers too.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "contract.h"

#if defined(EMCT_ASAN)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#if defined(EMCT_TSAN)
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

#define REQUIRE(cond, ...) ck_assert_msg((cond), __VA_ARGS__)

/* A recorded call that must return `want`, with a non-empty detail when it fails. */
#define EXPECT(want, fn, ...)                                                               \
  do {                                                                                      \
    emc_status st_ = EMCT_CALL(fn, __VA_ARGS__);                                            \
    ck_assert_msg(st_ == (want), "line %d: %s(%s) returned %s, expected %s (%s)", __LINE__, \
                  #fn, #__VA_ARGS__, emc_status_name(st_), emc_status_name(want),           \
                  emc_last_error_detail());                                                 \
    if ((want) != EMC_OK)                                                                   \
      ck_assert_msg(emc_last_error_detail()[0] != '\0', "line %d: %s: empty detail",       \
                    __LINE__, #fn);                                                         \
  } while (0)

/* ------------------------------------------------------------------ the header */
START_TEST(header_documents_every_call) {
  static const char *const fns[] = {
      "emc_store_create", "emc_store_table", "emc_store_table_count", "emc_uniform_row",
      "emc_store_fill_uniform", "emc_store_write", "emc_store_read", "emc_store_save",
      "emc_store_open", "emc_cache_create", "emc_cache_destroy", "emc_batch_bytes",
      "emc_lookup", "emc_lookup_ex", "emc_insert", "emc_flush", "emc_get_stats",
      "emc_get_table_rows_cached", "emc_cache_global_key", "emc_device_count", "emc_prefetch",
      "emc_apply_gradients", "emc_dedup", "emc_store_read_state", "emc_store_create_shared",
      "emc_store_attach", "emc_store_open_shared", "emc_store_unlink", "emc_group_join",
      "emc_group_apply_gradients", "emc_group_leave"};
  /* the statuses issue 12 found returned but not documented */
  static const struct {
    const char *fn;
    emc_status st;
  } must[] = {{"emc_lookup", EMC_ENOMEM},      {"emc_lookup_ex", EMC_ENOMEM},
              {"emc_insert", EMC_ENOMEM},      {"emc_store_write", EMC_ENOMEM},
              {"emc_store_fill_uniform", EMC_ENOMEM}, {"emc_store_save", EMC_ENOMEM},
              {"emc_store_open", EMC_ENOMEM},  {"emc_cache_create", EMC_ENOMEM},
              {"emc_store_open", EMC_ECORRUPT}, {"emc_store_save", EMC_EIO},
              {"emc_store_attach", EMC_ECORRUPT}, {"emc_store_attach", EMC_EIO},
              {"emc_store_create_shared", EMC_EIO}, {"emc_store_open_shared", EMC_ECORRUPT},
              {"emc_cache_create", EMC_EUNSUPPORTED},
              {"emc_group_apply_gradients", EMC_ETIMEDOUT}, {"emc_group_join", EMC_ETIMEDOUT}};
  size_t i;
  int n = emct_contract_load();
  REQUIRE(n == (int)(sizeof fns / sizeof fns[0]), "embcache.h declares %d emc_status functions, "
          "this test knows %zu: add the new one here", n, sizeof fns / sizeof fns[0]);
  for (i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    unsigned m = emct_contract_documented(fns[i]);
    REQUIRE(m != 0, "%s: not found in embcache.h", fns[i]);
    REQUIRE(m & ~(1u << EMC_OK), "%s: its comment lists no error status", fns[i]);
  }
  for (i = 0; i < sizeof must / sizeof must[0]; i++)
    REQUIRE(emct_contract_documented(must[i].fn) >> must[i].st & 1u, "%s does not document %s",
            must[i].fn, emc_status_name(must[i].st));
}
END_TEST

/* ------------------------------------------------------------------ defect 4 */
/* capacity_bytes near SIZE_MAX: the page count (capacity + page_rows - 1) / page_rows wrapped
 * to a handful of pages and the cache was built with thresholds near 1.7e19. Each must now be
 * refused (EMC_EINVAL: more pages than the pool can index), and a thresholds product that
 * rounds to 2^64 (t1 = 1) must not reach an undefined float conversion (UBSan). */
START_TEST(capacity_near_size_max) {
  static const size_t caps[] = {SIZE_MAX,          SIZE_MAX - 1,        SIZE_MAX - 4095,
                                SIZE_MAX / 2 + 1,  (size_t)1 << 62,     (size_t)1 << 56,
                                ((size_t)1 << 50) + 3};
  static const float thr[][2] = {{0.95f, 0.80f}, {1.0f, 0.5f}, {1.0f, 0.999f}};
  emc_table_desc td = {"rows", EMC_TABLE_DENSE, 100, 16, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *s;
  size_t i, j;
  EMCT_OK(emc_store_create(&td, 1, &s));
  for (i = 0; i < sizeof caps / sizeof caps[0]; i++)
    for (j = 0; j < sizeof thr / sizeof thr[0]; j++) {
      emc_cache_config cfg;
      emc_cache *c = (emc_cache *)(uintptr_t)0x77;
      emc_status st;
      emct_cache_config_init(&cfg);
      cfg.backend = EMC_BACKEND_HOST;
      cfg.capacity_bytes = caps[i];
      cfg.evict_high = thr[j][0];
      cfg.evict_low = thr[j][1];
      st = EMCT_CALL(emc_cache_create, s, &cfg, &c);
      if (st == EMC_OK) {
        emc_stats stats;
        EMCT_OK(emc_get_stats(c, &stats));
        EMCT_OK(emc_cache_destroy(c));
        ck_abort_msg("capacity_bytes %zu (t1 %g): accepted, with %llu bytes of pages reserved "
                     "for a budget it cannot hold", caps[i], (double)thr[j][0],
                     (unsigned long long)stats.index_bytes);
      }
      REQUIRE(st == EMC_EINVAL || st == EMC_ENOMEM, "capacity_bytes %zu: %s (%s)", caps[i],
              emc_status_name(st), emc_last_error_detail());
      REQUIRE(c == (emc_cache *)(uintptr_t)0x77, "failed create wrote *out");
    }
  /* the store is not left attached */
  {
    uint64_t id = 1;
    unsigned char row[64] = {0};
    EMCT_OK(emc_store_write(s, 0, &id, 1, row));
  }
  emc_store_destroy(s);
  emct_contract_check(0);
}
END_TEST

/* ------------------------------------------------------------------ defect 5 */
/* Offsets declaring 2^59 .. 2^63 ids on a hashed table with 2-byte rows: the batch bytes fit
 * size_t, so validation passed, and the lookup's scratch size wrapped (a heap overflow). Each
 * call must return EMC_EINVAL (offsets no address space can back) or EMC_ENOMEM (scratch that
 * cannot be had) and write nothing. */
START_TEST(offsets_declaring_huge_batches) {
  static const uint64_t totals[] = {1ull << 59,         (1ull << 60) + 1, (1ull << 61) - 1,
                                    1ull << 61,         (1ull << 61) + 7, 1ull << 62,
                                    (1ull << 63) - 1,   1ull << 63,       UINT64_MAX / 2 + 3};
  emc_table_desc td[2] = {{"h2", EMC_TABLE_HASHED, 64, 1, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"h4", EMC_TABLE_HASHED, 64, 2, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s;
  emc_cache *c;
  emc_cache_config cfg;
  uint64_t ids[4] = {1, 2, 3, 4};
  unsigned char out[64], where[8];
  size_t i, k, b;
  EMCT_OK(emc_store_create(td, 2, &s));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1 << 16;
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  for (i = 0; i < sizeof totals / sizeof totals[0]; i++) {
    /* all in table 0, or split between both tables */
    for (k = 0; k < 2; k++) {
      uint64_t off[3] = {0, k ? totals[i] / 2 : totals[i], totals[i]};
      emc_status st;
      size_t bytes = 12345;
      emc_stats s0, s1;
      EMCT_OK(emc_get_stats(c, &s0));
      memset(out, 0xA5, sizeof out);
      memset(where, 0xA5, sizeof where);
      st = EMCT_CALL(emc_lookup, c, ids, off, out, NULL);
      REQUIRE(st == EMC_EINVAL || st == EMC_ENOMEM, "lookup of %llu ids: %s (%s)",
              (unsigned long long)totals[i], emc_status_name(st), emc_last_error_detail());
      st = EMCT_CALL(emc_lookup_ex, c, ids, off, out, where, NULL);
      REQUIRE(st == EMC_EINVAL || st == EMC_ENOMEM, "lookup_ex of %llu ids: %s (%s)",
              (unsigned long long)totals[i], emc_status_name(st), emc_last_error_detail());
      st = EMCT_CALL(emc_insert, c, ids, off, out, NULL);
      REQUIRE(st == EMC_EINVAL || st == EMC_ENOMEM, "insert of %llu ids: %s (%s)",
              (unsigned long long)totals[i], emc_status_name(st), emc_last_error_detail());
      for (b = 0; b < sizeof out; b++) REQUIRE(out[b] == 0xA5, "a failed call wrote out");
      for (b = 0; b < sizeof where; b++) REQUIRE(where[b] == 0xA5, "a failed call wrote where");
      EMCT_OK(emc_get_stats(c, &s1));
      REQUIRE(memcmp(&s0, &s1, sizeof s0) == 0, "a failed call changed the stats");
      /* batch bytes: refused exactly when the ids array could not exist */
      st = EMCT_CALL(emc_batch_bytes, s, off, &bytes);
      if (totals[i] > SIZE_MAX / 8) {
        REQUIRE(st == EMC_EINVAL, "batch_bytes of %llu ids: %s", (unsigned long long)totals[i],
                emc_status_name(st));
        REQUIRE(bytes == 12345, "failed batch_bytes wrote *out");
      }
    }
  }
  EMCT_OK(emc__cache_check(c));
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(s);
  emct_contract_check(0);
}
END_TEST

/* n ids or n rows whose byte size overflows size_t: EMC_EINVAL before any id is read (the
 * ids array here holds 2). */
START_TEST(store_buffers_overflow) {
  emc_table_desc td[2] = {{"d", EMC_TABLE_DENSE, 10, 4, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"h", EMC_TABLE_HASHED, 10, 1, EMC_DTYPE_F16, EMC_STATE_NONE}};
  /* every n overflows n * 8 (ids), or n * 16 (the dense table's rows) */
  static const size_t ns[] = {SIZE_MAX, SIZE_MAX / 2 + 1, SIZE_MAX / 8 + 1, SIZE_MAX / 16 + 1};
  emc_store *s;
  uint64_t ids[2] = {1, 2}, count;
  unsigned char rows[64];
  uint32_t t;
  size_t i;
  EMCT_OK(emc_store_create(td, 2, &s));
  for (t = 0; t < 2; t++)
    for (i = 0; i < sizeof ns / sizeof ns[0]; i++) {
      emc_status st;
      if (t == 1 && ns[i] <= SIZE_MAX / 8) continue; /* 2-byte rows: this n would be valid */
      memset(rows, 0xA5, sizeof rows);
      st = EMCT_CALL(emc_store_read, s, t, ids, ns[i], rows);
      REQUIRE(st == EMC_EINVAL, "table %u: read n = %zu: %s", t, ns[i], emc_status_name(st));
      for (count = 0; count < sizeof rows; count++) REQUIRE(rows[count] == 0xA5, "read wrote rows");
      st = EMCT_CALL(emc_store_write, s, t, ids, ns[i], rows);
      REQUIRE(st == EMC_EINVAL, "table %u: write n = %zu: %s", t, ns[i], emc_status_name(st));
    }
  EMCT_OK(emc_store_table_count(s, 1, &count));
  ck_assert_uint_eq(count, 0);
  emc_store_destroy(s);
  emct_contract_check(0);
}
END_TEST

/* ------------------------------------------------------------------ everything else */
START_TEST(hostile_arguments) {
  emc_table_desc td[2] = {{"dense", EMC_TABLE_DENSE, 8, 3, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"hashed", EMC_TABLE_HASHED, 2, 2, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_table_desc bad;
  char longname[300], dir[4096], p[4300];
  emc_store *s, *o = (emc_store *)(uintptr_t)0x99;
  emc_cache *c, *c2 = (emc_cache *)(uintptr_t)0x99;
  emc_cache_config cfg;
  emc_table_desc d;
  emc_stats stats;
  uint64_t ids[4] = {0, 1, 2, 3}, off[3] = {0, 1, 2}, x = 77, key, code;
  uint32_t bits;
  size_t bytes;
  unsigned char out[256], row[64] = {0};
  float nan = (float)NAN, inf = (float)INFINITY;

  emct_tmpdir(dir, sizeof dir);
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  /* store creation */
  EXPECT(EMC_EINVAL, emc_store_create, NULL, 1, &o);
  EXPECT(EMC_EINVAL, emc_store_create, td, 0, &o);
  EXPECT(EMC_EINVAL, emc_store_create, td, EMC_MAX_TABLES + 1, &o);
  EXPECT(EMC_EINVAL, emc_store_create, td, 2, NULL);
  {
    int k;
    for (k = 0; k < 8; k++) {
      bad = td[0];
      switch (k) {
        case 0: bad.rows = 0; break;
        case 1: bad.rows = EMC_MAX_ROWS + 1; break;
        case 2: bad.dim = 0; break;
        case 3: bad.dim = EMC_MAX_DIM + 1; break;
        case 4: bad.kind = (emc_table_kind)7; break;
        case 5: bad.dtype = (emc_dtype)9; break;
        case 6: bad.name = longname; break;
        default: bad.rows = UINT64_MAX; break;
      }
      EXPECT(EMC_EINVAL, emc_store_create, &bad, 1, &o);
    }
  }
  REQUIRE(o == (emc_store *)(uintptr_t)0x99, "failed store create wrote *out");
  EMCT_OK(EMCT_CALL(emc_store_create, td, 2, &s));
  /* store queries and rows */
  EXPECT(EMC_EINVAL, emc_store_table, NULL, 0, &d);
  EXPECT(EMC_EINVAL, emc_store_table, s, 0, NULL);
  EXPECT(EMC_ERANGE, emc_store_table, s, 2, &d);
  EXPECT(EMC_ERANGE, emc_store_table, s, UINT32_MAX, &d);
  EXPECT(EMC_EINVAL, emc_store_table_count, NULL, 0, &x);
  EXPECT(EMC_EINVAL, emc_store_table_count, s, 0, NULL);
  EXPECT(EMC_ERANGE, emc_store_table_count, s, 9, &x);
  ck_assert_uint_eq(x, 77);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, -1.0f, 1.0f, 3, EMC_DTYPE_F32, NULL);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, -1.0f, 1.0f, 0, EMC_DTYPE_F32, out);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, -1.0f, 1.0f, EMC_MAX_DIM + 1, EMC_DTYPE_F32, out);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, -1.0f, 1.0f, 3, (emc_dtype)5, out);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, 1.0f, -1.0f, 3, EMC_DTYPE_F32, out);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, nan, 1.0f, 3, EMC_DTYPE_F32, out);
  EXPECT(EMC_EINVAL, emc_uniform_row, 1, 0, 0, -inf, inf, 3, EMC_DTYPE_F32, out);
  EXPECT(EMC_EINVAL, emc_store_fill_uniform, NULL, 0, -1.0f, 1.0f, 1);
  EXPECT(EMC_ERANGE, emc_store_fill_uniform, s, 2, -1.0f, 1.0f, 1);
  EXPECT(EMC_EINVAL, emc_store_fill_uniform, s, 0, nan, 1.0f, 1);
  EXPECT(EMC_EINVAL, emc_store_write, NULL, 0, ids, 1, row);
  EXPECT(EMC_ERANGE, emc_store_write, s, 2, ids, 1, row);
  EXPECT(EMC_EINVAL, emc_store_write, s, 0, NULL, 1, row);
  EXPECT(EMC_EINVAL, emc_store_write, s, 0, ids, 1, NULL);
  ids[3] = 8;
  EXPECT(EMC_ERANGE, emc_store_write, s, 0, ids, 4, out); /* dense id == rows */
  ids[3] = 3;
  EXPECT(EMC_ERANGE, emc_store_write, s, 1, ids, 3, out); /* 3 new ids, capacity 2 */
  EXPECT(EMC_OK, emc_store_write, s, 1, ids, 2, out);
  EXPECT(EMC_ERANGE, emc_store_write, s, 1, ids + 2, 1, out); /* full */
  EXPECT(EMC_EINVAL, emc_store_read, NULL, 0, ids, 1, out);
  EXPECT(EMC_ERANGE, emc_store_read, s, 5, ids, 1, out);
  EXPECT(EMC_EINVAL, emc_store_read, s, 0, NULL, 1, out);
  EXPECT(EMC_EINVAL, emc_store_read, s, 0, ids, 1, NULL);
  x = 1ull << 63;
  EXPECT(EMC_ERANGE, emc_store_read, s, 0, &x, 1, out);
  /* batch sizes */
  EXPECT(EMC_EINVAL, emc_batch_bytes, NULL, off, &bytes);
  EXPECT(EMC_EINVAL, emc_batch_bytes, s, NULL, &bytes);
  EXPECT(EMC_EINVAL, emc_batch_bytes, s, off, NULL);
  {
    uint64_t o1[3] = {1, 1, 2}, o2[3] = {0, 2, 1}, o3[3] = {0, UINT64_MAX / 8, UINT64_MAX / 4};
    EXPECT(EMC_EINVAL, emc_batch_bytes, s, o1, &bytes);
    EXPECT(EMC_EINVAL, emc_batch_bytes, s, o2, &bytes);
    EXPECT(EMC_EINVAL, emc_batch_bytes, s, o3, &bytes);
  }
  /* files */
  EXPECT(EMC_EINVAL, emc_store_save, NULL, "x.emc");
  EXPECT(EMC_EINVAL, emc_store_save, s, NULL);
  EXPECT(EMC_EIO, emc_store_save, s, "");
  snprintf(p, sizeof p, "%s/", dir);
  EXPECT(EMC_EIO, emc_store_save, s, p);
  EXPECT(EMC_EIO, emc_store_save, s, dir); /* an existing directory */
  snprintf(p, sizeof p, "%s/missing/x.emc", dir);
  EXPECT(EMC_EIO, emc_store_save, s, p);
  EXPECT(EMC_EINVAL, emc_store_open, NULL, &o);
  EXPECT(EMC_EINVAL, emc_store_open, "x.emc", NULL);
  EXPECT(EMC_EIO, emc_store_open, p, &o);
  EXPECT(EMC_EIO, emc_store_open, dir, &o);
  EXPECT(EMC_EIO, emc_store_open, "/dev/null", &o);
  EXPECT(EMC_EIO, emc_store_open, "", &o);
  snprintf(p, sizeof p, "%s/empty.emc", dir);
  emct_write_file(p, "", 0);
  EXPECT(EMC_ECORRUPT, emc_store_open, p, &o);
  emct_write_file(p, longname, sizeof longname);
  EXPECT(EMC_ECORRUPT, emc_store_open, p, &o);
  REQUIRE(o == (emc_store *)(uintptr_t)0x99, "failed open wrote *out");
  unlink(p);
  /* cache creation */
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1 << 16;
  EXPECT(EMC_EINVAL, emc_cache_create, NULL, &cfg, &c2);
  EXPECT(EMC_EINVAL, emc_cache_create, s, &cfg, NULL);
  {
    int k;
    for (k = 0; k < 13; k++) {
      emc_cache_config b = cfg;
      switch (k) {
        case 0: b.struct_size = 0; break;
        case 1: b.struct_size = sizeof b + 1; break;
        case 2: b.evict_high = b.evict_low = 0.5f; break;
        case 3: b.evict_high = nan; break;
        case 4: b.evict_high = 1.1f; break;
        case 5: b.evict_low = 0.0f; break;
        case 6: b.key_bits = 16; break;
        case 7: b.capacity_bytes = 0; break;
        case 8: b.capacity_bytes = 1; break;
        case 9: b.capacity_bytes = SIZE_MAX; break;
        case 10: b.unified_index_rows = (1ull << 32) + 1; break;
        case 11: b.backend = (emc_backend)9; break;
        default: b.evict_low = -inf; break;
      }
      EXPECT(EMC_EINVAL, emc_cache_create, s, &b, &c2);
    }
  }
  REQUIRE(c2 == (emc_cache *)(uintptr_t)0x99, "failed cache create wrote *out");
  {
    emc_cache_config b = cfg;
    emc_status st;
    b.backend = EMC_BACKEND_CUDA; /* no CUDA build, or no device: refused; a GPU: fine */
    st = EMCT_CALL(emc_cache_create, s, &b, &c2);
    if (st == EMC_OK) {
      EMCT_OK(emc_cache_destroy(c2));
      c2 = (emc_cache *)(uintptr_t)0x99;
    } else {
      REQUIRE(st == EMC_EUNSUPPORTED || st == EMC_ENODEV, "CUDA cache: %s", emc_status_name(st));
    }
  }
  EMCT_OK(EMCT_CALL(emc_cache_create, s, &cfg, &c));
  EXPECT(EMC_EUNSUPPORTED, emc_cache_create, s, &cfg, &c2);
  REQUIRE(c2 == (emc_cache *)(uintptr_t)0x99, "failed cache create wrote *out");
  /* the store while attached */
  EXPECT(EMC_EUNSUPPORTED, emc_store_write, s, 0, ids, 1, row);
  EXPECT(EMC_EUNSUPPORTED, emc_store_fill_uniform, s, 0, -1.0f, 1.0f, 3);
  emc_store_destroy(s); /* refused: the store stays */
  ck_assert_uint_eq(emc_store_n_tables(s), 2);
  /* batches */
  {
    uint64_t o1[3] = {1, 1, 2}, o2[3] = {0, 2, 1}, o3[3] = {0, 1, 1ull << 62};
    uint64_t bad_dense[2] = {8, 0}, full[2] = {5, 6}, oo[3] = {0, 1, 3};
    memset(out, 0xA5, sizeof out);
    EXPECT(EMC_EINVAL, emc_lookup, NULL, ids, off, out, NULL);
    EXPECT(EMC_EINVAL, emc_lookup, c, ids, NULL, out, NULL);
    EXPECT(EMC_EINVAL, emc_lookup, c, NULL, off, out, NULL);
    EXPECT(EMC_EINVAL, emc_lookup, c, ids, off, NULL, NULL);
    EXPECT(EMC_EINVAL, emc_lookup, c, ids, o1, out, NULL);
    EXPECT(EMC_EINVAL, emc_lookup_ex, c, ids, o2, out, NULL, NULL);
    EXPECT(EMC_ERANGE, emc_lookup_ex, c, bad_dense, off, out, (uint8_t *)out + 128, NULL);
    EXPECT(EMC_ERANGE, emc_lookup, c, bad_dense, off, out, NULL);
    {
      emc_status st = EMCT_CALL(emc_lookup, c, ids, o3, out, NULL); /* a dense id is read: 0 */
      REQUIRE(st == EMC_EINVAL || st == EMC_ENOMEM, "lookup of 2^62 ids: %s", emc_status_name(st));
    }
    for (bytes = 0; bytes < sizeof out; bytes++) REQUIRE(out[bytes] == 0xA5, "failed lookup wrote out");
    EXPECT(EMC_EINVAL, emc_insert, NULL, ids, off, out, NULL);
    EXPECT(EMC_EINVAL, emc_insert, c, ids, o1, out, NULL);
    EXPECT(EMC_EINVAL, emc_insert, c, ids, off, NULL, NULL);
    EXPECT(EMC_ERANGE, emc_insert, c, bad_dense, off, out, NULL);
    { /* the hashed table is full (ids 0, 1): two new ids do not fit */
      uint64_t in[3] = {0, full[0], full[1]};
      EXPECT(EMC_ERANGE, emc_insert, c, in, oo, out, NULL);
    }
    EXPECT(EMC_OK, emc_lookup, c, ids, off, out, NULL);
  }
  /* cache queries */
  EXPECT(EMC_EINVAL, emc_flush, NULL, NULL);
  EXPECT(EMC_EINVAL, emc_get_stats, NULL, &stats);
  EXPECT(EMC_EINVAL, emc_get_stats, c, NULL);
  EXPECT(EMC_EINVAL, emc_get_table_rows_cached, NULL, 0, &x);
  EXPECT(EMC_EINVAL, emc_get_table_rows_cached, c, 0, NULL);
  EXPECT(EMC_ERANGE, emc_get_table_rows_cached, c, 2, &x);
  EXPECT(EMC_EINVAL, emc_cache_global_key, NULL, 0, 0, &key, &code, &bits);
  EXPECT(EMC_ERANGE, emc_cache_global_key, c, 2, 0, &key, &code, &bits);
  EXPECT(EMC_ERANGE, emc_cache_global_key, c, 0, 8, &key, &code, &bits);
  EXPECT(EMC_OK, emc_cache_global_key, c, 1, UINT64_MAX, NULL, NULL, NULL);
  EXPECT(EMC_OK, emc_flush, c, NULL);
  EXPECT(EMC_OK, emc_cache_destroy, NULL);
  EXPECT(EMC_OK, emc_cache_destroy, c);
  emc_store_destroy(s);
  /* shared stores (tests/test_store_shared.c has the rest) */
  {
    char nm[64], gname[96];
    emc_group *gq = (emc_group *)(uintptr_t)0x99;
    snprintf(nm, sizeof nm, "/emct-hostile-%d", (int)getpid());
    EXPECT(EMC_EINVAL, emc_store_create_shared, NULL, td, 2, &o);
    EXPECT(EMC_EINVAL, emc_store_create_shared, "no-slash", td, 2, &o);
    EXPECT(EMC_EINVAL, emc_store_create_shared, longname, td, 2, &o);
    EXPECT(EMC_EINVAL, emc_store_create_shared, nm, NULL, 2, &o);
    EXPECT(EMC_EINVAL, emc_store_create_shared, nm, td, 0, &o);
    EXPECT(EMC_EINVAL, emc_store_create_shared, nm, td, 2, NULL);
    EXPECT(EMC_EIO, emc_store_attach, nm, &o);
    EXPECT(EMC_EINVAL, emc_store_attach, nm, NULL);
    EXPECT(EMC_EINVAL, emc_store_attach, "/a/b", &o);
    EXPECT(EMC_EIO, emc_store_unlink, nm);
    EXPECT(EMC_EINVAL, emc_store_unlink, NULL);
    EXPECT(EMC_EINVAL, emc_store_open_shared, NULL, nm, &o);
    EXPECT(EMC_EINVAL, emc_store_open_shared, dir, NULL, &o);
    EXPECT(EMC_EIO, emc_store_open_shared, dir, nm, &o);
    REQUIRE(o == (emc_store *)(uintptr_t)0x99, "a failed shared-store call wrote *out");
    EXPECT(EMC_OK, emc_store_create_shared, nm, td, 2, &s);
    EXPECT(EMC_EIO, emc_store_create_shared, nm, td, 2, &o);
    emct_cache_config_init(&cfg);
    cfg.capacity_bytes = 0; /* a bad config over a shared store: refused as for any store */
    EXPECT(EMC_EINVAL, emc_cache_create, s, &cfg, &c2);
    REQUIRE(c2 == (emc_cache *)(uintptr_t)0x99, "a refused cache_create wrote *out");
    x = 9; /* a dense id past the rows */
    EXPECT(EMC_ERANGE, emc_store_write, s, 0, &x, 1, row);
    /* training groups (tests/test_group.c has the rest) */
    EXPECT(EMC_EINVAL, emc_group_join, NULL, 0, 1, 10, &gq);
    EXPECT(EMC_EINVAL, emc_group_join, s, 0, 1, 10, NULL);
    EXPECT(EMC_EINVAL, emc_group_join, s, 1, 1, 10, &gq);
    EXPECT(EMC_EINVAL, emc_group_join, s, 0, 0, 10, &gq);
    EXPECT(EMC_EINVAL, emc_group_join, s, 0, 1, 0, &gq);
    REQUIRE(gq == (emc_group *)(uintptr_t)0x99, "a refused group_join wrote *out");
    EXPECT(EMC_EINVAL, emc_group_apply_gradients, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    EXPECT(EMC_OK, emc_group_leave, NULL);
    EXPECT(EMC_OK, emc_group_join, s, 0, 1, 10, &gq);
    EXPECT(EMC_EINVAL, emc_group_join, s, 0, 1, 10, &gq); /* rank 0 again */
    /* a bad batch of a group of one: its own reason */
    EXPECT(EMC_EINVAL, emc_group_apply_gradients, gq, NULL, NULL, NULL, NULL, NULL, NULL);
    EXPECT(EMC_OK, emc_group_leave, gq);
    snprintf(gname, sizeof gname, "%s.g0", nm);
    REQUIRE(shm_unlink(gname) != 0, "emc_group_leave left its staging memory '%s'", gname);
    emc_store_destroy(s);
    EXPECT(EMC_OK, emc_store_unlink, nm);
  }
  emct_rmdir(dir);
  emct_contract_check(1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hostile");
  TCase *tc = tcase_create("hostile");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, header_documents_every_call);
  tcase_add_test(tc, capacity_near_size_max);
  tcase_add_test(tc, offsets_declaring_huge_batches);
  tcase_add_test(tc, store_buffers_overflow);
  tcase_add_test(tc, hostile_arguments);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
