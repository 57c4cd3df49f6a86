/*
 * train_pins.c: prefetch pins: windows, expiry, the pin budget.
 * Part of test_train / test_gpu_train (train_common.h; the suite's comment in test_train.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

/* ------------------------------------------------------------------ pins */
static const mtab PIN_TABLE[1] = {{EMC_TABLE_DENSE, 60000, 0, 0, 16, EMC_DTYPE_F32}};
/* The cache: 64 KiB, 1,024 rows of 64 bytes (t2 = 0.8: 819 rows pinned at most); prefetches of
 * PIN_BATCH = 200 rows, 8 rounds of a prefetch and a flood of 10,000 other rows (20 lookups).
 * On the model of the device (emct_gpu_quick) the same proportions at half the size: 32 KiB
 * (409 rows pinned at most), 100 rows, floods of 1,500 rows (three times what the cache holds)
 * and depth + 3 rounds (the expiry checked in the last two). */
#define PIN_CAPACITY ((size_t)(emct_gpu_quick() ? 32u << 10 : 64u << 10))
#define PIN_BATCH (emct_gpu_quick() ? 100u : 200u)
static uint32_t pin_rounds(uint32_t depth) { return emct_gpu_quick() ? depth + 3u : 8u; }
static uint64_t pin_flood(void) { return emct_gpu_quick() ? 1500u : 10000u; }

/* Batch of the consecutive ids [first, first + n) (one table). */
static void range_batch(batch *b, uint64_t first, uint64_t n) {
  uint64_t i;
  for (i = 0; i < n; i++) b->ids[i] = b->ranks[i] = first + i;
  b->offsets[0] = 0;
  b->offsets[1] = n;
  b->n = n;
  b->out_bytes = n * 64;
  b->grad_floats = n * 16;
}

/* How many positions of the batch a lookup finds in the cache (rows checked too). */
static uint64_t count_cached(io *x, emc_cache *c, const model *m, const batch *b, unsigned char *out,
                             uint8_t *where) {
  uint64_t p, n = 0;
  EMCT_OK(do_lookup(x, c, b, 1, out, where));
  check_rows(m, b, out, "count_cached", 0);
  for (p = 0; p < b->n; p++) n += where[p] == EMC_WHERE_CACHE;
  return n;
}

/* Lookups of `rows` ids nobody prefetches, in batches of 500: every unpinned row goes. */
static void flood(io *x, emc_cache *c, const model *m, batch *b, uint64_t first, uint64_t rows,
                  unsigned char *out, uint8_t *where) {
  uint64_t k;
  for (k = 0; k < rows; k += 500) {
    range_batch(b, first + k, 500);
    EMCT_OK(do_lookup(x, c, b, 1, out, where));
    check_rows(m, b, out, "flood", 0);
  }
}

START_TEST(pins_hold_through_window_then_expire) {
  uint32_t depth = (uint32_t)_i + 1, k, j;
  model m;
  batch b, f;
  io x;
  emc_cache *c;
  unsigned char *out = malloc(2000 * 64);
  uint8_t *where = malloc(2001);
  uint64_t low;
  ck_assert(out && where);
  model_init(&m, PIN_TABLE, 1, EMC_STATE_NONE, 77);
  c = make_cache(&m, PIN_CAPACITY, depth);
  low = low_bytes_of(c, PIN_CAPACITY);
  batch_alloc(&b, &m, 2000);
  batch_alloc(&f, &m, 2000);
  io_init(&x, 2000, 2000 * 64, 2000 * 16);
  for (k = 0; k < pin_rounds(depth); k++) {
    emc_stats s;
    range_batch(&b, (uint64_t)k * PIN_BATCH, PIN_BATCH);
    EMCT_OK(do_prefetch(&x, c, &b, 1));
    s = stats_of(c);
    ck_assert_uint_le(s.pinned_bytes, low);
    ck_assert_uint_eq(s.pinned_rows, PIN_BATCH * (k + 1 < depth + 1 ? k + 1 : depth + 1));
    ck_assert_uint_eq(s.pinned_bytes, s.pinned_rows * 64);
    /* 10,000 other rows, 20 calls: everything unpinned is evicted */
    flood(&x, c, &m, &f, 40000, pin_flood(), out, where);
    check_structure(c);
    for (j = k >= depth ? k - depth : 0; j <= k; j++) { /* the live window: all resident */
      range_batch(&f, (uint64_t)j * PIN_BATCH, PIN_BATCH);
      ck_assert_msg(count_cached(&x, c, &m, &f, out, where) == PIN_BATCH,
                    "depth %u: batch %u lost rows inside its window (after prefetch %u)", depth,
                    j, k);
    }
    if (k >= depth + 1) { /* released by prefetch k: evicted by the flood */
      uint64_t left;
      range_batch(&f, (uint64_t)(k - depth - 1) * PIN_BATCH, PIN_BATCH);
      left = count_cached(&x, c, &m, &f, out, where);
      ck_assert_msg(left < PIN_BATCH / 10,
                    "depth %u: %llu rows of batch %u still cached after their pins expired", depth,
                    (unsigned long long)left, k - depth - 1);
    }
  }
  EMCT_OK(emc_cache_destroy(c));
  io_free(&x);
  batch_free(&b);
  batch_free(&f);
  model_free(&m);
  free(out);
  free(where);
}
END_TEST

START_TEST(over_large_prefetch) {
  model m;
  batch b;
  io x;
  emc_cache *c;
  emc_stats s0, s1;
  emc_status st;
  unsigned char *out = malloc(2000 * 64);
  uint8_t *where = malloc(2001);
  uint64_t low, cached;
  ck_assert(out && where);
  model_init(&m, PIN_TABLE, 1, EMC_STATE_NONE, 78);
  c = make_cache(&m, PIN_CAPACITY, 1);
  low = low_bytes_of(c, PIN_CAPACITY);
  batch_alloc(&b, &m, 2000);
  io_init(&x, 2000, 2000 * 64, 2000 * 16);
  range_batch(&b, 1000, 1500); /* 1,500 rows of 64 bytes > 819 (quick: 409) */
  s0 = stats_of(c);
  st = do_prefetch(&x, c, &b, 1);
#ifdef EMCT_GPU
  /* asynchronous: the next flush (or prefetch) returns it */
  EMCT_OK(st);
  st = emc_flush(c, NULL);
#endif
  EMCT_ST(st, EMC_ECAPACITY);
  ck_assert_msg(strstr(emc_last_error_detail(), "pin budget") != NULL, "detail: %s",
                emc_last_error_detail());
  s1 = stats_of(c);
  ck_assert_uint_le(s1.pinned_bytes, low);
  ck_assert_uint_ge(s1.pin_shortfall - s0.pin_shortfall, 1500 - low / 64);
  ck_assert_uint_eq(s1.pinned_rows + (s1.pin_shortfall - s0.pin_shortfall), 1500);
  cached = count_cached(&x, c, &m, &b, out, where); /* every row right, the pinned ones hits */
  ck_assert_uint_ge(cached, s1.pinned_rows);
  check_structure(c);
  /* the next small prefetch fits again (the over-large one is still in the window) */
  range_batch(&b, 5000, 10); /* the over-large batch is still in the window: the budget is full */
  s0 = stats_of(c);
  st = do_prefetch(&x, c, &b, 1);
#ifdef EMCT_GPU
  EMCT_OK(st);
  st = emc_flush(c, NULL);
#endif
  EMCT_ST(st, EMC_ECAPACITY);
  ck_assert_uint_eq(stats_of(c).pin_shortfall - s0.pin_shortfall, 10);
  range_batch(&b, 6000, 10);
  EMCT_OK(do_prefetch(&x, c, &b, 1)); /* the over-large batch left the window: room again */
  s1 = stats_of(c);
  ck_assert_uint_eq(s1.pinned_rows, 10);
  ck_assert_uint_eq(s1.pinned_bytes, 640);
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_cache_destroy(c));
  io_free(&x);
  batch_free(&b);
  model_free(&m);
  free(out);
  free(where);
}
END_TEST

START_TEST(depth_zero_and_no_prefetch_leaves_nothing_pinned) {
  model m;
  batch b;
  io x;
  emc_cache *c;
  model_init(&m, PIN_TABLE, 1, EMC_STATE_NONE, 79);
  c = make_cache(&m, PIN_CAPACITY, 0);
  batch_alloc(&b, &m, 300);
  io_init(&x, 300, 300 * 64, 300 * 16);
  range_batch(&b, 0, 300);
  EMCT_OK(do_prefetch(&x, c, &b, 1));
  ck_assert_uint_eq(stats_of(c).pinned_rows, 300);
  range_batch(&b, 300, 0); /* an empty prefetch releases the last one (depth 0) */
  b.offsets[1] = 0;
  b.n = 0;
  EMCT_OK(do_prefetch(&x, c, &b, 1));
  ck_assert_uint_eq(stats_of(c).pinned_rows, 0);
  ck_assert_uint_eq(stats_of(c).pinned_bytes, 0);
  check_structure(c);
  EMCT_OK(emc_cache_destroy(c));
  io_free(&x);
  batch_free(&b);
  model_free(&m);
}
END_TEST

void train_pins_tests(TCase *pins) {
  tcase_add_loop_test(pins, pins_hold_through_window_then_expire, 0, 2);
  tcase_add_test(pins, over_large_prefetch);
  tcase_add_test(pins, depth_zero_and_no_prefetch_leaves_nothing_pinned);
}
