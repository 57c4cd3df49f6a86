/*
 * emc_size.h: overflow-checked size arithmetic, the one place every size computed from user
 * input goes through (store and table sizes, batch bytes, lookup/insert scratch, pool
 * geometry, index sizing, CUDA scratch).
 *
 * Each helper stores the exact result in *out and returns 1, or returns 0 when the result does
 * not fit the type (then *out is unspecified and must not be used). A failure site reads
 *
 *     size_t bytes;
 *     if (!emc__size_mul(n, sizeof *keys, &bytes))
 *       return EMC_FAIL(EMC_ENOMEM, "scratch for %llu ids overflows", ...);
 *
 * The status is the caller's choice: sizes of buffers the caller hands in (ids, rows) that
 * cannot exist in an address space are EMC_EINVAL; memory the library itself would have to
 * allocate is EMC_ENOMEM.
 *
 * Header only, no globals: host C11 (lib/), C++ host code of cuda/ (nvcc), gcc and clang
 * (__builtin_*_overflow).
 */
#ifndef EMC_SIZE_H
#define EMC_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* a * b as size_t. */
static inline int emc__size_mul(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* a + b as size_t. */
static inline int emc__size_add(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* a * b + c as size_t. */
static inline int emc__size_muladd(size_t a, size_t b, size_t c, size_t *out) {
  size_t m;
  return emc__size_mul(a, b, &m) && emc__size_add(m, c, out);
}

/* A 64-bit count (ids, rows, slots) times an element size, as size_t: also fails when the
 * count itself does not fit size_t (32-bit hosts). */
static inline int emc__size_mul64(uint64_t n, size_t elem, size_t *out) {
  return n <= (uint64_t)SIZE_MAX && emc__size_mul((size_t)n, elem, out);
}

/* a * b as uint64_t (counts that are not yet byte sizes: pages * slots, ...). */
static inline int emc__u64_mul(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* a + b as uint64_t. */
static inline int emc__u64_add(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* ceil(a / b) for b > 0, without the a + b - 1 that wraps near UINT64_MAX. */
static inline uint64_t emc__u64_div_ceil(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

/* The smallest power of two >= n and >= min (min a power of two), as uint64_t; 0 when it
 * would exceed 2^63. */
static inline uint64_t emc__u64_pow2_at_least(uint64_t n, uint64_t min) {
  uint64_t p = min;
  while (p < n) {
    if (p > (UINT64_MAX >> 1)) return 0;
    p <<= 1;
  }
  return p;
}

/* x * f for a fraction 0 <= f <= 1, rounded down, never above x (a float product can round
 * up to 2^64, whose conversion back to uint64_t is undefined). */
static inline uint64_t emc__u64_scale(uint64_t x, double f) {
  double v = (double)x * f;
  if (!(v > 0.0)) return 0;
  if (v >= 18446744073709551616.0) return x; /* 2^64: f == 1 (or rounding) on a huge x */
  return (uint64_t)v > x ? x : (uint64_t)v;
}

#endif /* EMC_SIZE_H */
