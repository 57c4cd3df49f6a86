/*
 * train.h: the training-step figure of the benches (issue 10, "Bench" proof): a trainer's loop
 * over the bench's trace, through embcache's training calls, against the same steps without a
 * cache. Public API only (embcache.h).
 *
 *   step     one step of the pipeline the header's "training" section describes:
 *              emc_prefetch(batch i+1)      (on prefetch_stream; EMC_ECAPACITY counted: the
 *                                            rows that fit are pinned, the call succeeded in part)
 *              emc_lookup_ex(batch i, where) (on stream)
 *              backward                     (a stand-in for forward/backward: f32 gradients
 *                                            packed like the lookup output, made from it)
 *              emc_apply_gradients(batch i)  (on stream, SGD)
 *            fork / join hooks order the two streams without the host (the GPU bench records
 *            an event and makes the other stream wait for it); the host passes NULL for both.
 *            emcb_train_step is the driver both emc-bench and emc-bench-gpu run.
 *
 *   run      emc-bench --train (host memory): two copies of the bench's store, filled alike:
 *            `cached` is trained through a cache (the same configuration as the bench's, with
 *            cfg.prefetch_depth), `plain` by the baseline, in the same run, one after the other:
 *              baseline step = emc_store_read of every table's segment (the plain gather),
 *              the same backward, then the same SGD arithmetic the cache applies (gradients of
 *              a row's positions summed in position order, w = fmaf(-lr, g, w), f16 rounded to
 *              nearest even) on each distinct row of the batch, written back with
 *              emc_store_write (the store's own write path: a store with no cache attached).
 *            Both runs take the same warm-up steps (untimed) and the same measured steps; a
 *            step's wall time counts its calls and the backward, not the bookkeeping of the
 *            bench (where[] counting). Afterwards the cache is destroyed (writing its dirty
 *            rows back) and the two stores are compared row by row: the header promises that
 *            cached training is bitwise-equal to updating the store directly, and the backward
 *            reads the looked-up rows, so a wrong lookup or update shows up as a difference.
 *            The two stores stay in lockstep across configurations (every configuration trains
 *            both with the same steps), so each comparison covers all steps so far.
 *            What is fair: both sides run in host memory over the same rows, the same batches
 *            and the same arithmetic; the baseline deduplicates a segment with a direct-indexed
 *            table over the dense table's rows (the cheapest dedup there is, 8 bytes a row),
 *            reads every row once (the gather; the update reuses the gathered value) and
 *            writes each distinct row once. On the host backend the cache's rows live in the
 *            same memory as the store's, so speedup < 1 measures what the cache's bookkeeping
 *            costs; the cache pays off where the store is far (the GPU: the store is in host
 *            memory across the bus), which emc-bench-gpu --train measures.
 *
 * Functions return 0 or an emc_status (EMC_EINVAL, EMC_ENOMEM, or the status of a failed emc_*
 * call, whose detail is in emc_last_error_detail()).
 */
#ifndef EMC_BENCH_TRAIN_H
#define EMC_BENCH_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embcache.h"

/* ------------------------------------------------------------------ the step */
#define EMCB_TRAIN_NO_NEXT ((size_t)-1) /* a step with nothing to prefetch */

typedef struct emcb_train_io {
  emc_cache *cache;
  const uint64_t *offsets;                        /* host, n_tables + 1 (every batch alike) */
  const uint64_t *(*ids)(void *ctx, size_t batch); /* a batch's ids (memory the cache takes) */
  void *out;                                      /* one batch of looked-up rows */
  void *grads;                                    /* one batch of f32 gradients */
  /* the stand-in for forward/backward: batch's gradients from its looked-up rows */
  void (*backward)(void *ctx, size_t batch, const void *out, void *grads);
  const emc_optimizer *opt;
  void *stream;          /* lookup, backward, apply (NULL on the host backend) */
  void *prefetch_stream; /* prefetch (NULL on the host backend) */
  void (*fork)(void *ctx); /* before the prefetch: prefetch_stream waits for stream (or NULL) */
  void (*join)(void *ctx); /* after the apply: stream waits for the prefetch (or NULL) */
  int time_phases;       /* wall time per phase into the tally (host: the calls block) */
  void *ctx;
} emcb_train_io;

typedef struct emcb_train_tally {
  uint64_t steps;                    /* steps run */
  uint64_t prefetches;               /* emc_prefetch calls */
  uint64_t prefetch_capacity_errors; /* of which returned EMC_ECAPACITY (pinned what fit) */
  uint64_t apply_refused;            /* emc_apply_gradients calls refused with EMC_ECAPACITY */
  int last_apply_refused;            /* the last step's apply was refused */
  double prefetch_s, lookup_s, backward_s, apply_s; /* with time_phases */
} emcb_train_tally;

/* One step on batch `batch`, prefetching batch `next` first (EMCB_TRAIN_NO_NEXT: none).
 * where: the lookup's emc_where per position (NULL: not asked for). An EMC_ECAPACITY of the
 * prefetch is counted and the step goes on; an EMC_ECAPACITY of the apply (the batch's distinct
 * rows exceed what the cache ever holds: nothing changed) is counted in apply_refused and sets
 * last_apply_refused. Any other failure is returned (the step stops there). */
int emcb_train_step(const emcb_train_io *io, size_t batch, size_t next, uint8_t *where,
                    emcb_train_tally *t);

/* The pipeline's prologue: fork, prefetch `batch` (counted as in a step), join. */
int emcb_train_prefetch(const emcb_train_io *io, size_t batch, emcb_train_tally *t);

/* ------------------------------------------------------------------ the host figure */
typedef struct emcb_train {
  uint32_t n_tables;
  uint64_t *rows;      /* n_tables */
  uint64_t *base;      /* n_tables: table t's rows start at seen[base[t]], slot[base[t]] */
  uint64_t total_rows;
  uint32_t dim;
  emc_dtype dtype;
  size_t row_bytes;
  uint64_t seed;
  emc_store *cached;   /* trained through a cache */
  emc_store *plain;    /* trained by the baseline */
  uint32_t *seen;      /* total_rows: the baseline's dedup generation per row */
  uint32_t *slot;      /* total_rows: the row's distinct index in the segment */
  uint32_t gen;
  uint64_t steps_done; /* steps applied to both stores so far */
} emcb_train;

/* Two dense stores of the given tables (dim, dtype), filled with emc_uniform_row(seed, ...)
 * like the bench's, and the baseline's scratch. */
int emcb_train_init(emcb_train *tr, const uint64_t *rows, uint32_t n_tables, uint32_t dim,
                    emc_dtype dtype, uint64_t seed);
void emcb_train_free(emcb_train *tr);

typedef struct emcb_train_args {
  const emc_cache_config *cfg; /* the bench's cache configuration (backend, capacity, t1/t2, ...) */
  uint32_t prefetch_depth;     /* overrides cfg->prefetch_depth */
  float lr;                    /* SGD learning rate */
  const uint64_t *(*ids)(void *ctx, size_t batch); /* host ids of trace batch `batch` */
  void *ctx;
  const uint64_t *offsets;     /* host, n_tables + 1 */
  size_t batch;                /* samples per batch (reported) */
  size_t n_batches;            /* batches in the trace; the last step prefetches batch 0 */
  size_t warmup, steps;        /* warm-up steps on batches [0, warmup), measured on the next */
} emcb_train_args;

typedef struct emcb_train_result {
  size_t steps, warmup, batch;
  uint32_t prefetch_depth;
  double lr;
  /* the cache: measured steps */
  double seconds, steps_per_s, samples_per_s;
  double prefetch_s, lookup_s, backward_s, apply_s;
  uint64_t positions, present, hits; /* looked-up positions, not EMC_WHERE_ABSENT, EMC_WHERE_CACHE */
  double hit_ratio_after_prefetch;   /* hits / present */
  /* the cache: every call, warm-up included (the prefetch of a measured step's batch is made
   * by the step before it) */
  uint64_t prefetches, prefetch_capacity_errors, apply_refused, pin_shortfall;
  /* the cache: stats deltas over the measured steps, and gauges after them */
  uint64_t prefetched, gradient_rows, evictions, admissions, pinned_rows, pinned_bytes;
  /* the baseline: measured steps */
  double baseline_seconds, baseline_steps_per_s, baseline_gather_s, baseline_backward_s,
      baseline_update_s;
  double speedup; /* steps_per_s / baseline_steps_per_s */
  /* the two stores after the run */
  uint64_t rows_compared, rows_differ;
  int stores_equal;
} emcb_train_result;

/* The figure: warm-up and measured steps through a cache on tr->cached, then the same steps
 * by the baseline on tr->plain, then the stores compared. */
int emcb_train_run(emcb_train *tr, const emcb_train_args *a, emcb_train_result *r);

/* r as a JSON object (no newline) into buf; the length, or -1 when it does not fit. */
int emcb_train_json(const emcb_train_result *r, char *buf, size_t len);

/* One human-readable line about r to f, each line prefixed with `who` ("emc-bench"). */
void emcb_train_print(FILE *f, const char *who, const emcb_train_result *r);

/* ------------------------------------------------------------------ the GPU figure */
/* emc-bench-gpu --train (train_gpu.c, linked into emc-bench-gpu only): the step above on a CUDA
 * cache over the criteo-kaggle store at `scale`, ids, out, grads and where in device memory,
 * offsets on the host; step time from CUDA events, host synchronisations counted, one step
 * captured into a CUDA graph and replayed. Prints one JSON line to stdout (and to out_file
 * when not NULL) and a human summary to stderr. Returns the bench's exit status: 0, 1 (a
 * check failed), 2 (an emc_* or CUDA call failed). The device must have answered already. */
typedef struct emcb_train_gpu_opts {
  double scale;            /* criteo-kaggle rows = max(1, round(card * scale)) */
  size_t batch;            /* samples per batch (one id per table each) */
  size_t warmup, steps;    /* warm-up and measured steps */
  uint32_t prefetch_depth; /* cfg.prefetch_depth */
  double cache_frac;       /* capacity = cache_frac * the store's rows at the slot stride */
  unsigned graph_reps;     /* replays of the captured step */
} emcb_train_gpu_opts;

int emcb_train_gpu_main(const emcb_train_gpu_opts *o, FILE *out_file);

#endif /* EMC_BENCH_TRAIN_H */
