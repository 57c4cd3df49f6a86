/*
 * emc_item.h: per-item logic shared by the host backend (lib/, C11) and the CUDA backend
 * (cuda/, CUDA C). Everything here is a small pure function or a flat, trivially-copyable
 * view over memory owned elsewhere, so the same code runs in host and device memory and the
 * host tests cover what the device runs.
 *
 *   - hashing: fmix64 (index placement), an XXH3-64 twin for 8-byte ids (hashed tables)
 *   - the key codec: global_key(T, F) = code(T) << (n - m) | f(F)
 *   - index layout (bucketed open addressing) and location encoding
 *   - pool page layout and the slot version (seqlock) protocol
 *   - relaxed/acquire/release access helpers, row copy, f16 conversion, uniform rows
 *
 * Rules: no allocation, no libc beyond <stdint.h>/<string.h>, no globals.
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
#if defined(__CUDA_ARCH__)
#define EMC_LD_RELAXED(p) (*(volatile __typeof__(*(p)) *)(p))
#define EMC_LD_ACQUIRE(p) emc__ld_acq_dev(p)
#define EMC_ST_RELAXED(p, v) (*(volatile __typeof__(*(p)) *)(p) = (v))
#define EMC_ST_RELEASE(p, v) (__threadfence(), *(volatile __typeof__(*(p)) *)(p) = (v))
#define EMC_FENCE_ACQUIRE() __threadfence()
#define EMC_FENCE_RELEASE() __threadfence()
/* ld.acquire.gpu: orders the loads after it without a full fence (membar) per load.
 * C++ overloads (this header may be included inside extern "C"). */
extern "C++" {
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
}
#else
#define EMC_LD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define EMC_LD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define EMC_ST_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define EMC_ST_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define EMC_FENCE_ACQUIRE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define EMC_FENCE_RELEASE() __atomic_thread_fence(__ATOMIC_RELEASE)
#endif

/* Copy `bytes` bytes from a version-protected row (src) to private memory (dst) with
 * relaxed atomic loads. src is 4-byte aligned and readable up to round_up(bytes, 4)
 * (slots and store rows have a stride that is a multiple of 4). */
EMC_HD void emc__row_load(void *dst, const void *src, size_t bytes) {
  const uint32_t *s = (const uint32_t *)src;
  unsigned char *d = (unsigned char *)dst;
  size_t words = bytes / 4, i;
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

/* Store `bytes` bytes into a version-protected row with relaxed atomic stores; the padding
 * up to a multiple of 4 bytes is zeroed. */
EMC_HD void emc__row_store(void *dst, const void *src, size_t bytes) {
  uint32_t *d = (uint32_t *)dst;
  const unsigned char *s = (const unsigned char *)src;
  size_t words = bytes / 4, i;
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
 * Bucketed open addressing: n_buckets buckets of EMC__BUCKET slots; keys[] of one bucket fill
 * one 64-byte line. A key's home bucket is mulhi(fmix64(key), n_buckets); probing walks
 * buckets in order and stops at the first bucket that holds an EMPTY slot (a bucket with an
 * EMPTY slot is never passed by any key's probe, which is what lets lookups stop there).
 * Entries: keys[i] (acquire/release), ids[i] (the id the entry belongs to; a different id
 * under the same key is a hashed collision), locs[i] (where the row is). */
#define EMC__BUCKET 8u

/* loc encoding */
#define EMC__LOC_HOST (1ull << 63)                /* host row: bits 0..39 row index */
#define EMC__LOC_HOST_ROW_MASK ((1ull << 40) - 1u)
#define EMC__LOC_HOST_STAMP_SHIFT 40              /* bits 40..62: coarse stamp of a host entry */
#define EMC__LOC_HOST_STAMP_MASK ((1ull << 23) - 1u)
/* pool slot: page index in bits 32..62, slot in page in bits 0..31 */
EMC_HD uint64_t emc__loc_pool(uint64_t page, uint32_t slot) { return (page << 32) | slot; }
EMC_HD uint64_t emc__loc_page(uint64_t loc) { return (loc >> 32) & 0x7fffffffull; }
EMC_HD uint32_t emc__loc_slot(uint64_t loc) { return (uint32_t)loc; }

typedef struct emc__index_view {
  uint64_t *keys;     /* n_buckets * EMC__BUCKET */
  uint64_t *ids;      /* idem */
  uint64_t *locs;     /* idem */
  uint64_t n_buckets; /* >= 1 */
} emc__index_view;

EMC_HD uint64_t emc__home_bucket(uint64_t key, uint64_t n_buckets) {
  return emc__mulhi(emc__fmix64(key), n_buckets);
}

/* Probe for key. Returns the slot index of the entry holding key, or -1 when absent.
 * Lock-free: a concurrent writer may make the answer stale; callers validate. */
EMC_HD int64_t emc__index_find(const emc__index_view *ix, uint64_t key, uint64_t empty) {
  uint64_t b = emc__home_bucket(key, ix->n_buckets), n;
  for (n = 0; n < ix->n_buckets; n++) {
    const uint64_t *k = ix->keys + b * EMC__BUCKET;
    int saw_empty = 0;
    unsigned s;
    for (s = 0; s < EMC__BUCKET; s++) {
      uint64_t v = EMC_LD_ACQUIRE(&k[s]);
      if (v == key) return (int64_t)(b * EMC__BUCKET + s);
      saw_empty |= v == empty;
    }
    if (saw_empty) return -1;
    if (++b == ix->n_buckets) b = 0;
  }
  return -1;
}

/* ------------------------------------------------------------------- pool pages
 * The pool is one arena of equal pages. A page belongs to one table at a time and is cut
 * into slots of that table's stride; the layout of a page of table t is fixed by t:
 *   [0, 64)           page header (emc__page_hdr)
 *   seq[n]  uint32    slot version: odd while a writer changes the slot, +2 per change
 *   owner[n] uint64   id held by the slot
 *   next[n] uint32    free-list link (writer-only)
 *   flags[n] uint8    EMC__SLOT_LIVE | EMC__SLOT_DIRTY
 *   rows              n * stride bytes, 64-byte aligned
 * A reader trusts a slot's row only if: the page tag (generation << 32 | table) is the same
 * before and after, the slot version is even and the same before and after, the slot is
 * live and owner == id.
 * LRU stamps are NOT in the page: readers write them after a read, by which time the page
 * may hold another table's layout, and a stale write must never land on a free-list link or
 * a row. They live in one flat array of n_pages * max_slots stamps (slot s of page p at
 * p * max_slots + s), so a stale write can only touch a stamp. */
#define EMC__SLOT_LIVE 1u
#define EMC__SLOT_DIRTY 2u
#define EMC__PAGE_NONE 0xffffffffu

typedef struct emc__page_hdr {
  uint64_t tag;       /* (generation << 32) | table, table EMC__PAGE_NONE when free */
  uint32_t n_slots;   /* slots of the owning table's layout */
  uint32_t live;      /* live slots */
  uint32_t free_head; /* first free slot, EMC__PAGE_NONE if full */
  uint32_t prev;      /* neighbours in the owner's list of pages with free slots */
  uint32_t next;      /* ... or in the arena's list of free pages */
  uint32_t in_partial;/* 1 if in the owner's partial list */
  uint64_t pad_[4];
} emc__page_hdr;

typedef struct emc__page_layout {
  uint32_t n_slots;   /* slots per page */
  uint32_t off_seq, off_owner, off_next, off_flags, off_rows;
  uint32_t stride;    /* bytes per slot row */
} emc__page_layout;

/* Layout of a page of page_bytes for rows of `stride` bytes; n_slots 0 if none fits. */
EMC_HD emc__page_layout emc__layout_for(uint64_t page_bytes, uint64_t stride) {
  emc__page_layout L;
  uint64_t n = (page_bytes - 64 - 64) / (stride + 4 + 8 + 4 + 1);
  for (;; n--) {
    uint64_t o_seq = 64, o_owner = (o_seq + 4 * n + 7) & ~7ull,
             o_next = o_owner + 8 * n, o_flags = o_next + 4 * n,
             o_rows = (o_flags + n + 63) & ~63ull;
    if (o_rows + n * stride <= page_bytes || n == 0) {
      L.n_slots = (uint32_t)n;
      L.off_seq = (uint32_t)o_seq;
      L.off_owner = (uint32_t)o_owner; L.off_next = (uint32_t)o_next;
      L.off_flags = (uint32_t)o_flags; L.off_rows = (uint32_t)o_rows;
      L.stride = (uint32_t)stride;
      return L;
    }
  }
}

#define EMC__PAGE_FIELD(page, L, off, type, slot) ((type *)((unsigned char *)(page) + (L)->off) + (slot))
EMC_HD uint32_t *emc__slot_seq(void *page, const emc__page_layout *L, uint32_t s) {
  return EMC__PAGE_FIELD(page, L, off_seq, uint32_t, s);
}
EMC_HD uint64_t *emc__slot_owner(void *page, const emc__page_layout *L, uint32_t s) {
  return EMC__PAGE_FIELD(page, L, off_owner, uint64_t, s);
}
EMC_HD uint32_t *emc__slot_next(void *page, const emc__page_layout *L, uint32_t s) {
  return EMC__PAGE_FIELD(page, L, off_next, uint32_t, s);
}
EMC_HD uint8_t *emc__slot_flags(void *page, const emc__page_layout *L, uint32_t s) {
  return EMC__PAGE_FIELD(page, L, off_flags, uint8_t, s);
}
EMC_HD unsigned char *emc__slot_row(void *page, const emc__page_layout *L, uint32_t s) {
  return (unsigned char *)page + L->off_rows + (uint64_t)s * L->stride;
}

/* Optimistic read of slot s of `page` for (table, id) into dst (row_bytes).
 * Returns 1 if dst holds the row id had at one instant during the call, 0 if the slot
 * changed, moved or belongs to another row (the caller re-resolves). */
EMC_HD int emc__slot_read(void *page, const emc__page_layout *L, uint32_t s, uint32_t table,
                          uint64_t id, void *dst, size_t row_bytes) {
  emc__page_hdr *h = (emc__page_hdr *)page;
  uint64_t tag1 = EMC_LD_ACQUIRE(&h->tag), tag2;
  uint32_t v1, v2;
  if ((uint32_t)tag1 != table || s >= L->n_slots) return 0;
  v1 = EMC_LD_ACQUIRE(emc__slot_seq(page, L, s));
  if (v1 & 1u) return 0;
  if (!(EMC_LD_RELAXED(emc__slot_flags(page, L, s)) & EMC__SLOT_LIVE)) return 0;
  if (EMC_LD_RELAXED(emc__slot_owner(page, L, s)) != id) return 0;
  emc__row_load(dst, emc__slot_row(page, L, s), row_bytes);
  EMC_FENCE_ACQUIRE();
  v2 = EMC_LD_RELAXED(emc__slot_seq(page, L, s));
  tag2 = EMC_LD_RELAXED(&h->tag);
  return v1 == v2 && tag1 == tag2;
}

/* Writer side of the slot version (caller holds the writer lock): begin makes the version
 * odd, end makes it even again; everything between is invisible to validated readers. */
EMC_HD void emc__slot_write_begin(void *page, const emc__page_layout *L, uint32_t s) {
  uint32_t *q = emc__slot_seq(page, L, s);
  EMC_ST_RELAXED(q, EMC_LD_RELAXED(q) + 1u);
  EMC_FENCE_RELEASE();
}
EMC_HD void emc__slot_write_end(void *page, const emc__page_layout *L, uint32_t s) {
  uint32_t *q = emc__slot_seq(page, L, s);
  EMC_ST_RELEASE(q, EMC_LD_RELAXED(q) + 1u);
}

/* ------------------------------------------------------------------- store rows
 * Store rows are protected by striped versions: stripe(table, row) picks one of
 * EMC__STORE_STRIPES counters. Writers (serialized by the store's or the cache's lock) make
 * it odd, write, make it even; readers validate as for slots. */
#define EMC__STORE_STRIPES 4096u
EMC_HD uint32_t emc__store_stripe(uint32_t table, uint64_t row) {
  return (uint32_t)(emc__fmix64(((uint64_t)table << 40) ^ row) & (EMC__STORE_STRIPES - 1u));
}

/* Hashed tables' id -> row map (the store's flat open addressing, lib/store.c): the row of
 * id, or -1 when absent. map_rowp1[i] is row + 1 (0 = empty), published after map_ids[i]. */
EMC_HD int64_t emc__map_find(const uint64_t *map_ids, const uint64_t *map_rowp1, uint64_t map_cap,
                             uint64_t id) {
  uint64_t i = emc__fmix64(id ^ 0x6a09e667f3bcc909ull) & (map_cap - 1u), n;
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
