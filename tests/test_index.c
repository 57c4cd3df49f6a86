/*
 * test_index: the per-item index logic of lib/emc_item.h that both backends run, and host twins
 * of what the CUDA lookup and writer kernels do with it, against reference answers.
 *
 *   probe      emc__index_find (the reference, slot by slot) and emc__index_find_masks (the
 *              cooperative probe's twin: a bucket judged from its match / EMPTY ballots by
 *              emc__probe_step) and the host's vector probe emc__hix_find agree with a plain set of the keys inserted, at loads up to
 *              full, with tombstones, with many keys of one home bucket, across the wrap
 *              round the end of the index, for 32- and 64-bit keys; keys that share a half
 *              (of a 64-bit key, or a 16-bit pack of a 32-bit one) with a present key or EMPTY
 *   repack     after emc__index_repack of every cluster: every key still found, no tombstone
 *              left in a re-packed cluster, every entry's lm and stamp unchanged, probes of
 *              absent keys stop; random insert / remove / re-pack sequences against a model
 *   bitmap     emc__bitmap_nth and a twin of the device's warp-wide search (lanes of 32 words,
 *              a prefix of popcounts, the n-th set bit of one word) against a bit-by-bit scan
 *   miss set   emc__missset_insert: the first occurrence of each key in an epoch is reported
 *              exactly once (one thread, and 4 threads racing on the same keys), words of
 *              older epochs count as empty, a full set refuses
 *   planner    emc__plan_allow computed as the device does (an exclusive block scan over
 *              tables in chunks, a carry between chunks) against the sequential definition
 *   entry word emc__lm_same: BUSY never validates, DIRTY / PINNED may change, loc and counter
 *              may not
 */
#include "common.h"
#include "host_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static emct_rng R;

/* ------------------------------------------------------------------ a test index */
typedef struct tix {
  emc__index_view v;
  uint64_t n;          /* slots */
  uint32_t epoch;
  uint64_t *present;   /* model: the keys inserted and not removed */
  uint64_t n_present;
} tix;

static void tix_init(tix *x, uint64_t buckets, uint32_t key_bits) {
  uint64_t i;
  memset(x, 0, sizeof *x);
  x->n = buckets * EMC__BUCKET;
  x->v.key_bits = key_bits;
  x->v.n_buckets = buckets;
  x->v.keys = calloc(x->n, key_bits == 32 ? 4 : 8);
  x->v.lm = calloc(x->n, 8);
  x->v.stamps = calloc(x->n, 2);
  x->v.epoch = &x->epoch;
  x->present = calloc(x->n, 8);
  ck_assert(x->v.keys && x->v.lm && x->v.stamps && x->present);
  for (i = 0; i < x->n; i++) {
    emc__ix_set_key(&x->v, i, emc__key_empty(key_bits));
    x->v.lm[i] = EMC__LM_FREE;
  }
}

static void tix_free(tix *x) {
  free(x->v.keys);
  free(x->v.lm);
  free(x->v.stamps);
  free(x->present);
}

/* A random key of the width that is neither EMPTY nor TOMB. */
static uint64_t rand_key(uint32_t key_bits) {
  for (;;) {
    uint64_t k = emct_rng_next(&R) & emc__key_mask(key_bits);
    if (k != emc__key_empty(key_bits) && k != emc__key_tomb(key_bits)) return k;
  }
}

/* A key whose home bucket is b (rejection sampling; fine for small indexes). */
static uint64_t key_homed(const tix *x, uint64_t b) {
  for (;;) {
    uint64_t k = rand_key(x->v.key_bits);
    if (emc__home_bucket(k, x->v.n_buckets) == b) return k;
  }
}

static int64_t model_find(const tix *x, uint64_t key) {
  uint64_t i;
  for (i = 0; i < x->n_present; i++)
    if (x->present[i] == key) return (int64_t)i;
  return -1;
}

/* The writer's insert: the first free slot of the path, lm and stamp derived from the key. */
static void tix_insert(tix *x, uint64_t key) {
  int64_t pos = emc__index_free_slot(&x->v, key);
  ck_assert_int_ge(pos, 0);
  x->v.lm[pos] = emc__lm_make((uint32_t)(key & EMC__LOC_MAX), (uint32_t)(key >> 20) & ~EMC__META_FLAGS);
  x->v.stamps[pos] = (uint16_t)(key * 7u);
  emc__ix_set_key(&x->v, (uint64_t)pos, key);
  x->present[x->n_present++] = key;
}

/* Remove as both backends do: EMPTY when the bucket keeps an EMPTY slot, else TOMB. */
static void tix_remove(tix *x, uint64_t idx_in_model) {
  uint64_t key = x->present[idx_in_model];
  int64_t pos = emc__index_find(&x->v, key);
  ck_assert_int_ge(pos, 0);
  x->v.lm[pos] = EMC__LM_FREE;
  emc__ix_set_key(&x->v, (uint64_t)pos,
                  emc__bucket_has_empty(&x->v, (uint64_t)pos / EMC__BUCKET) ? emc__key_empty(x->v.key_bits)
                                                                           : emc__key_tomb(x->v.key_bits));
  x->present[idx_in_model] = x->present[--x->n_present];
}

/* Every present key found by both probes, where it is, with its own lm and stamp; random
 * absent keys not found. */
static void tix_check(const tix *x, const char *what) {
  uint64_t i;
  for (i = 0; i < x->n_present; i++) {
    uint64_t k = x->present[i];
    int64_t a = emc__index_find(&x->v, k), b = emc__index_find_masks(&x->v, k),
            c = emc__hix_find(&x->v, k);
    ck_assert_msg(a >= 0 && a == b && a == c, "%s: key %llx: reference %lld, masks %lld, host "
                  "vector probe %lld", what, (unsigned long long)k, (long long)a, (long long)b,
                  (long long)c);
    ck_assert_msg(emc__ix_key(&x->v, (uint64_t)a) == k, "%s: slot %lld does not hold the key", what,
                  (long long)a);
    ck_assert_msg(x->v.lm[a] == emc__lm_make((uint32_t)(k & EMC__LOC_MAX), (uint32_t)(k >> 20) & ~EMC__META_FLAGS) &&
                      x->v.stamps[a] == (uint16_t)(k * 7u),
                  "%s: key %llx lost its entry word or stamp", what, (unsigned long long)k);
  }
  for (i = 0; i < 200; i++) {
    uint64_t k = rand_key(x->v.key_bits);
    int64_t a, b;
    if (model_find(x, k) >= 0) continue;
    a = emc__index_find(&x->v, k);
    b = emc__index_find_masks(&x->v, k);
    ck_assert_msg(a == -1 && b == -1 && emc__hix_find(&x->v, k) == -1,
                  "%s: absent key %llx found at %lld / %lld / %lld", what,
                  (unsigned long long)k, (long long)a, (long long)b,
                  (long long)emc__hix_find(&x->v, k));
  }
}

/* Re-pack every cluster once (as a full sweep does), checking the tombstone count drops to 0. */
static void tix_repack_all(tix *x) {
  uint64_t nb = x->v.n_buckets, b, i, tombs_before = 0, dropped = 0;
  uint64_t *tk = malloc(x->n * 8), *tl = malloc(x->n * 8);
  uint16_t *ts = malloc(x->n * 2);
  uint8_t *start = calloc(nb, 1);
  ck_assert(tk && tl && ts && start);
  for (i = 0; i < x->n; i++) tombs_before += emc__ix_key(&x->v, i) == emc__key_tomb(x->v.key_bits);
  /* cluster starts are marked before anything moves, as the device step does */
  for (b = 0; b < nb; b++) start[b] = (uint8_t)emc__bucket_has_empty(&x->v, (b + nb - 1) % nb);
  for (b = 0; b < nb; b++) {
    uint64_t len;
    if (!start[b]) continue;
    len = emc__index_cluster_len(&x->v, b, nb);
    if (len == 0) continue;
    dropped += emc__index_repack(&x->v, b, len, tk, tl, ts);
  }
  ck_assert_uint_eq(dropped, tombs_before);
  for (i = 0; i < x->n; i++)
    ck_assert_msg(emc__ix_key(&x->v, i) != emc__key_tomb(x->v.key_bits), "tombstone left at %llu",
                  (unsigned long long)i);
  free(tk);
  free(tl);
  free(ts);
  free(start);
}

/* ------------------------------------------------------------------ probe */
START_TEST(probe_random_loads) {
  static const double loads[] = {0.3, 0.7, 0.92, 0.99, 1.0};
  uint32_t kb;
  for (kb = 32; kb <= 64; kb += 32) {
    size_t li;
    for (li = 0; li < sizeof loads / sizeof loads[0]; li++) {
      tix x;
      uint64_t target, i;
      tix_init(&x, 1 + emct_rng_below(&R, 64), kb);
      target = (uint64_t)(loads[li] * (double)x.n);
      if (target >= x.n) target = x.n - 1; /* keep one EMPTY slot: absent probes must end */
      for (i = 0; i < target; i++) {
        uint64_t k = rand_key(kb);
        if (model_find(&x, k) < 0) tix_insert(&x, k);
      }
      tix_check(&x, "random fill");
      tix_free(&x);
    }
  }
}
END_TEST

START_TEST(probe_full_buckets_and_wrap) {
  uint32_t kb;
  for (kb = 32; kb <= 64; kb += 32) {
    tix x;
    uint64_t nb = 6, i;
    tix_init(&x, nb, kb);
    /* 20 keys homed in the last bucket: they fill it and wrap round into buckets 0, 1 */
    for (i = 0; i < 20; i++) tix_insert(&x, key_homed(&x, nb - 1));
    tix_check(&x, "wrap");
    ck_assert(!emc__bucket_has_empty(&x.v, nb - 1) && !emc__bucket_has_empty(&x.v, 0));
    /* tombstones in the full buckets: the keys behind them are still found */
    for (i = 0; i < 5; i++) tix_remove(&x, emct_rng_below(&R, x.n_present));
    tix_check(&x, "wrap with tombstones");
    /* a key homed in a full bucket whose path is all tombstones and entries still ends */
    tix_insert(&x, key_homed(&x, nb - 1));
    tix_check(&x, "reuse of a tombstone");
    tix_free(&x);
  }
}
END_TEST

/* The vector probe compares a 64-bit key as two 32-bit halves, and 32-bit keys in 16-bit
 * packs: keys that share one half with a present key, or with EMPTY, must neither match it
 * nor end the probe. */
START_TEST(probe_half_matches) {
  uint32_t kb;
  for (kb = 32; kb <= 64; kb += 32) {
    tix x;
    uint64_t nb = 4, i, lo_ones = kb == 64 ? 0xffffffffull : 0xffffull;
    tix_init(&x, nb, kb);
    /* present keys with one half all ones (like EMPTY's), homed together so buckets fill */
    for (i = 0; i < 3 * EMC__BUCKET; i++) {
      uint64_t k;
      do {
        k = key_homed(&x, i % 2);
        k = i % 3 == 0 ? k | lo_ones : i % 3 == 1 ? k | (emc__key_mask(kb) & ~lo_ones) : k;
      } while (k == emc__key_empty(kb) || k == emc__key_tomb(kb) || model_find(&x, k) >= 0 ||
               emc__home_bucket(k, nb) != i % 2);
      tix_insert(&x, k);
    }
    tix_check(&x, "halves like EMPTY's");
    /* absent keys that share one half with a present key */
    for (i = 0; i < x.n_present; i++) {
      uint64_t k = x.present[i], v[3] = {k ^ 1u, k ^ (lo_ones + 1u), k ^ ((lo_ones + 1u) | 1u)};
      unsigned j;
      for (j = 0; j < 3; j++) {
        uint64_t q = v[j] & emc__key_mask(kb);
        int64_t want;
        if (q == emc__key_empty(kb) || q == emc__key_tomb(kb)) continue;
        want = emc__index_find(&x.v, q);
        ck_assert_msg(emc__hix_find(&x.v, q) == want, "%u-bit key %llx (one half of %llx): "
                      "vector probe %lld, reference %lld", kb, (unsigned long long)q,
                      (unsigned long long)k, (long long)emc__hix_find(&x.v, q), (long long)want);
        ck_assert_int_eq(want >= 0, model_find(&x, q) >= 0);
      }
    }
    tix_free(&x);
  }
}
END_TEST

/* Random inserts and removes at high load (tombstones pile up in full buckets), re-packed now
 * and then: both probes agree with the model throughout. */
START_TEST(probe_tombstones_and_repack) {
  uint32_t kb;
  for (kb = 32; kb <= 64; kb += 32) {
    int round;
    for (round = 0; round < 6; round++) {
      tix x;
      uint64_t i, cap;
      tix_init(&x, 8 + emct_rng_below(&R, 40), kb);
      cap = x.n * 9 / 10;
      /* single-threaded: a sanitizer adds little here and costs much (ThreadSanitizer ran
       * this test for about a minute), so its builds take a quarter of the operations */
      for (i = 0; i < emct_scale(4000, 4); i++) {
        uint64_t op = emct_rng_below(&R, 10);
        if (op < 5 && x.n_present < cap) {
          /* often a key of a crowded home bucket */
          uint64_t k = emct_rng_below(&R, 3) == 0 ? key_homed(&x, emct_rng_below(&R, 3)) : rand_key(kb);
          if (model_find(&x, k) < 0) tix_insert(&x, k);
        } else if (op < 9 && x.n_present > 0) {
          tix_remove(&x, emct_rng_below(&R, x.n_present));
        } else {
          tix_repack_all(&x);
        }
        if (i % 97 == 0) tix_check(&x, "churn");
        /* the writers' rule: never fill the last EMPTY slots (a re-pack sweep runs first) */
        {
          uint64_t j, empties = 0;
          for (j = 0; j < x.n; j++) empties += emc__ix_key(&x.v, j) == emc__key_empty(kb);
          if (empties < x.v.n_buckets) tix_repack_all(&x);
        }
      }
      tix_check(&x, "churn end");
      tix_repack_all(&x);
      tix_check(&x, "after the last re-pack");
      tix_free(&x);
    }
  }
}
END_TEST

/* ------------------------------------------------------------------ bitmap */
/* Twin of dev.cuh's warp_bitmap_nth: lanes hold one word each of a 32-word chunk, an
 * inclusive prefix of their popcounts finds the lane of the k-th bit, then its word. */
static int64_t warp_nth_twin(const uint64_t *words, uint32_t n_words, uint32_t k) {
  uint32_t base;
  for (base = 0; base < n_words; base += 32) {
    uint64_t x[32];
    uint32_t incl[32], c[32], lane, total;
    for (lane = 0; lane < 32; lane++) {
      x[lane] = base + lane < n_words ? words[base + lane] : 0;
      c[lane] = emc__popc64(x[lane]);
      incl[lane] = c[lane] + (lane ? incl[lane - 1] : 0);
    }
    total = incl[31];
    if (k < total) {
      for (lane = 0; lane < 32; lane++)
        if (k >= incl[lane] - c[lane] && k < incl[lane]) {
          uint32_t kk = k - (incl[lane] - c[lane]), b;
          for (b = 0; b < 64; b++)
            if (x[lane] >> b & 1u) {
              if (kk == 0) return (int64_t)(base + lane) * 64 + b;
              kk--;
            }
        }
    }
    k -= total;
  }
  return -1;
}

START_TEST(bitmap_nth) {
  int round;
  for (round = 0; round < 300; round++) {
    uint32_t n_slots = 1 + (uint32_t)emct_rng_below(&R, 3000), n_words = (n_slots + 63) / 64, i, set = 0;
    uint64_t *w = calloc(n_words, 8);
    uint32_t density = (uint32_t)emct_rng_below(&R, 101);
    ck_assert(w);
    if (round % 5 == 0) {
      emc__bitmap_fill(w, n_words, n_slots);
    } else {
      for (i = 0; i < n_slots; i++)
        if (emct_rng_below(&R, 100) < density) w[i / 64] |= 1ull << (i % 64);
    }
    for (i = 0; i < n_slots; i++) set += (uint32_t)(w[i / 64] >> (i % 64) & 1u);
    if (round % 5 == 0) ck_assert_uint_eq(set, n_slots);
    {
      uint32_t k = 0, b;
      for (b = 0; b < n_words * 64; b++) {
        if (!(w[b / 64] >> (b % 64) & 1u)) continue;
        ck_assert_int_eq(emc__bitmap_nth(w, n_words, k), (int64_t)b);
        ck_assert_int_eq(warp_nth_twin(w, n_words, k), (int64_t)b);
        k++;
      }
      ck_assert_uint_eq(k, set);
      ck_assert_int_eq(emc__bitmap_nth(w, n_words, set), -1);
      ck_assert_int_eq(warp_nth_twin(w, n_words, set), -1);
    }
    free(w);
  }
}
END_TEST

/* ------------------------------------------------------------------ miss set */
START_TEST(missset_first_occurrence) {
  uint32_t kb;
  for (kb = 32; kb <= 64; kb += 32) {
    uint64_t mask = 1023, *set = calloc(mask + 1, 8), keys[600], i, j;
    uint32_t epoch;
    ck_assert(set);
    for (epoch = 1; epoch <= 5; epoch++) { /* the set is never cleared between epochs */
      for (i = 0; i < 600; i++) keys[i] = i > 0 && emct_rng_below(&R, 3) == 0 ? keys[emct_rng_below(&R, i)] : rand_key(kb);
      for (i = 0; i < 600; i++) {
        int first = 1, got;
        uint64_t wi = emc__missset_word(epoch, keys[i], kb);
        for (j = 0; j < i; j++)
          if (emc__missset_word(epoch, keys[j], kb) == wi) first = 0;
        got = emc__missset_insert(set, mask, epoch, keys[i], kb);
        ck_assert_msg(got == first, "epoch %u, key %llu (%llx): insert said %d, first is %d", epoch,
                      (unsigned long long)i, (unsigned long long)keys[i], got, first);
      }
    }
    /* 32-bit keys are their own fingerprint: exact */
    if (kb == 32) ck_assert_uint_eq(emc__missset_word(3, 0xabcdefu, 32), (3ull << 32) | 0xabcdefu);
    /* a full set refuses instead of looping */
    memset(set, 0, (mask + 1) * 8);
    for (i = 0; i <= mask; i++) ck_assert_int_eq(emc__missset_insert(set, mask, 7, 1000 + i, 32), 1);
    ck_assert_int_eq(emc__missset_insert(set, mask, 7, 5000, 32), 0);
    free(set);
  }
}
END_TEST

typedef struct mrace {
  uint64_t *set, mask;
  const uint64_t *keys;
  uint64_t n;
  int *firsts; /* per key index: how many threads were told "first" */
} mrace;

static void *mrace_main(void *arg) {
  mrace *m = arg;
  uint64_t i;
  for (i = 0; i < m->n; i++)
    if (emc__missset_insert(m->set, m->mask, 9, m->keys[i], 32))
      __atomic_fetch_add(&m->firsts[m->keys[i] - 1], 1, __ATOMIC_RELAXED);
  return NULL;
}

START_TEST(missset_racing_threads) {
  enum { NT = 4, NK = 3000 };
  uint64_t mask = 8191, *set = calloc(mask + 1, 8), keys[NT][NK], t, i;
  int *firsts = calloc(NK, sizeof *firsts);
  pthread_t th[NT];
  mrace m[NT];
  ck_assert(set && firsts);
  for (t = 0; t < NT; t++)
    for (i = 0; i < NK; i++) keys[t][i] = 1 + emct_rng_below(&R, NK); /* heavy overlap */
  for (t = 0; t < NT; t++) {
    m[t].set = set;
    m[t].mask = mask;
    m[t].keys = keys[t];
    m[t].n = NK;
    m[t].firsts = firsts;
    ck_assert_int_eq(pthread_create(&th[t], NULL, mrace_main, &m[t]), 0);
  }
  for (t = 0; t < NT; t++) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
  for (i = 0; i < NK; i++) {
    int seen = 0;
    for (t = 0; t < NT && !seen; t++) {
      uint64_t j;
      for (j = 0; j < NK; j++)
        if (keys[t][j] == i + 1) {
          seen = 1;
          break;
        }
    }
    ck_assert_msg(firsts[i] == seen, "key %llu: %d threads were told first (seen %d)",
                  (unsigned long long)(i + 1), firsts[i], seen);
  }
  free(set);
  free(firsts);
}
END_TEST

/* ------------------------------------------------------------------ planner */
/* Twin of k_plan's planning (admit.cu, dev.cuh table_scan): tables in chunks of `block`, an
 * exclusive prefix of need * stride inside each chunk (the block scan), a carry between
 * chunks, and emc__plan_allow on each table's prefix. */
static void plan_twin(uint32_t n, const uint32_t *need, const uint32_t *stride, uint64_t room,
                      uint32_t block, uint32_t *allow) {
  uint64_t carry = 0;
  uint32_t t0;
  for (t0 = 0; t0 < n; t0 += block) {
    uint64_t excl = 0, total = 0;
    uint32_t i;
    for (i = 0; i < block; i++) total += t0 + i < n ? (uint64_t)need[t0 + i] * stride[t0 + i] : 0;
    for (i = 0; i < block && t0 + i < n; i++) {
      uint32_t t = t0 + i;
      allow[t] = emc__plan_allow(room, carry + excl, need[t], stride[t]);
      excl += (uint64_t)need[t] * stride[t];
    }
    carry += total;
  }
}

START_TEST(planner_scan) {
  int round;
  for (round = 0; round < 400; round++) {
    uint32_t n = 1 + (uint32_t)emct_rng_below(&R, round % 10 == 0 ? 4096 : 100), t;
    uint32_t *need = malloc(n * 4), *stride = malloc(n * 4), *allow = malloc(n * 4);
    uint64_t room = round % 7 == 0 ? 0 : emct_rng_below(&R, 1ull << (10 + round % 30)), prefix = 0;
    ck_assert(need && stride && allow);
    for (t = 0; t < n; t++) {
      need[t] = emct_rng_below(&R, 3) == 0 ? 0 : (uint32_t)emct_rng_below(&R, round % 11 == 0 ? 0xffffffffull : 5000);
      stride[t] = 4u << emct_rng_below(&R, 12);
    }
    plan_twin(n, need, stride, room, round % 2 ? 1024 : 256, allow);
    for (t = 0; t < n; t++) { /* the sequential definition */
      uint64_t left = room > prefix ? room - prefix : 0, fit = left / stride[t];
      uint32_t want = (uint32_t)(fit < need[t] ? fit : need[t]);
      ck_assert_msg(allow[t] == want, "round %d table %u: twin %u, definition %u", round, t, allow[t], want);
      ck_assert(allow[t] <= need[t]);
      prefix += (uint64_t)need[t] * stride[t];
    }
    free(need);
    free(stride);
    free(allow);
  }
}
END_TEST

/* ------------------------------------------------------------------ entry words */
START_TEST(entry_word_validation) {
  uint64_t lm = emc__lm_make(1234, 40 * EMC__META_STEP);
  ck_assert(emc__lm_same(lm, lm));
  ck_assert(emc__lm_same(lm, lm | EMC__LM_DIRTY));
  ck_assert(emc__lm_same(lm | EMC__LM_DIRTY, lm | EMC__LM_PIN_ONE));
  ck_assert(!emc__lm_same(lm | EMC__LM_BUSY, lm | EMC__LM_BUSY));
  ck_assert(!emc__lm_same(lm, lm | EMC__LM_BUSY));
  ck_assert(!emc__lm_same(lm, emc__lm_make(1235, 40 * EMC__META_STEP)));
  ck_assert(!emc__lm_same(lm, emc__lm_make(1234, 41 * EMC__META_STEP)));
  ck_assert(emc__lm_same(lm, lm + 15 * EMC__LM_PIN_ONE));
  ck_assert_uint_eq(emc__lm_pins(lm + 3 * EMC__LM_PIN_ONE), 3);
  ck_assert(!emc__lm_same(EMC__LM_FREE, EMC__LM_FREE));
  ck_assert_uint_eq(emc__lm_loc(lm), 1234);
  ck_assert_uint_eq(emc__lm_meta(lm), 40u * EMC__META_STEP);
  ck_assert_uint_eq(emc__index_entry_bytes(32), 14);
  ck_assert_uint_eq(emc__index_entry_bytes(64), 18);
}
END_TEST

/* LRU stamps a later call wrote (a lookup that began after the writer read the clock) count
 * as the youngest, not, mod 2^16, as the oldest: ages, then a host pass run with such stamps
 * in place (before the fix the pass evicted exactly those rows first). */
START_TEST(stamps_ahead_of_the_pass) {
  static const emc_table_desc T1[1] = {{"D", EMC_TABLE_DENSE, 4096, 4, EMC_DTYPE_F32, EMC_STATE_NONE}};
  const uint64_t nows[] = {5, 65535, 70000, 1u << 20};
  emc_store *st;
  emc_cache *c;
  emc_cache_config cfg;
  emc__cache_debug d0, d1;
  uint64_t ids[512], off[2], clock, i, hot = 10, fill, fresh = 200;
  uint8_t where[512];
  float *out = malloc(512 * 16);
  size_t k;
  ck_assert_ptr_nonnull(out);
  for (k = 0; k < sizeof nows / sizeof *nows; k++) {
    uint64_t now = nows[k];
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now)), 0);
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now + 1)), 0);
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now + EMC__STAMP_AHEAD - 1)), 0);
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now - 1)), 1);
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now - EMC__AGE_CLAMP)), EMC__AGE_CLAMP);
    ck_assert_uint_eq(emc__stamp_age(now, emc__stamp_of(now - 3 * EMC__AGE_CLAMP / 2)),
                      3 * EMC__AGE_CLAMP / 2);
  }
  EMCT_OK(emc_store_create(T1, 1, &st));
  EMCT_OK(emc_store_fill_uniform(st, 0, -1.0f, 1.0f, 7));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 300 * 16; /* rows of 16 bytes: about 300 slots */
  EMCT_OK(emc_cache_create(st, &cfg, &c));
  /* fill to just below t1, one row per call (each older than the next) */
  fill = (uint64_t)(0.95 * 300) - 20;
  for (i = 0; i < fill; i++) {
    off[0] = 0, off[1] = 1;
    EMCT_OK(emc_lookup(c, &i, off, out, NULL));
  }
  /* the hot rows 0..9 were the oldest; a later call stamps them, ahead of the clock */
  clock = __atomic_load_n(&c->host->clock, __ATOMIC_RELAXED);
  for (i = 0; i < hot; i++) {
    uint64_t key = emc__global_key(&c->codec.tables[0], i, c->codec.hash_seed);
    int64_t pos = emc__index_find(&c->host->ix, key);
    ck_assert_int_ge(pos, 0);
    c->host->ix.stamps[pos] = emc__stamp_of(clock + 2);
  }
  /* one call of fresh rows: its admissions run a pass (at clock + 1) */
  EMCT_OK(emc__cache_get_debug(c, &d0));
  for (i = 0; i < fresh; i++) ids[i] = 1000 + i;
  off[0] = 0, off[1] = fresh;
  EMCT_OK(emc_lookup(c, ids, off, out, NULL));
  EMCT_OK(emc__cache_get_debug(c, &d1));
  ck_assert_msg(d1.passes > d0.passes, "no eviction pass ran");
  for (i = 0; i < hot; i++) ids[i] = i;
  off[0] = 0, off[1] = hot;
  EMCT_OK(emc_lookup_ex(c, ids, off, out, where, NULL));
  for (i = 0; i < hot; i++)
    ck_assert_msg(where[i] == EMC_WHERE_CACHE,
                  "row %llu, stamped by a later call, was evicted by the pass (where %u)",
                  (unsigned long long)i, where[i]);
  EMCT_OK(emc__cache_check(c));
  emc_cache_destroy(c);
  emc_store_destroy(st);
  free(out);
}
END_TEST

int main(void) {
  Suite *s = suite_create("index");
  TCase *tc = tcase_create("twins");
  SRunner *sr;
  int failed;
  emct_rng_seed(&R, 20261123);
  tcase_add_test(tc, probe_random_loads);
  tcase_add_test(tc, probe_full_buckets_and_wrap);
  tcase_add_test(tc, probe_half_matches);
  tcase_add_test(tc, probe_tombstones_and_repack);
  tcase_add_test(tc, bitmap_nth);
  tcase_add_test(tc, missset_first_occurrence);
  tcase_add_test(tc, missset_racing_threads);
  tcase_add_test(tc, planner_scan);
  tcase_add_test(tc, entry_word_validation);
  tcase_add_test(tc, stamps_ahead_of_the_pass);
  tcase_set_timeout(tc, emct_timeout(120));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
