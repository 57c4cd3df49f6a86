/*
 * dev.cuh: what the CUDA backend's kernels share: the device views (flat, trivially copyable,
 * passed by value), the per-call scratch layout, and small device helpers.
 *
 * The per-item logic (key codec, index probe and entry encoding, page layout, miss set,
 * planning formula) is lib/emc_item.h's, the code the host backend runs and the CPU tests
 * cover; this header only adds what is device-specific: strong relaxed loads and stores in
 * PTX, warp-cooperative forms of the probe and the free-bit search, group copies.
 *
 * Stages (one file each, kernels beside their launchers; EMC_CUDA_PROFILE uses these names):
 *   lookup   lookup.cu   the fused probe-and-copy kernel on the caller's stream
 *   admit    admit.cu    the writer sequence: begin, plan, fill, publish, end
 *   evict    evict.cu    the eviction pass (inside the writer sequence, when needed)
 *   maint    maint.cu    flush, index re-pack steps
 *   train    train.cu    prefetch pins, gradient updates, inserts, dedup (the batch sorted by
 *                        id on the caller's stream, the cache's part in a writer call)
 *   check    check.cu    the white-box walk of every device structure
 *   sync     sync.cu     a shared store: copies refreshed from its update log
 *   cache_cuda.cu        lifecycle, the calls' arguments, the lookup call
 *   streams.cu           writer sections and their order, the per-call scratch pool
 *   report.cu            emc_flush and its reports, stats
 * The writer kernels' CUB primitives (block reduce and scan, the warp bitmap search) live in
 * dev_cub.cuh, which only the files that use them include.
 */
#ifndef EMC_DEV_CUH
#define EMC_DEV_CUH

#include <cuda_runtime.h>
#include <stdint.h>


extern "C" {
#include "internal.h"
#include "emc_cuda.h"
}

typedef unsigned long long ull;

#define EMC_NONE32 0xffffffffu
#define EMC_WB_CELLS 65536u           /* write-back cells (power of two): see wb_begin */
#define EMC_INLINE_TABLES 64u         /* offsets passed in kernel parameters up to this many */
#define EMC_REPACK_STEP 4096u         /* buckets re-packed per writer call (urgent: all) */
#define EMC_REPACK_LONG 8192u         /* longest cluster the re-pack takes (buckets) */
#define EMC_HIST 4096u                /* age histogram buckets (EMC__AGE_CLAMP / 8 calls) */
#define EMC_RECLAIM_RETRY 64u         /* ticks before a fruitless reclaim is tried again */

/* ---------------------------------------------------------------- device state */
/* Per-table constants (device array, read-only after create). */
typedef struct dtab {
  unsigned char *base;          /* device alias of the store's rows (mapped host memory) */
  const uint64_t *map_ids;      /* hashed: device alias of the store's id map */
  const uint64_t *map_rowp1;
  const uint64_t *row_ids;      /* hashed: row -> id */
  uint64_t map_cap;
  uint32_t *map_claim;          /* hashed: device bitmap of the map's used slots (the device
                                   claims slots for new ids here, then publishes them in the
                                   store's map in host memory) */
  emc__table_code code;         /* the table's key code */
  emc__page_layout L;           /* its page layout */
  uint32_t row_bytes, stride, kind;
  uint32_t dtype, dim;          /* emc_dtype (0 f32, 1 f16), elements per row */
  uint32_t full_bytes;          /* row and optimizer state: what moves to and from the store */
  uint32_t state_off, state;    /* the state's offset in a row slot; emc_row_state */
  uint32_t pad_;
} dtab;

/* Per-table writer state (device array). */
typedef struct tstate {
  ull rows_cached;              /* rows of the table resident now */
  uint32_t cur_page;            /* the page new slots come from after the partial pages */
  uint32_t pl_start, pl_end, pl_cursor; /* the table's pages with free slots in plist */
  uint32_t pl_count, pl_fill;   /* pass scratch: partial pages counted / placed */
  uint32_t need;                /* this writer call: rows asked for */
  uint32_t allow;               /* ... and granted */
  uint32_t g_first, g_n;        /* ... its grants in the call's grant array */
  uint32_t fresh;               /* training call: the batch's new hashed ids (store rows) */
  ull store_count;              /* hashed: rows the store holds (the device adds new ids; the
                                   host's count follows at emc_flush) */
  ull new_rank;                 /* training call: store rows handed out so far */
} tstate;

/* Global device state and counters. */
typedef struct dglob {
  ull hits, misses, absent, admissions, admit_skipped, evictions, writebacks, passes, retries,
      unified, inserts;
  ull bytes_in_use, pages_held, dirty_rows, host_entries, ix_live, ix_tomb;
  ull bad_count, bad_pos, bad_id, bad_table;
  ull need, cut_need, cut_taken;      /* pass state */
  ull repack_at, repack_left, repacks;/* re-pack sweep */
  uint32_t clock;                     /* one tick per writer call; lookups stamp with it */
  uint32_t meta_seq;                  /* writers' meta counter (lib/item/index.h, "index") */
  uint32_t repack_epoch;              /* odd while a re-pack step runs (the index's epoch) */
  uint32_t aged_at;                   /* clock of the last stamp aging */
  uint32_t free_top;                  /* free page stack */
  uint32_t pass_active, aging, cut, n_new_pages, n_grants;
  uint32_t collect, reclaim;          /* the call collects pages' free slots, takes pages back
                                         (evict.cu) */
  uint32_t page_short;                /* a plan found no page for a table (evict.cu, reclaim) */
  uint32_t rc_failed_at;              /* clock + 1 of a reclaim that found no page to take */
  ull rc_failed_passes;               /* ... and the passes run then */
  ull stranded;                       /* slot bytes granted since the last collection and not
                                         published (the id was cached meanwhile: admit.cu) */
  /* prefetch pins (train.cu) */
  uint32_t pin_next;                  /* the ring list the next prefetch releases and refills */
  ull pinned_bytes, pinned_rows;      /* entries with a pin count > 0, their slot bytes */
  ull pf_new_n;                       /* keys the running prefetch pinned (its list's length) */
  ull prefetched, pin_shortfall, grad_rows;
  ull batch_bytes;                    /* apply: the batch's distinct rows' slot bytes */
  /* training calls refused on the device (reported by emc_flush; the call changed nothing) */
  ull call_errs;                      /* refused calls since create */
  uint32_t err_code, err_table;       /* the first since the last flush: emc_status, table */
  uint32_t err_why, pad2_;            /* ... its reason (TR_WHY_*) */
  /* writer sections are ordered by events (streams.cu): one that begins while another is
   * open is counted, never waited for */
  uint32_t writer_in;                 /* a section is open (k_wr_begin .. k_wr_end) */
  uint32_t pf_open;                   /* a prefetch released its ring list (k_pf_release) and
                                         its section's k_wr_end has not yet closed the list */
  uint32_t pages_inited, pad3_;       /* k_page_init ran for this section's new pages (else
                                         k_wr_end initializes them) */
  ull overlaps;                       /* sections that began while another was open */
  ull err_a, err_b;                   /* ... and its figures (position / id, counts) */
} dglob;

/* Everything a kernel needs about the cache, by value. */
typedef struct dview {
  emc__index_view ix;           /* keys, lm, stamps, epoch (&g->repack_epoch) */
  unsigned char *arena;
  uint64_t page_bytes;
  uint32_t n_pages, max_slots, n_tables, key_bits;
  uint64_t hash_seed, high, low, unified_max;
  const dtab *tabs;
  tstate *ts;
  dglob *g;
  uint32_t *free_pages;         /* n_pages: free page stack */
  uint32_t *plist;              /* n_pages: pages with free slots, grouped by table */
  uint32_t *new_pages;          /* n_pages: pages this call took from the stack */
  uint32_t *page_young;         /* n_pages: a reclaim's youngest age per page, then its marks */
  ull *hist;                    /* EMC_HIST */
  uint32_t *wb_cells;           /* EMC_WB_CELLS seqlocks of store-row writes (wb_begin) */
  ull *bad_mirror;              /* mapped host words: [0] a lookup saw a bad dense id,
                                   [1] refused training calls, [2] pin shortfall (rows) */
  uint64_t *ring_keys;          /* prefetch pins: n_lists lists of ring_cap keys */
  uint32_t *ring_n;             /* n_lists lengths */
  uint32_t n_lists, ring_cap;   /* prefetch_depth + 1; keys a list holds */
  const uint32_t *stripes;      /* a shared store: device alias of the segment's row versions
                                   (host writers of any process); NULL for a private store */
} dview;

/* ---------------------------------------------------------------- per-call scratch
 * One scratch slot serves one call at a time (a lookup and the writer call after it). */
typedef struct dmiss {
  uint64_t id;                  /* the row's id */
  uint32_t pos;                 /* its first position in the batch (staging row) */
  uint32_t wb;                  /* the key's write-back cell when the staged copy was read
                                   (EMC_NONE32: the source is the call's own rows, always
                                   current; EMC_FROM_STORE: no copy, read the store row) */
} dmiss;
#define EMC_FROM_STORE 0xfffffffeu

/* Modes of a writer call's admissions. */
enum {
  EMC_MODE_LOOKUP = 0,   /* a lookup's misses: clean, from its staging */
  EMC_MODE_UPDATE = 1,   /* insert / apply_gradients: dirty full rows from the call's staging,
                            written through to the store when they get no slot */
  EMC_MODE_PREFETCH = 2  /* prefetch: clean, from the store, pinned while the budget lasts */
};

typedef struct dgrant {
  uint32_t page, count, table, rank;  /* ranks [rank, rank + count) of table's misses -> page */
} dgrant;

typedef struct dcall {
  uint32_t *epoch;              /* device word: the miss-set epoch of the slot's current call
                                   (never 0; the writer call after it moves it on) */
  uint32_t n_tables;
  uint32_t mode;                /* EMC_MODE_*: how admission takes the call's misses */
  uint64_t n;                   /* positions the scratch holds at most */
  uint64_t *offsets;            /* n_tables + 1 */
  uint64_t *outoff;             /* n_tables: byte offset of table t's rows in out / staging */
  uint32_t *need;               /* n_tables: misses recorded per table (ranks) */
  uint64_t *missset;            /* set_mask + 1 words */
  uint64_t set_mask;
  dmiss *misses;                /* n: table t's misses at offsets[t] + rank */
  const unsigned char *src;     /* admission source rows, packed like out: staging or rows */
  unsigned char *staging;       /* lookup: first occurrences of misses, packed like out */
  dgrant *grants;               /* n + 2 * n_tables */
  uint32_t *slot_of;            /* n: the slot handle a miss was given (EMC_NONE32: none) */
  uint64_t *srows;              /* update calls: the store row of a run's position */
  /* training calls (train.cu): the batch sorted by id within each table */
  uint32_t *status;             /* 0, or the emc_status that refused the call on the device */
  uint64_t *errinfo;            /* 3: why << 32 | table, and two figures, of that refusal */
  uint64_t *skeys, *skeys_out;  /* n: ids, then sorted */
  uint32_t *svals, *svals_out;  /* n: positions, then in sorted order (ascending in a run) */
  uint32_t *head;               /* n: 1 where a run of equal ids starts; then (dedup) 1 at a
                                   run's first position */
  uint32_t *runidx;             /* n: exclusive scan of head: the run a sorted index starts
                                   (at a run's start; inside a run one more: run_of(), train.cu) */
  uint32_t *run_start;          /* n + 1: sorted index where each run starts */
  uint32_t *n_runs;             /* 1 */
  uint64_t *inoff;              /* n_tables: where table t's positions start in the caller's
                                   rows (insert, bytes) or gradients (apply, floats) */
  void *cub_tmp;                /* CUB's temporary storage */
  size_t cub_bytes;
  /* a lookup over a shared store: store rows a host writer kept changing (the device never
   * waits for the host): their count, positions (slot_of) and store rows (srows); the host
   * reads them again (cuda/sync.cu) */
  uint32_t *torn_n;
} dcall;

/* ---------------------------------------------------------------- allocations
 * Every device, pinned and registered allocation of the backend, behind lib/alloc.c's
 * failure-injection hook (the test suite makes any one of them fail as when memory runs out). */
static inline cudaError_t emc__cu_malloc(void **p, size_t bytes) {
  if (emc__inject_fail("cudaMalloc", bytes)) return cudaErrorMemoryAllocation;
  return cudaMalloc(p, bytes);
}
static inline cudaError_t emc__cu_malloc_async(void **p, size_t bytes, cudaStream_t st) {
  if (emc__inject_fail("cudaMallocAsync", bytes)) return cudaErrorMemoryAllocation;
  return cudaMallocAsync(p, bytes, st);
}
static inline cudaError_t emc__cu_host_alloc(void **p, size_t bytes, unsigned flags) {
  if (emc__inject_fail("cudaHostAlloc", bytes)) return cudaErrorMemoryAllocation;
  return cudaHostAlloc(p, bytes, flags);
}
static inline cudaError_t emc__cu_host_register(void *p, size_t bytes, unsigned flags) {
  if (emc__inject_fail("cudaHostRegister", bytes)) return cudaErrorMemoryAllocation;
  return cudaHostRegister(p, bytes, flags);
}

/* ---------------------------------------------------------------- launches
 * Every launch of cuda/ goes through EMC_LAUNCH: cudaLaunchKernelEx, the runtime's C++ form
 * (valid CUDA under nvcc, and what the CPU model of the device, cuda/sim/, runs), returning the
 * launch's own error rather than a stale one left by the application. Under the model the
 * kernel's name goes with it, for its reports and its sm_90 resource checks. The test suite
 * can make any one launch fail (emc__inject_launch).
 * EMC_LAUNCH_OR_RETURN returns a failed launch's error from the enclosing launcher. */
template <typename... P, typename... A>
static inline cudaError_t emc__launch(const char *name, void (*kernel)(P...), unsigned grid, unsigned block,
                                      cudaStream_t st, A &&...args) {
  cudaLaunchConfig_t cfg = {};
  if (emc__inject_launch(name)) return cudaErrorLaunchOutOfResources; /* tests: lib/internal.h */
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = st;
#if defined(EMCSIM)
  emcsim_set_kernel_name(name);
#endif
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<A &&>(args)...);
}
/* The launch of a graph the backend made (a slot's writer call), behind the same hook. */
static inline cudaError_t emc__graph_launch(cudaGraphExec_t g, cudaStream_t st) {
  if (emc__inject_launch("cudaGraphLaunch")) return cudaErrorLaunchOutOfResources;
  return cudaGraphLaunch(g, st);
}
#define EMC_LAUNCH(kernel, grid, block, stream, ...) \
  emc__launch(#kernel, kernel, (unsigned)(grid), (unsigned)(block), (stream), __VA_ARGS__)
#define EMC_LAUNCH_OR_RETURN(kernel, grid, block, stream, ...)                  \
  do {                                                                          \
    cudaError_t emc_launch_e_ = EMC_LAUNCH(kernel, grid, block, stream, __VA_ARGS__); \
    if (emc_launch_e_ != cudaSuccess) return emc_launch_e_;                     \
  } while (0)

/* ---------------------------------------------------------------- strong accesses
 * Relaxed loads and stores at GPU scope: morally strong, so the fences of the reader protocol
 * order them (lib/item/index.h, "index"); they bypass L1, where no other SM's writes show.
 * Under the CPU model (EMCSIM, cuda/sim/) the same accesses are C++ atomics of the same
 * strength, which the model also checks (the address must be reachable by the device) and
 * counts (its forward-progress watchdog): the one switch between the PTX and the model. */
#if defined(EMCSIM)
__device__ __forceinline__ uint32_t ld_rlx(const uint32_t *p) { return emcsim::ld(p, __ATOMIC_RELAXED, "ld.relaxed.gpu.u32"); }
__device__ __forceinline__ uint64_t ld_rlx(const uint64_t *p) { return emcsim::ld(p, __ATOMIC_RELAXED, "ld.relaxed.gpu.u64"); }
__device__ __forceinline__ uint16_t ld_rlx(const uint16_t *p) { return emcsim::ld(p, __ATOMIC_RELAXED, "ld.relaxed.gpu.u16"); }
__device__ __forceinline__ void st_rlx(uint16_t *p, uint16_t v) { emcsim::st(p, v, __ATOMIC_RELAXED, "st.relaxed.gpu.u16"); }
__device__ __forceinline__ void st_rlx(uint32_t *p, uint32_t v) { emcsim::st(p, v, __ATOMIC_RELAXED, "st.relaxed.gpu.u32"); }
__device__ __forceinline__ void st_rlx(uint64_t *p, uint64_t v) { emcsim::st(p, v, __ATOMIC_RELAXED, "st.relaxed.gpu.u64"); }
__device__ __forceinline__ void fence_acq_rel() { emcsim::fence_op(__ATOMIC_ACQ_REL); }
__device__ __forceinline__ uint32_t ld_sys(const uint32_t *p) { return emcsim::ld(p, __ATOMIC_RELAXED, "ld.relaxed.sys.u32"); }
__device__ __forceinline__ void fence_sys() { emcsim::fence_op(__ATOMIC_ACQ_REL); }
/* a vector load is several single-copy-atomic words, on the device as here */
template <unsigned N> __device__ __forceinline__ void ld_words(uint32_t *w, const void *p, const char *what) {
  emcsim::mem_op(p, 4 * N, 0, what);
  for (unsigned i = 0; i < N; i++) w[i] = __atomic_load_n((const uint32_t *)p + i, __ATOMIC_RELAXED);
}
__device__ __forceinline__ void ld_unit(uint4 *v, const void *p) {
  uint32_t w[4];
  ld_words<4>(w, p, "ld.relaxed.gpu.v4.u32");
  v->x = w[0], v->y = w[1], v->z = w[2], v->w = w[3];
}
__device__ __forceinline__ void ld_unit(uint2 *v, const void *p) {
  uint32_t w[2];
  ld_words<2>(w, p, "ld.relaxed.gpu.v2.u32");
  v->x = w[0], v->y = w[1];
}
__device__ __forceinline__ void ld_unit(uint32_t *v, const void *p) { *v = emcsim::ld((const uint32_t *)p, __ATOMIC_RELAXED, "ld.relaxed.gpu.u32"); }
__device__ __forceinline__ void ld_unit(uint16_t *v, const void *p) { *v = emcsim::ld((const uint16_t *)p, __ATOMIC_RELAXED, "ld.relaxed.gpu.u16"); }
#else
__device__ __forceinline__ uint32_t ld_rlx(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_rlx(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint16_t ld_rlx(const uint16_t *p) {
  uint16_t v;
  asm volatile("ld.relaxed.gpu.global.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_rlx(uint16_t *p, uint16_t v) {
  asm volatile("st.relaxed.gpu.global.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ void st_rlx(uint32_t *p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_rlx(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
/* The reader protocol's fences: the only fences of the lookup kernel (two, amortised over a
 * tile of rows). */
__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
/* A shared store's row versions are written by host threads of any process: read at system
 * scope, and the tile's fences taken at system scope (lookup.cu, shared stores only). */
__device__ __forceinline__ uint32_t ld_sys(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

/* Row units: strong relaxed loads of 16, 8, 4 or 2 bytes (rows may be rewritten under the
 * copy; a validated copy is one the writer did not touch). */
__device__ __forceinline__ void ld_unit(uint4 *v, const void *p) {
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v->x), "=r"(v->y), "=r"(v->z), "=r"(v->w) : "l"(p) : "memory");
}
__device__ __forceinline__ void ld_unit(uint2 *v, const void *p) {
  asm volatile("ld.relaxed.gpu.global.v2.u32 {%0,%1}, [%2];" : "=r"(v->x), "=r"(v->y) : "l"(p) : "memory");
}
__device__ __forceinline__ void ld_unit(uint32_t *v, const void *p) {
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(*v) : "l"(p) : "memory");
}
__device__ __forceinline__ void ld_unit(uint16_t *v, const void *p) {
  asm volatile("ld.relaxed.gpu.global.u16 %0, [%1];" : "=h"(*v) : "l"(p) : "memory");
}
#endif /* EMCSIM */
template <typename U> __device__ __forceinline__ U zero_unit() { U z; memset(&z, 0, sizeof z); return z; }

/* ---------------------------------------------------------------- views */
__device__ __forceinline__ unsigned char *page_of(const dview &V, uint64_t p) {
  return V.arena + p * V.page_bytes;
}
__device__ __forceinline__ emc__page_hdr *hdr_of(const dview &V, uint64_t p) {
  return (emc__page_hdr *)page_of(V, p);
}
/* Key of index slot i (strong relaxed load at the view's key width). */
__device__ __forceinline__ uint64_t ix_key(const emc__index_view &ix, uint64_t i) {
  return ix.key_bits == 32 ? ld_rlx((const uint32_t *)ix.keys + i) : ld_rlx((const uint64_t *)ix.keys + i);
}
__device__ __forceinline__ uint32_t wb_cell(uint64_t key) {
  return (uint32_t)(emc__fmix64(key ^ 0x5bd1e995ull) & (EMC_WB_CELLS - 1u));
}

/* Write-back cells: every write of a store row by the device (a write-back, a write-through,
 * a flush) holds its key's cell, a seqlock shared by the keys that hash to it, for the time it
 * writes the row: bits 0..15 count the writers inside, bits 16..30 how many have finished (bit
 * 31 stays clear, so no cell value is EMC_NONE32 or EMC_FROM_STORE). A lookup that copies a
 * store row reads the cell before (its first fence) and after (its second): the copy is whole
 * iff no writer was inside and none finished between. A reader thus only ever waits for a
 * write that a running thread has begun and finishes without waiting (the forward-progress
 * rule, lib/item/index.h "index"); before, readers waited for an epoch that a later kernel of
 * the writer call published. Admission re-reads from the store a staged copy whose cell moved.
 * The writing thread (lane 0 of a writing warp) calls wb_begin, writes, then wb_end. */
__device__ __forceinline__ void wb_begin(const dview &V, uint64_t key) {
  atomicAdd(&V.wb_cells[wb_cell(key)], 1u);
  __threadfence(); /* the cell before the row */
}
__device__ __forceinline__ void wb_end(const dview &V, uint64_t key) {
  uint32_t *c = &V.wb_cells[wb_cell(key)], old = ld_rlx(c), seen;
  __threadfence_system(); /* the row (in mapped host memory) before the cell */
  for (;;) {
    uint32_t next = ((old + 0x10000u) & 0x7fff0000u) | ((old & 0xffffu) - 1u);
    if ((seen = atomicCAS(c, old, next)) == old) break;
    old = seen;
  }
}
/* A cell no writer is inside. */
__device__ __forceinline__ int wb_quiet(uint32_t cell) { return (cell & 0xffffu) == 0; }
/* Table of position i: the largest t with offsets[t] <= i (also over per-table tile starts). */
template <typename T>
__device__ __forceinline__ uint32_t table_of(const T *offsets, uint32_t n_tables, uint64_t i) {
  uint32_t lo = 0, hi = n_tables;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (offsets[mid] <= i) lo = mid; else hi = mid;
  }
  return lo;
}

#define GRID_STRIDE(i, n) \
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (uint64_t)gridDim.x * blockDim.x)

static inline unsigned grid_for(uint64_t n, unsigned threads) {
  uint64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return (unsigned)(b > 4096u ? 4096u : b); /* grid-stride loops do the rest */
}


/* Cooperative probe: the 8 lanes of group g = lane / 8 probe `key` (the group's key; all
 * lanes of a group pass the same one) together, one bucket per step: each lane loads one key
 * of the bucket (one coalesced access of the bucket), one ballot gives the match and EMPTY
 * masks of every group, emc__probe_step judges them. Returns the key's index slot, or -1, in
 * every lane of the group. All 32 lanes call it (inactive groups pass active = 0). */
__device__ __forceinline__ int64_t coop_probe(const emc__index_view &ix, uint64_t key, int active) {
  const unsigned lane = threadIdx.x & 31u, gi = lane >> 3, s = lane & 7u;
  const uint64_t empty = emc__key_empty(ix.key_bits);
  uint64_t b = active ? emc__home_bucket(key, ix.n_buckets) : 0;
  int64_t found = -1;
  for (uint64_t steps = 0;; steps++) {
    uint64_t v = active ? ix_key(ix, b * EMC__BUCKET + s) : empty;
    unsigned mm = __ballot_sync(0xffffffffu, active && v == key);
    unsigned me = __ballot_sync(0xffffffffu, active && v == empty);
    if (active) {
      int64_t p = -1;
      int st = emc__probe_step((mm >> (gi * 8)) & 0xffu, (me >> (gi * 8)) & 0xffu, b, &p);
      if (st == EMC__PROBE_FOUND) found = p;
      if (st != EMC__PROBE_NEXT || steps + 1 >= ix.n_buckets) active = 0;
      if (++b == ix.n_buckets) b = 0;
    }
    if (!__any_sync(0xffffffffu, active)) break;
  }
  return found;
}

/* Copy `bytes` (a multiple of 2) with 32 lanes, the widest units the alignment allows. */
__device__ __forceinline__ void warp_copy(unsigned char *dst, const unsigned char *src, uint32_t bytes,
                                          unsigned lane) {
  uintptr_t a = (uintptr_t)dst | (uintptr_t)src | bytes;
  uint32_t i;
  if ((a & 15u) == 0) {
    for (i = lane; i < bytes / 16; i += 32) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
  } else if ((a & 7u) == 0) {
    for (i = lane; i < bytes / 8; i += 32) ((uint2 *)dst)[i] = ((const uint2 *)src)[i];
  } else if ((a & 3u) == 0) {
    for (i = lane; i < bytes / 4; i += 32) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
  } else {
    for (i = lane; i < bytes / 2; i += 32) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i];
  }
}

/* Arguments of writer-call kernels. */
typedef struct wr_args {
  dview V;
  dcall C;
} wr_args;

/* ---------------------------------------------------------------- launchers (one per stage)
 * Every launcher enqueues on `st` and returns cudaGetLastError(). */
typedef struct emc__cuda_cache emc__cuda_cache;
/* The cache's device view and re-pack marks buffer (cache_cuda.cu). */
const dview *emc__cuda_view(const emc__cuda_cache *k);
uint8_t *emc__cuda_repack_marks(const emc__cuda_cache *k);
/* The re-pack block's scratch: EMC_REPACK_LONG buckets of entries (keys, entry words, stamps);
 * each cluster re-packed takes a span of it (maint.cu, k_repack). */
uint64_t *emc__cuda_repack_scratch(const emc__cuda_cache *k);
#define EMC_REPACK_SCRATCH_BYTES ((unsigned long long)EMC_REPACK_LONG * EMC__BUCKET * 3 * 8)
/* Host copy of table t's constants. */
const dtab *emc__cuda_tab_host(const emc__cuda_cache *k, uint32_t t);
/* Writer calls: begin (tick the clock, reset the call's state), then optional work that
 * records misses (training calls, train.cuh), then demand (decide on the device whether an
 * eviction pass runs), then evict, admit, repack (which decides for itself), end. */
cudaError_t emc__cu_wr_begin(const emc__cuda_cache *k, const dcall *C, cudaStream_t st);
cudaError_t emc__cu_wr_demand(const emc__cuda_cache *k, const dcall *C, cudaStream_t st);
cudaError_t emc__cu_wr_end(const emc__cuda_cache *k, const dcall *C, cudaStream_t st);
/* The lookup kernel. tiles_d / pinned: the slot's device array and pinned host buffer for
 * the per-table arrays when there are more than EMC_INLINE_TABLES tables. */
cudaError_t emc__cu_lookup(const emc__cuda_cache *k, const dcall *C, uint32_t *tiles_d,
                           uint64_t *pinned, const uint64_t *ids, const uint64_t *offs_h,
                           unsigned char *out, uint8_t *where, uint64_t n, int sm_count,
                           cudaStream_t st);
cudaError_t emc__cu_admit(const emc__cuda_cache *k, const dcall *C, cudaStream_t st);
cudaError_t emc__cu_evict(const emc__cuda_cache *k, cudaStream_t st);
/* pre: before a call's admissions (emc__cu_admit, after its plan): only an urgent sweep, when
 * the entries the plan allows could leave EMPTY slots short (an index without any EMPTY slot
 * has no cluster start, and no re-pack could mend it); else after them, the sweep's step. */
cudaError_t emc__cu_repack(const emc__cuda_cache *k, int pre, cudaStream_t st);

cudaError_t emc__cu_flush(const emc__cuda_cache *k, cudaStream_t st);
cudaError_t emc__cu_init(const emc__cuda_cache *k, cudaStream_t st);

#endif /* EMC_DEV_CUH */
