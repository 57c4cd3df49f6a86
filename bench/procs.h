/*
 * procs.h: emc-bench --procs P (issue 20): P processes of one machine, each with its own host
 * cache, look up Zipf batches over one shared store (emc_store_create_shared / _attach), and
 * then the same over P private stores (one per process, the deployment without sharing), in
 * one run. Reported per mode: the machine's lookups/s and each process's resident memory
 * (/proc/self/status: RssAnon, its private memory; RssShmem, the shared pages it touched), and
 * the machine's memory: the processes' private memory plus the shared segment once.
 * Public API only (embcache.h) and the trace code (trace.h).
 */
#ifndef EMC_BENCH_PROCS_H
#define EMC_BENCH_PROCS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embcache.h"

typedef struct emcb_procs_cfg {
  unsigned procs;          /* processes per mode (>= 1) */
  const uint64_t *rows;    /* n_tables dense tables */
  uint32_t n_tables;
  uint32_t dim;
  emc_dtype dtype;
  double alpha;            /* Zipf exponent of every table's ids */
  size_t batch;            /* samples per batch (one id per table per sample) */
  size_t batches, warmup;  /* measured / warm-up batches per process */
  double cache_frac;       /* each cache: this fraction of the store's bytes at slot stride */
  double t1, t2;
  uint32_t key_bits, admission;
  uint64_t seed;
} emcb_procs_cfg;

/* Run both modes; one JSON line per mode on `out` (and on `out2` when not NULL), a summary
 * on stderr. Returns 0, 1 (a process read a wrong row), or 2 (an embcache or system error). */
int emcb_procs_run(const emcb_procs_cfg *cfg, FILE *out, FILE *out2);

#endif
