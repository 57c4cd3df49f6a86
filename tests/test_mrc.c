/*
 * test_mrc: the sizing engine (bench/mrc.{c,h}) against independent references.
 *
 *   lru_curve_equals_simulation  the stack-distance curve equals emct_lru (the bench's exact
 *                                LRU simulator, a linked list) at every cache size from 0 to
 *                                past saturation, on Zipf batches over several tables, with
 *                                warm-up accesses uncounted, in keys and in a byte budget;
 *   opt_bounds                   OPT >= LRU at every size, OPT is monotone in the size, and
 *                                both stop at counted - cold;
 *   opt_is_optimal               OPT equals an exhaustive search over every eviction choice
 *                                (demand paging) on small random traces.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mrc.h"

#define NT 3

typedef struct world {
  uint64_t rows[NT], base[NT + 1], offsets[NT + 1];
  size_t batch, n_batches, warmup;
  uint64_t *trace; /* n_batches * NT * batch */
} world;

static void make_world(world *w, uint64_t seed, double alpha, size_t batch, size_t n_batches,
                       size_t warmup) {
  const uint64_t rows[NT] = {40, 300, 900};
  emct_gen g;
  memcpy(w->rows, rows, sizeof rows);
  w->base[0] = 0;
  for (int t = 0; t < NT; t++) w->base[t + 1] = w->base[t] + rows[t];
  w->batch = batch;
  w->n_batches = n_batches;
  w->warmup = warmup;
  w->trace = malloc(n_batches * NT * batch * sizeof *w->trace);
  ck_assert_ptr_nonnull(w->trace);
  ck_assert_int_eq(emct_gen_init(&g, rows, NT, EMCT_DIST_ZIPF, alpha, seed), 0);
  for (size_t i = 0; i < n_batches; i++) emct_gen_batch(&g, batch, w->trace + i * NT * batch, w->offsets);
  emct_gen_free(&g);
}

/* Exact LRU of the bench (emct_lru_batch) with every key weighing row_bytes, budget cap. */
static uint64_t lru_sim_hits(const world *w, uint64_t row_bytes, uint64_t cap, uint64_t *distinct) {
  uint64_t rb[NT] = {row_bytes, row_bytes, row_bytes}, hits = 0;
  emct_lru l;
  emct_dedup d;
  size_t *first = malloc(NT * w->batch * sizeof *first);
  emct_dedup_init(&d);
  ck_assert_int_eq(emct_lru_init(&l, rb, NT, cap, w->base[NT]), 0);
  *distinct = 0;
  for (size_t i = 0; i < w->n_batches; i++)
    ck_assert_int_eq(emct_lru_batch(&l, &d, first, w->trace + i * NT * w->batch, w->offsets,
                                    i < w->warmup ? NULL : &hits, i < w->warmup ? NULL : distinct),
                     0);
  emct_lru_free(&l);
  emct_dedup_free(&d);
  free(first);
  return hits;
}

static void feed(emct_mrc *m, const world *w, uint64_t *distinct) {
  emct_dedup d;
  size_t *first = malloc(NT * w->batch * sizeof *first);
  emct_dedup_init(&d);
  ck_assert_int_eq(emct_mrc_init(m, w->base[NT], w->n_batches * NT * w->batch), 0);
  *distinct = 0;
  for (size_t i = 0; i < w->n_batches; i++) {
    if (i == w->warmup) emct_mrc_count_from_now(m);
    ck_assert_int_eq(emct_mrc_batch(m, &d, first, w->trace + i * NT * w->batch, w->offsets, NT,
                                    w->base, i < w->warmup ? NULL : distinct),
                     0);
  }
  emct_mrc_finish(m);
  emct_dedup_free(&d);
  free(first);
}

START_TEST(lru_curve_equals_simulation) {
  const double alphas[3] = {0.6, 1.0, 1.3};
  world w;
  make_world(&w, 11 + (uint64_t)_i, alphas[_i], 64, 40, 10);
  emct_mrc m;
  uint64_t counted = 0, sim_distinct = 0;
  feed(&m, &w, &counted);
  ck_assert_uint_eq(emct_mrc_counted(&m), counted);
  const uint64_t sat = emct_mrc_saturation(&m);
  ck_assert_uint_gt(sat, 0);
  for (uint64_t c = 0; c <= sat + 2; c++) {
    uint64_t sim = lru_sim_hits(&w, 1, c, &sim_distinct);
    ck_assert_uint_eq(sim_distinct, counted);
    ck_assert_msg(emct_mrc_lru_hits(&m, c) == sim, "alpha %g, %llu keys: curve %llu, simulation %llu",
                  alphas[_i], (unsigned long long)c, (unsigned long long)emct_mrc_lru_hits(&m, c),
                  (unsigned long long)sim);
  }
  /* a byte budget, as in emc-bench: 48-byte slots, budgets that are not multiples of 48 */
  for (uint64_t b = 0; b < 48 * (sat + 1); b += 37)
    ck_assert_uint_eq(emct_mrc_lru_hits(&m, b / 48), lru_sim_hits(&w, 48, b, &sim_distinct));
  ck_assert_uint_eq(emct_mrc_lru_hits(&m, sat), emct_mrc_lru_hits(&m, UINT64_MAX));
  emct_mrc_free(&m);
  free(w.trace);
}
END_TEST

START_TEST(opt_bounds) {
  world w;
  make_world(&w, 7, 1.0, 48, 30, 8);
  emct_mrc m;
  uint64_t counted = 0, prev = 0;
  feed(&m, &w, &counted);
  const uint64_t sat = emct_mrc_saturation(&m), max_hits = counted - m.cold;
  ck_assert_uint_eq(emct_mrc_lru_hits(&m, sat), max_hits);
  for (uint64_t c = 0; c <= sat + 1; c++) {
    uint64_t opt = 0;
    ck_assert_int_eq(emct_mrc_opt_hits(&m, c, &opt), 0);
    const uint64_t lru = emct_mrc_lru_hits(&m, c);
    ck_assert_msg(opt >= lru, "%llu keys: OPT %llu < LRU %llu", (unsigned long long)c,
                  (unsigned long long)opt, (unsigned long long)lru);
    ck_assert_uint_ge(opt, prev);
    ck_assert_uint_le(opt, max_hits);
    prev = opt;
  }
  ck_assert_uint_eq(prev, max_hits);
  uint64_t again = 0;
  ck_assert_int_eq(emct_mrc_opt_hits(&m, sat / 2, &again), 0); /* memoized: same answer */
  emct_mrc_free(&m);
  free(w.trace);
}
END_TEST

/* Most counted hits over every sequence of eviction choices (demand paging). */
static uint64_t brute(const uint64_t *seq, size_t n, size_t i, size_t count_from, uint64_t set,
                      unsigned in_set, unsigned cap) {
  if (i == n) return 0;
  const uint64_t bit = 1ull << seq[i];
  if (set & bit) return (i >= count_from) + brute(seq, n, i + 1, count_from, set, in_set, cap);
  if (cap == 0) return brute(seq, n, i + 1, count_from, set, in_set, cap);
  if (in_set < cap) return brute(seq, n, i + 1, count_from, set | bit, in_set + 1, cap);
  uint64_t best = 0;
  for (uint64_t s = set; s; s &= s - 1) {
    uint64_t h = brute(seq, n, i + 1, count_from, (set & ~(s & (~s + 1))) | bit, in_set, cap);
    if (h > best) best = h;
  }
  return best;
}

START_TEST(opt_is_optimal) {
  emct_rng r;
  emct_rng_seed(&r, 1234);
  for (int trial = 0; trial < 60; trial++) {
    const uint64_t n_keys = 3 + emct_rng_below(&r, 4);
    const size_t n = 8 + (size_t)emct_rng_below(&r, 7), count_from = (size_t)emct_rng_below(&r, 4);
    uint64_t seq[16];
    emct_mrc m;
    ck_assert_int_eq(emct_mrc_init(&m, n_keys, n), 0);
    for (size_t i = 0; i < n; i++) {
      if (i == count_from) emct_mrc_count_from_now(&m);
      seq[i] = emct_rng_below(&r, n_keys);
      ck_assert_int_eq(emct_mrc_access(&m, seq[i]), 0);
    }
    emct_mrc_finish(&m);
    for (unsigned cap = 0; cap <= n_keys; cap++) {
      uint64_t opt = 0;
      ck_assert_int_eq(emct_mrc_opt_hits(&m, cap, &opt), 0);
      ck_assert_msg(opt == brute(seq, n, 0, count_from, 0, 0, cap),
                    "trial %d, cap %u: OPT %llu, exhaustive %llu", trial, cap,
                    (unsigned long long)opt,
                    (unsigned long long)brute(seq, n, 0, count_from, 0, 0, cap));
    }
    emct_mrc_free(&m);
  }
}
END_TEST

START_TEST(bad_use) {
  emct_mrc m;
  ck_assert_int_eq(emct_mrc_init(&m, 0, 10), -1);
  ck_assert_int_eq(emct_mrc_init(&m, 10, 2), 0);
  emct_mrc_count_from_now(&m);
  ck_assert_int_eq(emct_mrc_access(&m, 10), -1); /* key out of range */
  ck_assert_int_eq(emct_mrc_access(&m, 1), 0);
  ck_assert_int_eq(emct_mrc_access(&m, 1), 0);
  ck_assert_int_eq(emct_mrc_access(&m, 1), -1); /* log full */
  uint64_t h = 1;
  ck_assert_int_eq(emct_mrc_opt_hits(&m, 1, &h), -1); /* before finish */
  emct_mrc_finish(&m);
  ck_assert_uint_eq(emct_mrc_lru_hits(&m, 1), 1);
  ck_assert_uint_eq(emct_mrc_lru_hits(&m, 0), 0);
  emct_mrc_free(&m);
  emct_mrc_free(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("mrc");
  TCase *tc = tcase_create("mrc");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tc, lru_curve_equals_simulation, 0, 3);
  tcase_add_test(tc, opt_bounds);
  tcase_add_test(tc, opt_is_optimal);
  tcase_add_test(tc, bad_use);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
