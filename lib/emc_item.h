/*
 * emc_item.h: per-item logic shared by the host backend (lib/, C11) and the CUDA backend
 * (cuda/, CUDA C). Everything here is a small pure function or a flat, trivially-copyable
 * view over memory owned elsewhere, so the same code runs in host and device memory and the
 * host tests cover what the device runs.
 *
 *   - hashing: fmix64 (index placement), an XXH3-64 twin for 8-byte ids (hashed tables)
 *   - the key codec: global_key(T, F) = code(T) << (n - m) | f(F)
 *   - the global index (bucketed open addressing, one copy, in-place tombstone re-pack), its
 *     entry encoding and the optimistic reader / serialized writer protocol
 *   - pool page layout (free bitmaps), LRU stamps, the per-call miss set, admission planning
 *   - relaxed/acquire/release access helpers, row copy, f16 conversion, uniform rows
 *
 * Rules: no allocation, no libc beyond <stdint.h>/<string.h>, no globals (but the tests' hook
 * of "test points", which exists only in the tests' build).
 */
#ifndef EMC_ITEM_H
#define EMC_ITEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define EMC_HD __host__ __device__ __forceinline__
#else
#define EMC_HD static inline
#endif

/* ------------------------------------------------------------- memory access
 * Data protected by a version (slot rows, store rows, index entries) is read with relaxed
 * atomics and validated by re-reading the version after an acquire fence: plain reads of
 * data a writer may be changing would be a data race in C11. On x86-64 and on the GPU
 * these compile to plain loads. */
#if defined(__CUDA_ARCH__) && defined(EMCSIM)
/* the CPU model of the device (cuda/sim/): the device's accesses, instrumented */
#define EMC_LD_RELAXED(p) emcsim::ld((p), __ATOMIC_RELAXED, "ld.volatile")
#define EMC_LD_ACQUIRE(p) emc__ld_acq_dev(p)
#define EMC_ST_RELAXED(p, v) emcsim::st((p), (__typeof__(*(p)))(v), __ATOMIC_RELAXED, "st.volatile")
#define EMC_ST_RELEASE(p, v) (__threadfence(), EMC_ST_RELAXED((p), (v)))
#define EMC_FENCE_ACQUIRE() __threadfence()
#define EMC_FENCE_RELEASE() __threadfence()
#elif defined(__CUDA_ARCH__)
#define EMC_LD_RELAXED(p) (*(volatile __typeof__(*(p)) *)(p))
#define EMC_LD_ACQUIRE(p) emc__ld_acq_dev(p)
#define EMC_ST_RELAXED(p, v) (*(volatile __typeof__(*(p)) *)(p) = (v))
#define EMC_ST_RELEASE(p, v) (__threadfence(), *(volatile __typeof__(*(p)) *)(p) = (v))
#define EMC_FENCE_ACQUIRE() __threadfence()
#define EMC_FENCE_RELEASE() __threadfence()
#endif
#if defined(__CUDA_ARCH__)
/* ld.acquire.gpu: orders the loads after it without a full fence (membar) per load.
 * C++ overloads (this header may be included inside extern "C"). Under the CPU model of the
 * device (EMCSIM, cuda/sim/), an acquire load of the same strength, instrumented. */
extern "C++" {
#if defined(EMCSIM)
template <typename T> __device__ __forceinline__ T emc__ld_acq_dev(const T *p) {
  return emcsim::ld(p, __ATOMIC_ACQUIRE, "ld.acquire.gpu");
}
#else
__device__ __forceinline__ uint64_t emc__ld_acq_dev(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t emc__ld_acq_dev(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
#endif
}
#else
#define EMC_LD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define EMC_LD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define EMC_ST_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define EMC_ST_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define EMC_FENCE_ACQUIRE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define EMC_FENCE_RELEASE() __atomic_thread_fence(__ATOMIC_RELEASE)
#endif

/* ------------------------------------------------------------- test points
 * EMC__TP(kind, what) marks a named step of the reader or writer protocol: after a load the
 * protocol's argument is about (kind EMC__TP_READ), before a reader goes round again
 * (EMC__TP_RETRY), after a store of the writer protocol (EMC__TP_WRITE). It compiles to
 * nothing unless EMC_TEST_HOOKS is defined, which only the tests' build of the library
 * (embcache_hooks) does: there it calls emc__tp_hook when a test installed one, and
 * tests/test_protocol.c pauses threads at chosen steps to force interleavings. */
enum { EMC__TP_READ = 1, EMC__TP_RETRY = 2, EMC__TP_WRITE = 3 };
#if defined(EMC_TEST_HOOKS) && !defined(__CUDACC__)
extern void (*emc__tp_hook)(int kind, const char *what);
#define EMC__TP(kind, what)                                                              \
  do {                                                                                   \
    void (*emc_tp_f_)(int, const char *) = __atomic_load_n(&emc__tp_hook, __ATOMIC_ACQUIRE); \
    if (emc_tp_f_) emc_tp_f_((kind), (what));                                            \
  } while (0)
#else
#define EMC__TP(kind, what) ((void)0)
#endif

/* ------------------------------------------------------------- host vector reads
 * The host's copies of version-protected rows and its bucket matches use 16-byte vector loads
 * (SSE2 on x86-64, NEON on aarch64: the baseline of both, no runtime dispatch) where the
 * build allows: EMC__HOST_VEC. They are volatile loads, not C11 atomics: like the Linux
 * kernel's READ_ONCE they sit outside C11's model, but GCC and clang emit exactly one load
 * for each (never elided, fused with another or repeated), and the protocol needs nothing
 * more of them: a copy that raced a writer is torn at worst, and the validation that follows
 * every copy (the entry's or the stripe's version re-read after an acquire fence) discards
 * it. Writers store rows the same way (emc__row_store; volatile 16-byte stores, one writer at
 * a time under its lock), between a BUSY entry word or an odd stripe version and the fresh
 * one that ends the write, so a reader that saw any of those stores fails its validation.
 * The ThreadSanitizer build (EMC_SANITIZE=thread) and the device keep the relaxed-atomic
 * path, so the protocol is checked under TSan with C11 atomics. */
#if !defined(__CUDACC__) && !defined(__CUDA_ARCH__) && !defined(EMCSIM) && \
    (defined(__x86_64__) || defined(__aarch64__)) && !defined(__SANITIZE_THREAD__)
#if defined(__has_feature)
#if !__has_feature(thread_sanitizer)
#define EMC__HOST_VEC 1
#endif
#else
#define EMC__HOST_VEC 1
#endif
#endif
#ifndef EMC__HOST_VEC
#define EMC__HOST_VEC 0
#endif
#if EMC__HOST_VEC
/* 16 bytes, any alignment (as x86's __m128i_u) */
typedef long long emc__v16 __attribute__((vector_size(16), may_alias, aligned(1)));
/* 16 bytes of a version-protected row at p (one load) */
static inline emc__v16 emc__v16_load(const void *p) { return *(const volatile emc__v16 *)p; }
/* 16 bytes into a version-protected row at p (one store; writers only, under their lock) */
static inline void emc__v16_store(void *p, emc__v16 v) { *(volatile emc__v16 *)p = v; }
#endif

/* Copy `bytes` bytes from a version-protected row (src) to private memory (dst) with
 * relaxed atomic loads (host vector loads: see above). src is 4-byte aligned and readable up
 * to round_up(bytes, 4) (slots and store rows have a stride that is a multiple of 4). */
EMC_HD void emc__row_load(void *dst, const void *src, size_t bytes) {
  const uint32_t *s = (const uint32_t *)src;
  unsigned char *d = (unsigned char *)dst;
  size_t words = bytes / 4, i;
#if EMC__HOST_VEC
  if (bytes >= 16) { /* whole vectors, then the last 16 bytes (overlapping) */
    const unsigned char *sc = (const unsigned char *)src, *sp = sc;
    const unsigned char *lines = sc + (bytes & ~(size_t)63), *vecs = sc + (bytes & ~(size_t)15);
    unsigned char *dp = d;
    for (; sp < lines; sp += 64, dp += 64) { /* a line at a time: four loads, then four stores */
      emc__v16 v0 = emc__v16_load(sp), v1 = emc__v16_load(sp + 16), v2 = emc__v16_load(sp + 32),
               v3 = emc__v16_load(sp + 48);
      memcpy(dp, &v0, 16);
      memcpy(dp + 16, &v1, 16);
      memcpy(dp + 32, &v2, 16);
      memcpy(dp + 48, &v3, 16);
    }
    for (; sp < vecs; sp += 16, dp += 16) {
      emc__v16 v = emc__v16_load(sp);
      memcpy(dp, &v, 16);
    }
    if (bytes & 15u) {
      emc__v16 v = emc__v16_load(sc + bytes - 16);
      memcpy(d + bytes - 16, &v, 16);
    }
    return;
  }
#endif
  if (((uintptr_t)src & 7u) == 0) {
    const uint64_t *s8 = (const uint64_t *)src;
    size_t w8 = bytes / 8;
    for (i = 0; i < w8; i++) {
      uint64_t v = EMC_LD_RELAXED(&s8[i]);
      memcpy(d + 8 * i, &v, 8);
    }
    i = w8 * 2;
  } else {
    i = 0;
  }
  for (; i < words; i++) {
    uint32_t v = EMC_LD_RELAXED(&s[i]);
    memcpy(d + 4 * i, &v, 4);
  }
  if (bytes & 3u) {
    uint32_t v = EMC_LD_RELAXED(&s[words]);
    memcpy(d + 4 * words, &v, bytes & 3u);
  }
}

/* Store `bytes` bytes into a version-protected row with relaxed atomic stores (host vector
 * stores where the build allows: see "host vector reads"; a torn row is never validated, as
 * readers see the row's BUSY entry word or odd version around the stores); the padding up to
 * a multiple of 4 bytes is zeroed. */
EMC_HD void emc__row_store(void *dst, const void *src, size_t bytes) {
  uint32_t *d = (uint32_t *)dst;
  const unsigned char *s = (const unsigned char *)src;
  size_t words = bytes / 4, i;
#if EMC__HOST_VEC
  if (bytes >= 16 && (bytes & 3u) == 0) { /* whole vectors, then the last 16 bytes again */
    unsigned char *dc = (unsigned char *)dst;
    size_t n = bytes / 16;
    emc__v16 v;
    for (i = 0; i < n; i++) {
      memcpy(&v, s + 16 * i, 16);
      emc__v16_store(dc + 16 * i, v);
    }
    if (bytes & 15u) {
      memcpy(&v, s + bytes - 16, 16);
      emc__v16_store(dc + bytes - 16, v);
    }
    return;
  }
#endif
  for (i = 0; i < words; i++) {
    uint32_t v;
    memcpy(&v, s + 4 * i, 4);
    EMC_ST_RELAXED(&d[i], v);
  }
  if (bytes & 3u) {
    uint32_t v = 0;
    memcpy(&v, s + 4 * words, bytes & 3u);
    EMC_ST_RELAXED(&d[words], v);
  }
}

/* Row stride in pools and in the store: the row rounded up to 4 bytes, and to 16 bytes once
 * it is wider than 8 (so 16-byte vector loads apply to every row of a table). */
EMC_HD uint64_t emc__row_stride(uint64_t row_bytes) {
  if (row_bytes <= 4) return 4;
  if (row_bytes <= 8) return 8;
  return (row_bytes + 15u) & ~(uint64_t)15u;
}

/* ------------------------------------------------------------------ hashing */
/* MurmurHash3's 64-bit finalizer: a bijection with full avalanche; places keys in buckets. */
EMC_HD uint64_t emc__fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

EMC_HD uint64_t emc__rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64u - r)); }

/* XXH3_64bits_withSeed(&id, 8, seed) for a little-endian 64-bit id, computed without the
 * library so device code can run it (XXH3's 4-to-8-byte path with the default secret).
 * tests/test_keycodec.c checks it against libxxhash. */
EMC_HD uint64_t emc__xxh3_u64(uint64_t id, uint64_t seed) {
  /* readLE64(kSecret + 8) ^ readLE64(kSecret + 16) of XXH3's default secret */
  const uint64_t secret_flip = 0xc73ab174c5ecd5a2ull;
  uint32_t lo = (uint32_t)id, hi = (uint32_t)(id >> 32);
  uint32_t s32 = (uint32_t)seed;
  uint32_t swapped = ((s32 & 0xffu) << 24) | ((s32 & 0xff00u) << 8) | ((s32 >> 8) & 0xff00u) |
                     (s32 >> 24);
  uint64_t bitflip, input64, h;
  seed ^= (uint64_t)swapped << 32;
  bitflip = secret_flip - seed;
  input64 = (uint64_t)hi + ((uint64_t)lo << 32);
  h = input64 ^ bitflip;
  h ^= emc__rotl64(h, 49) ^ emc__rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ull;
  h ^= (h >> 35) + 8u;
  h *= 0x9FB21C651E98DF25ull;
  return h ^ (h >> 28);
}

/* high 64 bits of a 64x64 product: maps a hash onto [0, n) without a modulo */
EMC_HD uint64_t emc__mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return (uint64_t)(((unsigned __int128)a * b) >> 64);
#endif
}

/* ---------------------------------------------------------------- key codec
 * global_key(T, F) = code(T) << (n - m) | f(F)
 *   code(T): canonical Huffman code of table T (m = its length), weighted by row count.
 *   f(F):    dense tables: a bijection on the n - m feature bits (emc__mix), so distinct
 *            rows never share a key; hashed tables: XXH3(F, seed) mod 2^(n - m), whose
 *            collisions the index detects by keeping the id beside the key.
 * The codec also holds a reserved code: the all-ones code of the longest length. Keys under
 * it are never produced by a table, and the index's EMPTY (all ones) and TOMBSTONE (all ones
 * minus one) patterns lie under it. */
typedef struct emc__table_code {
  uint64_t code;  /* Huffman code, right-aligned */
  uint64_t fmask; /* (1 << fbits) - 1 */
  uint64_t rows;  /* dense: row count; hashed: capacity */
  uint32_t len;   /* code length m, >= 1 */
  uint32_t fbits; /* n - m */
  uint32_t kind;  /* emc_table_kind */
  uint32_t pad_;
} emc__table_code;

EMC_HD uint64_t emc__key_mask(uint32_t key_bits) {
  return key_bits >= 64 ? ~0ull : ((1ull << key_bits) - 1u);
}
EMC_HD uint64_t emc__key_empty(uint32_t key_bits) { return emc__key_mask(key_bits); }
EMC_HD uint64_t emc__key_tomb(uint32_t key_bits) { return emc__key_mask(key_bits) - 1u; }

/* Odd multiplier for emc__mix; its inverse mod 2^64 is computed by emc__mix_inverse. */
#define EMC__MIX_MUL 0x9E3779B97F4A7C15ull

/* A bijection on w-bit integers (1 <= w <= 64): xorshift, odd multiply, xorshift. Spreads
 * consecutive dense ids over the feature bits; emc__unmix inverts it. */
EMC_HD uint64_t emc__mix(uint64_t x, uint32_t w) {
  uint64_t mask = w >= 64 ? ~0ull : ((1ull << w) - 1u);
  unsigned s = (w + 1u) / 2u;
  x &= mask;
  x ^= x >> s;
  x = (x * EMC__MIX_MUL) & mask;
  x ^= x >> s;
  return x;
}

EMC_HD uint64_t emc__unmix(uint64_t y, uint32_t w) {
  uint64_t mask = w >= 64 ? ~0ull : ((1ull << w) - 1u);
  unsigned s = (w + 1u) / 2u;
  uint64_t inv = EMC__MIX_MUL; /* Newton: inv = inv * (2 - a * inv), doubling correct bits */
  int i;
  for (i = 0; i < 5; i++) inv *= 2u - EMC__MIX_MUL * inv;
  y &= mask;
  y ^= y >> s; /* x ^ (x >> s) is its own inverse when 2s >= w */
  y = (y * inv) & mask;
  y ^= y >> s;
  return y;
}

/* The global key of (table code tc, id). For dense tables the caller has checked id < rows. */
EMC_HD uint64_t emc__global_key(const emc__table_code *tc, uint64_t id, uint64_t hash_seed) {
  uint64_t f = tc->kind == 0 ? emc__mix(id, tc->fbits) : (emc__xxh3_u64(id, hash_seed) & tc->fmask);
  uint64_t hi = tc->fbits >= 64 ? 0 : (tc->code << tc->fbits);
  return hi | f;
}

/* ------------------------------------------------------------------- index
 * One global index for all tables: bucketed open addressing, ONE copy, keyed by global keys.
 *
 *   keys[]  n_buckets * EMC__BUCKET keys, uint32_t when key_bits is 32, uint64_t when 64: a
 *           bucket of 32-bit keys is one 32-byte sector, of 64-bit keys two. EMPTY (all ones)
 *           and TOMB (all ones - 1) lie under the codec's reserved code.
 *   lm[]    one 64-bit word per entry: loc in the low half, meta (the entry's version) in the
 *           high half.
 *   stamps[] the entry's 16-bit LRU stamp (see "LRU stamps"); it moves with the entry.
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
 * around the probe: e1 = epoch (acquire) before the probe; after it, an acquire fence and
 * e2 = epoch. Tombstones are cleared in place (no second copy): emc__index_repack re-packs
 * one cluster (a run of buckets without an EMPTY slot, plus the bucket ending it) inside a
 * step that makes the epoch odd first and even again after it, with release fences. A reader
 * racing a re-pack can only miss a key it should have found (never read a wrong row: hits are
 * validated as above), and a probe that observed any write of a step sees the epoch change,
 * so no dirty row needs writing back before a re-pack.
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

/* ------------------------------------------------------------------- pool pages
 * The pool is one arena of equal pages. A page belongs to one table at a time and is cut
 * into slots of that table's stride; the layout of a page of table t is fixed by t:
 *   [0, 64)     page header (emc__page_hdr)
 *   free bitmap n_words uint64: bit s set = slot s free (writer-only)
 *   owner[n]    uint64 id held by each slot, hashed tables only
 *   rows        n * stride bytes, 64-byte aligned
 * A slot is named by its handle, page * max_slots + slot (max_slots: the densest layout), which
 * must stay below 2^31. Slots carry no version, stamp, flags or free-list link: the index
 * entry holds the version, the dirty bit and the LRU stamp, the bitmap the free state. */
#define EMC__PAGE_NONE 0xffffffffu

typedef struct emc__page_hdr {
  uint32_t table;     /* owning table, EMC__PAGE_NONE when free */
  uint32_t n_slots;   /* slots of the owner's layout */
  uint32_t live;      /* slots in use */
  uint32_t prev;      /* host: neighbours in the owner's list of pages with free slots */
  uint32_t next;      /* ... or in the arena's list of free pages */
  uint32_t in_partial;/* host: 1 if in the owner's partial list */
  uint32_t gen;       /* incremented each time the page changes hands */
  uint32_t pad_[9];
} emc__page_hdr;

typedef struct emc__page_layout {
  uint32_t n_slots;   /* slots per page */
  uint32_t n_words;   /* free bitmap words */
  uint32_t off_bitmap, off_owner, off_rows; /* off_owner 0: no owner array (dense table) */
  uint32_t stride;    /* bytes per slot row */
} emc__page_layout;

/* Layout of a page of page_bytes for rows of `stride` bytes (owners: keep an id per slot);
 * n_slots 0 if none fits. */
EMC_HD emc__page_layout emc__layout_for(uint64_t page_bytes, uint64_t stride, int owners) {
  emc__page_layout L;
  uint64_t per = stride + (owners ? 8u : 0u), n = page_bytes > 256 ? (page_bytes - 192) * 8 / (per * 8 + 1) : 0;
  for (;; n--) {
    uint64_t words = (n + 63) / 64, o_bm = 64, o_own = o_bm + 8 * words,
             o_rows = ((owners ? o_own + 8 * n : o_own) + 63) & ~63ull;
    if (o_rows + n * stride <= page_bytes || n == 0) {
      L.n_slots = (uint32_t)n;
      L.n_words = (uint32_t)words;
      L.off_bitmap = (uint32_t)o_bm;
      L.off_owner = owners ? (uint32_t)o_own : 0u;
      L.off_rows = (uint32_t)o_rows;
      L.stride = (uint32_t)stride;
      return L;
    }
  }
}

EMC_HD uint64_t *emc__page_bitmap(void *page, const emc__page_layout *L) {
  return (uint64_t *)((unsigned char *)page + L->off_bitmap);
}
EMC_HD uint64_t *emc__slot_owner(void *page, const emc__page_layout *L, uint32_t s) {
  return (uint64_t *)((unsigned char *)page + L->off_owner) + s;
}
EMC_HD unsigned char *emc__slot_row(void *page, const emc__page_layout *L, uint32_t s) {
  return (unsigned char *)page + L->off_rows + (uint64_t)s * L->stride;
}
EMC_HD uint32_t emc__popc64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)__popcll(x);
#else
  return (uint32_t)__builtin_popcountll(x);
#endif
}
/* Index of the k-th (0-based) set bit of words[0 .. n_words), or -1 when fewer are set.
 * The device picks free slots with a warp-wide version of this; tests hold them equal. */
EMC_HD int64_t emc__bitmap_nth(const uint64_t *words, uint32_t n_words, uint32_t k) {
  uint32_t w;
  for (w = 0; w < n_words; w++) {
    uint64_t x = EMC_LD_RELAXED(&words[w]);
    uint32_t c = emc__popc64(x);
    if (k < c) {
      unsigned b = 0;
      for (;;) {
        if (x >> b & 1u) {
          if (k == 0) return (int64_t)w * 64 + b;
          k--;
        }
        b++;
      }
    }
    k -= c;
  }
  return -1;
}
/* A fresh page's bitmap: slots 0 .. n_slots-1 free, the bits past them clear. */
EMC_HD void emc__bitmap_fill(uint64_t *words, uint32_t n_words, uint32_t n_slots) {
  uint32_t w;
  for (w = 0; w < n_words; w++) {
    uint32_t lo = w * 64;
    uint64_t v = n_slots >= lo + 64 ? ~0ull : (n_slots > lo ? (1ull << (n_slots - lo)) - 1u : 0ull);
    EMC_ST_RELAXED(&words[w], v);
  }
}

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

/* ------------------------------------------------------------------- store rows
 * Store rows are protected by striped versions: stripe(table, row) picks one of
 * EMC__STORE_STRIPES counters. Writers (serialized by the store's or the cache's lock) make
 * it odd, write, make it even; readers validate as for slots. */
#define EMC__STORE_STRIPES 4096u
EMC_HD uint32_t emc__store_stripe(uint32_t table, uint64_t row) {
  return (uint32_t)(emc__fmix64(((uint64_t)table << 40) ^ row) & (EMC__STORE_STRIPES - 1u));
}

/* Hashed tables' id -> row map (the store's flat open addressing, lib/store/store.c): the row of
 * id, or -1 when absent. map_rowp1[i] is row + 1 (0 = empty), published after map_ids[i]. */
EMC_HD uint64_t emc__map_home(uint64_t id, uint64_t map_cap) {
  return emc__fmix64(id ^ 0x6a09e667f3bcc909ull) & (map_cap - 1u);
}
EMC_HD int64_t emc__map_find(const uint64_t *map_ids, const uint64_t *map_rowp1, uint64_t map_cap,
                             uint64_t id) {
  uint64_t i = emc__map_home(id, map_cap), n;
  for (n = 0; n < map_cap; n++) {
    uint64_t rp = EMC_LD_ACQUIRE(&map_rowp1[i]);
    if (rp == 0) return -1;
    if (EMC_LD_RELAXED(&map_ids[i]) == id) return (int64_t)(rp - 1u);
    i = (i + 1u) & (map_cap - 1u);
  }
  return -1;
}

/* ------------------------------------------------------------------- f16 */
/* binary32 -> binary16, round to nearest even; NaN stays NaN, overflow gives infinity. */
EMC_HD uint16_t emc__f32_to_f16(float f) {
  uint32_t x, sign, exp, mant;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  exp = (x >> 23) & 0xffu;
  mant = x & 0x7fffffu;
  if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
  {
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* subnormal or zero */
      uint32_t m, shift, r, half, rest;
      if (e < -10) return (uint16_t)sign;
      m = mant | 0x800000u;
      shift = (uint32_t)(14 - e);
      r = m >> shift;
      half = 1u << (shift - 1);
      rest = m & ((1u << shift) - 1u);
      if (rest > half || (rest == half && (r & 1u))) r++;
      return (uint16_t)(sign | r);
    } else {
      uint32_t r = ((uint32_t)e << 10) | (mant >> 13);
      uint32_t rest = mant & 0x1fffu;
      if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++; /* may carry into exp: fine */
      return (uint16_t)(sign | r);
    }
  }
}

EMC_HD float emc__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  float f;
  if (exp == 0x1fu) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else { /* normalize the subnormal */
      int e = -1;
      do { mant <<= 1; e++; } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

/* ------------------------------------------------------------------- optimizers
 * The arithmetic of emc_apply_gradients, per element, in f32, each operation rounded once in
 * the order written: no contraction into fused multiply-adds except SGD's explicit fmaf (the
 * device uses the _rn intrinsics; lib/ is compiled with -ffp-contract=off). Host and device
 * running these functions give bitwise the same rows. */
#if defined(__CUDA_ARCH__)
#define EMC_FADD(a, b) __fadd_rn((a), (b))
#define EMC_FSUB(a, b) __fsub_rn((a), (b))
#define EMC_FMUL(a, b) __fmul_rn((a), (b))
#define EMC_FDIV(a, b) __fdiv_rn((a), (b))
#define EMC_FSQRT(a) __fsqrt_rn(a)
#define EMC_FMAF(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define EMC_FADD(a, b) ((float)((a) + (b)))
#define EMC_FSUB(a, b) ((float)((a) - (b)))
#define EMC_FMUL(a, b) ((float)((a) * (b)))
#define EMC_FDIV(a, b) ((float)((a) / (b)))
#define EMC_FSQRT(a) __builtin_sqrtf(a)
#define EMC_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#endif

/* Element j of a row of `dtype` (0 f32, 1 f16) as f32, and back (f16: round to nearest even). */
EMC_HD float emc__elem_get(const unsigned char *row, uint32_t dtype, uint32_t j) {
  if (dtype == 0) {
    float f;
    memcpy(&f, row + 4u * j, 4);
    return f;
  } else {
    uint16_t h;
    memcpy(&h, row + 2u * j, 2);
    return emc__f16_to_f32(h);
  }
}
EMC_HD void emc__elem_set(unsigned char *row, uint32_t dtype, uint32_t j, float f) {
  if (dtype == 0) {
    memcpy(row + 4u * j, &f, 4);
  } else {
    uint16_t h = emc__f32_to_f16(f);
    memcpy(row + 2u * j, &h, 2);
  }
}

/* The merged gradient of a row: acc = g_first, then acc += g for each later position in
 * increasing position order (emc__grad_add), then for MEAN acc /= count (emc__grad_mean). */
EMC_HD void emc__grad_add(float *acc, const float *g, uint32_t dim) {
  uint32_t j;
  for (j = 0; j < dim; j++) acc[j] = EMC_FADD(acc[j], g[j]);
}
EMC_HD void emc__grad_mean(float *acc, uint32_t count, uint32_t dim) {
  uint32_t j;
  float n = (float)count;
  if (count <= 1) return;
  for (j = 0; j < dim; j++) acc[j] = EMC_FDIV(acc[j], n);
}

/* One optimizer step on a row held in private memory: row (dim elements of dtype), state (the
 * row's accumulator; Adagrad only), g (the merged gradient, f32). kind 0 SGD: w = fmaf(-lr, g,
 * w). kind 1 row-wise Adagrad: stored += (sum_j g_j * g_j) / dim; s = init + stored;
 * w_j = w_j - (lr * g_j) / (sqrt(s) + eps). */
EMC_HD void emc__opt_step(unsigned char *row, float *state, const float *g, uint32_t dim,
                          uint32_t dtype, uint32_t kind, float lr, float eps, float init) {
  uint32_t j;
  if (kind == 0) {
    for (j = 0; j < dim; j++) emc__elem_set(row, dtype, j, EMC_FMAF(-lr, g[j], emc__elem_get(row, dtype, j)));
  } else {
    float sum = 0.0f, s, denom;
    for (j = 0; j < dim; j++) sum = EMC_FADD(sum, EMC_FMUL(g[j], g[j]));
    *state = EMC_FADD(*state, EMC_FDIV(sum, (float)dim));
    s = EMC_FADD(init, *state);
    denom = EMC_FADD(EMC_FSQRT(s), eps);
    for (j = 0; j < dim; j++)
      emc__elem_set(row, dtype, j, EMC_FSUB(emc__elem_get(row, dtype, j), EMC_FDIV(EMC_FMUL(lr, g[j]), denom)));
  }
}

/* ------------------------------------------------------------------- uniform rows */
EMC_HD uint64_t emc__splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The uniform row of (seed, table, id): element j is lo + (hi - lo) * u_j, u_j in [0, 1) with
 * 24 random bits from splitmix64 seeded per row, held below hi against rounding. */
EMC_HD uint64_t emc__uniform_state(uint64_t seed, uint32_t table, uint64_t id) {
  return emc__fmix64(seed ^ emc__fmix64(((uint64_t)table << 32) ^ 0x5851F42D4C957F2Dull) ^
                     emc__fmix64(id + 0x2545F4914F6CDD1Dull));
}
EMC_HD float emc__uniform_elem(uint64_t state, uint32_t j, float lo, float hi) {
  uint64_t st = state + (uint64_t)j * 0x9E3779B97F4A7C15ull;
  float u = (float)(emc__splitmix64(&st) >> 40) * (1.0f / 16777216.0f);
  float v = lo + (hi - lo) * u;
  return v < hi ? v : lo;
}

#endif /* EMC_ITEM_H */
