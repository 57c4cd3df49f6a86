/*
 * evict.c: the host backend's eviction pass (approximate LRU between two thresholds) and the
 * aging of LRU stamps. Writer only (the cache's writer lock is held).
 *
 * A pass runs when admitting or inserting a row would take the bytes in use above
 * t1 * capacity. It walks the index entries (each live pool entry carries its stamp):
 *   scan 1  a histogram of ages (now - stamp, 16-bit, clamped to EMC__AGE_CLAMP), weighted by
 *           the row's stride, EMC__HIST_BUCKETS buckets of 8 calls each (rows pinned by
 *           emc_prefetch are never evicted and not counted);
 *   need    what the admission in hand needs: use down to t2, and at least room for its row
 *           under t1: max(in_use - t2 * capacity, in_use + stride - t1 * capacity). The second
 *           term is larger only for a row wider than (t1 - t2) * capacity arriving while use
 *           already lies between t1 * capacity - stride and t2 * capacity; without it the
 *           pass would stop at t2, evict nothing, and the row would bypass the cache (or a
 *           prefetch fail to pin it) with evictable rows at hand;
 *   cut     from the oldest bucket down, the bucket where the bytes reach the need;
 *   scan 2  evict every entry older than the cut bucket, then entries of the cut bucket until
 *           the need is met, then, if readers restamped rows since scan 1, any entry but those
 *           touched by this call, and as a last resort any unpinned entry: every pass ends at
 *           or below t2 (pinned rows take at most t2 * capacity, train_host.c), and with room
 *           for the row under t1 unless pinned rows leave less (pinned + stride > t1).
 * Evicting writes a dirty row back to the store first, then removes the entry (or turns a
 * hashed row's entry into a unified-index entry pointing at its store row, while the unified
 * budget lasts), then frees the slot. emc__evict_holder evicts one given entry the same way
 * but leaves no unified-index entry (its key is wanted by another id: emc_prefetch). Unified
 * entries of earlier passes are dropped, all at once, when the unified index is three-quarters
 * full. emc__reclaim_page empties the page whose newest row is oldest, for a table that finds
 * no page (below).
 */
#include <string.h>

#include "host_cache.h"

#define AGE_WIDTH (EMC__AGE_CLAMP / EMC__HIST_BUCKETS) /* calls per histogram bucket */
#define RECLAIM_RETRY 64u /* ticks before a reclaim that found no page is tried again */

/* The histogram bucket of an age (the oldest bucket takes every age past it). */
static uint32_t age_bucket(uint32_t age) {
  return age / AGE_WIDTH < EMC__HIST_BUCKETS ? age / AGE_WIDTH : EMC__HIST_BUCKETS - 1;
}

/* h->hist's cut for `need`: from the oldest of buckets [0, top) down, the bucket where the
 * sum reaches it (*acc: that sum; every bucket's, when it never does, and then bucket 0).
 * The caller clears buckets [0, top) after: the histogram is all zero between uses. */
static uint32_t hist_cut(emc__host_cache *h, uint32_t top, uint64_t need, uint64_t *acc) {
  uint32_t cut;
  *acc = 0;
  for (cut = top; cut-- > 0;) {
    *acc += h->hist[cut];
    if (*acc >= need) break;
  }
  if (cut >= EMC__HIST_BUCKETS) cut = 0;
  return cut;
}

void emc__write_back(emc_cache *c, uint32_t t, uint64_t key, uint32_t loc) {
  emc__host_cache *h = c->host;
  emc__table *tb = &c->store->tables[t];
  const emc__page_layout *L = &h->layout[t];
  unsigned char *pg = emc__page_at(h, loc / h->max_slots);
  uint32_t s = loc % h->max_slots;
  int64_t row;
  if (tb->kind == EMC_TABLE_DENSE) {
    row = (int64_t)emc__codec_dense_id(&c->codec, t, key);
  } else {
    row = emc__store_find(tb, EMC_LD_RELAXED(emc__slot_owner(pg, L, s)));
    if (row < 0) return; /* cannot happen: hashed rows get their store row when cached */
  }
  emc__store_full_write(c->store, t, (uint64_t)row, emc__slot_row(pg, L, s)); /* row, state */
  EMC__WR_ADD(h->n_writebacks, 1);
}

/* Age of the entry at pos, with its stamp clamped (rewritten) to EMC__AGE_CLAMP. */
static uint32_t entry_age(emc__host_cache *h, uint64_t pos, uint64_t now) {
  uint16_t st = EMC_LD_RELAXED(&h->ix.stamps[pos]);
  uint32_t age = emc__stamp_age(now, st);
  if (age > EMC__AGE_CLAMP) {
    age = EMC__AGE_CLAMP;
    EMC_ST_RELAXED(&h->ix.stamps[pos], emc__stamp_of(now - EMC__AGE_CLAMP));
  }
  return age;
}

/* The clock a writer ages entries against: its call's, or a later one. A writer reads its
 * clock before it waits for the lock, and lookups that run meanwhile stamp rows with later
 * clocks; aged against the older clock those stamps would lie more than EMC__STAMP_AHEAD
 * ahead and wrap to the oldest (item/policy.h, "LRU stamps"). */
static uint64_t newest_clock(const emc__host_cache *h, uint64_t now) {
  uint64_t c = __atomic_load_n(&h->clock, __ATOMIC_RELAXED);
  return c > now ? c : now;
}

void emc__age_stamps(emc_cache *c, uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(h->ix.key_bits), tomb = emc__key_tomb(h->ix.key_bits), i;
  now = newest_clock(h, now);
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = emc__ix_key(&h->ix, i);
    if (k != empty && k != tomb) (void)entry_age(h, i, now);
  }
  __atomic_store_n(&h->aged_at, now, __ATOMIC_RELAXED);
}

/* The live, unpinned pool entry at pos, if any (what a pass may evict): its table, lm, key. */
static int pool_entry(const emc__host_cache *h, uint64_t pos, uint32_t *t, uint64_t *lm,
                      uint64_t *key) {
  uint64_t k = emc__ix_key(&h->ix, pos), l;
  if (k == emc__key_empty(h->ix.key_bits) || k == emc__key_tomb(h->ix.key_bits)) return 0;
  l = emc__ix_lm(&h->ix, pos);
  if ((emc__lm_loc(l) & EMC__LOC_HOST) || (l & EMC__LM_PINS)) return 0;
  *t = emc__hdr_at(h, emc__lm_loc(l) / h->max_slots)->table;
  *lm = l;
  *key = k;
  return 1;
}

/* Evict the pool entry (pos, key, lm) of table t; returns the bytes freed. A hashed row's
 * entry may stay as a unified-index entry (its store row) when `unified` allows. */
static uint32_t evict_entry(emc_cache *c, uint64_t pos, uint32_t t, uint64_t key, uint64_t lm,
                            int unified) {
  emc__host_cache *h = c->host;
  const emc__table *tb = &c->store->tables[t];
  uint32_t loc = emc__lm_loc(lm), stride = h->layout[t].stride;
  int64_t row = -1;
  /* 1. the store gets the row before anyone can miss it */
  if (lm & EMC__LM_DIRTY) {
    emc__write_back(c, t, key, loc);
    EMC__WR_SUB(h->dirty_rows, 1);
    EMC__TP(EMC__TP_WRITE, "evict: written back");
  }
  /* 2. the entry goes, or points at the hashed row's store row (a unified-index entry) */
  if (unified && tb->kind == EMC_TABLE_HASHED && h->host_entries < c->cfg.unified_index_rows) {
    unsigned char *pg = emc__page_at(h, loc / h->max_slots);
    row = emc__store_find(tb, EMC_LD_RELAXED(emc__slot_owner(pg, &h->layout[t], loc % h->max_slots)));
  }
  if (row >= 0 && (uint64_t)row <= EMC__LOC_MAX) {
    /* the write-back before the entry word that sends readers to the store row: a reader
     * that loads this word and then an acquire fence sees the written-back row */
    EMC_FENCE_RELEASE();
    EMC_ST_RELAXED(&h->ix.lm[pos], emc__lm_make(EMC__LOC_HOST | (uint32_t)row, emc__next_meta(h, 0)));
    EMC__TP(EMC__TP_WRITE, "evict: unified entry");
    EMC_FENCE_RELEASE(); /* before the slot can be reused */
    h->host_entries++;
  } else {
    emc__hix_remove(c, (int64_t)pos);
  }
  /* 3. the slot is free */
  emc__pool_free(h, t, loc);
  EMC__WR_SUB(h->bytes_in_use, stride);
  EMC__WR_SUB(h->rows_cached[t], 1);
  EMC__WR_ADD(h->n_evictions, 1);
  return stride;
}

uint32_t emc__evict_at(emc_cache *c, uint64_t pos) {
  uint32_t t;
  uint64_t lm, key;
  if (!pool_entry(c->host, pos, &t, &lm, &key)) return 0;
  return evict_entry(c, pos, t, key, lm, 1);
}

int emc__evict_holder(emc_cache *c, int64_t pos) {
  emc__host_cache *h = c->host;
  uint64_t lm = emc__ix_lm(&h->ix, (uint64_t)pos), key = emc__ix_key(&h->ix, (uint64_t)pos);
  uint32_t t;
  if (emc__lm_loc(lm) & EMC__LOC_HOST) { /* a unified-index entry: only a pointer */
    emc__hix_remove(c, pos);
    h->host_entries--;
    return 1;
  }
  if (!pool_entry(h, (uint64_t)pos, &t, &lm, &key)) return 0; /* pinned */
  (void)evict_entry(c, (uint64_t)pos, t, key, lm, 0);
  return 1;
}

/* Drop every unified-index entry (they are all older than the entries a pass keeps). */
static void drop_unified(emc_cache *c) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(h->ix.key_bits), tomb = emc__key_tomb(h->ix.key_bits), i;
  for (i = 0; i < h->ix_slots && h->host_entries > 0; i++) {
    uint64_t k = emc__ix_key(&h->ix, i);
    if (k == empty || k == tomb || !(emc__lm_loc(emc__ix_lm(&h->ix, i)) & EMC__LOC_HOST)) continue;
    emc__hix_remove(c, (int64_t)i);
    h->host_entries--;
  }
}

/* Evict live pool entries whose age bucket is >= min_bucket (all of them for 0; entries of
 * age 0 only when `any`), until `freed` reaches `need`. Returns freed. */
static uint64_t evict_from(emc_cache *c, uint64_t now, uint32_t min_bucket, int any,
                           uint64_t need, uint64_t freed) {
  emc__host_cache *h = c->host;
  uint64_t i;
  for (i = 0; i < h->ix_slots && freed < need; i++) {
    uint32_t t, age;
    uint64_t lm, key;
    if (!pool_entry(h, i, &t, &lm, &key)) continue;
    age = entry_age(h, i, now);
    if (age / AGE_WIDTH < min_bucket || (age == 0 && !any)) continue;
    freed += evict_entry(c, i, t, key, lm, 1);
  }
  return freed;
}

/* One pass for an admission of `stride` bytes (see the file comment for the need). */
static void evict_pass(emc_cache *c, uint32_t stride, uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t in_use = __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED);
  uint64_t to_low = in_use > h->low_bytes ? in_use - h->low_bytes : 0;
  uint64_t to_fit = in_use + stride > h->high_bytes ? in_use + stride - h->high_bytes : 0;
  uint64_t need = to_low > to_fit ? to_low : to_fit, acc = 0, freed = 0, i;
  uint32_t cut, top = 0; /* buckets [top, EMC__HIST_BUCKETS) are empty */
  if (need == 0) return;
  EMC__WR_ADD(h->n_passes, 1);
  if (h->host_entries > 0 &&
      h->host_entries >= c->cfg.unified_index_rows - c->cfg.unified_index_rows / 4)
    drop_unified(c);
  /* scan 1: bytes per age bucket (stamps clamped on the way). The histogram is all zero
   * between passes (calloc'ed, cleared below up to `top`): a small cache's pass costs its index
   * walk, not a sweep of EMC__HIST_BUCKETS buckets. */
  for (i = 0; i < h->ix_slots; i++) {
    uint32_t t, b;
    uint64_t lm, key, k = emc__ix_key(&h->ix, i);
    if (k == emc__key_empty(h->ix.key_bits) || k == emc__key_tomb(h->ix.key_bits)) continue;
    b = age_bucket(entry_age(h, i, now)); /* every entry's stamp is clamped, pinned ones too */
    if (!pool_entry(h, i, &t, &lm, &key)) continue;
    h->hist[b] += h->layout[t].stride;
    if (b >= top) top = b + 1;
  }
  __atomic_store_n(&h->aged_at, now, __ATOMIC_RELAXED);
  /* cut: the oldest buckets together reach the need at bucket `cut` */
  cut = hist_cut(h, top, need, &acc);
  memset(h->hist, 0, top * sizeof *h->hist);
  /* scan 2: older than the cut, then the cut bucket, then younger ones, then anything */
  freed = evict_from(c, now, cut + 1, 0, need, freed);
  freed = evict_from(c, now, cut, 0, need, freed);
  freed = evict_from(c, now, 0, 0, need, freed);
  freed = evict_from(c, now, 0, 1, need, freed);
  in_use = __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED);
  if (in_use > h->low_bytes) h->passes_above_low++;
  if (in_use > h->max_after_pass) h->max_after_pass = in_use;
}

/* Pages belong to a table until they are empty, and passes evict rows in LRU order wherever
 * they lie: after passes under one table's load, every page it holds may have free slots
 * that no other table can use. When another table's load comes, its misses find no page, the
 * bytes in use stay under t1 and no pass runs: without this, that table kept 180 of a 250-row
 * working set for good (cache_edges.c, a_table_without_pages_takes_one_back). So a table that
 * finds no page takes pages back, LRU by page: the n_pages / 64 pages (at least one) whose
 * newest rows are oldest give up their rows, evicted as a pass evicts them. One walk of the
 * index for each page's youngest age, a histogram of those ages (the pass's, EMC__HIST_BUCKETS
 * buckets of AGE_WIDTH ticks) for the cut, one walk for the rows. Pages holding a pinned row
 * or a row touched at the newest tick are not taken (the caller's own rows stay, when its
 * clock is the newest); when no page can be taken, none is looked for again until a pass ran
 * or RECLAIM_RETRY ticks went by. */
int emc__reclaim_page(emc_cache *c, uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(h->ix.key_bits), tomb = emc__key_tomb(h->ix.key_bits), i;
  uint64_t want = h->n_pages / 64 ? h->n_pages / 64 : 1, acc, from_cut;
  uint32_t p, b, cut, top = 0;
  now = newest_clock(h, now);
  /* (after a walk that found no page: not again until a pass ran or RECLAIM_RETRY ticks went
   * by, so pinned rows on every page cost a walk per RECLAIM_RETRY calls, not per call) */
  if (h->reclaim_failed_at && h->reclaim_failed_passes == h->n_passes &&
      now < h->reclaim_failed_at + RECLAIM_RETRY)
    return 0;
  for (p = 0; p < h->n_pages; p++) h->page_young[p] = UINT32_MAX;
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = emc__ix_key(&h->ix, i), lm;
    uint32_t age;
    if (k == empty || k == tomb) continue;
    lm = emc__ix_lm(&h->ix, i);
    if (emc__lm_loc(lm) & EMC__LOC_HOST) continue;
    p = emc__lm_loc(lm) / h->max_slots;
    age = (lm & EMC__LM_PINS) ? 0 : entry_age(h, i, now);
    if (age < h->page_young[p]) h->page_young[p] = age;
  }
  /* pages per bucket of their youngest age (0: not to be taken) */
  for (p = 0; p < h->n_pages; p++) {
    uint32_t y = h->page_young[p];
    if (y == UINT32_MAX || y == 0) continue;
    b = age_bucket(y);
    h->hist[b]++;
    if (b >= top) top = b + 1;
  }
  cut = hist_cut(h, top, want, &acc);
  /* the cut bucket gives what the older buckets leave of `want` */
  from_cut = acc < want ? acc : want - (acc - h->hist[cut]);
  memset(h->hist, 0, top * sizeof *h->hist);
  if (acc == 0) {
    h->reclaim_failed_at = now + 1;
    h->reclaim_failed_passes = h->n_passes;
    return 0;
  }
  h->reclaim_failed_at = 0;
  /* the pages to take: older than the cut bucket, and of the cut bucket while `want` lasts
   * (page_young becomes 1 for a page taken, 0 otherwise) */
  for (p = 0; p < h->n_pages; p++) {
    uint32_t y = h->page_young[p];
    if (y != UINT32_MAX && y != 0) {
      b = age_bucket(y);
      if (b > cut || (b == cut && from_cut > 0)) {
        from_cut -= b == cut;
        h->page_young[p] = 1;
        continue;
      }
    }
    h->page_young[p] = 0;
  }
  for (i = 0; i < h->ix_slots; i++) {
    uint32_t t;
    uint64_t lm, key;
    if (pool_entry(h, i, &t, &lm, &key) && h->page_young[emc__lm_loc(lm) / h->max_slots])
      (void)evict_entry(c, i, t, key, lm, 1);
  }
  return 1; /* (acc > 0: at least one page was taken) */
}

int emc__make_room(emc_cache *c, uint32_t stride, uint64_t now) {
  emc__host_cache *h = c->host;
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) + stride > h->high_bytes)
    evict_pass(c, stride, newest_clock(h, now));
  return __atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) + stride <= h->high_bytes;
}
