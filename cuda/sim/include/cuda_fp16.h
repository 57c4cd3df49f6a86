/*
 * cuda_fp16.h (CPU model): __half and its conversions, bit-exact with the device's (round to
 * nearest even, subnormals kept, overflow to infinity, and every NaN the canonical one: 0x7fff as
 * a half, 0x7fffffff as a float, as the toolkit's cuda_fp16.hpp host code that mirrors the
 * device's cvt gives them).
 */
#ifndef EMCSIM_CUDA_FP16_H
#define EMCSIM_CUDA_FP16_H
#include <stdint.h>
#include <string.h>

struct __half {
  unsigned short x;
};
typedef struct __half half;

static inline unsigned short emcsim_f32_to_f16_bits(float f) {
  uint32_t x, sign, exp, mant;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  exp = (x >> 23) & 0xffu;
  mant = x & 0x7fffffu;
  /* fix: a NaN gave 0x7e00 with its sign; the device gives the canonical 0x7fff */
  if (exp == 0xffu) return (unsigned short)(mant ? 0x7fffu : (sign | 0x7c00u));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (unsigned short)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (unsigned short)sign;
    uint32_t m = mant | 0x800000u, shift = (uint32_t)(14 - e), r = m >> shift, half = 1u << (shift - 1),
             rest = m & ((1u << shift) - 1u);
    if (rest > half || (rest == half && (r & 1u))) r++;
    return (unsigned short)(sign | r);
  }
  uint32_t r = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++;
  return (unsigned short)(sign | r);
}

static inline float emcsim_f16_bits_to_f32(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
  float f;
  if (exp == 0x1fu) { /* fix: a NaN kept its sign and payload; the device gives 0x7fffffff */
    x = mant ? 0x7fffffffu : (sign | 0x7f800000u);
  } else if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        mant <<= 1;
        e++;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  memcpy(&f, &x, 4);
  return f;
}

static inline __half __float2half_rn(float f) {
  __half h;
  h.x = emcsim_f32_to_f16_bits(f);
  return h;
}
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return emcsim_f16_bits_to_f32(h.x); }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.x = u;
  return h;
}
static inline __half __hadd(__half a, __half b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
static inline __half __hmul(__half a, __half b) { return __float2half_rn(__half2float(a) * __half2float(b)); }
#endif
