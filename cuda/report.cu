/*
 * report.cu: the CUDA backend's emc_flush (write-back, then what the asynchronous calls since
 * the last flush could not report themselves) and its counters (emc_get_stats, rows per table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_cuda.h"

/* ================================================================= flush */
/* After a flush has completed: the store's hashed counts follow the device's, and what the
 * asynchronous calls since the last flush could not report themselves is reported now (dense
 * ids out of range in lookups, refused training calls, rows prefetches could not pin): the
 * first of these kinds as the status, all of them in the detail. Which bad id (and which
 * refusal) the detail names is the one the device's threads recorded first, in no fixed
 * order: "one of them". */
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
             "%llu dense ids out of range in lookups since the last flush (one of them: table "
             "%llu, position %llu, id %llu); they read as zero rows",
             g.bad_count, g.bad_table, g.bad_pos, g.bad_id);
    status = EMC_ERANGE;
  }
  if (errs != k->errs_seen) {
    emc__cuda_refusal_text(part, sizeof part, g.err_code, g.err_why, g.err_table, g.err_a, g.err_b);
    snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
             "%s%llu calls (emc_insert, training calls) refused on the device since the last "
             "flush, each changing nothing (one of them: %s)",
             detail[0] ? "; " : "", errs - k->errs_seen, part);
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

