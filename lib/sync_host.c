/*
 * sync_host.c: a host cache over a shared store keeps no copy older than a write another
 * cache or process completed (issue 20). The store's update log (lib/store/seg_log.c) says
 * which rows were written; each lookup, insert, apply and prefetch of the cache first applies
 * the entries published since
 * it last looked (log_seen), under the writer lock:
 *   - a pool copy of a written row is evicted (it is clean: every write over a shared store
 *     goes through to the store at once), or, pinned by a live emc_prefetch, refreshed in
 *     place from the store (versioned read; the writer protocol; clean);
 *   - a unified-index entry stays: it points at the store row, which readers read fresh;
 *   - when the log wrapped past log_seen (an entry was rewritten, or more than a ring's
 *     worth was published), every copy of each table whose last_seq > log_seen goes.
 * Why a lookup then returns no row older than a write completed before it began: the write
 * published its entries (release) after its rows and before returning; the lookup loads the
 * published sequence (acquire) first, and either finds log_seen equal to it (a sync that had
 * applied the write's entries ran before, and it stored log_seen with release after its
 * drops) or applies the entries itself before reading. An admission reads the store row
 * (versioned) and publishes its copy under the writer lock: a write published between the
 * two is newer than log_seen (a sync that passed it would need that lock), so whoever next
 * compares log_seen with the published sequence takes the lock after the admission and
 * drops the copy before reading it.
 * A cache's own writes (emc_insert, emc_apply_gradients) hold the store's lock and leave
 * their copies current: cache.c advances log_seen past their entries when nothing else was
 * published in between.
 */
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

/* The id of the pool entry (key, lm) of table t. */
static uint64_t entry_id(const emc_cache *c, uint32_t t, uint64_t key, uint64_t lm) {
  const emc__host_cache *h = c->host;
  unsigned char *pg;
  uint32_t slot;
  if (c->store->tables[t].kind == EMC_TABLE_DENSE) return emc__codec_dense_id(&c->codec, t, key);
  if (!emc__slot_addr(h, t, emc__lm_loc(lm), &pg, &slot)) return 0;
  return EMC_LD_RELAXED(emc__slot_owner(pg, &h->layout[t], slot));
}

/* The pool entry at pos (table t, id) is outdated: evict it, or refresh it when pinned. */
static void drop_entry(emc_cache *c, uint64_t pos, uint32_t t, uint64_t id, uint64_t lm,
                       uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__table *tb = &c->store->tables[t];
  int64_t srow;
  if (!(lm & EMC__LM_PINS)) {
    (void)emc__evict_at(c, pos);
    return;
  }
  srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find(tb, id);
  if (srow < 0) { /* cannot happen: a cached hashed id has its store row */
    return;
  }
  emc__store_full_read(c->store, t, (uint64_t)srow, h->sync_row);
  emc__update_in_place(c, t, (int64_t)pos, lm, h->sync_row, tb->full_bytes, now, 0);
}

static void drop_key(emc_cache *c, uint32_t t, uint64_t id, uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__table_code *tc = &c->codec.tables[t];
  int64_t pos;
  uint64_t lm;
  if (tc->kind == EMC_TABLE_DENSE && id >= tc->rows) return; /* a segment scribbled on */
  pos = emc__index_find(&h->ix, emc__global_key(tc, id, c->codec.hash_seed));
  if (pos < 0) return;
  lm = emc__ix_lm(&h->ix, (uint64_t)pos);
  if ((emc__lm_loc(lm) & EMC__LOC_HOST) || !emc__hix_entry_is(c, t, lm, id)) return;
  drop_entry(c, (uint64_t)pos, t, id, lm, now);
}

/* Every pool copy of the tables marked in `drop`. */
static void drop_tables(emc_cache *c, const unsigned char *drop, uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t empty = emc__key_empty(h->ix.key_bits), tomb = emc__key_tomb(h->ix.key_bits), i;
  for (i = 0; i < h->ix_slots; i++) {
    uint64_t k = emc__ix_key(&h->ix, i), lm;
    uint32_t t;
    if (k == empty || k == tomb) continue;
    lm = emc__ix_lm(&h->ix, i);
    if (emc__lm_loc(lm) & EMC__LOC_HOST) continue;
    t = emc__hdr_at(h, emc__lm_loc(lm) / h->max_slots)->table;
    if (t < c->store->n_tables && drop[t]) drop_entry(c, i, t, entry_id(c, t, k, lm), lm, now);
  }
}

void emc__host_sync_locked(emc_cache *c) {
  emc__host_cache *h = c->host;
  const emc_store *s = c->store;
  uint64_t seen, cur, q, now;
  int wrapped;
  if (!h->shared) return;
  seen = EMC_LD_RELAXED(&h->log_seen);
  cur = emc__log_seq(s);
  if (cur == seen) return;
  now = __atomic_load_n(&h->clock, __ATOMIC_RELAXED);
  /* behind log_seen: only a segment scribbled on goes back; drop everything */
  wrapped = cur < seen || cur - seen > emc__log_cap(s);
  for (q = seen + 1u; !wrapped && q <= cur; q++) {
    uint32_t t;
    uint64_t id;
    if (emc__log_entry(s, q, &t, &id)) drop_key(c, t, id, now);
    else wrapped = 1;
  }
  if (wrapped) {
    unsigned char drop[EMC_MAX_TABLES];
    uint32_t t;
    for (t = 0; t < s->n_tables; t++) drop[t] = cur < seen || emc__log_table_seq(s, t) > seen;
    drop_tables(c, drop, now);
  }
  emc__hix_maintain(c, 0);
  EMC_ST_RELEASE(&h->log_seen, cur);
}

void emc__host_sync(emc_cache *c) {
  emc__host_cache *h = c->host;
  if (!h->shared || emc__log_seq(c->store) == EMC_LD_ACQUIRE(&h->log_seen)) return;
  pthread_mutex_lock(&h->lock);
  emc__host_sync_locked(c);
  pthread_mutex_unlock(&h->lock);
}

void emc__host_own_writes(emc_cache *c, uint64_t pre, uint64_t post) {
  emc__host_cache *h = c->host;
  if (!h->shared || post == pre) return;
  pthread_mutex_lock(&h->lock);
  /* every entry up to pre applied, and (pre, post] are this call's own, whose copies are
   * current: nothing to drop */
  if (EMC_LD_RELAXED(&h->log_seen) == pre) EMC_ST_RELEASE(&h->log_seen, post);
  pthread_mutex_unlock(&h->lock);
}

emc_status emc__host_shared_begin(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                  int announce, uint64_t *pre, uint64_t *mark) {
  if (!c->host->shared) return EMC_OK;
  EMC_TRY(emc__store_lock(c->store)); /* the store's lock before the cache's, always */
  /* this call reads rows while it holds the lock: a version another process left odd would
   * stop it (its reader-side repair needs the lock) */
  emc__seg_even_stripes(c->store);
  *pre = emc__log_seq(c->store);
  emc__host_sync(c); /* first: a long batch of its own may overwrite entries it needs */
  /* announced before any row changes: a writer that dies holding the lock has announced
   * what it may have written (seg_log.c) */
  *mark = emc__log_mark(c->store);
  if (announce) emc__log_batch(c->store, ids, offsets);
  return EMC_OK;
}

void emc__host_shared_end(emc_cache *c, int announced, int changed, uint64_t pre,
                          uint64_t mark) {
  if (!c->host->shared) return;
  if (announced && !changed) emc__log_withdraw(c->store, mark);
  else if (announced) {
    emc__log_publish(c->store);
    emc__host_own_writes(c, pre, emc__log_seq(c->store));
  }
  emc__store_unlock(c->store);
}
