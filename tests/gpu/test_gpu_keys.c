/*
 * test_gpu_keys: the device computes global keys with the same per-item code as the host
 * (lib/emc_item.h); random batches over dense and hashed tables, 32- and 64-bit keys, must give
 * the same keys byte for byte. Exits 77 (CTest SKIP_RETURN_CODE) when no CUDA device answers.
 * Check runs NOFORK: CUDA does not survive fork.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "emc_cuda.h"
#include "internal.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) { return emc__splitmix64(&rng_state); }

static void run_scenario(uint32_t key_bits, uint32_t n_tables, uint64_t seed) {
  uint64_t *rows = calloc(n_tables, sizeof *rows), *offsets = calloc(n_tables + 1, sizeof *offsets);
  emc_table_kind *kinds = calloc(n_tables, sizeof *kinds);
  emc__codec codec;
  uint64_t total, *ids, *host_keys, *dev_keys, i;
  uint32_t t;
  char err[256] = "";
  for (t = 0; t < n_tables; t++) {
    rows[t] = 1 + rnd() % (key_bits == 32 ? 100000 : 100000000);
    kinds[t] = rnd() % 3 == 0 ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
    offsets[t + 1] = offsets[t] + rnd() % 5000;
  }
  ck_assert_int_eq(emc__codec_build(rows, kinds, n_tables, key_bits, seed, &codec), EMC_OK);
  total = offsets[n_tables];
  ids = malloc(total * sizeof *ids + 8);
  host_keys = malloc(total * sizeof *host_keys + 8);
  dev_keys = malloc(total * sizeof *dev_keys + 8);
  for (t = 0; t < n_tables; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++) {
      ids[i] = kinds[t] == EMC_TABLE_DENSE ? rnd() % rows[t] : rnd();
      host_keys[i] = emc__global_key(&codec.tables[t], ids[i], seed);
    }
  memset(dev_keys, 0xa5, total * sizeof *dev_keys);
  ck_assert_msg(emc__cuda_global_keys(codec.tables, n_tables, seed, ids, offsets, dev_keys, err,
                                      sizeof err),
                "device keys failed: %s", err);
  ck_assert_msg(memcmp(host_keys, dev_keys, total * sizeof *dev_keys) == 0,
                "device keys differ from host keys (key_bits %u, %u tables)", key_bits, n_tables);
  emc__codec_free(&codec);
  free(rows); free(offsets); free(kinds); free(ids); free(host_keys); free(dev_keys);
}

START_TEST(keys_match_host) {
  uint32_t r;
  for (r = 0; r < 20; r++) run_scenario(r % 2 ? 32 : 64, 1 + (uint32_t)(rnd() % 40), rnd());
}
END_TEST

int main(void) {
  int failed;
  Suite *s;
  SRunner *sr;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_keys")) return 77;
  s = suite_create("gpu_keys");
  tc = tcase_create("keys");
  tcase_add_test(tc, keys_match_host);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
