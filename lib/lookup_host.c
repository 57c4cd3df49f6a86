/*
 * lookup_host.c: the host backend's lookup: the lock-free reads of a batch, then admission of
 * its misses (admit_host.c).
 *
 * Two read paths give the same rows, where codes and counts (tests/test_lookup_paths.c):
 *   read_row      the per-row reference: probe, entry word, fence, copy, validate, stamp; it
 *                 retries until a read validates and handles every case (BUSY entries,
 *                 unified-index entries, hashed collisions, a re-pack racing a miss).
 *   the pipeline  the batched read (emc__cache_set_pipelined, on by default; read_pipe.c, whose
 *                 file comment gives its stages, how it keeps the reader protocol, and how it
 *                 copies the repeated ids of a batch instead of reading them again).
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
uint8_t emc__host_read_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key,
                           unsigned char *dst, uint64_t now) {
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
      /* absent, unless a re-pack step raced the probe (emc__repack_raced); the fence also makes
       * the store read see the write-back that preceded an eviction the probe observed */
      EMC_FENCE_ACQUIRE();
      if (emc__repack_raced(h, e1, lo1, emc__home_bucket(key, h->ix.n_buckets), h->ix.n_buckets)) {
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
  emc__tally n = {0, 0, 0, 0, 0};
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
    emc__host_read_pipelined(c, ids, offsets, total, out, keys, kind, where, &n, now);
  } else {
    unsigned char *dst = out;
    for (t = 0; t < s->n_tables; t++) {
      const emc__table_code *tc = &c->codec.tables[t];
      uint32_t rb = s->tables[t].row_bytes;
      for (i = offsets[t]; i < offsets[t + 1]; i++, dst += rb) {
        keys[i] = emc__global_key(tc, ids[i], c->codec.hash_seed);
        kind[i] = emc__host_read_row(c, t, ids[i], keys[i], dst, now);
        if (where) where[i] = emc__where_of(kind[i]);
        emc__tally_add(&n, kind[i], 1);
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
