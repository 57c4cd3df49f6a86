/*
 * cache_cuda.h: the CUDA backend's host-side state, shared by cache_cuda.cu (lifecycle, streams,
 * scratch pool, the API calls) and check.cu (white-box checks, profiling).
 */
#ifndef EMC_CACHE_CUDA_H
#define EMC_CACHE_CUDA_H

#include <pthread.h>

#include "dev.cuh"

#define EMC_SLOTS_MAX 16u  /* scratch slots: calls in flight at once before callers wait */
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
  float *stage_grads;      /* apply: host-memory gradients staged */
  float *gm;               /* apply: merged gradients */
  size_t cap_gbytes;       /* bytes of stage_grads and gm */
  uint64_t *pinned;        /* pinned host buffer: offsets, outoff, tiles / inoff; then the
                              status words a blocking training call reads back */
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
  uint64_t errs_seen;       /* refused training calls already reported by emc_flush */
  uint64_t short_seen;      /* pin shortfall already reported */
  uint32_t **map_claim;     /* per table: the device bitmap of a hashed map's used slots */
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

/* ---------------------------------------------------------------- shared by the calls
 * (cache_cuda.cu; the training calls live in train_calls.cu) */
/* Lock the cache's host state (k->lock) and select its device. */
emc_status emc__cuda_enter(emc__cuda_cache *k);
/* Can a kernel use p (device, managed or mapped pinned host memory)? Caller holds k->lock. */
int emc__cuda_device_accessible(emc__cuda_cache *k, const void *p);
/* The batch's offsets in host memory (device offsets are copied back: one wait), validated,
 * and the NULL checks (buf_name NULL: no buffer checked). Caller holds k->lock. */
emc_status emc__cuda_batch_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                const void *buf, const char *buf_name, cudaStream_t st,
                                const uint64_t **offs, uint64_t *n, size_t *bytes);
/* A scratch slot for n positions, `bytes` of row staging and `gbytes` of gradient scratch,
 * ready in st's order (see cache_cuda.cu). Caller holds k->lock. */
emc_status emc__cuda_acquire_slot(emc__cuda_cache *k, uint64_t n, size_t bytes, size_t gbytes,
                                  cudaStream_t st, int captured, emc__scratch **out);
/* The writer call's stages after lock and before end, for a call's misses: demand, evict,
 * admit, repack. */
cudaError_t emc__cuda_writer_body(emc__cuda_cache *k, const dcall *C, cudaStream_t st);
/* emc_flush's detail for a refused training call (reason codes of train.cu). */
void emc__cuda_refusal_text(char *buf, size_t cap, uint32_t code, uint32_t why, uint32_t table,
                            unsigned long long a, unsigned long long b);

#endif /* EMC_CACHE_CUDA_H */
