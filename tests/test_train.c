/*
 * test_train: the training calls (emc_prefetch, emc_apply_gradients, emc_dedup) against a
 * reference that applies the same arithmetic to a plain copy of the store.
 *
 *   training   300 steps of Zipf batches over dense and hashed, f32 and f16 tables (hashed
 *              ids absent from the store too), a cache a few percent of the rows, in the
 *              trainer's pipeline prefetch(i+1) -> lookup(i) -> apply(i); prefetch depth 1
 *              and 2, SGD with SUM and MEAN: every lookup returns bitwise the reference's
 *              rows, a lookup of a batch whose prefetch pinned every row is all hits, and
 *              after emc_flush the store is bitwise the reference; row-wise Adagrad too, rows
 *              and accumulators (the header promises bitwise results on both backends).
 *   pins       prefetched rows survive floods of other rows inside their window and are
 *              evictable after it; pinned bytes stay within t2 * capacity after every call;
 *              an over-large prefetch returns EMC_ECAPACITY, pins what fits, and lookups of
 *              its batch stay right.
 *   dedup      first-occurrence order, inverse, offsets, on random batches.
 *   bad input  NULLs, bad offsets, ids out of range, hashed capacity, NaN / infinite / negative
 *              optimizer fields, a wrong struct_size, Adagrad without state, a batch larger
 *              than the cache: each a clear status, nothing changed.
 *   threads    one thread prefetches and applies gradients while others look up (and dedup);
 *              every row a reader sees is whole and between the updates finished before its
 *              lookup and those started by its end (label threads: TSan).
 *
 * Compiled with EMCT_GPU it is test_gpu_train (label gpu): the caches are CUDA caches driven
 * from device buffers (ids, offsets, grads, out) on a stream, as a trainer would, waiting for
 * the stream after each call to check it; it exits 77 where no device answers. It adds
 *   pipelined  the training runs again with nothing waited for between steps: every batch in
 *              device memory, host offsets, prefetch(i+1) on a side stream, lookup(i) and
 *              apply(i) on the main one, one wait at the end; every lookup's rows, and the
 *              store after emc_flush, bitwise those of a host backend cache fed the same steps.
 * and runs the threads case with a stream and device buffers per thread. Its tests run in the
 * test process (CK_NOFORK: CUDA does not survive fork). On the CPU model of the device
 * (cuda/sim/) or with EMC_TEST_QUICK=1 (emct_gpu_quick) runs are shorter and caches smaller,
 * with the same checks.
 *
 * The suite is one executable built from parts (tests/CMakeLists.txt, EMC_TRAIN_PARTS): this
 * file (training, pipelined, dedup, main), train_pins.c, train_input.c (bad input, the state
 * reader, file version 2), train_threads.c, and train_common.{h,c} (the model, batches, the
 * calls as each backend takes them, the checks).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

/* ------------------------------------------------------------------ training */
typedef struct tcfg {
  uint32_t depth;
  emc_optimizer_kind kind;
  emc_grad_merge merge;
  uint32_t key_bits;
} tcfg;

static const tcfg TCFG[] = {
    {1, EMC_OPT_SGD, EMC_MERGE_SUM, 64},
    {1, EMC_OPT_SGD, EMC_MERGE_MEAN, 32},
    {2, EMC_OPT_SGD, EMC_MERGE_SUM, 32},
    {2, EMC_OPT_SGD, EMC_MERGE_MEAN, 64},
    {1, EMC_OPT_ROWWISE_ADAGRAD, EMC_MERGE_SUM, 64},
    {2, EMC_OPT_ROWWISE_ADAGRAD, EMC_MERGE_MEAN, 64},
};
#define N_TCFG (sizeof TCFG / sizeof TCFG[0])

/* Steps of a training run: 300 (100 under a sanitizer); on the CPU model of the device (or
 * EMC_TEST_QUICK=1) 30 (15): the same checks, the cache evicting and pinning within a few
 * steps. The cache's structure is checked every check_every() steps and at the end. */
static uint64_t train_steps(void) { return emct_gpu_quick() ? emct_scale(30, 2) : emct_scale(300, 3); }
static uint64_t check_every(void) { return emct_gpu_quick() ? 10 : 50; }

START_TEST(training_matches_reference) {
  const tcfg *tc = &TCFG[_i];
  model m;
  batch b[2];
  io x;
  emc_cache *c;
  emc_optimizer o;
  emc_stats s0, s1;
  unsigned char *out;
  uint8_t *where;
  uint64_t per_table = 96, steps = train_steps(), i, hits_checked = 0, store_hits = 0;
  size_t capacity;
  emc_status st, pst;
  int pinned_all[2] = {0, 0};
  model_init(&m, TRAIN_TABLES, 4, tc->kind == EMC_OPT_ROWWISE_ADAGRAD ? EMC_STATE_ADAGRAD : EMC_STATE_NONE,
             1000 + (uint64_t)_i);
  capacity = (size_t)(model_bytes(&m) * 0.04); /* a few percent of the rows */
  {
    emc_cache_config cfg;
    emct_cache_config_init(&cfg);
    cfg.backend = BACKEND;
    cfg.capacity_bytes = capacity;
    cfg.prefetch_depth = tc->depth;
    cfg.key_bits = tc->key_bits;
    c = NULL;
    EMCT_OK(emc_cache_create(m.store, &cfg, &c));
  }
  emc_optimizer_init(&o);
  o.kind = tc->kind;
  o.merge = tc->merge;
  o.lr = tc->kind == EMC_OPT_SGD ? 0.05f : 0.1f;
  o.eps = 1e-6f;
  o.initial_accumulator = tc->kind == EMC_OPT_SGD ? 0.0f : 0.01f;
  batch_alloc(&b[0], &m, per_table);
  batch_alloc(&b[1], &m, per_table);
  io_init(&x, m.n * per_table, 4 * per_table * (16 * 4 + 7 * 2 + 12 * 4 + 5 * 2),
          m.n * per_table * 16);
  out = malloc(m.n * per_table * 64 + 16);
  where = malloc(m.n * per_table + 1);
  ck_assert(out && where);
  /* the pipeline: prefetch(i + 1) -> lookup(i) -> apply(i) */
  batch_make(&b[0], &m, per_table);
  batch_mark_present(&b[0], &m);
  s0 = stats_of(c);
  pst = do_prefetch(&x, c, &b[0], m.n);
  s1 = stats_of(c);
  ck_assert_msg(pst == EMC_OK || pst == EMC_ECAPACITY, "prefetch: %s", emc_status_name(pst));
  pinned_all[0] = s1.pin_shortfall == s0.pin_shortfall;
  for (i = 0; i < steps; i++) {
    batch *cur = &b[i & 1], *nxt = &b[(i + 1) & 1];
    uint64_t p;
    batch_make(nxt, &m, per_table);
    batch_mark_present(nxt, &m);
    s0 = stats_of(c);
    pst = do_prefetch(&x, c, nxt, m.n);
    s1 = stats_of(c);
    ck_assert_msg(pst == EMC_OK || pst == EMC_ECAPACITY, "step %llu prefetch: %s (%s)",
                  (unsigned long long)i, emc_status_name(pst), emc_last_error_detail());
#ifndef EMCT_GPU
    /* the host reports the shortfall of this very call */
    ck_assert_int_eq(pst == EMC_ECAPACITY, s1.pin_shortfall != s0.pin_shortfall);
#endif
    ck_assert_uint_le(s1.pinned_bytes, low_bytes_of(c, capacity));
    pinned_all[(i + 1) & 1] = s1.pin_shortfall == s0.pin_shortfall;
    memset(where, 0xee, cur->n + 1);
    EMCT_OK(do_lookup(&x, c, cur, m.n, out, where));
    check_rows(&m, cur, out, "lookup", (int)i);
    if (pinned_all[i & 1]) {
      /* the whole batch was pinned: every row with a store row at prefetch time is a hit
       * (ids a later gradient created may have come and gone since) */
      uint32_t t;
      for (t = 0; t < m.n; t++)
        for (p = cur->offsets[t]; p < cur->offsets[t + 1]; p++) {
          int present = m.present[t][cur->ranks[p]];
          if (!cur->was_present[p]) continue;
          ck_assert_msg(present && where[p] == EMC_WHERE_CACHE,
                        "step %llu: position %llu of a fully pinned batch: where %d",
                        (unsigned long long)i, (unsigned long long)p, where[p]);
          hits_checked++;
        }
    } else {
      for (p = 0; p < cur->n; p++) store_hits += where[p] == EMC_WHERE_STORE;
    }
    {
      uint32_t t;
      for (t = 0; t < m.n; t++)
        for (p = cur->offsets[t]; p < cur->offsets[t + 1]; p++)
          ck_assert_msg((where[p] == EMC_WHERE_ABSENT) == !m.present[t][cur->ranks[p]],
                        "step %llu position %llu: where %d, present %d", (unsigned long long)i,
                        (unsigned long long)p, where[p], m.present[t][cur->ranks[p]]);
    }
    st = do_apply(&x, c, cur, m.n, &o);
    ck_assert_msg(st == EMC_OK, "step %llu apply: %s (%s)", (unsigned long long)i,
                  emc_status_name(st), emc_last_error_detail());
    model_apply(&m, cur, &o);
    if (i % check_every() == check_every() - 1) check_structure(c);
  }
  ck_assert_msg(hits_checked > 0, "no batch was pinned whole: the test does not test pins");
  s1 = stats_of(c);
  ck_assert_uint_gt(s1.evictions, 0);        /* the cache is small: it evicted all along */
  ck_assert_uint_gt(s1.prefetched, 0);
  ck_assert_uint_gt(s1.gradient_rows, steps);
  ck_assert_uint_le(s1.pinned_bytes, low_bytes_of(c, capacity));
  check_structure(c);
  EMCT_OK(emc_flush(c, NULL));
  check_store(&m, 0.0, "after flush");
  EMCT_OK(emc_cache_destroy(c));
  check_store(&m, 0.0, "after destroy");
  io_free(&x);
  free(out);
  free(where);
  batch_free(&b[0]);
  batch_free(&b[1]);
  model_free(&m);
  (void)store_hits;
}
END_TEST

#ifdef EMCT_GPU
/* ------------------------------------------------------------------ pipelined
 * The trainer's loop as it runs on a GPU: every batch's ids and gradients in device memory
 * (uploaded before the loop), offsets on the host (read by the call: no wait), prefetch(i + 1)
 * on a side stream, lookup(i) into a device buffer of its own and apply(i) on the main stream,
 * and nothing waited for by the test until the last step is enqueued. The same steps on a host
 * backend cache over an identical store give the expected rows: every lookup's rows bitwise
 * (and its absent positions), and after emc_flush both stores bitwise the reference, rows,
 * accumulators and id counts. */
static void stores_same_counts(const model *a, const model *b, const char *what) {
  uint32_t t;
  for (t = 0; t < a->n; t++) {
    uint64_t na = 0, nb = 0;
    EMCT_OK(emc_store_table_count(a->store, t, &na));
    EMCT_OK(emc_store_table_count(b->store, t, &nb));
    ck_assert_msg(na == nb, "%s: table %u holds %llu ids, the host backend's store %llu", what, t,
                  (unsigned long long)na, (unsigned long long)nb);
  }
}

/* emc_flush: OK, or the pin shortfall of an asynchronous prefetch (then a second flush is OK). */
static void flush_after_prefetches(emc_cache *c, const char *what) {
  emc_status st = emc_flush(c, NULL);
  if (st == EMC_ECAPACITY) {
    ck_assert_msg(strstr(emc_last_error_detail(), "pin budget") != NULL, "%s: flush: %s", what,
                  emc_last_error_detail());
    st = emc_flush(c, NULL);
  }
  ck_assert_msg(st == EMC_OK, "%s: flush: %s (%s)", what, emc_status_name(st), emc_last_error_detail());
}

START_TEST(training_pipelined_matches_host) {
  const tcfg *tc = &TCFG[_i];
  const emc_row_state state = tc->kind == EMC_OPT_ROWWISE_ADAGRAD ? EMC_STATE_ADAGRAD : EMC_STATE_NONE;
  const uint64_t per_table = 96, steps = train_steps(), nmax = MAX_T * per_table;
  model m, mh; /* m: the reference, and the store of the CUDA cache; mh: the host cache's */
  batch *b = calloc(steps + 1, sizeof *b);
  emc_cache *c = NULL, *h = NULL;
  emc_cache_config cfg;
  emc_optimizer o;
  emc_stats sg, sh;
  size_t capacity, ob;
  unsigned char *hout, *gout;
  uint8_t *hwhere, *gwhere;
  unsigned char *dids, *dgrads, *dout, *dwhere;
  cudaStream_t st, ps;
  emc_status s;
  uint64_t i, p;
  ck_assert(b);
  model_init(&m, TRAIN_TABLES, 4, state, 2000 + (uint64_t)_i);
  model_init(&mh, TRAIN_TABLES, 4, state, 2000 + (uint64_t)_i);
  capacity = (size_t)(model_bytes(&m) * 0.04);
  emct_cache_config_init(&cfg);
  cfg.capacity_bytes = capacity;
  cfg.prefetch_depth = tc->depth;
  cfg.key_bits = tc->key_bits;
  cfg.backend = EMC_BACKEND_CUDA;
  EMCT_OK(emc_cache_create(m.store, &cfg, &c));
  cfg.backend = EMC_BACKEND_HOST;
  EMCT_OK(emc_cache_create(mh.store, &cfg, &h));
  emc_optimizer_init(&o);
  o.kind = tc->kind;
  o.merge = tc->merge;
  o.lr = tc->kind == EMC_OPT_SGD ? 0.05f : 0.1f;
  o.eps = 1e-6f;
  o.initial_accumulator = tc->kind == EMC_OPT_SGD ? 0.0f : 0.01f;
  for (i = 0; i <= steps; i++) {
    batch_alloc(&b[i], &m, per_table);
    batch_make(&b[i], &m, per_table);
  }
  ob = b[0].out_bytes; /* every batch: per_table ids a table */
  hout = malloc(steps * ob);
  gout = malloc(steps * ob);
  hwhere = malloc(steps * nmax);
  gwhere = malloc(steps * nmax);
  ck_assert(hout && gout && hwhere && gwhere);

  /* the host backend, step by step, against the reference */
  s = emc_prefetch(h, b[0].ids, b[0].offsets, NULL);
  ck_assert_msg(s == EMC_OK || s == EMC_ECAPACITY, "host prefetch: %s", emc_status_name(s));
  for (i = 0; i < steps; i++) {
    uint32_t t;
    s = emc_prefetch(h, b[i + 1].ids, b[i + 1].offsets, NULL);
    ck_assert_msg(s == EMC_OK || s == EMC_ECAPACITY, "host step %llu prefetch: %s", (unsigned long long)i,
                  emc_status_name(s));
    EMCT_OK(emc_lookup_ex(h, b[i].ids, b[i].offsets, hout + i * ob, hwhere + i * nmax, NULL));
    check_rows(&m, &b[i], hout + i * ob, "host lookup", (int)i);
    for (t = 0; t < m.n; t++)
      for (p = b[i].offsets[t]; p < b[i].offsets[t + 1]; p++)
        ck_assert_msg((hwhere[i * nmax + p] == EMC_WHERE_ABSENT) == !m.present[t][b[i].ranks[p]],
                      "host step %llu position %llu: where %d", (unsigned long long)i,
                      (unsigned long long)p, hwhere[i * nmax + p]);
    EMCT_OK(emc_apply_gradients(h, b[i].ids, b[i].offsets, b[i].grads, &o, NULL));
    model_apply(&m, &b[i], &o);
  }
  EMCT_OK(emc_flush(h, NULL));

  /* the CUDA cache: everything in device memory, enqueued without a wait */
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&dids, (steps + 1) * nmax * 8));
  CUDA_OK(cudaMalloc((void **)&dgrads, steps * nmax * 16 * 4));
  CUDA_OK(cudaMalloc((void **)&dout, steps * ob));
  CUDA_OK(cudaMalloc((void **)&dwhere, steps * nmax));
  for (i = 0; i <= steps; i++) {
    CUDA_OK(cudaMemcpy(dids + i * nmax * 8, b[i].ids, b[i].n * 8, cudaMemcpyHostToDevice));
    if (i < steps)
      CUDA_OK(cudaMemcpy(dgrads + i * nmax * 64, b[i].grads, b[i].grad_floats * 4, cudaMemcpyHostToDevice));
  }
  s = emc_prefetch(c, (const uint64_t *)dids, b[0].offsets, ps);
  ck_assert_msg(s == EMC_OK, "prefetch 0: %s (%s)", emc_status_name(s), emc_last_error_detail());
  for (i = 0; i < steps; i++) {
    /* a prefetch returns the pin shortfall of the one before (asynchronous) */
    s = emc_prefetch(c, (const uint64_t *)(dids + (i + 1) * nmax * 8), b[i + 1].offsets, ps);
    ck_assert_msg(s == EMC_OK || (s == EMC_ECAPACITY && strstr(emc_last_error_detail(), "pin budget")),
                  "step %llu prefetch: %s (%s)", (unsigned long long)i, emc_status_name(s),
                  emc_last_error_detail());
    s = emc_lookup_ex(c, (const uint64_t *)(dids + i * nmax * 8), b[i].offsets, dout + i * ob,
                      dwhere + i * nmax, st);
    ck_assert_msg(s == EMC_OK, "step %llu lookup: %s (%s)", (unsigned long long)i, emc_status_name(s),
                  emc_last_error_detail());
    s = emc_apply_gradients(c, (const uint64_t *)(dids + i * nmax * 8), b[i].offsets,
                            dgrads + i * nmax * 64, &o, st);
    ck_assert_msg(s == EMC_OK, "step %llu apply: %s (%s)", (unsigned long long)i, emc_status_name(s),
                  emc_last_error_detail());
  }
  CUDA_OK(cudaStreamSynchronize(ps));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(gout, dout, steps * ob, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gwhere, dwhere, steps * nmax, cudaMemcpyDeviceToHost));
  for (i = 0; i < steps; i++) {
    long d = emct_first_diff(gout + i * ob, hout + i * ob, b[i].out_bytes);
    ck_assert_msg(d < 0, "step %llu: the lookup's byte %ld differs from the host backend's", (unsigned long long)i, d);
    for (p = 0; p < b[i].n; p++)
      ck_assert_msg((gwhere[i * nmax + p] == EMC_WHERE_ABSENT) == (hwhere[i * nmax + p] == EMC_WHERE_ABSENT),
                    "step %llu position %llu: where %d, the host backend's %d", (unsigned long long)i,
                    (unsigned long long)p, gwhere[i * nmax + p], hwhere[i * nmax + p]);
  }
  flush_after_prefetches(c, "pipelined");
  EMCT_OK(emc_get_stats(c, &sg));
  EMCT_OK(emc_get_stats(h, &sh));
  ck_assert_uint_eq(sg.gradient_rows, sh.gradient_rows);
  ck_assert_uint_gt(sg.evictions, 0);
  ck_assert_uint_gt(sg.prefetched, 0);
  check_structure(c);
  check_store(&m, 0.0, "pipelined, after flush");
  {
    model t = m; /* the host backend's store against the same reference */
    t.store = mh.store;
    check_store(&t, 0.0, "host backend, after flush");
  }
  stores_same_counts(&m, &mh, "after flush");
  EMCT_OK(emc_cache_destroy(c));
  EMCT_OK(emc_cache_destroy(h));
  check_store(&m, 0.0, "pipelined, after destroy");
  stores_same_counts(&m, &mh, "after destroy");
  CUDA_OK(cudaStreamDestroy(st));
  CUDA_OK(cudaStreamDestroy(ps));
  CUDA_OK(cudaFree(dids));
  CUDA_OK(cudaFree(dgrads));
  CUDA_OK(cudaFree(dout));
  CUDA_OK(cudaFree(dwhere));
  for (i = 0; i <= steps; i++) batch_free(&b[i]);
  free(b);
  free(hout);
  free(gout);
  free(hwhere);
  free(gwhere);
  model_free(&m);
  model_free(&mh);
}
END_TEST
#endif

/* ------------------------------------------------------------------ dedup */
START_TEST(dedup_first_occurrence_and_inverse) {
  model m;
  batch b;
  io x;
  emc_cache *c;
  uint64_t *uids, uoffs[MAX_T + 1];
  uint32_t *inv, it;
  model_init(&m, TRAIN_TABLES, 4, EMC_STATE_NONE, 80);
  c = make_cache(&m, 1u << 20, 1);
  batch_alloc(&b, &m, 400);
  io_init(&x, 1600, 1600 * 64, 1600 * 16);
  uids = malloc(1600 * sizeof *uids);
  inv = malloc(1600 * sizeof *inv);
  ck_assert(uids && inv);
  for (it = 0; it < 20; it++) {
    uint32_t t;
    uint64_t counts[MAX_T], p, q;
    for (t = 0; t < MAX_T; t++) /* the first batch empty, the second with empty segments */
      counts[t] = it == 0 || (it == 1 && t % 2 == 1) ? 0 : emct_rng_below(&m.rng, 401);
    batch_make_counts(&b, &m, counts);
    if (it == 2) /* every table one id, repeated: each run, the batch's last one too, repeats */
      for (t = 0; t < m.n; t++)
        for (p = b.offsets[t]; p < b.offsets[t + 1]; p++) b.ids[p] = b.ids[b.offsets[t]];
    memset(uids, 0xcd, 1600 * sizeof *uids);
    EMCT_OK(do_dedup(&x, c, &b, m.n, uids, uoffs, inv));
    ck_assert_uint_eq(uoffs[0], 0);
    for (t = 0; t < m.n; t++) {
      uint64_t lo = b.offsets[t], hi = b.offsets[t + 1], ulo = uoffs[t], uhi = uoffs[t + 1], u;
      ck_assert_uint_le(ulo, uhi);
      ck_assert_uint_le(uhi - ulo, hi - lo);
      /* distinct, in order of first occurrence */
      for (u = ulo, p = lo; p < hi; p++) {
        int seen = 0;
        for (q = lo; q < p; q++) seen |= b.ids[q] == b.ids[p];
        if (!seen) {
          ck_assert_msg(u < uhi && uids[u] == b.ids[p], "table %u: unique %llu is not the id first seen at %llu",
                        t, (unsigned long long)u, (unsigned long long)p);
          u++;
        }
        ck_assert_msg(inv[p] >= ulo && inv[p] < uhi && uids[inv[p]] == b.ids[p],
                      "table %u position %llu: inverse %u", t, (unsigned long long)p, inv[p]);
      }
      ck_assert_uint_eq(u, uhi);
    }
  }
  EMCT_OK(emc_cache_destroy(c));
  io_free(&x);
  batch_free(&b);
  model_free(&m);
  free(uids);
  free(inv);
}
END_TEST

/* ------------------------------------------------------------------ main */
int main(void) {
  Suite *s;
  TCase *tt, *tp, *tb;
  SRunner *sr;
  int failed;
#ifdef EMCT_GPU
  if (!emct_gpu_present("test_gpu_train")) return 77; /* (before Check allocates anything) */
#endif
  s = suite_create("train");
  tt = tcase_create("training");
  tp = tcase_create("pins");
  tb = tcase_create("api");
  tcase_add_loop_test(tt, training_matches_reference, 0, (int)N_TCFG);
#ifdef EMCT_GPU
  tcase_add_loop_test(tt, training_pipelined_matches_host, 0, (int)N_TCFG);
#endif
  train_pins_tests(tp);
  tcase_add_test(tb, dedup_first_occurrence_and_inverse);
  train_input_tests(tb);
  train_threads_tests(tb);
  tcase_set_timeout(tt, emct_timeout(120));
  tcase_set_timeout(tp, emct_timeout(120));
  tcase_set_timeout(tb, emct_timeout(120));
  suite_add_tcase(s, tt);
  suite_add_tcase(s, tp);
  suite_add_tcase(s, tb);
  sr = srunner_create(s);
#ifdef EMCT_GPU
  /* CUDA does not survive fork: the tests run in this process (a failing test ends the run) */
  srunner_set_fork_status(sr, CK_NOFORK);
#endif
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
