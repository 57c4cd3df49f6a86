/*
 * cache_cuda.cu: the CUDA backend of the global cache table: lifecycle, pointer spaces, the
 * calls' arguments and the lookup call (writer sections and the scratch pool: streams.cu;
 * flush and stats: report.cu). The stages live beside their kernels (dev.cuh lists them).
 *
 * Same contract as the host backend (include/embcache.h), same key codec, index layout and
 * protocol, page layout and planning rules (lib/emc_item.h), kept in device memory:
 *   index   one bucketed open-addressing index for all tables, one copy (keys, entry words,
 *           stamps); entries point at a pool slot or, for hashed tables, straight at a host
 *           row (the unified index)
 *   pool    an arena of equal pages with free bitmaps; pages go to tables on demand inside
 *           capacity_bytes and come back when empty
 *   store   the store's row memory (and hashed tables' id maps) is registered with CUDA and
 *           mapped: kernels read missing rows from host memory directly and write dirty rows
 *           back there
 *
 * Writer sections and the scratch pool: streams.cu (the ordering argument is there).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_cuda.h"
#include "train.cuh"

emc_status emc__cuda_fail(cudaError_t e, const char *what) {
  emc_status st = e == cudaErrorMemoryAllocation ? EMC_EDEVMEM : EMC_ECUDA;
  (void)cudaGetLastError();
  return EMC_FAIL(st, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}
#define CUG(call)                                             \
  do {                                                        \
    cudaError_t e_ = (call);                                  \
    if (e_ != cudaSuccess) {                                  \
      st = emc__cuda_fail(e_, #call);                         \
      goto out;                                               \
    }                                                         \
  } while (0)

const dview *emc__cuda_view(const emc__cuda_cache *k) { return &k->V; }
uint8_t *emc__cuda_repack_marks(const emc__cuda_cache *k) { return k->repack_marks; }
uint64_t *emc__cuda_repack_scratch(const emc__cuda_cache *k) { return k->repack_scratch; }
const dtab *emc__cuda_tab_host(const emc__cuda_cache *k, uint32_t t) { return &k->tabs_host[t]; }

extern "C" int emc__cuda_available(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return device >= 0 && device < n;
}

/* ================================================================= store registration */
/* Register the store's row memory, hashed maps and row ids (page-rounded, merged ranges). */
static emc_status register_store(emc__cuda_cache *k, const emc_store *s) {
  uint32_t t, n = 0, i, j;
  reg_range *r = (reg_range *)emc__calloc((size_t)s->n_tables * 4 + 1, sizeof *r);
  const uintptr_t pg = 4096;
  if (!r) return EMC_FAIL(EMC_ENOMEM, "registration ranges");
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    const void *a[4] = {tb->base, tb->map_ids, tb->map_rowp1, tb->row_ids};
    size_t b[4] = {tb->base_bytes, (size_t)tb->map_cap * 8, (size_t)tb->map_cap * 8,
                   tb->row_ids ? (size_t)tb->rows * 8 : 0};
    for (i = 0; i < 4; i++) {
      if (!a[i] || !b[i]) continue;
      r[n].lo = (uintptr_t)a[i] & ~(pg - 1);
      r[n].hi = ((uintptr_t)a[i] + b[i] + pg - 1) & ~(pg - 1);
      n++;
    }
  }
  for (i = 1; i < n; i++) /* sort by start, then merge overlapping or touching ranges */
    for (j = i; j > 0 && r[j - 1].lo > r[j].lo; j--) {
      reg_range x = r[j];
      r[j] = r[j - 1];
      r[j - 1] = x;
    }
  for (i = 0, j = 0; i < n; i++) {
    if (j > 0 && r[i].lo <= r[j - 1].hi) {
      if (r[i].hi > r[j - 1].hi) r[j - 1].hi = r[i].hi;
    } else {
      r[j++] = r[i];
    }
  }
  k->regs = r;
  for (i = 0; i < j; i++) {
    cudaError_t e = emc__cu_host_register((void *)r[i].lo, r[i].hi - r[i].lo,
                                     cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      k->n_regs = i;
      return emc__cuda_fail(e, "cudaHostRegister(store rows)");
    }
  }
  k->n_regs = j;
  return EMC_OK;
}

static emc_status dev_ptr(const void *host, void **out) {
  if (!host) {
    *out = NULL;
    return EMC_OK;
  }
  CU(cudaHostGetDevicePointer(out, (void *)host, 0));
  return EMC_OK;
}

/* ================================================================= create / destroy */
extern "C" void emc__cuda_destroy(emc_cache *c);

extern "C" emc_status emc__cuda_create(emc_cache *c) {
  emc__cuda_cache *k;
  const emc_store *s = c->store;
  emc__pool_geom geo;
  emc__page_layout *layout = NULL;
  emc_status st = EMC_OK;
  uint32_t t, n = s->n_tables;
  size_t free_b = 0, total_b = 0, need_b, kb = c->codec.key_bits == 32 ? 4 : 8, per_page = 0;
  uint64_t slots;
  dglob g0;
  int caller_dev = c->cfg.device;
  if (cudaGetDevice(&caller_dev) != cudaSuccess) (void)cudaGetLastError();
  if (!(k = (emc__cuda_cache *)emc__calloc(1, sizeof *k))) return EMC_FAIL(EMC_ENOMEM, "cuda cache");
  c->cuda = k;
  k->n_tables = n;
  k->device = c->cfg.device;
  if (pthread_mutex_init(&k->lock, NULL) != 0) {
    free(k);
    c->cuda = NULL;
    return EMC_FAIL(EMC_ENOMEM, "mutex");
  }
  layout = (emc__page_layout *)emc__calloc(n, sizeof *layout);
  k->tabs_host = (dtab *)emc__calloc(n, sizeof *k->tabs_host);
  k->map_claim = (uint32_t **)emc__calloc(n, sizeof *k->map_claim);
  if (!layout || !k->tabs_host || !k->map_claim) {
    st = EMC_FAIL(EMC_ENOMEM, "cuda cache tables");
    goto out;
  }
  CUG(cudaSetDevice(c->cfg.device));
  CUG(cudaDeviceGetAttribute(&k->sm_count, cudaDevAttrMultiProcessorCount, c->cfg.device));
  CUG(cudaMemGetInfo(&free_b, &total_b));
  if (c->cfg.capacity_bytes > free_b) {
    st = EMC_FAIL(EMC_EDEVMEM, "capacity_bytes %zu exceeds the %zu bytes free on device %d (of %zu)",
                  c->cfg.capacity_bytes, free_b, c->cfg.device, total_b);
    goto out;
  }
  if ((st = emc__pool_geometry(c, &geo, layout)) != EMC_OK) goto out;
  CUG(cudaStreamCreateWithFlags(&k->priv, cudaStreamNonBlocking));
  CUG(cudaStreamCreateWithFlags(&k->writer, cudaStreamNonBlocking));
  CUG(cudaEventCreateWithFlags(&k->wr_tail, cudaEventDisableTiming));
  CUG(cudaEventCreateWithFlags(&k->cap_tail, cudaEventDisableTiming));
  for (t = 0; t < EMC_CAPTURES; t++) CUG(cudaEventCreateWithFlags(&k->caps[t].last, cudaEventDisableTiming));

  k->V.n_tables = n;
  k->V.key_bits = c->codec.key_bits;
  k->V.hash_seed = c->codec.hash_seed;
  k->V.page_bytes = geo.page_bytes;
  k->V.n_pages = geo.n_pages;
  k->V.max_slots = geo.max_slots;
  k->V.low = geo.low_bytes;
  k->V.high = geo.high_bytes;
  k->V.unified_max = geo.unified;
  k->V.ix.key_bits = c->codec.key_bits;
  k->V.ix.n_buckets = geo.ix_buckets;
  k->max_rows = geo.max_rows;
  slots = geo.ix_buckets * EMC__BUCKET;
  if (!emc__size_mul64(slots, emc__index_entry_bytes(c->codec.key_bits), &k->index_bytes) ||
      !emc__size_mul64(geo.n_pages, geo.page_bytes, &k->arena_bytes)) {
    st = EMC_FAIL(EMC_EDEVMEM, "capacity_bytes %zu: the device structures' size overflows size_t",
                  c->cfg.capacity_bytes);
    goto out;
  }
  /* as the host backend counts it (lib/cache_host.c, metadata_bytes) */
  for (t = 0; t < n; t++) {
    size_t b = (size_t)layout[t].n_words * 8 + (layout[t].off_owner ? (size_t)layout[t].n_slots * 8 : 0);
    if (b > per_page) per_page = b;
  }
  k->meta_bytes = k->index_bytes + (size_t)geo.n_pages * per_page;

  /* refuse a budget the device cannot hold (arena, index, page lists, write-back cells) */
  need_b = k->arena_bytes + k->index_bytes + (size_t)geo.n_pages * 16 + EMC_WB_CELLS * 4;
  CUG(cudaMemGetInfo(&free_b, &total_b));
  if (need_b > free_b) {
    st = EMC_FAIL(EMC_EDEVMEM,
                  "capacity_bytes %zu needs %zu bytes of device memory (pool and index); "
                  "device %d has %zu free of %zu",
                  c->cfg.capacity_bytes, need_b, c->cfg.device, free_b, total_b);
    goto out;
  }
  /* a shared store: its whole segment, registered once for the process's CUDA caches */
  if ((st = s->seg ? emc__cuda_shared_register(k, c->store) : register_store(k, s)) != EMC_OK) goto out;
  for (t = 0; t < n; t++) {
    const emc__table *tb = &s->tables[t];
    dtab *d = &k->tabs_host[t];
    void *p;
    if ((st = dev_ptr(tb->base, &p)) != EMC_OK) goto out;
    d->base = (unsigned char *)p;
    if ((st = dev_ptr(tb->map_ids, &p)) != EMC_OK) goto out;
    d->map_ids = (const uint64_t *)p;
    if ((st = dev_ptr(tb->map_rowp1, &p)) != EMC_OK) goto out;
    d->map_rowp1 = (const uint64_t *)p;
    if ((st = dev_ptr(tb->row_ids, &p)) != EMC_OK) goto out;
    d->row_ids = (const uint64_t *)p;
    d->map_cap = tb->map_cap;
    d->code = c->codec.tables[t];
    d->L = layout[t];
    d->row_bytes = tb->row_bytes;
    d->stride = tb->stride;
    d->kind = (uint32_t)tb->kind;
    d->dtype = (uint32_t)tb->dtype;
    d->dim = tb->dim;
    d->full_bytes = tb->full_bytes;
    d->state_off = tb->state_off;
    d->state = tb->state;
    if (tb->kind == EMC_TABLE_HASHED) { /* the map's used slots, as bits the device claims */
      CUG(emc__cu_malloc((void **)&k->map_claim[t], (size_t)(tb->map_cap / 32 + 1) * 4));
      d->map_claim = k->map_claim[t];
    }
  }
  CUG(emc__cu_host_alloc((void **)&k->mirror_host, 3 * sizeof(ull), cudaHostAllocMapped | cudaHostAllocPortable));
  CUG(emc__cu_host_alloc((void **)&k->offs_host, ((size_t)n + 1) * 8, cudaHostAllocDefault));
  memset(k->mirror_host, 0, 3 * sizeof(ull));
  {
    void *p;
    CUG(cudaHostGetDevicePointer(&p, k->mirror_host, 0));
    k->V.bad_mirror = (ull *)p;
  }
  CUG(emc__cu_malloc(&k->V.ix.keys, (size_t)slots * kb));
  CUG(emc__cu_malloc((void **)&k->V.ix.lm, (size_t)slots * 8));
  CUG(emc__cu_malloc((void **)&k->V.ix.stamps, (size_t)slots * 2));
  CUG(emc__cu_malloc((void **)&k->V.arena, k->arena_bytes));
  CUG(emc__cu_malloc((void **)&k->V.tabs, n * sizeof(dtab)));
  CUG(emc__cu_malloc((void **)&k->V.ts, n * sizeof(tstate)));
  CUG(emc__cu_malloc((void **)&k->V.g, sizeof(dglob)));
  CUG(emc__cu_malloc((void **)&k->V.free_pages, (size_t)geo.n_pages * 4));
  CUG(emc__cu_malloc((void **)&k->V.plist, (size_t)geo.n_pages * 4));
  CUG(emc__cu_malloc((void **)&k->V.new_pages, (size_t)geo.n_pages * 4));
  CUG(emc__cu_malloc((void **)&k->V.page_young, (size_t)geo.n_pages * 4));
  CUG(emc__cu_malloc((void **)&k->V.hist, EMC_HIST * sizeof(ull)));
  CUG(emc__cu_malloc((void **)&k->V.wb_cells, EMC_WB_CELLS * 4));
  CUG(emc__cu_malloc((void **)&k->repack_marks, EMC_REPACK_STEP));
  CUG(emc__cu_malloc((void **)&k->repack_scratch, EMC_REPACK_SCRATCH_BYTES));
  /* prefetch pins: prefetch_depth + 1 lists, grown to a batch's size by its first prefetch */
  k->V.n_lists = c->cfg.prefetch_depth + 1;
  k->V.ring_cap = 0;
  k->V.ring_keys = NULL;
  CUG(emc__cu_malloc((void **)&k->V.ring_n, (size_t)k->V.n_lists * 4));
  CUG(cudaMemsetAsync(k->V.ring_n, 0, (size_t)k->V.n_lists * 4, k->priv));
  k->V.ix.epoch = &k->V.g->repack_epoch;
  memset(&g0, 0, sizeof g0);
  CUG(cudaMemcpyAsync(k->V.g, &g0, sizeof g0, cudaMemcpyHostToDevice, k->priv));
  CUG(cudaMemcpyAsync((void *)k->V.tabs, k->tabs_host, n * sizeof(dtab), cudaMemcpyHostToDevice, k->priv));
  CUG(emc__cu_init(k, k->priv));
  for (t = 0; t < n; t++) { /* hashed tables: the rows the store holds, the map's used slots */
    const emc__table *tb = &s->tables[t];
    ull count = EMC_LD_ACQUIRE(tb->count);
    if (tb->kind != EMC_TABLE_HASHED) continue;
    CUG(cudaMemcpyAsync(&k->V.ts[t].store_count, &count, sizeof count, cudaMemcpyHostToDevice, k->priv));
    CUG(cudaStreamSynchronize(k->priv)); /* (count lives on this stack frame) */
    CUG(emc__cu_claim_init(k->map_claim[t], k->tabs_host[t].map_rowp1, tb->map_cap, k->priv));
  }
  CUG(cudaStreamSynchronize(k->priv));
  k->ok = 1;
  k->prof = getenv("EMC_CUDA_PROFILE") && getenv("EMC_CUDA_PROFILE")[0] == '1';
out:
  free(layout);
  if (st != EMC_OK) emc__cuda_destroy(c);
  if (cudaSetDevice(caller_dev) != cudaSuccess) (void)cudaGetLastError(); /* the caller's device */
  return st;
}

extern "C" void emc__cuda_destroy(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  uint32_t i;
  int caller_dev = -1;
  if (!k) return;
  if (cudaGetDevice(&caller_dev) != cudaSuccess) caller_dev = -1;
  cudaSetDevice(k->device);
  if (k->writer) cudaStreamSynchronize(k->writer);
  if (k->priv) cudaStreamSynchronize(k->priv);
  if (k->cap_tail) cudaEventSynchronize(k->cap_tail); /* the last launched graph's sections */
  cudaDeviceSynchronize(); /* every stream this cache used has finished with its memory */
  if (k->prof) emc__cuda_prof_print(k);
  for (i = 0; i < 2 * PROF_N; i++)
    if (k->pev[i]) cudaEventDestroy(k->pev[i]);
  for (i = 0; i < k->n_slots; i++) emc__cuda_free_slot(&k->slots[i]);
  /* captured slots: the caller destroys its graphs before the cache (embcache.h); a graph
   * still alive keeps only its ticket, which its user object frees */
  for (i = 0; i < k->n_captured; i++) {
    emc__scratch *S = k->captured[i];
    emc__cuda_free_slot(S);
    if (__atomic_sub_fetch(&S->ticket->refs, 1, __ATOMIC_ACQ_REL) == 0) free(S->ticket);
    free(S);
  }
  free(k->captured);
  if (k->wr_tail) cudaEventDestroy(k->wr_tail);
  if (k->cap_tail) cudaEventDestroy(k->cap_tail);
  for (i = 0; i < EMC_CAPTURES; i++)
    if (k->caps[i].last) cudaEventDestroy(k->caps[i].last);
  cudaFree(k->V.ix.keys);
  cudaFree(k->V.ix.lm);
  cudaFree(k->V.ix.stamps);
  cudaFree(k->V.arena);
  cudaFree((void *)k->V.tabs);
  cudaFree(k->V.ts);
  cudaFree(k->V.g);
  cudaFree(k->V.free_pages);
  cudaFree(k->V.plist);
  cudaFree(k->V.new_pages);
  cudaFree(k->V.page_young);
  cudaFree(k->V.hist);
  cudaFree(k->V.wb_cells);
  cudaFree(k->repack_marks);
  cudaFree(k->repack_scratch);
  cudaFree(k->V.ring_keys);
  cudaFree(k->V.ring_n);
  if (k->map_claim)
    for (i = 0; i < k->n_tables; i++) cudaFree(k->map_claim[i]);
  free(k->map_claim);
  if (k->mirror_host) cudaFreeHost(k->mirror_host);
  if (k->offs_host) cudaFreeHost(k->offs_host);
  for (i = 0; i < k->n_regs; i++) cudaHostUnregister((void *)k->regs[i].lo);
  emc__cuda_shared_unregister(k, c->store);
  free(k->regs);
  if (k->writer) cudaStreamDestroy(k->writer);
  if (k->priv) cudaStreamDestroy(k->priv);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&k->lock);
  free(k->tabs_host);
  free(k);
  c->cuda = NULL;
  if (caller_dev >= 0 && cudaSetDevice(caller_dev) != cudaSuccess) (void)cudaGetLastError();
}

/* ================================================================= call arguments */
/* The answer is remembered only for device memory of this device, for the EMC_PTR_CACHE most
 * recent pointers (a caller passes the same buffers every call): a device address never comes
 * back as host memory, but a freed pinned buffer's address may come back as pageable memory,
 * which a kernel must not read (defect 14 of the pre-flight review: the cache was keyed by
 * address alone, whatever the answer). */
int emc__cuda_space(emc__cuda_cache *k, const void *p) {
  cudaPointerAttributes a;
  uint32_t i;
  int sp;
  if (!p) return EMC_SPACE_PAGEABLE;
  for (i = 0; i < EMC_PTR_CACHE; i++)
    if (k->pcache[i] == p) return EMC_SPACE_DEVICE;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return EMC_SPACE_PAGEABLE;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
    sp = a.device == k->device || a.type == cudaMemoryTypeManaged ? EMC_SPACE_DEVICE : EMC_SPACE_OTHER;
  else if (a.type == cudaMemoryTypeHost && a.devicePointer == p)
    sp = EMC_SPACE_MAPPED;
  else
    sp = EMC_SPACE_PAGEABLE;
  if (sp == EMC_SPACE_DEVICE) {
    k->pcache[k->pc_next] = p;
    k->pc_next = (k->pc_next + 1) % EMC_PTR_CACHE;
  }
  return sp;
}

int emc__cuda_device_accessible(emc__cuda_cache *k, const void *p) {
  int sp = emc__cuda_space(k, p);
  return sp == EMC_SPACE_DEVICE || sp == EMC_SPACE_MAPPED;
}

emc_status emc__cuda_check_space(emc__cuda_cache *k, const void *p, const char *name) {
  if (p && emc__cuda_space(k, p) == EMC_SPACE_OTHER)
    return EMC_FAIL(EMC_EINVAL, "%s is memory of another device than the cache's (device %d); "
                    "buffers must be on the cache's device, in pinned host memory or in host memory",
                    name, k->device);
  return EMC_OK;
}

emc_status emc__cuda_check_align(emc__cuda_cache *k, const void *p, unsigned align, const char *name) {
  if (p && ((uintptr_t)p & (align - 1u)) && emc__cuda_device_accessible(k, p))
    return EMC_FAIL(EMC_EINVAL, "%s %p in device or pinned memory is not %u-byte aligned", name, p,
                    align);
  return EMC_OK;
}

emc_status emc__cuda_batch_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                const void *buf, const char *buf_name, unsigned buf_align,
                                cudaStream_t st,
                                const uint64_t **offs, uint64_t *n, size_t *bytes) {
  emc__cuda_cache *k = c->cuda;
  int sp;
  if (!offsets) return EMC_FAIL(EMC_EINVAL, "offsets is NULL");
  sp = emc__cuda_space(k, offsets);
  if (sp == EMC_SPACE_OTHER) return emc__cuda_check_space(k, offsets, "offsets");
  /* only device memory is copied back (one wait); host memory, pinned or not, is read as it
   * is (pinned offsets used to be copied and waited for like device ones: defect 7) */
  if (sp == EMC_SPACE_DEVICE) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CU(cudaStreamIsCapturing(st, &cs));
    if (cs != cudaStreamCaptureStatusNone)
      return EMC_FAIL(EMC_EINVAL, "offsets in device memory under stream capture: the call needs them "
                      "on the host (pass host or pinned offsets)");
    CU(cudaMemcpyAsync(k->offs_host, offsets, ((size_t)k->n_tables + 1) * 8, cudaMemcpyDefault, st));
    CU(emc__cuda_wait_stream(k, st));
    offsets = k->offs_host;
  }
  EMC_TRY(emc__check_offsets(c->store, offsets, n, bytes));
  if (*n > 0xfffffff0ull)
    return EMC_FAIL(EMC_EINVAL, "%llu ids in one call; at most 2^32 - 16", (unsigned long long)*n);
  if (*n > 0 && !ids) return EMC_FAIL(EMC_EINVAL, "ids is NULL with %llu ids", (unsigned long long)*n);
  if (buf_name && *bytes > 0 && !buf)
    return EMC_FAIL(EMC_EINVAL, "%s is NULL with %zu bytes", buf_name, *bytes);
  EMC_TRY(emc__cuda_check_space(k, ids, "ids"));
  if (buf_name) EMC_TRY(emc__cuda_check_space(k, buf, buf_name));
  if (*n > 0) {
    EMC_TRY(emc__cuda_check_align(k, ids, 8, "ids"));
    if (buf_name) EMC_TRY(emc__cuda_check_align(k, buf, buf_align, buf_name));
  }
  *offs = offsets;
  return EMC_OK;
}

emc_status emc__cuda_enter(emc__cuda_cache *k) {
  cudaError_t e;
  int cur = k->device;
  pthread_mutex_lock(&k->lock);
  if ((e = cudaGetDevice(&cur)) == cudaSuccess && cur != k->device) e = cudaSetDevice(k->device);
  if (e != cudaSuccess) {
    pthread_mutex_unlock(&k->lock);
    return emc__cuda_fail(e, "cudaSetDevice");
  }
  k->caller_device = cur;
  return EMC_OK;
}

/* The caller's device back (calls used to leave the cache's device current: defect 11). */
void emc__cuda_leave(emc__cuda_cache *k) {
  if (k->caller_device != k->device) {
    cudaError_t e = cudaSetDevice(k->caller_device);
    if (e != cudaSuccess) (void)cudaGetLastError();
  }
  pthread_mutex_unlock(&k->lock);
}

/* ================================================================= lookup */
extern "C" emc_status emc__cuda_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                       void *out, uint8_t *where, void *stream) {
  emc__cuda_cache *k = c->cuda;
  cudaStream_t st = (cudaStream_t)stream;
  const uint64_t *offs = NULL;
  uint64_t n = 0;
  size_t bytes = 0;
  emc_status status;
  int ids_dev, out_dev, where_dev, capturing = 0, wait = 0;
  const uint64_t *ids_d;
  unsigned char *out_d;
  uint8_t *where_d = NULL;
  emc__scratch *S = NULL;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaSuccess;
  /* a shared store: the copies the log names refreshed first (sync.cu) */
  if (k->shared && (status = emc__cuda_shared_sync(c)) != EMC_OK) return status;
  if ((status = emc__cuda_enter(k)) != EMC_OK) return status;
  if ((status = emc__cuda_batch_args(c, ids, offsets, out, "out", 2, st, &offs, &n, &bytes)) != EMC_OK || n == 0)
    goto done;
  if (where && (status = emc__cuda_check_space(k, where, "where")) != EMC_OK) goto done;
  ids_dev = emc__cuda_device_accessible(k, ids);
  out_dev = emc__cuda_device_accessible(k, out);
  where_dev = where && emc__cuda_device_accessible(k, where);
  if (!ids_dev && (status = emc__check_dense_ids(c->store, ids, offs)) != EMC_OK) goto done;
  if ((e = cudaStreamIsCapturing(st, &cs)) != cudaSuccess) goto cuda;
  if (cs == cudaStreamCaptureStatusInvalidated) { /* nothing enqueued there would ever run */
    status = EMC_FAIL(EMC_ECUDA, "the stream's capture was invalidated by an earlier call; end it");
    goto done;
  }
  capturing = cs == cudaStreamCaptureStatusActive;
  if (capturing && k->shared) {
    status = EMC_FAIL(EMC_EUNSUPPORTED, "a lookup over a shared store cannot be captured: a graph "
                      "replayed later would not look at the store's update log");
    goto done;
  }
  /* a graph cannot hold a copy to or from pageable memory, nor the wait this call would make
   * for one (that wait used to invalidate the caller's capture: defect 8) */
  if (capturing && (!ids_dev || !out_dev || (where && !where_dev))) {
    status = EMC_FAIL(EMC_EINVAL, "a captured emc_lookup takes ids, out and where in device memory "
                      "or pinned host memory (%s is in pageable host memory)",
                      !ids_dev ? "ids" : !out_dev ? "out" : "where");
    goto done;
  }
  if ((status = emc__cuda_acquire_slot(k, n, bytes, 0, st, capturing, &S)) != EMC_OK) goto done;
  ids_d = ids;
  if (!ids_dev) {
    if ((e = cudaMemcpyAsync(S->stage_ids, ids, n * 8, cudaMemcpyHostToDevice, st)) != cudaSuccess) goto cuda;
    ids_d = S->stage_ids; /* (a pageable copy returns once the ids are staged) */
  }
  out_d = out_dev ? (unsigned char *)out : S->stage_out;
  if (where) where_d = where_dev ? where : S->stage_where;
  wait |= !out_dev || (where && !where_dev);
  emc__cuda_prof_mark(k, PROF_LOOKUP, 0, st);
  if (k->shared && (e = cudaMemsetAsync(S->C.torn_n, 0, 4, st)) != cudaSuccess) goto cuda;
  if ((e = emc__cu_lookup(k, &S->C, S->tiles_d, S->pinned, ids_d, offs, out_d, where_d, n,
                          k->sm_count, st)) != cudaSuccess)
    goto cuda;
  emc__cuda_prof_mark(k, PROF_LOOKUP, 1, st);
  if (k->shared) { /* rows a host writer kept changing: read again on the host (sync.cu) */
    if ((e = emc__cuda_wait_stream(k, st)) != cudaSuccess) goto cuda;
    if ((status = emc__cuda_shared_fix(c, S, offs, out_d, st)) != EMC_OK) {
      emc__cuda_slot_failed(k, S, st);
      goto done;
    }
  }
  /* the writer call that admits the misses: on the writer stream, after this lookup */
  if (capturing) { /* the caller's graph runs the writer call too, as a section of its own */
    if ((e = emc__cuda_section_open(k, st, 1)) != cudaSuccess) goto cuda;
    if ((e = emc__cuda_writer_call(k, &S->C, st)) != cudaSuccess) {
      (void)emc__cuda_section_close(k, st, 1);
      goto cuda;
    }
    if ((e = emc__cuda_section_close(k, st, 1)) != cudaSuccess) goto cuda;
  } else {
    if ((e = cudaEventRecord(S->looked, st)) != cudaSuccess) goto cuda;
    if ((e = cudaStreamWaitEvent(k->writer, S->looked, 0)) != cudaSuccess) goto cuda;
    if ((e = emc__cuda_section_open(k, k->writer, 0)) != cudaSuccess) goto cuda;
    emc__cuda_prof_mark(k, PROF_WRITER, 0, k->writer);
    e = S->graph ? emc__graph_launch(S->graph, k->writer) : emc__cuda_writer_call(k, &S->C, k->writer);
    if (e != cudaSuccess) {
      (void)emc__cuda_section_close(k, k->writer, 0);
      goto cuda;
    }
    emc__cuda_prof_mark(k, PROF_WRITER, 1, k->writer);
    if ((e = emc__cuda_section_close(k, k->writer, 0)) != cudaSuccess) goto cuda;
    if ((e = cudaEventRecord(S->done, k->writer)) != cudaSuccess) goto cuda;
    S->used = 1;
  }
  /* host out and where last: a call that failed to enqueue has written neither (and a pageable
   * copy, which returns when done, no longer holds the writer call back) */
  if (!out_dev && (e = cudaMemcpyAsync(out, out_d, bytes, cudaMemcpyDeviceToHost, st)) != cudaSuccess)
    goto cuda_enqueued;
  if (where && !where_dev && (e = cudaMemcpyAsync(where, where_d, n, cudaMemcpyDeviceToHost, st)) != cudaSuccess)
    goto cuda_enqueued;
  emc__cuda_leave(k);
  if (wait && (e = emc__cuda_wait_stream(k, st)) != cudaSuccess)
    return emc__cuda_fail(e, "cudaStreamSynchronize(lookup)");
  if (k->prof && !capturing) emc__cuda_prof_collect(k);
  __atomic_fetch_add(&k->n_lookups, n, __ATOMIC_RELAXED);
  return EMC_OK;
cuda:
  status = emc__cuda_fail(e, "enqueueing a lookup");
  if (capturing) emc__cuda_capture_abandon(st);
  /* the slot may hold this call's misses with no writer call to consume them, and work in
   * flight: it serves again after that work, made afresh */
  emc__cuda_slot_failed(k, S, st);
  goto done;
cuda_enqueued: /* the call is whole on the device, its writer call included: only a copy to
                * the host failed to enqueue, so the slot serves again after `done` */
  status = emc__cuda_fail(e, "copying a lookup's rows to host memory");
done:
  emc__cuda_leave(k);
  return status;
}
