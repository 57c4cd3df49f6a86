/*
 * lib/item/policy.h: per-call policy state: LRU stamps, the miss set, admission planning.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_POLICY_H
#define EMC_ITEM_POLICY_H

/* ------------------------------------------------------------------- LRU stamps
 * Every index entry carries a 16-bit stamp of the call clock (mod 2^16), written by the reader
 * that last hit it (a late write after the entry moved lands on another entry's stamp: an
 * approximation, never a corruption). An eviction pass reads ages, (now - stamp) mod 2^16;
 * it clamps every age above EMC__AGE_CLAMP back to that age, and a clamp-only scan runs
 * whenever EMC__AGE_CLAMP / 2 clock ticks pass without one, so no live entry's true age
 * passes 2^16 unnoticed and wraps round to look young.
 * A stamp may also lie ahead of the pass's `now`: a lookup that began after the writer read
 * the clock (another thread's, or the next call while the admission thread or the device's
 * writer stream works on an older call) stamps the rows it hits with its own, later clock.
 * Such a row was just used: a stamp less than EMC__STAMP_AHEAD ticks ahead counts as age 0 (as
 * (now - stamp) mod 2^16 it would be about 2^16, the oldest of all, and the pass would evict
 * the hottest rows first). True ages stay far below 2^16 - EMC__STAMP_AHEAD (the clamp), and
 * host writers age against the newest clock (evict.c), so a stamp is never further ahead
 * than the lookups running at one time. */
#define EMC__AGE_CLAMP 32768u
#define EMC__STAMP_AHEAD 4096u
EMC_HD uint16_t emc__stamp_of(uint64_t clock) { return (uint16_t)clock; }
EMC_HD uint32_t emc__stamp_age(uint64_t now, uint16_t stamp) {
  uint32_t a = (uint32_t)(uint16_t)((uint16_t)now - stamp);
  return a > 65536u - EMC__STAMP_AHEAD ? 0u : a;
}

/* ------------------------------------------------------------------- miss set
 * A lookup's misses are deduplicated in a per-call open-addressing set of 64-bit words:
 * (epoch << 32) | fingerprint, fingerprint = the key for 32-bit keys, a 32-bit hash of it for
 * 64-bit keys (two keys sharing one in a call: the second is not admitted by this call, which
 * only delays it). Words of another epoch count as empty, so the set is never cleared
 * between calls; epoch 0 is never used. Returns 1 for the first occurrence of key in the
 * epoch, 0 for a repeat (and 0 when the set is full: not admitted). The device inserts with
 * atomicCAS; the host twin runs the same loop with a compare-exchange. */
EMC_HD uint64_t emc__missset_word(uint32_t epoch, uint64_t key, uint32_t key_bits) {
  uint32_t fp = key_bits == 32 ? (uint32_t)key : (uint32_t)(emc__fmix64(key) >> 32);
  return ((uint64_t)epoch << 32) | fp;
}
EMC_HD uint64_t emc__missset_cas(uint64_t *p, uint64_t expected, uint64_t desired) {
#if defined(__CUDA_ARCH__)
  return (uint64_t)atomicCAS((unsigned long long *)p, (unsigned long long)expected,
                             (unsigned long long)desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected; /* the value found: == desired's expectation on success */
#endif
}
EMC_HD int emc__missset_insert(uint64_t *set, uint64_t mask, uint32_t epoch, uint64_t key,
                               uint32_t key_bits) {
  uint64_t w = emc__missset_word(epoch, key, key_bits), i = emc__fmix64(key ^ 0x9e37u) & mask, n;
  for (n = 0; n <= mask; n++) {
    uint64_t cur = EMC_LD_RELAXED(&set[i]);
    for (;;) {
      uint64_t got;
      if (cur == w) return 0;
      if ((uint32_t)(cur >> 32) == epoch) break; /* another key of this call: next slot */
      got = emc__missset_cas(&set[i], cur, w);
      if (got == cur) return 1;
      cur = got; /* raced: look at what is there now */
    }
    i = (i + 1u) & mask;
  }
  return 0;
}

/* ------------------------------------------------------------------- admission planning
 * Admission shares the room below t1 between tables in table order: with need_t rows of
 * stride_t bytes asked for and P_t = sum_{u<t} need_u * stride_u, table t may admit
 *     allow_t = min(need_t, max(0, room - P_t) / stride_t)
 * rows. Every allow_t depends only on a prefix sum, so the device computes all of them with
 * one block-wide scan; emc__plan_allow is the per-table formula both sides share. */
EMC_HD uint32_t emc__plan_allow(uint64_t room, uint64_t prefix, uint32_t need, uint32_t stride) {
  uint64_t left = room > prefix ? room - prefix : 0, fit = left / stride;
  return (uint32_t)(fit < need ? fit : need);
}

#endif /* EMC_ITEM_POLICY_H */
