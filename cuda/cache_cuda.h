/*
 * cache_cuda.h: the CUDA backend's host-side state, shared by cache_cuda.cu (lifecycle, streams,
 * scratch pool, the API calls) and check.cu (white-box checks, profiling).
 */
#ifndef EMC_CACHE_CUDA_H
#define EMC_CACHE_CUDA_H

#include <pthread.h>

#include "dev.cuh"

#define EMC_SLOTS_MAX 8u   /* scratch slots: calls in flight at once before callers wait */
#define EMC_PTR_CACHE 8u   /* pointers whose memory space is remembered */

typedef struct reg_range {
  uintptr_t lo, hi;
} reg_range;

/* One per-call scratch slot: a lookup (or insert) and the writer call after it use it; it is
 * free again once the writer call's `done` event has passed. */
typedef struct emc__scratch {
  dcall C;                 /* device pointers into mem (C.n: positions it holds) */
  void *mem;               /* one device allocation */
  size_t cap_bytes;        /* row bytes of out / staging it holds */
  uint32_t *tiles_d;       /* per-table tiles (tables past EMC_INLINE_TABLES) */
  uint64_t *stage_ids;     /* host-memory ids staged to the device */
  unsigned char *stage_out;/* host-memory out / rows staged */
  uint8_t *stage_where;    /* host-memory where staged */
  uint64_t *srows_d;       /* insert: store row of every position */
  uint32_t *upos_d;        /* insert: the distinct positions */
  uint64_t *pinned;        /* pinned host buffer: offsets, outoff, tiles */
  cudaEvent_t looked;      /* the lookup kernel is done */
  cudaEvent_t done;        /* the writer call is done: the slot may be reused */
  cudaGraphExec_t graph;   /* the writer call after a lookup, as one graph (NULL: launches) */
  int used;                /* has run a call (its events were recorded) */
  int captured;            /* baked into a caller's graph: never reused */
} emc__scratch;

/* Per-stage device time, EMC_CUDA_PROFILE=1: the lookup kernel on the caller's stream, and the
 * writer call after it (admit, evict and maint stages together) on the writer stream. */
enum { PROF_LOOKUP = 0, PROF_WRITER, PROF_N };

struct emc__cuda_cache {
  dview V;                  /* device views, passed to every kernel */
  dtab *tabs_host;          /* host copy of the per-table constants */
  uint32_t n_tables;
  int device;
  int sm_count;
  cudaStream_t writer;      /* the cache's writer stream: writer calls one after another */
  cudaStream_t priv;        /* private non-blocking stream: setup, stats, checks */
  pthread_mutex_t lock;     /* scratch pool, enqueue order of writer calls */
  emc__scratch slots[EMC_SLOTS_MAX];
  uint32_t n_slots, next_wait;
  emc__scratch *captured;   /* slots owned by callers' captured graphs */
  uint32_t n_captured;
  ull *mirror_host;         /* mapped: a lookup saw a dense id out of range */
  uint64_t *offs_host;      /* pinned: device offsets copied back */
  reg_range *regs;
  uint32_t n_regs;
  uint8_t *repack_marks;    /* EMC_REPACK_STEP bytes */
  size_t index_bytes;       /* keys + lm + stamps */
  size_t arena_bytes;       /* pages */
  size_t meta_bytes;        /* index + per-page metadata (headers, bitmaps, owners) */
  uint64_t max_rows;        /* live pool entries the index is sized for */
  uint64_t n_lookups, n_inserts; /* host counters (atomic) */
  struct {
    const void *p;
    int dev;
  } pcache[EMC_PTR_CACHE];
  uint32_t pc_next;
  int prof;                 /* EMC_CUDA_PROFILE=1 at create */
  cudaEvent_t pev[2 * PROF_N];
  double pacc[PROF_N];
  uint64_t pcalls;
  int ok;                   /* every device resource was made */
};

/* Record the end of a stage for the profile (no-op unless profiling). */
void emc__cuda_prof_mark(emc__cuda_cache *k, int stage, int end, cudaStream_t st);
/* Profiling: fold the last call's stage times in (waits for them). */
void emc__cuda_prof_collect(emc__cuda_cache *k);
/* Print the profile (destroy). */
void emc__cuda_prof_print(emc__cuda_cache *k);

emc_status emc__cuda_fail(cudaError_t e, const char *what);

#endif /* EMC_CACHE_CUDA_H */
