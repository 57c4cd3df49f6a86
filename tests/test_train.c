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
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#ifdef EMCT_GPU
#include <cuda_runtime_api.h>

#include "emc_cuda.h"
#define BACKEND EMC_BACKEND_CUDA
#else
#define BACKEND EMC_BACKEND_HOST
#endif

#define MAX_T 4u

/* ------------------------------------------------------------------ the model */
typedef struct mtab {
  emc_table_kind kind;
  uint64_t rows;     /* dense rows / hashed capacity */
  uint64_t universe; /* ranks drawn (dense: rows) */
  uint64_t present;  /* hashed: ranks written at start */
  uint32_t dim;
  emc_dtype dtype;
} mtab;

typedef struct model {
  uint32_t n;
  mtab tb[MAX_T];
  uint32_t rb[MAX_T];        /* row bytes */
  emc_row_state state;
  emc_store *store;
  unsigned char *ref[MAX_T]; /* universe * rb: rank's row now */
  float *acc[MAX_T];         /* universe: the accumulator (Adagrad) */
  uint8_t *present[MAX_T];   /* universe: the store has the id (hashed) */
  emct_zipf z[MAX_T];
  emct_perm perm[MAX_T];
  emct_rng rng;
} model;

static uint64_t id_of(const model *m, uint32_t t, uint64_t r) {
  return m->tb[t].kind == EMC_TABLE_DENSE ? r : emc__fmix64(r ^ ((uint64_t)(t + 1) << 52));
}

static void model_init(model *m, const mtab *tb, uint32_t n, emc_row_state state, uint64_t seed) {
  emc_table_desc d[MAX_T];
  uint32_t t;
  memset(m, 0, sizeof *m);
  m->n = n;
  m->state = state;
  emct_rng_seed(&m->rng, seed);
  for (t = 0; t < n; t++) {
    m->tb[t] = tb[t];
    if (tb[t].kind == EMC_TABLE_DENSE) m->tb[t].universe = tb[t].rows;
    m->rb[t] = tb[t].dim * (uint32_t)emc_dtype_size(tb[t].dtype);
    d[t] = (emc_table_desc){NULL, tb[t].kind, tb[t].rows, tb[t].dim, tb[t].dtype, state};
  }
  EMCT_OK(emc_store_create(d, n, &m->store));
  for (t = 0; t < n; t++) {
    uint64_t u = m->tb[t].universe, r;
    m->ref[t] = calloc(u, m->rb[t]);
    m->acc[t] = calloc(u, sizeof(float));
    m->present[t] = calloc(u, 1);
    ck_assert(m->ref[t] && m->acc[t] && m->present[t]);
    ck_assert_int_eq(emct_zipf_init(&m->z[t], u, 1.05), 0);
    emct_perm_init(&m->perm[t], u, seed + t);
    if (tb[t].kind == EMC_TABLE_DENSE) {
      EMCT_OK(emc_store_fill_uniform(m->store, t, -1.0f, 1.0f, seed));
      for (r = 0; r < u; r++) m->present[t][r] = 1;
    } else {
      for (r = 0; r < m->tb[t].present; r++) {
        uint64_t id = id_of(m, t, r);
        EMCT_OK(emc_uniform_row(seed, t, id, -1.0f, 1.0f, tb[t].dim, tb[t].dtype, m->ref[t] + r * m->rb[t]));
        EMCT_OK(emc_store_write(m->store, t, &id, 1, m->ref[t] + r * m->rb[t]));
        m->present[t][r] = 1;
      }
    }
    for (r = 0; r < u; r++) { /* the reference is what the store holds */
      uint64_t id = id_of(m, t, r);
      EMCT_OK(emc_store_read(m->store, t, &id, 1, m->ref[t] + r * m->rb[t]));
    }
  }
}

static void model_free(model *m) {
  uint32_t t;
  emc_store_destroy(m->store);
  for (t = 0; t < m->n; t++) {
    free(m->ref[t]);
    free(m->acc[t]);
    free(m->present[t]);
  }
}

/* Slot bytes of every row of the universes. */
static uint64_t model_bytes(const model *m) {
  uint64_t b = 0;
  uint32_t t;
  for (t = 0; t < m->n; t++)
    b += m->tb[t].universe *
         emc__row_stride(m->state ? ((m->rb[t] + 3u) & ~3u) + 4u : m->rb[t]);
  return b;
}

/* A batch: ids grouped by table, their ranks, the gradients (f32, packed like out). */
typedef struct batch {
  uint64_t *ids, *ranks, offsets[MAX_T + 1], n;
  uint8_t *was_present; /* the id had a store row when the batch was prefetched */
  float *grads;
  size_t out_bytes, grad_floats;
} batch;

static void batch_alloc(batch *b, const model *m, uint64_t per_table) {
  uint32_t t, most = 1;
  for (t = 0; t < m->n; t++)
    if (m->tb[t].dim > most) most = m->tb[t].dim;
  b->ids = malloc(m->n * per_table * sizeof *b->ids + 8);
  b->ranks = malloc(m->n * per_table * sizeof *b->ranks + 8);
  b->grads = malloc(m->n * per_table * most * sizeof *b->grads + 8);
  b->was_present = malloc(m->n * per_table + 1);
  ck_assert(b->ids && b->ranks && b->grads && b->was_present);
}

static void batch_free(batch *b) {
  free(b->ids);
  free(b->ranks);
  free(b->grads);
  free(b->was_present);
}

static void batch_mark_present(batch *b, const model *m) {
  uint32_t t;
  uint64_t p;
  for (t = 0; t < m->n; t++)
    for (p = b->offsets[t]; p < b->offsets[t + 1]; p++) b->was_present[p] = m->present[t][b->ranks[p]];
}

/* A Zipf batch of per_table ids a table; hashed tables draw 1/8 of their ids past `present`
 * (absent until a gradient creates them). Gradients: multiples of 1/1024 in [-1, 1]. */
static void batch_make_counts(batch *b, model *m, const uint64_t *counts) {
  uint64_t k = 0, i;
  uint32_t t, j;
  b->offsets[0] = 0;
  b->out_bytes = 0;
  b->grad_floats = 0;
  for (t = 0; t < m->n; t++) {
    uint64_t per_table = counts[t];
    for (i = 0; i < per_table; i++, k++) {
      uint64_t r = emct_perm_apply(&m->perm[t], emct_zipf_sample(&m->z[t], &m->rng));
      b->ranks[k] = r;
      b->ids[k] = id_of(m, t, r);
      for (j = 0; j < m->tb[t].dim; j++)
        b->grads[b->grad_floats++] = (float)((int)emct_rng_below(&m->rng, 2049) - 1024) / 1024.0f;
    }
    b->offsets[t + 1] = k;
    b->out_bytes += per_table * m->rb[t];
  }
  b->n = k;
}

static void batch_make(batch *b, model *m, uint64_t per_table) {
  uint64_t counts[MAX_T];
  uint32_t t;
  for (t = 0; t < MAX_T; t++) counts[t] = per_table;
  batch_make_counts(b, m, counts);
}

/* The reference step: the same arithmetic, written out plainly on the plain copy. */
static void model_apply(model *m, const batch *b, const emc_optimizer *o) {
  uint32_t t, j;
  const float *g = b->grads;
  float acc[EMC_MAX_DIM];
  for (t = 0; t < m->n; t++) {
    uint64_t lo = b->offsets[t], hi = b->offsets[t + 1], p, q;
    uint32_t dim = m->tb[t].dim, rb = m->rb[t];
    for (p = lo; p < hi; p++) {
      uint64_t r = b->ranks[p], cnt = 1;
      unsigned char *row = m->ref[t] + r * rb;
      int first = 1;
      for (q = lo; q < p; q++)
        if (b->ranks[q] == r) first = 0;
      if (!first) continue;
      memcpy(acc, g + (p - lo) * dim, dim * sizeof(float));
      for (q = p + 1; q < hi; q++)
        if (b->ranks[q] == r) {
          for (j = 0; j < dim; j++) acc[j] = acc[j] + g[(q - lo) * dim + j];
          cnt++;
        }
      if (o->merge == EMC_MERGE_MEAN)
        for (j = 0; j < dim; j++) acc[j] = acc[j] / (float)cnt;
      if (!m->present[t][r]) { /* a new hashed row: zeros, accumulator 0 */
        memset(row, 0, rb);
        m->acc[t][r] = 0.0f;
        m->present[t][r] = 1;
      }
      if (o->kind == EMC_OPT_SGD) {
        for (j = 0; j < dim; j++) {
          float w = m->tb[t].dtype == EMC_DTYPE_F32 ? ((float *)(void *)row)[j]
                                                    : emc__f16_to_f32(((uint16_t *)(void *)row)[j]);
          w = fmaf(-o->lr, acc[j], w);
          if (m->tb[t].dtype == EMC_DTYPE_F32) memcpy(row + 4 * j, &w, 4);
          else {
            uint16_t h = emc__f32_to_f16(w);
            memcpy(row + 2 * j, &h, 2);
          }
        }
      } else {
        float sum = 0.0f, s, den;
        for (j = 0; j < dim; j++) sum = sum + acc[j] * acc[j];
        m->acc[t][r] = m->acc[t][r] + sum / (float)dim;
        s = o->initial_accumulator + m->acc[t][r];
        den = sqrtf(s) + o->eps;
        for (j = 0; j < dim; j++) {
          float w = m->tb[t].dtype == EMC_DTYPE_F32 ? ((float *)(void *)row)[j]
                                                    : emc__f16_to_f32(((uint16_t *)(void *)row)[j]);
          w = w - (o->lr * acc[j]) / den;
          if (m->tb[t].dtype == EMC_DTYPE_F32) memcpy(row + 4 * j, &w, 4);
          else {
            uint16_t h = emc__f32_to_f16(w);
            memcpy(row + 2 * j, &h, 2);
          }
        }
      }
    }
    g += (hi - lo) * dim;
  }
}

/* ------------------------------------------------------------------ calls
 * The host build calls with host memory; the GPU build copies ids, offsets and gradients to
 * device buffers and calls on a stream (then waits, to check the results). */
typedef struct io {
#ifdef EMCT_GPU
  cudaStream_t st;
  void *ids, *offs, *out, *where, *grads, *uids, *uoffs, *inv;
#endif
  int unused;
} io;

#ifdef EMCT_GPU
#include "gpu/cuda_ok.h"
#endif

static void io_init(io *x, size_t n, size_t out_bytes, size_t grad_floats) {
  memset(x, 0, sizeof *x);
#ifdef EMCT_GPU
  CUDA_OK(cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&x->ids, n * 8 + 8));
  CUDA_OK(cudaMalloc(&x->offs, (MAX_T + 1) * 8));
  CUDA_OK(cudaMalloc(&x->out, out_bytes + 16));
  CUDA_OK(cudaMalloc(&x->where, n + 1));
  CUDA_OK(cudaMalloc(&x->grads, grad_floats * 4 + 16));
  CUDA_OK(cudaMalloc(&x->uids, n * 8 + 8));
  CUDA_OK(cudaMalloc(&x->uoffs, (MAX_T + 1) * 8));
  CUDA_OK(cudaMalloc(&x->inv, n * 4 + 4));
#else
  (void)n;
  (void)out_bytes;
  (void)grad_floats;
#endif
}

static void io_free(io *x) {
#ifdef EMCT_GPU
  cudaStreamDestroy(x->st);
  cudaFree(x->ids);
  cudaFree(x->offs);
  cudaFree(x->out);
  cudaFree(x->where);
  cudaFree(x->grads);
  cudaFree(x->uids);
  cudaFree(x->uoffs);
  cudaFree(x->inv);
#else
  (void)x;
#endif
}

static emc_status do_prefetch(io *x, emc_cache *c, const batch *b, uint32_t n_tables) {
#ifdef EMCT_GPU
  emc_status st;
  CUDA_OK(cudaMemcpyAsync(x->ids, b->ids, b->n * 8, cudaMemcpyHostToDevice, x->st));
  CUDA_OK(cudaMemcpyAsync(x->offs, b->offsets, (n_tables + 1) * 8, cudaMemcpyHostToDevice, x->st));
  st = emc_prefetch(c, x->ids, x->offs, x->st);
  CUDA_OK(cudaStreamSynchronize(x->st));
  return st;
#else
  (void)x;
  (void)n_tables;
  return emc_prefetch(c, b->ids, b->offsets, NULL);
#endif
}

static emc_status do_lookup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, void *out,
                            uint8_t *where) {
#ifdef EMCT_GPU
  emc_status st;
  CUDA_OK(cudaMemcpyAsync(x->ids, b->ids, b->n * 8, cudaMemcpyHostToDevice, x->st));
  CUDA_OK(cudaMemcpyAsync(x->offs, b->offsets, (n_tables + 1) * 8, cudaMemcpyHostToDevice, x->st));
  st = emc_lookup_ex(c, x->ids, x->offs, x->out, x->where, x->st);
  if (st == EMC_OK) {
    CUDA_OK(cudaMemcpyAsync(out, x->out, b->out_bytes, cudaMemcpyDeviceToHost, x->st));
    CUDA_OK(cudaMemcpyAsync(where, x->where, b->n, cudaMemcpyDeviceToHost, x->st));
  }
  CUDA_OK(cudaStreamSynchronize(x->st));
  return st;
#else
  (void)x;
  (void)n_tables;
  return emc_lookup_ex(c, b->ids, b->offsets, out, where, NULL);
#endif
}

static emc_status do_apply(io *x, emc_cache *c, const batch *b, uint32_t n_tables,
                           const emc_optimizer *o) {
#ifdef EMCT_GPU
  emc_status st;
  CUDA_OK(cudaMemcpyAsync(x->ids, b->ids, b->n * 8, cudaMemcpyHostToDevice, x->st));
  CUDA_OK(cudaMemcpyAsync(x->offs, b->offsets, (n_tables + 1) * 8, cudaMemcpyHostToDevice, x->st));
  CUDA_OK(cudaMemcpyAsync(x->grads, b->grads, b->grad_floats * 4, cudaMemcpyHostToDevice, x->st));
  st = emc_apply_gradients(c, x->ids, x->offs, x->grads, o, x->st);
  CUDA_OK(cudaStreamSynchronize(x->st));
  return st;
#else
  (void)x;
  (void)n_tables;
  return emc_apply_gradients(c, b->ids, b->offsets, b->grads, o, NULL);
#endif
}

static emc_status do_dedup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, uint64_t *uids,
                           uint64_t *uoffs, uint32_t *inv) {
#ifdef EMCT_GPU
  emc_status st;
  CUDA_OK(cudaMemcpyAsync(x->ids, b->ids, b->n * 8, cudaMemcpyHostToDevice, x->st));
  CUDA_OK(cudaMemcpyAsync(x->offs, b->offsets, (n_tables + 1) * 8, cudaMemcpyHostToDevice, x->st));
  st = emc_dedup(c, x->ids, x->offs, x->uids, x->uoffs, x->inv, x->st);
  if (st == EMC_OK) {
    CUDA_OK(cudaMemcpyAsync(uoffs, x->uoffs, (n_tables + 1) * 8, cudaMemcpyDeviceToHost, x->st));
    CUDA_OK(cudaMemcpyAsync(uids, x->uids, b->n * 8, cudaMemcpyDeviceToHost, x->st));
    CUDA_OK(cudaMemcpyAsync(inv, x->inv, b->n * 4, cudaMemcpyDeviceToHost, x->st));
  }
  CUDA_OK(cudaStreamSynchronize(x->st));
  return st;
#else
  (void)x;
  (void)n_tables;
  return emc_dedup(c, b->ids, b->offsets, uids, uoffs, inv, NULL);
#endif
}

static emc_cache *make_cache(model *m, size_t capacity, uint32_t depth) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = BACKEND;
  cfg.capacity_bytes = capacity;
  cfg.prefetch_depth = depth;
  EMCT_OK(emc_cache_create(m->store, &cfg, &c));
  return c;
}

static emc_stats stats_of(const emc_cache *c) {
  emc_stats s;
  EMCT_OK(emc_get_stats(c, &s));
  return s;
}

static uint64_t low_bytes_of(const emc_cache *c, size_t capacity) {
#ifdef EMCT_GPU
  (void)c;
  return (uint64_t)((double)capacity * 0.80f);
#else
  emc__cache_debug d;
  (void)capacity;
  EMCT_OK(emc__cache_get_debug(c, &d));
  return d.low_bytes;
#endif
}

static void check_structure(emc_cache *c) {
#ifdef EMCT_GPU
  EMCT_OK(emc__cuda_check(c));
#else
  EMCT_OK(emc__cache_check(c));
#endif
}

/* Rows of a lookup against the reference, bitwise. */
static void check_rows(const model *m, const batch *b, const unsigned char *out, const char *what,
                       int step) {
  uint32_t t;
  uint64_t p;
  for (t = 0; t < m->n; t++)
    for (p = b->offsets[t]; p < b->offsets[t + 1]; p++, out += m->rb[t]) {
      const unsigned char *want = m->ref[t] + b->ranks[p] * m->rb[t];
      long d = emct_first_diff(out, want, m->rb[t]);
      ck_assert_msg(d < 0, "%s step %d: table %u position %llu (rank %llu): byte %ld differs",
                    what, step, t, (unsigned long long)p, (unsigned long long)b->ranks[p], d);
    }
}

/* The store after a flush against the reference: rows bitwise (tol 0) or within tol relative,
 * and the accumulators likewise. */
static void check_store(const model *m, double tol, const char *what) {
  uint32_t t, j;
  for (t = 0; t < m->n; t++) {
    uint64_t u = m->tb[t].universe, r;
    unsigned char *row = malloc(m->rb[t]);
    ck_assert(row);
    for (r = 0; r < u; r++) {
      uint64_t id = id_of(m, t, r);
      const unsigned char *want = m->ref[t] + r * m->rb[t];
      EMCT_OK(emc_store_read(m->store, t, &id, 1, row));
      if (tol == 0.0) {
        long d = emct_first_diff(row, want, m->rb[t]);
        ck_assert_msg(d < 0, "%s: store table %u rank %llu: byte %ld differs from the reference",
                      what, t, (unsigned long long)r, d);
      } else {
        for (j = 0; j < m->tb[t].dim; j++) {
          float a = emc__elem_get(row, m->tb[t].dtype, j), e = emc__elem_get(want, m->tb[t].dtype, j);
          ck_assert_msg(fabs((double)a - (double)e) <= tol * fmax(fabs((double)e), 1e-3),
                        "%s: table %u rank %llu elem %u: %.9g, reference %.9g", what, t,
                        (unsigned long long)r, j, (double)a, (double)e);
        }
      }
      if (m->state == EMC_STATE_ADAGRAD) {
        float s;
        EMCT_OK(emc_store_read_state(m->store, t, &id, 1, &s));
        ck_assert_msg(fabs((double)s - (double)m->acc[t][r]) <= (tol == 0.0 ? 0.0 : tol * fmax(fabs((double)m->acc[t][r]), 1e-3)),
                      "%s: table %u rank %llu accumulator %.9g, reference %.9g", what, t,
                      (unsigned long long)r, (double)s, (double)m->acc[t][r]);
      }
    }
    free(row);
  }
}

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

static const mtab TRAIN_TABLES[4] = {
    {EMC_TABLE_DENSE, 20000, 0, 0, 16, EMC_DTYPE_F32},
    {EMC_TABLE_DENSE, 6000, 0, 0, 7, EMC_DTYPE_F16},
    {EMC_TABLE_HASHED, 9000, 8000, 6000, 12, EMC_DTYPE_F32},
    {EMC_TABLE_HASHED, 5000, 4000, 3000, 5, EMC_DTYPE_F16},
};

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

/* ------------------------------------------------------------------ bad input */
/* The store's rows and the training counters: what "nothing changed" compares. */
typedef struct snap {
  unsigned char *rows[MAX_T];
  uint64_t count[MAX_T];
  emc_stats s;
} snap;

static void snap_take(snap *z, emc_cache *c, const model *m) {
  uint32_t t;
  EMCT_OK(emc_flush(c, NULL));
  for (t = 0; t < m->n; t++) {
    uint64_t u = m->tb[t].universe, r;
    z->rows[t] = malloc(u * m->rb[t]);
    ck_assert(z->rows[t]);
    for (r = 0; r < u; r++) {
      uint64_t id = id_of(m, t, r);
      EMCT_OK(emc_store_read(m->store, t, &id, 1, z->rows[t] + r * m->rb[t]));
    }
    EMCT_OK(emc_store_table_count(m->store, t, &z->count[t]));
  }
  z->s = stats_of(c);
}

static void snap_same(const snap *a, emc_cache *c, const model *m, const char *what) {
  snap b;
  uint32_t t;
  snap_take(&b, c, m);
  for (t = 0; t < m->n; t++) {
    long d = emct_first_diff(a->rows[t], b.rows[t], m->tb[t].universe * m->rb[t]);
    ck_assert_msg(d < 0, "%s changed table %u at byte %ld", what, t, d);
    ck_assert_msg(a->count[t] == b.count[t], "%s changed table %u's id count", what, t);
    free(b.rows[t]);
  }
  ck_assert_msg(a->s.gradient_rows == b.s.gradient_rows && a->s.prefetched == b.s.prefetched &&
                    a->s.pinned_rows == b.s.pinned_rows && a->s.pinned_bytes == b.s.pinned_bytes,
                "%s changed the training counters", what);
}

static void snap_free(snap *z, const model *m) {
  uint32_t t;
  for (t = 0; t < m->n; t++) free(z->rows[t]);
}

/* A status the CUDA backend finds on the device with device ids: the call succeeds and the
 * next flush returns it; the host backend returns it from the call. */
static void expect_late(emc_status st, emc_cache *c, emc_status want) {
#ifdef EMCT_GPU
  EMCT_OK(st);
  st = emc_flush(c, NULL);
#else
  (void)c;
#endif
  EMCT_ST(st, want);
}

START_TEST(bad_input_changes_nothing) {
  model m;
  batch b;
  io x;
  emc_cache *c;
  emc_optimizer o, bad;
  snap z;
  uint64_t offs[MAX_T + 1], uids[64], uoffs[MAX_T + 1], keep;
  uint32_t inv[64], t;
  float nan = nanf(""), inf = INFINITY;
  emc_cache_config cfg;
  emc_cache *c2 = NULL;
  model_init(&m, TRAIN_TABLES, 4, EMC_STATE_NONE, 81);
  c = make_cache(&m, 1u << 20, 1);
  batch_alloc(&b, &m, 4000);
  io_init(&x, 16000, 16000 * 64, 16000 * 16);
  batch_make(&b, &m, 10);
  EMCT_OK(do_apply(&x, c, &b, m.n, (emc_optimizer_init(&o), &o))); /* some dirty rows */
  EMCT_OK(do_prefetch(&x, c, &b, m.n));
  snap_take(&z, c, &m);

  /* the optimizer */
  EMCT_ST(emc_apply_gradients(NULL, b.ids, b.offsets, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, NULL, NULL), EMC_EINVAL);
#define BAD_OPT(field, value)                                                   \
  do {                                                                          \
    bad = o;                                                                    \
    bad.field = value;                                                          \
    EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &bad, NULL), EMC_EINVAL); \
  } while (0)
  BAD_OPT(struct_size, 0);
  BAD_OPT(struct_size, sizeof(emc_optimizer) - 4);
  BAD_OPT(struct_size, sizeof(emc_optimizer) + 8);
  BAD_OPT(kind, (emc_optimizer_kind)2);
  BAD_OPT(kind, (emc_optimizer_kind)-1);
  BAD_OPT(merge, (emc_grad_merge)2);
  BAD_OPT(lr, nan);
  BAD_OPT(lr, inf);
  BAD_OPT(lr, -inf);
  BAD_OPT(eps, nan);
  BAD_OPT(eps, inf);
  BAD_OPT(eps, -1.0f);
  BAD_OPT(initial_accumulator, nan);
  BAD_OPT(initial_accumulator, inf);
  BAD_OPT(initial_accumulator, -0.5f);
  BAD_OPT(kind, EMC_OPT_ROWWISE_ADAGRAD); /* the tables keep no accumulator */
  ck_assert_msg(strstr(emc_last_error_detail(), "EMC_STATE_ADAGRAD") != NULL, "detail: %s",
                emc_last_error_detail());
  /* the batch */
  EMCT_ST(emc_apply_gradients(c, NULL, b.offsets, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, NULL, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, NULL, &o, NULL), EMC_EINVAL);
  memcpy(offs, b.offsets, sizeof offs);
  offs[0] = 1;
  EMCT_ST(emc_apply_gradients(c, b.ids, offs, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, offs, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, offs, uids, uoffs, inv, NULL), EMC_EINVAL);
  memcpy(offs, b.offsets, sizeof offs);
  offs[2] = offs[1] - 1;
  EMCT_ST(emc_apply_gradients(c, b.ids, offs, b.grads, &o, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, offs, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(NULL, b.ids, b.offsets, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, NULL, b.offsets, NULL), EMC_EINVAL);
  EMCT_ST(emc_prefetch(c, b.ids, NULL, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(NULL, b.ids, b.offsets, uids, uoffs, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, NULL, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, NULL, uoffs, inv, NULL), EMC_EINVAL);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, uoffs, NULL, NULL), EMC_EINVAL);
  snap_same(&z, c, &m, "refused calls");
  /* a dense id out of range (host memory: found by the call on both backends) */
  keep = b.ids[3];
  b.ids[3] = m.tb[0].rows + 5;
  EMCT_ST(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &o, NULL), EMC_ERANGE);
  EMCT_ST(emc_prefetch(c, b.ids, b.offsets, NULL), EMC_ERANGE);
  memset(uoffs, 0xab, sizeof uoffs);
  EMCT_ST(emc_dedup(c, b.ids, b.offsets, uids, uoffs, inv, NULL), EMC_ERANGE);
  for (t = 0; t <= m.n; t++) ck_assert_uint_eq(uoffs[t], 0xababababababababull); /* untouched */
  /* ... and from device memory on the CUDA backend: the next flush reports it */
  expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ERANGE);
  expect_late(do_prefetch(&x, c, &b, m.n), c, EMC_ERANGE);
  b.ids[3] = keep;
  snap_same(&z, c, &m, "dense ids out of range");
  /* a hashed table over its capacity: 3,500 new ids, 3,000 free */
  {
    uint64_t counts[MAX_T] = {0, 0, 3500, 0}, i;
    batch_make_counts(&b, &m, counts);
    for (i = 0; i < 3500; i++) b.ids[i] = id_of(&m, 2, 100000 + i);
    expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ERANGE);
  }
  snap_same(&z, c, &m, "a hashed table over capacity");
  snap_free(&z, &m);
  EMCT_OK(emc_cache_destroy(c));

  /* a batch larger than the cache: 2,000 distinct rows of 64 bytes, 64 KiB */
  c = make_cache(&m, 64u << 10, 1);
  snap_take(&z, c, &m);
  {
    uint64_t counts[MAX_T] = {2000, 0, 0, 0}, i;
    batch_make_counts(&b, &m, counts);
    for (i = 0; i < 2000; i++) b.ids[i] = b.ranks[i] = i;
    expect_late(do_apply(&x, c, &b, m.n, &o), c, EMC_ECAPACITY);
    ck_assert_msg(strstr(emc_last_error_detail(), "capacity") != NULL, "detail: %s",
                  emc_last_error_detail());
  }
  snap_same(&z, c, &m, "a batch larger than the cache");
  snap_free(&z, &m);
  EMCT_OK(emc_cache_destroy(c));

  /* the configuration and the state reader */
  emct_cache_config_init(&cfg);
  ck_assert_uint_eq(cfg.prefetch_depth, 1);
  cfg.backend = BACKEND;
  cfg.prefetch_depth = 15;
  EMCT_ST(emc_cache_create(m.store, &cfg, &c2), EMC_EINVAL);
  ck_assert_ptr_null(c2);
  {
    float st1 = 7.0f;
    uint64_t id = 1;
    EMCT_ST(emc_store_read_state(NULL, 0, &id, 1, &st1), EMC_EINVAL);
    EMCT_ST(emc_store_read_state(m.store, 9, &id, 1, &st1), EMC_ERANGE);
    EMCT_ST(emc_store_read_state(m.store, 0, &id, 1, &st1), EMC_EINVAL); /* no state */
    ck_assert(st1 == 7.0f);
  }
  emc_optimizer_init(&o);
  ck_assert_uint_eq(o.struct_size, sizeof o);
  ck_assert(o.kind == EMC_OPT_SGD && o.merge == EMC_MERGE_SUM && o.lr == 0.01f &&
            o.eps == 1e-8f && o.initial_accumulator == 0.0f);
  emc_optimizer_init(NULL);
  io_free(&x);
  batch_free(&b);
  model_free(&m);
}
END_TEST

START_TEST(state_reader_and_table_desc) {
  static const mtab tb[2] = {{EMC_TABLE_DENSE, 100, 0, 0, 3, EMC_DTYPE_F16},
                             {EMC_TABLE_HASHED, 50, 40, 20, 4, EMC_DTYPE_F32}};
  model m;
  emc_table_desc d;
  emc_table_desc bad = {"x", EMC_TABLE_DENSE, 4, 2, EMC_DTYPE_F32, (emc_row_state)7};
  emc_store *s2 = NULL;
  float st[3] = {1, 2, 3};
  uint64_t ids[3] = {0, 99, 100};
  model_init(&m, tb, 2, EMC_STATE_ADAGRAD, 82);
  EMCT_OK(emc_store_table(m.store, 0, &d));
  ck_assert_int_eq(d.state, EMC_STATE_ADAGRAD);
  EMCT_OK(emc_store_read_state(m.store, 0, ids, 2, st));
  ck_assert(st[0] == 0.0f && st[1] == 0.0f && st[2] == 3.0f); /* zero at create, n honoured */
  EMCT_ST(emc_store_read_state(m.store, 0, ids, 3, st), EMC_ERANGE);
  EMCT_ST(emc_store_read_state(m.store, 0, NULL, 3, st), EMC_EINVAL);
  EMCT_OK(emc_store_read_state(m.store, 0, NULL, 0, NULL));
  ids[0] = 12345; /* a hashed id never written reads 0 */
  st[0] = 9;
  EMCT_OK(emc_store_read_state(m.store, 1, ids, 1, st));
  ck_assert(st[0] == 0.0f);
  EMCT_ST(emc_store_create(&bad, 1, &s2), EMC_EINVAL);
  ck_assert_ptr_null(s2);
  model_free(&m);
}
END_TEST

/* The file format: a store with Adagrad state saves as version 2 with its accumulators and
 * opens equal; one without state still saves as version 1; a version-2 descriptor's reserved
 * word must be zero. */
START_TEST(file_version_2_keeps_state) {
  static const mtab tb[2] = {{EMC_TABLE_DENSE, 300, 0, 0, 5, EMC_DTYPE_F16},
                             {EMC_TABLE_HASHED, 200, 150, 100, 4, EMC_DTYPE_F32}};
  model m, plain;
  batch b;
  emc_cache *c;
  emc_optimizer o;
  emc_store *o2 = NULL;
  char dir[512], path[600], path1[600];
  unsigned char *bytes;
  size_t n;
  uint32_t t, v;
  int step;
  model_init(&m, tb, 2, EMC_STATE_ADAGRAD, 83);
  c = make_cache(&m, 1u << 20, 1);
  batch_alloc(&b, &m, 64);
  emc_optimizer_init(&o);
  o.kind = EMC_OPT_ROWWISE_ADAGRAD;
  o.lr = 0.1f;
  for (step = 0; step < 20; step++) { /* accumulators and rows move, new hashed ids too */
    batch_make(&b, &m, 64);
    EMCT_OK(emc_apply_gradients(c, b.ids, b.offsets, b.grads, &o, NULL));
    model_apply(&m, &b, &o);
  }
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_cache_destroy(c));
  emct_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/state.emc", dir);
  EMCT_OK(emc_store_save(m.store, path));
  bytes = emct_read_file(path, &n);
  memcpy(&v, bytes + 8, 4);
  ck_assert_uint_eq(v, 2);
  EMCT_OK(emc_store_open(path, &o2));
  emc_store_destroy(m.store);
  m.store = o2; /* the reference against the reopened store: rows and accumulators bitwise */
  check_store(&m, 0.0, "reopened");
  for (t = 0; t < 2; t++) {
    emc_table_desc d;
    EMCT_OK(emc_store_table(o2, t, &d));
    ck_assert_int_eq(d.state, EMC_STATE_ADAGRAD);
  }
  /* the first descriptor's reserved word (right after name_len and state) set: foreign */
  bytes[64 + 20] = 1;
  snprintf(path1, sizeof path1, "%s/bad.emc", dir);
  emct_write_file(path1, bytes, n);
  o2 = NULL;
  EMCT_ST(emc_store_open(path1, &o2), EMC_ECORRUPT);
  ck_assert_ptr_null(o2);
  free(bytes);
  /* no state: version 1, opens with state NONE */
  model_init(&plain, tb, 2, EMC_STATE_NONE, 84);
  snprintf(path1, sizeof path1, "%s/plain.emc", dir);
  EMCT_OK(emc_store_save(plain.store, path1));
  bytes = emct_read_file(path1, &n);
  memcpy(&v, bytes + 8, 4);
  ck_assert_uint_eq(v, 1);
  free(bytes);
  EMCT_OK(emc_store_open(path1, &o2));
  emc_store_destroy(plain.store);
  plain.store = o2;
  check_store(&plain, 0.0, "reopened version 1");
  {
    emc_table_desc d;
    EMCT_OK(emc_store_table(o2, 0, &d));
    ck_assert_int_eq(d.state, EMC_STATE_NONE);
  }
  batch_free(&b);
  model_free(&m);
  model_free(&plain);
  emct_rmdir(dir);
}
END_TEST

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
  tcase_add_loop_test(tp, pins_hold_through_window_then_expire, 0, 2);
  tcase_add_test(tp, over_large_prefetch);
  tcase_add_test(tp, depth_zero_and_no_prefetch_leaves_nothing_pinned);
  tcase_add_test(tb, dedup_first_occurrence_and_inverse);
  tcase_add_test(tb, bad_input_changes_nothing);
  tcase_add_test(tb, state_reader_and_table_desc);
  tcase_add_test(tb, file_version_2_keeps_state);
  tcase_add_test(tb, trainer_and_readers_concurrently);
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
