/*
 * index.c: the host backend's global index (layout and protocol: lib/item/index.h, "index").
 *
 * One copy of keys[], lm[] and stamps[], sized by the pool geometry for every row that fits
 * under t1 plus the unified-index entries. Writers (under the cache's writer lock) insert at
 * the first EMPTY or TOMB slot of a key's path and remove by TOMB; readers never lock.
 *
 * A removal leaves EMPTY rather than TOMB when its bucket already holds an EMPTY slot (no probe
 * passes that bucket, so nothing depends on the removed slot), so tombstones only arise in
 * full buckets. They are cleared in place by a re-pack sweep that runs in bounded steps
 * (Redis's incremental rehash is the model): once tombstones pass 1/32 of the slots, every
 * writer call also re-packs EMC__REPACK_STEP buckets plus 4 per entry it inserted, cluster by
 * cluster, until the sweep has gone once round the index. Each step makes the index's epoch
 * odd, then even (lib/item/index.h, "index"), and each cluster is published (repack_lo, hi)
 * before it is re-packed: a reader that misses a key while its entry moves sees the epoch odd
 * and the key's home in a published cluster, and probes again (so dirty rows need no
 * write-back before a re-pack; misses of keys homed elsewhere are kept, see emc__repack_raced),
 * and a reader that found a key before it moved validates the entry word it loads against the
 * key (issue 16). When fewer than 1/64 of the slots are EMPTY the sweep is finished at once
 * (an unbounded step; a reader waits only for the cluster of its own key).
 */
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

#define EMC__REPACK_STEP 2048u          /* buckets re-packed per writer call, at most */
#define EMC__REPACK_MAX_BUCKETS 4096u   /* longest cluster re-packed (scratch size) */

emc_status emc__hix_create(emc__host_cache *h, uint32_t key_bits, uint64_t buckets) {
  emc__index_view *ix = &h->ix;
  uint64_t i, n = buckets * EMC__BUCKET, empty = emc__key_empty(key_bits);
  /* re-pack scratch: the longest cluster, which is no longer than the index */
  uint64_t rb = buckets < EMC__REPACK_MAX_BUCKETS ? buckets : EMC__REPACK_MAX_BUCKETS;
  size_t kb = key_bits == 32 ? 4 : 8, rs = (size_t)rb * EMC__BUCKET;
  ix->key_bits = key_bits;
  ix->n_buckets = buckets;
  ix->epoch = &h->repack_epoch;
  h->ix_slots = n;
  h->repack_max_buckets = rb;
  h->ix_bytes = (size_t)n * emc__index_entry_bytes(key_bits);
  /* each part on its own, so the detail names the one that failed */
  if (!(ix->keys = emc__alloc((size_t)n * kb, 64, 0)))
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate the index's keys (%zu bytes, %llu entries)",
                    (size_t)n * kb, (unsigned long long)n);
  if (!(ix->lm = emc__alloc((size_t)n * 8, 64, 0)))
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate the index's entry words (%zu bytes)", (size_t)n * 8);
  if (!(ix->stamps = emc__alloc((size_t)n * 2, 64, 1)))
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate the index's stamps (%zu bytes)", (size_t)n * 2);
  h->repack_keys = emc__mallocn(rs, 8);
  h->repack_lm = emc__mallocn(rs, 8);
  h->repack_stamps = emc__mallocn(rs, 2);
  if (!h->repack_keys || !h->repack_lm || !h->repack_stamps)
    return EMC_FAIL(EMC_ENOMEM, "cannot allocate the re-pack scratch (%zu bytes)", rs * 18);
  for (i = 0; i < n; i++) {
    emc__ix_set_key(ix, i, empty);
    ix->lm[i] = EMC__LM_FREE;
  }
  return EMC_OK;
}

void emc__hix_destroy(emc__host_cache *h) {
  size_t kb = h->ix.key_bits == 32 ? 4 : 8;
  emc__free(h->ix.keys, (size_t)h->ix_slots * kb);
  emc__free(h->ix.lm, (size_t)h->ix_slots * 8);
  emc__free(h->ix.stamps, (size_t)h->ix_slots * 2);
  free(h->repack_keys);
  free(h->repack_lm);
  free(h->repack_stamps);
  h->ix.keys = h->ix.lm = NULL;
  h->ix.stamps = NULL;
}

void emc__hix_insert(emc_cache *c, uint64_t key, uint64_t lm, uint16_t stamp) {
  emc__host_cache *h = c->host;
  int64_t pos;
  h->repack_credit += 4;
  if (h->ix_tomb > 0 && h->ix_slots - h->ix_live - h->ix_tomb < h->ix_slots / 64)
    emc__hix_maintain(c, 1); /* urgent: see the file comment */
  pos = emc__index_free_slot(&h->ix, key);
  if (pos < 0) return; /* cannot happen: the index is sized for every live entry */
  if (emc__ix_key(&h->ix, (uint64_t)pos) != emc__key_empty(h->ix.key_bits)) h->ix_tomb--;
  /* the row is in place (caller); its lm, then its key (the position's lm is BUSY till now) */
  EMC_ST_RELAXED(&h->ix.stamps[pos], stamp);
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&h->ix.lm[pos], lm);
  EMC__TP(EMC__TP_WRITE, "insert: lm published");
  EMC_FENCE_RELEASE();
  emc__ix_set_key(&h->ix, (uint64_t)pos, key);
  EMC__TP(EMC__TP_WRITE, "insert: key published");
  h->ix_live++;
}

void emc__hix_remove(emc_cache *c, int64_t pos) {
  emc__host_cache *h = c->host;
  int keep_empty = emc__bucket_has_empty(&h->ix, (uint64_t)pos / EMC__BUCKET);
  EMC_ST_RELAXED(&h->ix.lm[pos], (uint64_t)EMC__LM_FREE);
  EMC__TP(EMC__TP_WRITE, "remove: lm freed");
  EMC_FENCE_RELEASE();
  emc__ix_set_key(&h->ix, (uint64_t)pos,
                  keep_empty ? emc__key_empty(h->ix.key_bits) : emc__key_tomb(h->ix.key_bits));
  EMC__TP(EMC__TP_WRITE, "remove: key dropped");
  EMC_FENCE_RELEASE(); /* before the slot can be reused */
  h->ix_live--;
  h->ix_tomb += !keep_empty;
}

int emc__hix_entry_is(const emc_cache *c, uint32_t t, uint64_t lm, uint64_t id) {
  const emc__host_cache *h = c->host;
  const emc__table *tb = &c->store->tables[t];
  uint32_t loc = emc__lm_loc(lm), slot;
  unsigned char *pg;
  if (tb->kind == EMC_TABLE_DENSE) return 1;
  if (loc & EMC__LOC_HOST) {
    uint64_t row = loc & EMC__LOC_MAX;
    return row < EMC_LD_ACQUIRE(tb->count) && EMC_LD_RELAXED(&tb->row_ids[row]) == id;
  }
  if (!emc__slot_addr(h, t, loc, &pg, &slot)) return 0;
  return EMC_LD_RELAXED(emc__slot_owner(pg, &h->layout[t], slot)) == id;
}

void emc__hix_maintain(emc_cache *c, int finish) {
  emc__host_cache *h = c->host;
  emc__index_view *ix = &h->ix;
  uint64_t nb = ix->n_buckets, spent = 0, budget;
  /* too few EMPTY slots left: probes for absent keys get long, and insertions could take the
   * last ones. Finish the sweep now. */
  int urgent = h->ix_tomb > 0 && h->ix_slots - h->ix_live - h->ix_tomb < h->ix_slots / 64;
  if (h->repack_left == 0) {
    h->repack_credit = 0;
    if (h->ix_tomb <= h->ix_slots / 32 && !urgent && !finish) return;
    h->repack_left = nb;
  }
  budget = EMC__REPACK_STEP + h->repack_credit;
  h->repack_credit = 0;
  if (urgent || finish) budget = UINT64_MAX;
  /* the step: epoch odd, clusters re-packed, epoch even. Each cluster is published before
   * anything in it moves (lib/host_cache.h, emc__repack_raced): a lookup that misses while the epoch is odd
   * retries only when its key's home lies in a cluster re-packed during its probe. */
  EMC_ST_RELEASE(&h->repack_lo, h->repack_pos); /* none of this step's clusters yet */
  EMC_ST_RELAXED(&h->repack_hi, h->repack_pos);
  EMC_ST_RELAXED(ix->epoch, EMC_LD_RELAXED(ix->epoch) + 1u);
  EMC__TP(EMC__TP_WRITE, "repack: epoch odd");
  EMC_FENCE_RELEASE();
  while (h->repack_left > 0 && spent < budget) {
    uint64_t b = h->repack_pos % nb, step = 1;
    if (emc__bucket_has_empty(ix, (b + nb - 1) % nb)) { /* a cluster starts at b */
      uint64_t len = emc__index_cluster_len(ix, b, h->repack_max_buckets);
      if (len > 0) {
        /* lo with release: the clusters before it are final for whoever reads it (acquire);
         * hi before the fence: a probe that saw a move of this cluster reads hi or later */
        EMC_ST_RELEASE(&h->repack_lo, h->repack_pos);
        EMC_ST_RELAXED(&h->repack_hi, h->repack_pos + len);
        EMC_FENCE_RELEASE();
        EMC__TP(EMC__TP_WRITE, "repack: cluster published");
        h->ix_tomb -= emc__index_repack(ix, b, len, h->repack_keys, h->repack_lm, h->repack_stamps);
        step = len;
      }
    }
    h->repack_pos += step;
    spent += step;
    h->repack_left = h->repack_left > step ? h->repack_left - step : 0;
    if (h->repack_left == 0) h->repacks++;
  }
  EMC_ST_RELEASE(ix->epoch, EMC_LD_RELAXED(ix->epoch) + 1u);
  EMC__TP(EMC__TP_WRITE, "repack: epoch even");
}
