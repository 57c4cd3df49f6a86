/*
 * lookup_host.c: the host backend's lookup: the lock-free reads of a batch, then admission of
 * its misses (admit_host.c).
 *
 * Two read paths give the same rows, where codes and counts (tests/test_lookup_paths.c):
 *   read_row      the per-row reference: probe, entry word, fence, copy, validate, stamp; it
 *                 retries until a read validates and handles every case (BUSY entries,
 *                 unified-index entries, hashed collisions, a re-pack racing a miss).
 *   the pipeline  the batched read (emc__cache_set_pipelined, on by default): each position
 *                 goes through four stages, d positions apart, so the memory accesses of
 *                 about 3 * d positions are in flight at once and each id is probed once
 *                 (d: pipe_distance, from the batch's mean row width; wide rows want fewer
 *                 positions in flight, or their prefetches overflow the core's misses):
 *                   A  global key; prefetch its home bucket
 *                   B  re-pack epoch (acquire; odd: the re-pack cursor too); probe; prefetch
 *                      the entry word and the stamp
 *                      (a miss: the store map's slot of a hashed id)
 *                   C  entry word lm1 (relaxed); prefetch every line of the row it names (a
 *                      miss: find a hashed id's store row; prefetch the store row's lines)
 *                   D  acquire fence; copy the row (and a hashed slot's owner); key2, acquire
 *                      fence, lm2; stamp. A miss: acquire fence, repack_raced, store read.
 *                 Anything unusual goes to read_row for that position, which starts over: a
 *                 BUSY or free entry word, a unified-index entry, a slot handle that is not
 *                 the table's, another id's slot (a hashed collision), a read that does not
 *                 validate, a miss that a re-pack may have raced (repack_raced).
 * Why the pipeline keeps the reader protocol of lib/item/index.h ("index"): for each position
 * it performs the protocol's steps in the protocol's order, only interleaved with other
 * positions' steps. The acquire fence of stage D follows (in program order) the load of lm1
 * in stage C of an earlier iteration and precedes the row loads, as step 3 requires; key2 is
 * loaded before the fence of step 6 and lm2 after it. For a miss, e1 (and lo1) are loaded
 * (acquire) before the probe in stage B and the epoch (and hi2) again after the fence of
 * stage D: later than read_row loads them, which only widens the window in which a re-pack
 * step is detected. A hashed id's store row
 * is found in stage C, after the probe: an insert publishes a new id in the store before its
 * index entry, so an id missing from both was missing at the instant of stage C. Prefetches
 * are hints with no effect on ordering.
 *
 * Stamps are written here, by the lookup. Handing them to the admission thread instead (the
 * pipeline logging each hit's index position, the thread stamping them before it admits the
 * misses) was built and measured (2026-11-27, 2 cores): one caller, emc-bench --all-hit
 * --dim 16 --batches 600 to 1000, lookup seconds 8-15 % lower; two callers keeping both cores
 * busy (emc-bench --threads 2, 3 interleaved pairs) 2.7-3.4e7 lookups/s against 3.0-3.5e7, as
 * the thread then takes a caller's core, even with only lookups that read alone handing over.
 * A server's request threads are the second case, so it was not kept (commit 36996a7, reverted).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

/* ================================================================= reads (lock-free) */
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
static inline int repack_raced(const emc__host_cache *h, uint32_t e1, uint64_t lo1,
                               uint64_t home, uint64_t nb) {
  uint64_t span;
  if (EMC_LD_RELAXED(h->ix.epoch) != e1) return 1; /* a step began or ended meanwhile */
  if (!(e1 & 1u)) return 0;
  span = EMC_LD_RELAXED(&h->repack_hi) - lo1;
  return span >= nb || (home + nb - lo1 % nb) % nb < span;
}

/* A store row of table t for id: dense by computation, hashed through the store's map
 * (absent: zero row). Returns R_STORE (| R_ADMIT when `admit`) or R_ABSENT. */
static uint8_t read_store(const emc_cache *c, uint32_t t, uint64_t id, unsigned char *dst,
                          int admit) {
  const emc__table *tb = &c->store->tables[t];
  int64_t row = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find(tb, id);
  if (row < 0) {
    memset(dst, 0, tb->row_bytes);
    return EMC__R_ABSENT;
  }
  emc__store_row_read(c->store, t, (uint64_t)row, dst);
  return (uint8_t)(EMC__R_STORE | (admit ? EMC__R_ADMIT : 0));
}

/* Read the row of (t, id, key) into dst by the reader protocol of emc_item.h; retries until a
 * read validates. Returns R_HIT, or R_STORE / R_ABSENT with R_ADMIT / R_UNIFIED flags. */
static uint8_t read_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, unsigned char *dst,
                        uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__table *tb = &c->store->tables[t];
  const emc__page_layout *L = &h->layout[t];
  for (;;) {
    uint32_t e1 = EMC_LD_ACQUIRE(h->ix.epoch);
    uint64_t lo1 = (e1 & 1u) ? EMC_LD_ACQUIRE(&h->repack_lo) : 0;
    int64_t pos = emc__hix_find(&h->ix, key);
    uint64_t lm1, owner = id;
    uint32_t loc, slot;
    unsigned char *pg, *src = NULL;
    int uni_mine = 0;
    EMC__TP(EMC__TP_READ, "read: probed");
    if (pos < 0) {
      /* absent, unless a re-pack step raced the probe (repack_raced); the fence also makes
       * the store read see the write-back that preceded an eviction the probe observed */
      EMC_FENCE_ACQUIRE();
      if (repack_raced(h, e1, lo1, emc__home_bucket(key, h->ix.n_buckets), h->ix.n_buckets)) {
        EMC__TP(EMC__TP_RETRY, "read: a re-pack raced the miss");
        EMC__CNT_ADD(h->n_retries, 1);
        continue;
      }
      return read_store(c, t, id, dst, 1);
    }
    lm1 = emc__ix_lm(&h->ix, (uint64_t)pos);
    EMC__TP(EMC__TP_READ, "read: entry loaded");
    if (lm1 & EMC__LM_BUSY) { /* a writer is changing the row (or the entry is being made) */
      EMC__TP(EMC__TP_RETRY, "read: entry busy");
      EMC__CNT_ADD(h->n_retries, 1);
      sched_yield();
      continue;
    }
    loc = emc__lm_loc(lm1);
    EMC_FENCE_ACQUIRE();
    if (loc & EMC__LOC_HOST) {
      /* a unified-index entry: the store row, if it is this id's (a hashed row's index and id
       * never change once published) */
      uint64_t row = loc & EMC__LOC_MAX;
      uni_mine = tb->kind == EMC_TABLE_HASHED && row < EMC_LD_ACQUIRE(tb->count) &&
                 EMC_LD_RELAXED(&tb->row_ids[row]) == id;
      if (uni_mine) emc__store_row_read(c->store, t, row, dst);
    } else if ((src = emc__slot_addr(h, t, loc, &pg, &slot)) != NULL) {
      if (L->off_owner) owner = EMC_LD_RELAXED(emc__slot_owner(pg, L, slot));
      emc__row_load(dst, src, tb->row_bytes);
    }
    EMC__TP(EMC__TP_READ, "read: row copied");
    /* Every path decides only once (key, lm1) is known to have held pos throughout: the
     * entry word read at pos may belong to another key by now (issue 16: a re-pack moved a
     * unified entry of another id into pos after the probe found key there). */
    if (!emc__entry_recheck(&h->ix, (uint64_t)pos, key, lm1) || (!src && !(loc & EMC__LOC_HOST))) {
      EMC__TP(EMC__TP_RETRY, "read: entry changed");
      EMC__CNT_ADD(h->n_retries, 1);
      continue;
    }
    if (loc & EMC__LOC_HOST) /* the row, or: another id holds this key, so id is not cached */
      return uni_mine ? EMC__R_STORE | EMC__R_ADMIT | EMC__R_UNIFIED : read_store(c, t, id, dst, 0);
    if (owner != id) return read_store(c, t, id, dst, 0); /* hashed key collision */
    if (EMC_LD_RELAXED(&h->ix.stamps[pos]) != emc__stamp_of(now))
      EMC_ST_RELAXED(&h->ix.stamps[pos], emc__stamp_of(now));
    return EMC__R_HIT;
  }
}

/* What a lookup's reads found. */
typedef struct tally {
  uint64_t hits, misses, absent, unified, to_admit;
} tally;

/* Position i was decided as k (the per-row path): its where code, and the counts. */
static inline void tally_add(tally *n, uint8_t *where, uint64_t i, uint8_t k) {
  uint8_t base = k & 3u;
  if (where)
    where[i] = base == EMC__R_HIT ? EMC_WHERE_CACHE
               : base == EMC__R_STORE ? EMC_WHERE_STORE : EMC_WHERE_ABSENT;
  n->hits += base == EMC__R_HIT;
  n->misses += base == EMC__R_STORE;
  n->absent += base == EMC__R_ABSENT;
  n->unified += (k & EMC__R_UNIFIED) != 0;
  n->to_admit += (k & EMC__R_ADMIT) != 0;
}

/* ================================================================= the pipeline */
#define PIPE_RING 64u /* > 3 * EMC__PIPE_D_MAX, a power of two; a call uses its first
                       * ring_mask + 1 slots (> 3 * d) */
_Static_assert(PIPE_RING > 3 * EMC__PIPE_D_MAX, "the ring holds every position in flight");

enum { P_HIT = 0, P_MISS = 1, P_SLOW = 2 };
typedef struct pipe_slot {
  uint64_t key, lm1;
  uint64_t b;                /* home bucket (stage A) */
  int64_t pos;               /* index position (P_HIT), store row (P_MISS: -1 absent) */
  const unsigned char *src;  /* the slot's row (P_HIT) */
  const uint64_t *owner;     /* the slot's owner id (hashed tables), else NULL */
  const emc__table *tb;      /* store table of the position */
  uint32_t t, rb;            /* its table, row bytes */
  uint32_t e1;               /* re-pack epoch before the probe */
  uint64_t lo1;              /* repack_lo after it, when e1 is odd */
  uint8_t state;
} pipe_slot;

/* Where code of a read's kind (its base kind: the low two bits). */
static const uint8_t where_of[16] = {
    EMC_WHERE_CACHE, EMC_WHERE_STORE, EMC_WHERE_ABSENT, 0, EMC_WHERE_CACHE, EMC_WHERE_STORE,
    EMC_WHERE_ABSENT, 0, EMC_WHERE_CACHE, EMC_WHERE_STORE, EMC_WHERE_ABSENT, 0,
    EMC_WHERE_CACHE, EMC_WHERE_STORE, EMC_WHERE_ABSENT, 0};

/* What every stage needs: the call's arguments and constants (no array that is indexed by a
 * variable, so the compiler keeps the fields in registers; the ring is apart). */
typedef struct pipe {
  emc_cache *c;
  emc__host_cache *h;
  const emc_store *s;
  emc__index_view ix;   /* a copy: the index never moves during a cache's life */
  const uint64_t *ids, *offsets;
  uint64_t *keys;
  uint8_t *kind, *where;
  uint64_t *cnt;        /* 16 counts, by kind */
  unsigned char *dst;   /* stage D's next row */
  uint64_t now;
  uint64_t d;           /* positions between two stages (pipe_distance) */
  uint64_t ring_mask;   /* the ring's slots in use, less one: a power of two > 3 * d */
  /* stage A's table cursor and what it takes from its table */
  uint64_t a_end;       /* offsets[ta + 1] */
  uint32_t ta, a_rb;
  const emc__table *a_tb;
  uint64_t a_hi, a_mask;  /* the table's code, shifted; the feature bits' mask */
  uint32_t a_shift;       /* emc__mix's xorshift for the feature bits */
  int a_dense;
  uint16_t stamp;
} pipe;

/* always_inline: see admit_prefetch (admit_host.c); a prefetch-only function that is not
 * inlined early may be judged pure and its calls deleted */
static inline __attribute__((always_inline)) void prefetch_lines(const void *p, uint32_t bytes) {
  const char *a = (const char *)((uintptr_t)p & ~(uintptr_t)63), *end = (const char *)p + bytes;
  for (; a + 64 < end; a += 128) { /* two lines a step */
    __builtin_prefetch(a, 0, 3);
    __builtin_prefetch(a + 64, 0, 3);
  }
  if (a < end) __builtin_prefetch(a, 0, 3);
}

/* Key, lm, stamp addresses for a key width known at compile time (KB 32 or 64). */
#define PIX_KEY(P, KB, i)                                                                          \
  ((KB) == 32 ? (uint64_t)EMC_LD_RELAXED((const uint32_t *)(P)->ix.keys + (i))                    \
              : EMC_LD_RELAXED((const uint64_t *)(P)->ix.keys + (i)))

/* A: the key of position k, its table; prefetch its home bucket */
static inline __attribute__((always_inline)) void stage_a(pipe *P, pipe_slot *ring, uint64_t k,
                                                          const uint32_t KB) {
  pipe_slot *p = &ring[k & P->ring_mask];
  if (k >= P->a_end) { /* the next table with ids */
    do P->ta++; while (P->offsets[P->ta + 1] <= k);
    P->a_end = P->offsets[P->ta + 1];
    {
      const emc__table_code *tc = &P->c->codec.tables[P->ta];
      P->a_tb = &P->s->tables[P->ta];
      P->a_rb = P->a_tb->row_bytes;
      P->a_hi = tc->fbits >= 64 ? 0 : tc->code << tc->fbits;
      P->a_mask = tc->fbits >= 64 ? ~0ull : ((1ull << tc->fbits) - 1u);
      P->a_shift = (tc->fbits + 1u) / 2u;
      P->a_dense = tc->kind == EMC_TABLE_DENSE;
    }
  }
  p->t = P->ta;
  p->tb = P->a_tb;
  p->rb = P->a_rb;
  { /* emc__global_key, with the table's constants taken once (tests compare the paths) */
    uint64_t id = P->ids[k], x;
    if (P->a_dense) {
      x = id & P->a_mask;
      x ^= x >> P->a_shift;
      x = (x * EMC__MIX_MUL) & P->a_mask;
      x ^= x >> P->a_shift;
    } else {
      x = emc__xxh3_u64(id, P->c->codec.hash_seed) & P->a_mask;
    }
    p->key = P->a_hi | x;
  }
  p->b = emc__home_bucket(p->key, P->ix.n_buckets);
  __builtin_prefetch(KB == 32 ? (const void *)((const uint32_t *)P->ix.keys + p->b * EMC__BUCKET)
                              : (const void *)((const uint64_t *)P->ix.keys + p->b * EMC__BUCKET));
}

/* B: epoch, probe; prefetch the entry word and stamp (a miss: the store map's slot) */
static inline __attribute__((always_inline)) void stage_b(pipe *P, pipe_slot *ring, uint64_t k,
                                                          const uint32_t KB) {
  pipe_slot *p = &ring[k & P->ring_mask];
  p->e1 = EMC_LD_ACQUIRE(P->ix.epoch);
  p->lo1 = (p->e1 & 1u) ? EMC_LD_ACQUIRE(&P->h->repack_lo) : 0;
  p->pos = emc__hix_find_kb(&P->ix, KB, p->b, p->key);
  EMC__TP(EMC__TP_READ, "read: probed");
  if (p->pos >= 0) {
    p->state = P_HIT;
    __builtin_prefetch(&P->ix.lm[p->pos], 0, 3);
    __builtin_prefetch(&P->ix.stamps[p->pos], 1, 3);
  } else {
    const emc__table *t = p->tb;
    p->state = P_MISS;
    if (t->kind == EMC_TABLE_HASHED) {
      uint64_t m = emc__map_home(P->ids[k], t->map_cap);
      __builtin_prefetch(&t->map_rowp1[m], 0, 3);
      __builtin_prefetch(&t->map_ids[m], 0, 3);
    }
  }
}

/* C: the entry word lm1; prefetch the row it names (a miss: find the store row, prefetch it) */
static inline __attribute__((always_inline)) void stage_c(pipe *P, pipe_slot *ring, uint64_t k) {
  pipe_slot *p = &ring[k & P->ring_mask];
  const emc__host_cache *h = P->h;
  if (p->state == P_HIT) {
    uint32_t loc, s;
    unsigned char *page;
    p->lm1 = EMC_LD_RELAXED(&P->ix.lm[p->pos]);
    EMC__TP(EMC__TP_READ, "read: entry loaded");
    loc = emc__lm_loc(p->lm1);
    if ((p->lm1 & EMC__LM_BUSY) || (loc & EMC__LOC_HOST) ||
        !(p->src = emc__slot_addr(h, p->t, loc, &page, &s))) {
      p->state = P_SLOW;
    } else {
      const emc__page_layout *L = &h->layout[p->t];
      prefetch_lines(p->src, p->rb);
      p->owner = NULL;
      if (L->off_owner) {
        p->owner = emc__slot_owner(page, L, s);
        __builtin_prefetch(p->owner, 0, 3);
      }
    }
  } else { /* P_MISS: the store row */
    const emc__table *t = p->tb;
    int64_t row = t->kind == EMC_TABLE_DENSE ? (int64_t)P->ids[k] : emc__store_find(t, P->ids[k]);
    p->pos = row;
    if (row >= 0) {
      prefetch_lines(emc__store_row(t, (uint64_t)row), p->rb);
      __builtin_prefetch(&P->s->stripes[emc__store_stripe(p->t, (uint64_t)row)], 0, 3);
    }
  }
}

/* D: acquire fence; copy and validate (a miss: epoch again, store read); else read_row */
static inline __attribute__((always_inline)) void stage_d(pipe *P, pipe_slot *ring, uint64_t k,
                                                          const uint32_t KB, const int WH) {
  pipe_slot *p = &ring[k & P->ring_mask];
  uint8_t r = 0xff;
  EMC_FENCE_ACQUIRE();
  if (p->state == P_HIT) {
    uint64_t owner = p->owner ? EMC_LD_RELAXED(p->owner) : P->ids[k], key2, lm2;
    emc__row_load(P->dst, p->src, p->rb);
    EMC__TP(EMC__TP_READ, "read: row copied");
    /* emc__entry_recheck, for this key width */
    key2 = PIX_KEY(P, KB, (uint64_t)p->pos);
    EMC_FENCE_ACQUIRE();
    lm2 = EMC_LD_RELAXED(&P->ix.lm[p->pos]);
    if (!(key2 == p->key && emc__lm_same(p->lm1, lm2))) {
      EMC__CNT_ADD(P->h->n_retries, 1); /* counted as read_row counts its own */
    } else if (owner == P->ids[k]) {
      if (EMC_LD_RELAXED(&P->ix.stamps[p->pos]) != P->stamp)
        EMC_ST_RELAXED(&P->ix.stamps[p->pos], P->stamp);
      r = EMC__R_HIT;
    }
  } else if (p->state == P_MISS && repack_raced(P->h, p->e1, p->lo1, p->b, P->ix.n_buckets)) {
    EMC__CNT_ADD(P->h->n_retries, 1);
  } else if (p->state == P_MISS) {
    if (p->pos < 0) {
      memset(P->dst, 0, p->rb);
      r = EMC__R_ABSENT;
    } else {
      emc__store_row_read(P->s, p->t, (uint64_t)p->pos, P->dst);
      r = EMC__R_STORE | EMC__R_ADMIT;
    }
  }
  if (r == 0xff) { /* start over */
    EMC__TP(EMC__TP_READ, "read: the pipeline hands the position to read_row");
    r = read_row(P->c, p->t, P->ids[k], p->key, P->dst, P->now);
  }
  if (r & EMC__R_ADMIT) P->keys[k] = p->key; /* the keys admission reads */
  P->kind[k] = r;
  P->cnt[r & 15u]++;
  if (WH) P->where[k] = where_of[r & 15u];
  P->dst += p->rb;
}

/* The pipeline for a key width, and whether where[] is written, known at compile time. */
static inline __attribute__((always_inline)) void pipe_run(pipe *P, uint64_t total,
                                                           const uint32_t KB, const int WH) {
  pipe_slot ring[PIPE_RING];
  const uint64_t d = P->d;
  uint64_t j;
  for (j = 0; j < total + 3 * d; j++) {
    if (j >= 3 * d && j < total) { /* the steady state: every stage has a position */
      stage_a(P, ring, j, KB);
      stage_b(P, ring, j - d, KB);
      stage_c(P, ring, j - 2 * d);
      stage_d(P, ring, j - 3 * d, KB, WH);
      continue;
    }
    if (j < total) stage_a(P, ring, j, KB);
    if (j >= d && j - d < total) stage_b(P, ring, j - d, KB);
    if (j >= 2 * d && j - 2 * d < total) stage_c(P, ring, j - 2 * d);
    if (j >= 3 * d) stage_d(P, ring, j - 3 * d, KB, WH);
  }
}

/* Positions between two stages for a batch: the lines that about 3 * d positions keep in
 * flight (each position's bucket, entry word, stamp and row lines) should fill the core's
 * outstanding misses without overflowing them, or the prefetches wait. emc-bench --all-hit
 * (dims 16, 64 and 256: 1, 4 and 16 lines a row) ran best near 8-16, 6-8 and 3-4, and the
 * default preset (dim 64, misses among the hits) at 8 rather than 6: 12, 8 and 3 here. */
static uint64_t pipe_distance(const emc_store *s, const uint64_t *offsets, uint64_t total) {
  uint64_t bytes = 0, lines, d;
  uint32_t t;
  for (t = 0; t < s->n_tables; t++) bytes += (offsets[t + 1] - offsets[t]) * s->tables[t].row_bytes;
  lines = (bytes / total + 63) / 64; /* of the batch's mean row */
  d = 56u / (lines + 3u);
  return d < EMC__PIPE_D_MIN ? EMC__PIPE_D_MIN : d > EMC__PIPE_D_MAX ? EMC__PIPE_D_MAX : d;
}

/* The batched read of positions [0, total): rows into out, kinds into kind[] and where[]
 * (when given), counts into *n (keys[] gets the key of every position to admit: EMC__R_ADMIT). */
static void read_pipelined(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                           uint64_t total, unsigned char *out, uint64_t *keys, uint8_t *kind,
                           uint8_t *where, tally *n, uint64_t now) {
  pipe P;
  uint64_t cnt[16] = {0};
  unsigned r;
  P.c = c;
  P.h = c->host;
  P.s = c->store;
  P.ix = c->host->ix;
  P.ids = ids;
  P.offsets = offsets;
  P.keys = keys;
  P.kind = kind;
  P.where = where;
  P.cnt = cnt;
  P.dst = out;
  P.now = now;
  P.d = c->host->pipelined >= EMC__PIPE_D_MIN ? (uint64_t)c->host->pipelined
                                               : pipe_distance(c->store, offsets, total);
  P.ring_mask = 15u;
  while (P.ring_mask < 3u * P.d) P.ring_mask = 2u * P.ring_mask + 1u;
  P.stamp = emc__stamp_of(now);
  P.ta = (uint32_t)-1; /* stage A's first position moves the cursor to its table */
  P.a_end = 0;
  P.a_tb = NULL;
  P.a_rb = 0;
  P.a_hi = P.a_mask = 0;
  P.a_shift = 0;
  P.a_dense = 1;
  if (P.ix.key_bits == 32) {
    if (where) pipe_run(&P, total, 32, 1);
    else pipe_run(&P, total, 32, 0);
  } else {
    if (where) pipe_run(&P, total, 64, 1);
    else pipe_run(&P, total, 64, 0);
  }
  for (r = 0; r < 16; r++) {
    if (!cnt[r]) continue;
    n->hits += (r & 3u) == EMC__R_HIT ? cnt[r] : 0;
    n->misses += (r & 3u) == EMC__R_STORE ? cnt[r] : 0;
    n->absent += (r & 3u) == EMC__R_ABSENT ? cnt[r] : 0;
    n->unified += (r & EMC__R_UNIFIED) ? cnt[r] : 0;
    n->to_admit += (r & EMC__R_ADMIT) ? cnt[r] : 0;
  }
}

/* ================================================================= lookup */
/* Stamps must be aged every EMC__AGE_CLAMP / 2 calls (item/policy.h, "LRU stamps"): a lookup that
 * finds that many calls passed without a pass or scan does it, if the lock is free. */
static void maybe_age(emc_cache *c, uint64_t now) {
  emc__host_cache *h = c->host;
  /* signed: a writer may have aged against a clock later than this call's */
  if ((int64_t)(now - __atomic_load_n(&h->aged_at, __ATOMIC_RELAXED)) < (int64_t)(EMC__AGE_CLAMP / 2))
    return;
  if (pthread_mutex_trylock(&h->lock) != 0) return;
  if ((int64_t)(now - h->aged_at) >= (int64_t)(EMC__AGE_CLAMP / 2)) emc__age_stamps(c, now);
  pthread_mutex_unlock(&h->lock);
}

emc_status emc__host_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                            void *out, uint8_t *where) {
  emc__host_cache *h = c->host;
  const emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], now, i;
  tally n = {0, 0, 0, 0, 0};
  uint64_t *keys;
  uint8_t *kind;
  uint32_t t;
  if (total == 0) return EMC_OK;
  if (total > SIZE_MAX / (sizeof *keys + sizeof *kind))
    return EMC_FAIL(EMC_ENOMEM, "lookup scratch for %llu ids overflows the address space",
                    (unsigned long long)total);
  keys = emc__mallocn(total, sizeof *keys);
  kind = emc__mallocn(total, sizeof *kind);
  if (!keys || !kind) {
    free(keys);
    free(kind);
    return EMC_FAIL(EMC_ENOMEM, "lookup scratch for %llu ids", (unsigned long long)total);
  }
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);
  maybe_age(c, now);
  if (h->pipelined) {
    read_pipelined(c, ids, offsets, total, out, keys, kind, where, &n, now);
  } else {
    unsigned char *dst = out;
    for (t = 0; t < s->n_tables; t++) {
      const emc__table_code *tc = &c->codec.tables[t];
      uint32_t rb = s->tables[t].row_bytes;
      for (i = offsets[t]; i < offsets[t + 1]; i++, dst += rb) {
        keys[i] = emc__global_key(tc, ids[i], c->codec.hash_seed);
        kind[i] = read_row(c, t, ids[i], keys[i], dst, now);
        tally_add(&n, where, i, kind[i]);
      }
    }
  }
  EMC__CNT_ADD(h->n_lookups, total);
  EMC__CNT_ADD(h->n_hits, n.hits);
  EMC__CNT_ADD(h->n_misses, n.misses);
  EMC__CNT_ADD(h->n_absent, n.absent);
  EMC__CNT_ADD(h->n_unified, n.unified);
  if (n.to_admit > 0) { /* admit_host.c takes keys and kind (freed there) */
    emc__host_admit(c, ids, offsets, keys, kind, n.to_admit, now);
    return EMC_OK;
  }
  free(keys);
  free(kind);
  return EMC_OK;
}
