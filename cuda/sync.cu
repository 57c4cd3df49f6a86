/*
 * sync.cu: a CUDA cache over a shared store (issue 20; lib/store/shared.c, lib/sync_host.c is
 * the host backend's twin).
 *
 * Rows. The store's rows live in the shared segment, which every CUDA cache of the process
 * registers once (a count in the store) and reads zero-copy. Other processes' host threads
 * write them under the segment's lock and its row versions (stripes); the device never writes
 * them: copies over a shared store are never dirty, and the calls that change rows
 * (emc_insert, emc_apply_gradients) run on the host under the lock (below).
 *
 * Lookups. The lookup kernel validates a store row it copies by its stripe version too (read
 * at system scope, lookup.cu). The device never waits for the host: a row whose version a
 * host writer keeps moving is left, after EMC_TORN_TRIES attempts, to the host, which waits
 * for the kernel and reads the row again (versioned, repairing a dead writer's row through
 * the lock) into the caller's out and the admission's staging copy before the writer call
 * that admits it is enqueued. A lookup over a shared store therefore waits for its kernel
 * (stats.host_syncs).
 *
 * The update log. Every call first compares the segment's published sequence with the
 * cache's log_seen. When it moved, the call takes the store's lock (before the cache's), and
 * refreshes in place every copy the new entries name (k_sync_rows: the writer protocol, pins
 * and flags kept), or, when the log wrapped past log_seen, every copy of each table written
 * meanwhile (k_sync_table, a warp per store row), as a writer section on the writer stream,
 * and waits for it before it lets the lock go: while it holds the lock no writer is inside a
 * row, so the device copies whole rows. Why no lookup then returns a row older than a write
 * that completed before it began: the write published its entries after its rows; the lookup
 * reads the published sequence first, and either a refresh that covered them completed
 * before (log_seen) or it runs one itself before its kernel is enqueued. A miss that a lookup
 * kernel read before the write and that its writer call admits afterwards is refreshed by the
 * next call's sync: writer sections run in enqueue order, and the sync is enqueued after.
 *
 * Writes. emc_insert and emc_apply_gradients over a shared store run on the host under the
 * store's lock (lib/store_step.c: the host backend's arithmetic, bit for bit), announced in the
 * log first and published after; the cache's copies are then refreshed like anyone else's.
 * emc_prefetch runs on the device, under the lock for its duration (its admissions read store
 * rows). A captured call over a shared store is refused: a graph replayed later would not
 * look at the log.
 */
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"

/* One log entry to apply: (table, id) and its store row. */
typedef struct dsync {
  uint32_t table, pad_;
  uint64_t id, srow;
} dsync;

/* Entries in (table, id) order: one warp per row however often the log names it (two warps
 * refreshing one copy at once would each take its entry word BUSY). */
static int dsync_cmp(const void *a, const void *b) {
  const dsync *x = (const dsync *)a, *y = (const dsync *)b;
  if (x->table != y->table) return x->table < y->table ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* ---------------------------------------------------------------- kernels (writer stream) */
/* Refresh the copy of (table t, id) from store row srow, if this cache holds it: the writer
 * protocol (BUSY entry word, the row and its state, a fresh meta with the pins and flags kept).
 * The store's lock is held by the host that enqueued this and waits for it: no writer is inside
 * the row. All 32 lanes call it. */
__device__ void sync_one(const dview &V, uint32_t t, uint64_t id, uint64_t srow, unsigned lane) {
  const dtab *tb = &V.tabs[t];
  int64_t pos = -1;
  uint64_t lm = 0;
  int cached = 0;
  if (lane == 0) {
    uint64_t key = emc__global_key(&tb->code, id, V.hash_seed);
    pos = emc__index_find(&V.ix, key);
    if (pos >= 0) {
      uint32_t loc;
      lm = V.ix.lm[pos];
      loc = emc__lm_loc(lm);
      cached = !(loc & EMC__LOC_HOST) && !(lm & EMC__LM_BUSY) &&
               (!tb->L.off_owner || *emc__slot_owner(page_of(V, loc / V.max_slots), &tb->L, loc % V.max_slots) == id);
    }
  }
  cached = __shfl_sync(0xffffffffu, cached, 0);
  if (!cached) return;
  pos = (int64_t)__shfl_sync(0xffffffffu, (unsigned long long)pos, 0);
  lm = __shfl_sync(0xffffffffu, lm, 0);
  {
    uint32_t loc = emc__lm_loc(lm), meta = 0;
    unsigned char *row = emc__slot_row(page_of(V, loc / V.max_slots), &tb->L, loc % V.max_slots);
    const unsigned char *src = tb->base + srow * tb->stride;
    if (lane == 0) {
      meta = atomicAdd(&V.g->meta_seq, EMC__META_STEP) + EMC__META_STEP;
      atomicExch((ull *)&V.ix.lm[pos], (ull)(lm | EMC__LM_BUSY));
    }
    __syncwarp();
    __threadfence(); /* the BUSY word before every lane's stores (train.cu, update) */
    for (uint32_t b = lane * 2u; b < tb->full_bytes; b += 64u)
      st_rlx((uint16_t *)(row + b), *(const volatile uint16_t *)(src + b));
    __threadfence();
    __syncwarp();
    if (lane == 0)
      atomicExch((ull *)&V.ix.lm[pos],
                 (ull)emc__lm_make(loc, (meta & ~EMC__META_FLAGS) |
                                            (emc__lm_meta(lm) & (EMC__META_PINS | EMC__META_DIRTY))));
  }
}

__global__ void __launch_bounds__(256) k_sync_rows(const __grid_constant__ dview V, const dsync *e,
                                                   uint32_t n) {
  const unsigned lane = threadIdx.x & 31u;
  for (uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < n;
       w += ((uint64_t)gridDim.x * blockDim.x) >> 5)
    sync_one(V, e[w].table, e[w].id, e[w].srow, lane);
}

/* Every store row of table t below `rows` (a warp each): its copy refreshed. */
__global__ void __launch_bounds__(256) k_sync_table(const __grid_constant__ dview V, uint32_t t,
                                                    uint64_t rows) {
  const unsigned lane = threadIdx.x & 31u;
  const dtab *tb = &V.tabs[t];
  for (uint64_t r = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
       r += ((uint64_t)gridDim.x * blockDim.x) >> 5) {
    uint64_t id = tb->kind == EMC_TABLE_DENSE ? r : *(const volatile uint64_t *)&tb->row_ids[r];
    sync_one(V, t, id, r, lane);
  }
}

/* ---------------------------------------------------------------- registration */
emc_status emc__cuda_shared_register(emc__cuda_cache *k, emc_store *s) {
  emc_status st = EMC_OK;
  void *p;
  k->shared = 1;
  pthread_mutex_lock(&s->lock);
  if (s->cuda_regs == 0) {
    cudaError_t e = emc__cu_host_register((void *)s->seg, s->seg_bytes,
                                          cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) st = emc__cuda_fail(e, "cudaHostRegister(the shared segment)");
  }
  if (st == EMC_OK) s->cuda_regs++;
  pthread_mutex_unlock(&s->lock);
  if (st != EMC_OK) {
    k->shared = 0;
    return st;
  }
  k->shared_reg = 1;
  if (cudaHostGetDevicePointer(&p, s->stripes, 0) != cudaSuccess)
    return emc__cuda_fail(cudaGetLastError(), "the device address of the shared segment");
  k->V.stripes = (const uint32_t *)p;
  k->log_seen = emc__log_seq(s); /* the cache starts empty: nothing older to drop */
  if (emc__cu_host_alloc((void **)&k->sync_ents, (size_t)emc__log_cap(s) * sizeof(dsync),
                         cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
    return emc__cuda_fail(cudaGetLastError(), "the log's staging buffer");
  return EMC_OK;
}

void emc__cuda_shared_unregister(emc__cuda_cache *k, emc_store *s) {
  if (k->sync_ents) cudaFreeHost(k->sync_ents);
  k->sync_ents = NULL;
  if (!k->shared_reg) return;
  pthread_mutex_lock(&s->lock);
  if (--s->cuda_regs == 0) cudaHostUnregister((void *)s->seg);
  pthread_mutex_unlock(&s->lock);
  k->shared_reg = 0;
}

/* ---------------------------------------------------------------- the log */
/* The store's lock and k->lock held: apply the entries published since log_seen. */
emc_status emc__cuda_shared_sync_locked(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  emc_store *s = c->store;
  uint64_t seen = k->log_seen, cur = emc__log_seq(s), q;
  dsync *ents = (dsync *)k->sync_ents;
  uint32_t n = 0, t;
  int wrapped;
  cudaError_t e;
  if (cur == seen) return EMC_OK;
  wrapped = cur < seen || cur - seen > emc__log_cap(s); /* behind: a segment scribbled on */
  for (q = seen + 1u; !wrapped && q <= cur; q++) {
    uint64_t id;
    int64_t srow;
    if (!emc__log_entry(s, q, &t, &id)) {
      wrapped = 1;
      break;
    }
    if (t >= s->n_tables) continue;
    srow = s->tables[t].kind == EMC_TABLE_DENSE ? (id < s->tables[t].rows ? (int64_t)id : -1)
                                                : emc__store_find(&s->tables[t], id);
    if (srow < 0) continue;
    ents[n].table = t;
    ents[n].id = id;
    ents[n].srow = (uint64_t)srow;
    n++;
  }
  if (!wrapped && n > 1) { /* each row once */
    uint32_t i, m = 1;
    qsort(ents, n, sizeof *ents, dsync_cmp);
    for (i = 1; i < n; i++)
      if (ents[i].table != ents[m - 1].table || ents[i].id != ents[m - 1].id) ents[m++] = ents[i];
    n = m;
  }
  if ((e = emc__cuda_section_open(k, k->writer, 0)) != cudaSuccess) goto cuda;
  if (wrapped) {
    for (t = 0; t < s->n_tables; t++) {
      const emc__table *tb = &s->tables[t];
      uint64_t rows = tb->kind == EMC_TABLE_DENSE ? tb->rows : EMC_LD_ACQUIRE(tb->count);
      if (rows > tb->rows) rows = tb->rows; /* a count written over: emc__check_room tells */
      if (!(cur < seen || emc__log_table_seq(s, t) > seen) || rows == 0) continue;
      e = EMC_LAUNCH(k_sync_table, grid_for(rows * 32u, 256), 256, k->writer, k->V, t, rows);
      if (e != cudaSuccess) break;
    }
  } else if (n > 0) {
    void *d;
    e = cudaHostGetDevicePointer(&d, ents, 0);
    if (e == cudaSuccess)
      e = EMC_LAUNCH(k_sync_rows, grid_for((uint64_t)n * 32u, 256), 256, k->writer, k->V,
                     (const dsync *)d, n);
  }
  {
    cudaError_t e2 = emc__cuda_section_close(k, k->writer, 0);
    if (e == cudaSuccess) e = e2;
  }
  if (e != cudaSuccess) goto cuda;
  /* the rows were read while the lock is held: wait before it goes */
  if ((e = emc__cuda_wait_stream(k, k->writer)) != cudaSuccess) goto cuda;
  __atomic_store_n(&k->log_seen, cur, __ATOMIC_RELEASE);
  return EMC_OK;
cuda:
  return emc__cuda_fail(e, "refreshing copies of rows written to the shared store");
}

extern "C" emc_status emc__cuda_shared_sync(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  emc_status st;
  if (!k->shared || emc__log_seq(c->store) == __atomic_load_n(&k->log_seen, __ATOMIC_ACQUIRE))
    return EMC_OK;
  EMC_TRY(emc__store_lock(c->store)); /* the store's lock before the cache's, always */
  emc__seg_even_stripes(c->store);
  if ((st = emc__cuda_enter(k)) == EMC_OK) {
    st = emc__cuda_shared_sync_locked(c);
    emc__cuda_leave(k);
  }
  emc__store_unlock(c->store);
  return st;
}

/* ---------------------------------------------------------------- torn rows */
/* After the lookup kernel (waited for): the positions it left to the host, read again. out_d
 * and C->staging are laid out by C->outoff. Caller holds k->lock. */
emc_status emc__cuda_shared_fix(emc_cache *c, emc__scratch *S, const uint64_t *offs,
                                unsigned char *out_d, cudaStream_t st) {
  const emc_store *s = c->store;
  uint32_t n = 0, i, widest = 16;
  uint64_t *list = NULL;
  unsigned char *row = NULL;
  cudaError_t e;
  emc_status status = EMC_OK;
  /* copies on the caller's stream (already waited for), never the legacy default stream: that
   * would wait for every blocking stream, and break another thread's capture */
  uint32_t *word = (uint32_t *)(S->pinned + (size_t)c->store->n_tables * 3 + 3); /* (status words) */
  if ((e = cudaMemcpyAsync(word, S->C.torn_n, 4, cudaMemcpyDeviceToHost, st)) != cudaSuccess ||
      (e = cudaStreamSynchronize(st)) != cudaSuccess)
    goto cuda;
  n = *word;
  if (n == 0) return EMC_OK;
  if (n > S->C.n) return EMC_FAIL(EMC_ECUDA, "the lookup kernel reported %u rows to read again "
                                  "of %llu", n, (unsigned long long)S->C.n);
  for (i = 0; i < s->n_tables; i++)
    if (s->tables[i].row_bytes > widest) widest = s->tables[i].row_bytes;
  list = (uint64_t *)emc__mallocn((size_t)2 * n, 8);
  row = (unsigned char *)emc__malloc(widest);
  if (!list || !row) {
    status = EMC_FAIL(EMC_ENOMEM, "re-reading %u torn rows", n);
    goto out;
  }
  if ((e = cudaMemcpyAsync(list, S->C.srows, (size_t)2 * n * 8, cudaMemcpyDeviceToHost, st)) != cudaSuccess ||
      (e = cudaStreamSynchronize(st)) != cudaSuccess)
    goto cuda;
  for (i = 0; i < n; i++) {
    uint64_t p = list[2 * i], srow = list[2 * i + 1] & ((1ull << 48) - 1u), at;
    uint32_t t = (uint32_t)(list[2 * i + 1] >> 48), rb;
    if (t >= s->n_tables || p < offs[t] || p >= offs[t + 1] || srow >= s->tables[t].rows) {
      status = EMC_FAIL(EMC_ECUDA, "the lookup kernel reported a bad torn row");
      goto out;
    }
    rb = s->tables[t].row_bytes;
    emc__store_row_read(s, t, srow, row);
    at = 0;
    for (uint32_t u = 0; u < t; u++) at += (offs[u + 1] - offs[u]) * s->tables[u].row_bytes;
    at += (p - offs[t]) * rb;
    /* (out_d: device memory, or mapped host memory) */
    if ((e = cudaMemcpyAsync(out_d + at, row, rb, cudaMemcpyDefault, st)) != cudaSuccess ||
        (e = cudaMemcpyAsync(S->C.staging + at, row, rb, cudaMemcpyHostToDevice, st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(st)) != cudaSuccess) /* (row is reused) */
      goto cuda;
  }
  goto out;
cuda:
  status = emc__cuda_fail(e, "re-reading rows of a shared store");
out:
  free(list);
  free(row);
  return status;
}

/* ---------------------------------------------------------------- the calls' host side */
extern "C" emc_status emc__cuda_shared_sync_held(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  emc_status st;
  if (!k->shared) return EMC_OK;
  EMC_TRY(emc__cuda_enter(k));
  st = emc__cuda_shared_sync_locked(c);
  emc__cuda_leave(k);
  return st;
}

extern "C" emc_status emc__cuda_shared_refuse_capture(emc_cache *c, void *stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
  (void)c;
  if (e != cudaSuccess) return emc__cuda_fail(e, "cudaStreamIsCapturing");
  if (cs != cudaStreamCaptureStatusNone)
    return EMC_FAIL(EMC_EUNSUPPORTED, "a call over a shared store cannot be captured: a graph "
                    "replayed later would not look at the store's update log");
  return EMC_OK;
}

/* A host copy of n bytes at p (device memory of the cache's device, or host memory). */
static emc_status host_copy(emc__cuda_cache *k, const void *p, size_t n, const char *what,
                            cudaStream_t st, void **out) {
  void *h;
  *out = NULL;
  if (n == 0) return EMC_OK;
  if (!(h = emc__malloc(n))) return EMC_FAIL(EMC_ENOMEM, "a host copy of %s (%zu bytes)", what, n);
  if (emc__cuda_space(k, p) == EMC_SPACE_DEVICE) { /* (on the caller's stream, waited for) */
    cudaError_t e = cudaMemcpyAsync(h, p, n, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) {
      free(h);
      return emc__cuda_fail(e, "copying a batch's arguments to the host");
    }
  } else {
    memcpy(h, p, n);
  }
  *out = h;
  return EMC_OK;
}

extern "C" emc_status emc__cuda_shared_args(emc_cache *c, const uint64_t *ids,
                                            const uint64_t *offsets, const void *buf, int grads,
                                            void *stream, uint64_t **hids, uint64_t **hoffs,
                                            void **hbuf) {
  emc__cuda_cache *k = c->cuda;
  cudaStream_t st = (cudaStream_t)stream;
  const uint64_t *offs = NULL;
  uint64_t n = 0;
  size_t bytes = 0;
  uint32_t t, T = c->store->n_tables;
  emc_status status;
  cudaError_t e;
  *hids = *hoffs = NULL;
  *hbuf = NULL;
  EMC_TRY(emc__cuda_shared_refuse_capture(c, stream));
  EMC_TRY(emc__cuda_enter(k));
  status = emc__cuda_batch_args(c, ids, offsets, grads ? NULL : buf, grads ? NULL : "rows", 2, st,
                                &offs, &n, &bytes);
  if (status != EMC_OK) goto done;
  if (grads) { /* f32 gradients, dim per position */
    bytes = 0;
    for (t = 0; t < T; t++) bytes += (size_t)(offs[t + 1] - offs[t]) * c->store->tables[t].dim * 4u;
    if (n > 0 && !buf) {
      status = EMC_FAIL(EMC_EINVAL, "grads is NULL with %llu ids", (unsigned long long)n);
      goto done;
    }
    if (n > 0 && ((status = emc__cuda_check_space(k, buf, "grads")) != EMC_OK ||
                  (status = emc__cuda_check_align(k, buf, 4, "grads")) != EMC_OK))
      goto done;
  }
  if (!(*hoffs = (uint64_t *)emc__mallocn((size_t)T + 1, 8))) {
    status = EMC_FAIL(EMC_ENOMEM, "a host copy of offsets");
    goto done;
  }
  memcpy(*hoffs, offs, ((size_t)T + 1) * 8);
  /* the arguments may be the product of work on the caller's stream */
  if ((e = emc__cuda_wait_stream(k, st)) != cudaSuccess) {
    status = emc__cuda_fail(e, "waiting for the caller's stream");
    goto done;
  }
  if ((status = host_copy(k, ids, (size_t)n * 8, "ids", st, (void **)hids)) != EMC_OK) goto done;
  status = host_copy(k, buf, bytes, grads ? "grads" : "rows", st, hbuf);
done:
  emc__cuda_leave(k);
  if (status != EMC_OK) {
    free(*hids);
    free(*hoffs);
    free(*hbuf);
    *hids = *hoffs = NULL;
    *hbuf = NULL;
  }
  return status;
}

extern "C" emc_status emc__cuda_quiesce(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  cudaError_t e;
  EMC_TRY(emc__cuda_enter(k));
  e = emc__cuda_wait_stream(k, k->writer);
  emc__cuda_leave(k);
  return e == cudaSuccess ? EMC_OK : emc__cuda_fail(e, "waiting for the cache's writer stream");
}

extern "C" void emc__cuda_count_host_writes(emc_cache *c, uint64_t inserts, uint64_t grad_rows) {
  __atomic_fetch_add(&c->cuda->n_inserts, inserts, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->cuda->n_grad_rows_host, grad_rows, __ATOMIC_RELAXED);
}
