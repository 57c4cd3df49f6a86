/*
 * cache_host.c: the host backend of the global cache table: its calls.
 *
 * Structures (flat arrays, one allocation each, the layouts of lib/emc_item.h that the CUDA
 * backend keeps in device memory too):
 *   index   one bucketed open-addressing index for all tables, one copy (index.c)
 *   arena   equal pages; each table's sub-pool takes pages on demand and gives a page back
 *           when its last slot is freed (pool.c)
 *
 * Concurrency
 *   One writer lock serializes every change (admission, insert, eviction, flush, re-pack).
 *   Lookups take no lock: a hit is read by the optimistic protocol of item/index.h ("index"),
 *   validated by the entry's key and version (lm) around the copy; a store row by its stripe
 *   version (lookup_host.c). Their misses are admitted under the lock, inline (trylock: when
 *   another thread holds it they are skipped, counted in admit_skipped) or by the cache's
 *   admission thread (admit_host.c).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

/* ================================================================= create/destroy */
emc_status emc__host_create(emc_cache *c) {
  emc__host_cache *h;
  const emc_store *s = c->store;
  uint32_t t, n = s->n_tables;
  uint64_t p;
  emc__pool_geom g;
  emc_status st;
  if (!(h = emc__calloc(1, sizeof *h))) return EMC_FAIL(EMC_ENOMEM, "cache state");
  c->host = h;
  h->layout = emc__calloc(n, sizeof *h->layout);
  h->partial_head = emc__calloc(n, sizeof *h->partial_head);
  h->rows_cached = emc__calloc(n, sizeof *h->rows_cached);
  h->hist = emc__calloc(EMC__HIST_BUCKETS, sizeof *h->hist);
  if (!h->layout || !h->partial_head || !h->rows_cached || !h->hist) {
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cache tables");
  }
  if (pthread_mutex_init(&h->lock, NULL) != 0) {
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cache lock");
  }
  h->lock_ok = 1;
  h->pipelined = 1;
  h->repeats = 1;
  h->shared = s->seg != NULL;
  h->log_seen = emc__log_seq(s); /* an empty cache: nothing written before is held */
  if ((st = emc__pool_geometry(c, &g, h->layout)) != EMC_OK) {
    emc__host_destroy(c);
    return st;
  }
  h->high_bytes = g.high_bytes;
  h->low_bytes = g.low_bytes;
  h->page_bytes = g.page_bytes;
  h->max_slots = g.max_slots;
  h->slots_magic = g.max_slots > 1 ? UINT64_MAX / g.max_slots + 1u : 0;
  h->max_stride = g.max_stride;
  if (h->shared && !(h->sync_row = emc__malloc(g.max_stride))) {
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cache row buffer");
  }
  h->max_rows = g.max_rows;
  h->n_pages = g.n_pages;
  if (!(h->page_young = emc__calloc(g.n_pages, sizeof *h->page_young))) {
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cache page ages");
  }
  for (t = 0; t < n; t++) h->partial_head[t] = EMC__PAGE_NONE;
  h->arena_bytes = (size_t)g.n_pages * g.page_bytes; /* < 2^31 pages of <= 256 KiB */
  h->arena = emc__alloc(h->arena_bytes, 64, 0);
  if (!h->arena) {
    size_t want = h->arena_bytes; /* the detail is formatted before the state is freed */
    emc__host_destroy(c);
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate the %zu-byte pool arena", want);
  }
  h->free_page_head = EMC__PAGE_NONE;
  for (p = h->n_pages; p-- > 0;) {
    emc__page_hdr *ph = emc__hdr_at(h, p);
    memset(ph, 0, sizeof *ph);
    ph->table = EMC__PAGE_NONE;
    ph->next = h->free_page_head;
    h->free_page_head = (uint32_t)p;
  }
  h->free_pages = h->n_pages;
  if ((st = emc__hix_create(h, c->codec.key_bits, g.ix_buckets)) != EMC_OK ||
      (st = emc__pins_create(c)) != EMC_OK || (st = emc__admission_start(c)) != EMC_OK) {
    emc__host_destroy(c);
    return st;
  }
  return EMC_OK;
}

void emc__host_destroy(emc_cache *c) {
  emc__host_cache *h = c->host;
  if (!h) return;
  emc__admission_stop(h); /* first: the thread uses everything below */
  emc__hix_destroy(h);
  emc__pins_destroy(h);
  emc__free(h->arena, h->arena_bytes);
  if (h->lock_ok) pthread_mutex_destroy(&h->lock);
  free(h->layout);
  free(h->partial_head);
  free(h->rows_cached);
  free(h->hist);
  free(h->page_young);
  free(h->sync_row);
  free(h);
  c->host = NULL;
}

/* ================================================================= insert */
void emc__update_in_place(emc_cache *c, uint32_t t, int64_t pos, uint64_t lm,
                          const unsigned char *src, uint32_t bytes, uint64_t now, int dirty) {
  emc__host_cache *h = c->host;
  uint32_t loc = emc__lm_loc(lm);
  unsigned char *pg = emc__page_at(h, loc / h->max_slots);
  EMC_ST_RELAXED(&h->ix.lm[pos], lm | EMC__LM_BUSY);
  EMC__TP(EMC__TP_WRITE, "update: lm busy");
  EMC_FENCE_RELEASE();
  emc__row_store(emc__slot_row(pg, &h->layout[t], loc % h->max_slots), src, bytes);
  EMC_ST_RELAXED(&h->ix.stamps[pos], emc__stamp_of(now));
  EMC__TP(EMC__TP_WRITE, "update: row written");
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&h->ix.lm[pos],
                 emc__lm_make(loc, emc__next_meta(h, (dirty ? EMC__META_DIRTY : 0) |
                                                         (emc__lm_meta(lm) & EMC__META_PINS))));
  EMC__TP(EMC__TP_WRITE, "update: lm published");
  if (dirty && !(lm & EMC__LM_DIRTY)) EMC__WR_ADD(h->dirty_rows, 1);
  if (!dirty && (lm & EMC__LM_DIRTY)) EMC__WR_SUB(h->dirty_rows, 1);
}

emc_status emc__host_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                            const void *rows) {
  emc__host_cache *h = c->host;
  emc_store *s = c->store;
  const unsigned char *src = rows;
  uint64_t now, i, inserted = 0;
  uint32_t t;
  unsigned char *full_row;
  if (offsets[s->n_tables] == 0) return EMC_OK;
  if (!(full_row = emc__malloc(h->max_stride))) /* a row and its state, for admissions */
    return EMC_FAIL(EMC_ENOMEM, "one row of %u bytes", h->max_stride);
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&h->lock);
  /* hashed tables: the batch's new ids must fit the store's free capacity (checked under the
   * lock, before anything changes, so concurrent inserts cannot overfill a table) */
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t fresh, n = offsets[t + 1] - offsets[t];
    if (tb->kind != EMC_TABLE_HASHED || n == 0) continue;
    fresh = emc__count_new_ids(tb, ids + offsets[t], (size_t)n);
    if (fresh == (uint64_t)-1 || emc__check_room(tb, t, fresh) != EMC_OK) {
      pthread_mutex_unlock(&h->lock);
      free(full_row);
      if (fresh == (uint64_t)-1)
        return EMC_FAIL(EMC_ENOMEM, "scratch set of %llu ids", (unsigned long long)n);
      return emc__check_room(tb, t, fresh); /* its detail again */
    }
  }
  for (t = 0; t < s->n_tables; t++) {
    emc__table *tb = &s->tables[t];
    const emc__page_layout *L = &h->layout[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, src += tb->row_bytes) {
      uint64_t id = ids[i], key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
      int64_t pos, srow;
      int collision;
      /* hashed ids get their store row now (holding this value, so readers that find the new
       * id in the store never see a placeholder), and a later write-back has a place */
      srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find_or_add(s, t, id, src);
      if (srow < 0) { /* room was checked: only a shared segment's corrupt id map gets here */
        emc__hix_maintain(c, 0);
        pthread_mutex_unlock(&h->lock);
        free(full_row);
        EMC__CNT_ADD(h->n_inserts, inserted);
        return EMC_FAIL(EMC_ECORRUPT, "table %u ('%s'): id %llu has no valid store row (the "
                        "shared segment's id map was written over); rows before it were "
                        "inserted", t, tb->name, (unsigned long long)id);
      }
      inserted++;
      /* a shared store: written through now (its lock is held, cache.c), the copy is clean */
      if (h->shared) emc__store_row_write(s, t, (uint64_t)srow, src);
      pos = emc__index_find(&h->ix, key);
      if (pos >= 0) {
        uint64_t lm = emc__ix_lm(&h->ix, (uint64_t)pos);
        int mine = emc__hix_entry_is(c, t, lm, id);
        if (mine && !(emc__lm_loc(lm) & EMC__LOC_HOST)) { /* cached: update in place */
          emc__update_in_place(c, t, pos, lm, src, tb->row_bytes, now, !h->shared);
          continue;
        }
        if (!mine) { /* hashed collision: this id is never cached */
          if (!h->shared) emc__store_row_write(s, t, (uint64_t)srow, src);
          continue;
        }
      }
      if (emc__make_room(c, L->stride, now)) {
        const unsigned char *full = src;
        pos = emc__admit_pos(c, t, id, key, &collision); /* the pass may have changed the index */
        if (tb->state != EMC_STATE_NONE && pos != -2) { /* the slot takes the store's state */
          memcpy(full_row, src, tb->row_bytes);
          emc__row_load(full_row + tb->state_off, emc__store_row(tb, (uint64_t)srow) + tb->state_off,
                        tb->full_bytes - tb->state_off);
          full = full_row;
        }
        if (pos != -2 && emc__admit_row(c, t, id, key, pos, full, !h->shared, now)) continue;
      }
      /* no room (t1 too close to t2 for this row, or no page left): write through */
      if (!h->shared) emc__store_row_write(s, t, (uint64_t)srow, src);
    }
  }
  emc__hix_maintain(c, 0);
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
  pthread_mutex_unlock(&h->lock);
  free(full_row);
  EMC__CNT_ADD(h->n_inserts, inserted);
  return EMC_OK;
}

/* ================================================================= flush */
emc_status emc__host_flush(emc_cache *c) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(h->ix.key_bits), tomb = emc__key_tomb(h->ix.key_bits), i;
  emc__admission_drain(c); /* the misses of lookups that returned before this call */
  pthread_mutex_lock(&h->lock);
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = emc__ix_key(&h->ix, i), lm;
    uint32_t loc;
    if (k == empty || k == tomb) continue;
    lm = emc__ix_lm(&h->ix, i);
    loc = emc__lm_loc(lm);
    if (!(lm & EMC__LM_DIRTY) || (loc & EMC__LOC_HOST)) continue;
    emc__write_back(c, emc__hdr_at(h, loc / h->max_slots)->table, k, loc);
    /* only the DIRTY bit changes: readers ignore it, so no new meta */
    EMC_ST_RELEASE(&h->ix.lm[i], lm & ~EMC__LM_DIRTY);
    EMC__TP(EMC__TP_WRITE, "flush: row clean");
    EMC__WR_SUB(h->dirty_rows, 1);
  }
  pthread_mutex_unlock(&h->lock);
  return EMC_OK;
}

/* ================================================================= stats and checks */
/* Bytes of the index (keys, entry words, stamps) and of the per-slot metadata kept in pages
 * (free bitmaps, hashed tables' owner ids), counted for every page at the largest a layout
 * has (a page may change tables). Page headers (64 bytes a page) and the padding that aligns
 * rows are pool bookkeeping, not counted. */
static uint64_t metadata_bytes(const emc_cache *c) {
  const emc__host_cache *h = c->host;
  uint64_t per_page = 0;
  uint32_t t;
  for (t = 0; t < c->store->n_tables; t++) {
    const emc__page_layout *L = &h->layout[t];
    uint64_t b = (uint64_t)L->n_words * 8 + (L->off_owner ? (uint64_t)L->n_slots * 8 : 0);
    if (b > per_page) per_page = b;
  }
  return h->ix_bytes + (uint64_t)h->n_pages * per_page;
}

void emc__host_stats(const emc_cache *c, emc_stats *o) {
  const emc__host_cache *h = c->host;
  uint32_t t;
  memset(o, 0, sizeof *o);
  o->lookups = EMC__LD(h->n_lookups);
  o->hits = EMC__LD(h->n_hits);
  o->misses = EMC__LD(h->n_misses);
  o->absent = EMC__LD(h->n_absent);
  o->admissions = EMC__LD(h->n_admissions);
  o->admit_skipped = EMC__LD(h->n_admit_skipped);
  o->inserts = EMC__LD(h->n_inserts);
  o->evictions = EMC__LD(h->n_evictions);
  o->writebacks = EMC__LD(h->n_writebacks);
  o->evict_passes = EMC__LD(h->n_passes);
  o->retries = EMC__LD(h->n_retries);
  o->unified_hits = EMC__LD(h->n_unified);
  for (t = 0; t < c->store->n_tables; t++) o->rows_cached += EMC__LD(h->rows_cached[t]);
  o->bytes_in_use = EMC__LD(h->bytes_in_use);
  o->bytes_reserved = EMC__LD(h->pages_held) * h->page_bytes;
  o->capacity_bytes = c->cfg.capacity_bytes;
  o->index_bytes = metadata_bytes(c);
  o->dirty_rows = EMC__LD(h->dirty_rows);
  o->prefetched = EMC__LD(h->n_prefetched);
  o->pinned_rows = EMC__LD(h->pinned_rows);
  o->pinned_bytes = EMC__LD(h->pinned_bytes);
  o->pin_shortfall = EMC__LD(h->n_pin_shortfall);
  o->gradient_rows = EMC__LD(h->n_grad_rows);
}

uint64_t emc__host_table_rows(const emc_cache *c, uint32_t table) {
  return EMC__LD(c->host->rows_cached[table]);
}

emc_status emc__cache_set_pipelined(emc_cache *c, int pipelined) {
  if (!c) return EMC_FAIL(EMC_EINVAL, "c is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "the read path is the host backend's");
  if (!(pipelined == 0 || pipelined == 1 ||
        (pipelined >= EMC__PIPE_D_MIN && pipelined <= EMC__PIPE_D_MAX)))
    return EMC_FAIL(EMC_EINVAL, "pipelined = %d: 0, 1 or a distance in %d..%d", pipelined,
                    EMC__PIPE_D_MIN, EMC__PIPE_D_MAX);
  c->host->pipelined = pipelined;
  return EMC_OK;
}

emc_status emc__cache_set_repeats(emc_cache *c, int repeats) {
  if (!c) return EMC_FAIL(EMC_EINVAL, "c is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "the read path is the host backend's");
  if (repeats != 0 && repeats != 1) return EMC_FAIL(EMC_EINVAL, "repeats = %d: 0 or 1", repeats);
  c->host->repeats = repeats;
  return EMC_OK;
}

emc_status emc__cache_get_debug(const emc_cache *c, emc__cache_debug *out) {
  emc__host_cache *h;
  if (!c || !out) return EMC_FAIL(EMC_EINVAL, "c or out is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "white-box checks cover the host backend only");
  h = c->host;
  pthread_mutex_lock(&h->lock);
  out->passes = EMC__LD(h->n_passes);
  out->index_tombs = h->ix_tomb;
  out->index_slots = h->ix_slots;
  out->passes_above_low = h->passes_above_low;
  out->max_bytes_after_pass = h->max_after_pass;
  out->calls_above_high = h->calls_above_high;
  out->low_bytes = h->low_bytes;
  out->high_bytes = h->high_bytes;
  out->index_rebuilds = h->repacks;
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
  uint64_t empty, tomb, i, live = 0, tombs = 0, host_entries = 0, bytes = 0, dirty = 0;
  uint64_t free_pages = 0, held = 0, handles;
  uint64_t *per_table = NULL, *used = NULL;
  uint32_t *page_live = NULL;
  const emc__index_view *ix;
  uint32_t p, t;
  if (!c) return EMC_FAIL(EMC_EINVAL, "c is NULL");
  if (!c->host) return EMC_FAIL(EMC_EUNSUPPORTED, "white-box checks cover the host backend only");
  h = c->host;
  ix = &h->ix;
  empty = emc__key_empty(ix->key_bits);
  tomb = emc__key_tomb(ix->key_bits);
  handles = (uint64_t)h->n_pages * h->max_slots;
  per_table = emc__calloc(c->store->n_tables, sizeof *per_table);
  used = emc__calloc(handles / 64 + 1, sizeof *used);
  page_live = emc__calloc(h->n_pages, sizeof *page_live);
  if (!per_table || !used || !page_live) {
    free(per_table);
    free(used);
    free(page_live);
    return EMC_FAIL(EMC_ENOMEM, "check scratch");
  }
  pthread_mutex_lock(&h->lock);
  /* index entries: each found where it is, of a real table, its slot used once */
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = emc__ix_key(ix, i), lm, id;
    uint32_t loc;
    int64_t tt;
    if (k == empty) {
      CHECK(emc__ix_lm(ix, i) & EMC__LM_BUSY, "index slot %llu: EMPTY with a live lm",
            (unsigned long long)i);
      continue;
    }
    if (k == tomb) {
      tombs++;
      continue;
    }
    live++;
    lm = emc__ix_lm(ix, i);
    loc = emc__lm_loc(lm);
    CHECK(!(lm & EMC__LM_BUSY), "index slot %llu: BUSY between calls", (unsigned long long)i);
    CHECK(emc__index_find(ix, k) == (int64_t)i, "index slot %llu: key %llx found elsewhere",
          (unsigned long long)i, (unsigned long long)k);
    tt = emc__codec_table_of(&c->codec, k);
    CHECK(tt >= 0, "index slot %llu: key %llx under no table's code", (unsigned long long)i,
          (unsigned long long)k);
    t = (uint32_t)tt;
    if (loc & EMC__LOC_HOST) {
      const emc__table *tb = &c->store->tables[t];
      uint64_t row = loc & EMC__LOC_MAX;
      host_entries++;
      CHECK(tb->kind == EMC_TABLE_HASHED && row < EMC_LD_RELAXED(tb->count) && !(lm & EMC__LM_DIRTY) &&
                k == emc__global_key(&c->codec.tables[t], tb->row_ids[row], c->codec.hash_seed),
            "unified entry of table %u at slot %llu points at a wrong row", t,
            (unsigned long long)i);
      continue;
    }
    {
      const emc__page_layout *L = &h->layout[t];
      uint32_t pg = loc / h->max_slots, s = loc % h->max_slots;
      emc__page_hdr *ph;
      CHECK(pg < h->n_pages && s < L->n_slots, "table %u entry at slot %llu: handle %u out of range",
            t, (unsigned long long)i, loc);
      ph = emc__hdr_at(h, pg);
      CHECK(ph->table == t, "table %u entry at slot %llu points at page %u of table %u", t,
            (unsigned long long)i, pg, ph->table);
      CHECK(!(emc__page_bitmap(ph, L)[s / 64] >> (s % 64) & 1u),
            "table %u entry at slot %llu: slot %u of page %u is marked free", t,
            (unsigned long long)i, s, pg);
      CHECK(!(used[loc / 64] >> (loc % 64) & 1u), "slot handle %u is named by two entries", loc);
      used[loc / 64] |= 1ull << (loc % 64);
      id = L->off_owner ? *emc__slot_owner(ph, L, s) : emc__codec_dense_id(&c->codec, t, k);
      CHECK(k == emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed),
            "index slot %llu: key is not the global key of (%u, %llu)", (unsigned long long)i, t,
            (unsigned long long)id);
      page_live[pg]++;
      bytes += L->stride;
      dirty += (lm & EMC__LM_DIRTY) != 0;
      per_table[t]++;
    }
  }
  CHECK(live == h->ix_live && tombs == h->ix_tomb,
        "index counts: %llu live/%llu tombs, recorded %llu/%llu", (unsigned long long)live,
        (unsigned long long)tombs, (unsigned long long)h->ix_live, (unsigned long long)h->ix_tomb);
  CHECK(host_entries == h->host_entries && host_entries <= c->cfg.unified_index_rows,
        "unified entries %llu, recorded %llu", (unsigned long long)host_entries,
        (unsigned long long)h->host_entries);
  /* pages: free list, then every held page's count, bitmap and partial-list membership */
  for (p = h->free_page_head; p != EMC__PAGE_NONE; p = emc__hdr_at(h, p)->next) {
    CHECK(emc__hdr_at(h, p)->table == EMC__PAGE_NONE, "free page %u has table %u", p,
          emc__hdr_at(h, p)->table);
    CHECK(++free_pages <= h->n_pages, "free page list has a cycle");
  }
  CHECK(free_pages == h->free_pages, "free page count %u, list has %llu", h->free_pages,
        (unsigned long long)free_pages);
  for (p = 0; p < h->n_pages; p++) {
    emc__page_hdr *ph = emc__hdr_at(h, p);
    const emc__page_layout *L;
    uint64_t *bm;
    uint32_t w, nfree = 0;
    if (ph->table == EMC__PAGE_NONE) continue;
    held++;
    CHECK(ph->table < c->store->n_tables, "page %u has table %u", p, ph->table);
    L = &h->layout[ph->table];
    bm = emc__page_bitmap(ph, L);
    CHECK(ph->n_slots == L->n_slots, "page %u: %u slots, layout says %u", p, ph->n_slots, L->n_slots);
    for (w = 0; w < L->n_words; w++) nfree += emc__popc64(bm[w]);
    CHECK(L->n_words == 0 || L->n_slots % 64 == 0 || !(bm[L->n_words - 1] >> (L->n_slots % 64)),
          "page %u: free bits past its last slot", p);
    CHECK(page_live[p] == ph->live && ph->live + nfree == L->n_slots,
          "page %u: %u entries name it, header says %u live, bitmap %u free of %u", p, page_live[p],
          ph->live, nfree, L->n_slots);
    CHECK(ph->live > 0, "page %u held by table %u with no live slot", p, ph->table);
    CHECK(ph->in_partial == (nfree > 0), "page %u: partial flag %u with %u free", p,
          ph->in_partial, nfree);
  }
  CHECK(held + free_pages == h->n_pages && held == EMC__LD(h->pages_held),
        "pages: %llu held (counter %llu) + %llu free != %u", (unsigned long long)held,
        (unsigned long long)EMC__LD(h->pages_held), (unsigned long long)free_pages, h->n_pages);
  for (t = 0; t < c->store->n_tables; t++) {
    uint64_t n = 0;
    for (p = h->partial_head[t]; p != EMC__PAGE_NONE; p = emc__hdr_at(h, p)->next) {
      CHECK(emc__hdr_at(h, p)->table == t && emc__hdr_at(h, p)->in_partial,
            "table %u: partial list holds page %u (table %u)", t, p, emc__hdr_at(h, p)->table);
      CHECK(++n <= h->n_pages, "table %u: partial list has a cycle", t);
    }
    CHECK(per_table[t] == h->rows_cached[t], "table %u: %llu rows cached, recorded %llu", t,
          (unsigned long long)per_table[t], (unsigned long long)h->rows_cached[t]);
  }
  CHECK(bytes == h->bytes_in_use, "bytes in use %llu, slots add up to %llu",
        (unsigned long long)h->bytes_in_use, (unsigned long long)bytes);
  CHECK(dirty == h->dirty_rows, "dirty rows %llu, recorded %llu", (unsigned long long)dirty,
        (unsigned long long)h->dirty_rows);
  st = emc__pins_check(c);
out:
  pthread_mutex_unlock(&h->lock);
  free(per_table);
  free(used);
  free(page_live);
  return st;
}
