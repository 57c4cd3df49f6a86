/*
 * test_alloc: the big-allocation provider (lib/alloc.c behind emc__alloc*).
 *
 * CTest runs this suite twice (tests/CMakeLists.txt):
 *   test_alloc         as built: a C program linked with the library's link interface has
 *                      libjemalloc loaded at start-up, so emc_host_allocator() must say
 *                      "jemalloc" (ASan builds: "system", posix_memalign for ASan's bounds);
 *   test_alloc_system  with EMC_HOST_ALLOCATOR=system: the fallback Python gets (mmap with a
 *                      header page for big blocks, posix_memalign below) must say "system".
 * EMC_TEST_EXPECT_ALLOCATOR holds the expected prefix. Both runs check alignment, zeroing,
 * arenas and a store whose rows round-trip, on the provider in use.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

START_TEST(provider_is_the_expected_one) {
  const char *want = getenv("EMC_TEST_EXPECT_ALLOCATOR");
  const char *got = emc_host_allocator();
  ck_assert_ptr_nonnull(want);
  ck_assert_msg(strncmp(got, want, strlen(want)) == 0, "emc_host_allocator() = \"%s\", want \"%s...\"",
                got, want);
  ck_assert_str_eq(emc_host_allocator(), got); /* decided once */
}
END_TEST

/* Sizes on both sides of the mmap threshold (1 MiB) and of the huge-page hint (2 MiB). */
static const size_t sizes[] = {1, 24, 4096, 100000, (1u << 20) - 1, 1u << 20, (3u << 20) + 5};
static const size_t aligns[] = {1, 16, 64, 4096, 16384};

START_TEST(alignment_zeroing_and_reuse) {
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
      const size_t n = sizes[i], al = aligns[a] < 16 ? 16 : aligns[a];
      unsigned char *p = emc__alloc(n, aligns[a], 1);
      ck_assert_msg(p != NULL, "emc__alloc(%zu, %zu) failed", n, aligns[a]);
      ck_assert_msg(((uintptr_t)p & (al - 1)) == 0, "%p not aligned to %zu", (void *)p, al);
      for (size_t k = 0; k < n; k += 997) ck_assert_int_eq(p[k], 0);
      ck_assert_int_eq(p[n - 1], 0);
      memset(p, 0xa5, n); /* the whole block is writable */
      unsigned char *q = emc__alloc(n, aligns[a], 0);
      ck_assert_ptr_nonnull(q);
      ck_assert_ptr_ne(p, q);
      q[0] = q[n - 1] = 1;
      emc__free(p, n);
      emc__free(q, n);
    }
  }
  emc__free(NULL, 0);
}
END_TEST

START_TEST(arenas) {
  unsigned a = emc__arena_create(); /* 0 (the default arena) on the system provider */
  if (strncmp(emc_host_allocator(), "system", 6) == 0) ck_assert_uint_eq(a, 0);
  void *p = emc__alloc_in(a, 5u << 20, 64, 1), *q = emc__alloc_in(a, 100, 64, 0);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(q);
  ck_assert_int_eq(((unsigned char *)p)[(5u << 20) - 1], 0);
  emc__free(q, 100);
  emc__free(p, 5u << 20);
  emc__arena_destroy(a);
  emc__arena_destroy(0);
}
END_TEST

/* A store large enough that its tables come from the big-block path, written and read back. */
START_TEST(store_rows_round_trip) {
  emc_table_desc t[2] = {{"big", EMC_TABLE_DENSE, 20000, 64, EMC_DTYPE_F32, EMC_STATE_NONE},
                         {"hashed", EMC_TABLE_HASHED, 5000, 16, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *s = NULL;
  float row[64], got[64];
  uint64_t id = 19999;
  EMCT_OK(emc_store_create(t, 2, &s));
  for (int j = 0; j < 64; j++) row[j] = (float)j * 0.5f;
  EMCT_OK(emc_store_read(s, 0, &id, 1, got)); /* zero until written */
  for (int j = 0; j < 64; j++) ck_assert(got[j] == 0.0f);
  EMCT_OK(emc_store_write(s, 0, &id, 1, row));
  EMCT_OK(emc_store_read(s, 0, &id, 1, got));
  ck_assert_int_eq(memcmp(row, got, sizeof row), 0);
  emc_store_destroy(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc");
  TCase *tc = tcase_create("alloc");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, provider_is_the_expected_one);
  tcase_add_test(tc, alignment_zeroing_and_reuse);
  tcase_add_test(tc, arenas);
  tcase_add_test(tc, store_rows_round_trip);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
