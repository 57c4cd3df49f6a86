/*
 * test_gpu_keys: the device computes global keys with the same per-item code as the host
 * (lib/emc_item.h); random batches over dense and hashed tables, 32- and 64-bit keys, must give
 * the same keys byte for byte. The lookup kernel's cooperative probe (one coalesced bucket load
 * and a ballot per bucket) finds every key where the host's slot-by-slot probe does, on indexes
 * from nearly empty to full, with tombstones. Exits 77 (CTest SKIP_RETURN_CODE) when no CUDA device answers.
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

/* An index of n_buckets buckets filled to `fill` of its slots by the host's writer-side rule
 * (emc__index_free_slot), then about a quarter of its keys tombstoned; probed on the device for
 * every key put in (kept or tombstoned) and as many keys never put in. */
static void probe_scenario(uint32_t key_bits, uint64_t n_buckets, double fill) {
  const uint64_t slots = n_buckets * EMC__BUCKET, empty = emc__key_empty(key_bits),
                 tomb = emc__key_tomb(key_bits), mask = emc__key_mask(key_bits);
  emc__index_view ix;
  uint64_t i, n_in = 0, n_q, *put = malloc(slots * sizeof *put + 8), *q, hits = 0;
  int64_t *want, *got;
  char err[256] = "";
  memset(&ix, 0, sizeof ix);
  ix.key_bits = key_bits;
  ix.n_buckets = n_buckets;
  ix.keys = malloc(slots * (key_bits == 32 ? 4 : 8));
  ck_assert(put && ix.keys);
  for (i = 0; i < slots; i++) emc__ix_set_key(&ix, i, empty);
  while ((double)n_in < fill * (double)slots) {
    uint64_t key = rnd() & mask;
    int64_t pos;
    if (key == empty || key == tomb || emc__index_find(&ix, key) >= 0) continue;
    pos = emc__index_free_slot(&ix, key);
    ck_assert_int_ge(pos, 0);
    emc__ix_set_key(&ix, (uint64_t)pos, key);
    put[n_in++] = key;
  }
  for (i = 0; i < n_in; i++)
    if (rnd() % 4 == 0) {
      int64_t pos = emc__index_find(&ix, put[i]);
      ck_assert_int_ge(pos, 0);
      emc__ix_set_key(&ix, (uint64_t)pos, tomb);
    }
  n_q = 2 * n_in + 1;
  q = malloc(n_q * sizeof *q);
  want = malloc(n_q * sizeof *want);
  got = malloc(n_q * sizeof *got);
  ck_assert(q && want && got);
  for (i = 0; i < n_q; i++) {
    q[i] = i < n_in ? put[i] : rnd() & mask;
    if (q[i] == empty || q[i] == tomb) q[i] = 1;
    want[i] = emc__index_find(&ix, q[i]);
    hits += want[i] >= 0;
  }
  memset(got, 0xa5, n_q * sizeof *got);
  ck_assert_msg(emc__cuda_index_find(&ix, q, n_q, got, err, sizeof err), "device probe failed: %s", err);
  for (i = 0; i < n_q; i++)
    ck_assert_msg(got[i] == want[i], "key_bits %u, %llu buckets, fill %.2f: key %llx at %lld on the "
                  "device, %lld on the host", key_bits, (unsigned long long)n_buckets, fill,
                  (unsigned long long)q[i], (long long)got[i], (long long)want[i]);
  ck_assert_uint_gt(hits, 0);
  free(ix.keys); free(put); free(q); free(want); free(got);
}

START_TEST(probe_matches_host) {
  static const double fills[] = {0.05, 0.5, 0.9, 1.0};
  uint32_t r, f;
  for (r = 0; r < 6; r++)
    for (f = 0; f < 4; f++)
      probe_scenario(r % 2 ? 32 : 64, 1 + rnd() % (r < 2 ? 4 : 300), fills[f]);
}
END_TEST

START_TEST(keys_match_host) {
  uint32_t r;
  for (r = 0; r < 20; r++) run_scenario(r % 2 ? 32 : 64, 1 + (uint32_t)(rnd() % 40), rnd());
}
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_keys")) return 77;
  s = suite_create("gpu_keys");
  tc = tcase_create("keys");
  tcase_add_test(tc, keys_match_host);
  tcase_add_test(tc, probe_matches_host);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  return emct_run_nofork(s);
}
