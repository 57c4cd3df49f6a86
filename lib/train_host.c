/*
 * train_host.c: the host backend's training calls: emc_dedup, emc_prefetch (and the pins it
 * keeps), emc_apply_gradients. cache.c has validated every argument it can see without the
 * lock; what needs the cache's state (hashed capacity, the batch's size against the cache) is
 * checked here, under the writer lock, before anything changes.
 *
 * Dedup
 *   Per table segment, an open-addressing set (power of two >= 2n slots, each the index + 1 of
 *   a distinct id, 0 empty) gives every position the index of its id's first occurrence.
 *   apply_gradients also lists every distinct id's positions in increasing order (a counting
 *   sort), which fixes the order its gradients are summed in.
 *
 * Pins (emc_item.h, meta PINS)
 *   The ring `pins` holds prefetch_depth + 1 lists, one per live prefetch call: the keys it
 *   pinned. Prefetch call k releases the list of call k - (depth + 1) and refills it, so a row
 *   stays pinned through the next `depth` calls. An entry's pin count is the number of live
 *   lists naming it (<= depth + 1 <= EMC__PIN_MAX); evict.c never evicts an entry whose count
 *   is not 0. pinned_bytes (the strides of pinned entries) stays <= low_bytes (t2 * capacity),
 *   so an eviction pass can always reach t2 by evicting unpinned rows. A call releases the
 *   old list, pins the batch's rows cached now (before any eviction can run), then admits the
 *   missing rows (evicting unpinned ones) and pins them, each while the budget lasts; rows
 *   over the budget stay (or are admitted) unpinned and are counted as the shortfall.
 *   Key collisions: with 32-bit keys two hashed ids of one table may share a global key, and
 *   the index holds one entry per key, so while one id holds it the other is never cached
 *   (its reads go to the store). A row of the batch whose key another id holds takes the
 *   key when the holder is unpinned (an unpinned pool entry is evicted, written back first
 *   when dirty; a unified-index entry is dropped: emc__evict_holder) and the row itself fits
 *   the budget; a pinned holder (this call's or a live earlier one's) keeps the key and the
 *   row is counted in the shortfall too (EMC_ECAPACITY). So of two colliding ids in one
 *   batch the first is pinned and the second reported; no row of an EMC_OK call is left
 *   out.
 *
 * Apply
 *   Under the lock, for each distinct (table, id): the merged gradient (emc_item.h,
 *   emc__grad_add / emc__grad_mean), then the row and its state are read from wherever the
 *   row lives, stepped (emc__opt_step) and written back there: a cached slot in place by the
 *   writer protocol (dirty), else a fresh slot (admitted dirty), else the store row. Over a
 *   shared store the stepped row is also written to the store row, and the copy stays clean
 *   (cache.c holds the store's lock through the call).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"
#include "store_step.h"

/* ================================================================= dedup */
typedef struct dd_scratch {
  uint32_t *set;   /* set_cap slots: index + 1 of a distinct id, 0 empty */
  uint64_t set_cap;
} dd_scratch;

static emc_status dd_init(dd_scratch *d, const uint64_t *offsets, uint32_t n_tables) {
  uint64_t most = 0, cap = 16;
  uint32_t t;
  for (t = 0; t < n_tables; t++)
    if (offsets[t + 1] - offsets[t] > most) most = offsets[t + 1] - offsets[t];
  while (cap < 2 * most) cap <<= 1;
  d->set_cap = cap;
  d->set = emc__mallocn(cap, sizeof *d->set); /* most < 2^32 (checked by the callers) */
  if (!d->set) return EMC_FAIL(EMC_ENOMEM, "dedup set of %llu slots", (unsigned long long)cap);
  return EMC_OK;
}

/* The distinct ids of ids[0..n) in order of first occurrence into uniq (returns how many),
 * and for each position the index of its id in uniq (inv). */
static uint64_t dd_segment(dd_scratch *d, const uint64_t *ids, uint64_t n, uint64_t *uniq,
                           uint32_t *inv) {
  uint64_t cap = 16, mask, p, nu = 0;
  while (cap < 2 * n) cap <<= 1;
  mask = cap - 1;
  memset(d->set, 0, cap * sizeof *d->set);
  for (p = 0; p < n; p++) {
    uint64_t i = emc__fmix64(ids[p]) & mask;
    for (;; i = (i + 1) & mask) {
      uint32_t v = d->set[i];
      if (v == 0) {
        d->set[i] = (uint32_t)(nu + 1);
        uniq[nu] = ids[p];
        inv[p] = (uint32_t)nu++;
        break;
      }
      if (uniq[v - 1] == ids[p]) {
        inv[p] = v - 1;
        break;
      }
    }
  }
  return nu;
}

emc_status emc__dedup_batch(uint32_t n_tables, const uint64_t *ids, const uint64_t *offsets,
                            uint64_t *unique_ids, uint64_t *unique_offsets, uint32_t *inverse) {
  dd_scratch d;
  uint64_t total = offsets[n_tables], p, u = 0;
  uint32_t t, *inv;
  uint64_t *uniq;
  if (total == 0) {
    for (t = 0; t <= n_tables; t++) unique_offsets[t] = 0;
    return EMC_OK;
  }
  /* built in scratch so the outputs stay untouched on failure */
  uniq = emc__mallocn(total, sizeof *uniq);
  inv = emc__mallocn(total, sizeof *inv);
  if (!uniq || !inv || dd_init(&d, offsets, n_tables) != EMC_OK) {
    free(uniq);
    free(inv);
    return EMC_FAIL(EMC_ENOMEM, "dedup scratch for %llu ids", (unsigned long long)total);
  }
  for (t = 0; t < n_tables; t++) {
    uint64_t o = offsets[t], n = offsets[t + 1] - o;
    uint64_t nu = dd_segment(&d, ids + o, n, uniq + u, inv + o);
    for (p = o; p < o + n; p++) inv[p] += (uint32_t)u;
    u += nu;
  }
  free(d.set);
  memcpy(unique_ids, uniq, u * sizeof *uniq);
  memcpy(inverse, inv, total * sizeof *inv);
  unique_offsets[0] = 0;
  for (t = 0, u = 0; t < n_tables; t++) {
    /* distinct ids of table t: the largest inverse of its segment + 1 - its first */
    uint64_t o = offsets[t], n = offsets[t + 1] - o, top = 0;
    for (p = o; p < o + n; p++)
      if (inv[p] + 1 - u > top) top = inv[p] + 1 - u;
    u += top;
    unique_offsets[t + 1] = u;
  }
  free(uniq);
  free(inv);
  return EMC_OK;
}

emc_status emc__host_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                           uint64_t *unique_ids, uint64_t *unique_offsets, uint32_t *inverse) {
  return emc__dedup_batch(c->store->n_tables, ids, offsets, unique_ids, unique_offsets, inverse);
}

/* ================================================================= pins */
emc_status emc__pins_create(emc_cache *c) {
  emc__host_cache *h = c->host;
  h->n_pin_lists = c->cfg.prefetch_depth + 1;
  h->pins = emc__calloc(h->n_pin_lists, sizeof *h->pins);
  return h->pins ? EMC_OK : EMC_FAIL(EMC_ENOMEM, "%u pin lists", h->n_pin_lists);
}

void emc__pins_destroy(emc__host_cache *h) {
  uint32_t i;
  if (!h->pins) return;
  for (i = 0; i < h->n_pin_lists; i++) free(h->pins[i].keys);
  free(h->pins);
  h->pins = NULL;
}

/* Table of the pool entry lm (its page's table). */
static uint32_t entry_table(const emc__host_cache *h, uint64_t lm) {
  return emc__hdr_at(h, emc__lm_loc(lm) / h->max_slots)->table;
}

/* Add `delta` (+1 / -1) to the pin count of the pool entry at pos; keeps the gauges. */
static void pin_add(emc__host_cache *h, uint64_t pos, int delta) {
  uint64_t lm = emc__ix_lm(&h->ix, pos);
  uint32_t pins = emc__lm_pins(lm), stride = h->layout[entry_table(h, lm)].stride;
  uint32_t now_pins = delta > 0 ? pins + 1 : pins - 1;
  /* the count changes without a new meta: readers ignore PINS (emc__lm_same) */
  EMC_ST_RELAXED(&h->ix.lm[pos], (lm & ~EMC__LM_PINS) |
                                     ((uint64_t)(now_pins << EMC__META_PIN_SHIFT) << 32));
  if (pins == 0 && now_pins == 1) {
    __atomic_store_n(&h->pinned_bytes, h->pinned_bytes + stride, __ATOMIC_RELAXED);
    __atomic_store_n(&h->pinned_rows, h->pinned_rows + 1, __ATOMIC_RELAXED);
  } else if (pins == 1 && now_pins == 0) {
    __atomic_store_n(&h->pinned_bytes, h->pinned_bytes - stride, __ATOMIC_RELAXED);
    __atomic_store_n(&h->pinned_rows, h->pinned_rows - 1, __ATOMIC_RELAXED);
  }
}

/* The pool entry of key, or -1 (a pinned entry is never evicted, so a listed key is found). */
static int64_t pool_pos(const emc__host_cache *h, uint64_t key) {
  int64_t pos = emc__index_find(&h->ix, key);
  if (pos < 0 || (emc__lm_loc(emc__ix_lm(&h->ix, (uint64_t)pos)) & EMC__LOC_HOST)) return -1;
  return pos;
}

static void release_list(emc__host_cache *h, emc__pin_list *l) {
  uint64_t i;
  for (i = 0; i < l->n; i++) {
    int64_t pos = pool_pos(h, l->keys[i]);
    if (pos >= 0) pin_add(h, (uint64_t)pos, -1);
  }
  l->n = 0;
}

emc_status emc__pins_check(emc_cache *c) {
  emc__host_cache *h = c->host;
  uint8_t *want = emc__calloc(h->ix_slots, 1);
  uint64_t i, bytes = 0, rows = 0;
  uint32_t l;
  emc_status st = EMC_OK;
  if (!want) return EMC_FAIL(EMC_ENOMEM, "pin check scratch");
  for (l = 0; l < h->n_pin_lists && st == EMC_OK; l++)
    for (i = 0; i < h->pins[l].n; i++) {
      int64_t pos = pool_pos(h, h->pins[l].keys[i]);
      if (pos < 0) {
        st = EMC_FAIL(EMC_ECORRUPT, "pin list %u names key %llx, which is not cached", l,
                      (unsigned long long)h->pins[l].keys[i]);
        break;
      }
      want[pos]++;
    }
  for (i = 0; i < h->ix_slots && st == EMC_OK; i++) {
    uint64_t k = emc__ix_key(&h->ix, i), lm = emc__ix_lm(&h->ix, i);
    if (k == emc__key_empty(h->ix.key_bits) || k == emc__key_tomb(h->ix.key_bits)) continue;
    if (emc__lm_pins(lm) != want[i])
      st = EMC_FAIL(EMC_ECORRUPT, "index slot %llu: %u pins, %u live lists name it",
                    (unsigned long long)i, emc__lm_pins(lm), want[i]);
    else if (want[i] > 0) {
      bytes += h->layout[entry_table(h, lm)].stride;
      rows++;
    }
  }
  if (st == EMC_OK && (bytes != h->pinned_bytes || rows != h->pinned_rows))
    st = EMC_FAIL(EMC_ECORRUPT, "pinned: %llu rows / %llu bytes, recorded %llu / %llu",
                  (unsigned long long)rows, (unsigned long long)bytes,
                  (unsigned long long)h->pinned_rows, (unsigned long long)h->pinned_bytes);
  if (st == EMC_OK && h->pinned_bytes > h->low_bytes)
    st = EMC_FAIL(EMC_ECORRUPT, "pinned bytes %llu above the budget %llu",
                  (unsigned long long)h->pinned_bytes, (unsigned long long)h->low_bytes);
  free(want);
  return st;
}

/* ================================================================= prefetch */
emc_status emc__host_prefetch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets) {
  emc__host_cache *h = c->host;
  emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], now, u, nu = 0, pinned = 0, short_rows = 0;
  uint64_t short_bytes = 0, short_keys = 0;
  uint64_t *uniq = NULL, *keys = NULL;
  uint32_t *inv = NULL, *tab = NULL, t;
  uint8_t *done = NULL;
  unsigned char *row = NULL;
  char more[96] = "";
  emc__pin_list fresh = {0};
  emc__pin_list *old;
  dd_scratch d = {0};
  emc_status st = EMC_OK;

  /* scratch first: on failure nothing has changed */
  if (total > 0) {
    uniq = emc__mallocn(total, sizeof *uniq);
    keys = emc__mallocn(total, sizeof *keys);
    inv = emc__mallocn(total, sizeof *inv);
    tab = emc__mallocn(total, sizeof *tab);
    done = emc__malloc(total);
    row = emc__malloc(h->max_stride);
    fresh.cap = total;
    fresh.keys = emc__mallocn(total, sizeof *fresh.keys);
    if (!uniq || !keys || !inv || !tab || !done || !row || !fresh.keys ||
        dd_init(&d, offsets, s->n_tables) != EMC_OK) {
      st = EMC_FAIL(EMC_ENOMEM, "prefetch scratch for %llu ids", (unsigned long long)total);
      goto out;
    }
    for (t = 0; t < s->n_tables; t++) {
      uint64_t n = dd_segment(&d, ids + offsets[t], offsets[t + 1] - offsets[t], uniq + nu,
                              inv + offsets[t]);
      for (u = nu; u < nu + n; u++) {
        tab[u] = t;
        keys[u] = emc__global_key(&c->codec.tables[t], uniq[u], c->codec.hash_seed);
      }
      nu += n;
    }
  }
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&h->lock);
  /* 1. the call depth + 1 before this one lets go (nothing is evicted before step 2 pins
   *    this batch's cached rows again) */
  old = &h->pins[h->pin_next];
  release_list(h, old);
  /* 2. the batch's rows cached now, then 3. the missing ones, admitted (evicting unpinned
   *    rows); each pinned while the budget lasts (a row pinned by a live call costs nothing) */
  for (u = 0; u < nu; u++) {
    uint32_t stride = h->layout[tab[u]].stride;
    int64_t pos = pool_pos(h, keys[u]);
    done[u] = 0;
    if (pos >= 0 && emc__hix_entry_is(c, tab[u], emc__ix_lm(&h->ix, (uint64_t)pos), uniq[u])) {
      done[u] = 1;
      EMC_ST_RELAXED(&h->ix.stamps[pos], emc__stamp_of(now));
      if (emc__lm_pins(emc__ix_lm(&h->ix, (uint64_t)pos)) == 0 &&
          h->pinned_bytes + stride > h->low_bytes) {
        short_rows++;
        short_bytes += stride;
        continue;
      }
      pin_add(h, (uint64_t)pos, +1);
      fresh.keys[fresh.n++] = keys[u];
    }
  }
  for (u = 0; u < nu; u++) {
    const emc__table *tb = &s->tables[tab[u]];
    uint32_t stride = h->layout[tab[u]].stride;
    int64_t srow, pos;
    int collision;
    if (done[u]) continue;
    srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)uniq[u] : emc__store_find(tb, uniq[u]);
    if (srow < 0) continue; /* a hashed id without a row reads as zeros: nothing to pin */
    /* another id of the table holds the key (a hashed-id collision): an unpinned holder gives
     * way when this row can be pinned; a pinned one keeps the key and this row is reported */
    pos = emc__index_find(&h->ix, keys[u]);
    if (pos >= 0 && !emc__hix_entry_is(c, tab[u], emc__ix_lm(&h->ix, (uint64_t)pos), uniq[u])) {
      if (h->pinned_bytes + stride > h->low_bytes) { /* not pinnable anyway: the holder stays */
        short_rows++;
        short_bytes += stride;
        continue;
      }
      if (!emc__evict_holder(c, pos)) {
        short_keys++;
        continue;
      }
    }
    if (!emc__make_room(c, stride, now)) { /* pinned rows leave no room under t1 */
      short_rows++;
      short_bytes += stride;
      continue;
    }
    pos = emc__admit_pos(c, tab[u], uniq[u], keys[u], &collision);
    if (pos == -2) { /* cannot happen: the key was freed above and nothing took it since */
      short_keys++;
      continue;
    }
    emc__row_load(row, emc__store_row(tb, (uint64_t)srow), tb->full_bytes);
    if (!emc__admit_row(c, tab[u], uniq[u], keys[u], pos, row, 0, now)) {
      short_rows++; /* no free page left for this table's layout */
      short_bytes += stride;
      continue;
    }
    EMC__CNT_ADD(h->n_admissions, 1);
    if (h->pinned_bytes + stride > h->low_bytes) { /* cached, but not pinned */
      short_rows++;
      short_bytes += stride;
      continue;
    }
    pin_add(h, (uint64_t)pool_pos(h, keys[u]), +1);
    fresh.keys[fresh.n++] = keys[u];
  }
  pinned = fresh.n;
  /* 5. the list of this call replaces the released one */
  free(old->keys);
  *old = fresh;
  fresh.keys = NULL;
  h->pin_next = (h->pin_next + 1) % h->n_pin_lists;
  emc__hix_maintain(c, 0);
  pthread_mutex_unlock(&h->lock);
  EMC__CNT_ADD(h->n_prefetched, pinned);
  EMC__CNT_ADD(h->n_pin_shortfall, short_rows + short_keys);
  if (short_keys > 0)
    snprintf(more, sizeof more, "; %llu more share their global key with a pinned id of their "
             "table", (unsigned long long)short_keys);
  if (short_rows > 0)
    st = EMC_FAIL(EMC_ECAPACITY,
                  "%llu of %llu distinct rows (%llu bytes) do not fit the pin budget of %llu "
                  "bytes (t2 * capacity, shared by the last prefetch_depth + 1 = %u prefetches); "
                  "they stay unpinned and are read from the store when evicted%s",
                  (unsigned long long)short_rows, (unsigned long long)nu,
                  (unsigned long long)short_bytes, (unsigned long long)h->low_bytes,
                  h->n_pin_lists, more);
  else if (short_keys > 0)
    st = EMC_FAIL(EMC_ECAPACITY,
                  "%llu of %llu distinct rows share their global key with another id of their "
                  "table that a live prefetch pinned (a hashed-id key collision, likely with "
                  "32-bit keys): they are not cached and are read from the store",
                  (unsigned long long)short_keys, (unsigned long long)nu);
out:
  free(uniq);
  free(keys);
  free(inv);
  free(tab);
  free(done);
  free(row);
  free(fresh.keys);
  free(d.set);
  return st;
}

/* ================================================================= apply gradients */
/* A hashed id's store row: capacity was checked, so only a shared segment's corrupt id map
 * leaves none. */
static emc_status no_store_row(const emc__table *tb, uint32_t t, uint64_t id) {
  return EMC_FAIL(EMC_ECORRUPT, "table %u ('%s'): id %llu has no valid store row (the shared "
                  "segment's id map was written over); rows before it were stepped", t,
                  tb->name, (unsigned long long)id);
}

/* Step the row of (t, id, key) by the merged gradient g, wherever it lives (lock held). */
static emc_status apply_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, const float *g,
                      const emc_optimizer *o, unsigned char *buf, uint64_t now) {
  emc__host_cache *h = c->host;
  emc_store *s = c->store;
  const emc__table *tb = &s->tables[t];
  int64_t pos = emc__index_find(&h->ix, key), srow;
  int collision = 0;
  float state = 0.0f;
  /* a shared store: the stepped row goes to the store too (its lock is held, cache.c) and
   * the cached copy stays clean */
  srow = !h->shared ? -1
         : tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find_or_add(s, t, id, NULL);
  if (h->shared && srow < 0) return no_store_row(tb, t, id);
  if (pos >= 0) {
    uint64_t lm = emc__ix_lm(&h->ix, (uint64_t)pos);
    collision = !emc__hix_entry_is(c, t, lm, id);
    if (!collision && !(emc__lm_loc(lm) & EMC__LOC_HOST)) { /* cached: in place */
      uint32_t loc = emc__lm_loc(lm);
      unsigned char *pg = emc__page_at(h, loc / h->max_slots);
      emc__row_load(buf, emc__slot_row(pg, &h->layout[t], loc % h->max_slots), tb->full_bytes);
      if (tb->state != EMC_STATE_NONE) memcpy(&state, buf + tb->state_off, 4);
      emc__opt_step(buf, &state, g, tb->dim, tb->dtype, (uint32_t)o->kind, o->lr, o->eps,
                    o->initial_accumulator);
      if (tb->state != EMC_STATE_NONE) memcpy(buf + tb->state_off, &state, 4);
      emc__update_in_place(c, t, pos, lm, buf, tb->full_bytes, now, !h->shared);
      if (h->shared) emc__store_full_write(s, t, (uint64_t)srow, buf);
      return EMC_OK;
    }
  }
  /* the store row (hashed ids get one: capacity was checked), stepped */
  if (srow < 0)
    srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find_or_add(s, t, id, NULL);
  if (srow < 0) return no_store_row(tb, t, id);
  emc__store_full_read(s, t, (uint64_t)srow, buf);
  if (tb->state != EMC_STATE_NONE) memcpy(&state, buf + tb->state_off, 4);
  emc__opt_step(buf, &state, g, tb->dim, tb->dtype, (uint32_t)o->kind, o->lr, o->eps,
                o->initial_accumulator);
  if (tb->state != EMC_STATE_NONE) memcpy(buf + tb->state_off, &state, 4);
  if (!collision && emc__make_room(c, h->layout[t].stride, now)) {
    pos = emc__admit_pos(c, t, id, key, &collision);
    if (pos != -2 && emc__admit_row(c, t, id, key, pos, buf, !h->shared, now)) {
      if (h->shared) emc__store_full_write(s, t, (uint64_t)srow, buf);
      return EMC_OK;
    }
  }
  emc__store_full_write(s, t, (uint64_t)srow, buf); /* no room: the store holds the step */
  return EMC_OK;
}

emc_status emc__host_apply(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                           const float *grads, const emc_optimizer *opt) {
  emc__host_cache *h = c->host;
  emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], now, nu = 0, u, bytes = 0, most_dim = 1;
  uint64_t *uniq = NULL, *start = NULL, *order = NULL, *fill = NULL;
  uint32_t *inv = NULL, t;
  float *acc = NULL;
  unsigned char *buf = NULL;
  dd_scratch d = {0};
  emc_status st = EMC_OK;
  const float *gt = grads;

  if (total == 0) return EMC_OK;
  for (t = 0; t < s->n_tables; t++)
    if (s->tables[t].dim > most_dim) most_dim = s->tables[t].dim;
  uniq = emc__mallocn(total, sizeof *uniq);
  inv = emc__mallocn(total, sizeof *inv);
  start = emc__mallocn((total + 1), sizeof *start);
  fill = emc__mallocn(total, sizeof *fill);
  order = emc__mallocn(total, sizeof *order);
  acc = emc__mallocn(most_dim, sizeof *acc);
  buf = emc__malloc(h->max_stride);
  if (!uniq || !inv || !start || !fill || !order || !acc || !buf ||
      dd_init(&d, offsets, s->n_tables) != EMC_OK) {
    st = EMC_FAIL(EMC_ENOMEM, "gradient scratch for %llu ids", (unsigned long long)total);
    goto out;
  }
  pthread_mutex_lock(&h->lock);
  /* before anything changes: hashed capacity, and the batch's rows against the cache */
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t n = offsets[t + 1] - offsets[t], fresh, distinct;
    if (n == 0) continue;
    distinct = dd_segment(&d, ids + offsets[t], n, uniq, inv);
    bytes += distinct * h->layout[t].stride;
    if (tb->kind != EMC_TABLE_HASHED) continue;
    fresh = emc__count_new_ids(tb, ids + offsets[t], (size_t)n);
    if (fresh == (uint64_t)-1) {
      pthread_mutex_unlock(&h->lock);
      st = EMC_FAIL(EMC_ENOMEM, "scratch set of %llu ids", (unsigned long long)n);
      goto out;
    }
    if ((st = emc__check_room(tb, t, fresh)) != EMC_OK) {
      pthread_mutex_unlock(&h->lock);
      goto out;
    }
  }
  if (bytes > h->high_bytes) {
    pthread_mutex_unlock(&h->lock);
    st = EMC_FAIL(EMC_ECAPACITY,
                  "the batch's distinct rows take %llu bytes, more than the cache holds (t1 * "
                  "capacity = %llu bytes); split the batch or grow capacity_bytes",
                  (unsigned long long)bytes, (unsigned long long)h->high_bytes);
    goto out;
  }
  now = __atomic_add_fetch(&h->clock, 1, __ATOMIC_RELAXED);
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t o = offsets[t], n = offsets[t + 1] - o, dim = tb->dim;
    if (n == 0) continue;
    nu = dd_segment(&d, ids + o, n, uniq, inv);
    emc__group_positions(inv, 0, n, nu, start, fill, order);
    for (u = 0; u < nu; u++) {
      uint64_t key = emc__global_key(&c->codec.tables[t], uniq[u], c->codec.hash_seed);
      emc__merge_grads(acc, gt, order, start[u], start[u + 1], (uint32_t)dim, opt->merge);
      if ((st = apply_row(c, t, uniq[u], key, acc, opt, buf, now)) != EMC_OK) break;
    }
    EMC__CNT_ADD(h->n_grad_rows, u);
    if (st != EMC_OK) break;
    gt += n * dim;
  }
  emc__hix_maintain(c, 0);
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
  pthread_mutex_unlock(&h->lock);
out:
  free(uniq);
  free(inv);
  free(start);
  free(fill);
  free(order);
  free(acc);
  free(buf);
  free(d.set);
  return st;
}
