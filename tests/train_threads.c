/*
 * train_threads.c: a trainer beside readers.
 * Part of test_train / test_gpu_train (train_common.h; the suite's comment in test_train.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

/* ------------------------------------------------------------------ threads
 * GPU build: every thread has its own stream and device buffers (ids, gradients, out, dedup's
 * outputs; offsets on the host); the trainer waits for its stream after each apply before it
 * counts the step done, a reader after each lookup or dedup before it checks. */
#define TH_READERS 3
static const mtab TH_TABLES[2] = {{EMC_TABLE_DENSE, 3000, 0, 0, 8, EMC_DTYPE_F32},
                                  {EMC_TABLE_HASHED, 2000, 1500, 1500, 4, EMC_DTYPE_F32}};

typedef struct th_shared {
  model *m;
  emc_cache *c;
  uint64_t *started[2], *done[2]; /* per rank: increments begun / finished (atomic) */
  uint64_t low;
  int stop;                       /* atomic: the trainer finished */
} th_shared;

typedef struct th_worker {
  th_shared *sh;
  uint32_t index;
  emct_rng rng;
  char fail[512];
  uint64_t rows_checked, iters;
#ifdef EMCT_GPU
  cudaStream_t st;
  void *ids, *grads, *out, *uids, *uoffs, *inv; /* device buffers: two batches of MAX_T x 64 ids */
#endif
} th_worker;

/* Trainer steps: 400 (50 under a sanitizer); on the model of the device 40 (20). */
static uint64_t th_iters(void) { return emct_gpu_quick() ? emct_scale(40, 2) : emct_scale(400, 8); }

#ifdef EMCT_GPU
static int th_dev_init(th_worker *w) {
  const size_t n = 2 * MAX_T * 64;
  return cudaStreamCreateWithFlags(&w->st, cudaStreamNonBlocking) == cudaSuccess &&
         cudaMalloc(&w->ids, n * 8) == cudaSuccess && cudaMalloc(&w->grads, n * 8 * 4) == cudaSuccess &&
         cudaMalloc(&w->out, n * 8 * 4) == cudaSuccess && cudaMalloc(&w->uids, n * 8) == cudaSuccess &&
         cudaMalloc(&w->uoffs, (MAX_T + 1) * 8) == cudaSuccess && cudaMalloc(&w->inv, n * 4) == cudaSuccess;
}

static void th_dev_free(th_worker *w) {
  if (w->st) cudaStreamDestroy(w->st);
  cudaFree(w->ids);
  cudaFree(w->grads);
  cudaFree(w->out);
  cudaFree(w->uids);
  cudaFree(w->uoffs);
  cudaFree(w->inv);
}
#endif

static float th_base(uint32_t t, uint64_t r, uint32_t j) {
  return (float)((t * 131u + r * 7u + j * 3u) % 997u);
}

static void th_fail(th_worker *w, const char *msg) {
  if (!w->fail[0]) snprintf(w->fail, sizeof w->fail, "%s", msg);
}

/* Trainer: prefetch(i + 1), apply(i) with SGD lr = -1 and gradients 1: every position adds 1
 * to its row (w = fmaf(1, g, w) = w + g, exact on these small integers). */
static void *th_trainer(void *arg) {
  th_worker *w = arg;
  th_shared *sh = w->sh;
  model *m = sh->m;
  batch b[2];
  emc_optimizer o;
  uint64_t it, iters = th_iters(), p;
  uint32_t t;
  char msg[256];
#ifdef EMCT_GPU
  const size_t half = MAX_T * 64; /* ids (and gradient rows of 8 floats) of one batch */
#endif
  emc_optimizer_init(&o);
  o.lr = -1.0f;
  batch_alloc(&b[0], m, 64);
  batch_alloc(&b[1], m, 64);
  batch_make(&b[0], m, 64);
#ifdef EMCT_GPU
  if (cudaMemcpyAsync(w->ids, b[0].ids, b[0].n * 8, cudaMemcpyHostToDevice, w->st) != cudaSuccess)
    th_fail(w, "trainer: ids copy failed");
#endif
  for (it = 0; it < iters && !w->fail[0]; it++) {
    batch *cur = &b[it & 1], *nxt = &b[(it + 1) & 1];
    emc_status st;
    emc_stats s;
    batch_make(nxt, m, 64);
#ifdef EMCT_GPU
    /* (this buffer's last reader, the apply before, has completed: the stream was waited for) */
    if (cudaMemcpyAsync((uint64_t *)w->ids + ((it + 1) & 1) * half, nxt->ids, nxt->n * 8,
                        cudaMemcpyHostToDevice, w->st) != cudaSuccess)
      th_fail(w, "trainer: ids copy failed");
    st = emc_prefetch(sh->c, (uint64_t *)w->ids + ((it + 1) & 1) * half, nxt->offsets, w->st);
#else
    st = emc_prefetch(sh->c, nxt->ids, nxt->offsets, NULL);
#endif
    if (st != EMC_OK && st != EMC_ECAPACITY) {
      snprintf(msg, sizeof msg, "prefetch: %s", emc_status_name(st));
      th_fail(w, msg);
    }
    for (p = 0; p < cur->grad_floats; p++) cur->grads[p] = 1.0f;
    for (t = 0; t < m->n; t++)
      for (p = cur->offsets[t]; p < cur->offsets[t + 1]; p++)
        __atomic_fetch_add(&sh->started[t][cur->ranks[p]], 1, __ATOMIC_RELEASE);
#ifdef EMCT_GPU
    if (cudaMemcpyAsync((float *)w->grads + (it & 1) * half * 8, cur->grads, cur->grad_floats * 4,
                        cudaMemcpyHostToDevice, w->st) != cudaSuccess)
      th_fail(w, "trainer: gradients copy failed");
    st = emc_apply_gradients(sh->c, (uint64_t *)w->ids + (it & 1) * half, cur->offsets,
                             (float *)w->grads + (it & 1) * half * 8, &o, w->st);
    /* the update is done once the stream (which waits for the cache's writer call) is */
    if (st == EMC_OK && cudaStreamSynchronize(w->st) != cudaSuccess) th_fail(w, "trainer: stream failed");
#else
    st = emc_apply_gradients(sh->c, cur->ids, cur->offsets, cur->grads, &o, NULL);
#endif
    if (st != EMC_OK) {
      snprintf(msg, sizeof msg, "apply: %s (%s)", emc_status_name(st), emc_last_error_detail());
      th_fail(w, msg);
    }
    for (t = 0; t < m->n; t++)
      for (p = cur->offsets[t]; p < cur->offsets[t + 1]; p++)
        __atomic_fetch_add(&sh->done[t][cur->ranks[p]], 1, __ATOMIC_RELEASE);
    if (emc_get_stats(sh->c, &s) != EMC_OK || s.pinned_bytes > sh->low) th_fail(w, "pinned bytes over budget");
    w->iters++;
  }
  { /* what the device refused of the asynchronous calls (CUDA backend), before the readers stop */
    emc_status st = emc_flush(sh->c, NULL);
    if (st != EMC_OK && !(st == EMC_ECAPACITY && strstr(emc_last_error_detail(), "pin budget"))) {
      snprintf(msg, sizeof msg, "flush: %s (%s)", emc_status_name(st), emc_last_error_detail());
      th_fail(w, msg);
    }
  }
  __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
  batch_free(&b[0]);
  batch_free(&b[1]);
  return NULL;
}

/* Reader: lookups of random batches; each row is whole (one increment count k for every
 * element) and done-before <= k <= started-after. Now and then a dedup of its batch. */
static void *th_reader(void *arg) {
  th_worker *w = arg;
  th_shared *sh = w->sh;
  model *m = sh->m;
  uint64_t ids[2 * 48], ranks[2 * 48], lo[2 * 48], offs[3], uids[96], uoffs[3];
  uint32_t inv[96];
  float out[2 * 48 * 8];
  char msg[256];
  /* at least one batch, even when this thread first runs after the trainer has finished
   * (on a loaded machine it may get no time before: the test asserts that each reader
   * checked rows) */
  do {
    uint64_t k = 0, p;
    uint32_t t, j;
    const float *row = out;
    offs[0] = 0;
    for (t = 0; t < 2; t++) {
      uint64_t n = 1 + emct_rng_below(&w->rng, 48), i;
      for (i = 0; i < n; i++, k++) {
        ranks[k] = emct_rng_below(&w->rng, m->tb[t].universe);
        ids[k] = id_of(m, t, ranks[k]);
        lo[k] = __atomic_load_n(&sh->done[t][ranks[k]], __ATOMIC_ACQUIRE);
      }
      offs[t + 1] = k;
    }
#ifdef EMCT_GPU
    if (cudaMemcpyAsync(w->ids, ids, k * 8, cudaMemcpyHostToDevice, w->st) != cudaSuccess ||
        emc_lookup(sh->c, w->ids, offs, w->out, w->st) != EMC_OK ||
        cudaMemcpyAsync(out, w->out, (offs[1] * m->tb[0].dim + (k - offs[1]) * m->tb[1].dim) * 4,
                        cudaMemcpyDeviceToHost, w->st) != cudaSuccess ||
        cudaStreamSynchronize(w->st) != cudaSuccess) {
      th_fail(w, "lookup failed");
      break;
    }
#else
    if (emc_lookup(sh->c, ids, offs, out, NULL) != EMC_OK) {
      th_fail(w, "lookup failed");
      break;
    }
#endif
    for (t = 0; t < 2; t++)
      for (p = offs[t]; p < offs[t + 1]; p++, row += m->tb[t].dim) {
        uint64_t hi = __atomic_load_n(&sh->started[t][ranks[p]], __ATOMIC_ACQUIRE);
        float kf = row[0] - th_base(t, ranks[p], 0);
        for (j = 1; j < m->tb[t].dim; j++)
          if (row[j] - th_base(t, ranks[p], j) != kf) break;
        if (j < m->tb[t].dim || kf < (float)lo[p] || kf > (float)hi) {
          snprintf(msg, sizeof msg,
                   "table %u rank %llu: element %u gives %g increments, element 0 %g; allowed "
                   "[%llu, %llu]",
                   t, (unsigned long long)ranks[p], j, j < m->tb[t].dim ? (double)(row[j] - th_base(t, ranks[p], j)) : (double)kf,
                   (double)kf, (unsigned long long)lo[p], (unsigned long long)hi);
          th_fail(w, msg);
          break;
        }
        w->rows_checked++;
      }
    if (emct_rng_below(&w->rng, 8) == 0) {
#ifdef EMCT_GPU
      /* (ids are still in w->ids: the lookup's stream was waited for) */
      if (emc_dedup(sh->c, w->ids, offs, w->uids, w->uoffs, w->inv, w->st) != EMC_OK ||
          cudaMemcpyAsync(uids, w->uids, k * 8, cudaMemcpyDeviceToHost, w->st) != cudaSuccess ||
          cudaMemcpyAsync(uoffs, w->uoffs, 3 * 8, cudaMemcpyDeviceToHost, w->st) != cudaSuccess ||
          cudaMemcpyAsync(inv, w->inv, k * 4, cudaMemcpyDeviceToHost, w->st) != cudaSuccess ||
          cudaStreamSynchronize(w->st) != cudaSuccess) {
        th_fail(w, "dedup failed");
        break;
      }
#else
      if (emc_dedup(sh->c, ids, offs, uids, uoffs, inv, NULL) != EMC_OK) th_fail(w, "dedup failed");
#endif
      if (uoffs[0] != 0 || uoffs[1] > offs[1] || uoffs[2] < uoffs[1] || uoffs[2] - uoffs[1] > k - offs[1])
        th_fail(w, "dedup offsets wrong");
      for (p = 0; p < k; p++)
        if (inv[p] >= uoffs[2] || uids[inv[p]] != ids[p] || (inv[p] < uoffs[1]) != (p < offs[1]))
          th_fail(w, "dedup inverse wrong");
    }
    w->iters++;
  } while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE) && !w->fail[0]);
  return NULL;
}

START_TEST(trainer_and_readers_concurrently) {
  model m;
  th_shared sh;
  th_worker wk[TH_READERS + 1];
  pthread_t th[TH_READERS + 1];
  uint32_t t, j, i;
  emc_cache *c;
  uint64_t r;
  /* the store: integer rows (th_base), every hashed rank present */
  memset(&m, 0, sizeof m);
  model_init(&m, TH_TABLES, 2, EMC_STATE_NONE, 90);
  for (t = 0; t < 2; t++)
    for (r = 0; r < m.tb[t].universe; r++) {
      float row[8];
      uint64_t id = id_of(&m, t, r);
      for (j = 0; j < m.tb[t].dim; j++) row[j] = th_base(t, r, j);
      EMCT_OK(emc_store_write(m.store, t, &id, 1, row));
    }
  c = make_cache(&m, 24u << 10, 1); /* about 600 rows: constant eviction */
  memset(&sh, 0, sizeof sh);
  sh.m = &m;
  sh.c = c;
  sh.low = low_bytes_of(c, 24u << 10);
  for (t = 0; t < 2; t++) {
    sh.started[t] = calloc(m.tb[t].universe, 8);
    sh.done[t] = calloc(m.tb[t].universe, 8);
    ck_assert(sh.started[t] && sh.done[t]);
  }
  for (i = 0; i <= TH_READERS; i++) {
    memset(&wk[i], 0, sizeof wk[i]);
    wk[i].sh = &sh;
    wk[i].index = i;
    emct_rng_seed(&wk[i].rng, 500 + i);
#ifdef EMCT_GPU
    ck_assert_msg(th_dev_init(&wk[i]), "thread %u: no stream or device buffers", i);
#endif
    ck_assert_int_eq(pthread_create(&th[i], NULL, i == 0 ? th_trainer : th_reader, &wk[i]), 0);
  }
  for (i = 0; i <= TH_READERS; i++) pthread_join(th[i], NULL);
  for (i = 0; i <= TH_READERS; i++) ck_assert_msg(!wk[i].fail[0], "thread %u: %s", i, wk[i].fail);
  for (i = 1; i <= TH_READERS; i++) ck_assert_uint_gt(wk[i].rows_checked, 0);
#ifdef EMCT_GPU
  for (i = 0; i <= TH_READERS; i++) th_dev_free(&wk[i]);
#endif
  check_structure(c);
  EMCT_OK(emc_flush(c, NULL));
  for (t = 0; t < 2; t++) /* the store: base + every increment */
    for (r = 0; r < m.tb[t].universe; r++) {
      float row[8];
      uint64_t id = id_of(&m, t, r);
      EMCT_OK(emc_store_read(m.store, t, &id, 1, row));
      for (j = 0; j < m.tb[t].dim; j++)
        ck_assert_msg(row[j] == th_base(t, r, j) + (float)sh.done[t][r],
                      "table %u rank %llu element %u: %g, want %g", t, (unsigned long long)r, j,
                      (double)row[j], (double)(th_base(t, r, j) + (float)sh.done[t][r]));
    }
  EMCT_OK(emc_cache_destroy(c));
  for (t = 0; t < 2; t++) {
    free(sh.started[t]);
    free(sh.done[t]);
  }
  model_free(&m);
}
END_TEST

void train_threads_tests(TCase *api) {
  tcase_add_test(api, trainer_and_readers_concurrently);
}
