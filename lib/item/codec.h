/*
 * lib/item/codec.h: hashing (fmix64, the XXH3-64 twin) and the key codec.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_CODEC_H
#define EMC_ITEM_CODEC_H

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

#endif /* EMC_ITEM_CODEC_H */
