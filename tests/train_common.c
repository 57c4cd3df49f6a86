/*
 * train_common.c: the reference model, batches and calls of the training suite
 * (train_common.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_common.h"

/* ------------------------------------------------------------------ the model */
const mtab TRAIN_TABLES[4] = {
    {EMC_TABLE_DENSE, 20000, 0, 0, 16, EMC_DTYPE_F32},
    {EMC_TABLE_DENSE, 6000, 0, 0, 7, EMC_DTYPE_F16},
    {EMC_TABLE_HASHED, 9000, 8000, 6000, 12, EMC_DTYPE_F32},
    {EMC_TABLE_HASHED, 5000, 4000, 3000, 5, EMC_DTYPE_F16},
};

uint64_t id_of(const model *m, uint32_t t, uint64_t r) {
  return m->tb[t].kind == EMC_TABLE_DENSE ? r : emc__fmix64(r ^ ((uint64_t)(t + 1) << 52));
}

void model_init(model *m, const mtab *tb, uint32_t n, emc_row_state state, uint64_t seed) {
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

void model_free(model *m) {
  uint32_t t;
  emc_store_destroy(m->store);
  for (t = 0; t < m->n; t++) {
    free(m->ref[t]);
    free(m->acc[t]);
    free(m->present[t]);
  }
}

/* Slot bytes of every row of the universes. */
uint64_t model_bytes(const model *m) {
  uint64_t b = 0;
  uint32_t t;
  for (t = 0; t < m->n; t++)
    b += m->tb[t].universe *
         emc__row_stride(m->state ? ((m->rb[t] + 3u) & ~3u) + 4u : m->rb[t]);
  return b;
}


void batch_alloc(batch *b, const model *m, uint64_t per_table) {
  uint32_t t, most = 1;
  for (t = 0; t < m->n; t++)
    if (m->tb[t].dim > most) most = m->tb[t].dim;
  b->ids = malloc(m->n * per_table * sizeof *b->ids + 8);
  b->ranks = malloc(m->n * per_table * sizeof *b->ranks + 8);
  b->grads = malloc(m->n * per_table * most * sizeof *b->grads + 8);
  b->was_present = malloc(m->n * per_table + 1);
  ck_assert(b->ids && b->ranks && b->grads && b->was_present);
}

void batch_free(batch *b) {
  free(b->ids);
  free(b->ranks);
  free(b->grads);
  free(b->was_present);
}

void batch_mark_present(batch *b, const model *m) {
  uint32_t t;
  uint64_t p;
  for (t = 0; t < m->n; t++)
    for (p = b->offsets[t]; p < b->offsets[t + 1]; p++) b->was_present[p] = m->present[t][b->ranks[p]];
}

/* A Zipf batch of per_table ids a table; hashed tables draw 1/8 of their ids past `present`
 * (absent until a gradient creates them). Gradients: multiples of 1/1024 in [-1, 1]. */
void batch_make_counts(batch *b, model *m, const uint64_t *counts) {
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

void batch_make(batch *b, model *m, uint64_t per_table) {
  uint64_t counts[MAX_T];
  uint32_t t;
  for (t = 0; t < MAX_T; t++) counts[t] = per_table;
  batch_make_counts(b, m, counts);
}

/* The reference step: the same arithmetic, written out plainly on the plain copy. */
void model_apply(model *m, const batch *b, const emc_optimizer *o) {
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

/* ------------------------------------------------------------------ calls */
void io_init(io *x, size_t n, size_t out_bytes, size_t grad_floats) {
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

void io_free(io *x) {
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

emc_status do_prefetch(io *x, emc_cache *c, const batch *b, uint32_t n_tables) {
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

emc_status do_lookup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, void *out,
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

emc_status do_apply(io *x, emc_cache *c, const batch *b, uint32_t n_tables,
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

emc_status do_dedup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, uint64_t *uids,
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

emc_cache *make_cache(model *m, size_t capacity, uint32_t depth) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = BACKEND;
  cfg.capacity_bytes = capacity;
  cfg.prefetch_depth = depth;
  EMCT_OK(emc_cache_create(m->store, &cfg, &c));
  return c;
}

emc_stats stats_of(const emc_cache *c) {
  emc_stats s;
  EMCT_OK(emc_get_stats(c, &s));
  return s;
}

uint64_t low_bytes_of(const emc_cache *c, size_t capacity) {
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

void check_structure(emc_cache *c) {
#ifdef EMCT_GPU
  EMCT_OK(emc__cuda_check(c));
#else
  EMCT_OK(emc__cache_check(c));
#endif
}

/* Rows of a lookup against the reference, bitwise. */
void check_rows(const model *m, const batch *b, const unsigned char *out, const char *what,
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
void check_store(const model *m, double tol, const char *what) {
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
