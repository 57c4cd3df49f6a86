/*
 * pool.c: the pool geometry both backends use, and the host backend's pages and sub-pools.
 *
 * The pool is one arena of equal pages. A table's sub-pool takes pages from the arena on
 * demand and gives a page back when its last slot is freed, so the split of capacity_bytes
 * between tables follows demand. Within a page, free slots are the set bits of the page's
 * free bitmap (item/pages.h, "pool pages"); each table keeps a list of its pages with free
 * slots (partial_head, linked through the page headers). Writer only: every function here runs
 * under the cache's writer lock.
 */
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

/* Live entries per index slot at most when the cache holds max_rows rows: high enough that
 * index + stamps stay within 16 B per row with 32-bit keys (14 B / 0.92), low enough that
 * probes stay short (buckets of 8). */
#define EMC__INDEX_LOAD 0.92

emc_status emc__pool_geometry(const emc_cache *c, emc__pool_geom *g, emc__page_layout *layout) {
  const emc_store *s = c->store;
  uint32_t t, n = s->n_tables, max_stride = 0, min_stride = UINT32_MAX, hashed = 0;
  uint64_t min_page_rows_bytes = UINT64_MAX, p, cap = c->cfg.capacity_bytes, slots, live;
  uint64_t store_rows = 0; /* rows the store can hold: no cache holds more entries than that */
  memset(g, 0, sizeof *g);
  for (t = 0; t < n; t++) {
    const emc__table *tb = &s->tables[t];
    if (tb->stride > max_stride) max_stride = tb->stride;
    if (tb->stride < min_stride) min_stride = tb->stride;
    hashed |= tb->kind == EMC_TABLE_HASHED;
    store_rows = tb->rows > UINT64_MAX - store_rows ? UINT64_MAX : store_rows + tb->rows;
  }
  /* the thresholds: products of a size_t and a float below 1, never above capacity_bytes */
  g->high_bytes = emc__u64_scale(cap, c->cfg.evict_high);
  g->low_bytes = emc__u64_scale(cap, c->cfg.evict_low);
  if (g->high_bytes > cap) g->high_bytes = cap;
  if (g->low_bytes >= g->high_bytes) g->low_bytes = g->high_bytes ? g->high_bytes - 1 : 0;
  if (g->high_bytes < max_stride || g->low_bytes == 0)
    return EMC_FAIL(EMC_EINVAL,
                    "capacity_bytes %zu with t2 = %g, t1 = %g leaves no room for one row of %u bytes",
                    c->cfg.capacity_bytes, (double)c->cfg.evict_low, (double)c->cfg.evict_high,
                    max_stride);
  /* Page size: a power of two holding >= 8 rows of the widest table; larger (up to 256 KiB)
   * while the budget still spans >= 8 pages per table, to keep per-page overhead low. */
  g->page_bytes = 4096;
  while (emc__layout_for(g->page_bytes, max_stride, 1).n_slots < 8) g->page_bytes <<= 1;
  while (g->page_bytes < (256u << 10) && cap / (g->page_bytes * 2) >= 8ull * n)
    g->page_bytes <<= 1;
  for (t = 0; t < n; t++) {
    layout[t] = emc__layout_for(g->page_bytes, s->tables[t].stride,
                                s->tables[t].kind == EMC_TABLE_HASHED);
    if ((uint64_t)layout[t].n_slots * layout[t].stride < min_page_rows_bytes)
      min_page_rows_bytes = (uint64_t)layout[t].n_slots * layout[t].stride;
    if (layout[t].n_slots > g->max_slots) g->max_slots = layout[t].n_slots;
  }
  /* Enough pages for capacity_bytes of rows in the least dense layout, plus one partly used
   * page per table (no overflow: divide before adding). */
  p = emc__u64_div_ceil(cap, min_page_rows_bytes) + n;
  if (p > EMC__LOC_MAX || p * g->max_slots > EMC__LOC_MAX)
    return EMC_FAIL(EMC_EINVAL,
                    "capacity_bytes %zu needs %llu pages of %u slots: slot handles must stay "
                    "below 2^31 (a smaller budget, or wider rows for the narrowest table)",
                    c->cfg.capacity_bytes, (unsigned long long)p, g->max_slots);
  g->n_pages = (uint32_t)p;
  g->max_stride = max_stride;
  g->min_stride = min_stride;
  /* Index: the live pool entries (no more rows than fit under t1, nor than the pages hold)
   * plus the unified-index entries (hashed tables only), at load EMC__INDEX_LOAD. Every entry
   * is a distinct row of the store (a dense id below its rows, a hashed id with a store row),
   * so a budget larger than the store gets an index for the store's rows, not the budget's:
   * eviction passes walk the whole index. */
  slots = (uint64_t)g->n_pages * g->max_slots;
  g->max_rows = g->high_bytes / min_stride < slots ? g->high_bytes / min_stride : slots;
  if (g->max_rows > store_rows) g->max_rows = store_rows;
  g->unified = hashed ? c->cfg.unified_index_rows : 0;
  live = g->max_rows + (g->unified < store_rows - g->max_rows ? g->unified
                                                              : store_rows - g->max_rows);
  g->ix_buckets = (uint64_t)((double)live / EMC__INDEX_LOAD / EMC__BUCKET) + 2;
  return EMC_OK;
}

/* ----------------------------------------------------------------- partial lists */
static void partial_unlink(emc__host_cache *h, uint32_t t, uint32_t p) {
  emc__page_hdr *ph = emc__hdr_at(h, p);
  if (ph->prev != EMC__PAGE_NONE) emc__hdr_at(h, ph->prev)->next = ph->next;
  else h->partial_head[t] = ph->next;
  if (ph->next != EMC__PAGE_NONE) emc__hdr_at(h, ph->next)->prev = ph->prev;
  ph->in_partial = 0;
}

static void partial_push(emc__host_cache *h, uint32_t t, uint32_t p) {
  emc__page_hdr *ph = emc__hdr_at(h, p);
  ph->prev = EMC__PAGE_NONE;
  ph->next = h->partial_head[t];
  if (ph->next != EMC__PAGE_NONE) emc__hdr_at(h, ph->next)->prev = p;
  h->partial_head[t] = p;
  ph->in_partial = 1;
}

/* ----------------------------------------------------------------- slots */
int64_t emc__pool_alloc(emc__host_cache *h, uint32_t t) {
  const emc__page_layout *L = &h->layout[t];
  uint32_t p = h->partial_head[t];
  emc__page_hdr *ph;
  uint64_t *bm;
  int64_t s;
  if (p == EMC__PAGE_NONE) { /* a fresh page from the arena takes table t's layout */
    if (h->free_page_head == EMC__PAGE_NONE) return -1;
    p = h->free_page_head;
    ph = emc__hdr_at(h, p);
    h->free_page_head = ph->next;
    h->free_pages--;
    ph->table = t;
    ph->n_slots = L->n_slots;
    ph->live = 0;
    ph->gen++;
    emc__bitmap_fill(emc__page_bitmap(ph, L), L->n_words, L->n_slots);
    partial_push(h, t, p);
    EMC__WR_ADD(h->pages_held, 1);
  }
  ph = emc__hdr_at(h, p);
  bm = emc__page_bitmap(ph, L);
  s = emc__bitmap_nth(bm, L->n_words, 0);
  if (s < 0) return -1; /* cannot happen: pages on the partial list have a free slot */
  bm[s / 64] &= ~(1ull << (s % 64));
  ph->live++;
  if (ph->live == L->n_slots) partial_unlink(h, t, p);
  return (int64_t)p * h->max_slots + s;
}

void emc__pool_free(emc__host_cache *h, uint32_t t, uint32_t loc) {
  const emc__page_layout *L = &h->layout[t];
  uint32_t p = loc / h->max_slots, s = loc % h->max_slots;
  emc__page_hdr *ph = emc__hdr_at(h, p);
  uint64_t *bm = emc__page_bitmap(ph, L);
  bm[s / 64] |= 1ull << (s % 64);
  ph->live--;
  if (!ph->in_partial) partial_push(h, t, p);
  if (ph->live == 0) { /* the page goes back to the arena for any table */
    partial_unlink(h, t, p);
    ph->table = EMC__PAGE_NONE;
    ph->next = h->free_page_head;
    h->free_page_head = p;
    h->free_pages++;
    EMC__WR_SUB(h->pages_held, 1);
  }
}
