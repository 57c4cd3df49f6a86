/*
 * lib/item/index.h: the global index: layout, entry words, probes, the reader and writer protocol,
 * the in-place re-pack.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_INDEX_H
#define EMC_ITEM_INDEX_H

/* ------------------------------------------------------------------- index
 * One global index for all tables: bucketed open addressing, ONE copy, keyed by global keys.
 *
 *   keys[]  n_buckets * EMC__BUCKET keys, uint32_t when key_bits is 32, uint64_t when 64: a
 *           bucket of 32-bit keys is one 32-byte sector, of 64-bit keys two. EMPTY (all ones)
 *           and TOMB (all ones - 1) lie under the codec's reserved code.
 *   lm[]    one 64-bit word per entry: loc in the low half, meta (the entry's version) in the
 *           high half.
 *   stamps[] the entry's 16-bit LRU stamp (see "LRU stamps"); it moves with the entry.
 *   Why the stamps have an array of their own, although a hit then reads 4 lines (bucket, lm,
 *   stamp, row) where it could read 3 (issue 19, item 4): a stamp is the only word a hit
 *   writes (once per call per row), and a dense array keeps what those writes dirty small (32
 *   stamps a line; 0.8 MB for emc-bench --all-hit --dim 16, which stays in L2). Lines of 6
 *   entries, each holding 6 lm words and their 6 stamps (3 lines a hit, 0.67 bytes more an
 *   entry), dirtied the entry words' lines instead (3.9 MB there) and measured slower: the
 *   same command with --batches 1000, 4 interleaved pairs on one machine (2026-11-27),
 *   lookup seconds 2.32-3.04 (median 2.36) with this layout against 2.39-2.64 (median 2.52)
 *   with the lines, ratio_vs_gather 1.03-1.07 against 0.88-1.01.
 *     loc   a pool slot handle (page * max_slots + slot, < 2^31), or EMC__LOC_HOST | row for
 *           a unified-index entry (a hashed row in host memory, row < 2^31).
 *     meta  bit 0 BUSY: a writer is changing the row (and every free position's lm is BUSY);
 *           bit 1 DIRTY: the row differs from the store; bits 2..5 PINS: how many live
 *           prefetch calls pinned the row (a pinned row is never evicted); bits 6..31: a
 *           counter that every write of a row or an entry draws fresh from one writer-side
 *           sequence (writers are serialized), so (loc, meta) names one write.
 * No id is stored for dense tables (their key is a bijection of the id); hashed tables keep
 * the id of each cached row in its pool page (owner), which is how a reader tells a row from
 * a key collision.
 *
 * Probing: a key's home bucket is mulhi(fmix64(key), n_buckets); a probe walks buckets in
 * order and stops at the first bucket holding an EMPTY slot (insertions take the first EMPTY
 * or TOMB slot of the path, so no key lies beyond such a bucket).
 *
 * Each position's lm is the sequence word of what the position holds: writers change a
 * position's key only while its lm is BUSY (every free position's lm is EMC__LM_FREE, which
 * is BUSY), and every new entry word carries a fresh meta.
 *
 * Reader protocol (optimistic, lock-free; host and device run the same steps):
 *   1. probe: keys loaded relaxed; pos = the slot holding key (or a miss: see below)
 *   2. lm1 = lm[pos] (relaxed); BUSY: go round again
 *   3. acquire fence
 *   4. read what lm1 names (relaxed loads): a slot's row and, hashed tables, its owner id; or,
 *      for a unified-index entry, the id of the store row it names (row_ids) and, if that is
 *      this id, the store row (by its own stripe version)
 *   5. key2 = keys[pos] (relaxed)              -- before the fence, with the row: it is data
 *   6. acquire fence
 *   7. lm2 = lm[pos] (relaxed)
 *   valid iff key2 == key and lm1, lm2 agree but for DIRTY and PINS (emc__entry_recheck).
 * Only a valid read decides anything: a hit (owner == id), a store row through a unified entry
 * (row id == id), and "another id holds this key, so id is not cached" (a hashed collision in
 * a slot or in a unified entry) all rest on (key, lm1) having held pos throughout. Issue 16
 * was a reader that took the unified branch on lm1 alone: the probe found key K at pos, a
 * re-pack moved K towards its home and another id's unified entry into pos, and the reader,
 * seeing a unified entry of another id, served K's store row while K's newer row was dirty in
 * the cache (tests/test_protocol.c forces that interleaving).
 * Forward progress (the rule every waiting loop of host and device keeps): no reader or writer
 * ever waits (spins, or retries without bound) for a state that is opened by one kernel and
 * closed by another, by the host, or by a kernel of another stream; CUDA guarantees no
 * progress between kernels or streams. A reader may only wait for a write that a running
 * thread has begun and finishes without waiting itself: a BUSY lm (one writer's store
 * sequence), a write-back cell (cuda/dev.cuh), a re-pack step (begun and ended inside one
 * kernel: cuda/maint.cu). Its retries back off (__nanosleep on the device, sched_yield on the
 * host). Device writer calls are ordered by stream order and events, never by a device lock
 * (cuda/streams.cu, "Streams and ordering"). The CPU model of the device (cuda/sim/) stops
 * a kernel that waits longer than its watchdog allows and reports it.
 * Writer protocol (all writers of a cache are serialized; release fences order the steps):
 *   admit    write the row (and owner) into a free slot; fence; lm = (slot, fresh meta);
 *            fence; key = K.  (The device claims a free position by CAS on the key first,
 *            then writes lm: free positions always hold a BUSY lm, so a reader that sees K
 *            with the old lm rejects it.)
 *   update   lm = BUSY; fence; write the row; fence; lm = (slot, fresh meta | DIRTY)
 *   evict    dirty: write the row back to the store first; fence; then either
 *            lm = FREE; fence; key = TOMB (or EMPTY); fence; only then may the slot be reused,
 *            or (hashed rows, while the unified budget lasts) lm = (host row, fresh meta)
 *   re-pack  a position that gets another entry: lm = FREE; fence; key; fence; lm (the
 *            entry's own, unchanged); a position that empties: key = EMPTY; fence; lm = FREE
 * Why a validated read is the value of key at one instant: a write that changes what lm1
 * names (an update's row stores, a slot reused after an eviction, another key moved into pos)
 * is preceded by a BUSY or free lm at pos and followed by a fresh lm, with release fences
 * between; if any load of steps 4-5 observed such a write, the fence of step 6 makes step 7
 * observe the BUSY word or a later one, and lm2 differs. If step 2 observed a word written
 * after such a change, the fence of step 3 makes steps 4-5 observe the change too, so they
 * read what that word names. An entry written with a fresh meta never repeats an older one:
 * meta counters repeat only after 2^26 writes, which no reader outlives. DIRTY and PINS
 * change without a new counter (flush, pins): the row is the same, readers need not retry.
 *
 * Store rows and misses. A row's store copy is older than the cache's only while the row is
 * cached dirty, and an entry leaves the index (or points at the store) only after its dirty
 * row was written back, with a release fence between the two. So a reader that finds no entry
 * for key, or a validated unified entry of its id, and then (acquire fence) reads the store
 * row, reads a value the key held at the instant it observed the index, or a later one.
 * A miss is trusted only when the index's re-pack epoch (*epoch) was even and unchanged
 * around the probe (the device's rule; the host narrows it, below): e1 = epoch (acquire) before the probe; after it, an acquire fence and
 * e2 = epoch. Tombstones are cleared in place (no second copy): emc__index_repack re-packs
 * one cluster (a run of buckets without an EMPTY slot, plus the bucket ending it) inside a
 * step that makes the epoch odd first and even again after it, with release fences. A reader
 * racing a re-pack can only miss a key it should have found (never read a wrong row: hits are
 * validated as above), and a probe that observed any write of a step sees the epoch change,
 * so no dirty row needs writing back before a re-pack. The host backend narrows this (its
 * steps are long): it publishes each cluster of a step before re-packing it, and a miss seen
 * while the epoch stayed odd is kept unless its key's home lies in a cluster re-packed during
 * the probe (lib/host_cache.h, emc__repack_raced).
 * Readers wait (retry) only on a BUSY entry word or a store row's odd version, which a
 * writer thread that is running sets and clears without waiting for anything itself, and on
 * a changed entry or epoch, which costs one more probe. */
#define EMC__BUCKET 8u

#define EMC__LOC_HOST 0x80000000u     /* loc of a unified-index entry: host row below */
#define EMC__LOC_MAX 0x7fffffffu      /* largest slot handle / host row an entry can name */
#define EMC__META_BUSY 1u
#define EMC__META_DIRTY 2u
#define EMC__META_PIN_SHIFT 2u
#define EMC__META_PIN_ONE (1u << EMC__META_PIN_SHIFT) /* one pin */
#define EMC__META_PINS (15u << EMC__META_PIN_SHIFT)   /* the pin count's bits */
#define EMC__PIN_MAX 15u              /* pins an entry can hold (prefetch_depth + 1 at most) */
#define EMC__META_STEP 64u            /* one step of the meta counter */
#define EMC__META_FLAGS (EMC__META_STEP - 1u)
#define EMC__LM_BUSY ((uint64_t)EMC__META_BUSY << 32)
#define EMC__LM_DIRTY ((uint64_t)EMC__META_DIRTY << 32)
#define EMC__LM_PINS ((uint64_t)EMC__META_PINS << 32)
#define EMC__LM_PIN_ONE ((uint64_t)EMC__META_PIN_ONE << 32)
#define EMC__LM_FREE (~0ull)          /* lm of a position that holds no entry */

EMC_HD uint64_t emc__lm_make(uint32_t loc, uint32_t meta) { return ((uint64_t)meta << 32) | loc; }
EMC_HD uint32_t emc__lm_loc(uint64_t lm) { return (uint32_t)lm; }
EMC_HD uint32_t emc__lm_meta(uint64_t lm) { return (uint32_t)(lm >> 32); }
EMC_HD uint32_t emc__lm_pins(uint64_t lm) { return (emc__lm_meta(lm) & EMC__META_PINS) >> EMC__META_PIN_SHIFT; }
/* Does (lm1, lm2) validate a read? Same write (DIRTY and PINS may change), not BUSY. */
EMC_HD int emc__lm_same(uint64_t lm1, uint64_t lm2) {
  return !(lm1 & EMC__LM_BUSY) && ((lm1 ^ lm2) & ~(EMC__LM_DIRTY | EMC__LM_PINS)) == 0;
}

typedef struct emc__index_view {
  void *keys;         /* n_buckets * EMC__BUCKET keys: uint32_t (key_bits 32) or uint64_t (64) */
  uint64_t *lm;       /* n_buckets * EMC__BUCKET entry words */
  uint16_t *stamps;   /* n_buckets * EMC__BUCKET LRU stamps (see "LRU stamps") */
  uint32_t *epoch;    /* re-pack epoch: odd while a re-pack step runs */
  uint64_t n_buckets; /* >= 1 */
  uint32_t key_bits;  /* 32 or 64 */
  uint32_t pad_;
} emc__index_view;

/* Bytes of one entry (key + lm + stamp) for a key width. */
EMC_HD uint32_t emc__index_entry_bytes(uint32_t key_bits) { return key_bits == 32 ? 14u : 18u; }

EMC_HD uint64_t emc__ix_key(const emc__index_view *ix, uint64_t i) {
  if (ix->key_bits == 32) return EMC_LD_RELAXED((const uint32_t *)ix->keys + i);
  return EMC_LD_RELAXED((const uint64_t *)ix->keys + i);
}
EMC_HD void emc__ix_set_key(const emc__index_view *ix, uint64_t i, uint64_t key) {
  if (ix->key_bits == 32) EMC_ST_RELAXED((uint32_t *)ix->keys + i, (uint32_t)key);
  else EMC_ST_RELAXED((uint64_t *)ix->keys + i, key);
}
EMC_HD uint64_t emc__ix_lm(const emc__index_view *ix, uint64_t i) {
  return EMC_LD_RELAXED(&ix->lm[i]);
}

EMC_HD uint64_t emc__home_bucket(uint64_t key, uint64_t n_buckets) {
  return emc__mulhi(emc__fmix64(key), n_buckets);
}

/* The verdict on one bucket once its keys are known as bit masks (bit s: slot s of the
 * bucket): the key's slot, or that the probe ends here, or that it goes on. The device's
 * cooperative probe builds the masks with one ballot over the lanes that loaded the bucket;
 * the host builds them in a loop. */
enum { EMC__PROBE_FOUND = 0, EMC__PROBE_ABSENT = 1, EMC__PROBE_NEXT = 2 };
EMC_HD int emc__probe_step(uint32_t match_mask, uint32_t empty_mask, uint64_t b, int64_t *pos) {
  if (match_mask) {
    unsigned s = 0;
    while (!(match_mask >> s & 1u)) s++;
    *pos = (int64_t)(b * EMC__BUCKET + s);
    return EMC__PROBE_FOUND;
  }
  return empty_mask ? EMC__PROBE_ABSENT : EMC__PROBE_NEXT;
}

/* Match and EMPTY masks of bucket b for key (slot by slot: the reference and host path). */
EMC_HD void emc__bucket_masks(const emc__index_view *ix, uint64_t b, uint64_t key, uint64_t empty,
                              uint32_t *match, uint32_t *emp) {
  uint32_t m = 0, e = 0;
  unsigned s;
  for (s = 0; s < EMC__BUCKET; s++) {
    uint64_t v = emc__ix_key(ix, b * EMC__BUCKET + s);
    m |= (uint32_t)(v == key) << s;
    e |= (uint32_t)(v == empty) << s;
  }
  *match = m;
  *emp = e;
}

/* Steps 5-7 of the reader protocol (see "index"): key2 is loaded before the acquire fence and
 * lm2 after it. 1 when (key, lm1) held position pos from the load of lm1 to the load of lm2,
 * so what the reader read in between (step 4) is what lm1 named. The device runs the same
 * steps with its fences shared by a tile of rows (cuda/lookup.cu). */
EMC_HD int emc__entry_recheck(const emc__index_view *ix, uint64_t pos, uint64_t key, uint64_t lm1) {
  uint64_t key2 = emc__ix_key(ix, pos), lm2;
  EMC__TP(EMC__TP_READ, "read: key re-read");
  EMC_FENCE_ACQUIRE();
  lm2 = emc__ix_lm(ix, pos);
  return key2 == key && emc__lm_same(lm1, lm2);
}

/* Probe for key (the reference probe, slot by slot with an early exit; the host's path).
 * Returns the slot index of the entry holding key, or -1 when absent. Lock-free: a concurrent
 * writer may make the answer stale; readers validate (see above). */
EMC_HD int64_t emc__index_find(const emc__index_view *ix, uint64_t key) {
  uint64_t empty = emc__key_empty(ix->key_bits), b = emc__home_bucket(key, ix->n_buckets), n;
  for (n = 0; n < ix->n_buckets; n++) {
    int saw_empty = 0;
    unsigned s;
    if (ix->key_bits == 32) {
      const uint32_t *k = (const uint32_t *)ix->keys + b * EMC__BUCKET;
      for (s = 0; s < EMC__BUCKET; s++) {
        uint32_t v = EMC_LD_RELAXED(&k[s]);
        if (v == (uint32_t)key) return (int64_t)(b * EMC__BUCKET + s);
        saw_empty |= v == (uint32_t)empty;
      }
    } else {
      const uint64_t *k = (const uint64_t *)ix->keys + b * EMC__BUCKET;
      for (s = 0; s < EMC__BUCKET; s++) {
        uint64_t v = EMC_LD_RELAXED(&k[s]);
        if (v == key) return (int64_t)(b * EMC__BUCKET + s);
        saw_empty |= v == empty;
      }
    }
    if (saw_empty) return -1;
    if (++b == ix->n_buckets) b = 0;
  }
  return -1;
}

/* The cooperative probe's host twin: each bucket judged from its match / EMPTY masks by
 * emc__probe_step, as the device does after one coalesced load and a ballot. Same answers as
 * emc__index_find (tests hold them equal). */
EMC_HD int64_t emc__index_find_masks(const emc__index_view *ix, uint64_t key) {
  uint64_t empty = emc__key_empty(ix->key_bits), b = emc__home_bucket(key, ix->n_buckets), n;
  for (n = 0; n < ix->n_buckets; n++) {
    uint32_t m, e;
    int64_t pos = -1;
    int r;
    emc__bucket_masks(ix, b, key, empty, &m, &e);
    r = emc__probe_step(m, e, b, &pos);
    if (r == EMC__PROBE_FOUND) return pos;
    if (r == EMC__PROBE_ABSENT) return -1;
    if (++b == ix->n_buckets) b = 0;
  }
  return -1;
}

/* Writer side: the first free (EMPTY or TOMB) slot on key's probe path, or -1 when the
 * index is full. Caller is the (serialized) writer and checked that key is absent. */
EMC_HD int64_t emc__index_free_slot(const emc__index_view *ix, uint64_t key) {
  uint64_t empty = emc__key_empty(ix->key_bits), tomb = emc__key_tomb(ix->key_bits);
  uint64_t b = emc__home_bucket(key, ix->n_buckets), n;
  for (n = 0; n < ix->n_buckets; n++) {
    unsigned s;
    for (s = 0; s < EMC__BUCKET; s++) {
      uint64_t v = emc__ix_key(ix, b * EMC__BUCKET + s);
      if (v == empty || v == tomb) return (int64_t)(b * EMC__BUCKET + s);
    }
    if (++b == ix->n_buckets) b = 0;
  }
  return -1;
}

/* Does bucket b hold an EMPTY slot? */
EMC_HD int emc__bucket_has_empty(const emc__index_view *ix, uint64_t b) {
  uint64_t empty = emc__key_empty(ix->key_bits);
  unsigned s;
  for (s = 0; s < EMC__BUCKET; s++)
    if (emc__ix_key(ix, b * EMC__BUCKET + s) == empty) return 1;
  return 0;
}

/* Buckets of the cluster that starts at bucket `start`: a run of buckets without EMPTY slots
 * and the bucket that ends it (the first with an EMPTY slot). 0 when no bucket among the next
 * max_buckets holds an EMPTY slot. */
EMC_HD uint64_t emc__index_cluster_len(const emc__index_view *ix, uint64_t start,
                                       uint64_t max_buckets) {
  uint64_t len;
  for (len = 1; len <= max_buckets && len <= ix->n_buckets; len++)
    if (emc__bucket_has_empty(ix, (start + len - 1) % ix->n_buckets)) return len;
  return 0;
}

/* Re-pack the cluster of `len` buckets that starts at bucket `start` (emc__index_cluster_len;
 * the bucket before it holds an EMPTY slot, so no key's probe path enters it from outside):
 * its live entries are laid out again as if inserted into the empty cluster in slot order,
 * which drops its tombstones. tmp_* hold len * EMC__BUCKET entries (the caller's scratch).
 * Returns the tombstones dropped. Writer only. Entries keep their lm and stamp and only move
 * towards their home. The new layout is built in the scratch, then written slot by slot: a
 * slot that gets another entry first gets a BUSY lm (a reader holding the old key there
 * fails), then its key, then its lm; a slot that empties gets EMPTY first. A racing reader
 * thus finds a key at its old or its new slot or misses it; the header says why such a miss
 * is harmless. */
EMC_HD uint64_t emc__index_repack(const emc__index_view *ix, uint64_t start, uint64_t len,
                                  uint64_t *tmp_keys, uint64_t *tmp_lm, uint16_t *tmp_stamps) {
  uint64_t empty = emc__key_empty(ix->key_bits), tomb = emc__key_tomb(ix->key_bits);
  uint64_t nb = ix->n_buckets, ns = len * EMC__BUCKET, i, tombs = 0;
  for (i = 0; i < ns; i++) {
    tmp_keys[i] = empty;
    tmp_lm[i] = EMC__LM_FREE;
    tmp_stamps[i] = 0;
  }
  for (i = 0; i < ns; i++) {
    uint64_t p = ((start + i / EMC__BUCKET) % nb) * EMC__BUCKET + i % EMC__BUCKET;
    uint64_t k = emc__ix_key(ix, p), h, j;
    if (k == empty) continue;
    if (k == tomb) {
      tombs++;
      continue;
    }
    h = (emc__home_bucket(k, nb) + nb - start) % nb; /* home bucket, relative to start */
    if (h >= len) h = 0; /* cannot happen: homes lie inside the cluster */
    for (j = h * EMC__BUCKET; j < ns && tmp_keys[j] != empty; j++) {
    }
    if (j >= ns) /* cannot happen either: the entries came from these slots */
      for (j = 0; tmp_keys[j] != empty; j++) {
      }
    tmp_keys[j] = k;
    tmp_lm[j] = emc__ix_lm(ix, p);
    tmp_stamps[j] = EMC_LD_RELAXED(&ix->stamps[p]);
  }
  for (i = 0; i < ns; i++) {
    uint64_t p = ((start + i / EMC__BUCKET) % nb) * EMC__BUCKET + i % EMC__BUCKET;
    if (emc__ix_key(ix, p) == tmp_keys[i] && emc__ix_lm(ix, p) == tmp_lm[i]) continue;
    if (tmp_keys[i] == empty) {
      emc__ix_set_key(ix, p, empty);
      EMC__TP(EMC__TP_WRITE, "repack: key emptied");
      EMC_FENCE_RELEASE();
      EMC_ST_RELAXED(&ix->lm[p], (uint64_t)EMC__LM_FREE);
      EMC__TP(EMC__TP_WRITE, "repack: lm freed");
    } else {
      EMC_ST_RELAXED(&ix->lm[p], (uint64_t)EMC__LM_FREE);
      EMC__TP(EMC__TP_WRITE, "repack: lm freed for a move");
      EMC_FENCE_RELEASE();
      emc__ix_set_key(ix, p, tmp_keys[i]);
      EMC_ST_RELAXED(&ix->stamps[p], tmp_stamps[i]);
      EMC__TP(EMC__TP_WRITE, "repack: key moved in");
      EMC_FENCE_RELEASE();
      EMC_ST_RELAXED(&ix->lm[p], tmp_lm[i]);
      EMC__TP(EMC__TP_WRITE, "repack: lm moved in");
    }
  }
  return tombs;
}

#endif /* EMC_ITEM_INDEX_H */
