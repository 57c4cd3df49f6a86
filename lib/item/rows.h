/*
 * lib/item/rows.h: store rows (striped versions), f16, the optimizers, uniform rows.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_ROWS_H
#define EMC_ITEM_ROWS_H

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
  float w = hi - lo, v;
  /* bounds more than FLT_MAX apart (w is +inf): the same point as the weighted mean of the
   * bounds, each term finite; rows of other bounds stay bitwise what they were */
  v = w <= 3.40282347e38f ? lo + w * u : lo * (1.0f - u) + hi * u;
  return v < hi ? v : lo;
}

#endif /* EMC_ITEM_ROWS_H */
