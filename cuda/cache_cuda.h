/*
 * cache_cuda.h: the CUDA backend's host-side state, shared by cache_cuda.cu (lifecycle, the
 * lookup and the calls' arguments), streams.cu (writer sections, the scratch pool), report.cu
 * (flush, stats), train_calls.cu, sync.cu (a shared store) and check.cu (white-box checks,
 * profiling).
 */
#ifndef EMC_CACHE_CUDA_H
#define EMC_CACHE_CUDA_H

#include <pthread.h>

#include "dev.cuh"

#define EMC_SLOTS_MAX 16u  /* scratch slots: calls in flight at once before callers wait */
#define EMC_PTR_CACHE 8u   /* device pointers whose memory space is remembered */

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
  int captured;            /* baked into a caller's graph: never reused; freed once that
                              graph's user object is released (cap_ticket) */
  struct cap_ticket *ticket; /* captured: shared with the graph's user object */
  int broken;              /* a call failed half-enqueued and its `done` could not be
                              recorded: never reused (its work may still be in flight) */
} emc__scratch;

/* A captured slot's link with the caller's graph: the graph's user object sets `released`
 * once the graph (and its last launch) is gone; the cache then frees the slot. The last of the
 * two to let go frees the ticket (refs). */
struct cap_ticket {
  int refs;     /* atomic: the graph, the cache */
  int released; /* atomic */
};

/* The order of a capture's writer sections: the event after its last one (streams.cu,
 * "Streams and ordering"). */
#define EMC_CAPTURES 8u
typedef struct cap_chain {
  unsigned long long id; /* capture id (cudaStreamGetCaptureInfo); 0: unused */
  cudaEvent_t last;
} cap_chain;

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
  emc__scratch **captured;  /* slots owned by callers' captured graphs (heap, each) */
  uint32_t n_captured;
  cudaEvent_t wr_tail;      /* after the last writer section on the writer stream */
  cudaEvent_t cap_tail;     /* external record after each captured writer section */
  cap_chain caps[EMC_CAPTURES]; /* captures under way: their last writer section */
  uint32_t cap_next;
  uint64_t n_cap_sections;  /* writer sections ever captured (0: nothing to wait for) */
  ull *mirror_host;         /* mapped: a lookup saw a dense id out of range */
  uint64_t *offs_host;      /* pinned: device offsets copied back */
  reg_range *regs;
  uint32_t n_regs;
  uint8_t *repack_marks;    /* EMC_REPACK_STEP bytes */
  uint64_t *repack_scratch; /* EMC_REPACK_SCRATCH_BYTES (maint.cu) */
  size_t index_bytes;       /* keys + lm + stamps */
  size_t arena_bytes;       /* pages */
  size_t meta_bytes;        /* index + per-page metadata (headers, bitmaps, owners) */
  uint64_t max_rows;        /* live pool entries the index is sized for */
  uint64_t n_lookups, n_inserts; /* host counters (atomic) */
  uint64_t n_host_syncs;    /* times a call of this cache waited on the host for the device
                               (atomic; stats.host_syncs) */
  uint64_t errs_seen;       /* refused training calls already reported by emc_flush */
  uint64_t short_seen;      /* pin shortfall already reported */
  uint64_t overlaps_seen;   /* dglob.overlaps already reported */
  uint32_t **map_claim;     /* per table: the device bitmap of a hashed map's used slots */
  const void *pcache[EMC_PTR_CACHE]; /* device memory of this device (emc__cuda_space) */
  uint32_t pc_next;
  int caller_device;        /* the caller's current device, restored by emc__cuda_leave */
  int prof;                 /* EMC_CUDA_PROFILE=1 at create */
  cudaEvent_t pev[2 * PROF_N];
  double pacc[PROF_N];
  uint64_t pcalls;
  /* a shared store (cuda/sync.cu) */
  int shared;               /* the store is shared: the log, torn rows, writes on the host */
  int shared_reg;           /* counted in the store's cuda_regs */
  uint64_t log_seen;        /* the log's entries applied (atomic: read without k->lock) */
  void *sync_ents;          /* mapped: the entries a refresh applies (log_cap) */
  uint64_t n_grad_rows_host;/* rows stepped on the host (stats.grad_rows) */
  int ok;                   /* every device resource was made */
  int unclosed;             /* a section's k_wr_end failed to enqueue (section_end) */
};

/* A wait of a call on the host for the device, counted in stats.host_syncs. */
static inline cudaError_t emc__cuda_wait_stream(emc__cuda_cache *k, cudaStream_t st) {
  __atomic_fetch_add(&k->n_host_syncs, 1, __ATOMIC_RELAXED);
  return cudaStreamSynchronize(st);
}

/* Record the end of a stage for the profile (no-op unless profiling). */
void emc__cuda_prof_mark(emc__cuda_cache *k, int stage, int end, cudaStream_t st);
/* Profiling: fold the last call's stage times in (waits for them). */
void emc__cuda_prof_collect(emc__cuda_cache *k);
/* Print the profile (destroy). */
void emc__cuda_prof_print(emc__cuda_cache *k);

emc_status emc__cuda_fail(cudaError_t e, const char *what);
/* Return the call's failure (emc__cuda_fail) from a function returning emc_status. */
#define CU(call)                                              \
  do {                                                        \
    cudaError_t e_ = (call);                                  \
    if (e_ != cudaSuccess) return emc__cuda_fail(e_, #call);  \
  } while (0)

/* ---------------------------------------------------------------- shared by the calls
 * (cache_cuda.cu, streams.cu; the training calls live in train_calls.cu) */
/* Lock the cache's host state (k->lock) and select its device (the caller's current device is
 * kept and restored by emc__cuda_leave, which unlocks: every call leaves it as it found it). */
emc_status emc__cuda_enter(emc__cuda_cache *k);
void emc__cuda_leave(emc__cuda_cache *k);
/* Where a buffer lives, for this cache (caller holds k->lock): */
enum {
  EMC_SPACE_PAGEABLE = 0, /* host memory the device cannot reach: staged */
  EMC_SPACE_MAPPED,       /* pinned or registered host memory: the host reads it, kernels too */
  EMC_SPACE_DEVICE,       /* device (or managed) memory of the cache's device */
  EMC_SPACE_OTHER         /* memory of another device: refused (EMC_EINVAL) */
};
int emc__cuda_space(emc__cuda_cache *k, const void *p);
/* Can a kernel use p (EMC_SPACE_DEVICE or EMC_SPACE_MAPPED)? Caller holds k->lock. */
int emc__cuda_device_accessible(emc__cuda_cache *k, const void *p);
/* EMC_EINVAL when p (named `name`) is memory of another device than the cache's. */
emc_status emc__cuda_check_space(emc__cuda_cache *k, const void *p, const char *name);
/* EMC_EINVAL when p (named `name`) is memory a kernel reads or writes where it is (device or
 * pinned) and is not `align`-byte aligned: a real device faults on a misaligned load (and a
 * fault ends the context), while the CPU model of the device does not check alignment.
 * Caller holds k->lock. */
emc_status emc__cuda_check_align(emc__cuda_cache *k, const void *p, unsigned align, const char *name);
/* The batch's offsets in host memory (device offsets are copied back: one wait), validated,
 * and the NULL and alignment checks of ids (8 bytes) and buf (buf_name NULL: no buffer
 * checked; buf_align: its element's bytes, 2 for rows, 4 for f32 gradients). Caller holds
 * k->lock. */
emc_status emc__cuda_batch_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                const void *buf, const char *buf_name, unsigned buf_align,
                                cudaStream_t st,
                                const uint64_t **offs, uint64_t *n, size_t *bytes);
/* A scratch slot for n positions, `bytes` of row staging and `gbytes` of gradient scratch,
 * ready in st's order (see streams.cu). Caller holds k->lock. */
emc_status emc__cuda_acquire_slot(emc__cuda_cache *k, uint64_t n, size_t bytes, size_t gbytes,
                                  cudaStream_t st, int captured, emc__scratch **out);
/* A call failed after part of it may be enqueued on st (and on the writer stream): the slot
 * serves again only after that work, with its buffers made afresh (defect 5: it used to be
 * reused, even freed, while the work was in flight). Retired for good if even that cannot be
 * enqueued. Caller holds k->lock. */
void emc__cuda_slot_failed(emc__cuda_cache *k, emc__scratch *S, cudaStream_t st);
/* A writer section (begin ... end of a writer call) on ws: the caller's stream when capturing,
 * else k->writer. open orders it after every writer section enqueued or launched before it;
 * close lets later ones order after it. Caller holds k->lock. */
cudaError_t emc__cuda_section_open(emc__cuda_cache *k, cudaStream_t ws, int capturing);
cudaError_t emc__cuda_section_close(emc__cuda_cache *k, cudaStream_t ws, int capturing);
/* The section's k_wr_end; on failure the next section_open closes the section first. */
cudaError_t emc__cuda_section_end(emc__cuda_cache *k, const dcall *C, cudaStream_t ws);
/* After a call failed on a stream being captured: invalidate the capture. */
void emc__cuda_capture_abandon(cudaStream_t st);
/* Captured slots whose graphs are gone, freed; the number still held (tests). Caller holds
 * k->lock. */
uint32_t emc__cuda_reap_captured(emc__cuda_cache *k);
/* A lookup's writer call on st (begin, the body, end: the graph a slot captures). */
cudaError_t emc__cuda_writer_call(emc__cuda_cache *k, const dcall *C, cudaStream_t st);
/* A slot's device and host buffers, events and graph freed (destroy; streams.cu). */
void emc__cuda_free_slot(emc__scratch *S);
/* The writer call's stages after begin and before end, for a call's misses: demand, evict,
 * admit, repack. */
cudaError_t emc__cuda_writer_body(emc__cuda_cache *k, const dcall *C, cudaStream_t st);
/* emc_flush's detail for a refused training call (reason codes of train.cu). */
void emc__cuda_refusal_text(char *buf, size_t cap, uint32_t code, uint32_t why, uint32_t table,
                            unsigned long long a, unsigned long long b);

/* ---------------------------------------------------------------- a shared store (sync.cu) */
/* Register the segment (once per store in a process) and set the cache up for its log. */
emc_status emc__cuda_shared_register(emc__cuda_cache *k, emc_store *s);
void emc__cuda_shared_unregister(emc__cuda_cache *k, emc_store *s);
/* The store's lock and k->lock held: refresh the copies the log's new entries name. */
emc_status emc__cuda_shared_sync_locked(emc_cache *c);
/* After a lookup kernel over a shared store (waited for): the rows it left to the host, read
 * again into out_d and the staging copy. Caller holds k->lock. */
emc_status emc__cuda_shared_fix(emc_cache *c, emc__scratch *S, const uint64_t *offs,
                                unsigned char *out_d, cudaStream_t st);

#endif /* EMC_CACHE_CUDA_H */
