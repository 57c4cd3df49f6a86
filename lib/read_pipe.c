/*
 * read_pipe.c: the host lookup's batched read (lookup_host.c calls it; read_row there is the
 * per-row reference it falls back to, and tests/test_lookup_paths.c compares the two).
 *
 * The batched read (emc__cache_set_pipelined, on by default). plan_batch first sets aside the
 * positions that repeat an earlier one ("Repeats", below); each other position goes through
 * four stages, d positions apart, so the memory accesses of about 3 * d positions are in
 * flight at once and each id is probed once (d: pipe_distance, from the batch's mean row
 * width; wide rows want fewer positions in flight, or their prefetches overflow the core's
 * misses):
 *   A  global key; prefetch its home bucket
 *   B  re-pack epoch (acquire; odd: the re-pack cursor too); probe; prefetch the entry word and
 *      the stamp (a miss: the store map's slot of a hashed id)
 *   C  entry word lm1 (relaxed); prefetch every line of the row it names (a miss: find a hashed
 *      id's store row; prefetch the store row's lines)
 *   D  acquire fence; copy the row (and a hashed slot's owner); key2, acquire fence, lm2;
 *      stamp. A miss: acquire fence, emc__repack_raced, store read. Then the repeats up to
 *      the next position read (copy_repeats).
 * Anything unusual goes to read_row (emc__host_read_row) for that position, which starts over:
 * a BUSY or free entry word, a unified-index entry, a slot handle that is not the table's,
 * another id's slot (a hashed collision), a read that does not validate, a miss that a re-pack
 * may have raced (emc__repack_raced).
 *
 * Why the pipeline keeps the reader protocol of lib/item/index.h ("index"): for each position
 * it performs the protocol's steps in the protocol's order, only interleaved with other
 * positions' steps. The acquire fence of stage D follows (in program order) the load of lm1
 * in stage C of an earlier iteration and precedes the row loads, as step 3 requires; key2 is
 * loaded before the fence of step 6 and lm2 after it. For a miss, e1 (and lo1) are loaded
 * (acquire) before the probe in stage B and the epoch (and hi2) again after the fence of
 * stage D: later than read_row loads them, which only widens the window in which a re-pack
 * step is detected. A hashed id's store row is found in stage C, after the probe: an insert
 * publishes a new id in the store before its index entry, so an id missing from both was
 * missing at the instant of stage C. Prefetches are hints with no effect on ordering.
 *
 * Repeats (emc__cache_set_repeats, on by default). In a recommendation batch most positions
 * repeat an id that an earlier position of the same call has (83 % in emc-bench's default
 * trace: 17.7 K distinct ids among 106 K positions). Before the pipeline, plan_batch sends
 * each position either to the pipeline's list or, when a small direct-mapped filter (keyed by
 * table and id, lossy) holds an earlier position of the same (table, id), to the repeats;
 * as the pipeline finishes each position it reads, copy_repeats copies the repeats up to its
 * next one from their previous occurrence: the row from out, the kind, where code and key. A
 * repeat thus costs one recent row instead of the 4 lines of a hit (bucket, entry word, stamp,
 * row), and its source is still in cache (copying the repeats in a pass after the pipeline
 * was 13-20 % slower than reading them at dim 64 and 256: the sources had left the cache).
 * What a repeat returns is what the nearest earlier occurrence the filter kept returned, and
 * so on back to a position the pipeline read: a validated read, hence the row's value at one
 * instant during the call, which is what the header promises each position; the counts and
 * where codes are those of a second read of an unchanged row. A hit's stamp was written by
 * the position read. Measured (2026-11-27, 2 cores, one process alternating
 * calls between this read and the previous pipeline of commit 997463e, time per id of each,
 * ranges over 2-4 runs): emc-bench --all-hit --dim 16 1.43-1.45x faster, --dim 32 1.26-1.29x,
 * --dim 64 1.04-1.08x, --dim 256 0.98-1.12x; the default preset 0.98-1.31x (its admission
 * thread shares the 2 cores). Prefetching a repeat's source 8 repeats ahead was slower.
 */
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

#define PIPE_RING 64u /* > 3 * EMC__PIPE_D_MAX, a power of two; a call uses its first
                       * ring_mask + 1 slots (> 3 * d) */
_Static_assert(PIPE_RING > 3 * EMC__PIPE_D_MAX, "the ring holds every position in flight");

/* A cursor over the tables of a batch's positions, moved forward only: the table of
 * position k, its row bytes, and the byte offset in out of its first position. */
typedef struct tcur {
  uint64_t start, end; /* offsets[t], offsets[t + 1] */
  uint64_t base;       /* out's bytes before position start */
  uint32_t t, rb;
} tcur;

/* Before the first position: the first tcur_to moves to position k's table. */
static inline void tcur_init(tcur *c) {
  c->t = (uint32_t)-1;
  c->start = c->end = c->base = 0;
  c->rb = 0;
}

static inline void tcur_to(tcur *c, const emc_store *s, const uint64_t *offsets, uint64_t k) {
  while (k >= c->end) {
    c->base += (c->end - c->start) * c->rb;
    c->t++;
    c->start = c->end;
    c->end = offsets[c->t + 1];
    c->rb = s->tables[c->t].row_bytes;
  }
}

enum { P_HIT = 0, P_MISS = 1, P_SLOW = 2 };
typedef struct pipe_slot {
  uint64_t k;                /* the batch position */
  unsigned char *dst;        /* its row in out */
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

/* A position whose (table, id) an earlier position of the call also has: its row is a copy of
 * that position's (dup_pair). */
typedef struct dup_pair {
  uint32_t k, src;
} dup_pair;

/* The repeated positions copied so far: dups[0, i); cur is the table cursor over them. */
typedef struct repeats {
  const dup_pair *dups;
  uint64_t n, i;
  tcur cur;
} repeats;

/* What every stage needs: the call's arguments and constants (no array that is indexed by a
 * variable, so the compiler keeps the fields in registers; the ring is apart). */
typedef struct pipe {
  emc_cache *c;
  emc__host_cache *h;
  const emc_store *s;
  emc__index_view ix;   /* a copy: the index never moves during a cache's life */
  const uint64_t *ids, *offsets;
  const uint32_t *list; /* the positions the pipeline reads, in increasing order */
  uint64_t *keys;       /* the key of each position to admit (EMC__R_ADMIT) */
  uint8_t *kind, *where;
  uint64_t *cnt;        /* 16 counts, by kind */
  unsigned char *out;
  uint64_t now;
  uint64_t d;           /* positions between two stages (pipe_distance) */
  uint64_t ring_mask;   /* the ring's slots in use, less one: a power of two > 3 * d */
  repeats *rep;         /* the repeated positions (LIST) */
  uint64_t n_list, total;
  tcur a;               /* stage A's table cursor */
  const emc__table *a_tb; /* its table */
  unsigned char *a_dst;   /* the next position's row (every position read, in order) */
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

/* A row of out to another position of out: private memory, any alignment (rows of 6 bytes) */
static inline __attribute__((always_inline)) void copy_row(unsigned char *d, const unsigned char *s,
                                                           uint32_t rb) {
  uint32_t o;
  if (rb & 15u) {
    memcpy(d, s, rb);
    return;
  }
  for (o = 0; o < rb; o += 16) memcpy(d + o, s + o, 16); /* one vector load and store each */
}

/* Copy the repeated positions below `limit`, in increasing order: each copies an earlier
 * position's row (read by the pipeline, or copied here before it), kind, key and where code.
 * The pipeline calls it as each position it read is done, up to its next position, so a
 * repeat's source is recent (in cache) when it is copied. */
static inline __attribute__((always_inline)) void copy_repeats(const pipe *P, repeats *R,
                                                               uint64_t limit) {
  while (R->i < R->n && R->dups[R->i].k < limit) {
    uint64_t k = R->dups[R->i].k, src = R->dups[R->i].src;
    uint8_t r = P->kind[src];
    tcur_to(&R->cur, P->s, P->offsets, k);
    copy_row(P->out + R->cur.base + (k - R->cur.start) * R->cur.rb,
             P->out + R->cur.base + (src - R->cur.start) * R->cur.rb, R->cur.rb);
    P->kind[k] = r;
    if (r & EMC__R_ADMIT) P->keys[k] = P->keys[src];
    P->cnt[r & 15u]++;
    if (P->where) P->where[k] = P->where[src];
    R->i++;
  }
}

/* A: position list[i] and its table; prefetch its key's home bucket */
static inline __attribute__((always_inline)) void stage_a(pipe *P, pipe_slot *ring, uint64_t i,
                                                          const uint32_t KB, const int LIST) {
  pipe_slot *p = &ring[i & P->ring_mask];
  uint64_t k = LIST ? P->list[i] : i;
  if (k >= P->a.end) { /* the next table with ids: its key constants */
    const emc__table_code *tc;
    tcur_to(&P->a, P->s, P->offsets, k);
    tc = &P->c->codec.tables[P->a.t];
    P->a_hi = tc->fbits >= 64 ? 0 : tc->code << tc->fbits;
    P->a_mask = tc->fbits >= 64 ? ~0ull : ((1ull << tc->fbits) - 1u);
    P->a_shift = (tc->fbits + 1u) / 2u;
    P->a_dense = tc->kind == EMC_TABLE_DENSE;
    P->a_tb = &P->s->tables[P->a.t];
  }
  p->k = k;
  p->t = P->a.t;
  p->tb = P->a_tb;
  p->rb = P->a.rb;
  if (LIST) {
    p->dst = P->out + P->a.base + (k - P->a.start) * P->a.rb;
  } else { /* every position, in order: rows follow each other */
    p->dst = P->a_dst;
    P->a_dst += P->a.rb;
  }
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
static inline __attribute__((always_inline)) void stage_b(pipe *P, pipe_slot *ring, uint64_t i,
                                                          const uint32_t KB, const int LIST) {
  pipe_slot *p = &ring[i & P->ring_mask];
  const uint64_t k = LIST ? p->k : i;
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
static inline __attribute__((always_inline)) void stage_c(pipe *P, pipe_slot *ring, uint64_t i,
                                                          const int LIST) {
  pipe_slot *p = &ring[i & P->ring_mask];
  const uint64_t k = LIST ? p->k : i;
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
static inline __attribute__((always_inline)) void stage_d(pipe *P, pipe_slot *ring, uint64_t i,
                                                          const uint32_t KB, const int WH,
                                                          const int LIST) {
  pipe_slot *p = &ring[i & P->ring_mask];
  const uint64_t k = LIST ? p->k : i;
  uint8_t r = 0xff;
  EMC_FENCE_ACQUIRE();
  if (p->state == P_HIT) {
    uint64_t owner = p->owner ? EMC_LD_RELAXED(p->owner) : P->ids[k], key2, lm2;
    emc__row_load(p->dst, p->src, p->rb);
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
  } else if (p->state == P_MISS && emc__repack_raced(P->h, p->e1, p->lo1, p->b, P->ix.n_buckets)) {
    EMC__CNT_ADD(P->h->n_retries, 1);
  } else if (p->state == P_MISS) {
    if (p->pos < 0) {
      memset(p->dst, 0, p->rb);
      r = EMC__R_ABSENT;
    } else {
      emc__store_row_read(P->s, p->t, (uint64_t)p->pos, p->dst);
      r = EMC__R_STORE | EMC__R_ADMIT;
    }
  }
  if (r == 0xff) { /* start over */
    EMC__TP(EMC__TP_READ, "read: the pipeline hands the position to read_row");
    r = emc__host_read_row(P->c, p->t, P->ids[k], p->key, p->dst, P->now);
  }
  if (r & EMC__R_ADMIT) P->keys[k] = p->key; /* the keys admission reads */
  P->kind[k] = r;
  P->cnt[r & 15u]++;
  if (WH) P->where[k] = emc__where_of(r);
  if (LIST) copy_repeats(P, P->rep, i + 1 < P->n_list ? P->list[i + 1] : P->total);
}

/* The pipeline for a key width, and whether where[] is written, known at compile time. */
static inline __attribute__((always_inline)) void pipe_run(pipe *P, uint64_t total,
                                                           const uint32_t KB, const int WH,
                                                           const int LIST) {
  pipe_slot ring[PIPE_RING];
  const uint64_t d = P->d;
  uint64_t j;
  for (j = 0; j < total + 3 * d; j++) {
    if (j >= 3 * d && j < total) { /* the steady state: every stage has a position */
      stage_a(P, ring, j, KB, LIST);
      stage_b(P, ring, j - d, KB, LIST);
      stage_c(P, ring, j - 2 * d, LIST);
      stage_d(P, ring, j - 3 * d, KB, WH, LIST);
      continue;
    }
    if (j < total) stage_a(P, ring, j, KB, LIST);
    if (j >= d && j - d < total) stage_b(P, ring, j - d, KB, LIST);
    if (j >= 2 * d && j - 2 * d < total) stage_c(P, ring, j - 2 * d, LIST);
    if (j >= 3 * d) stage_d(P, ring, j - 3 * d, KB, WH, LIST);
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

#define EMC__SEEN_SLOTS 4096u /* plan_batch's filter at most: 64 KiB (emc-bench --all-hit
                               * --dim 16: 1 Ki to 8 Ki slots ran alike) */
#define EMC__REPEATS_MIN 16u  /* smaller batches read every position (no scratch to allocate) */

/* One slot of plan_batch's direct-mapped filter: the last position of (table tp1 - 1, id). */
typedef struct seen_slot {
  uint64_t id;
  uint32_t pos, tp1;
} seen_slot;

/* Split positions [0, total) into those the pipeline reads (list, in order; returns their
 * number) and repeats (dups, in order; *n_dups): a position whose (table, id) the filter
 * `seen` (n_seen slots, a power of two, zeroed) holds from an earlier position is a repeat of
 * the last such position. The filter is direct-mapped and lossy: an id whose slot another id
 * took meanwhile is read again, which costs time, never a wrong row. Branch-free but for the
 * table loop: whether a position repeats one is as random as the trace. */
static uint64_t plan_batch(const emc_store *s, const uint64_t *ids, const uint64_t *offsets,
                           uint32_t *list, dup_pair *dups, uint64_t *n_dups, seen_slot *seen,
                           uint64_t n_seen) {
  uint64_t np = 0, nd = 0, k;
  unsigned shift = 64u;
  uint32_t t;
  while (n_seen > ((uint64_t)1 << (64u - shift))) shift--; /* n_seen == 2^(64 - shift) */
  for (t = 0; t < s->n_tables; t++) {
    const uint32_t tp1 = t + 1u; /* a zeroed slot matches no table */
    const uint64_t salt = (uint64_t)tp1 * EMC__MIX_MUL; /* tables apart in the filter */
    for (k = offsets[t]; k < offsets[t + 1]; k++) {
      const uint64_t id = ids[k];
      seen_slot *e = &seen[((id ^ salt) * EMC__MIX_MUL) >> shift];
      const int dup = (e->id == id) & (e->tp1 == tp1);
      dups[nd].k = (uint32_t)k; /* both written, one kept */
      dups[nd].src = e->pos;
      list[np] = (uint32_t)k;
      nd += (uint64_t)dup;
      np += (uint64_t)!dup;
      e->id = id;
      e->pos = (uint32_t)k;
      e->tp1 = tp1;
    }
  }
  *n_dups = nd;
  return np;
}

/* The batched read of positions [0, total) (host_cache.h). Repeats need scratch (12 bytes an
 * id and the filter); without it (no memory, or more than 2^32 ids) every position is read. */
void emc__host_read_pipelined(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              uint64_t total, unsigned char *out, uint64_t *keys, uint8_t *kind,
                              uint8_t *where, emc__tally *n, uint64_t now) {
  pipe P;
  repeats R;
  uint64_t cnt[16] = {0}, np = total, nd = 0, n_seen = EMC__SEEN_SLOTS;
  uint32_t *list = NULL;
  dup_pair *dups = NULL;
  seen_slot *seen = NULL;
  unsigned r;
  while (n_seen > 16 && n_seen * 4 > total) n_seen /= 2; /* about total / 4 slots, 16 to 4 Ki */
  if (c->host->repeats && total >= EMC__REPEATS_MIN && total <= UINT32_MAX &&
      total <= (SIZE_MAX - n_seen * sizeof *seen) / (sizeof *dups + sizeof *list))
    seen = emc__malloc(n_seen * sizeof *seen + total * (sizeof *dups + sizeof *list));
  if (seen) {
    dups = (dup_pair *)(seen + n_seen);
    list = (uint32_t *)(dups + total);
    memset(seen, 0, n_seen * sizeof *seen);
    np = plan_batch(c->store, ids, offsets, list, dups, &nd, seen, n_seen);
  }
  P.c = c;
  P.h = c->host;
  P.s = c->store;
  P.ix = c->host->ix;
  P.ids = ids;
  P.offsets = offsets;
  P.list = list;
  P.keys = keys;
  P.kind = kind;
  P.where = where;
  P.cnt = cnt;
  P.out = out;
  P.now = now;
  P.d = c->host->pipelined >= EMC__PIPE_D_MIN ? (uint64_t)c->host->pipelined
                                               : pipe_distance(c->store, offsets, total);
  P.ring_mask = 15u;
  while (P.ring_mask < 3u * P.d) P.ring_mask = 2u * P.ring_mask + 1u;
  P.stamp = emc__stamp_of(now);
  R.dups = dups;
  R.n = nd;
  R.i = 0;
  tcur_init(&R.cur);
  P.rep = &R;
  P.n_list = np;
  P.total = total;
  tcur_init(&P.a); /* stage A's first position moves the cursor and takes its constants */
  P.a_tb = NULL;
  P.a_hi = P.a_mask = 0;
  P.a_shift = 0;
  P.a_dense = 1;
  P.a_dst = out;
  if (np == total) {
    if (P.ix.key_bits == 32) {
      if (where) pipe_run(&P, np, 32, 1, 0);
      else pipe_run(&P, np, 32, 0, 0);
    } else {
      if (where) pipe_run(&P, np, 64, 1, 0);
      else pipe_run(&P, np, 64, 0, 0);
    }
  } else if (P.ix.key_bits == 32) {
    if (where) pipe_run(&P, np, 32, 1, 1);
    else pipe_run(&P, np, 32, 0, 1);
  } else {
    if (where) pipe_run(&P, np, 64, 1, 1);
    else pipe_run(&P, np, 64, 0, 1);
  }
  free(seen);
  for (r = 0; r < 16; r++) emc__tally_add(n, (uint8_t)r, cnt[r]);
}
