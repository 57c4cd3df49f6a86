/*
 * host_cache.h: the host backend's state and the functions its files share (not installed).
 *
 *   index.c       the global index in host memory: sizing, writer-side insert / remove, the
 *                 bounded in-place re-pack that clears tombstones
 *   pool.c        pool geometry (shared with the CUDA backend), pages and per-table sub-pools,
 *                 slot allocation through per-page free bitmaps
 *   evict.c       the eviction pass (approximate LRU between t1 and t2), stamp aging
 *   cache_host.c  the backend's calls: create, insert, flush, stats, white-box checks
 *   lookup_host.c the lookup: the per-row reference read, then admission of the misses
 *   read_pipe.c   the lookup's pipelined batched read, which copies a batch's repeated ids
 *   admit_host.c  admission of a lookup's misses: inline, or by the cache's admission thread
 *   train_host.c  the training calls: dedup, prefetch (and its pins), apply_gradients
 *   sync_host.c   a shared store's update log applied: the copies other writers outdated go
 *
 * Concurrency: one writer lock (`lock`) serializes every change; lookups take no lock and read
 * by the protocol of lib/item/index.h ("index"), except that over a shared store a lookup that
 * finds rows written elsewhere takes the lock to drop its copies (sync_host.c).
 */
#ifndef EMC_HOST_CACHE_H
#define EMC_HOST_CACHE_H

#include <semaphore.h>
#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2: the x86-64 baseline */
#endif

#include "internal.h"

#define EMC__HIST_BUCKETS 4096u

/* What a read found at a position (lookup_host.c): a base kind and flags. */
enum { EMC__R_HIT = 0, EMC__R_STORE = 1, EMC__R_ABSENT = 2 };
#define EMC__R_ADMIT 4u   /* flag: a store row that may be admitted */
#define EMC__R_UNIFIED 8u /* flag: found through a unified-index entry */

/* Misses one lookup handed to the admission thread (admit_host.c), in position order. */
typedef struct emc__admit_batch {
  struct emc__admit_batch *next;
  uint64_t n, now;     /* records; the lookup's clock */
  uint64_t *id, *key;  /* n each */
  uint32_t *table;     /* n */
  int barrier;         /* a drain's barrier (n == 0): 1 queued, 2 reached (under adm_mu) */
} emc__admit_batch;

/* The global keys one prefetch call pinned (each key once). */
typedef struct emc__pin_list {
  uint64_t *keys;
  uint64_t n, cap;
} emc__pin_list;

struct emc__host_cache {
  /* pool (pool.c) */
  unsigned char *arena;       /* n_pages * page_bytes, 64-byte aligned */
  size_t arena_bytes;
  uint64_t page_bytes;
  uint32_t n_pages;
  uint32_t max_slots;         /* slots per page of the densest layout (handle = p * max_slots + s) */
  uint64_t slots_magic;       /* 2^64 / max_slots rounded up (emc__slot_split); 0 when max_slots 1 */
  uint32_t max_stride;        /* widest row slot */
  uint32_t free_page_head;    /* arena's free pages, linked by hdr.next */
  uint32_t free_pages;
  emc__page_layout *layout;   /* per table */
  uint32_t *partial_head;     /* per table: pages with free slots, linked by prev/next */
  uint64_t *rows_cached;      /* per table; writer-side (EMC__WR_ADD), read by anyone */
  /* index (index.c) */
  emc__index_view ix;
  uint64_t ix_slots;          /* entries of the index */
  size_t ix_bytes;            /* bytes of keys + lm + stamps */
  uint64_t ix_live, ix_tomb;  /* writer only */
  uint64_t host_entries;      /* unified-index entries (writer only) */
  uint64_t max_rows;          /* live pool entries the index is sized for (rows at t1) */
  uint64_t repack_left;       /* buckets left in the running re-pack sweep (0: none) */
  uint32_t repack_epoch;      /* odd while a re-pack step runs (ix.epoch points here) */
  uint64_t repack_pos;        /* the sweep's next bucket, never wrapped (bucket repack_pos % nb) */
  /* the cluster a step re-packs now, as sweep positions [lo, hi) (index.c; read by lookups
   * that miss while the epoch is odd), padded onto a line of their own: written per cluster
   * (padding, not _Alignas: the struct comes from calloc) */
  char repack_pad0_[64];
  uint64_t repack_lo;
  uint64_t repack_hi;
  char repack_pad1_[64];
  uint64_t repack_credit;     /* extra buckets owed to the sweep by this call's insertions */
  uint64_t *repack_keys, *repack_lm; /* scratch of repack_max_buckets buckets */
  uint64_t repack_max_buckets;       /* min(EMC__REPACK_MAX_BUCKETS, index buckets) */
  uint16_t *repack_stamps;
  uint32_t meta_seq;          /* the writers' meta counter (item/index.h, "index") */
  int pipelined;              /* lookups' read path and distance (emc__cache_set_pipelined) */
  int repeats;                /* the pipeline copies repeated ids (emc__cache_set_repeats) */
  /* accounting */
  uint64_t bytes_in_use;      /* writer-side (EMC__WR_ADD), read by anyone */
  uint64_t pages_held;        /* writer-side (EMC__WR_ADD), read by anyone */
  uint64_t dirty_rows;        /* writer-side (EMC__WR_ADD), read by anyone */
  uint64_t high_bytes, low_bytes;
  uint64_t clock;             /* atomic; one tick per call */
  uint64_t aged_at;           /* clock of the last stamp-aging scan (atomic) */
  pthread_mutex_t lock;
  int lock_ok;                /* lock initialised */
  /* counters (atomic: lookups, and writers once they let the lock go, add to them) */
  uint64_t n_lookups, n_hits, n_misses, n_absent, n_admissions, n_admit_skipped, n_inserts,
      n_retries, n_unified;
  /* counters of the writer side (EMC__WR_ADD), read by anyone */
  uint64_t n_evictions, n_writebacks, n_passes;
  /* debug */
  uint64_t passes_above_low, max_after_pass, calls_above_high, repacks;
  /* eviction scratch (writer only) */
  uint64_t *hist;             /* EMC__HIST_BUCKETS */
  uint32_t *page_young;       /* n_pages: the age of each page's newest row (emc__reclaim_page) */
  uint64_t reclaim_failed_at; /* newest clock + 1 of a reclaim that found no page to take */
  uint64_t reclaim_failed_passes; /* ... and n_passes then */
  /* prefetch pins (train_host.c; writer only but the gauges, read atomic) */
  emc__pin_list *pins;        /* prefetch_depth + 1 lists: the keys each live prefetch pinned */
  uint32_t n_pin_lists;       /* prefetch_depth + 1 */
  uint32_t pin_next;          /* the list the next prefetch releases and refills */
  uint64_t pinned_bytes;      /* strides of entries with a pin count > 0 (<= low_bytes) */
  uint64_t pinned_rows;       /* entries with a pin count > 0 */
  uint64_t n_prefetched, n_pin_shortfall, n_grad_rows; /* counters (atomic) */
  /* background admission (admit_host.c; EMC_ADMISSION_BACKGROUND) */
  int adm_bg;                 /* the thread runs (in the process of fork generation adm_gen) */
  unsigned adm_gen;
  pthread_t adm_thread;
  unsigned char *adm_row;     /* max_stride bytes: the thread's row buffer, allocated by the
                               * cache's creator (see emc__admission_start) */
  pthread_mutex_t adm_mu;     /* guards adm_stop and barriers' state */
  pthread_cond_t adm_cv;      /* broadcast when a barrier is reached (a drain waits on it) */
  sem_t adm_sem;              /* posted by a push onto an empty list, and by stop */
  emc__admit_batch *adm_head; /* lookups push here (lock-free LIFO; the thread takes it all) */
  uint64_t adm_pending;       /* rows pushed and not yet processed (atomic): the queue bound */
  int adm_stop;               /* under adm_mu */
  int adm_sync_ok;            /* adm_mu, adm_cv and adm_sem initialised */
  /* a shared store (sync_host.c): rows are written through, never dirty */
  int shared;                 /* the store is shared */
  uint64_t log_seen;          /* the store's update log is applied up to here (atomic) */
  unsigned char *sync_row;    /* max_stride bytes: a pinned row refreshed (writer) */
};

#define EMC__CNT_ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)
/* A gauge or counter that only the writer side changes (h->lock held), read by anyone
 * (EMC__LD): a relaxed load and a relaxed store, no read-modify-write. On x86 a locked add
 * waits until every earlier store has reached the cache, and a writer's earlier stores miss
 * (a row into a cold slot, an entry word): one locked add per admitted or evicted row made
 * those misses wait one after another (admission's emc__admit_row: 2.7 % of a default
 * emc-bench run's samples, three quarters of them behind its locked adds; 0.7 % without). */
#define EMC__WR_ADD(field, v) \
  __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)
#define EMC__WR_SUB(field, v) \
  __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) - (v), __ATOMIC_RELAXED)
#define EMC__LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

static inline unsigned char *emc__page_at(const emc__host_cache *h, uint64_t p) {
  return h->arena + p * h->page_bytes;
}
static inline emc__page_hdr *emc__hdr_at(const emc__host_cache *h, uint64_t p) {
  return (emc__page_hdr *)emc__page_at(h, p);
}
/* Page and slot of handle loc (loc / max_slots, loc % max_slots) by a multiply: exact for
 * every 32-bit loc and max_slots (Lemire, Kaser and Kurz, "Faster remainder by direct
 * computation", 2019). */
static inline void emc__slot_split(const emc__host_cache *h, uint32_t loc, uint32_t *p, uint32_t *s) {
  uint32_t q = h->slots_magic ? (uint32_t)emc__mulhi(h->slots_magic, loc) : loc;
  *p = q;
  *s = loc - q * h->max_slots;
}
/* Row address of slot handle `loc` under table t's layout (its page and slot index into
 * *page and *slot, for the owner word), or NULL when the handle cannot be a slot of table t
 * (a stale loc: the reader's validation then fails anyway). */
static inline unsigned char *emc__slot_addr(const emc__host_cache *h, uint32_t t, uint32_t loc,
                                            unsigned char **page, uint32_t *slot) {
  uint32_t p;
  emc__slot_split(h, loc, &p, slot);
  if (p >= h->n_pages || *slot >= h->layout[t].n_slots) return NULL;
  *page = emc__page_at(h, p);
  return emc__slot_row(*page, &h->layout[t], *slot);
}
/* A fresh meta for a write (writer only): the counter advances, flags as given. */
static inline uint32_t emc__next_meta(emc__host_cache *h, uint32_t flags) {
  h->meta_seq += EMC__META_STEP;
  return (h->meta_seq & ~(EMC__META_STEP - 1u)) | flags;
}

/* Bucket b's keys, loaded once (relaxed: 16-byte vector loads, item/access.h "host vector
 * reads"), and which of its slots hold a value (a key, or EMPTY): bit 2s (never an odd bit)
 * says slot s does. The 32-bit compares of a bucket are packed into bytes (16 of them: two
 * per 32-bit key, or one per half of a 64-bit key) and taken with one movemask; a 64-bit key
 * matches where both of its halves do. KB is the key width (32 or 64): a constant where the
 * caller's is. */
#if EMC__HOST_VEC && defined(__x86_64__)
typedef struct emc__hbucket {
  __m128i x[4]; /* KB 32: x[0..1] */
} emc__hbucket;
static inline __attribute__((always_inline)) emc__hbucket emc__hix_load(const void *keys,
                                                                        uint32_t KB, uint64_t b) {
  emc__hbucket k;
  if (KB == 32) {
    const uint32_t *p = (const uint32_t *)keys + b * EMC__BUCKET;
    k.x[0] = (__m128i)emc__v16_load(p);
    k.x[1] = (__m128i)emc__v16_load(p + 4);
    k.x[2] = k.x[3] = k.x[0];
  } else {
    const uint64_t *p = (const uint64_t *)keys + b * EMC__BUCKET;
    k.x[0] = (__m128i)emc__v16_load(p);
    k.x[1] = (__m128i)emc__v16_load(p + 2);
    k.x[2] = (__m128i)emc__v16_load(p + 4);
    k.x[3] = (__m128i)emc__v16_load(p + 6);
  }
  return k;
}
static inline __attribute__((always_inline)) uint32_t emc__hix_eq(const emc__hbucket *k,
                                                                  uint32_t KB, uint64_t v) {
  uint32_t m;
  if (KB == 32) { /* 8 keys: two vectors of four; 16-bit lanes, two bits per key */
    const __m128i vv = _mm_set1_epi32((int)(uint32_t)v);
    m = (uint32_t)_mm_movemask_epi8(
        _mm_packs_epi32(_mm_cmpeq_epi32(k->x[0], vv), _mm_cmpeq_epi32(k->x[1], vv)));
  } else { /* 8 keys: four vectors of two; bytes, one per half */
    const __m128i vv = _mm_set1_epi64x((long long)v);
    const __m128i lo = _mm_packs_epi32(_mm_cmpeq_epi32(k->x[0], vv), _mm_cmpeq_epi32(k->x[1], vv));
    const __m128i hi = _mm_packs_epi32(_mm_cmpeq_epi32(k->x[2], vv), _mm_cmpeq_epi32(k->x[3], vv));
    m = (uint32_t)_mm_movemask_epi8(_mm_packs_epi16(lo, hi));
    m &= m >> 1;
  }
  return m & 0x5555u;
}
#endif

/* Probe for key from bucket b (its home bucket): emc__index_find's answer (tests hold them
 * equal), each bucket's keys read once by vector loads and matched by vector compares where
 * the build allows (SSE2 on x86-64: item/access.h, "host vector reads"), its EMPTY slots
 * looked for (in the same loaded keys) only when it does not hold the key; elsewhere
 * emc__index_find itself. KB: as above. */
static inline __attribute__((always_inline)) int64_t emc__hix_find_kb(const emc__index_view *ix,
                                                                      uint32_t KB, uint64_t b,
                                                                      uint64_t key) {
#if EMC__HOST_VEC && defined(__x86_64__)
  const void *keys = ix->keys;
  const uint64_t nb = ix->n_buckets, empty = KB == 32 ? 0xffffffffull : ~0ull;
  uint64_t n;
  for (n = 0; n < nb; n++) {
    const emc__hbucket k = emc__hix_load(keys, KB, b);
    uint32_t m = emc__hix_eq(&k, KB, key);
    if (m) return (int64_t)(b * EMC__BUCKET + ((uint64_t)__builtin_ctz(m) >> 1));
    if (emc__hix_eq(&k, KB, empty)) return -1;
    if (++b == nb) b = 0;
  }
  return -1;
#else
  (void)KB;
  (void)b;
  return emc__index_find(ix, key);
#endif
}
/* The same from key's home bucket, for the index's key width. */
static inline int64_t emc__hix_find(const emc__index_view *ix, uint64_t key) {
  const uint64_t b = emc__home_bucket(key, ix->n_buckets);
  return ix->key_bits == 32 ? emc__hix_find_kb(ix, 32, b, key) : emc__hix_find_kb(ix, 64, b, key);
}

/* ---------------------------------------------------------------- admit_host.c */
/* Start / stop the admission thread (EMC_ADMISSION_BACKGROUND; create is a no-op for INLINE;
 * AUTO arrives resolved, and turns INLINE here where the thread cannot start). Stop drops
 * what is still queued (clean rows: nothing is lost). */
EMC_INTERNAL emc_status emc__admission_start(emc_cache *c);

EMC_INTERNAL void emc__admission_stop(emc__host_cache *h);
/* Wait until the misses of every lookup that returned before the call were admitted or skipped
 * (no-op for INLINE). */
EMC_INTERNAL void emc__admission_drain(emc_cache *c);
/* Admit a lookup's misses (positions whose kind carries EMC__R_ADMIT): inline, or handed to
 * the thread. Takes keys and kind (frees them). */
EMC_INTERNAL void emc__host_admit(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                  uint64_t *keys, uint8_t *kind, uint64_t to_admit, uint64_t now);

/* Where may (t, id, key) be admitted? After make_room (a pass may have changed the index):
 * -1 for a new entry, the position of id's unified entry, or -2 when the key is taken (by
 * id's own slot: cached meanwhile; by another id: a hashed collision, *collision set). */
EMC_INTERNAL int64_t emc__admit_pos(emc_cache *c, uint32_t t, uint64_t id, uint64_t key,
                                    int *collision);
/* Fill a free slot of table t with `row` (full_bytes: the row and its optimizer state), for
 * (id, key), dirty or clean, and publish it: at `pos` when it holds id's unified-index entry
 * (the entry now points at the slot), else as a new entry. Caller made room. 0 when the pool
 * has no free slot. */
EMC_INTERNAL int emc__admit_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, int64_t pos,
                                const unsigned char *row, int dirty, uint64_t now);
/* Overwrite the first `bytes` bytes of the cached slot of the entry (pos, lm) in place by the
 * writer protocol; the entry becomes dirty (or clean: `dirty` 0, the store holds the same
 * bytes), its pins stay. */
EMC_INTERNAL void emc__update_in_place(emc_cache *c, uint32_t t, int64_t pos, uint64_t lm,
                                       const unsigned char *src, uint32_t bytes, uint64_t now,
                                       int dirty);

/* ---------------------------------------------------------------- sync_host.c */
/* A shared store's update log, applied to the cache up to the store's published sequence:
 * every pool copy of a row written since the last call is dropped (a pinned one refreshed
 * from the store, clean); a table whose entries the log no longer holds loses every copy.
 * emc__host_sync: one acquire load when nothing was written (else takes the writer lock);
 * _locked: the writer lock held. No-ops for a private store. */
EMC_INTERNAL void emc__host_sync_locked(emc_cache *c);
/* After a write call of this cache published entries (pre, post] (the store's lock still
 * held): log_seen moves to post when it stood at pre, its copies being current. */
EMC_INTERNAL void emc__host_own_writes(emc_cache *c, uint64_t pre, uint64_t post);

/* ---------------------------------------------------------------- train_host.c */
EMC_INTERNAL emc_status emc__pins_create(emc_cache *c);
EMC_INTERNAL void emc__pins_destroy(emc__host_cache *h);
/* White-box check of the pins (writer lock held): every entry's pin count equals the number
 * of live lists naming its key, only pool entries are pinned, the gauges add up. */
EMC_INTERNAL emc_status emc__pins_check(emc_cache *c);

/* ---------------------------------------------------------------- pool.c */
/* A free slot of table t (a page is taken from the arena if needed): its handle, or -1. */
EMC_INTERNAL int64_t emc__pool_alloc(emc__host_cache *h, uint32_t t);
/* Slot `loc` of table t is free again; an emptied page goes back to the arena. */
EMC_INTERNAL void emc__pool_free(emc__host_cache *h, uint32_t t, uint32_t loc);

/* ---------------------------------------------------------------- index.c */
/* Allocate the index: `buckets` buckets of EMC__BUCKET entries, every slot EMPTY. */
EMC_INTERNAL emc_status emc__hix_create(emc__host_cache *h, uint32_t key_bits, uint64_t buckets);
EMC_INTERNAL void emc__hix_destroy(emc__host_cache *h);
/* Publish (key, lm) at a free slot of key's path (writer; key absent). */
EMC_INTERNAL void emc__hix_insert(emc_cache *c, uint64_t key, uint64_t lm, uint16_t stamp);
/* Remove the entry at pos: BUSY lm, then TOMB. */
EMC_INTERNAL void emc__hix_remove(emc_cache *c, int64_t pos);
/* Run a bounded step of the re-pack sweep, starting one when tombstones call for it (finish:
 * run a whole sweep now, starting one if none runs). Writer calls run one step at their end. */
EMC_INTERNAL void emc__hix_maintain(emc_cache *c, int finish);
/* Does the entry (pos, lm) of table t hold id? (hashed: the slot's owner or the unified
 * entry's store row id; dense: always). Writer-side (no validation needed). */
EMC_INTERNAL int emc__hix_entry_is(const emc_cache *c, uint32_t t, uint64_t lm, uint64_t id);

/* ---------------------------------------------------------------- evict.c */
/* Room for one more row of `stride` bytes within t1, running a pass if needed (writer): the
 * pass frees down to t2 and, for a row wider than t1 - t2, as much more as the row needs. 0
 * when even that leaves no room (pinned rows + stride > t1). */
EMC_INTERNAL int emc__make_room(emc_cache *c, uint32_t stride, uint64_t now);
/* Free the key of the entry at pos for another id of its table (a hashed-id collision): an
 * unpinned pool entry is evicted (written back first when dirty), a unified-index entry is
 * dropped, and either leaves the key absent from the index. 0 (nothing changed) when the entry
 * is pinned. Writer. */
EMC_INTERNAL int emc__evict_holder(emc_cache *c, int64_t pos);
/* Write the row of the pool entry (key, loc) of table t back to its store row (writer). */
EMC_INTERNAL void emc__write_back(emc_cache *c, uint32_t t, uint64_t key, uint32_t loc);
/* Evict the live, unpinned pool entry at index position pos as a pass would (dirty: written
 * back first; a hashed row may leave a unified-index entry). Returns the bytes freed, 0 when
 * pos holds no such entry. Writer; passes use it, white-box tests call it directly. */
EMC_INTERNAL uint32_t emc__evict_at(emc_cache *c, uint64_t pos);
/* Clamp stamps older than EMC__AGE_CLAMP (writer); see item/policy.h "LRU stamps". */
EMC_INTERNAL void emc__age_stamps(emc_cache *c, uint64_t now);
/* Free pages for a table that has none with a free slot while no page is free: every row of
 * the n_pages / 64 pages (at least one) whose newest rows are oldest is evicted as a pass
 * would (not a page holding a pinned row or one touched at the newest tick). 1 when pages went
 * back to the arena. Writer. */
EMC_INTERNAL int emc__reclaim_page(emc_cache *c, uint64_t now);

/* ---------------------------------------------------------------- reads (lookup_host.c, read_pipe.c) */
/* What a lookup's reads found. */
typedef struct emc__tally {
  uint64_t hits, misses, absent, unified, to_admit;
} emc__tally;
/* count positions read as `kind` into n */
static inline void emc__tally_add(emc__tally *n, uint8_t kind, uint64_t count) {
  const uint8_t base = kind & 3u;
  n->hits += base == EMC__R_HIT ? count : 0;
  n->misses += base == EMC__R_STORE ? count : 0;
  n->absent += base == EMC__R_ABSENT ? count : 0;
  n->unified += (kind & EMC__R_UNIFIED) ? count : 0;
  n->to_admit += (kind & EMC__R_ADMIT) ? count : 0;
}
/* The where code of a read's kind (its base kind: the low two bits). */
static inline uint8_t emc__where_of(uint8_t kind) {
  static const uint8_t where[4] = {EMC_WHERE_CACHE, EMC_WHERE_STORE, EMC_WHERE_ABSENT,
                                   EMC_WHERE_ABSENT};
  return where[kind & 3u];
}

/* Whether a miss of a key of home bucket `home` is not to be trusted: a re-pack step may have
 * moved entries of that home while the probe ran. e1 is the epoch loaded (acquire) before the
 * probe and lo1, when e1 was odd, repack_lo loaded (acquire) after it; the call follows an
 * acquire fence that follows the probe. Within one step (the epoch unchanged and odd), the
 * clusters before lo1 were final for the probe (lo1 was stored with release after them), and
 * a probe that observed a move in a later cluster reads that cluster's hi, or a later one,
 * here (index.c publishes it before a release fence that precedes the moves); a cluster's
 * moves only concern keys whose home lies in it (it starts after a bucket with an EMPTY slot,
 * where every probe from an earlier home stops). So a miss whose home lies outside the
 * clusters [lo1, hi2) is kept, and a lookup waits for no re-pack but its own key's cluster. */
static inline int emc__repack_raced(const emc__host_cache *h, uint32_t e1, uint64_t lo1,
                               uint64_t home, uint64_t nb) {
  uint64_t span;
  if (EMC_LD_RELAXED(h->ix.epoch) != e1) return 1; /* a step began or ended meanwhile */
  if (!(e1 & 1u)) return 0;
  span = EMC_LD_RELAXED(&h->repack_hi) - lo1;
  return span >= nb || (home + nb - lo1 % nb) % nb < span;
}

/* Read the row of (t, id, key) into dst by the reader protocol of emc_item.h (the per-row
 * reference path, lookup_host.c); retries until a read validates. Returns R_HIT, or R_STORE /
 * R_ABSENT with R_ADMIT / R_UNIFIED flags. */
EMC_INTERNAL uint8_t emc__host_read_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key,
                                        unsigned char *dst, uint64_t now);
/* The batched read of positions [0, total) (read_pipe.c): rows into out, kinds into kind[] and
 * where[] (when given), counts into *n, the key of every position to admit (EMC__R_ADMIT) into
 * keys[]. Cannot fail: without memory for its scratch it reads every position. */
EMC_INTERNAL void emc__host_read_pipelined(emc_cache *c, const uint64_t *ids,
                                          const uint64_t *offsets, uint64_t total,
                                          unsigned char *out, uint64_t *keys, uint8_t *kind,
                                          uint8_t *where, emc__tally *n, uint64_t now);

#endif /* EMC_HOST_CACHE_H */
