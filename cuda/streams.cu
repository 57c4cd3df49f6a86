/*
 * streams.cu: the CUDA backend's writer sections (their order across the writer stream and
 * callers' captured graphs) and its per-call scratch pool (cache_cuda.cu: the calls that use
 * them; cache_cuda.h: the state).
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

#include "cache_cuda.h"
#include "train.cuh"

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
 * section's begin and end, emc__cuda_writer_call). */
cudaError_t emc__cuda_writer_body(emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  cudaError_t e = emc__cu_wr_demand(k, C, st);
  if (e == cudaSuccess) e = emc__cu_evict(k, st);
  if (e == cudaSuccess) e = emc__cu_admit(k, C, st);
  if (e == cudaSuccess) e = emc__cu_repack(k, 0, st);
  return e;
}

/* A lookup's writer call. A stage that fails to enqueue after begin still gets its end when
 * that can be enqueued (defect 4: the section is closed; if even the end fails, the next
 * section closes it). A half-made admission publishes no entry, so no row is lost or served
 * wrong; pages the plan took whose k_page_init never ran are initialized by k_wr_end. */
cudaError_t emc__cuda_writer_call(emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
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
    cudaError_t e2 = emc__cuda_writer_call(k, &S->C, k->priv);
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

void emc__cuda_free_slot(emc__scratch *S) {
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
  emc__cuda_free_slot(S);
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
      emc__cuda_free_slot(S);
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
