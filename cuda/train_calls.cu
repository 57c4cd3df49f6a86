/*
 * train_calls.cu: the CUDA backend's emc_prefetch, emc_apply_gradients, emc_dedup and
 * emc_insert (which shares the update path): arguments, scratch, staging, and the order of
 * the stages of train.cu on the caller's stream and the cache's writer stream.
 *
 * No host round trip with device buffers: ids, rows, gradients and outputs in device memory
 * (offsets in host memory: they size the call's scratch; device offsets cost one copy back and
 * a wait, as for emc_lookup) make these calls enqueue work and return. Nothing here reads the
 * ids on the host or waits for a stream: dense ids, hashed capacity and the batch's size are
 * judged on the device, and a refused call changes nothing and is reported by the next
 * emc_flush (prefetch's pin shortfall: by the next emc_prefetch or emc_flush). New hashed ids
 * get their store rows on the device (train.cu, "newrows"). Such a call can be captured into a
 * CUDA graph (a prefetch only once the pin lists have grown to its batch: the first prefetch
 * of a larger batch than any before waits for the writer stream once, outside capture).
 * With any of those buffers in host memory the call is blocking: it stages them, waits, and
 * returns the device's verdict itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"
#include "train.cuh"

void emc__cuda_refusal_text(char *buf, size_t cap, uint32_t code, uint32_t why, uint32_t table,
                            unsigned long long a, unsigned long long b) {
  switch (why) {
  case TR_WHY_DENSE:
    snprintf(buf, cap, "table %u: ids[%llu] = %llu >= rows (%s)", table, a, b, emc_status_name((emc_status)code));
    break;
  case TR_WHY_HASHED:
    snprintf(buf, cap, "table %u: %llu new ids exceed the free capacity %llu (%s)", table, a, b,
             emc_status_name((emc_status)code));
    break;
  case TR_WHY_BATCH:
    snprintf(buf, cap,
             "the batch's distinct rows take %llu bytes, more than the cache holds (t1 * capacity = "
             "%llu bytes); split the batch or grow capacity_bytes (%s)",
             a, b, emc_status_name((emc_status)code));
    break;
  default:
    snprintf(buf, cap, "%s", emc_status_name((emc_status)code));
  }
}

/* One training call being enqueued. */
typedef struct tcall {
  emc_cache *c;
  emc__cuda_cache *k;
  cudaStream_t st;
  const uint64_t *offs; /* host */
  uint64_t n;
  size_t bytes;         /* the batch's packed row bytes */
  int ids_dev, capturing, blocking;
  emc__scratch *S;
  tr_args A;
} tcall;

#define CUE(call)                      \
  do {                                 \
    if ((e = (call)) != cudaSuccess) { \
      what = #call;                    \
      goto cuda;                       \
    }                                  \
  } while (0)

/* Arguments common to the calls; on success k->lock is held. */
static emc_status begin(tcall *tc, emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                        const void *buf, const char *buf_name, unsigned buf_align,
                        void *stream) {
  emc__cuda_cache *k = c->cuda;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  emc_status status;
  cudaError_t e;
  memset(tc, 0, sizeof *tc);
  tc->c = c;
  tc->k = k;
  tc->st = (cudaStream_t)stream;
  EMC_TRY(emc__cuda_enter(k));
  status = emc__cuda_batch_args(c, ids, offsets, buf, buf_name, buf_align, tc->st, &tc->offs,
                                &tc->n, &tc->bytes);
  if (status == EMC_OK && tc->n >= 0x7fffffffull)
    status = EMC_FAIL(EMC_EINVAL, "%llu ids in one call; at most 2^31 - 2 (CUB's sort counts in int)",
                      (unsigned long long)tc->n);
  if (status == EMC_OK) {
    tc->ids_dev = tc->n == 0 || emc__cuda_device_accessible(k, ids);
    if (!tc->ids_dev) status = emc__check_dense_ids(c->store, ids, tc->offs);
  }
  if (status == EMC_OK && (e = cudaStreamIsCapturing(tc->st, &cs)) != cudaSuccess)
    status = emc__cuda_fail(e, "cudaStreamIsCapturing");
  if (status == EMC_OK && cs == cudaStreamCaptureStatusInvalidated) /* nothing there would run */
    status = EMC_FAIL(EMC_ECUDA, "the stream's capture was invalidated by an earlier call; end it");
  tc->capturing = cs == cudaStreamCaptureStatusActive;
  if (status != EMC_OK) emc__cuda_leave(k);
  return status;
}

/* The call's slot, offsets (and per-table offsets into its inputs and the full-row staging)
 * uploaded, host ids staged; tc->A filled with the view and the slot. */
static emc_status prepare(tcall *tc, const uint64_t *ids, size_t staging, size_t gbytes,
                          const uint64_t *inoff, const uint64_t *outoff, uint32_t mode, uint32_t op) {
  emc__cuda_cache *k = tc->k;
  const uint32_t T = k->n_tables;
  emc__scratch *S;
  cudaError_t e;
  const char *what = "";
  EMC_TRY(emc__cuda_acquire_slot(k, tc->n, staging, gbytes, tc->st, tc->capturing, &tc->S));
  S = tc->S;
  memcpy(S->pinned, tc->offs, (size_t)(T + 1) * 8);
  memcpy(S->pinned + T + 1, outoff, (size_t)T * 8);
  memcpy(S->pinned + 2 * T + 1, inoff, (size_t)T * 8);
  CUE(cudaMemcpyAsync(S->C.offsets, S->pinned, (size_t)(2 * T + 1) * 8, cudaMemcpyHostToDevice, tc->st));
  CUE(cudaMemcpyAsync(S->C.inoff, S->pinned + 2 * T + 1, (size_t)T * 8, cudaMemcpyHostToDevice, tc->st));
  if (!tc->ids_dev) CUE(cudaMemcpyAsync(S->stage_ids, ids, tc->n * 8, cudaMemcpyHostToDevice, tc->st));
  memset(&tc->A, 0, sizeof tc->A);
  tc->A.V = *emc__cuda_view(k);
  tc->A.C = S->C;
  tc->A.C.mode = mode;
  tc->A.C.src = S->C.staging;
  tc->A.ids = tc->ids_dev ? ids : S->stage_ids;
  tc->A.n = tc->n;
  tc->A.op = op;
  return EMC_OK;
cuda:
  emc__cuda_slot_failed(k, S, tc->st);
  {
    emc_status status = emc__cuda_fail(e, what);
    if (tc->capturing) emc__cuda_capture_abandon(tc->st);
    return status;
  }
}

/* A call that failed to enqueue (lock held): its status; the slot, which may hold part of the
 * call, is made afresh before it serves again, once copies that may still read the caller's
 * host buffers are done. */
static emc_status enqueue_failed(tcall *tc, cudaError_t e, const char *what) {
  emc_status status = emc__cuda_fail(e, what);
  if (tc->capturing) emc__cuda_capture_abandon(tc->st);
  if (tc->S && !tc->S->captured) {
    if (emc__cuda_wait_stream(tc->k, tc->st) != cudaSuccess) (void)cudaGetLastError();
    emc__cuda_slot_failed(tc->k, tc->S, tc->st);
  }
  return status;
}

/* The writer call of an update or a prefetch: on the writer stream after the caller's stream
 * (or, under capture, on the caller's stream), ordered with the other writer sections by
 * events (streams.cu, "Streams and ordering"). A stage that fails to enqueue still gets
 * the section's end when that can be enqueued (defect 4). */
static cudaError_t writer(tcall *tc) {
  emc__cuda_cache *k = tc->k;
  emc__scratch *S = tc->S;
  const dcall *C = &tc->A.C;
  cudaStream_t ws = tc->capturing ? tc->st : k->writer;
  cudaError_t e;
  if (!tc->capturing) {
    if ((e = cudaEventRecord(S->looked, tc->st)) != cudaSuccess) return e;
    if ((e = cudaStreamWaitEvent(ws, S->looked, 0)) != cudaSuccess) return e;
  }
  if ((e = emc__cuda_section_open(k, ws, tc->capturing)) != cudaSuccess) return e;
  if ((e = emc__cu_wr_begin(k, C, ws)) != cudaSuccess) {
    (void)emc__cuda_section_close(k, ws, tc->capturing);
    return e;
  }
  e = tc->A.op == TR_PREFETCH ? emc__cu_prefetch_pin(&tc->A, ws) : emc__cu_train_update(&tc->A, ws);
  if (e == cudaSuccess) e = emc__cuda_writer_body(k, C, ws);
  if (e != cudaSuccess) { /* the section is ended and closed all the same */
    (void)emc__cuda_section_end(k, C, ws);
    (void)emc__cuda_section_close(k, ws, tc->capturing);
    return e;
  }
  if ((e = emc__cuda_section_end(k, C, ws)) != cudaSuccess) {
    (void)emc__cuda_section_close(k, ws, tc->capturing);
    return e;
  }
  if ((e = emc__cuda_section_close(k, ws, tc->capturing)) != cudaSuccess) return e;
  if (!tc->capturing) {
    if ((e = cudaEventRecord(S->done, ws)) != cudaSuccess) return e;
    if ((e = cudaStreamWaitEvent(tc->st, S->done, 0)) != cudaSuccess) return e;
    S->used = 1;
  }
  return cudaSuccess;
}

/* A blocking call's end (k->lock still held, so the slot stays this call's): the device's
 * verdict read back. Releases the lock. */
static emc_status finish_blocking(tcall *tc) {
  emc__cuda_cache *k = tc->k;
  emc__scratch *S = tc->S;
  uint64_t *back = S->pinned + 3 * (size_t)k->n_tables + 3;
  uint32_t code;
  cudaError_t e = cudaMemcpyAsync(back, S->C.status, 32, cudaMemcpyDeviceToHost, tc->st);
  if (e == cudaSuccess) e = emc__cuda_wait_stream(tc->k, tc->st);
  if (e != cudaSuccess) {
    emc__cuda_leave(k);
    return emc__cuda_fail(e, "cudaStreamSynchronize(training call)");
  }
  memcpy(&code, back, 4);
  if (code != 0) {
    char text[384];
    emc__cuda_refusal_text(text, sizeof text, code, (uint32_t)(back[1] >> 32), (uint32_t)back[1],
                           back[2], back[3]);
    emc__cuda_leave(k);
    return EMC_FAIL((emc_status)code, "refused, nothing changed: %s", text);
  }
  emc__cuda_leave(k);
  return EMC_OK;
}

/* Per-table offsets: of the packed rows (unit bytes per element), of the full-row staging. */
static size_t table_offsets(const emc_cache *c, const uint64_t *offs, uint64_t *inoff,
                            uint64_t *outoff, int grads, size_t *gbytes) {
  const emc_store *s = c->store;
  uint64_t in = 0, full = 0;
  uint32_t t;
  for (t = 0; t < s->n_tables; t++) {
    uint64_t m = offs[t + 1] - offs[t];
    inoff[t] = in;
    outoff[t] = full;
    in += grads ? m * s->tables[t].dim : m * s->tables[t].row_bytes;
    full += m * s->tables[t].full_bytes;
  }
  if (gbytes) *gbytes = grads ? in * 4 : 0;
  return (size_t)full;
}

/* ================================================================= update calls */
static emc_status update_call(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              const void *buf, const emc_optimizer *opt, void *stream, uint32_t op) {
  tcall tc;
  emc__cuda_cache *k = c->cuda;
  uint64_t *inoff = NULL, *outoff = NULL;
  size_t full, gbytes = 0, in_bytes;
  int buf_dev;
  emc_status status;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  EMC_TRY(begin(&tc, c, ids, offsets, buf, op == TR_APPLY ? "grads" : "rows",
                op == TR_APPLY ? 4 : 2, stream));
  if (tc.n == 0) {
    emc__cuda_leave(k);
    return EMC_OK;
  }
  inoff = (uint64_t *)emc__malloc(k->n_tables * 8);
  outoff = (uint64_t *)emc__malloc(k->n_tables * 8);
  if (!inoff || !outoff) {
    status = EMC_FAIL(EMC_ENOMEM, "offsets of %u tables", k->n_tables);
    goto unlock;
  }
  full = table_offsets(c, tc.offs, inoff, outoff, op == TR_APPLY, &gbytes);
  in_bytes = op == TR_APPLY ? gbytes : tc.bytes;
  buf_dev = emc__cuda_device_accessible(k, buf);
  tc.blocking = !tc.ids_dev || !buf_dev;
  if (tc.blocking && tc.capturing) {
    status = EMC_FAIL(EMC_EINVAL, "a captured call takes device buffers (ids and %s)",
                      op == TR_APPLY ? "grads" : "rows");
    goto unlock;
  }
  status = prepare(&tc, ids, full > tc.bytes ? full : tc.bytes, op == TR_APPLY ? gbytes : 0, inoff,
                   outoff, EMC_MODE_UPDATE, op);
  if (status != EMC_OK) goto unlock;
  if (op == TR_APPLY) {
    tc.A.grads = (const float *)buf;
    if (!buf_dev) {
      CUE(cudaMemcpyAsync(tc.S->stage_grads, buf, in_bytes, cudaMemcpyHostToDevice, tc.st));
      tc.A.grads = tc.S->stage_grads;
    }
    tc.A.gm = tc.S->gm;
    tc.A.lr = opt->lr;
    tc.A.eps = opt->eps;
    tc.A.init = opt->initial_accumulator;
    tc.A.kind = (uint32_t)opt->kind;
    tc.A.merge = (uint32_t)opt->merge;
  } else {
    tc.A.rows = (const unsigned char *)buf;
    if (!buf_dev) {
      CUE(cudaMemcpyAsync(tc.S->stage_out, buf, in_bytes, cudaMemcpyHostToDevice, tc.st));
      tc.A.rows = tc.S->stage_out;
    }
  }
  tc.A.report = !tc.blocking;
  CUE(emc__cu_train_runs(&tc.A, tc.st));
  CUE(writer(&tc));
  free(inoff);
  free(outoff);
  if (op == TR_INSERT) __atomic_fetch_add(&k->n_inserts, tc.n, __ATOMIC_RELAXED);
  if (tc.blocking) return finish_blocking(&tc);
  emc__cuda_leave(k);
  return EMC_OK;
cuda:
  status = enqueue_failed(&tc, e, what);
unlock:
  emc__cuda_leave(k);
  free(inoff);
  free(outoff);
  return status;
}

extern "C" emc_status emc__cuda_apply(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                      const void *grads, const emc_optimizer *opt, void *stream) {
  return update_call(c, ids, offsets, grads, opt, stream, TR_APPLY);
}

extern "C" emc_status emc__cuda_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                       const void *rows, void *stream) {
  return update_call(c, ids, offsets, rows, NULL, stream, TR_INSERT);
}

/* ================================================================= prefetch */
/* The pin lists hold a batch's distinct rows: grown before the first prefetch of a larger
 * batch, once the writer stream is idle (its prefetches read the lists). */
static emc_status grow_ring(tcall *tc) {
  emc__cuda_cache *k = tc->k;
  dview *V = &k->V;
  uint64_t cap = V->ring_cap, want = tc->n;
  uint64_t *keys = NULL;
  cudaError_t e;
  if (want <= cap) return EMC_OK;
  if (tc->capturing)
    return EMC_FAIL(EMC_EUNSUPPORTED,
                    "this prefetch of %llu ids is larger than any before: its pin lists must grow, "
                    "which cannot be captured; run one prefetch of this size outside capture first",
                    (unsigned long long)want);
  if (k->n_captured > 0 && emc__cuda_reap_captured(k) > 0)
    return EMC_FAIL(EMC_EUNSUPPORTED,
                    "a prefetch of %llu ids needs longer pin lists than the graphs captured from "
                    "this cache use; capture with the largest batch first",
                    (unsigned long long)want);
  if (want < 2 * cap) want = 2 * cap;
  if (want < 4096) want = 4096;
  if ((e = emc__cuda_wait_stream(k, k->writer)) != cudaSuccess ||
      (e = emc__cu_malloc((void **)&keys, (size_t)V->n_lists * want * 8)) != cudaSuccess)
    return emc__cuda_fail(e, "growing the pin lists");
  if (cap && (e = cudaMemcpy2D(keys, want * 8, V->ring_keys, cap * 8, cap * 8, V->n_lists,
                               cudaMemcpyDeviceToDevice)) != cudaSuccess) {
    cudaFree(keys);
    return emc__cuda_fail(e, "copying the pin lists");
  }
  cudaFree(V->ring_keys);
  V->ring_keys = keys;
  V->ring_cap = (uint32_t)want;
  return EMC_OK;
}

/* Rows prefetches could not pin since the last report (mirrored by the device). */
static emc_status shortfall_report(emc__cuda_cache *k) {
  ull now = ((volatile ull *)k->mirror_host)[2];
  if (now == k->short_seen) return EMC_OK;
  {
    ull d = now - k->short_seen;
    k->short_seen = now;
    return EMC_FAIL(EMC_ECAPACITY,
                    "%llu prefetched rows did not fit the pin budget (t2 * capacity, shared by the "
                    "last prefetch_depth + 1 prefetches) since the last report; they stayed unpinned",
                    d);
  }
}

extern "C" emc_status emc__cuda_prefetch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                         void *stream) {
  tcall tc;
  emc__cuda_cache *k = c->cuda;
  uint64_t *zero = NULL;
  emc_status status;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  EMC_TRY(begin(&tc, c, ids, offsets, NULL, NULL, 0, stream));
  tc.blocking = !tc.ids_dev;
  if (tc.blocking && tc.capturing) {
    emc__cuda_leave(k);
    return EMC_FAIL(EMC_EINVAL, "a captured emc_prefetch takes device ids");
  }
  zero = (uint64_t *)emc__calloc(k->n_tables, 8);
  if (!zero) {
    status = EMC_FAIL(EMC_ENOMEM, "offsets of %u tables", k->n_tables);
    goto unlock;
  }
  if ((status = grow_ring(&tc)) != EMC_OK) goto unlock;
  if ((status = prepare(&tc, ids, 0, 0, zero, zero, EMC_MODE_PREFETCH, TR_PREFETCH)) != EMC_OK) goto unlock;
  tc.A.V = *emc__cuda_view(k); /* (the ring as grown) */
  tc.A.report = !tc.blocking;
  CUE(emc__cu_train_runs(&tc.A, tc.st));
  CUE(writer(&tc));
  free(zero);
  if (tc.blocking) {
    EMC_TRY(finish_blocking(&tc));
    EMC_TRY(emc__cuda_enter(k));
  }
  status = shortfall_report(k); /* this call's (blocking), or earlier calls' */
  emc__cuda_leave(k);
  return status;
cuda:
  status = enqueue_failed(&tc, e, what);
unlock:
  emc__cuda_leave(k);
  free(zero);
  return status;
}

/* ================================================================= dedup */
extern "C" emc_status emc__cuda_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                      uint64_t *unique_ids, uint64_t *unique_offsets,
                                      uint32_t *inverse, void *stream) {
  tcall tc;
  emc__cuda_cache *k = c->cuda;
  const uint32_t T = k->n_tables;
  uint64_t *zero = NULL;
  int u_dev, o_dev, i_dev;
  emc_status status;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  EMC_TRY(begin(&tc, c, ids, offsets, NULL, NULL, 0, stream));
  if (!unique_offsets) {
    status = EMC_FAIL(EMC_EINVAL, "unique_offsets is NULL");
    goto unlock;
  }
  if (tc.n > 0 && (!unique_ids || !inverse)) {
    status = EMC_FAIL(EMC_EINVAL, "unique_ids or inverse is NULL with %llu ids", (unsigned long long)tc.n);
    goto unlock;
  }
  if ((status = emc__cuda_check_space(k, unique_ids, "unique_ids")) != EMC_OK ||
      (status = emc__cuda_check_space(k, unique_offsets, "unique_offsets")) != EMC_OK ||
      (status = emc__cuda_check_space(k, inverse, "inverse")) != EMC_OK ||
      (tc.n > 0 && ((status = emc__cuda_check_align(k, unique_ids, 8, "unique_ids")) != EMC_OK ||
                    (status = emc__cuda_check_align(k, inverse, 4, "inverse")) != EMC_OK)) ||
      (status = emc__cuda_check_align(k, unique_offsets, 8, "unique_offsets")) != EMC_OK)
    goto unlock;
  u_dev = tc.n == 0 || emc__cuda_device_accessible(k, unique_ids);
  o_dev = emc__cuda_device_accessible(k, unique_offsets);
  i_dev = tc.n == 0 || emc__cuda_device_accessible(k, inverse);
  tc.blocking = !tc.ids_dev || !u_dev || !o_dev || !i_dev;
  if (tc.blocking && tc.capturing) {
    status = EMC_FAIL(EMC_EINVAL, "a captured emc_dedup takes device buffers");
    goto unlock;
  }
  zero = (uint64_t *)emc__calloc(T, 8);
  if (!zero) {
    status = EMC_FAIL(EMC_ENOMEM, "offsets of %u tables", T);
    goto unlock;
  }
  if ((status = prepare(&tc, ids, 0, 0, zero, zero, EMC_MODE_LOOKUP, TR_DEDUP)) != EMC_OK) goto unlock;
  /* outputs in host memory are staged in buffers the sort is done with */
  tc.A.uids = u_dev ? unique_ids : tc.S->C.skeys;
  tc.A.inv = i_dev ? inverse : tc.S->C.svals;
  tc.A.uoffs = o_dev ? unique_offsets : tc.S->C.inoff + T;
  tc.A.report = !tc.blocking;
  CUE(emc__cu_train_runs(&tc.A, tc.st));
  CUE(emc__cu_dedup_out(&tc.A, tc.st));
  if (!tc.capturing) {
    CUE(cudaEventRecord(tc.S->done, tc.st));
    tc.S->used = 1;
  }
  free(zero);
  zero = NULL;
  if (!tc.blocking) {
    emc__cuda_leave(k);
    return EMC_OK;
  }
  /* blocking: the verdict, then the outputs (still holding the lock: the slot is ours) */
  {
    uint64_t *back = tc.S->pinned + 3 * (size_t)T + 3;
    uint32_t code;
    CUE(cudaMemcpyAsync(back, tc.S->C.status, 32, cudaMemcpyDeviceToHost, tc.st));
    CUE(emc__cuda_wait_stream(k, tc.st));
    memcpy(&code, back, 4);
    if (code != 0) {
      char text[384];
      emc__cuda_refusal_text(text, sizeof text, code, (uint32_t)(back[1] >> 32), (uint32_t)back[1],
                             back[2], back[3]);
      status = EMC_FAIL((emc_status)code, "%s", text);
      goto unlock;
    }
    if (!u_dev) CUE(cudaMemcpyAsync(unique_ids, tc.A.uids, tc.n * 8, cudaMemcpyDeviceToHost, tc.st));
    if (!i_dev) CUE(cudaMemcpyAsync(inverse, tc.A.inv, tc.n * 4, cudaMemcpyDeviceToHost, tc.st));
    if (!o_dev) CUE(cudaMemcpyAsync(unique_offsets, tc.A.uoffs, ((size_t)T + 1) * 8, cudaMemcpyDeviceToHost, tc.st));
    CUE(emc__cuda_wait_stream(k, tc.st));
  }
  emc__cuda_leave(k);
  return EMC_OK;
cuda:
  status = enqueue_failed(&tc, e, what);
unlock:
  emc__cuda_leave(k);
  free(zero);
  return status;
}
