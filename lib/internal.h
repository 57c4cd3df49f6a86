/*
 * internal.h: host-side internals shared by the files of lib/ (and white-box tests, fuzzers).
 * Not installed. Names: emc__ (double underscore) for non-static internal symbols.
 */
#ifndef EMC_INTERNAL_H
#define EMC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "embcache.h"
#include "emc_item.h"
#include "emc_size.h"

#if defined(__GNUC__)
#define EMC_INTERNAL __attribute__((visibility("hidden")))
#define EMC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EMC_INTERNAL
#define EMC_PRINTF(a, b)
#endif

/* ------------------------------------------------------------------ errors
 * emc__fail records "<func>: <message>" (plus file:line in debug builds) as this thread's
 * last error detail and returns st, so a failure site reads
 *     return EMC_FAIL(EMC_EINVAL, "ids is NULL with n = %zu", n);
 * EMC_TRY forwards a failed status unchanged (the callee already recorded the detail). */
EMC_INTERNAL emc_status emc__fail(emc_status st, const char *func, const char *file, int line,
                                  const char *fmt, ...) EMC_PRINTF(5, 6);
#define EMC_FAIL(st, ...) emc__fail((st), __func__, __FILE__, __LINE__, __VA_ARGS__)
#define EMC_TRY(expr)                      \
  do {                                     \
    emc_status emc_try_st_ = (expr);       \
    if (emc_try_st_ != EMC_OK) return emc_try_st_; \
  } while (0)

/* ------------------------------------------------------------------ allocation (alloc.c)
 * Every allocation of the library goes through these, so the test suite can make any one of
 * them fail (emc__inject_*). Small structures: emc__malloc / emc__calloc, released with free().
 * emc__calloc also fails (ENOMEM) when n * size overflows. */
EMC_INTERNAL void *emc__malloc(size_t bytes);
EMC_INTERNAL void *emc__calloc(size_t n, size_t size);
/* emc__malloc of n elements of `size` bytes (uninitialised); NULL when n * size overflows. */
EMC_INTERNAL void *emc__mallocn(uint64_t n, size_t size);
/* fdopen and XXH64_createState, which allocate: NULL with errno = ENOMEM when injected. */
EMC_INTERNAL FILE *emc__fdopen(int fd, const char *mode);
struct XXH64_state_s;
EMC_INTERNAL struct XXH64_state_s *emc__xxh64_create(void);

/* Failure injection, for tests (not part of the public contract; process-wide).
 * emc__inject_arm: from now on every failure point (each allocation above, each fdopen, each
 * XXH64 state) asking for >= min_bytes bytes counts itself, 0, 1, 2, ...; point number
 * fail_at fails as if memory ran out (and every later one too when sticky; fail_at < 0: none
 * fails, points are only counted). emc__inject_disarm stops it and returns the number of
 * points counted. emc__inject_failed: failures injected since arming; emc__inject_last: the
 * kind ("malloc", "calloc", "mallocx", "fdopen", "XXH64_createState") and size of the last. */
EMC_INTERNAL void emc__inject_arm(long long fail_at, size_t min_bytes, int sticky);
EMC_INTERNAL long long emc__inject_disarm(void);
EMC_INTERNAL long long emc__inject_count(void);
EMC_INTERNAL long long emc__inject_failed(void);
EMC_INTERNAL const char *emc__inject_last(size_t *bytes);
/* 1 when this failure point must fail (errno is then ENOMEM). Disarmed: one relaxed load. */
EMC_INTERNAL int emc__inject_fail(const char *what, size_t bytes);
/* Kernel and graph launches of the CUDA backend (EMC_LAUNCH, emc__graph_launch: cuda/dev.cuh), armed apart from the points
 * above: from emc__inject_launches_arm on, every launch counts itself, 0, 1, 2, ...; launch
 * number fail_at fails (< 0: none fails), as a launch the runtime refuses (the launch returns
 * cudaErrorLaunchOutOfResources, nothing is enqueued; the error is not sticky). It resets
 * emc__inject_failed and emc__inject_last, which then name the kernel (size 0).
 * emc__inject_launches_disarm returns the launches counted. emc__inject_launch: 1 when this
 * launch must fail; disarmed, one relaxed load. */
EMC_INTERNAL void emc__inject_launches_arm(long long fail_at);
EMC_INTERNAL long long emc__inject_launches_disarm(void);
EMC_INTERNAL int emc__inject_launch(const char *kernel);

/* Big host allocations: jemalloc's mallocx/dallocx on the library's own arena where the
 * process has libjemalloc loaded (so they never mix with the application's malloc), else mmap /
 * posix_memalign (lib/alloc.c; emc_host_allocator() says which). Returns NULL on failure. */
EMC_INTERNAL void *emc__alloc(size_t bytes, size_t align, int zero);
EMC_INTERNAL void emc__free(void *p, size_t bytes);
/* A private jemalloc arena (0 when none could be made: the default arena is used). */
EMC_INTERNAL unsigned emc__arena_create(void);
EMC_INTERNAL void emc__arena_destroy(unsigned arena);
/* emc__alloc in `arena` (0: default), bypassing the thread cache. */
EMC_INTERNAL void *emc__alloc_in(unsigned arena, size_t bytes, size_t align, int zero);
/* lib/alloc.c, the provider behind the four calls above: bytes >= 1, align a power of two
 * >= 16. emc__sys_free accepts NULL. */
EMC_INTERNAL unsigned emc__sys_arena_create(void);
EMC_INTERNAL void emc__sys_arena_destroy(unsigned arena);
EMC_INTERNAL void *emc__sys_alloc(unsigned arena, size_t bytes, size_t align, int zero);
EMC_INTERNAL void emc__sys_free(void *p);

/* ------------------------------------------------------------------ store */
typedef struct emc__table {
  char *name;           /* owned, NUL-terminated */
  emc_table_kind kind;  /* dense / hashed */
  emc_dtype dtype;      /* element type */
  uint32_t dim;         /* elements per row */
  uint32_t row_bytes;   /* dim * dtype size: what lookups return */
  uint32_t state;       /* emc_row_state */
  uint32_t state_off;   /* byte offset of the optimizer state in a row slot (4-aligned) */
  uint32_t full_bytes;  /* row and state: what moves between store and cache */
  uint32_t stride;      /* emc__row_stride(full_bytes) */
  uint64_t rows;        /* dense: rows; hashed: capacity */
  unsigned char *base;  /* rows * stride bytes, page-aligned (lib/store/store.c, table_block) */
  size_t base_bytes;    /* bytes allocated at base */
  /* hashed tables only: flat open-addressing map id -> row, plus row -> id */
  uint64_t map_cap;     /* power of two >= 2 * rows */
  uint64_t *map_ids;    /* map_cap ids */
  uint64_t *map_rowp1;  /* map_cap row + 1, 0 = empty slot (acquire/release) */
  uint64_t *row_ids;    /* rows: id of each used row (append-only) */
  uint64_t *count;      /* used rows (atomic: readers load it acquire): &count_own, or the
                           table's word in a shared segment (lib/store/shared.c) */
  uint64_t count_own;
} emc__table;

struct emc_store {
  uint32_t n_tables;
  emc__table *tables;            /* n_tables (process memory; a shared store's point into seg) */
  uint32_t *stripes;             /* EMC__STORE_STRIPES row versions */
  pthread_mutex_t lock;          /* serializes a private store's writers (and `attached`) */
  pthread_mutex_t *wlock;        /* the writers' lock: &lock, or the segment's robust one */
  int attached;                  /* a cache is attached (under lock) */
  unsigned arena;                /* jemalloc arena of the row memory, 0 = default */
  struct emc__seg_hdr *seg;      /* a shared store's mapped segment (lib/store/shared.c) */
  size_t seg_bytes;
  unsigned char *seg_undo;       /* its undo slot, and the slot's bytes: checked copies, never */
  uint32_t seg_undo_cap;         /* re-read from the segment */
  struct emc__seg_log_ent *seg_log;  /* its update log's ring, of seg_log_cap entries */
  uint64_t seg_log_cap;
  struct emc__grp *seg_grp;      /* its training group's block (lib/group.c) */
  char *seg_name;                /* the name it was created or attached by (owned) */
  struct emc__seg_table *seg_recs;   /* its table records (each table's last_seq) */
  uint32_t caches;               /* a shared store: this process's caches over it (under lock) */
  uint32_t cuda_regs;            /* ... its CUDA caches, which registered the segment once
                                    (cuda/sync.cu; under lock) */
};

/* The writers' lock of a store (a private store's mutex, or the shared segment's robust
 * process-shared one: taking it after its holder died repairs what that writer left,
 * shared.c). EMC_ECORRUPT (lock not taken) when a shared segment's lock is unusable. */
EMC_INTERNAL emc_status emc__store_lock(emc_store *s);
EMC_INTERNAL void emc__store_unlock(emc_store *s);
/* shared.c: the old bytes of a row about to be written, kept in the segment until the write
 * ends (a writer that dies mid-row leaves the old row, not a torn one); a reader that waited
 * long on an odd version: if the lock's holder died, repair now. */
EMC_INTERNAL void emc__seg_undo_begin(emc_store *s, uint32_t table, uint64_t row, uint32_t bytes);
EMC_INTERNAL void emc__seg_undo_end(emc_store *s);
EMC_INTERNAL void emc__seg_reader_stuck(const emc_store *s);
/* The lock held and no writer running: a version still odd was written over; make it even
 * (readers, the lock holder among them, would wait for it for ever). */
EMC_INTERNAL void emc__seg_even_stripes(emc_store *s);
EMC_INTERNAL void emc__seg_unmap(emc_store *s);
/* Where a segment's writers' lock lies (the fuzz target re-initialises it: a process that
 * writes over the lock's own bytes can make others wait, which no check can prevent). */
EMC_INTERNAL void emc__seg_lock_span(size_t *off, size_t *len);
/* Make *m a segment's writers' lock: process-shared and robust. 0, or an errno value. */
EMC_INTERNAL int emc__seg_lock_init(pthread_mutex_t *m);

/* The update log of a shared store (lib/store/seg_log.c; a private store has none: its
 * sequence is always 0). Writers, the store's lock held: announce what they are about to
 * write (one table's ids; a batch packed by offsets; a whole table), change the rows, then
 * publish. Readers: emc__log_seq (acquire) is the last published entry; emc__log_entry reads
 * entry q (0 when its slot was rewritten: the log wrapped past q); emc__log_table_seq is >=
 * the seq of every entry of the table. */
EMC_INTERNAL uint64_t emc__log_seq(const emc_store *s);
EMC_INTERNAL uint64_t emc__log_cap(const emc_store *s);
EMC_INTERNAL uint64_t emc__log_table_seq(const emc_store *s, uint32_t table);
EMC_INTERNAL void emc__log_ids(emc_store *s, uint32_t table, const uint64_t *ids, uint64_t n);
EMC_INTERNAL void emc__log_batch(emc_store *s, const uint64_t *ids, const uint64_t *offsets);
EMC_INTERNAL void emc__log_table(emc_store *s, uint32_t table);
EMC_INTERNAL void emc__log_publish(emc_store *s);
/* Before an announcement, its mark; a call refused before any row changed withdraws what it
 * announced since (the lock held throughout), so that no cache drops rows for nothing. */
EMC_INTERNAL uint64_t emc__log_mark(const emc_store *s);
EMC_INTERNAL void emc__log_withdraw(emc_store *s, uint64_t mark);
EMC_INTERNAL int emc__log_entry(const emc_store *s, uint64_t q, uint32_t *table, uint64_t *id);

/* Row address of a dense row or of hashed row index `row`. */
static inline unsigned char *emc__store_row(const emc__table *t, uint64_t row) {
  return t->base + row * (uint64_t)t->stride;
}

/* Hashed tables: row index of id, or -1 when absent. Lock-free. */
EMC_INTERNAL int64_t emc__store_find(const emc__table *t, uint64_t id);
/* Hashed tables: row of id, adding it when absent; -1 when the table is full. A new row
 * holds `init` (row_bytes; NULL: zeros) before the id is published, so a concurrent reader
 * finds either no id or its full first value, never a placeholder zero row.
 * Caller holds the writer lock (store lock or the attached cache's lock). */
EMC_INTERNAL int64_t emc__store_find_or_add(emc_store *s, uint32_t table, uint64_t id,
                                            const void *init);

/* Read a store row with the stripe-version protocol into dst (row_bytes). Never blocks;
 * retries while a writer changes the row. */
EMC_INTERNAL void emc__store_row_read(const emc_store *s, uint32_t table, uint64_t row, void *dst);
/* Write a store row under the stripe version (row_bytes: the optimizer state stays). Caller
 * holds the writer lock. */
EMC_INTERNAL void emc__store_row_write(emc_store *s, uint32_t table, uint64_t row, const void *src);
/* The same for the row and its optimizer state together (full_bytes). */
EMC_INTERNAL void emc__store_full_read(const emc_store *s, uint32_t table, uint64_t row, void *dst);
EMC_INTERNAL void emc__store_full_write(emc_store *s, uint32_t table, uint64_t row, const void *src);
/* Bytes of a row with state words: the row rounded up to 4 bytes, then 4 per state word. */
static inline uint32_t emc__full_bytes(uint32_t row_bytes, uint32_t state) {
  return state == EMC_STATE_NONE ? row_bytes : ((row_bytes + 3u) & ~3u) + 4u;
}

/* Store construction pieces shared by store.c and store_io.c. */
EMC_INTERNAL emc_status emc__table_desc_check(const emc_table_desc *d, uint32_t i);
EMC_INTERNAL emc_status emc__store_shell(uint32_t n_tables, emc_store **out);
EMC_INTERNAL emc_status emc__table_init(emc_store *s, uint32_t i, const emc_table_desc *d);
/* Table i's shape (every field but its memory) and its name, as emc__table_init sets them. */
EMC_INTERNAL emc_status emc__table_shape(emc__table *t, uint32_t i, const emc_table_desc *d,
                                         size_t *map_bytes, size_t *ids_bytes);
EMC_INTERNAL emc_status emc__table_name(emc__table *t, uint32_t i, const char *name);
EMC_INTERNAL void emc__store_free(emc_store *s);
/* Hashed: do `fresh` new ids fit table t (number `table`)? EMC_ERANGE when they do not,
 * EMC_ECORRUPT when its count lies past its rows (a shared segment written over); details
 * name the table. */
EMC_INTERNAL emc_status emc__check_room(const emc__table *t, uint32_t table, uint64_t fresh);
/* Hashed: distinct ids of ids[0..n) absent from t; (uint64_t)-1 if scratch memory fails. */
EMC_INTERNAL uint64_t emc__count_new_ids(const emc__table *t, const uint64_t *ids, size_t n);

/* store_io.c: 1 makes emc_store_save write to a named temporary, as it does where O_TMPFILE is
 * not supported (tests of that path; set before any save runs). */
EMC_INTERNAL extern int emc__save_named_temp;

/* Attach/detach a cache: EMC_EUNSUPPORTED if one is attached already. */
EMC_INTERNAL emc_status emc__store_attach(emc_store *s);
EMC_INTERNAL void emc__store_detach(emc_store *s);

/* EMC_ERANGE (detail names table, position and id) if a dense table's segment of a batch holds
 * an id >= rows; offsets already validated. */
EMC_INTERNAL emc_status emc__check_dense_ids(const emc_store *s, const uint64_t *ids,
                                             const uint64_t *offsets);
/* Validate a batch's offsets against the store; on success *total_ids = offsets[n_tables]
 * and *bytes = packed row bytes. */
EMC_INTERNAL emc_status emc__check_offsets(const emc_store *s, const uint64_t *offsets,
                                           uint64_t *total_ids, size_t *bytes);

/* ------------------------------------------------------------------ key codec */
typedef struct emc__codec {
  uint32_t key_bits;        /* n: 32 or 64 */
  uint32_t n_tables;
  uint64_t hash_seed;       /* XXH3 seed for hashed tables */
  emc__table_code *tables;  /* n_tables codes */
  uint64_t reserved_code;   /* the all-ones code no table gets */
  uint32_t reserved_len;
  int used_huffman;         /* 1: Huffman lengths; 0: Kraft fallback lengths n - bits(T) */
} emc__codec;

/* Build the codec for tables with the given row counts (weights) and kinds.
 * Errors: EMC_EKEYSPACE (detail names the table and the bits it lacks), EMC_EINVAL,
 * EMC_ENOMEM. On success *out owns memory released by emc__codec_free. */
EMC_INTERNAL emc_status emc__codec_build(const uint64_t *rows, const emc_table_kind *kinds,
                                         uint32_t n_tables, uint32_t key_bits, uint64_t hash_seed,
                                         emc__codec *out);
/* The same, naming tables in error details (names may be NULL, or hold NULL entries). */
EMC_INTERNAL emc_status emc__codec_build_named(const uint64_t *rows, const emc_table_kind *kinds,
                                               const char *const *names, uint32_t n_tables,
                                               uint32_t key_bits, uint64_t hash_seed,
                                               emc__codec *out);
EMC_INTERNAL void emc__codec_free(emc__codec *c);
/* Table whose code prefixes key, or -1 for keys under the reserved code. */
EMC_INTERNAL int64_t emc__codec_table_of(const emc__codec *c, uint64_t key);
/* Dense id of a dense-table key (inverse of the bijection). */
EMC_INTERNAL uint64_t emc__codec_dense_id(const emc__codec *c, uint32_t table, uint64_t key);
/* Feature bits a table needs: ceil(log2(rows)), at least 1. */
EMC_INTERNAL uint32_t emc__bits_for_rows(uint64_t rows);


/* ------------------------------------------------------------------ cache */
typedef struct emc__host_cache emc__host_cache;

struct emc_cache {
  emc_store *store;       /* the attached store (not owned) */
  emc_backend backend;    /* resolved backend */
  emc_cache_config cfg;   /* effective configuration (admission: AUTO resolved) */
  int admission_auto;     /* admission was AUTO: inline where the admission thread cannot start */
  emc__codec codec;       /* global key codec */
  emc__host_cache *host;  /* host backend state */
  struct emc__cuda_cache *cuda; /* CUDA backend state */
};

/* Pool and index geometry shared by both backends (lib/pool.c): page size, per-table page
 * layouts (layout[n_tables]), page count for capacity_bytes, the t1/t2 byte thresholds and
 * the index size. EMC_EINVAL when the budget cannot hold one row of the widest table, or
 * needs slot handles past 2^31. */
typedef struct emc__pool_geom {
  uint64_t page_bytes, high_bytes, low_bytes;
  uint32_t n_pages, max_slots, max_stride, min_stride;
  uint64_t max_rows;   /* live pool entries at most: rows of the narrowest table under t1 */
  uint64_t unified;    /* unified-index entries (unified_index_rows; 0 without hashed tables) */
  uint64_t ix_buckets; /* index buckets for max_rows + unified entries */
} emc__pool_geom;
EMC_INTERNAL emc_status emc__pool_geometry(const emc_cache *c, emc__pool_geom *g,
                                           emc__page_layout *layout);

/* Host backend (cache_host.c). Arguments were validated by cache.c; these cannot fail on bad
 * input, only on resources. */
EMC_INTERNAL emc_status emc__host_create(emc_cache *c);
/* The cache's admission thread runs in this process (not: INLINE, or a child of fork()). */
EMC_INTERNAL int emc__admission_threaded(const emc_cache *c);
EMC_INTERNAL void emc__host_destroy(emc_cache *c);
EMC_INTERNAL emc_status emc__host_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                         void *out, uint8_t *where);
EMC_INTERNAL emc_status emc__host_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                         const void *rows);
EMC_INTERNAL emc_status emc__host_flush(emc_cache *c);
/* A host cache over a shared store (sync_host.c): apply the update log (see host_cache.h);
 * around a writing call, take the store's lock, announce the batch (announce: 1) and apply
 * the log (shared_begin; *mark: the log before the announcement), then publish and release
 * (shared_end; `changed` 0 withdraws the announcement back to mark: the call was refused
 * before any row changed). No-ops for private stores. */
EMC_INTERNAL void emc__host_sync(emc_cache *c);
EMC_INTERNAL emc_status emc__host_shared_begin(emc_cache *c, const uint64_t *ids,
                                               const uint64_t *offsets, int announce,
                                               uint64_t *pre, uint64_t *mark);
EMC_INTERNAL void emc__host_shared_end(emc_cache *c, int announced, int changed, uint64_t pre,
                                       uint64_t mark);
/* Whether a writing call that returned st may have changed rows: emc__host_insert,
 * emc__host_apply, emc__store_step_insert and emc__store_step_apply refuse (EMC_ERANGE for a
 * hashed table without room, EMC_ECAPACITY, EMC_ENOMEM, EMC_EINVAL) before anything changes;
 * only EMC_ECORRUPT (a shared segment's id map written over) stops them part way. */
static inline int emc__may_have_written(emc_status st) {
  return st == EMC_OK || st == EMC_ECORRUPT;
}
/* emc_apply_gradients' checks of a host-memory batch (cache.c; emc_group_apply_gradients). */
EMC_INTERNAL emc_status emc__check_apply(const emc_cache *c, const uint64_t *ids,
                                         const uint64_t *offsets, const void *grads,
                                         const emc_optimizer *opt);
EMC_INTERNAL void emc__host_stats(const emc_cache *c, emc_stats *out);
EMC_INTERNAL uint64_t emc__host_table_rows(const emc_cache *c, uint32_t table);
/* Training calls (train_host.c). */
EMC_INTERNAL emc_status emc__host_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                        uint64_t *unique_ids, uint64_t *unique_offsets,
                                        uint32_t *inverse);
EMC_INTERNAL emc_status emc__host_prefetch(emc_cache *c, const uint64_t *ids,
                                           const uint64_t *offsets);
EMC_INTERNAL emc_status emc__host_apply(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                        const float *grads, const emc_optimizer *opt);
/* A group step's batch (lib/group.c): for a CUDA cache over a shared store, host copies of ids,
 * offsets and gradients (after the caller's stream; the caller frees them); else all NULL:
 * the caller's pointers are host memory. */
EMC_INTERNAL emc_status emc__cache_grad_batch(emc_cache *c, const uint64_t *ids,
                                              const uint64_t *offsets, const void *grads,
                                              void *stream, uint64_t **hids, uint64_t **hoffs,
                                              void **hgrads);
/* A cache over a shared store: its copies of rows the update log names, dropped or refreshed
 * (either backend). */
EMC_INTERNAL emc_status emc__cache_sync(emc_cache *c);
/* emc_dedup's work on host memory, for any backend (outputs untouched on failure). */
EMC_INTERNAL emc_status emc__dedup_batch(uint32_t n_tables, const uint64_t *ids,
                                         const uint64_t *offsets, uint64_t *unique_ids,
                                         uint64_t *unique_offsets, uint32_t *inverse);

/* ------------------------------------------------------------------ cache checks
 * White-box checks for tests and fuzzers (not part of the public contract). */
typedef struct emc__cache_debug {
  uint64_t passes;              /* eviction passes so far */
  uint64_t index_tombs;         /* tombstones in the index now */
  uint64_t index_slots;         /* entries the index has room for */
  uint64_t passes_above_low;    /* passes that ended with bytes in use above t2 * capacity */
  uint64_t max_bytes_after_pass;/* largest bytes-in-use seen right after a pass */
  uint64_t calls_above_high;    /* calls that returned with bytes in use above t1 * capacity */
  uint64_t low_bytes;           /* t2 * capacity, in bytes */
  uint64_t high_bytes;          /* t1 * capacity, in bytes */
  uint64_t index_rebuilds;      /* index re-pack sweeps completed so far */
} emc__cache_debug;

#ifdef EMC_TEST_HOOKS
/* The tests' build of the library only (embcache_hooks): while non-zero, a cache's admission
 * thread fails to start as if pthread_create had returned EAGAIN, so tests reach AUTO's
 * fallback to inline admission and BACKGROUND's EMC_ENOMEM (tests/test_admission.c). */
extern int emc__fail_thread_start;
#endif

#define EMC__PIPE_D_MIN 3
#define EMC__PIPE_D_MAX 12
/* The host lookup's read path: 1 (default) the software-pipelined batched read, with the
 * distance between its stages chosen per batch; EMC__PIPE_D_MIN..EMC__PIPE_D_MAX the same
 * read with that distance; 0 the per-row reference path (read_row for every position). Tests
 * drive them on the same batches. Not thread-safe against lookups of c. EMC_EINVAL (NULL, or
 * another value), EMC_EUNSUPPORTED (not the host backend). */
EMC_INTERNAL emc_status emc__cache_set_pipelined(emc_cache *c, int pipelined);
/* Whether the pipelined read copies a position that repeats an earlier position's (table, id)
 * from that position (1, the default) or reads every position (0; lib/read_pipe.c, "Repeats").
 * Tests drive both on the same batches. Not thread-safe against lookups of c. EMC_EINVAL (NULL,
 * or not 0 / 1), EMC_EUNSUPPORTED (not the host backend). */
EMC_INTERNAL emc_status emc__cache_set_repeats(emc_cache *c, int repeats);
/* Snapshot of the counters above. Errors: EMC_EINVAL. */
EMC_INTERNAL emc_status emc__cache_get_debug(const emc_cache *c, emc__cache_debug *out);
/* Walk every structure of the cache and verify it: each used slot has exactly one index entry
 * pointing at it and vice versa, page live counts, free bitmaps and partial lists agree,
 * bytes in use equal the sum of live slots' strides, dirty counts agree, every entry is found
 * by a probe for its key, its key is the global key of its (table, id), and no entry is BUSY.
 * Takes the writer lock. Returns EMC_OK or EMC_ECORRUPT with a detail. */
EMC_INTERNAL emc_status emc__cache_check(emc_cache *c);

#endif /* EMC_INTERNAL_H */
