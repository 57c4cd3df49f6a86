/*
 * train_gpu.c: emc-bench-gpu --train (see train.h): train.c's step on a CUDA cache.
 *
 * Memory spaces, as embcache.h's "CUDA backend" section asks for the fast path: ids (the whole
 * trace, uploaded once before the run), out, grads and where in device memory; offsets a host
 * array (device offsets would cost a copy to the host and a wait on the stream). The header's
 * promises for device buffers: "Training calls and emc_insert (see "training") make no host
 * round trip with device buffers"; a lookup "returns without waiting for the device unless a
 * host buffer has to be filled"; emc_apply_gradients "with device buffers asynchronous on
 * stream: no host wait, no host copy of the ids". The one wait it documents, "the first
 * prefetch of a larger batch than any before grows the pin lists (one wait for the writer
 * stream)", is the prologue's prefetch here (every batch has the same size), before the
 * measured loop. So a measured step only enqueues work.
 *
 * One step, as a trainer runs it (train.h's emcb_train_step):
 *   fork:     event on the training stream; the prefetch stream waits for it
 *   prefetch: emc_prefetch(batch i+1) on the prefetch stream (overlaps the rest of the step)
 *   lookup:   emc_lookup_ex(batch i, where) on the training stream
 *   backward: cudaMemcpyAsync(grads <- out) on the training stream (a stand-in for the model:
 *             g = w, f32, packed like out; device to device, asynchronous)
 *   apply:    emc_apply_gradients(batch i, SGD) on the training stream
 *   join:     event on the prefetch stream; the training stream waits for it, so batch i+1's
 *             lookup in the next step runs after its prefetch has completed (all hits where
 *             the pins fit)
 *
 * Measured: step time from CUDA events recorded on the training stream at each step's start
 * (median, p90 over the measured steps; the events are read after the loop); the host
 * synchronisations the bench itself makes inside the measured loop, counted: every
 * cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize and blocking cudaMemcpy in
 * this file goes through host_sync(), which counts it (none is called in the loop), plus
 * every wait the library itself made in the loop (stats.host_syncs: the library counts each of
 * its host waits for the device), so "0 host syncs per step" is a measurement. The library's
 * side is checked two more ways. One step is captured into a CUDA graph (global
 * capture mode first: synchronising a captured stream or the device, a synchronous copy, or
 * another capture-unsafe call invalidates the capture; relaxed mode, which tolerates the
 * capture-unsafe calls that do not synchronise the captured streams, if global fails) and
 * replayed; the library knows when it is captured (cudaStreamIsCapturing), so this covers its
 * captured path. For the uncaptured loop: the host time to enqueue the steps
 * (enqueue_us_per_step) against the device time per step: a host that waited for the device
 * could not run ahead of it.
 */
#define _POSIX_C_SOURCE 200809L

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_bench.h" /* DIM, ROW_BYTES, SEED, ALPHA, the exit codes, now_s, pct */

typedef struct gpu_train {
  cudaStream_t st, pf;        /* the training stream, the prefetch stream */
  cudaEvent_t fork_ev, pf_ev; /* ordering only (no timing) */
  const uint64_t *d_ids;      /* the trace, device memory */
  size_t per;                 /* ids per batch */
  size_t out_bytes;           /* one batch of rows (= of f32 gradients: DIM f32) */
  cudaError_t hook_err;       /* the first failure of a hook (they cannot return one) */
  const char *hook_what;
} gpu_train;

/* ------------------------------------------------------------------ host synchronisations */
static uint64_t n_host_syncs; /* every blocking call of this file, counted by host_sync */

typedef enum { SYNC_STREAM, SYNC_DEVICE, SYNC_EVENT, SYNC_MEMCPY } sync_kind;
static cudaError_t host_sync(sync_kind k, void *a, void *dst, const void *src, size_t n,
                             enum cudaMemcpyKind dir) {
  n_host_syncs++;
  switch (k) {
    case SYNC_STREAM: return cudaStreamSynchronize((cudaStream_t)a);
    case SYNC_DEVICE: return cudaDeviceSynchronize();
    case SYNC_EVENT: return cudaEventSynchronize((cudaEvent_t)a);
    case SYNC_MEMCPY: return cudaMemcpy(dst, src, n, dir);
  }
  return cudaErrorInvalidValue;
}

/* ------------------------------------------------------------------ failures */
static int fail_cuda(const char *what, cudaError_t e) {
  fprintf(stderr, "emc-bench-gpu: --train: %s failed: %s: %s\n", what, cudaGetErrorName(e),
          cudaGetErrorString(e));
  return EXIT_FAIL;
}
static int fail_emc(const char *what, int st) {
  fprintf(stderr, "emc-bench-gpu: --train: %s failed: %s: %s\n", what,
          emc_status_name((emc_status)st), emc_last_error_detail());
  if (st == EMC_EUNSUPPORTED)
    fprintf(stderr, "emc-bench-gpu: --train: this embcache's CUDA backend does not train yet "
            "(emc_prefetch / emc_apply_gradients return EMC_EUNSUPPORTED)\n");
  return EXIT_FAIL;
}
#define CUT(call)                                              \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) { rc = fail_cuda(#call, e_); goto out; } \
  } while (0)
#define EMT(what, call)                                        \
  do {                                                         \
    int s_ = (int)(call);                                      \
    if (s_ != 0) { rc = fail_emc((what), s_); goto out; }      \
  } while (0)

/* ------------------------------------------------------------------ the step's hooks */
static void hook_err(gpu_train *g, const char *what, cudaError_t e) {
  if (e != cudaSuccess && g->hook_err == cudaSuccess) {
    g->hook_err = e;
    g->hook_what = what;
  }
}
static const uint64_t *g_ids(void *ctx, size_t batch) {
  const gpu_train *g = ctx;
  return g->d_ids + batch * g->per;
}
static void g_fork(void *ctx) {
  gpu_train *g = ctx;
  hook_err(g, "fork: cudaEventRecord", cudaEventRecord(g->fork_ev, g->st));
  hook_err(g, "fork: cudaStreamWaitEvent", cudaStreamWaitEvent(g->pf, g->fork_ev, 0));
}
static void g_join(void *ctx) {
  gpu_train *g = ctx;
  hook_err(g, "join: cudaEventRecord", cudaEventRecord(g->pf_ev, g->pf));
  hook_err(g, "join: cudaStreamWaitEvent", cudaStreamWaitEvent(g->st, g->pf_ev, 0));
}
static void g_backward(void *ctx, size_t batch, const void *out, void *grads) {
  gpu_train *g = ctx;
  (void)batch;
  hook_err(g, "backward: cudaMemcpyAsync",
           cudaMemcpyAsync(grads, out, g->out_bytes, cudaMemcpyDeviceToDevice, g->st));
}

/* ------------------------------------------------------------------ helpers */
/* Microseconds between consecutive events ev[0 .. n] into us[0 .. n); they have completed. */
static cudaError_t event_gaps(cudaEvent_t *ev, size_t n, double *us) {
  for (size_t k = 0; k < n; k++) {
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, ev[k], ev[k + 1]);
    if (e != cudaSuccess) return e;
    us[k] = (double)ms * 1e3;
  }
  return cudaSuccess;
}

/* ------------------------------------------------------------------ the graph */
typedef struct graph_result {
  int captured;
  const char *mode;    /* "global" or "relaxed" */
  char error[320];     /* why global (and relaxed) capture failed */
  double nodes;
  double step_us_median, step_us_p90;
} graph_result;

/* Capture one step (batch, prefetching next) on g->st in `mode`; 0 and *graph, or -1 with the
 * reason appended to gr->error. */
static int capture_step(gpu_train *g, const emcb_train_io *io, size_t batch, size_t next,
                        uint8_t *d_where, enum cudaStreamCaptureMode mode, const char *name,
                        cudaGraph_t *graph, graph_result *gr) {
  emcb_train_tally t;
  size_t len = strlen(gr->error);
  memset(&t, 0, sizeof t);
  *graph = NULL;
  g->hook_err = cudaSuccess;
  cudaError_t e = cudaStreamBeginCapture(g->st, mode);
  if (e != cudaSuccess) {
    snprintf(gr->error + len, sizeof gr->error - len, "%s%s: cudaStreamBeginCapture: %s",
             len ? "; " : "", name, cudaGetErrorString(e));
    return -1;
  }
  int st = emcb_train_step(io, batch, next, d_where, &t);
  char detail[160];
  snprintf(detail, sizeof detail, "%s", st != 0 ? emc_last_error_detail() : "");
  cudaError_t he = g->hook_err;
  if (st != 0) g_join(g); /* a step that stopped early left the prefetch stream forked */
  e = cudaStreamEndCapture(g->st, graph);
  (void)cudaGetLastError(); /* capture errors are not sticky; clear them */
  if (st != 0)
    snprintf(gr->error + len, sizeof gr->error - len, "%s%s: the step under capture: %s: %s",
             len ? "; " : "", name, emc_status_name((emc_status)st), detail);
  else if (he != cudaSuccess)
    snprintf(gr->error + len, sizeof gr->error - len, "%s%s: %s: %s", len ? "; " : "", name,
             g->hook_what, cudaGetErrorString(he));
  else if (e != cudaSuccess)
    snprintf(gr->error + len, sizeof gr->error - len, "%s%s: cudaStreamEndCapture: %s",
             len ? "; " : "", name, cudaGetErrorString(e));
  if (st != 0 || he != cudaSuccess || e != cudaSuccess) {
    if (*graph) cudaGraphDestroy(*graph);
    *graph = NULL;
    return -1;
  }
  return 0;
}

/* Capture one step, instantiate it, replay it reps times back to back (events between the
 * launches). Never fails the bench: a failure is reported in gr. */
static void run_step_graph(gpu_train *g, const emcb_train_io *io, size_t batch, size_t next,
                      uint8_t *d_where, unsigned reps, graph_result *gr) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t *ev = NULL;
  double *us = NULL;
  cudaError_t e;
  memset(gr, 0, sizeof *gr);
  gr->nodes = gr->step_us_median = gr->step_us_p90 = NAN;
  gr->mode = "none";
  if (capture_step(g, io, batch, next, d_where, cudaStreamCaptureModeGlobal, "global", &graph,
                   gr) == 0)
    gr->mode = "global";
  else if (capture_step(g, io, batch, next, d_where, cudaStreamCaptureModeRelaxed, "relaxed",
                        &graph, gr) == 0)
    gr->mode = "relaxed";
  if (!graph) return;
  gr->captured = 1;
  size_t n = 0;
  if (cudaGraphGetNodes(graph, NULL, &n) == cudaSuccess) gr->nodes = (double)n;
  if ((e = cudaGraphInstantiate(&exec, graph, 0)) != cudaSuccess) {
    snprintf(gr->error, sizeof gr->error, "cudaGraphInstantiate: %s", cudaGetErrorString(e));
    goto done;
  }
  ev = calloc(reps + 1, sizeof *ev);
  us = calloc(reps, sizeof *us);
  if (!ev || !us) goto done;
  for (unsigned k = 0; k <= reps; k++)
    if ((e = cudaEventCreate(&ev[k])) != cudaSuccess) goto done_e;
  if ((e = cudaGraphLaunch(exec, g->st)) != cudaSuccess) goto done_e; /* warm */
  for (unsigned k = 0; k < reps; k++) {
    if ((e = cudaEventRecord(ev[k], g->st)) != cudaSuccess) goto done_e;
    if ((e = cudaGraphLaunch(exec, g->st)) != cudaSuccess) goto done_e;
  }
  if ((e = cudaEventRecord(ev[reps], g->st)) != cudaSuccess) goto done_e;
  if ((e = host_sync(SYNC_EVENT, ev[reps], NULL, NULL, 0, cudaMemcpyDefault)) != cudaSuccess)
    goto done_e;
  if ((e = event_gaps(ev, reps, us)) != cudaSuccess) goto done_e;
  gr->step_us_median = pct(us, reps, 0.5);
  gr->step_us_p90 = pct(us, reps, 0.9);
  goto done;
done_e:
  snprintf(gr->error, sizeof gr->error, "replay: %s", cudaGetErrorString(e));
done:
  (void)cudaGetLastError();
  if (ev)
    for (unsigned k = 0; k <= reps; k++)
      if (ev[k]) cudaEventDestroy(ev[k]);
  free(ev);
  free(us);
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

/* ------------------------------------------------------------------ the figure */
int emcb_train_gpu_main(const emcb_train_gpu_opts *o, FILE *out_file) {
  uint64_t rows[EMCT_CRITEO_KAGGLE_TABLES], off[EMCT_CRITEO_KAGGLE_TABLES + 1], total = 0;
  const uint32_t nt =
      emct_preset_rows("criteo-kaggle", o->scale, 0, 0, rows, EMCT_CRITEO_KAGGLE_TABLES);
  const size_t per = o->batch * nt, n_batches = o->warmup + o->steps;
  const uint64_t stride = emcb_slot_stride(ROW_BYTES);
  emc_table_desc desc[EMCT_CRITEO_KAGGLE_TABLES];
  emc_store *s = NULL;
  emc_cache *c = NULL;
  uint64_t *h = NULL, *d = NULL;
  unsigned char *d_out = NULL, *d_where = NULL, *h_where = NULL;
  float *d_grads = NULL;
  cudaEvent_t *ev = NULL;
  double *us = NULL;
  gpu_train g;
  graph_result gr;
  emcb_train_tally tw, tm;
  emc_stats s0, s1;
  emc_optimizer opt;
  emc_cache_config cfg;
  uint64_t hits = 0, present = 0, syncs_in_loop = 0;
  emc_status flush_st = EMC_OK;
  char flush_detail[256] = "";
  double loop_enqueue_s = 0, loop_wall_s = 0, step_med = NAN, step_p90 = NAN, step_mean = NAN,
         device_s = NAN;
  int rc = 0, leave_cache = 0;
  char gr_note[64] = "";

  memset(&g, 0, sizeof g);
  memset(&gr, 0, sizeof gr);
  memset(&tw, 0, sizeof tw);
  memset(&tm, 0, sizeof tm);
  gr.mode = "none";
  gr.nodes = gr.step_us_median = gr.step_us_p90 = NAN;
  if (nt == 0 || o->steps == 0 || o->batch == 0) {
    fprintf(stderr, "emc-bench-gpu: --train: bad arguments\n");
    return EXIT_FAIL;
  }
  for (uint32_t t = 0; t < nt; t++) total += rows[t];
  size_t cap = (size_t)(o->cache_frac * (double)total * (double)stride);
  if (cap < 4 * stride) cap = 4 * stride;

  /* ---- store, trace (uploaded once), buffers */
  fprintf(stderr, "emc-bench-gpu: --train: criteo-kaggle store, scale %g: %" PRIu64
          " rows (%.2f GB); %zu + %zu steps of %zu x %u ids...\n", o->scale, total,
          (double)total * ROW_BYTES / 1e9, o->warmup, o->steps, o->batch, nt);
  for (uint32_t t = 0; t < nt; t++)
    desc[t] = (emc_table_desc){NULL, EMC_TABLE_DENSE, rows[t], DIM, EMC_DTYPE_F32, EMC_STATE_NONE};
  EMT("emc_store_create", emc_store_create(desc, nt, &s));
  for (uint32_t t = 0; t < nt; t++)
    EMT("emc_store_fill_uniform", emc_store_fill_uniform(s, t, -1.0f, 1.0f, SEED));
  {
    emct_gen gen;
    if (emct_gen_init(&gen, rows, nt, EMCT_DIST_ZIPF, ALPHA, SEED + 8) != 0) {
      fprintf(stderr, "emc-bench-gpu: --train: trace generator setup failed\n");
      rc = EXIT_FAIL;
      goto out;
    }
    h = malloc(n_batches * per * sizeof *h);
    if (!h) {
      emct_gen_free(&gen);
      rc = fail_emc("trace", EMC_ENOMEM);
      goto out;
    }
    for (size_t i = 0; i < n_batches; i++) emct_gen_batch(&gen, o->batch, h + i * per, off);
    emct_gen_free(&gen);
  }
  g.per = per;
  g.out_bytes = per * ROW_BYTES;
  CUT(cudaMalloc((void **)&d, n_batches * per * sizeof *d));
  CUT(host_sync(SYNC_MEMCPY, NULL, d, h, n_batches * per * sizeof *d, cudaMemcpyHostToDevice));
  g.d_ids = d;
  CUT(cudaMalloc((void **)&d_out, g.out_bytes));
  CUT(cudaMalloc((void **)&d_grads, per * DIM * sizeof *d_grads));
  CUT(cudaMalloc((void **)&d_where, (o->steps + 1) * per)); /* one per measured step + graph */
  h_where = malloc(o->steps * per);
  ev = calloc(o->steps + 1, sizeof *ev);
  us = calloc(o->steps, sizeof *us);
  if (!h_where || !ev || !us) {
    rc = fail_emc("buffers", EMC_ENOMEM);
    goto out;
  }
  CUT(cudaStreamCreateWithFlags(&g.st, cudaStreamNonBlocking));
  CUT(cudaStreamCreateWithFlags(&g.pf, cudaStreamNonBlocking));
  CUT(cudaEventCreateWithFlags(&g.fork_ev, cudaEventDisableTiming));
  CUT(cudaEventCreateWithFlags(&g.pf_ev, cudaEventDisableTiming));
  for (size_t k = 0; k <= o->steps; k++) CUT(cudaEventCreate(&ev[k]));

  /* ---- the cache */
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = cap;
  cfg.prefetch_depth = o->prefetch_depth;
  EMT("emc_cache_create", emc_cache_create(s, &cfg, &c));
  emc_optimizer_init(&opt);
  const emcb_train_io io = {.cache = c, .offsets = off, .ids = g_ids, .out = d_out,
                            .grads = d_grads, .backward = g_backward, .opt = &opt,
                            .stream = g.st, .prefetch_stream = g.pf, .fork = g_fork,
                            .join = g_join, .time_phases = 0, .ctx = &g};

  /* ---- warm-up (the prologue prefetches batch 0), then everything settles */
  EMT("the prologue's emc_prefetch", emcb_train_prefetch(&io, 0, &tw));
  for (size_t i = 0; i < o->warmup; i++)
    EMT("a warm-up step", emcb_train_step(&io, i, (i + 1) % n_batches, NULL, &tw));
  if (g.hook_err != cudaSuccess) {
    rc = fail_cuda(g.hook_what, g.hook_err);
    goto out;
  }
  CUT(host_sync(SYNC_DEVICE, NULL, NULL, NULL, 0, cudaMemcpyDefault)); /* the writer stream too */
  EMT("emc_get_stats", emc_get_stats(c, &s0));

  /* ---- measured: the loop only enqueues; no host synchronisation inside it */
  {
    const uint64_t syncs0 = n_host_syncs;
    const double w0 = now_s();
    for (size_t k = 0; k < o->steps; k++) {
      const size_t i = o->warmup + k;
      CUT(cudaEventRecord(ev[k], g.st));
      EMT("a measured step",
          emcb_train_step(&io, i, (i + 1) % n_batches, d_where + k * per, &tm));
    }
    CUT(cudaEventRecord(ev[o->steps], g.st));
    loop_enqueue_s = now_s() - w0;
    syncs_in_loop = n_host_syncs - syncs0;
    { /* and the library's own waits (stats.host_syncs) */
      emc_stats sl;
      EMT("emc_get_stats", emc_get_stats(c, &sl));
      syncs_in_loop += sl.host_syncs - s0.host_syncs;
    }
    CUT(host_sync(SYNC_EVENT, ev[o->steps], NULL, NULL, 0, cudaMemcpyDefault));
    loop_wall_s = now_s() - w0;
  }
  if (g.hook_err != cudaSuccess) {
    rc = fail_cuda(g.hook_what, g.hook_err);
    goto out;
  }
  CUT(event_gaps(ev, o->steps, us));
  {
    double sum = 0;
    for (size_t k = 0; k < o->steps; k++) sum += us[k];
    device_s = sum * 1e-6;
    step_mean = sum / (double)o->steps;
  }
  step_med = pct(us, o->steps, 0.5);
  step_p90 = pct(us, o->steps, 0.9);
  CUT(host_sync(SYNC_DEVICE, NULL, NULL, NULL, 0, cudaMemcpyDefault));
  { /* what the asynchronous calls met comes back from emc_flush (which waits for the writer
     * stream too): EMC_ECAPACITY for rows a prefetch could not pin (also counted in
     * stats.pin_shortfall) or a gradient batch refused on the device, EMC_ERANGE for a refused
     * call; the detail names them all. Reported, not fatal. */
    flush_st = emc_flush(c, g.st);
    if (flush_st == EMC_ECUDA || flush_st == EMC_EINVAL) EMT("emc_flush", flush_st);
    if (flush_st != EMC_OK) {
      snprintf(flush_detail, sizeof flush_detail, "%s", emc_last_error_detail());
      for (char *p = flush_detail; *p; p++) /* keep the JSON string plain */
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    }
  }
  EMT("emc_get_stats", emc_get_stats(c, &s1));
  CUT(host_sync(SYNC_MEMCPY, NULL, h_where, d_where, o->steps * per, cudaMemcpyDeviceToHost));
  for (size_t p = 0; p < o->steps * per; p++) {
    hits += h_where[p] == EMC_WHERE_CACHE;
    present += h_where[p] != EMC_WHERE_ABSENT;
  }

  /* ---- one step captured into a graph and replayed */
  {
    const size_t j = o->warmup + o->steps - 1;
    run_step_graph(&g, &io, j, (j + 1) % n_batches, d_where + o->steps * per, o->graph_reps, &gr);
    if (gr.captured) {
      emc_status fs = emc_flush(c, g.st);
      if (fs != EMC_OK && fs != EMC_ECAPACITY) {
        snprintf(gr_note, sizeof gr_note, "flush after replay: %s", emc_status_name(fs));
        leave_cache = 1;
      }
    }
  }

  /* ---- report */
  {
    const double hit_ratio = present ? (double)hits / (double)present : NAN;
    const uint64_t cap_errors = tw.prefetch_capacity_errors + tm.prefetch_capacity_errors;
    struct cudaDeviceProp prop;
    jline j, t;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "?");
    for (char *p = gr.error; *p; p++) /* keep the JSON string plain */
      if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    jl_init(&t);
    jl_u64(&t, "steps", o->steps);
    jl_u64(&t, "warmup_steps", o->warmup);
    jl_u64(&t, "batch", o->batch);
    jl_u64(&t, "batch_ids", per);
    jl_u64(&t, "prefetch_depth", o->prefetch_depth);
    jl_num(&t, "lr", opt.lr);
    jl_str(&t, "optimizer", "sgd");
    jl_str(&t, "backward", "cudaMemcpyAsync grads <- out (g = w)");
    jl_num(&t, "step_us", step_med);
    jl_num(&t, "step_us_median", step_med);
    jl_num(&t, "step_us_p90", step_p90);
    jl_num(&t, "step_us_mean", step_mean);
    jl_num(&t, "steps_per_s", (double)o->steps / device_s);
    jl_num(&t, "wall_steps_per_s", (double)o->steps / loop_wall_s);
    jl_num(&t, "enqueue_us_per_step", loop_enqueue_s * 1e6 / (double)o->steps);
    jl_u64(&t, "host_syncs_in_loop", syncs_in_loop);
    jl_num(&t, "host_syncs_per_step", (double)syncs_in_loop / (double)o->steps);
    jl_num(&t, "hit_ratio_after_prefetch", hit_ratio);
    jl_u64(&t, "lookups", o->steps * per);
    jl_u64(&t, "lookups_present", present);
    jl_u64(&t, "lookup_hits", hits);
    jl_u64(&t, "prefetch_calls", tw.prefetches + tm.prefetches);
    jl_u64(&t, "prefetch_capacity_errors", cap_errors); /* prefetch calls that returned it */
    jl_str(&t, "flush_status", emc_status_name(flush_st)); /* what the loop's calls met */
    if (flush_detail[0]) jl_str(&t, "flush_detail", flush_detail);
    jl_u64(&t, "pin_shortfall", s1.pin_shortfall);
    jl_u64(&t, "apply_refused", tw.apply_refused + tm.apply_refused);
    jl_u64(&t, "prefetched", s1.prefetched - s0.prefetched);
    jl_u64(&t, "gradient_rows", s1.gradient_rows - s0.gradient_rows);
    jl_u64(&t, "evictions", s1.evictions - s0.evictions);
    jl_bool(&t, "graph_capture", gr.captured);
    jl_str(&t, "graph_capture_mode", gr.mode);
    jl_num(&t, "graph_nodes", gr.nodes);
    jl_num(&t, "graph_step_us", gr.step_us_median);
    jl_num(&t, "graph_step_us_p90", gr.step_us_p90);
    jl_u64(&t, "graph_reps", o->graph_reps);
    if (gr.error[0]) jl_str(&t, "graph_error", gr.error);
    if (gr_note[0]) jl_str(&t, "graph_note", gr_note);
    if (jl_end(&t) != 0) fputs("emc-bench-gpu: --train: result truncated\n", stderr);
    t.buf[strcspn(t.buf, "\n")] = '\0'; /* the object, without jl_end's newline */
    jl_init(&j);
    jl_str(&j, "bench", "emc-bench-gpu");
    jl_str(&j, "figure", "train");
    jl_str(&j, "version", emc_version_string());
    jl_str(&j, "device", prop.name);
    jl_str(&j, "preset", "criteo-kaggle");
    jl_num(&j, "scale", o->scale);
    jl_u64(&j, "tables", nt);
    jl_u64(&j, "total_rows", total);
    jl_u64(&j, "dim", DIM);
    jl_str(&j, "dtype", "f32");
    jl_num(&j, "alpha", ALPHA);
    jl_num(&j, "cache_frac", (double)cap / ((double)total * (double)stride));
    jl_u64(&j, "capacity_bytes", cap);
    jl_key(&j, "train");
    jl_raw(&j, "%s", t.buf);
    if (jl_end(&j) != 0) fputs("emc-bench-gpu: --train: result line truncated\n", stderr);
    fputs(j.buf, stdout);
    fflush(stdout);
    if (out_file) fputs(j.buf, out_file);

    fprintf(stderr, "emc-bench-gpu: --train on %s: %zu steps of %zu x %u ids, prefetch depth %u: "
            "step %.1f us median, %.1f us p90 (%.3g steps/s); %" PRIu64 " host syncs in the "
            "loop (enqueue %.1f us per step); hit ratio after prefetch %.4f; prefetch "
            "EMC_ECAPACITY %" PRIu64 ", pin shortfall %" PRIu64 "; emc_flush after the loop: %s%s%s\n",
            prop.name, o->steps, o->batch, nt, o->prefetch_depth, step_med, step_p90,
            (double)o->steps / device_s, syncs_in_loop, loop_enqueue_s * 1e6 / (double)o->steps,
            hit_ratio, cap_errors, s1.pin_shortfall, emc_status_name(flush_st),
            flush_detail[0] ? ": " : "", flush_detail);
    if (gr.captured)
      fprintf(stderr, "emc-bench-gpu: --train: one step captured into a CUDA graph (%s mode, %.0f "
              "nodes), replayed: %.1f us median%s%s\n", gr.mode, gr.nodes, gr.step_us_median,
              gr.error[0] ? "; " : "", gr.error);
    else
      fprintf(stderr, "emc-bench-gpu: --train: graph capture failed: %s\n", gr.error);
    /* on a GPU a wait in the loop is a regression; on the CPU model of the device (cuda/sim/)
     * the device runs far behind the host (serial mode: only when the host waits), so the
     * scratch pool's back-pressure (16 calls in flight) waits there: a figure, not a failure */
    if (syncs_in_loop != 0 && !strstr(prop.name, "CPU model")) rc = EXIT_WRONG;
  }

out:
  if (c && !leave_cache) {
    emc_status ds = emc_cache_destroy(c);
    if (ds != EMC_OK) {
      fprintf(stderr, "emc-bench-gpu: --train: note: the cache could not be destroyed (%s: %s); "
              "left to process exit\n", emc_status_name(ds), emc_last_error_detail());
      leave_cache = 1;
    }
  }
  if (!c || !leave_cache) emc_store_destroy(s);
  if (ev)
    for (size_t k = 0; k <= o->steps; k++)
      if (ev[k]) cudaEventDestroy(ev[k]);
  if (g.fork_ev) cudaEventDestroy(g.fork_ev);
  if (g.pf_ev) cudaEventDestroy(g.pf_ev);
  if (g.st) cudaStreamDestroy(g.st);
  if (g.pf) cudaStreamDestroy(g.pf);
  cudaFree(d);
  cudaFree(d_out);
  cudaFree(d_grads);
  cudaFree(d_where);
  free(h);
  free(h_where);
  free(ev);
  free(us);
  return rc;
}
