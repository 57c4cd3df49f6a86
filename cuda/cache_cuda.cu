/*
 * cache_cuda.cu: the CUDA backend of the global cache table: lifecycle, streams, the per-call
 * scratch pool and the API calls. The stages live beside their kernels (dev.cuh lists them).
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
 * Streams and ordering
 *   A lookup is one kernel on the caller's stream (plus one event record): readers on any
 *   number of streams and threads run at once. Every change (admission of a lookup's misses,
 *   eviction, insert, flush, index re-pack) is a writer call on the cache's own writer stream,
 *   after the event of the call it serves; writer calls run one after another there, beside
 *   the readers (the reader protocol of emc_item.h keeps reads valid). A lookup's writer call is
 *   one graph launch (captured once per scratch slot). Under stream capture by the caller, the
 *   writer call is captured on the caller's stream instead (a section of the caller's graph).
 *   No kernel waits for another (defect 3 of the pre-flight review: a device lock spun across
 *   streams); writer sections are ordered by events alone:
 *     wr_tail   recorded on the writer stream after each writer section there
 *     cap_tail  recorded, as an external event node of the caller's graph, after each captured
 *               section: a launch of that graph records it there
 *     writer stream    a section waits for cap_tail (once any section was ever captured)
 *     captured section the first of a capture waits, as external event nodes, for wr_tail and
 *               cap_tail (both sampled when the caller launches the graph); later sections of
 *               the same capture wait for the previous one (caps[]: an internal edge, which
 *               orders sections on different branches of the caller's graph too)
 *   The events are sampled when a call is enqueued or a graph launched, so the order is the
 *   host's order of those: a graph holding calls of a cache is launched by no thread while
 *   another is inside a call of that cache (include/embcache.h, "CUDA backend"). k_wr_begin
 *   counts sections that found another one open (dglob.overlaps): emc_flush reports them, the
 *   white-box check fails on them.
 *   Scratch: a pool of up to EMC_SLOTS_MAX slots, each used by one call and its writer call;
 *   when all are in flight, the next call waits on the host for the oldest one's writer call
 *   (back-pressure when the host runs that many calls ahead of the device). A
 *   captured call gets a slot of its own that its graph keeps (replays of one graph are
 *   ordered by CUDA; the slot's miss-set epoch lives in device memory and moves on each time)
 *   through a user object: once the caller destroys the graph and its last launch is done, the
 *   next call of the cache frees the slot (defect 15: captured slots were kept until destroy).
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
#define CU(call)                                              \
  do {                                                        \
    cudaError_t e_ = (call);                                  \
    if (e_ != cudaSuccess) return emc__cuda_fail(e_, #call);  \
  } while (0)
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

/* ================================================================= scratch slots */
static size_t al(size_t x) { return (x + 255) & ~(size_t)255; }

/* Lay a slot out in one allocation for n positions, `bytes` row bytes and `gbytes` gradient
 * bytes (NULL mem: size only). */
static size_t carve(emc__scratch *S, unsigned char *mem, uint64_t n, size_t bytes, size_t gbytes,
                    uint32_t T) {
  size_t o = 0, set = 1, cubb;
  dcall *C = &S->C;
  while (set < 2 * n) set <<= 1;
  /* CUB's sort counts in int: training calls take fewer than 2^31 positions */
  cubb = emc__cu_train_tmp_bytes(n < 0x7fffffffull ? n : 0x7fffffffull, T);
#define TAKE(ptr, type, size) (ptr = (type)(mem ? mem + o : NULL), o += al(size))
  TAKE(C->epoch, uint32_t *, 4);
  TAKE(C->offsets, uint64_t *, (size_t)(T + 1) * 8 + (size_t)T * 8 + (size_t)(T + 1) * 4);
  C->outoff = C->offsets ? C->offsets + T + 1 : NULL;
  S->tiles_d = C->outoff ? (uint32_t *)(C->outoff + T) : NULL;
  TAKE(C->need, uint32_t *, (size_t)T * 4);
  TAKE(C->missset, uint64_t *, set * 8);
  TAKE(C->misses, dmiss *, n * sizeof(dmiss));
  TAKE(C->staging, unsigned char *, bytes);
  TAKE(C->grants, dgrant *, (n + 2ull * T) * sizeof(dgrant));
  TAKE(C->slot_of, uint32_t *, n * 4);
  TAKE(S->stage_ids, uint64_t *, n * 8);
  TAKE(S->stage_out, unsigned char *, bytes);
  TAKE(S->stage_where, uint8_t *, n);
  TAKE(C->srows, uint64_t *, n * 16); /* update calls: n; a shared lookup's torn rows: 2 n */
  TAKE(C->torn_n, uint32_t *, 4);
  /* training calls (train.cu) */
  TAKE(C->status, uint32_t *, 8 + 4 * 8);
  C->n_runs = C->status ? C->status + 1 : NULL;
  C->errinfo = C->status ? (uint64_t *)(C->status + 2) : NULL;
  TAKE(C->skeys, uint64_t *, n * 8);
  TAKE(C->skeys_out, uint64_t *, n * 8);
  TAKE(C->svals, uint32_t *, n * 4);
  TAKE(C->svals_out, uint32_t *, n * 4);
  TAKE(C->head, uint32_t *, n * 4);
  TAKE(C->runidx, uint32_t *, n * 4);
  TAKE(C->run_start, uint32_t *, (n + 1) * 4);
  TAKE(C->inoff, uint64_t *, (2 * (size_t)T + 1) * 8); /* then dedup's staged unique_offsets */
  TAKE(C->cub_tmp, void *, cubb);
  TAKE(S->stage_grads, float *, gbytes);
  TAKE(S->gm, float *, gbytes);
#undef TAKE
  C->cub_bytes = cubb;
  C->set_mask = set - 1;
  C->n = n;
  C->n_tables = T;
  C->src = C->staging;
  C->mode = EMC_MODE_LOOKUP;
  return o;
}

/* The writer call after a lookup on this slot: demand, evict, admit, repack (between the
 * section's begin and end, writer_call). */
cudaError_t emc__cuda_writer_body(emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  cudaError_t e = emc__cu_wr_demand(k, C, st);
  if (e == cudaSuccess) e = emc__cu_evict(k, st);
  if (e == cudaSuccess) e = emc__cu_admit(k, C, st);
  if (e == cudaSuccess) e = emc__cu_repack(k, st);
  return e;
}

/* A lookup's writer call. A stage that fails to enqueue after begin still gets its end when
 * that can be enqueued (defect 4: the section is closed; if even the end fails, the next
 * section closes it). A half-made admission publishes no entry, so no row is lost or served
 * wrong; pages the plan took whose k_page_init never ran are initialized by k_wr_end. */
static cudaError_t writer_call(emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  cudaError_t e = emc__cu_wr_begin(k, C, st);
  if (e != cudaSuccess) return e;
  e = emc__cuda_writer_body(k, C, st);
  if (e != cudaSuccess) {
    (void)emc__cuda_section_end(k, C, st);
    return e;
  }
  return emc__cuda_section_end(k, C, st);
}

/* ---------------------------------------------------------------- writer sections */
/* A section's k_wr_end. One that fails to enqueue leaves its section open on the device
 * (writer_in, a prefetch's ring list, the hashed rows it added uncounted): the next section
 * closes it first (close_abandoned), so nothing is left held. */
cudaError_t emc__cuda_section_end(emc__cuda_cache *k, const dcall *C, cudaStream_t ws) {
  cudaError_t e = emc__cu_wr_end(k, C, ws);
  if (e != cudaSuccess) k->unclosed = 1;
  return e;
}

/* Close a section whose k_wr_end failed to enqueue: k_wr_end of no call, on the writer stream
 * after everything enqueued there (and, under capture, before the capture's first section,
 * which waits for wr_tail). Under capture the abandoned section was in a capture that the
 * failure invalidated (emc__cuda_capture_abandon): closing a closed section changes nothing. */
static cudaError_t close_abandoned(emc__cuda_cache *k) {
  dcall none;
  cudaError_t e = cudaSuccess;
  if (!k->unclosed) return cudaSuccess;
  memset(&none, 0, sizeof none);
  if (k->n_cap_sections) e = cudaStreamWaitEvent(k->writer, k->cap_tail, 0);
  if (e == cudaSuccess) e = emc__cu_wr_end(k, &none, k->writer);
  if (e == cudaSuccess) e = cudaEventRecord(k->wr_tail, k->writer);
  if (e == cudaSuccess) k->unclosed = 0;
  return e;
}

/* A call that failed while its stream is being captured: the capture is invalidated (a
 * synchronize of a capturing stream is refused and invalidates it), so cudaStreamEndCapture
 * fails and no graph ever holds half a call (an open section, a slot half filled). */
void emc__cuda_capture_abandon(cudaStream_t st) {
  cudaStreamCaptureStatus cs;
  if (cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive)
    (void)cudaStreamSynchronize(st);
  (void)cudaGetLastError();
}

cudaError_t emc__cuda_section_open(emc__cuda_cache *k, cudaStream_t ws, int capturing) {
  cudaStreamCaptureStatus cs;
  unsigned long long id = 0;
  cudaError_t e;
  uint32_t i;
  if ((e = close_abandoned(k)) != cudaSuccess) return e;
  if (!capturing)
    return k->n_cap_sections ? cudaStreamWaitEvent(ws, k->cap_tail, 0) : cudaSuccess;
  if ((e = cudaStreamGetCaptureInfo(ws, &cs, &id)) != cudaSuccess) return e;
  for (i = 0; i < EMC_CAPTURES; i++)
    if (k->caps[i].id == id) return cudaStreamWaitEvent(ws, k->caps[i].last, 0);
  /* the capture's first section: after what the writer stream and earlier graphs enqueued
   * before this graph's launch */
  if ((e = cudaStreamWaitEvent(ws, k->wr_tail, cudaEventWaitExternal)) != cudaSuccess) return e;
  return cudaStreamWaitEvent(ws, k->cap_tail, cudaEventWaitExternal);
}

cudaError_t emc__cuda_section_close(emc__cuda_cache *k, cudaStream_t ws, int capturing) {
  cudaStreamCaptureStatus cs;
  unsigned long long id = 0;
  cudaError_t e;
  uint32_t i;
  if (!capturing) return cudaEventRecord(k->wr_tail, ws);
  if ((e = cudaStreamGetCaptureInfo(ws, &cs, &id)) != cudaSuccess) return e;
  for (i = 0; i < EMC_CAPTURES && k->caps[i].id != id; i++) {
  }
  if (i == EMC_CAPTURES) { /* a new capture's chain: the oldest entry goes */
    i = k->cap_next;
    k->cap_next = (k->cap_next + 1) % EMC_CAPTURES;
    k->caps[i].id = id;
  }
  /* cap_tail's record node first, then the chain's event: the capture's next section waits for
   * this record node too, so all of a graph's cap_tail records lie on one dependency chain
   * (which of several records of one event a later wait resolves to, CUDA does not say) */
  if ((e = cudaEventRecordWithFlags(k->cap_tail, ws, cudaEventRecordExternal)) != cudaSuccess) return e;
  if ((e = cudaEventRecord(k->caps[i].last, ws)) != cudaSuccess) return e;
  k->n_cap_sections++;
  return cudaSuccess;
}

/* Capture the slot's writer call into a graph (on the private stream, which is idle). A slot
 * whose capture fails launches the kernels one by one instead. */
static void capture_graph(emc__cuda_cache *k, emc__scratch *S) {
  cudaGraph_t g = NULL;
  cudaError_t e;
  if (S->graph) cudaGraphExecDestroy(S->graph);
  S->graph = NULL;
  e = cudaStreamBeginCapture(k->priv, cudaStreamCaptureModeThreadLocal);
  if (e == cudaSuccess) {
    cudaError_t e2 = writer_call(k, &S->C, k->priv);
    e = cudaStreamEndCapture(k->priv, &g);
    if (e == cudaSuccess && e2 == cudaSuccess) e = cudaGraphInstantiate(&S->graph, g, 0);
    else if (e == cudaSuccess) e = e2;
  }
  if (g) cudaGraphDestroy(g);
  if (e != cudaSuccess) S->graph = NULL;
  (void)cudaGetLastError();
}

/* (Re)allocate slot S for n positions and `bytes` row bytes. On the private stream, once the
 * slot's last writer call is done; synchronous (growth is rare: slots keep their size). The
 * caller's stream may be capturing: the calls here are made in relaxed capture mode. */
static emc_status grow_slot(emc__cuda_cache *k, emc__scratch *S, uint64_t n, size_t bytes,
                           size_t gbytes) {
  uint64_t m = S->C.n ? S->C.n : 4096;
  size_t b = S->cap_bytes ? S->cap_bytes : (size_t)1 << 20, gb = S->cap_gbytes, total;
  unsigned char *mem = NULL;
  uint32_t one = 1, T = k->n_tables;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaError_t e = cudaSuccess;
  while (m < n) m *= 2;
  while (b < bytes) b *= 2;
  if (gbytes > gb) {
    gb = gb ? gb : (size_t)1 << 20;
    while (gb < gbytes) gb *= 2;
  }
  total = carve(S, NULL, m, b, gb, T);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (S->used) e = cudaStreamWaitEvent(k->priv, S->done, 0);
  if (e == cudaSuccess && S->mem) e = cudaFreeAsync(S->mem, k->priv);
  if (e == cudaSuccess) {
    S->mem = NULL;
    S->C.n = 0;
    S->cap_bytes = 0;
    S->cap_gbytes = 0;
    e = emc__cu_malloc_async((void **)&mem, total, k->priv);
  }
  if (e == cudaSuccess) {
    S->mem = mem;
    S->cap_bytes = b;
    S->cap_gbytes = gb;
    carve(S, mem, m, b, gb, T);
    e = cudaMemsetAsync(mem, 0, total, k->priv); /* need[] zero, miss set empty (epoch 0) */
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(S->C.epoch, &one, 4, cudaMemcpyHostToDevice, k->priv);
  if (e == cudaSuccess) e = emc__cuda_wait_stream(k, k->priv);
  if (e == cudaSuccess) capture_graph(k, S);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    if (!S->mem) memset(&S->C, 0, sizeof S->C);
    char what[96];
    snprintf(what, sizeof what, "cudaMallocAsync of %zu bytes of scratch buffers", total);
    return emc__cuda_fail(e, what);
  }
  return EMC_OK;
}

static emc_status new_slot(emc__cuda_cache *k, emc__scratch *S) {
  memset(S, 0, sizeof *S);
  CU(cudaEventCreateWithFlags(&S->looked, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&S->done, cudaEventDisableTiming));
  CU(emc__cu_host_alloc((void **)&S->pinned, ((size_t)k->n_tables * 3 + 3 + 8) * 8, cudaHostAllocDefault));
  return EMC_OK;
}

static void free_slot(emc__scratch *S) {
  if (S->graph) cudaGraphExecDestroy(S->graph);
  if (S->mem) cudaFree(S->mem);
  if (S->pinned) cudaFreeHost(S->pinned);
  if (S->looked) cudaEventDestroy(S->looked);
  if (S->done) cudaEventDestroy(S->done);
}

/* The same while a capture may be under way in this thread or another: in relaxed capture
 * mode, the device memory freed in stream order on the private stream (no device-wide wait). */
static void free_slot_relaxed(emc__cuda_cache *k, emc__scratch *S) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (S->mem && cudaFreeAsync(S->mem, k->priv) == cudaSuccess) S->mem = NULL;
  free_slot(S);
  cudaThreadExchangeStreamCaptureMode(&mode);
  (void)cudaGetLastError();
}

/* The user object of a captured slot's graph: no CUDA call may be made here (CUDA's rule for
 * user object destructors); the cache frees the slot at its next call. */
static void captured_released(void *p) {
  struct cap_ticket *t = (struct cap_ticket *)p;
  __atomic_store_n(&t->released, 1, __ATOMIC_RELEASE);
  if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) free(t);
}

/* Callers reap only outside capture of their stream; another thread may be capturing (in
 * global mode, which forbids the unsafe calls): free_slot_relaxed. */
uint32_t emc__cuda_reap_captured(emc__cuda_cache *k) {
  uint32_t i = 0;
  while (i < k->n_captured) {
    emc__scratch *S = k->captured[i];
    if (!__atomic_load_n(&S->ticket->released, __ATOMIC_ACQUIRE)) {
      i++;
      continue;
    }
    free_slot_relaxed(k, S); /* the graph and its launches are gone: nothing uses the slot */
    if (__atomic_sub_fetch(&S->ticket->refs, 1, __ATOMIC_ACQ_REL) == 0) free(S->ticket);
    free(S);
    k->captured[i] = k->captured[--k->n_captured];
  }
  return k->n_captured;
}

/* A slot of its own for a call captured on st: the capture's graph holds it through a user
 * object (its destruction, after the graph's last launch, releases it). */
static emc_status captured_slot(emc__cuda_cache *k, uint64_t n, size_t bytes, size_t gbytes,
                                cudaStream_t st, emc__scratch **out) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaStreamCaptureStatus cs;
  cudaGraph_t graph = NULL;
  cudaUserObject_t uo = NULL;
  emc__scratch **more, *S;
  struct cap_ticket *t;
  emc_status s2;
  cudaError_t e;
  more = (emc__scratch **)realloc(k->captured, (k->n_captured + 1) * sizeof *more);
  if (!more) return EMC_FAIL(EMC_ENOMEM, "captured scratch slot");
  k->captured = more;
  S = (emc__scratch *)emc__calloc(1, sizeof *S);
  t = (struct cap_ticket *)emc__calloc(1, sizeof *t);
  if (!S || !t) {
    free(S);
    free(t);
    return EMC_FAIL(EMC_ENOMEM, "captured scratch slot");
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  s2 = new_slot(k, S);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (s2 == EMC_OK) {
    S->captured = 1;
    s2 = grow_slot(k, S, n, bytes, gbytes);
  }
  if (s2 == EMC_OK) {
    t->refs = 2;
    e = cudaStreamGetCaptureInfo(st, &cs, NULL, &graph);
    if (e == cudaSuccess) e = cudaUserObjectCreate(&uo, t, captured_released, 1, cudaUserObjectNoDestructorSync);
    if (e == cudaSuccess) {
      e = cudaGraphRetainUserObject(graph, uo, 1, cudaGraphUserObjectMove);
      if (e != cudaSuccess) { /* releasing our reference runs the destructor: it frees t */
        t->refs = 1;
        cudaUserObjectRelease(uo, 1);
        uo = NULL;
        t = NULL;
      }
    }
    if (e != cudaSuccess) s2 = emc__cuda_fail(e, "tying a captured scratch slot to the caller's graph");
  }
  if (s2 != EMC_OK) {
    free_slot_relaxed(k, S); /* (the caller's stream is capturing) */
    free(S);
    if (t && uo == NULL) free(t);
    return s2;
  }
  S->ticket = t;
  k->captured[k->n_captured++] = S;
  *out = S;
  return EMC_OK;
}

/* A slot for a call of n positions and `bytes` row bytes, ready in st's order. A call being
 * captured into the caller's graph gets a slot of its own (captured_slot). Caller holds
 * k->lock. */
emc_status emc__cuda_acquire_slot(emc__cuda_cache *k, uint64_t n, size_t bytes, size_t gbytes,
                                  cudaStream_t st, int captured, emc__scratch **out) {
  emc__scratch *S = NULL;
  uint32_t i;
  if (captured) return captured_slot(k, n, bytes, gbytes, st, out);
  if (k->n_captured) emc__cuda_reap_captured(k);
  for (i = 0; i < k->n_slots && !S; i++) { /* a finished slot, big enough */
    emc__scratch *x = &k->slots[i];
    if (x->broken || (x->used && cudaEventQuery(x->done) != cudaSuccess)) continue;
    if (x->C.n >= n && x->cap_bytes >= bytes && x->cap_gbytes >= gbytes) S = x;
  }
  for (i = 0; i < k->n_slots && !S; i++) { /* a finished one to grow */
    emc__scratch *x = &k->slots[i];
    if (!x->broken && (!x->used || cudaEventQuery(x->done) == cudaSuccess)) S = x;
  }
  (void)cudaGetLastError(); /* cudaErrorNotReady from the queries */
  if (!S && k->n_slots < EMC_SLOTS_MAX) { /* a new one */
    S = &k->slots[k->n_slots];
    if (new_slot(k, S) != EMC_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", emc_last_error_detail()); /* EMC_FAIL writes that buffer */
      emc_status s2 = EMC_FAIL(EMC_EDEVMEM, "scratch slot: %s", why);
      free_slot(S);
      memset(S, 0, sizeof *S);
      return s2;
    }
    k->n_slots++;
  }
  if (!S) {
    /* every slot in flight (the host ran EMC_SLOTS_MAX calls ahead of the device): this call
     * waits, on the host, for the oldest one's writer call. A device-side wait would not do:
     * the host refills the slot's pinned buffer, which that call's copies may still read. */
    for (i = 0; i < EMC_SLOTS_MAX && k->slots[k->next_wait].broken; i++)
      k->next_wait = (k->next_wait + 1) % EMC_SLOTS_MAX;
    if (i == EMC_SLOTS_MAX) return EMC_FAIL(EMC_ECUDA, "every scratch slot was retired by failed calls");
    S = &k->slots[k->next_wait];
    k->next_wait = (k->next_wait + 1) % EMC_SLOTS_MAX;
    __atomic_fetch_add(&k->n_host_syncs, 1, __ATOMIC_RELAXED);
    CU(cudaEventSynchronize(S->done));
  }
  if (S->C.n < n || S->cap_bytes < bytes || S->cap_gbytes < gbytes || !S->mem)
    EMC_TRY(grow_slot(k, S, n, bytes, gbytes));
  *out = S;
  return EMC_OK;
}

void emc__cuda_slot_failed(emc__cuda_cache *k, emc__scratch *S, cudaStream_t st) {
  cudaError_t e;
  if (!S || S->captured) return;
  e = cudaEventRecord(S->looked, st);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(k->writer, S->looked, 0);
  if (e == cudaSuccess) e = cudaEventRecord(S->done, k->writer);
  if (e == cudaSuccess) {
    S->used = 1;
    S->C.n = 0; /* grow_slot makes it afresh, after `done` */
  } else {
    S->broken = 1;
    (void)cudaGetLastError();
  }
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
  need_b = k->arena_bytes + k->index_bytes + (size_t)geo.n_pages * 12 + EMC_WB_CELLS * 4;
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
  for (i = 0; i < k->n_slots; i++) free_slot(&k->slots[i]);
  /* captured slots: the caller destroys its graphs before the cache (embcache.h); a graph
   * still alive keeps only its ticket, which its user object frees */
  for (i = 0; i < k->n_captured; i++) {
    emc__scratch *S = k->captured[i];
    free_slot(S);
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

emc_status emc__cuda_batch_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                const void *buf, const char *buf_name, cudaStream_t st,
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
  if ((status = emc__cuda_batch_args(c, ids, offsets, out, "out", st, &offs, &n, &bytes)) != EMC_OK || n == 0)
    goto done;
  if (where && (status = emc__cuda_check_space(k, where, "where")) != EMC_OK) goto done;
  ids_dev = emc__cuda_device_accessible(k, ids);
  out_dev = emc__cuda_device_accessible(k, out);
  where_dev = where && emc__cuda_device_accessible(k, where);
  if (out_dev && ((uintptr_t)out & 1u)) { /* rows move in units of 2 bytes or more (defect 12) */
    status = EMC_FAIL(EMC_EINVAL, "out %p in device memory is not 2-byte aligned", out);
    goto done;
  }
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
    if ((e = writer_call(k, &S->C, st)) != cudaSuccess) {
      (void)emc__cuda_section_close(k, st, 1);
      goto cuda;
    }
    if ((e = emc__cuda_section_close(k, st, 1)) != cudaSuccess) goto cuda;
  } else {
    if ((e = cudaEventRecord(S->looked, st)) != cudaSuccess) goto cuda;
    if ((e = cudaStreamWaitEvent(k->writer, S->looked, 0)) != cudaSuccess) goto cuda;
    if ((e = emc__cuda_section_open(k, k->writer, 0)) != cudaSuccess) goto cuda;
    emc__cuda_prof_mark(k, PROF_WRITER, 0, k->writer);
    e = S->graph ? emc__graph_launch(S->graph, k->writer) : writer_call(k, &S->C, k->writer);
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

/* ================================================================= flush */
/* After a flush has completed: the store's hashed counts follow the device's, and what the
 * asynchronous calls since the last flush could not report themselves is reported now (dense
 * ids out of range in lookups, refused training calls, rows prefetches could not pin): the
 * first as the status, all of them in the detail. */
static emc_status flush_reports(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  volatile ull *mirror = (volatile ull *)k->mirror_host;
  ull bad = mirror[0], errs = mirror[1], shortfall = mirror[2];
  emc_status status = EMC_OK;
  char detail[768] = "", part[384];
  tstate *ts = (tstate *)emc__malloc(k->n_tables * sizeof *ts);
  dglob g;
  uint32_t t;
  cudaError_t e;
  if (!ts) return EMC_FAIL(EMC_ENOMEM, "flush scratch");
  if ((status = emc__cuda_enter(k)) != EMC_OK) { /* (the reports' state is k's) */
    free(ts);
    return status;
  }
  e = cudaMemcpyAsync(&g, k->V.g, sizeof g, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = cudaMemcpyAsync(ts, k->V.ts, k->n_tables * sizeof *ts, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = emc__cuda_wait_stream(k, k->priv);
  if (e != cudaSuccess) {
    emc__cuda_leave(k);
    free(ts);
    return emc__cuda_fail(e, "reading counters");
  }
  bad = mirror[0];
  errs = mirror[1];
  shortfall = mirror[2];
  for (t = 0; t < k->n_tables; t++) /* hashed ids the device added to the store (never to a
                                        shared one: its writes run on the host, sync.cu) */
    if (!k->shared && c->store->tables[t].kind == EMC_TABLE_HASHED &&
        ts[t].store_count > EMC_LD_ACQUIRE(c->store->tables[t].count))
      EMC_ST_RELEASE(c->store->tables[t].count, (uint64_t)ts[t].store_count);
  free(ts);
  if (bad) {
    mirror[0] = 0;
    cudaMemsetAsync(&k->V.g->bad_count, 0, sizeof(ull), k->writer);
    snprintf(detail, sizeof detail,
             "%llu dense ids out of range in lookups since the last flush (first: table %llu, "
             "position %llu, id %llu); they read as zero rows",
             g.bad_count, g.bad_table, g.bad_pos, g.bad_id);
    status = EMC_ERANGE;
  }
  if (errs != k->errs_seen) {
    emc__cuda_refusal_text(part, sizeof part, g.err_code, g.err_why, g.err_table, g.err_a, g.err_b);
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             "%s%llu training calls refused on the device since the last flush, each changing "
             "nothing (first: %s)", detail[0] ? "; " : "", errs - k->errs_seen, part);
    if (status == EMC_OK) status = g.err_code ? (emc_status)g.err_code : EMC_ERANGE;
    k->errs_seen = errs;
    cudaMemsetAsync(&k->V.g->err_code, 0, sizeof(uint32_t), k->writer);
  }
  if (g.overlaps != k->overlaps_seen) { /* writer sections ran at once: rows may be wrong */
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             "%s%llu writer sections of this cache began while another was open since the last "
             "report (a graph holding calls of this cache launched while another thread was "
             "inside a call of it?): cached rows may be wrong", detail[0] ? "; " : "",
             g.overlaps - k->overlaps_seen);
    status = EMC_ECUDA;
    k->overlaps_seen = g.overlaps;
  }
  if (shortfall != k->short_seen) {
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             "%s%llu prefetched rows did not fit the pin budget (t2 * capacity) since the last "
             "report; they stayed unpinned", detail[0] ? "; " : "", shortfall - k->short_seen);
    if (status == EMC_OK) status = EMC_ECAPACITY;
    k->short_seen = shortfall;
  }
  emc__cuda_leave(k);
  if (status != EMC_OK) return EMC_FAIL(status, "%s", detail);
  return EMC_OK;
}

extern "C" emc_status emc__cuda_flush(emc_cache *c, void *stream) {
  emc__cuda_cache *k = c->cuda;
  cudaStream_t st = (cudaStream_t)stream;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  emc_status status;
  cudaEvent_t ev = NULL;
  dcall C;
  cudaError_t e;
  int opened = 0, begun = 0;
  memset(&C, 0, sizeof C);
  if ((status = emc__cuda_enter(k)) != EMC_OK) return status;
  /* it waits for the device: not capturable (the writer stream would join the capture) */
  if ((e = cudaStreamIsCapturing(st, &cs)) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
    emc__cuda_leave(k);
    return EMC_FAIL(EMC_EINVAL, "emc_flush waits for the device: it cannot be called on a stream "
                    "being captured");
  }
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, st);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(k->writer, ev, 0);
  if (e == cudaSuccess && (e = emc__cuda_section_open(k, k->writer, 0)) == cudaSuccess) opened = 1;
  if (e == cudaSuccess && (e = emc__cu_wr_begin(k, &C, k->writer)) == cudaSuccess) begun = 1;
  if (e == cudaSuccess) e = emc__cu_flush(k, k->writer);
  /* a section begun is ended, and one opened is closed, whatever failed (defect 4) */
  if (begun) {
    cudaError_t e2 = emc__cuda_section_end(k, &C, k->writer);
    if (e == cudaSuccess) e = e2;
  }
  if (opened) {
    cudaError_t e2 = emc__cuda_section_close(k, k->writer, 0);
    if (e == cudaSuccess) e = e2;
  }
  if (e == cudaSuccess) e = cudaEventRecord(ev, k->writer);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(st, ev, 0);
  if (e != cudaSuccess) {
    emc__cuda_leave(k);
    if (ev) cudaEventDestroy(ev);
    return emc__cuda_fail(e, "enqueueing a flush");
  }
  emc__cuda_leave(k);
  e = emc__cuda_wait_stream(k, st);
  cudaEventDestroy(ev);
  if (e != cudaSuccess) return emc__cuda_fail(e, "cudaStreamSynchronize(flush)");
  return flush_reports(c);
}

/* ================================================================= stats */
extern "C" emc_status emc__cuda_stats(const emc_cache *c, emc_stats *o) {
  emc__cuda_cache *k = c->cuda;
  dglob g;
  cudaError_t e;
  memset(o, 0, sizeof *o);
  /* its own waits are not counted in host_syncs (two readings differ by what the calls
   * between them waited) */
  /* a private non-blocking stream, under the cache's lock (slot growth captures a graph on
   * it: defect 9): the lookup and writer streams are not stalled */
  EMC_TRY(emc__cuda_enter(k));
  e = cudaMemcpyAsync(&g, k->V.g, sizeof g, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv);
  if (e != cudaSuccess) {
    emc__cuda_leave(k);
    return emc__cuda_fail(e, "reading device counters");
  }
  o->lookups = __atomic_load_n(&k->n_lookups, __ATOMIC_RELAXED);
  o->hits = g.hits;
  o->misses = g.misses;
  o->absent = g.absent;
  o->admissions = g.admissions;
  o->admit_skipped = g.admit_skipped;
  o->inserts = __atomic_load_n(&k->n_inserts, __ATOMIC_RELAXED);
  o->evictions = g.evictions;
  o->writebacks = g.writebacks;
  o->evict_passes = g.passes;
  o->retries = g.retries;
  o->unified_hits = g.unified;
  o->bytes_in_use = g.bytes_in_use;
  o->bytes_reserved = g.pages_held * k->V.page_bytes;
  o->capacity_bytes = c->cfg.capacity_bytes;
  o->index_bytes = k->meta_bytes;
  o->dirty_rows = g.dirty_rows;
  o->prefetched = g.prefetched;
  o->pinned_rows = g.pinned_rows;
  o->pinned_bytes = g.pinned_bytes;
  o->pin_shortfall = g.pin_shortfall;
  o->gradient_rows = g.grad_rows + __atomic_load_n(&k->n_grad_rows_host, __ATOMIC_RELAXED);
  o->host_syncs = __atomic_load_n(&k->n_host_syncs, __ATOMIC_RELAXED);
  {
    uint64_t rc = 0;
    uint32_t t;
    tstate *ts = (tstate *)emc__malloc(k->n_tables * sizeof *ts);
    if (!ts) {
      emc__cuda_leave(k);
      return EMC_FAIL(EMC_ENOMEM, "stats scratch");
    }
    e = cudaMemcpyAsync(ts, k->V.ts, k->n_tables * sizeof *ts, cudaMemcpyDeviceToHost, k->priv);
    if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv);
    if (e != cudaSuccess) {
      free(ts);
      emc__cuda_leave(k);
      return emc__cuda_fail(e, "reading table counters");
    }
    for (t = 0; t < k->n_tables; t++) rc += ts[t].rows_cached;
    free(ts);
    o->rows_cached = rc;
  }
  emc__cuda_leave(k);
  return EMC_OK;
}

extern "C" emc_status emc__cuda_table_rows(const emc_cache *c, uint32_t table, uint64_t *out) {
  emc__cuda_cache *k = c->cuda;
  tstate ts;
  cudaError_t e;
  EMC_TRY(emc__cuda_enter(k));
  e = cudaMemcpyAsync(&ts, &k->V.ts[table], sizeof ts, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = emc__cuda_wait_stream(k, k->priv);
  emc__cuda_leave(k);
  if (e != cudaSuccess) return emc__cuda_fail(e, "reading table counters");
  *out = ts.rows_cached;
  return EMC_OK;
}

