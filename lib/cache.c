/*
 * cache.c: the public cache API. Validates every argument before anything changes, picks the
 * backend, builds the key codec, and hands validated calls to the backend.
 */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "store_step.h"

#ifdef EMC_HAVE_CUDA
#include "emc_cuda.h"
#endif

void emc_cache_config_init(emc_cache_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->backend = EMC_BACKEND_AUTO;
  cfg->device = 0;
  cfg->capacity_bytes = (size_t)64 << 20;
  cfg->evict_high = 0.95f;
  cfg->evict_low = 0.80f;
  cfg->key_bits = 64;
  cfg->unified_index_rows = 65536;
  cfg->hash_seed = 0;
  cfg->prefetch_depth = 1;
  cfg->admission = EMC_ADMISSION_AUTO;
}

/* CPUs the calling thread may run on (its affinity mask, which a thread it creates inherits;
 * the online count where that fails). */
static long usable_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return sysconf(_SC_NPROCESSORS_ONLN);
}

void emc_optimizer_init(emc_optimizer *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->kind = EMC_OPT_SGD;
  o->merge = EMC_MERGE_SUM;
  o->lr = 0.01f;
  o->eps = 1e-8f;
  o->initial_accumulator = 0.0f;
}

/* The smallest struct_size accepted: everything up to and including key_bits. */
#define EMC__CFG_MIN_SIZE (offsetof(emc_cache_config, key_bits) + sizeof(uint32_t))

static emc_status pick_backend(emc_cache_config *cfg) {
#ifdef EMC_HAVE_CUDA
  char err[256] = "";
  int n;
#endif
  if (cfg->backend == EMC_BACKEND_HOST) return EMC_OK;
  if (cfg->backend != EMC_BACKEND_AUTO && cfg->backend != EMC_BACKEND_CUDA)
    return EMC_FAIL(EMC_EINVAL, "backend %d is not AUTO, HOST or CUDA", (int)cfg->backend);
#ifdef EMC_HAVE_CUDA
  n = emc__cuda_device_count(err, sizeof err);
  if (cfg->backend == EMC_BACKEND_AUTO) { /* CUDA when a device answers, else host memory */
    cfg->backend = n > 0 && cfg->device >= 0 && cfg->device < n ? EMC_BACKEND_CUDA : EMC_BACKEND_HOST;
    return EMC_OK;
  }
  if (n <= 0) return EMC_FAIL(EMC_ENODEV, "no CUDA device answers (%s)", n < 0 ? err : "0 devices");
  if (cfg->device < 0 || cfg->device >= n)
    return EMC_FAIL(EMC_ENODEV, "device %d, %d present", cfg->device, n);
  return EMC_OK;
#else
  if (cfg->backend == EMC_BACKEND_AUTO) {
    cfg->backend = EMC_BACKEND_HOST;
    return EMC_OK;
  }
  return EMC_FAIL(EMC_EUNSUPPORTED, "embcache was built without CUDA");
#endif
}

emc_status emc_device_count(int *out) {
#ifdef EMC_HAVE_CUDA
  char err[256] = "";
  int n;
#endif
  if (!out) return EMC_FAIL(EMC_EINVAL, "out is NULL");
#ifdef EMC_HAVE_CUDA
  n = emc__cuda_device_count(err, sizeof err);
  if (n < 0) return EMC_FAIL(EMC_ENODEV, "%s", err);
  if (n == 0) return EMC_FAIL(EMC_ENODEV, "the CUDA runtime reports 0 devices");
  *out = n;
  return EMC_OK;
#else
  return EMC_FAIL(EMC_EUNSUPPORTED, "embcache was built without CUDA");
#endif
}

/* Backend dispatch: every call below has been validated as far as the host can see. */
#ifdef EMC_HAVE_CUDA
#define IS_CUDA(c) ((c)->backend == EMC_BACKEND_CUDA)
#else
#define IS_CUDA(c) 0
#define emc__cuda_create(c) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_destroy(c) ((void)(c))
#define emc__cuda_lookup(c, i, o, u, w, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_insert(c, i, o, r, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_flush(c, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_stats(c, o) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_table_rows(c, t, o) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_prefetch(c, i, o, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_apply(c, i, o, g, p, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_dedup(c, i, o, u, uo, inv, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_shared_sync(c) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_shared_sync_held(c) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_shared_refuse_capture(c, s) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_shared_args(c, i, o, b, g, s, hi, ho, hb)                                     \
  ((void)(c), (void)(i), (void)(o), (void)(b), (void)(g), (void)(s), (void)(hi), (void)(ho),   \
   (void)(hb), EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA"))
#define emc__cuda_quiesce(c) EMC_FAIL(EMC_EUNSUPPORTED, "built without CUDA")
#define emc__cuda_count_host_writes(c, i, g) ((void)(c))
#endif

emc_status emc_cache_create(emc_store *store, const emc_cache_config *user_cfg, emc_cache **out) {
  emc_cache_config cfg;
  emc_cache *c;
  uint64_t *rows = NULL;
  emc_table_kind *kinds = NULL;
  const char **names = NULL;
  uint32_t t;
  emc_status st;
  int auto_admission;

  if (!store || !out) return EMC_FAIL(EMC_EINVAL, "store or out is NULL");
  emc_cache_config_init(&cfg);
  if (user_cfg) {
    if (user_cfg->struct_size < EMC__CFG_MIN_SIZE || user_cfg->struct_size > sizeof cfg)
      return EMC_FAIL(EMC_EINVAL,
                      "cfg->struct_size = %zu; call emc_cache_config_init (expects %zu..%zu)",
                      user_cfg->struct_size, (size_t)EMC__CFG_MIN_SIZE, sizeof cfg);
    memcpy(&cfg, user_cfg, user_cfg->struct_size);
    /* the version before `admission` ended with prefetch_depth and 4 bytes of tail padding
     * where admission now lies: fields are taken only from a struct that includes them */
    if (user_cfg->struct_size <= offsetof(emc_cache_config, reserved_))
      cfg.admission = EMC_ADMISSION_AUTO;
    cfg.struct_size = sizeof cfg;
  }
  if (!(cfg.evict_low > 0.0f && cfg.evict_low < cfg.evict_high && cfg.evict_high <= 1.0f))
    return EMC_FAIL(EMC_EINVAL, "thresholds t2 = %g, t1 = %g; need 0 < t2 < t1 <= 1",
                    (double)cfg.evict_low, (double)cfg.evict_high);
  if (cfg.key_bits != 32 && cfg.key_bits != 64)
    return EMC_FAIL(EMC_EINVAL, "key_bits = %u; must be 32 or 64", cfg.key_bits);
  if (cfg.capacity_bytes == 0) return EMC_FAIL(EMC_EINVAL, "capacity_bytes is 0");
  if (cfg.prefetch_depth > EMC__PIN_MAX - 1)
    return EMC_FAIL(EMC_EINVAL, "prefetch_depth = %u; at most %u", cfg.prefetch_depth,
                    EMC__PIN_MAX - 1);
  if (cfg.admission != EMC_ADMISSION_INLINE && cfg.admission != EMC_ADMISSION_BACKGROUND &&
      cfg.admission != EMC_ADMISSION_AUTO)
    return EMC_FAIL(EMC_EINVAL, "admission = %u; must be EMC_ADMISSION_INLINE (0), "
                    "EMC_ADMISSION_BACKGROUND (1) or EMC_ADMISSION_AUTO (2)", cfg.admission);
  if (cfg.unified_index_rows > (1ull << 32))
    return EMC_FAIL(EMC_EINVAL, "unified_index_rows = %llu; at most 2^32",
                    (unsigned long long)cfg.unified_index_rows);
  /* a shared store: AUTO picks the host backend (a CUDA cache over it waits for each lookup
   * and runs its writes on the host, cuda/sync.cu: asked for by name) */
  if (store->seg && cfg.backend == EMC_BACKEND_AUTO) cfg.backend = EMC_BACKEND_HOST;
  EMC_TRY(pick_backend(&cfg));
  /* AUTO: the admission thread pays off only with a core beside the callers' */
  auto_admission = cfg.admission == EMC_ADMISSION_AUTO;
  if (cfg.backend == EMC_BACKEND_CUDA) cfg.admission = EMC_ADMISSION_BACKGROUND;
  else if (auto_admission)
    cfg.admission = usable_cpus() >= 2 ? EMC_ADMISSION_BACKGROUND : EMC_ADMISSION_INLINE;

  if (!(c = emc__calloc(1, sizeof *c))) return EMC_FAIL(EMC_ENOMEM, "cache");
  rows = emc__calloc(store->n_tables, sizeof *rows);
  kinds = emc__calloc(store->n_tables, sizeof *kinds);
  names = emc__calloc(store->n_tables, sizeof *names);
  if (!rows || !kinds || !names) {
    st = EMC_FAIL(EMC_ENOMEM, "codec inputs");
    goto fail;
  }
  for (t = 0; t < store->n_tables; t++) {
    rows[t] = store->tables[t].rows;
    kinds[t] = store->tables[t].kind;
    names[t] = store->tables[t].name;
  }
  st = emc__codec_build_named(rows, kinds, names, store->n_tables, cfg.key_bits, cfg.hash_seed,
                              &c->codec);
  if (st != EMC_OK) goto fail;
  c->store = store;
  c->cfg = cfg;
  c->admission_auto = auto_admission;
  c->backend = cfg.backend;
  if ((st = emc__store_attach(store)) != EMC_OK) goto fail;
  if ((st = IS_CUDA(c) ? emc__cuda_create(c) : emc__host_create(c)) != EMC_OK) {
    emc__store_detach(store);
    goto fail;
  }
  free(rows);
  free(kinds);
  free(names);
  *out = c;
  return EMC_OK;
fail:
  emc__codec_free(&c->codec);
  free(c);
  free(rows);
  free(kinds);
  free(names);
  return st;
}

emc_status emc_cache_destroy(emc_cache *c) {
  if (!c) return EMC_OK;
  if (IS_CUDA(c)) {
    emc_status st = emc__cuda_flush(c, NULL);
    /* EMC_ERANGE and EMC_ECAPACITY only report what earlier asynchronous calls met (bad ids,
     * refused training calls, pin shortfall): the flush itself completed */
    if (st != EMC_OK && st != EMC_ERANGE && st != EMC_ECAPACITY) return st;
    emc__cuda_destroy(c);
  } else {
    EMC_TRY(emc__host_flush(c));
    emc__host_destroy(c);
  }
  emc__store_detach(c->store);
  emc__codec_free(&c->codec);
  free(c);
  return EMC_OK;
}

emc_backend emc_cache_backend(const emc_cache *c) { return c ? c->backend : EMC_BACKEND_AUTO; }

emc_admission emc_cache_admission(const emc_cache *c) {
  if (!c) return EMC_ADMISSION_AUTO;
  if (IS_CUDA(c) || emc__admission_threaded(c)) return EMC_ADMISSION_BACKGROUND;
  return EMC_ADMISSION_INLINE;
}

/* Checks shared by lookup and insert: pointers, offsets, dense id ranges. */
static emc_status check_batch(const emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              const void *buf, const char *buf_name) {
  uint64_t total;
  size_t bytes;
  if (!c) return EMC_FAIL(EMC_EINVAL, "cache is NULL");
  EMC_TRY(emc__check_offsets(c->store, offsets, &total, &bytes));
  if (total > 0 && !ids) return EMC_FAIL(EMC_EINVAL, "ids is NULL with %llu ids", (unsigned long long)total);
  if (buf_name && bytes > 0 && !buf)
    return EMC_FAIL(EMC_EINVAL, "%s is NULL with %zu bytes", buf_name, bytes);
  return emc__check_dense_ids(c->store, ids, offsets);
}

emc_status emc_lookup_ex(emc_cache *c, const uint64_t *ids, const uint64_t *offsets, void *out,
                         uint8_t *where, void *stream) {
  if (c && IS_CUDA(c)) return emc__cuda_lookup(c, ids, offsets, out, where, stream);
  (void)stream; /* host backend: ignored */
  EMC_TRY(check_batch(c, ids, offsets, out, "out"));
  emc__host_sync(c); /* a shared store: no copy older than a completed write */
  return emc__host_lookup(c, ids, offsets, out, where);
}

emc_status emc_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets, void *out,
                      void *stream) {
  return emc_lookup_ex(c, ids, offsets, out, NULL, stream);
}

/* The host backend's calls that change the cache. Over a shared store they hold the store's
 * lock throughout (the store's lock before the cache's): rows they read are current, rows
 * they write go through to the store, and what they write is announced in the update log
 * first and published last. */
enum { CALL_INSERT, CALL_APPLY, CALL_PREFETCH };
static emc_status host_shared_call(emc_cache *c, int call, const uint64_t *ids,
                                   const uint64_t *offsets, const void *rows, const void *grads,
                                   const emc_optimizer *opt) {
  int writes = call != CALL_PREFETCH;
  uint64_t pre = 0, mark = 0;
  emc_status st;
  EMC_TRY(emc__host_shared_begin(c, ids, offsets, writes, &pre, &mark));
  st = call == CALL_INSERT  ? emc__host_insert(c, ids, offsets, rows)
       : call == CALL_APPLY ? emc__host_apply(c, ids, offsets, grads, opt)
                            : emc__host_prefetch(c, ids, offsets);
  emc__host_shared_end(c, writes, emc__may_have_written(st), pre, mark);
  return st;
}

/* A CUDA cache's insert or apply over a shared store: on the host, under the store's lock,
 * into the store's rows (lib/store_step.c), announced and published in the update log; the
 * cache's copies are then refreshed from the store (cuda/sync.cu). */
static emc_status cuda_shared_write(emc_cache *c, int call, const uint64_t *ids,
                                    const uint64_t *offsets, const void *buf,
                                    const emc_optimizer *opt, void *stream) {
  uint64_t *hids = NULL, *hoffs = NULL, rows = 0;
  void *hbuf = NULL;
  emc_status st, st2;
  EMC_TRY(emc__cuda_shared_args(c, ids, offsets, buf, call == CALL_APPLY, stream, &hids, &hoffs,
                                &hbuf));
  st = call == CALL_APPLY ? emc__check_apply(c, hids, hoffs, hbuf, opt)
                          : check_batch(c, hids, hoffs, hbuf, "rows");
  if (st == EMC_OK) st = emc__store_lock(c->store); /* the store's lock before the cache's */
  if (st == EMC_OK) {
    emc__seg_even_stripes(c->store);
    st = emc__cuda_shared_sync_held(c);
    if (st == EMC_OK) {
      const uint64_t mark = emc__log_mark(c->store);
      emc__log_batch(c->store, hids, hoffs); /* announced before any row changes */
      st = call == CALL_APPLY
               ? emc__store_step_apply(c->store, hids, hoffs, (const float *)hbuf, opt, &rows)
               : emc__store_step_insert(c->store, hids, hoffs, hbuf);
      if (!emc__may_have_written(st)) /* refused before any row changed: nothing to publish */
        emc__log_withdraw(c->store, mark);
      else
        emc__log_publish(c->store);
      st2 = emc__cuda_shared_sync_held(c); /* its own copies too */
      if (st == EMC_OK) st = st2;
      if (st == EMC_OK)
        emc__cuda_count_host_writes(c, call == CALL_INSERT ? hoffs[c->store->n_tables] : 0, rows);
    }
    emc__store_unlock(c->store);
  }
  free(hids);
  free(hoffs);
  free(hbuf);
  return st;
}

emc_status emc__cache_grad_batch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                 const void *grads, void *stream, uint64_t **hids,
                                 uint64_t **hoffs, void **hgrads) {
  *hids = *hoffs = NULL;
  *hgrads = NULL;
  if (!c || !IS_CUDA(c) || !c->store->seg) return EMC_OK;
  return emc__cuda_shared_args(c, ids, offsets, grads, 1, stream, hids, hoffs, hgrads);
}

emc_status emc__cache_sync(emc_cache *c) {
  if (!c) return EMC_OK;
  if (IS_CUDA(c)) return c->store->seg ? emc__cuda_shared_sync(c) : EMC_OK;
  emc__host_sync(c);
  return EMC_OK;
}

emc_status emc_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                      const void *rows, void *stream) {
  if (c && IS_CUDA(c) && c->store->seg)
    return cuda_shared_write(c, CALL_INSERT, ids, offsets, rows, NULL, stream);
  if (c && IS_CUDA(c)) return emc__cuda_insert(c, ids, offsets, rows, stream);
  (void)stream;
  EMC_TRY(check_batch(c, ids, offsets, rows, "rows"));
  return host_shared_call(c, CALL_INSERT, ids, offsets, rows, NULL, NULL);
}

emc_status emc_flush(emc_cache *c, void *stream) {
  if (!c) return EMC_FAIL(EMC_EINVAL, "cache is NULL");
  if (IS_CUDA(c)) return emc__cuda_flush(c, stream);
  (void)stream;
  return emc__host_flush(c);
}

emc_status emc_get_stats(const emc_cache *c, emc_stats *out) {
  if (!c || !out) return EMC_FAIL(EMC_EINVAL, "cache or out is NULL");
  if (IS_CUDA(c)) return emc__cuda_stats(c, out);
  emc__host_stats(c, out);
  return EMC_OK;
}

emc_status emc_get_table_rows_cached(const emc_cache *c, uint32_t table, uint64_t *out) {
  if (!c || !out) return EMC_FAIL(EMC_EINVAL, "cache or out is NULL");
  if (table >= c->store->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, c->store->n_tables);
  if (IS_CUDA(c)) return emc__cuda_table_rows(c, table, out);
  *out = emc__host_table_rows(c, table);
  return EMC_OK;
}

emc_status emc_cache_global_key(const emc_cache *c, uint32_t table, uint64_t id, uint64_t *key,
                                uint64_t *code, uint32_t *code_bits) {
  const emc__table_code *tc;
  if (!c) return EMC_FAIL(EMC_EINVAL, "cache is NULL");
  if (table >= c->store->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, c->store->n_tables);
  tc = &c->codec.tables[table];
  if (tc->kind == EMC_TABLE_DENSE && id >= tc->rows)
    return EMC_FAIL(EMC_ERANGE, "table %u: id %llu >= rows %llu", table, (unsigned long long)id,
                    (unsigned long long)tc->rows);
  if (key) *key = emc__global_key(tc, id, c->codec.hash_seed);
  if (code) *code = tc->code;
  if (code_bits) *code_bits = tc->len;
  return EMC_OK;
}

/* ================================================================= training */
/* Batches of the training calls index positions with 32-bit integers (emc_dedup's inverse). */
static emc_status check_positions(const emc_cache *c, const uint64_t *offsets) {
  uint64_t total = offsets[c->store->n_tables];
  if (total >= (1ull << 32))
    return EMC_FAIL(EMC_EINVAL, "%llu ids in one batch; training calls take fewer than 2^32",
                    (unsigned long long)total);
  return EMC_OK;
}

/* The optimizer's fields (both backends, before any pointer is read). */
static emc_status check_optimizer(const emc_optimizer *o) {
  if (!o) return EMC_FAIL(EMC_EINVAL, "opt is NULL");
  if (o->struct_size != sizeof *o)
    return EMC_FAIL(EMC_EINVAL, "opt->struct_size = %zu, expected %zu: call emc_optimizer_init",
                    o->struct_size, sizeof *o);
  if (o->kind != EMC_OPT_SGD && o->kind != EMC_OPT_ROWWISE_ADAGRAD)
    return EMC_FAIL(EMC_EINVAL, "opt->kind = %d is not SGD or ROWWISE_ADAGRAD", (int)o->kind);
  if (o->merge != EMC_MERGE_SUM && o->merge != EMC_MERGE_MEAN)
    return EMC_FAIL(EMC_EINVAL, "opt->merge = %d is not SUM or MEAN", (int)o->merge);
  if (!isfinite(o->lr)) return EMC_FAIL(EMC_EINVAL, "opt->lr = %g is not finite", (double)o->lr);
  if (!isfinite(o->eps) || o->eps < 0.0f)
    return EMC_FAIL(EMC_EINVAL, "opt->eps = %g; must be finite and >= 0", (double)o->eps);
  if (!isfinite(o->initial_accumulator) || o->initial_accumulator < 0.0f)
    return EMC_FAIL(EMC_EINVAL, "opt->initial_accumulator = %g; must be finite and >= 0",
                    (double)o->initial_accumulator);
  return EMC_OK;
}

/* Row-wise Adagrad needs an accumulator beside every row it steps: each table with ids in the
 * batch (offsets: host memory, checked), or, with offsets NULL, every table of the store. */
static emc_status check_state(const emc_cache *c, const emc_optimizer *o,
                              const uint64_t *offsets) {
  uint32_t t;
  if (o->kind != EMC_OPT_ROWWISE_ADAGRAD) return EMC_OK;
  for (t = 0; t < c->store->n_tables; t++) {
    if (offsets && offsets[t + 1] == offsets[t]) continue; /* no ids: nothing to step */
    if (c->store->tables[t].state != EMC_STATE_ADAGRAD)
      return EMC_FAIL(EMC_EINVAL,
                      "row-wise Adagrad needs an accumulator per row: table %u ('%s'), %s, was "
                      "created without EMC_STATE_ADAGRAD",
                      t, c->store->tables[t].name,
                      offsets ? "which has ids in the batch" : "a table of the store (CUDA backend)");
  }
  return EMC_OK;
}

emc_status emc_prefetch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                        void *stream) {
  if (c && IS_CUDA(c) && c->store->seg) { /* its admissions read store rows: under the lock */
    emc_status st;
    EMC_TRY(emc__cuda_shared_refuse_capture(c, stream));
    EMC_TRY(emc__store_lock(c->store));
    emc__seg_even_stripes(c->store);
    st = emc__cuda_shared_sync_held(c);
    if (st == EMC_OK) {
      /* whatever it returned (EMC_ECAPACITY comes after a whole enqueue, an error may follow
       * a partial one), its admissions are done before the lock goes */
      emc_status q;
      st = emc__cuda_prefetch(c, ids, offsets, stream);
      q = emc__cuda_quiesce(c);
      if (st == EMC_OK) st = q;
    }
    emc__store_unlock(c->store);
    return st;
  }
  if (c && IS_CUDA(c)) return emc__cuda_prefetch(c, ids, offsets, stream);
  (void)stream;
  EMC_TRY(check_batch(c, ids, offsets, NULL, NULL));
  EMC_TRY(check_positions(c, offsets));
  return host_shared_call(c, CALL_PREFETCH, ids, offsets, NULL, NULL, NULL);
}

emc_status emc__check_apply(const emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                            const void *grads, const emc_optimizer *opt) {
  uint64_t total;
  if (!c) return EMC_FAIL(EMC_EINVAL, "cache is NULL");
  EMC_TRY(check_optimizer(opt));
  EMC_TRY(check_batch(c, ids, offsets, NULL, NULL));
  EMC_TRY(check_positions(c, offsets));
  EMC_TRY(check_state(c, opt, offsets));
  total = offsets[c->store->n_tables];
  if (total > 0 && !grads)
    return EMC_FAIL(EMC_EINVAL, "grads is NULL with %llu ids", (unsigned long long)total);
  return EMC_OK;
}

emc_status emc_apply_gradients(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                               const void *grads, const emc_optimizer *opt, void *stream) {
  if (!c) return EMC_FAIL(EMC_EINVAL, "cache is NULL");
  EMC_TRY(check_optimizer(opt));
  if (IS_CUDA(c) && c->store->seg) return cuda_shared_write(c, CALL_APPLY, ids, offsets, grads, opt, stream);
  if (IS_CUDA(c)) { /* offsets may be device memory: every table must keep state */
    EMC_TRY(check_state(c, opt, NULL));
    return emc__cuda_apply(c, ids, offsets, grads, opt, stream);
  }
  (void)stream;
  EMC_TRY(emc__check_apply(c, ids, offsets, grads, opt));
  return host_shared_call(c, CALL_APPLY, ids, offsets, NULL, grads, opt);
}

emc_status emc_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                     uint64_t *unique_ids, uint64_t *unique_offsets, uint32_t *inverse,
                     void *stream) {
  uint64_t total;
  if (c && IS_CUDA(c))
    return emc__cuda_dedup(c, ids, offsets, unique_ids, unique_offsets, inverse, stream);
  (void)stream;
  EMC_TRY(check_batch(c, ids, offsets, NULL, NULL));
  EMC_TRY(check_positions(c, offsets));
  total = offsets[c->store->n_tables];
  if (!unique_offsets) return EMC_FAIL(EMC_EINVAL, "unique_offsets is NULL");
  if (total > 0 && (!unique_ids || !inverse))
    return EMC_FAIL(EMC_EINVAL, "unique_ids or inverse is NULL with %llu ids",
                    (unsigned long long)total);
  return emc__host_dedup(c, ids, offsets, unique_ids, unique_offsets, inverse);
}
