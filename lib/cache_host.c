/*
 * cache_host.c: the host backend of the global cache table.
 *
 * Structures (all flat arrays, one allocation each, usable unchanged in device memory):
 *   index   bucketed open addressing keyed by global keys (emc_item.h), two copies: writers
 *           change the current copy in place; a rebuild (to clear tombstones) fills the other
 *           copy and publishes it, so readers never wait for a rebuild.
 *   arena   equal pages; each table's sub-pool takes pages from the arena on demand and gives
 *           a page back when its last slot is freed, so the split of the budget between
 *           tables follows demand. Slot versions, stamps and owners live in the page.
 *
 * Concurrency
 *   One writer lock serializes every change (admission, insert, eviction, flush, rebuild).
 *   Lookups take no lock to resolve and copy: a slot read is validated by the slot version,
 *   owner and page tag (emc__slot_read); a miss by the index epoch (unchanged => no rebuild
 *   raced the probe); a store row by its stripe version. A lookup's admissions use trylock:
 *   when another thread holds the lock they are skipped (counted in admit_skipped).
 *
 * Lookup = resolve, then copy, then admit
 *   resolve  every position to a slot (hit), a store row (miss: dense by computation, hashed
 *            through a unified-index entry or the store's map) or absent;
 *   copy     every row to `out` (slot rows validated; a failed validation re-resolves);
 *   admit    misses into the cache under the lock, re-reading the store row there (store
 *            rows change only under this lock, so the admitted value is current).
 *
 * Eviction (approximate LRU between two thresholds)
 *   An admission or insert that would push bytes in use above t1 * capacity first runs a pass:
 *   a histogram of slot stamps (one bucket per call when the stamps span <= 4096 calls),
 *   weighted by bytes, gives the cut-off; slots older than it are freed, oldest first, until
 *   bytes in use <= t2 * capacity. Dirty slots are written back before their entry goes.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define HIST_BUCKETS 4096u
#define INDEX_LOAD 0.70     /* live entries per index slot at most */
#define INDEX_REBUILD 0.85  /* rebuild when live + tombstones exceed this fraction */

enum { R_HIT = 0, R_STORE = 1, R_ABSENT = 2 };

typedef struct resolved {
  uint64_t loc;  /* R_HIT: pool loc; R_STORE: store row */
  uint8_t kind;  /* R_HIT / R_STORE / R_ABSENT */
  uint8_t unified; /* R_STORE found through a unified-index entry */
  uint8_t admit;   /* R_STORE that may be admitted (not a hashed collision) */
} resolved;

struct emc__host_cache {
  /* pool */
  unsigned char *arena;       /* n_pages * page_bytes, 64-byte aligned */
  size_t arena_bytes;
  uint64_t page_bytes;
  uint32_t n_pages;
  uint32_t free_page_head;    /* arena's free pages, linked by hdr.next */
  uint32_t free_pages;
  emc__page_layout *layout;   /* per table */
  uint32_t *partial_head;     /* per table: pages with free slots, linked by prev/next */
  uint64_t *rows_cached;      /* per table (atomic) */
  uint64_t *stamps;           /* n_pages * max_slots LRU stamps (see emc_item.h; atomic) */
  uint32_t max_slots;         /* slots per page of the densest layout */
  /* index */
  emc__index_view ix[2];
  size_t ix_bytes;            /* bytes of one copy */
  uint32_t cur;               /* current copy (atomic) */
  uint64_t epoch;             /* odd while a rebuild runs (atomic) */
  uint64_t ix_slots;          /* slots per copy */
  uint64_t ix_live, ix_tomb;  /* in the current copy (writer only) */
  uint64_t host_entries;      /* unified-index entries (writer only) */
  /* accounting */
  uint64_t bytes_in_use;      /* atomic */
  uint64_t pages_held;        /* atomic */
  uint64_t dirty_rows;        /* atomic */
  uint64_t high_bytes, low_bytes;
  uint64_t clock;             /* atomic; one tick per call */
  pthread_mutex_t lock;
  /* counters (atomic) */
  uint64_t n_lookups, n_hits, n_misses, n_absent, n_admissions, n_admit_skipped, n_inserts,
      n_evictions, n_writebacks, n_passes, n_retries, n_unified;
  /* debug */
  uint64_t passes_above_low, max_after_pass, calls_above_high, rebuilds;
  /* eviction scratch (writer only) */
  uint64_t *hist;             /* HIST_BUCKETS */
};

#define CNT_ADD(field, v) __atomic_fetch_add(&(field), (v), __ATOMIC_RELAXED)

static inline unsigned char *page_at(const emc__host_cache *h, uint64_t p) {
  return h->arena + p * h->page_bytes;
}
static inline emc__page_hdr *hdr_at(const emc__host_cache *h, uint64_t p) {
  return (emc__page_hdr *)page_at(h, p);
}
static inline size_t stamps_bytes(const emc__host_cache *h) {
  return (size_t)h->n_pages * h->max_slots * sizeof(uint64_t);
}
/* LRU stamp of slot s of page p: outside the page, so any stale write hits a stamp. */
static inline uint64_t *slot_stamp(const emc__host_cache *h, uint64_t p, uint32_t s) {
  return h->stamps + p * h->max_slots + s;
}

/* ================================================================= pool geometry */
emc_status emc__pool_geometry(const emc_cache *c, emc__pool_geom *g, emc__page_layout *layout) {
  const emc_store *s = c->store;
  uint32_t t, n = s->n_tables, max_stride = 0;
  uint64_t min_page_rows_bytes = UINT64_MAX, p;
  memset(g, 0, sizeof *g);
  for (t = 0; t < n; t++)
    if (s->tables[t].stride > max_stride) max_stride = s->tables[t].stride;
  g->high_bytes = emc__u64_scale(c->cfg.capacity_bytes, c->cfg.evict_high);
  g->low_bytes = emc__u64_scale(c->cfg.capacity_bytes, c->cfg.evict_low);
  if (g->high_bytes < max_stride || g->low_bytes == 0)
    return EMC_FAIL(EMC_EINVAL,
                    "capacity_bytes %zu with t2 = %g, t1 = %g leaves no room for one row of %u bytes",
                    c->cfg.capacity_bytes, (double)c->cfg.evict_low, (double)c->cfg.evict_high,
                    max_stride);
  /* Page size: a power of two holding >= 8 rows of the widest table; larger (up to 256 KiB)
   * while the budget still spans >= 8 pages per table, to keep per-page overhead low. */
  g->page_bytes = 4096;
  while (emc__layout_for(g->page_bytes, max_stride).n_slots < 8) g->page_bytes <<= 1;
  while (g->page_bytes < (256u << 10) && c->cfg.capacity_bytes / (g->page_bytes * 2) >= 8ull * n)
    g->page_bytes <<= 1;
  for (t = 0; t < n; t++) {
    layout[t] = emc__layout_for(g->page_bytes, s->tables[t].stride);
    if ((uint64_t)layout[t].n_slots * layout[t].stride < min_page_rows_bytes)
      min_page_rows_bytes = (uint64_t)layout[t].n_slots * layout[t].stride;
    if (layout[t].n_slots > g->max_slots) g->max_slots = layout[t].n_slots;
  }
  /* Enough pages for capacity_bytes of rows in the least dense layout, plus one partly used
   * page per table. */
  p = emc__u64_div_ceil(c->cfg.capacity_bytes, min_page_rows_bytes) + n; /* no wrap near 2^64 */
  if (p > 0x7fffffffull || p * g->max_slots > 0xffffffffull)
    return EMC_FAIL(EMC_EINVAL, "capacity_bytes %zu needs %llu pages of %llu bytes; at most 2^31 - 1 "
                    "pages and 2^32 slots", c->cfg.capacity_bytes, (unsigned long long)p,
                    (unsigned long long)g->page_bytes);
  g->n_pages = (uint32_t)p;
  g->max_stride = max_stride;
  return EMC_OK;
}

/* ================================================================= create/destroy */
emc_status emc__host_create(emc_cache *c) {
  emc__host_cache *h;
  const emc_store *s = c->store;
  uint32_t t, n = s->n_tables, max_slots = 0;
  uint64_t max_live, p;
  emc__pool_geom g;
  emc_status st;
  if (!(h = emc__calloc(1, sizeof *h))) return EMC_FAIL(EMC_ENOMEM, "cache state");
  c->host = h;
  h->layout = emc__calloc(n, sizeof *h->layout);
  h->partial_head = emc__calloc(n, sizeof *h->partial_head);
  h->rows_cached = emc__calloc(n, sizeof *h->rows_cached);
  h->hist = emc__calloc(HIST_BUCKETS, sizeof *h->hist);
  if (!h->layout || !h->partial_head || !h->rows_cached || !h->hist ||
      pthread_mutex_init(&h->lock, NULL) != 0) {
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cache tables");
  }
  if ((st = emc__pool_geometry(c, &g, h->layout)) != EMC_OK) {
    emc__host_destroy(c);
    return st;
  }
  h->high_bytes = g.high_bytes;
  h->low_bytes = g.low_bytes;
  h->page_bytes = g.page_bytes;
  max_slots = g.max_slots;
  for (t = 0; t < n; t++) h->partial_head[t] = EMC__PAGE_NONE;
  p = g.n_pages;
  h->n_pages = g.n_pages;
  h->max_slots = max_slots;
  {
    size_t stamp_bytes;
    if (!emc__size_mul64(p, h->page_bytes, &h->arena_bytes) ||
        !emc__size_mul64((uint64_t)p * max_slots, sizeof(uint64_t), &stamp_bytes)) {
      h->arena_bytes = 0; /* nothing allocated: destroy frees nothing */
      st = EMC_FAIL(EMC_ENOMEM, "a pool of %llu pages of %llu bytes overflows size_t",
                    (unsigned long long)p, (unsigned long long)h->page_bytes);
      emc__host_destroy(c);
      return st;
    }
    h->arena = emc__alloc(h->arena_bytes, 64, 0);
    h->stamps = emc__alloc(stamp_bytes, 64, 1);
    if (!h->arena || !h->stamps) {
      /* the detail first: it reads h, which emc__host_destroy frees */
      st = EMC_FAIL(EMC_ENOMEM, "cannot allocate the %zu-byte pool arena and its %zu bytes of stamps",
                    h->arena_bytes, stamp_bytes);
      emc__host_destroy(c);
      return st;
    }
  }
  h->free_page_head = EMC__PAGE_NONE;
  for (p = h->n_pages; p-- > 0;) {
    emc__page_hdr *ph = hdr_at(h, p);
    memset(ph, 0, sizeof *ph);
    ph->tag = EMC__PAGE_NONE;
    ph->next = h->free_page_head;
    h->free_page_head = (uint32_t)p;
  }
  h->free_pages = h->n_pages;

  /* Index: every slot that can be live, plus the unified-index entries, at load INDEX_LOAD. */
  /* (pages * slots <= 2^32 and unified_index_rows <= 2^32 were checked: no wrap here) */
  max_live = (uint64_t)h->n_pages * max_slots + c->cfg.unified_index_rows;
  h->ix_slots = (uint64_t)((double)max_live / INDEX_LOAD) + EMC__BUCKET;
  h->ix_slots = (h->ix_slots + EMC__BUCKET - 1) / EMC__BUCKET * EMC__BUCKET;
  {
    size_t col_bytes;
    if (!emc__size_mul64(h->ix_slots, sizeof(uint64_t), &col_bytes) ||
        !emc__size_mul(col_bytes, 3, &h->ix_bytes)) {
      st = EMC_FAIL(EMC_ENOMEM, "an index of %llu slots overflows size_t",
                    (unsigned long long)h->ix_slots);
      emc__host_destroy(c);
      return st;
    }
  }
  for (t = 0; t < 2; t++) {
    emc__index_view *ix = &h->ix[t];
    uint64_t i, empty = emc__key_empty(c->codec.key_bits);
    ix->n_buckets = h->ix_slots / EMC__BUCKET;
    ix->keys = emc__alloc(h->ix_slots * sizeof(uint64_t), 64, 0);
    ix->ids = emc__alloc(h->ix_slots * sizeof(uint64_t), 64, 1);
    ix->locs = emc__alloc(h->ix_slots * sizeof(uint64_t), 64, 1);
    if (!ix->keys || !ix->ids || !ix->locs) {
      /* the detail first: it reads h, which emc__host_destroy frees */
      st = EMC_FAIL(EMC_ENOMEM, "cannot allocate the index (%llu slots)",
                    (unsigned long long)h->ix_slots);
      emc__host_destroy(c);
      return st;
    }
    for (i = 0; i < h->ix_slots; i++) ix->keys[i] = empty;
  }
  return EMC_OK;
}

void emc__host_destroy(emc_cache *c) {
  emc__host_cache *h = c->host;
  int t;
  if (!h) return;
  for (t = 0; t < 2; t++) {
    emc__free(h->ix[t].keys, h->ix_slots * sizeof(uint64_t));
    emc__free(h->ix[t].ids, h->ix_slots * sizeof(uint64_t));
    emc__free(h->ix[t].locs, h->ix_slots * sizeof(uint64_t));
  }
  emc__free(h->arena, h->arena_bytes);
  emc__free(h->stamps, stamps_bytes(h));
  if (h->layout) pthread_mutex_destroy(&h->lock);
  free(h->layout);
  free(h->partial_head);
  free(h->rows_cached);
  free(h->hist);
  free(h);
  c->host = NULL;
}

/* ================================================================= pool (writer only) */
static void partial_unlink(emc__host_cache *h, uint32_t t, uint32_t p) {
  emc__page_hdr *ph = hdr_at(h, p);
  if (ph->prev != EMC__PAGE_NONE) hdr_at(h, ph->prev)->next = ph->next;
  else h->partial_head[t] = ph->next;
  if (ph->next != EMC__PAGE_NONE) hdr_at(h, ph->next)->prev = ph->prev;
  ph->in_partial = 0;
}

static void partial_push(emc__host_cache *h, uint32_t t, uint32_t p) {
  emc__page_hdr *ph = hdr_at(h, p);
  ph->prev = EMC__PAGE_NONE;
  ph->next = h->partial_head[t];
  if (ph->next != EMC__PAGE_NONE) hdr_at(h, ph->next)->prev = p;
  h->partial_head[t] = p;
  ph->in_partial = 1;
}

/* A free slot of table t, taking a page from the arena if needed. 0 when none is left. */
static int pool_alloc(emc__host_cache *h, uint32_t t, uint32_t *page, uint32_t *slot) {
  const emc__page_layout *L = &h->layout[t];
  uint32_t p = h->partial_head[t], s;
  emc__page_hdr *ph;
  if (p == EMC__PAGE_NONE) {
    uint32_t i;
    unsigned char *pg;
    if (h->free_page_head == EMC__PAGE_NONE) return 0;
    p = h->free_page_head;
    pg = page_at(h, p);
    ph = (emc__page_hdr *)pg;
    h->free_page_head = ph->next;
    h->free_pages--;
    ph->n_slots = L->n_slots;
    ph->live = 0;
    ph->free_head = 0;
    for (i = 0; i < L->n_slots; i++) {
      EMC_ST_RELAXED(emc__slot_seq(pg, L, i), 0u);
      EMC_ST_RELAXED(emc__slot_flags(pg, L, i), (uint8_t)0);
      EMC_ST_RELAXED(emc__slot_owner(pg, L, i), 0ull);
      EMC_ST_RELAXED(slot_stamp(h, p, i), 0ull);
      /* atomic stores: a stale reader may still probe this memory under the old layout */
      EMC_ST_RELAXED(emc__slot_next(pg, L, i), i + 1 < L->n_slots ? i + 1 : EMC__PAGE_NONE);
    }
    /* New generation: a reader holding a location from the page's previous life fails. */
    EMC_ST_RELEASE(&ph->tag, (((ph->tag >> 32) + 1u) << 32) | t);
    partial_push(h, t, p);
    __atomic_fetch_add(&h->pages_held, 1, __ATOMIC_RELAXED);
  }
  ph = hdr_at(h, p);
  s = ph->free_head;
  ph->free_head = *emc__slot_next(page_at(h, p), L, s);
  ph->live++;
  if (ph->free_head == EMC__PAGE_NONE) partial_unlink(h, t, p);
  *page = p;
  *slot = s;
  return 1;
}

static void pool_free(emc__host_cache *h, uint32_t t, uint32_t p, uint32_t s) {
  const emc__page_layout *L = &h->layout[t];
  emc__page_hdr *ph = hdr_at(h, p);
  EMC_ST_RELAXED(emc__slot_next(page_at(h, p), L, s), ph->free_head);
  ph->free_head = s;
  ph->live--;
  if (!ph->in_partial) partial_push(h, t, p);
  if (ph->live == 0) { /* the page goes back to the arena for any table */
    partial_unlink(h, t, p);
    EMC_ST_RELEASE(&ph->tag, (((ph->tag >> 32) + 1u) << 32) | EMC__PAGE_NONE);
    ph->next = h->free_page_head;
    h->free_page_head = p;
    h->free_pages++;
    __atomic_fetch_sub(&h->pages_held, 1, __ATOMIC_RELAXED);
  }
}

/* ================================================================= index (writer side) */
static emc__index_view *ix_cur(emc__host_cache *h) { return &h->ix[h->cur]; }

/* Position of (key, id) in the current copy, or -1. */
static int64_t ix_find_entry(emc_cache *c, uint64_t key) {
  return emc__index_find(ix_cur(c->host), key, emc__key_empty(c->codec.key_bits));
}

/* Put an entry into copy ix at the first free (empty or tombstone) slot of key's probe path.
 * Returns 1 if it took an EMPTY slot, 0 for a tombstone. */
static int ix_put(emc__index_view *ix, uint64_t key, uint64_t id, uint64_t loc, uint64_t empty,
                  uint64_t tomb) {
  uint64_t b = emc__home_bucket(key, ix->n_buckets);
  for (;;) {
    uint64_t *k = ix->keys + b * EMC__BUCKET;
    unsigned s;
    for (s = 0; s < EMC__BUCKET; s++) {
      uint64_t v = EMC_LD_RELAXED(&k[s]);
      if (v == empty || v == tomb) {
        uint64_t i = b * EMC__BUCKET + s;
        EMC_ST_RELAXED(&ix->ids[i], id);
        EMC_ST_RELAXED(&ix->locs[i], loc);
        EMC_ST_RELEASE(&k[s], key);
        return v == empty;
      }
    }
    if (++b == ix->n_buckets) b = 0;
  }
}

/* Rebuild the index into the other copy, dropping tombstones, and publish it. */
static void ix_rebuild(emc_cache *c) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(c->codec.key_bits), tomb = emc__key_tomb(c->codec.key_bits), i;
  uint32_t other = 1u - h->cur;
  emc__index_view *src = &h->ix[h->cur], *dst = &h->ix[other];
  EMC_ST_RELAXED(&h->epoch, h->epoch + 1u); /* odd: misses seen from now on are re-probed */
  EMC_FENCE_RELEASE();
  for (i = 0; i < h->ix_slots; i++) EMC_ST_RELAXED(&dst->keys[i], empty);
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = EMC_LD_RELAXED(&src->keys[i]);
    if (k == empty || k == tomb) continue;
    ix_put(dst, k, EMC_LD_RELAXED(&src->ids[i]), EMC_LD_RELAXED(&src->locs[i]), empty, tomb);
  }
  EMC_ST_RELEASE(&h->cur, other);
  EMC_ST_RELEASE(&h->epoch, h->epoch + 1u);
  h->ix_tomb = 0;
  h->rebuilds++;
}

static void ix_insert(emc_cache *c, uint64_t key, uint64_t id, uint64_t loc) {
  emc__host_cache *h = c->host;
  if ((double)(h->ix_live + h->ix_tomb + 1) > INDEX_REBUILD * (double)h->ix_slots) ix_rebuild(c);
  if (!ix_put(ix_cur(h), key, id, loc, emc__key_empty(c->codec.key_bits),
              emc__key_tomb(c->codec.key_bits)))
    h->ix_tomb--;
  h->ix_live++;
}

static void ix_remove_at(emc_cache *c, int64_t pos) {
  emc__host_cache *h = c->host;
  EMC_ST_RELEASE(&ix_cur(h)->keys[pos], emc__key_tomb(c->codec.key_bits));
  h->ix_live--;
  h->ix_tomb++;
}

/* ================================================================= resolve (lock-free) */
static uint64_t host_stamp(uint64_t now) {
  return (now & EMC__LOC_HOST_STAMP_MASK) << EMC__LOC_HOST_STAMP_SHIFT;
}

/* Store path of a miss: dense rows by computation, hashed through the store's map. */
static void resolve_store(const emc_cache *c, uint32_t t, uint64_t id, resolved *r) {
  const emc__table *tb = &c->store->tables[t];
  r->unified = 0;
  r->admit = 1;
  if (tb->kind == EMC_TABLE_DENSE) {
    r->kind = R_STORE;
    r->loc = id;
  } else {
    int64_t row = emc__store_find(tb, id);
    if (row < 0) {
      r->kind = R_ABSENT;
      r->admit = 0;
    } else {
      r->kind = R_STORE;
      r->loc = (uint64_t)row;
    }
  }
}

static void resolve(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, resolved *r) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(c->codec.key_bits);
  for (;;) {
    uint64_t e1 = EMC_LD_ACQUIRE(&h->epoch);
    const emc__index_view *ix = &h->ix[EMC_LD_ACQUIRE(&h->cur)];
    int64_t pos = emc__index_find(ix, key, empty);
    int host_ok = 0;
    uint64_t loc = 0;
    if (pos >= 0) {
      uint64_t eid = EMC_LD_RELAXED(&ix->ids[pos]);
      loc = EMC_LD_ACQUIRE(&ix->locs[pos]);
      if (eid == id && !(loc & EMC__LOC_HOST)) {
        r->kind = R_HIT; /* validated when copied */
        r->loc = loc;
        return;
      }
      if (eid == id) {
        const emc__table *tb = &c->store->tables[t];
        uint64_t row = loc & EMC__LOC_HOST_ROW_MASK;
        host_ok = tb->kind == EMC_TABLE_HASHED && row < EMC_LD_ACQUIRE(&tb->count) &&
                  EMC_LD_RELAXED(&tb->row_ids[row]) == id;
      }
    }
    /* Not a slot: valid only if no rebuild raced the probe. */
    EMC_FENCE_ACQUIRE();
    if (EMC_LD_RELAXED(&h->epoch) != e1) continue;
    if (host_ok) {
      r->kind = R_STORE;
      r->loc = loc & EMC__LOC_HOST_ROW_MASK;
      r->unified = 1;
      r->admit = 1;
      return;
    }
    resolve_store(c, t, id, r);
    if (pos >= 0 && r->kind == R_STORE) {
      /* key present for another id: a hashed collision; serve from the store, never admit */
      uint64_t eid = EMC_LD_RELAXED(&ix->ids[pos]);
      if (eid != id) r->admit = 0;
    }
    return;
  }
}

/* Copy one resolved row to dst; re-resolves until a consistent copy is made.
 * Returns the final kind. */
static uint8_t copy_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, resolved *r,
                        unsigned char *dst, uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__table *tb = &c->store->tables[t];
  for (;;) {
    if (r->kind == R_HIT) {
      uint64_t p = emc__loc_page(r->loc);
      uint32_t s = emc__loc_slot(r->loc);
      if (p < h->n_pages) {
        unsigned char *pg = page_at(h, p);
        const emc__page_layout *L = &h->layout[t];
        if (emc__slot_read(pg, L, s, t, id, dst, tb->row_bytes)) {
          uint64_t *st = slot_stamp(h, p, s);
          if (EMC_LD_RELAXED(st) < now) EMC_ST_RELAXED(st, now); /* never backwards */
          return R_HIT;
        }
      }
      CNT_ADD(h->n_retries, 1);
      resolve(c, t, id, key, r);
      continue;
    }
    if (r->kind == R_STORE) {
      emc__store_row_read(c->store, t, r->loc, dst);
      return R_STORE;
    }
    memset(dst, 0, tb->row_bytes);
    return R_ABSENT;
  }
}

/* ================================================================= eviction (writer) */
/* Write a dirty slot back to its store row. */
static void write_back(emc_cache *c, uint32_t t, uint64_t id, const unsigned char *row) {
  emc__table *tb = &c->store->tables[t];
  uint64_t r = tb->kind == EMC_TABLE_DENSE ? id : (uint64_t)emc__store_find(tb, id);
  emc__store_row_write(c->store, t, r, row); /* hashed rows were reserved at insert */
  CNT_ADD(c->host->n_writebacks, 1);
}

static void evict_slot(emc_cache *c, uint32_t t, uint32_t p, uint32_t s) {
  emc__host_cache *h = c->host;
  const emc__page_layout *L = &h->layout[t];
  unsigned char *pg = page_at(h, p);
  const emc__table *tb = &c->store->tables[t];
  uint64_t id = EMC_LD_RELAXED(emc__slot_owner(pg, L, s));
  uint8_t fl = EMC_LD_RELAXED(emc__slot_flags(pg, L, s));
  uint64_t key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
  int64_t pos;
  /* 1. the store gets the row before anyone can miss it */
  if (fl & EMC__SLOT_DIRTY) {
    write_back(c, t, id, emc__slot_row(pg, L, s));
    __atomic_fetch_sub(&h->dirty_rows, 1, __ATOMIC_RELAXED);
  }
  /* 2. the entry goes (or becomes a unified-index entry to the host row) */
  pos = ix_find_entry(c, key);
  if (pos >= 0 && EMC_LD_RELAXED(&ix_cur(h)->ids[pos]) == id) {
    int64_t row;
    if (tb->kind == EMC_TABLE_HASHED && h->host_entries < c->cfg.unified_index_rows &&
        (row = emc__store_find(tb, id)) >= 0) {
      uint64_t stamp = EMC_LD_RELAXED(slot_stamp(h, p, s));
      EMC_ST_RELEASE(&ix_cur(h)->locs[pos], EMC__LOC_HOST | host_stamp(stamp) | (uint64_t)row);
      h->host_entries++;
    } else {
      ix_remove_at(c, pos);
    }
  }
  /* 3. the slot is freed under its version */
  emc__slot_write_begin(pg, L, s);
  EMC_ST_RELAXED(emc__slot_flags(pg, L, s), (uint8_t)0);
  emc__slot_write_end(pg, L, s);
  pool_free(h, t, p, s);
  __atomic_fetch_sub(&h->bytes_in_use, L->stride, __ATOMIC_RELAXED);
  __atomic_fetch_sub(&h->rows_cached[t], 1, __ATOMIC_RELAXED);
  CNT_ADD(h->n_evictions, 1);
}

/* Drop unified-index entries stamped before `cutoff` (coarse stamps, wrap-aware). */
static void drop_old_host_entries(emc_cache *c, uint64_t now, uint64_t cutoff) {
  emc__host_cache *h = c->host;
  emc__index_view *ix = ix_cur(h);
  uint64_t empty = emc__key_empty(c->codec.key_bits), tomb = emc__key_tomb(c->codec.key_bits), i;
  uint64_t max_age = (now - cutoff) & EMC__LOC_HOST_STAMP_MASK;
  for (i = 0; i < h->ix_slots && h->host_entries > 0; i++) {
    uint64_t k = EMC_LD_RELAXED(&ix->keys[i]), loc;
    if (k == empty || k == tomb) continue;
    loc = EMC_LD_RELAXED(&ix->locs[i]);
    if (!(loc & EMC__LOC_HOST)) continue;
    if (((now - (loc >> EMC__LOC_HOST_STAMP_SHIFT)) & EMC__LOC_HOST_STAMP_MASK) > max_age) {
      ix_remove_at(c, (int64_t)i);
      h->host_entries--;
    }
  }
}

/* A live slot's stamp clamped into [min_stamp, now]: a racing reader may restamp a slot
 * between the scans of a pass. */
static uint64_t clamped_stamp(const emc__host_cache *h, uint32_t p, uint32_t s, uint64_t now,
                              uint64_t min_stamp) {
  uint64_t st = EMC_LD_RELAXED(slot_stamp(h, p, s));
  if (st > now) st = now;
  return st < min_stamp ? min_stamp : st;
}

/* The two read-only scans of a pass over the live slots: with hist NULL, the oldest stamp
 * (returned, at most now); otherwise adds each slot's stride to its stamp bucket. */
static uint64_t scan_stamps(const emc__host_cache *h, uint64_t now, uint64_t min_stamp,
                            uint64_t width, uint64_t *hist) {
  uint32_t p, s;
  for (p = 0; p < h->n_pages; p++) {
    emc__page_hdr *ph = hdr_at(h, p);
    uint32_t t = (uint32_t)ph->tag;
    unsigned char *pg = (unsigned char *)ph;
    const emc__page_layout *L;
    if (t == EMC__PAGE_NONE) continue;
    L = &h->layout[t];
    for (s = 0; s < L->n_slots; s++) {
      if (!(*emc__slot_flags(pg, L, s) & EMC__SLOT_LIVE)) continue;
      if (!hist) {
        uint64_t st = EMC_LD_RELAXED(slot_stamp(h, p, s));
        if (st < min_stamp) min_stamp = st;
      } else {
        hist[(clamped_stamp(h, p, s, now, min_stamp) - min_stamp) / width] += L->stride;
      }
    }
  }
  return min_stamp;
}

/* Evict live slots, in arena order, whose stamp bucket ((stamp - min_stamp) / width, stamps
 * clamped into [min_stamp, now]) is <= max_bucket, until freed >= need. Returns freed. */
static uint64_t evict_upto(emc_cache *c, uint64_t now, uint64_t min_stamp, uint64_t width,
                           uint64_t max_bucket, uint64_t need, uint64_t freed) {
  emc__host_cache *h = c->host;
  uint32_t p;
  for (p = 0; p < h->n_pages && freed < need; p++) {
    emc__page_hdr *ph = hdr_at(h, p);
    uint32_t t = (uint32_t)ph->tag, s;
    const emc__page_layout *L;
    unsigned char *pg = (unsigned char *)ph;
    if (t == EMC__PAGE_NONE) continue;
    L = &h->layout[t];
    for (s = 0; s < L->n_slots && freed < need; s++) {
      uint64_t st;
      if (!(*emc__slot_flags(pg, L, s) & EMC__SLOT_LIVE)) continue;
      st = clamped_stamp(h, p, s, now, min_stamp);
      if ((st - min_stamp) / width > max_bucket) continue;
      freed += L->stride;
      evict_slot(c, t, p, s);
      if ((uint32_t)ph->tag != t) break; /* the page went back to the arena */
    }
  }
  return freed;
}

/* One eviction pass: free least-recently-used slots until bytes in use <= t2 * capacity. */
static void evict_pass(emc_cache *c, uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t in_use = __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED);
  uint64_t need = in_use > h->low_bytes ? in_use - h->low_bytes : 0;
  uint64_t min_stamp, span, width, acc = 0, freed = 0;
  uint32_t cut = 0, b;
  if (need == 0) return;
  CNT_ADD(h->n_passes, 1);
  /* scan 1: oldest stamp; scan 2: bytes per stamp bucket */
  min_stamp = scan_stamps(h, now, now, 1, NULL);
  span = now - min_stamp + 1;
  width = (span + HIST_BUCKETS - 1) / HIST_BUCKETS;
  memset(h->hist, 0, HIST_BUCKETS * sizeof *h->hist);
  scan_stamps(h, now, min_stamp, width, h->hist);
  for (b = 0; b < HIST_BUCKETS; b++) {
    acc += h->hist[b];
    if (acc >= need) break;
  }
  cut = b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
  /* scan 3: every slot in buckets below the cut (together less than need), then the cut
   * bucket in arena order until enough is free; then, if readers restamped slots above the
   * cut since scan 2, anything in arena order, so every pass ends at or below t2 */
  if (cut > 0) freed = evict_upto(c, now, min_stamp, width, cut - 1, need, freed);
  freed = evict_upto(c, now, min_stamp, width, cut, need, freed);
  freed = evict_upto(c, now, min_stamp, width, UINT64_MAX, need, freed);
  /* Unified entries of earlier passes' victims (all older than anything still cached) go
   * once the unified index is three-quarters full; this pass's victims stay. */
  if (h->host_entries > 0 && h->host_entries >= c->cfg.unified_index_rows - c->cfg.unified_index_rows / 4)
    drop_old_host_entries(c, now, min_stamp);
  in_use = __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED);
  if (in_use > h->low_bytes) h->passes_above_low++;
  if (in_use > h->max_after_pass) h->max_after_pass = in_use;
}

/* Room for one more row of `stride` bytes within t1, running a pass if needed. */
static int make_room(emc_cache *c, uint32_t stride, uint64_t now) {
  emc__host_cache *h = c->host;
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) + stride > h->high_bytes)
    evict_pass(c, now);
  return __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) + stride <= h->high_bytes;
}

/* Fill a fresh slot with row and publish it for (t, id). Caller holds the lock, made room and
 * checked that no entry holds another id under key. pos: existing unified entry of id, or -1. */
static int admit_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, int64_t pos,
                     const unsigned char *row, int dirty, uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__page_layout *L = &h->layout[t];
  uint32_t p, s;
  unsigned char *pg;
  if (!pool_alloc(h, t, &p, &s)) return 0;
  pg = page_at(h, p);
  emc__slot_write_begin(pg, L, s);
  emc__row_store(emc__slot_row(pg, L, s), row, c->store->tables[t].row_bytes);
  EMC_ST_RELAXED(emc__slot_owner(pg, L, s), id);
  EMC_ST_RELAXED(slot_stamp(h, p, s), now);
  EMC_ST_RELAXED(emc__slot_flags(pg, L, s), (uint8_t)(EMC__SLOT_LIVE | (dirty ? EMC__SLOT_DIRTY : 0)));
  emc__slot_write_end(pg, L, s);
  __atomic_fetch_add(&h->bytes_in_use, L->stride, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->rows_cached[t], 1, __ATOMIC_RELAXED);
  if (dirty) __atomic_fetch_add(&h->dirty_rows, 1, __ATOMIC_RELAXED);
  if (pos >= 0) { /* unified entry -> slot */
    EMC_ST_RELEASE(&ix_cur(h)->locs[pos], emc__loc_pool(p, s));
    h->host_entries--;
  } else {
    ix_insert(c, key, id, emc__loc_pool(p, s));
  }
  return 1;
}

/* ================================================================= lookup */
/* Resolve positions [i0, i1) of table t; computes keys and prefetches their buckets first so
 * the probes of a group overlap their memory latency. */
#define GROUP 16
static void resolve_range(emc_cache *c, uint32_t t, const uint64_t *ids, uint64_t i0,
                          uint64_t i1, uint64_t *keys, resolved *res) {
  const emc__table_code *tc = &c->codec.tables[t];
  emc__host_cache *h = c->host;
  uint64_t i, j;
  for (i = i0; i < i1; i += GROUP) {
    uint64_t end = i + GROUP < i1 ? i + GROUP : i1;
    const emc__index_view *ix = &h->ix[EMC_LD_ACQUIRE(&h->cur)];
    for (j = i; j < end; j++) {
      keys[j] = emc__global_key(tc, ids[j], c->codec.hash_seed);
      __builtin_prefetch(ix->keys + emc__home_bucket(keys[j], ix->n_buckets) * EMC__BUCKET);
    }
    for (j = i; j < end; j++) resolve(c, t, ids[j], keys[j], &res[j]);
  }
}

emc_status emc__host_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                            void *out, uint8_t *where) {
  emc__host_cache *h = c->host;
  const emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], now, hits = 0, misses = 0, absent = 0, unified = 0;
  uint64_t to_admit = 0, i;
  uint64_t *keys;
  resolved *res;
  unsigned char *dst = out;
  uint32_t t;
  if (total == 0) return EMC_OK;
  {
    size_t kb, rb;
    if (!emc__size_mul64(total, sizeof *keys, &kb) || !emc__size_mul64(total, sizeof *res, &rb))
      return EMC_FAIL(EMC_ENOMEM, "lookup scratch for %llu ids overflows size_t",
                      (unsigned long long)total);
    keys = emc__malloc(kb);
    res = emc__malloc(rb);
  }
  if (!keys || !res) {
    free(keys);
    free(res);
    return EMC_FAIL(EMC_ENOMEM, "lookup scratch for %llu ids", (unsigned long long)total);
  }
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);

  /* phase 1: resolve every position */
  for (t = 0; t < s->n_tables; t++) resolve_range(c, t, ids, offsets[t], offsets[t + 1], keys, res);

  /* phase 2: copy every row */
  for (t = 0; t < s->n_tables; t++) {
    uint32_t rb = s->tables[t].row_bytes;
    for (i = offsets[t]; i < offsets[t + 1]; i++, dst += rb) {
      uint8_t k;
      if (i + 4 < offsets[t + 1] && res[i + 4].kind == R_HIT) {
        uint64_t p = emc__loc_page(res[i + 4].loc);
        if (p < h->n_pages)
          __builtin_prefetch(emc__slot_row(page_at(h, p), &h->layout[t], emc__loc_slot(res[i + 4].loc)));
      }
      k = copy_row(c, t, ids[i], keys[i], &res[i], dst, now);
      res[i].kind = k;
      if (where) where[i] = k == R_HIT ? EMC_WHERE_CACHE : k == R_STORE ? EMC_WHERE_STORE : EMC_WHERE_ABSENT;
      hits += k == R_HIT;
      misses += k == R_STORE;
      absent += k == R_ABSENT;
      unified += k == R_STORE && res[i].unified;
      to_admit += k == R_STORE && res[i].admit;
    }
  }
  CNT_ADD(h->n_lookups, total);
  CNT_ADD(h->n_hits, hits);
  CNT_ADD(h->n_misses, misses);
  CNT_ADD(h->n_absent, absent);
  CNT_ADD(h->n_unified, unified);

  /* phase 3: admit misses (skipped, not waited for, when another thread writes) */
  if (to_admit > 0) {
    uint64_t admitted = 0, skipped = 0;
    if (pthread_mutex_trylock(&h->lock) != 0) {
      skipped = to_admit;
    } else {
      /* one row of the widest table (not EMC_MAX_DIM's 256 KiB: an mmap/munmap pair per call
       * under allocators that map big blocks, such as ASan's) */
      uint32_t widest = 0;
      unsigned char *row;
      for (t = 0; t < s->n_tables; t++)
        if (s->tables[t].stride > widest) widest = s->tables[t].stride;
      row = emc__malloc(widest);
      for (t = 0; t < s->n_tables; t++) {
        const emc__table *tb = &s->tables[t];
        for (i = offsets[t]; i < offsets[t + 1]; i++) {
          int64_t pos;
          uint64_t srow;
          if (res[i].kind != R_STORE || !res[i].admit) continue;
          if (!row || !make_room(c, tb->stride, now)) {
            skipped++;
            continue;
          }
          /* after the pass: the entry of this key, if any, must be this id's unified entry */
          pos = ix_find_entry(c, keys[i]);
          if (pos >= 0 && EMC_LD_RELAXED(&ix_cur(h)->ids[pos]) != ids[i]) {
            skipped++; /* a hashed collision admitted meanwhile */
            continue;
          }
          if (pos >= 0 && !(EMC_LD_RELAXED(&ix_cur(h)->locs[pos]) & EMC__LOC_HOST))
            continue; /* cached meanwhile: a duplicate of this batch, or another thread */
          if (tb->kind == EMC_TABLE_DENSE) {
            srow = ids[i];
          } else {
            int64_t r = emc__store_find(tb, ids[i]);
            if (r < 0) continue;
            srow = (uint64_t)r;
          }
          /* the current store row: store rows change only under this lock */
          emc__row_load(row, emc__store_row(tb, srow), tb->row_bytes);
          if (admit_row(c, t, ids[i], keys[i], pos, row, 0, now)) admitted++;
          else skipped++;
        }
      }
      free(row);
      if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
      pthread_mutex_unlock(&h->lock);
    }
    CNT_ADD(h->n_admissions, admitted);
    CNT_ADD(h->n_admit_skipped, skipped);
  }
  free(keys);
  free(res);
  return EMC_OK;
}

/* ================================================================= insert */
emc_status emc__host_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                            const void *rows) {
  emc__host_cache *h = c->host;
  emc_store *s = c->store;
  const unsigned char *src = rows;
  uint64_t now, i, inserted = 0;
  uint32_t t;
  if (offsets[s->n_tables] == 0) return EMC_OK;
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&h->lock);
  /* hashed tables: the batch's new ids must fit the store's free capacity (checked under the
   * lock, before anything changes, so concurrent inserts cannot overfill a table) */
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t fresh, n = offsets[t + 1] - offsets[t];
    if (tb->kind != EMC_TABLE_HASHED || n == 0) continue;
    fresh = emc__count_new_ids(tb, ids + offsets[t], (size_t)n);
    if (fresh == (uint64_t)-1 || fresh > tb->rows - tb->count) {
      pthread_mutex_unlock(&h->lock);
      if (fresh == (uint64_t)-1)
        return EMC_FAIL(EMC_ENOMEM, "scratch set of %llu ids", (unsigned long long)n);
      return EMC_FAIL(EMC_ERANGE, "table %u ('%s'): %llu new ids exceed the free capacity %llu",
                      t, tb->name, (unsigned long long)fresh,
                      (unsigned long long)(tb->rows - tb->count));
    }
  }
  for (t = 0; t < s->n_tables; t++) {
    emc__table *tb = &s->tables[t];
    const emc__page_layout *L = &h->layout[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, src += tb->row_bytes) {
      uint64_t id = ids[i], key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
      int64_t pos, srow;
      uint64_t eid = 0, loc = 0;
      /* hashed ids get their store row now (holding this value, so readers that find the new
       * id in the store never see a placeholder), and a later write-back has a place */
      srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find_or_add(s, t, id, src);
      inserted++;
      pos = ix_find_entry(c, key);
      if (pos >= 0) {
        eid = EMC_LD_RELAXED(&ix_cur(h)->ids[pos]);
        loc = EMC_LD_RELAXED(&ix_cur(h)->locs[pos]);
      }
      if (pos >= 0 && eid == id && !(loc & EMC__LOC_HOST)) { /* cached: update in place */
        uint32_t p = (uint32_t)emc__loc_page(loc), sl = emc__loc_slot(loc);
        unsigned char *pg = page_at(h, p);
        uint8_t fl = EMC_LD_RELAXED(emc__slot_flags(pg, L, sl));
        emc__slot_write_begin(pg, L, sl);
        emc__row_store(emc__slot_row(pg, L, sl), src, tb->row_bytes);
        EMC_ST_RELAXED(emc__slot_flags(pg, L, sl), (uint8_t)(fl | EMC__SLOT_DIRTY));
        EMC_ST_RELAXED(slot_stamp(h, p, sl), now);
        emc__slot_write_end(pg, L, sl);
        if (!(fl & EMC__SLOT_DIRTY)) __atomic_fetch_add(&h->dirty_rows, 1, __ATOMIC_RELAXED);
        continue;
      }
      if (pos >= 0 && eid != id) { /* hashed collision: this id is never cached */
        emc__store_row_write(s, t, (uint64_t)srow, src);
        continue;
      }
      if (make_room(c, L->stride, now)) {
        pos = ix_find_entry(c, key); /* the pass may have dropped a unified entry */
        if (pos >= 0 && (EMC_LD_RELAXED(&ix_cur(h)->ids[pos]) != id ||
                         !(EMC_LD_RELAXED(&ix_cur(h)->locs[pos]) & EMC__LOC_HOST)))
          pos = -2; /* cannot happen under the lock; write through to stay safe */
        if (pos != -2 && admit_row(c, t, id, key, pos, src, 1, now)) continue;
      }
      /* no room (t1 too close to t2 for this row, or no page left): write through */
      emc__store_row_write(s, t, (uint64_t)srow, src);
    }
  }
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
  pthread_mutex_unlock(&h->lock);
  CNT_ADD(h->n_inserts, inserted);
  return EMC_OK;
}

/* ================================================================= flush */
emc_status emc__host_flush(emc_cache *c) {
  emc__host_cache *h = c->host;
  uint32_t p;
  pthread_mutex_lock(&h->lock);
  for (p = 0; p < h->n_pages; p++) {
    emc__page_hdr *ph = hdr_at(h, p);
    uint32_t t = (uint32_t)ph->tag, s;
    const emc__page_layout *L;
    unsigned char *pg = (unsigned char *)ph;
    if (t == EMC__PAGE_NONE) continue;
    L = &h->layout[t];
    for (s = 0; s < L->n_slots; s++) {
      uint8_t fl = EMC_LD_RELAXED(emc__slot_flags(pg, L, s));
      if ((fl & (EMC__SLOT_LIVE | EMC__SLOT_DIRTY)) != (EMC__SLOT_LIVE | EMC__SLOT_DIRTY)) continue;
      write_back(c, t, EMC_LD_RELAXED(emc__slot_owner(pg, L, s)), emc__slot_row(pg, L, s));
      /* only the dirty bit changes: readers check LIVE, not DIRTY, so no version bump */
      EMC_ST_RELAXED(emc__slot_flags(pg, L, s), (uint8_t)(fl & ~EMC__SLOT_DIRTY));
      __atomic_fetch_sub(&h->dirty_rows, 1, __ATOMIC_RELAXED);
    }
  }
  pthread_mutex_unlock(&h->lock);
  return EMC_OK;
}

/* ================================================================= stats and checks */
#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

void emc__host_stats(const emc_cache *c, emc_stats *o) {
  const emc__host_cache *h = c->host;
  uint32_t t;
  memset(o, 0, sizeof *o);
  o->lookups = LD(h->n_lookups);
  o->hits = LD(h->n_hits);
  o->misses = LD(h->n_misses);
  o->absent = LD(h->n_absent);
  o->admissions = LD(h->n_admissions);
  o->admit_skipped = LD(h->n_admit_skipped);
  o->inserts = LD(h->n_inserts);
  o->evictions = LD(h->n_evictions);
  o->writebacks = LD(h->n_writebacks);
  o->evict_passes = LD(h->n_passes);
  o->retries = LD(h->n_retries);
  o->unified_hits = LD(h->n_unified);
  for (t = 0; t < c->store->n_tables; t++) o->rows_cached += LD(h->rows_cached[t]);
  o->bytes_in_use = LD(h->bytes_in_use);
  o->bytes_reserved = LD(h->pages_held) * h->page_bytes;
  o->capacity_bytes = c->cfg.capacity_bytes;
  o->index_bytes = 2 * h->ix_bytes + stamps_bytes(h);
  o->dirty_rows = LD(h->dirty_rows);
}

uint64_t emc__host_table_rows(const emc_cache *c, uint32_t table) {
  return LD(c->host->rows_cached[table]);
}

emc_status emc__cache_get_debug(const emc_cache *c, emc__cache_debug *out) {
  emc__host_cache *h;
  if (!c || !out) return EMC_FAIL(EMC_EINVAL, "c or out is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "white-box checks cover the host backend only");
  h = c->host;
  pthread_mutex_lock(&h->lock);
  out->passes = LD(h->n_passes);
  out->passes_above_low = h->passes_above_low;
  out->max_bytes_after_pass = h->max_after_pass;
  out->calls_above_high = h->calls_above_high;
  out->low_bytes = h->low_bytes;
  out->high_bytes = h->high_bytes;
  out->index_rebuilds = h->rebuilds;
  pthread_mutex_unlock(&h->lock);
  return EMC_OK;
}

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      st = EMC_FAIL(EMC_ECORRUPT, __VA_ARGS__);        \
      goto out;                                        \
    }                                                  \
  } while (0)

emc_status emc__cache_check(emc_cache *c) {
  emc__host_cache *h;
  emc_status st = EMC_OK;
  uint64_t empty, tomb, i, live_entries = 0, tombs = 0, host_entries = 0, live_slots = 0,
                           bytes = 0, dirty = 0, free_pages = 0, held = 0;
  uint64_t *per_table = NULL;
  const emc__index_view *ix;
  uint32_t p, t;
  if (!c) return EMC_FAIL(EMC_EINVAL, "c is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "white-box checks cover the host backend only");
  h = c->host;
  empty = emc__key_empty(c->codec.key_bits);
  tomb = emc__key_tomb(c->codec.key_bits);
  per_table = emc__calloc(c->store->n_tables, sizeof *per_table);
  if (!per_table) return EMC_FAIL(EMC_ENOMEM, "check scratch");
  pthread_mutex_lock(&h->lock);
  ix = &h->ix[h->cur];
  /* pages and slots */
  for (p = h->free_page_head; p != EMC__PAGE_NONE; p = hdr_at(h, p)->next) {
    CHECK((uint32_t)hdr_at(h, p)->tag == EMC__PAGE_NONE, "free page %u has table %u", p,
          (uint32_t)hdr_at(h, p)->tag);
    CHECK(++free_pages <= h->n_pages, "free page list has a cycle");
  }
  CHECK(free_pages == h->free_pages, "free page count %llu, list has %llu",
        (unsigned long long)h->free_pages, (unsigned long long)free_pages);
  for (p = 0; p < h->n_pages; p++) {
    emc__page_hdr *ph = hdr_at(h, p);
    unsigned char *pg = (unsigned char *)ph;
    const emc__page_layout *L;
    uint32_t live = 0, nfree = 0, s, f;
    t = (uint32_t)ph->tag;
    if (t == EMC__PAGE_NONE) continue;
    held++;
    CHECK(t < c->store->n_tables, "page %u has table %u", p, t);
    L = &h->layout[t];
    CHECK(ph->n_slots == L->n_slots, "page %u: %u slots, layout says %u", p, ph->n_slots, L->n_slots);
    for (f = ph->free_head; f != EMC__PAGE_NONE; f = *emc__slot_next(pg, L, f)) {
      CHECK(f < L->n_slots, "page %u: free slot %u out of range", p, f);
      CHECK(!(*emc__slot_flags(pg, L, f) & EMC__SLOT_LIVE), "page %u: free slot %u is live", p, f);
      CHECK(++nfree <= L->n_slots, "page %u: free list cycle", p);
    }
    for (s = 0; s < L->n_slots; s++) {
      uint8_t fl = *emc__slot_flags(pg, L, s);
      uint64_t id, key;
      int64_t pos;
      CHECK(!(*emc__slot_seq(pg, L, s) & 1u), "page %u slot %u: odd version", p, s);
      if (!(fl & EMC__SLOT_LIVE)) continue;
      live++;
      id = *emc__slot_owner(pg, L, s);
      key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
      pos = emc__index_find(ix, key, empty);
      CHECK(pos >= 0, "table %u id %llu in page %u slot %u has no index entry", t,
            (unsigned long long)id, p, s);
      CHECK(ix->ids[pos] == id && ix->locs[pos] == emc__loc_pool(p, s),
            "table %u id %llu: index entry points elsewhere", t, (unsigned long long)id);
      bytes += L->stride;
      dirty += (fl & EMC__SLOT_DIRTY) != 0;
      per_table[t]++;
    }
    CHECK(live == ph->live, "page %u: live %u, header says %u", p, live, ph->live);
    CHECK(live + nfree == L->n_slots, "page %u: %u live + %u free != %u", p, live, nfree, L->n_slots);
    CHECK(live > 0, "page %u held by table %u with no live slot", p, t);
    CHECK(ph->in_partial == (nfree > 0), "page %u: partial flag %u with %u free", p, ph->in_partial, nfree);
    live_slots += live;
  }
  CHECK(held + free_pages == h->n_pages, "pages: %llu held + %llu free != %u",
        (unsigned long long)held, (unsigned long long)free_pages, h->n_pages);
  /* index */
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = ix->keys[i], loc = ix->locs[i], id = ix->ids[i];
    int64_t tt;
    if (k == empty) continue;
    if (k == tomb) {
      tombs++;
      continue;
    }
    live_entries++;
    tt = emc__codec_table_of(&c->codec, k);
    CHECK(tt >= 0, "index slot %llu: key %llx under no table's code", (unsigned long long)i,
          (unsigned long long)k);
    CHECK(k == emc__global_key(&c->codec.tables[tt], id, c->codec.hash_seed),
          "index slot %llu: key is not the global key of (%lld, %llu)", (unsigned long long)i,
          (long long)tt, (unsigned long long)id);
    CHECK(emc__index_find(ix, k, empty) == (int64_t)i, "index slot %llu: key found elsewhere",
          (unsigned long long)i);
    if (loc & EMC__LOC_HOST) {
      const emc__table *tb = &c->store->tables[tt];
      uint64_t row = loc & EMC__LOC_HOST_ROW_MASK;
      host_entries++;
      CHECK(tb->kind == EMC_TABLE_HASHED && row < tb->count && tb->row_ids[row] == id,
            "unified entry of table %lld id %llu points at a wrong row", (long long)tt,
            (unsigned long long)id);
    } else {
      uint64_t pg = emc__loc_page(loc);
      CHECK(pg < h->n_pages && (uint32_t)hdr_at(h, pg)->tag == (uint32_t)tt,
            "entry of table %lld id %llu points at page %llu of another table", (long long)tt,
            (unsigned long long)id, (unsigned long long)pg);
    }
  }
  CHECK(live_entries == h->ix_live && tombs == h->ix_tomb,
        "index counts: %llu live/%llu tombs, recorded %llu/%llu", (unsigned long long)live_entries,
        (unsigned long long)tombs, (unsigned long long)h->ix_live, (unsigned long long)h->ix_tomb);
  CHECK(host_entries == h->host_entries && host_entries <= c->cfg.unified_index_rows,
        "unified entries %llu, recorded %llu", (unsigned long long)host_entries,
        (unsigned long long)h->host_entries);
  CHECK(live_entries == live_slots + host_entries, "%llu entries != %llu slots + %llu unified",
        (unsigned long long)live_entries, (unsigned long long)live_slots,
        (unsigned long long)host_entries);
  CHECK(bytes == h->bytes_in_use, "bytes in use %llu, slots add up to %llu",
        (unsigned long long)h->bytes_in_use, (unsigned long long)bytes);
  CHECK(dirty == h->dirty_rows, "dirty rows %llu, recorded %llu", (unsigned long long)dirty,
        (unsigned long long)h->dirty_rows);
  CHECK(held * h->page_bytes == LD(h->pages_held) * h->page_bytes, "pages held mismatch");
  for (t = 0; t < c->store->n_tables; t++)
    CHECK(per_table[t] == h->rows_cached[t], "table %u: %llu rows cached, recorded %llu", t,
          (unsigned long long)per_table[t], (unsigned long long)h->rows_cached[t]);
out:
  pthread_mutex_unlock(&h->lock);
  free(per_table);
  return st;
}
