/*
 * train_common.h: what the parts of test_train (and test_gpu_train) share: the reference
 * model of a store under training, its batches, and the calls as the backend under test takes
 * them (host memory, or device buffers on a stream with EMCT_GPU), with the checks against the
 * reference. train_common.c holds them; it is compiled into each executable with that
 * executable's EMCT_GPU, like the parts:
 *   test_train.c       training against the reference (and, GPU, the pipelined run), dedup,
 *                      the suite's main
 *   train_pins.c       prefetch pins: windows, expiry, the pin budget
 *   train_input.c      bad input, the state reader, store files of version 2
 *   train_threads.c    a trainer beside readers
 */
#ifndef EMC_TESTS_TRAIN_COMMON_H
#define EMC_TESTS_TRAIN_COMMON_H

#include <check.h>

#include "common.h"

#ifdef EMCT_GPU
#include <cuda_runtime_api.h>

#include "emc_cuda.h"
#include "gpu/cuda_ok.h"
#define BACKEND EMC_BACKEND_CUDA
#else
#define BACKEND EMC_BACKEND_HOST
#endif

#define MAX_T 4u

/* ------------------------------------------------------------------ the model
 * A store of up to MAX_T tables and a plain copy of every row (and accumulator) it should
 * hold: model_apply does a training step's arithmetic on the copy, written out plainly. */
typedef struct mtab {
  emc_table_kind kind;
  uint64_t rows;     /* dense rows / hashed capacity */
  uint64_t universe; /* ranks drawn (dense: rows) */
  uint64_t present;  /* hashed: ranks written at start */
  uint32_t dim;
  emc_dtype dtype;
} mtab;

typedef struct model {
  uint32_t n;
  mtab tb[MAX_T];
  uint32_t rb[MAX_T];        /* row bytes */
  emc_row_state state;
  emc_store *store;
  unsigned char *ref[MAX_T]; /* universe * rb: rank's row now */
  float *acc[MAX_T];         /* universe: the accumulator (Adagrad) */
  uint8_t *present[MAX_T];   /* universe: the store has the id (hashed) */
  emct_zipf z[MAX_T];
  emct_perm perm[MAX_T];
  emct_rng rng;
} model;

/* The tables of the training runs (and of the bad-input case): dense and hashed, f32 and f16,
 * hashed ids absent from the store too. */
extern const mtab TRAIN_TABLES[4];
/* The id of rank r of table t (a dense table's row; a hashed table's mixed rank). */
uint64_t id_of(const model *m, uint32_t t, uint64_t r);
void model_init(model *m, const mtab *tb, uint32_t n, emc_row_state state, uint64_t seed);
void model_free(model *m);
/* Slot bytes of every row of the universes. */
uint64_t model_bytes(const model *m);

/* A batch: ids grouped by table, their ranks, the gradients (f32, packed like out). */
typedef struct batch {
  uint64_t *ids, *ranks, offsets[MAX_T + 1], n;
  uint8_t *was_present; /* the id had a store row when the batch was prefetched */
  float *grads;
  size_t out_bytes, grad_floats;
} batch;


void batch_alloc(batch *b, const model *m, uint64_t per_table);
void batch_free(batch *b);
void batch_mark_present(batch *b, const model *m);
/* A Zipf batch, counts[t] ids of table t (batch_make: per_table of each); see train_common.c. */
void batch_make_counts(batch *b, model *m, const uint64_t *counts);
void batch_make(batch *b, model *m, uint64_t per_table);
/* The reference step: the same arithmetic, written out plainly on the plain copy. */
void model_apply(model *m, const batch *b, const emc_optimizer *o);

/* ------------------------------------------------------------------ calls
 * The host build calls with host memory; the GPU build copies ids, offsets and gradients to
 * device buffers and calls on a stream (then waits, to check the results). */
typedef struct io {
#ifdef EMCT_GPU
  cudaStream_t st;
  void *ids, *offs, *out, *where, *grads, *uids, *uoffs, *inv;
#endif
  int unused;
} io;

void io_init(io *x, size_t n, size_t out_bytes, size_t grad_floats);
void io_free(io *x);
emc_status do_prefetch(io *x, emc_cache *c, const batch *b, uint32_t n_tables);
emc_status do_lookup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, void *out, uint8_t *where);
emc_status do_apply(io *x, emc_cache *c, const batch *b, uint32_t n_tables, const emc_optimizer *o);
emc_status do_dedup(io *x, emc_cache *c, const batch *b, uint32_t n_tables, uint64_t *uids, uint64_t *uoffs, uint32_t *inv);

/* A cache of the backend under test over m's store. */
emc_cache *make_cache(model *m, size_t capacity, uint32_t depth);
emc_stats stats_of(const emc_cache *c);
/* t2 * capacity in bytes, as the cache rounds it. */
uint64_t low_bytes_of(const emc_cache *c, size_t capacity);
/* The white-box walk of the cache's structures (emc__cache_check / emc__cuda_check). */
void check_structure(emc_cache *c);
void check_rows(const model *m, const batch *b, const unsigned char *out, const char *what, int step);
void check_store(const model *m, double tol, const char *what);

/* ------------------------------------------------------------------ the parts' tests */
void train_pins_tests(TCase *pins);
void train_input_tests(TCase *api);
void train_threads_tests(TCase *api);

#endif
