/*
 * options.h: emc-bench's command line (options.c parses it; emc_bench.c runs it).
 */
#ifndef EMCB_OPTIONS_H
#define EMCB_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embcache.h"
#include "trace.h"

#define MAX_SWEEP 64

typedef struct bench_opts {
  const char *preset;       /* "criteo-kaggle" or "uniform" */
  double scale;             /* criteo-kaggle row scale */
  uint32_t tables;          /* uniform preset: tables */
  uint64_t rows;            /* uniform preset: rows per table */
  uint32_t dim;             /* elements per row */
  emc_dtype dtype;          /* element type */
  emct_dist dist;           /* id distribution */
  double alphas[MAX_SWEEP]; /* Zipf exponents to run */
  size_t n_alphas;
  double fracs[MAX_SWEEP];  /* cache capacities to run, fractions of the store at slot stride */
  size_t n_fracs;
  size_t batch;             /* samples per batch */
  size_t batches;           /* measured batches */
  size_t warmup;            /* warm-up batches */
  double t1, t2;            /* eviction thresholds */
  emc_backend backend;      /* requested backend */
  uint32_t key_bits;        /* global key width */
  uint64_t seed;            /* store fill and trace seed */
  int all_hit;              /* size and warm the cache so every measured lookup hits */
  int lru_check;            /* run the exact LRU simulator too */
  int per_table;            /* also run the per-table-cache baseline (-1: criteo-kaggle only) */
  int train;                /* --train: training steps through a cache vs without (train.c) */
  uint32_t prefetch_depth;  /* --train: cfg.prefetch_depth */
  const char *out;          /* also append JSON lines here; NULL for none */
  double batch_sizes[MAX_SWEEP]; /* --sweep-batch: samples per batch to run (default: batch) */
  size_t n_batch_sizes;
  int mrc;                  /* --mrc: LRU curve and OPT of every trace (sizing.c) */
  size_t mrc_points;        /* curve lines per trace */
  size_t mrc_opt_points;    /* curve lines that carry OPT too, besides the configured sizes */
  const char *plot_dir;     /* --plot DIR: PNGs of the run's lines; NULL for none */
  int prewarm;              /* --prewarm: cold vs hot-set-warmed caches (warmup.c) */
  size_t prewarm_sample;    /* batches counted for the hot set */
  size_t prewarm_batches;   /* batches after them, measured on both caches */
  uint32_t admission;       /* --admission: cfg.admission of every cache (emc_admission) */
  unsigned threads;         /* --threads: callers looking up each measured batch */
  unsigned procs;           /* --procs: processes over one shared store vs private stores */
} bench_opts;

/* The usage text, to f. */
void emcb_usage(FILE *f);
/* Parse argv into *o (defaults first): 0, 1 after --help (printed), -1 on a bad command line
 * (a message on stderr). */
int emcb_parse_args(int argc, char **argv, bench_opts *o);

#endif /* EMCB_OPTIONS_H */
