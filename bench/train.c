/* train.c: the training-step driver and the host figure of emc-bench --train (see train.h). */
#define _POSIX_C_SOURCE 200809L

#include "train.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jline.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ the step */
/* fork, prefetch `batch` on the prefetch stream, count its status (EMC_ECAPACITY: the rows
 * that fit are pinned; the call succeeded in part). */
static int prefetch_one(const emcb_train_io *io, size_t batch, emcb_train_tally *t) {
  emc_status st;
  double t0 = io->time_phases ? now_s() : 0;
  if (io->fork) io->fork(io->ctx);
  st = emc_prefetch(io->cache, io->ids(io->ctx, batch), io->offsets, io->prefetch_stream);
  t->prefetches++;
  if (io->time_phases) t->prefetch_s += now_s() - t0;
  if (st == EMC_ECAPACITY) {
    t->prefetch_capacity_errors++;
    st = EMC_OK;
  }
  return (int)st;
}

int emcb_train_step(const emcb_train_io *io, size_t batch, size_t next, uint8_t *where,
                    emcb_train_tally *t) {
  const uint64_t *ids = io->ids(io->ctx, batch);
  const int forked = next != EMCB_TRAIN_NO_NEXT;
  double t0, t1;
  emc_status st;
  int rc;
  t->last_apply_refused = 0;
  if (forked && (rc = prefetch_one(io, next, t)) != 0) return rc;
  t0 = io->time_phases ? now_s() : 0;
  st = emc_lookup_ex(io->cache, ids, io->offsets, io->out, where, io->stream);
  if (st != EMC_OK) return (int)st;
  if (io->time_phases) {
    t1 = now_s();
    t->lookup_s += t1 - t0;
    t0 = t1;
  }
  io->backward(io->ctx, batch, io->out, io->grads);
  if (io->time_phases) {
    t1 = now_s();
    t->backward_s += t1 - t0;
    t0 = t1;
  }
  st = emc_apply_gradients(io->cache, ids, io->offsets, io->grads, io->opt, io->stream);
  if (st == EMC_ECAPACITY) {
    t->apply_refused++;
    t->last_apply_refused = 1;
  } else if (st != EMC_OK) {
    return (int)st;
  }
  if (io->time_phases) t->apply_s += now_s() - t0;
  if (forked && io->join) io->join(io->ctx);
  t->steps++;
  return 0;
}

int emcb_train_prefetch(const emcb_train_io *io, size_t batch, emcb_train_tally *t) {
  int rc = prefetch_one(io, batch, t);
  if (rc == 0 && io->join) io->join(io->ctx);
  return rc;
}

/* ------------------------------------------------------------------ f16 (public header only) */
/* binary32 -> binary16, round to nearest even (the library's conversion: NaN stays NaN,
 * overflow gives infinity). */
static uint16_t f32_to_f16(float f) {
  uint32_t x, sign, exp, mant;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  exp = (x >> 23) & 0xffu;
  mant = x & 0x7fffffu;
  if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) { /* subnormal or zero */
    if (e < -10) return (uint16_t)sign;
    uint32_t m = mant | 0x800000u, shift = (uint32_t)(14 - e);
    uint32_t r = m >> shift, half = 1u << (shift - 1), rest = m & ((1u << shift) - 1u);
    if (rest > half || (rest == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++; /* a carry into exp is right */
  return (uint16_t)(sign | r);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  float f;
  if (exp == 0x1fu) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else { /* normalize the subnormal */
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp + 127u - 15u) << 23) | (mant << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

static float elem_get(const unsigned char *row, emc_dtype d, uint32_t j) {
  if (d == EMC_DTYPE_F32) {
    float f;
    memcpy(&f, row + 4u * j, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, row + 2u * j, 2);
  return f16_to_f32(h);
}

static void elem_set(unsigned char *row, emc_dtype d, uint32_t j, float f) {
  if (d == EMC_DTYPE_F32) {
    memcpy(row + 4u * j, &f, 4);
  } else {
    uint16_t h = f32_to_f16(f);
    memcpy(row + 2u * j, &h, 2);
  }
}

/* ------------------------------------------------------------------ stores */
int emcb_train_init(emcb_train *tr, const uint64_t *rows, uint32_t n_tables, uint32_t dim,
                    emc_dtype dtype, uint64_t seed) {
  emc_table_desc *d = NULL;
  emc_status st = EMC_OK;
  uint32_t t;
  memset(tr, 0, sizeof *tr);
  if (!rows || n_tables == 0) return EMC_EINVAL;
  tr->n_tables = n_tables;
  tr->dim = dim;
  tr->dtype = dtype;
  tr->row_bytes = (size_t)dim * emc_dtype_size(dtype);
  tr->seed = seed;
  tr->rows = calloc(n_tables, sizeof *tr->rows);
  tr->base = calloc(n_tables, sizeof *tr->base);
  d = calloc(n_tables, sizeof *d);
  if (!tr->rows || !tr->base || !d) {
    st = EMC_ENOMEM;
    goto out;
  }
  for (t = 0; t < n_tables; t++) {
    tr->rows[t] = rows[t];
    tr->base[t] = tr->total_rows;
    tr->total_rows += rows[t];
    d[t] = (emc_table_desc){NULL, EMC_TABLE_DENSE, rows[t], dim, dtype, EMC_STATE_NONE};
  }
  tr->seen = calloc((size_t)tr->total_rows, sizeof *tr->seen);
  tr->slot = calloc((size_t)tr->total_rows, sizeof *tr->slot);
  if (!tr->seen || !tr->slot) {
    st = EMC_ENOMEM;
    goto out;
  }
  if ((st = emc_store_create(d, n_tables, &tr->cached)) != EMC_OK ||
      (st = emc_store_create(d, n_tables, &tr->plain)) != EMC_OK)
    goto out;
  for (t = 0; t < n_tables && st == EMC_OK; t++) {
    st = emc_store_fill_uniform(tr->cached, t, -1.0f, 1.0f, seed);
    if (st == EMC_OK) st = emc_store_fill_uniform(tr->plain, t, -1.0f, 1.0f, seed);
  }
out:
  free(d);
  if (st != EMC_OK) emcb_train_free(tr);
  return (int)st;
}

void emcb_train_free(emcb_train *tr) {
  emc_store_destroy(tr->cached);
  emc_store_destroy(tr->plain);
  free(tr->seen);
  free(tr->slot);
  free(tr->base);
  free(tr->rows);
  memset(tr, 0, sizeof *tr);
}

/* ------------------------------------------------------------------ the host figure */
typedef struct host_run {
  emcb_train *tr;
  const emcb_train_args *a;
  size_t n;             /* positions per batch */
  unsigned char *out;   /* n rows */
  float *grads;         /* n * dim */
  uint8_t *where;       /* n */
  float *acc;           /* n * dim: the baseline's merged gradients */
  uint64_t *uid;        /* n: the baseline's distinct ids of a segment */
  uint64_t *first;      /* n: their first positions */
  unsigned char *wbuf;  /* n rows: the baseline's updated rows */
  float noise[4096];
} host_run;

static const uint64_t *run_ids(void *ctx, size_t batch) {
  const host_run *h = ctx;
  return h->a->ids(h->a->ctx, batch);
}

/* The stand-in for forward/backward: g = 0.01 * w + noise(batch, element): it reads every
 * looked-up element (so a wrong row changes the training) and costs one pass over them. */
static void run_backward(void *ctx, size_t batch, const void *out, void *grads) {
  const host_run *h = ctx;
  const uint32_t dim = h->tr->dim;
  const emc_dtype dt = h->tr->dtype;
  const unsigned char *rows = out;
  float *g = grads;
  const size_t rb = h->tr->row_bytes, shift = (size_t)batch * 61u;
  for (size_t p = 0; p < h->n; p++) {
    const unsigned char *row = rows + p * rb;
    float *gp = g + p * dim;
    const size_t k0 = p * dim + shift;
    if (dt == EMC_DTYPE_F32) {
      const float *w = (const float *)(const void *)row;
      for (uint32_t j = 0; j < dim; j++) gp[j] = 0.01f * w[j] + h->noise[(k0 + j) & 4095u];
    } else {
      for (uint32_t j = 0; j < dim; j++)
        gp[j] = 0.01f * elem_get(row, dt, j) + h->noise[(k0 + j) & 4095u];
    }
  }
}

/* The baseline's gather: every table's segment read from the plain store. */
static int baseline_gather(host_run *h, const uint64_t *ids) {
  const uint64_t *off = h->a->offsets;
  for (uint32_t t = 0; t < h->tr->n_tables; t++) {
    uint64_t lo = off[t], n = off[t + 1] - lo;
    emc_status st = emc_store_read(h->tr->plain, t, ids + lo, (size_t)n, h->out + lo * h->tr->row_bytes);
    if (st != EMC_OK) return (int)st;
  }
  return 0;
}

/* The baseline's update: the cache's SGD arithmetic on each distinct row of each segment (the
 * gradients of its positions summed in position order; w = fmaf(-lr, g, w), in the table's
 * dtype), the rows taken from the gather and written back with emc_store_write. */
static int baseline_update(host_run *h, const uint64_t *ids, float lr) {
  emcb_train *tr = h->tr;
  const uint64_t *off = h->a->offsets;
  const uint32_t dim = tr->dim;
  const size_t rb = tr->row_bytes;
  for (uint32_t t = 0; t < tr->n_tables; t++) {
    uint64_t lo = off[t], n = off[t + 1] - lo, nu = 0;
    uint32_t *seen = tr->seen + tr->base[t], *slot = tr->slot + tr->base[t];
    if (n == 0) continue;
    if (++tr->gen == 0) { /* generations wrapped: forget them all */
      memset(tr->seen, 0, (size_t)tr->total_rows * sizeof *tr->seen);
      tr->gen = 1;
    }
    for (uint64_t p = lo; p < lo + n; p++) {
      const uint64_t id = ids[p];
      const float *g = h->grads + p * dim;
      if (seen[id] != tr->gen) {
        seen[id] = tr->gen;
        slot[id] = (uint32_t)nu;
        h->uid[nu] = id;
        h->first[nu] = p;
        memcpy(h->acc + nu * dim, g, dim * sizeof *g);
        nu++;
      } else {
        float *a = h->acc + (size_t)slot[id] * dim;
        for (uint32_t j = 0; j < dim; j++) a[j] = a[j] + g[j];
      }
    }
    for (uint64_t u = 0; u < nu; u++) {
      const unsigned char *w = h->out + h->first[u] * rb;
      unsigned char *dst = h->wbuf + u * rb;
      const float *a = h->acc + u * dim;
      for (uint32_t j = 0; j < dim; j++) elem_set(dst, tr->dtype, j, fmaf(-lr, a[j], elem_get(w, tr->dtype, j)));
    }
    emc_status st = emc_store_write(tr->plain, t, h->uid, (size_t)nu, h->wbuf);
    if (st != EMC_OK) return (int)st;
  }
  return 0;
}

/* Rows of the two stores compared, chunk by chunk. */
static int compare_stores(emcb_train *tr, emcb_train_result *r) {
  enum { CHUNK = 16384 };
  uint64_t *ids = malloc(CHUNK * sizeof *ids);
  unsigned char *a = malloc(CHUNK * tr->row_bytes), *b = malloc(CHUNK * tr->row_bytes);
  int rc = 0;
  if (!ids || !a || !b) rc = EMC_ENOMEM;
  for (uint32_t t = 0; t < tr->n_tables && rc == 0; t++) {
    for (uint64_t lo = 0; lo < tr->rows[t] && rc == 0; lo += CHUNK) {
      size_t n = (size_t)(tr->rows[t] - lo < CHUNK ? tr->rows[t] - lo : CHUNK);
      for (size_t i = 0; i < n; i++) ids[i] = lo + i;
      if ((rc = (int)emc_store_read(tr->cached, t, ids, n, a)) != 0 ||
          (rc = (int)emc_store_read(tr->plain, t, ids, n, b)) != 0)
        break;
      for (size_t i = 0; i < n; i++)
        r->rows_differ += memcmp(a + i * tr->row_bytes, b + i * tr->row_bytes, tr->row_bytes) != 0;
      r->rows_compared += n;
    }
  }
  free(ids);
  free(a);
  free(b);
  return rc;
}

int emcb_train_run(emcb_train *tr, const emcb_train_args *a, emcb_train_result *r) {
  const uint64_t *off = a->offsets;
  const size_t total = a->warmup + a->steps;
  host_run *h = NULL;
  emc_cache *cache = NULL;
  uint8_t *refused = NULL;
  emc_cache_config cfg;
  emc_optimizer opt;
  emc_stats s_start, s0, s1;
  emcb_train_tally tw, tm;
  int rc = 0;

  memset(r, 0, sizeof *r);
  memset(&tw, 0, sizeof tw);
  memset(&tm, 0, sizeof tm);
  if (!tr || !a || !a->cfg || !a->ids || !off || a->steps == 0 || total > a->n_batches)
    return EMC_EINVAL;
  r->steps = a->steps;
  r->warmup = a->warmup;
  r->batch = a->batch;
  r->prefetch_depth = a->prefetch_depth;
  r->lr = a->lr;

  h = calloc(1, sizeof *h);
  if (!h) return EMC_ENOMEM;
  h->tr = tr;
  h->a = a;
  h->n = (size_t)off[tr->n_tables];
  for (size_t k = 0; k < 4096; k++) /* noise in [-0.01, 0.01), a fixed pattern */
    h->noise[k] = ((float)((uint32_t)(k * 2654435761u) >> 8) * (1.0f / 16777216.0f) - 0.5f) * 0.02f;
  h->out = malloc(h->n * tr->row_bytes + 1);
  h->wbuf = malloc(h->n * tr->row_bytes + 1);
  h->grads = malloc(h->n * tr->dim * sizeof *h->grads + 1);
  h->acc = malloc(h->n * tr->dim * sizeof *h->acc + 1);
  h->where = malloc(h->n + 1);
  h->uid = malloc(h->n * sizeof *h->uid + 1);
  h->first = malloc(h->n * sizeof *h->first + 1);
  refused = calloc(total + 1, 1);
  if (!h->out || !h->wbuf || !h->grads || !h->acc || !h->where || !h->uid || !h->first || !refused) {
    rc = EMC_ENOMEM;
    goto out;
  }

  /* ---- the cache */
  cfg = *a->cfg;
  cfg.prefetch_depth = a->prefetch_depth;
  if ((rc = (int)emc_cache_create(tr->cached, &cfg, &cache)) != 0) goto out;
  emc_optimizer_init(&opt);
  opt.lr = a->lr;
  const emcb_train_io io = {.cache = cache, .offsets = off, .ids = run_ids, .out = h->out,
                            .grads = h->grads, .backward = run_backward, .opt = &opt,
                            .stream = NULL, .prefetch_stream = NULL, .fork = NULL, .join = NULL,
                            .time_phases = 1, .ctx = h};
  if ((rc = (int)emc_get_stats(cache, &s_start)) != 0) goto out;
  /* the pipeline's prologue: the first batch prefetched before the first step */
  if ((rc = emcb_train_prefetch(&io, 0, &tw)) != 0) goto out;
  for (size_t i = 0; i < a->warmup; i++) {
    if ((rc = emcb_train_step(&io, i, (i + 1) % a->n_batches, NULL, &tw)) != 0) goto out;
    refused[i] = (uint8_t)tw.last_apply_refused;
  }
  if ((rc = (int)emc_get_stats(cache, &s0)) != 0) goto out;
  for (size_t k = 0; k < a->steps; k++) {
    const size_t i = a->warmup + k;
    const double t0 = now_s();
    rc = emcb_train_step(&io, i, (i + 1) % a->n_batches, h->where, &tm);
    r->seconds += now_s() - t0;
    if (rc != 0) goto out;
    refused[i] = (uint8_t)tm.last_apply_refused;
    for (size_t p = 0; p < h->n; p++) { /* untimed */
      r->hits += h->where[p] == EMC_WHERE_CACHE;
      r->present += h->where[p] != EMC_WHERE_ABSENT;
    }
    r->positions += h->n;
  }
  /* untimed: with the admission thread the last steps' misses may still be queued, and the
   * stats count an admission once done (the count may still include the last warm-up
   * step's: s0 is read without a flush, which would write dirty rows back before the timed
   * steps) */
  if ((rc = (int)emc_flush(cache, NULL)) != 0) goto out;
  if ((rc = (int)emc_get_stats(cache, &s1)) != 0) goto out;
  r->prefetch_s = tm.prefetch_s;
  r->lookup_s = tm.lookup_s;
  r->backward_s = tm.backward_s;
  r->apply_s = tm.apply_s;
  r->prefetches = tw.prefetches + tm.prefetches;
  r->prefetch_capacity_errors = tw.prefetch_capacity_errors + tm.prefetch_capacity_errors;
  r->apply_refused = tw.apply_refused + tm.apply_refused;
  r->pin_shortfall = s1.pin_shortfall - s_start.pin_shortfall;
  r->prefetched = s1.prefetched - s0.prefetched;
  r->gradient_rows = s1.gradient_rows - s0.gradient_rows;
  r->evictions = s1.evictions - s0.evictions;
  r->admissions = s1.admissions - s0.admissions;
  r->pinned_rows = s1.pinned_rows;
  r->pinned_bytes = s1.pinned_bytes;
  rc = (int)emc_cache_destroy(cache); /* the cache's store is tr->cached (flushed above) */
  cache = NULL;
  if (rc != 0) goto out;

  /* ---- the baseline: the same steps on tr->plain, no cache */
  for (size_t i = 0; i < total; i++) {
    const uint64_t *ids = a->ids(a->ctx, i);
    const int timed = i >= a->warmup;
    double t0 = now_s(), t1, t2, t3;
    if ((rc = baseline_gather(h, ids)) != 0) goto out;
    t1 = now_s();
    run_backward(h, i, h->out, h->grads);
    t2 = now_s();
    if (!refused[i] && (rc = baseline_update(h, ids, a->lr)) != 0) goto out;
    t3 = now_s();
    if (timed) {
      r->baseline_gather_s += t1 - t0;
      r->baseline_backward_s += t2 - t1;
      r->baseline_update_s += t3 - t2;
      r->baseline_seconds += t3 - t0;
    }
  }
  tr->steps_done += total;

  /* ---- the two stores: cached training is bitwise the direct update */
  if ((rc = compare_stores(tr, r)) != 0) goto out;
  r->stores_equal = r->rows_differ == 0;

  r->steps_per_s = r->seconds > 0 ? (double)a->steps / r->seconds : NAN;
  r->samples_per_s = r->steps_per_s * (double)a->batch;
  r->baseline_steps_per_s = r->baseline_seconds > 0 ? (double)a->steps / r->baseline_seconds : NAN;
  r->speedup = r->steps_per_s / r->baseline_steps_per_s;
  r->hit_ratio_after_prefetch = r->present ? (double)r->hits / (double)r->present : NAN;
out:
  if (cache) {
    emc_status ds = emc_cache_destroy(cache);
    if (rc == 0) rc = (int)ds;
  }
  if (h) {
    free(h->out);
    free(h->wbuf);
    free(h->grads);
    free(h->acc);
    free(h->where);
    free(h->uid);
    free(h->first);
    free(h);
  }
  free(refused);
  return rc;
}

int emcb_train_json(const emcb_train_result *r, char *buf, size_t len) {
  jline j;
  jl_init(&j);
  jl_u64(&j, "steps", r->steps);
  jl_u64(&j, "warmup_steps", r->warmup);
  jl_u64(&j, "batch", r->batch);
  jl_u64(&j, "prefetch_depth", r->prefetch_depth);
  jl_num(&j, "lr", r->lr);
  jl_str(&j, "optimizer", "sgd");
  jl_num(&j, "seconds", r->seconds);
  jl_num(&j, "steps_per_s", r->steps_per_s);
  jl_num(&j, "samples_per_s", r->samples_per_s);
  jl_num(&j, "baseline_seconds", r->baseline_seconds);
  jl_num(&j, "baseline_steps_per_s", r->baseline_steps_per_s);
  jl_num(&j, "speedup", r->speedup);
  jl_num(&j, "hit_ratio_after_prefetch", r->hit_ratio_after_prefetch);
  jl_u64(&j, "lookups", r->positions);
  jl_u64(&j, "lookups_present", r->present);
  jl_u64(&j, "lookup_hits", r->hits);
  jl_u64(&j, "prefetch_calls", r->prefetches);
  jl_u64(&j, "prefetch_capacity_errors", r->prefetch_capacity_errors);
  jl_u64(&j, "pin_shortfall", r->pin_shortfall);
  jl_u64(&j, "apply_refused", r->apply_refused);
  jl_u64(&j, "prefetched", r->prefetched);
  jl_u64(&j, "gradient_rows", r->gradient_rows);
  jl_u64(&j, "evictions", r->evictions);
  jl_u64(&j, "admissions", r->admissions);
  jl_u64(&j, "pinned_rows", r->pinned_rows);
  jl_u64(&j, "pinned_bytes", r->pinned_bytes);
  jl_num(&j, "prefetch_s", r->prefetch_s);
  jl_num(&j, "lookup_s", r->lookup_s);
  jl_num(&j, "backward_s", r->backward_s);
  jl_num(&j, "apply_s", r->apply_s);
  jl_num(&j, "baseline_gather_s", r->baseline_gather_s);
  jl_num(&j, "baseline_backward_s", r->baseline_backward_s);
  jl_num(&j, "baseline_update_s", r->baseline_update_s);
  jl_u64(&j, "rows_compared", r->rows_compared);
  jl_u64(&j, "rows_differ", r->rows_differ);
  jl_bool(&j, "stores_equal", r->stores_equal);
  if (jl_end(&j) != 0) return -1;
  size_t n = strlen(j.buf);
  if (n && j.buf[n - 1] == '\n') n--;
  if (n + 1 > len) return -1;
  memcpy(buf, j.buf, n);
  buf[n] = '\0';
  return (int)n;
}

void emcb_train_print(FILE *f, const char *who, const emcb_train_result *r) {
  const double ms = r->steps ? 1e3 / (double)r->steps : NAN;
  fprintf(f, "%s:   train: %zu steps (after %zu) of %zu samples, prefetch depth %u: %.3g steps/s "
          "(per step: prefetch %.2f ms, lookup %.2f, backward %.2f, apply %.2f); baseline "
          "gather + SGD %.3g steps/s (gather %.2f ms, backward %.2f, update %.2f): x%.2f\n",
          who, r->steps, r->warmup, r->batch, r->prefetch_depth, r->steps_per_s,
          r->prefetch_s * ms, r->lookup_s * ms, r->backward_s * ms, r->apply_s * ms,
          r->baseline_steps_per_s, r->baseline_gather_s * ms, r->baseline_backward_s * ms,
          r->baseline_update_s * ms, r->speedup);
  fprintf(f, "%s:   train: hit ratio after prefetch %.4f (%" PRIu64 " of %" PRIu64 " present); "
          "prefetch EMC_ECAPACITY %" PRIu64 " of %" PRIu64 ", pin shortfall %" PRIu64
          " rows; %" PRIu64 " gradient rows; stores %s (%" PRIu64 " of %" PRIu64 " rows differ)\n",
          who, r->hit_ratio_after_prefetch, r->hits, r->present, r->prefetch_capacity_errors,
          r->prefetches, r->pin_shortfall, r->gradient_rows,
          r->stores_equal ? "bitwise equal" : "DIFFER", r->rows_differ, r->rows_compared);
  if (r->apply_refused)
    fprintf(f, "%s:   train: note: emc_apply_gradients refused %" PRIu64 " steps with "
            "EMC_ECAPACITY (a batch's distinct rows exceed t1 * capacity); the baseline skipped "
            "the same updates, so the two sides still compare, but those steps trained nothing\n",
            who, r->apply_refused);
}
