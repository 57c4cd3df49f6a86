/*
 * test_sim_arith.cu: the model's arithmetic (cuda/sim/README.md, "Arithmetic"): the __f*_rn
 * intrinsics and the f16 conversions of cuda_fp16.h, bit-exact with sm_90's.
 *
 * Expected bits come from two places: a table of tricky cases whose IEEE binary32 / binary16
 * results were computed with exact rational arithmetic (ties to even, subnormals kept,
 * overflow to infinity), and independent references over many inputs (binary32 operations
 * through binary64, where one rounding of the exact result is the binary32 result; f16 by
 * scaling and nearbyint). NaN results are the device's canonical NaNs: 0x7fffffff for
 * binary32 (the GPU has one quiet NaN and no payloads; CUDART_NAN_F in math_constants.h) and
 * 0x7fff for binary16 (CUDART_NAN_FP16; cuda_fp16.hpp's host conversions, which mirror the
 * device's cvt, give 0x7fff for every NaN and 0x7fffffff back).
 *
 * Compiled with -ffp-contract=off (tests/cudasim/CMakeLists.txt): the references must not be
 * contracted either.
 */
#include <cuda_fp16.h>
#include <math.h>

#include "cudasim_test.h"

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_SQRT, OP_FMA, OP_MUL_ADD };

struct Case {
  int op;
  uint32_t a, b, c, want;
  const char *what;
};

static const Case k_cases[] = {
    {OP_ADD, 0x3f800000, 0x33800000, 0, 0x3f800000, "1 + 2^-24: a tie, to even (down)"},
    {OP_ADD, 0x3f800001, 0x33800000, 0, 0x3f800002, "(1 + 2^-23) + 2^-24: a tie, to even (up)"},
    {OP_ADD, 0x3f800000, 0x33800001, 0, 0x3f800001, "1 + just over half an ulp: up"},
    {OP_ADD, 0x7f7fffff, 0x7f7fffff, 0, 0x7f800000, "FLT_MAX + FLT_MAX: infinity"},
    {OP_ADD, 0x7f7fffff, 0x73000000, 0, 0x7f800000, "FLT_MAX + half its ulp: a tie, to infinity"},
    {OP_ADD, 0x7f7fffff, 0x72ffffff, 0, 0x7f7fffff, "FLT_MAX + under half its ulp: FLT_MAX"},
    {OP_ADD, 0x00000001, 0x00000001, 0, 0x00000002, "subnormal + subnormal (no flush to zero)"},
    {OP_ADD, 0x00800000, 0x80000001, 0, 0x007fffff, "FLT_MIN - the least subnormal: a subnormal"},
    {OP_ADD, 0x80000000, 0x00000000, 0, 0x00000000, "-0 + +0 = +0"},
    {OP_ADD, 0x80000000, 0x80000000, 0, 0x80000000, "-0 + -0 = -0"},
    {OP_SUB, 0x00800001, 0x00800000, 0, 0x00000001, "a subnormal difference"},
    {OP_SUB, 0x3f800000, 0x3f800000, 0, 0x00000000, "1 - 1 = +0"},
    {OP_MUL, 0x00000001, 0x3f000000, 0, 0x00000000, "2^-149 * 0.5: a tie, to even (zero)"},
    {OP_MUL, 0x00000003, 0x3f000000, 0, 0x00000002, "3*2^-149 * 0.5: a tie, to even (2*2^-149)"},
    {OP_MUL, 0x80000001, 0x3f000000, 0, 0x80000000, "-2^-149 * 0.5: -0"},
    {OP_MUL, 0x00800000, 0x3f000000, 0, 0x00400000, "FLT_MIN * 0.5: a subnormal"},
    {OP_MUL, 0x7f7fffff, 0x40000000, 0, 0x7f800000, "FLT_MAX * 2: infinity"},
    {OP_MUL, 0x3f800001, 0x3f800001, 0, 0x3f800002, "(1 + 2^-23)^2: rounded"},
    {OP_MUL, 0x40400000, 0x3eaaaaab, 0, 0x3f800000, "3 * (float)(1/3)"},
    {OP_DIV, 0x3f800000, 0x40400000, 0, 0x3eaaaaab, "1 / 3"},
    {OP_DIV, 0x00800000, 0x40800000, 0, 0x00200000, "FLT_MIN / 4: a subnormal"},
    {OP_DIV, 0x00000001, 0x40000000, 0, 0x00000000, "2^-149 / 2: a tie, to even (zero)"},
    {OP_DIV, 0x3f800000, 0x7f7fffff, 0, 0x00200000, "1 / FLT_MAX: a subnormal"},
    {OP_DIV, 0x40e00000, 0x3dcccccd, 0, 0x428c0000, "7 / (float)0.1"},
    {OP_DIV, 0x3f800000, 0x00000000, 0, 0x7f800000, "1 / +0 = +infinity"},
    {OP_DIV, 0xbf800000, 0x00000000, 0, 0xff800000, "-1 / +0 = -infinity"},
    {OP_SQRT, 0x40000000, 0, 0, 0x3fb504f3, "sqrt(2)"},
    {OP_SQRT, 0x00000001, 0, 0, 0x1a3504f3, "sqrt(2^-149)"},
    {OP_SQRT, 0x80000000, 0, 0, 0x80000000, "sqrt(-0) = -0"},
    {OP_SQRT, 0x00800000, 0, 0, 0x20000000, "sqrt(FLT_MIN)"},
    {OP_SQRT, 0x7f7fffff, 0, 0, 0x5f7fffff, "sqrt(FLT_MAX)"},
    {OP_FMA, 0x3f800001, 0x3f800001, 0xbf800002, 0x28800000, "fma: one rounding (2^-46 exact)"},
    {OP_MUL_ADD, 0x3f800001, 0x3f800001, 0xbf800002, 0x00000000, "__fadd_rn(__fmul_rn()): two roundings, never contracted"},
    {OP_FMA, 0x7f7fffff, 0x40000000, 0xff7fffff, 0x7f7fffff, "fma(FLT_MAX, 2, -FLT_MAX): no intermediate overflow"},
    {OP_FMA, 0x00000001, 0x3f000000, 0x00000000, 0x00000000, "fma(2^-149, 0.5, 0): a tie, to even"},
    {OP_FMA, 0x3f800000, 0x33800000, 0x3f800000, 0x3f800000, "fma(1, 2^-24, 1): a tie, to even"},
    /* NaN results: the device's canonical NaN whatever the operands */
    {OP_ADD, 0x7f800000, 0xff800000, 0, 0x7fffffff, "inf + -inf: canonical NaN"},
    {OP_SUB, 0x7f800000, 0x7f800000, 0, 0x7fffffff, "inf - inf: canonical NaN"},
    {OP_ADD, 0x7fc00001, 0x3f800000, 0, 0x7fffffff, "NaN with a payload + 1: canonical NaN"},
    {OP_ADD, 0xffc00000, 0x00000000, 0, 0x7fffffff, "negative NaN + 0: canonical NaN"},
    {OP_MUL, 0x00000000, 0x7f800000, 0, 0x7fffffff, "0 * inf: canonical NaN"},
    {OP_DIV, 0x00000000, 0x00000000, 0, 0x7fffffff, "0 / 0: canonical NaN"},
    {OP_SQRT, 0xbf800000, 0, 0, 0x7fffffff, "sqrt(-1): canonical NaN"},
    {OP_FMA, 0x7f800000, 0x00000000, 0x3f800000, 0x7fffffff, "fma(inf, 0, 1): canonical NaN"},
    {OP_FMA, 0x3f800000, 0x3f800000, 0xffc00123, 0x7fffffff, "fma(1, 1, NaN): canonical NaN"},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

struct Op3 {
  int op;
  uint32_t a, b, c;
};

__device__ uint32_t apply(const Op3 &o) {
  float a = __uint_as_float(o.a), b = __uint_as_float(o.b), c = __uint_as_float(o.c), r = 0;
  switch (o.op) {
  case OP_ADD: r = __fadd_rn(a, b); break;
  case OP_SUB: r = __fsub_rn(a, b); break;
  case OP_MUL: r = __fmul_rn(a, b); break;
  case OP_DIV: r = __fdiv_rn(a, b); break;
  case OP_SQRT: r = __fsqrt_rn(a); break;
  case OP_FMA: r = __fmaf_rn(a, b, c); break;
  case OP_MUL_ADD: r = __fadd_rn(__fmul_rn(a, b), c); break;
  }
  return __float_as_uint(r);
}

__global__ void k_float_ops(const Op3 *in, uint32_t *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = apply(in[i]);
}

START_TEST(rn_intrinsics_on_tricky_values) {
  Op3 h[N_CASES];
  uint32_t got[N_CASES];
  for (size_t i = 0; i < N_CASES; i++) h[i] = Op3{k_cases[i].op, k_cases[i].a, k_cases[i].b, k_cases[i].c};
  Op3 *d = dev_alloc<Op3>(N_CASES);
  uint32_t *dout = dev_alloc<uint32_t>(N_CASES);
  to_dev(d, h, N_CASES);
  CU_OK(sim_launch("k_float_ops", 1, 64, 0, k_float_ops, (const Op3 *)d, dout, (int)N_CASES));
  CU_OK(cudaDeviceSynchronize());
  to_host(got, dout, N_CASES);
  for (size_t i = 0; i < N_CASES; i++)
    ck_assert_msg(got[i] == k_cases[i].want, "%s: 0x%08x, expected 0x%08x", k_cases[i].what, got[i], k_cases[i].want);
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(dout));
}
END_TEST

/* binary32 operands with every exponent (subnormals and zeros often), never NaN or infinity */
static uint32_t random_finite(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  uint32_t x = (uint32_t)(*s >> 11), e = (uint32_t)(*s >> 45) % 260u;
  if (e >= 255) e = 0; /* about 2%: subnormal or zero */
  return (x & 0x807fffffu) | (e << 23);
}

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* One rounding of the binary64 result (exact for +, -, *, and correctly rounded for / and
 * sqrt, whose binary64 rounding cannot change the binary32 one: 53 >= 2*24 + 2). */
static uint32_t reference(const Op3 &o) {
  double a = u2f(o.a), b = u2f(o.b);
  double r = 0;
  switch (o.op) {
  case OP_ADD: r = a + b; break;
  case OP_SUB: r = a - b; break;
  case OP_MUL: r = a * b; break;
  case OP_DIV: r = a / b; break;
  case OP_SQRT: r = sqrt(a); break;
  }
  float f = (float)r;
  return isnan(f) ? 0x7fffffffu : f2u(f);
}

START_TEST(rn_intrinsics_match_a_reference) {
  const int n = 1 << 16;
  Op3 *h = (Op3 *)malloc(n * sizeof(Op3));
  uint32_t *got = (uint32_t *)malloc(n * sizeof(uint32_t));
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) {
    h[i].op = i % 5; /* add, sub, mul, div, sqrt */
    h[i].a = random_finite(&seed);
    h[i].b = random_finite(&seed);
    h[i].c = 0;
  }
  Op3 *d = dev_alloc<Op3>(n);
  uint32_t *dout = dev_alloc<uint32_t>(n);
  to_dev(d, h, n);
  CU_OK(sim_launch("k_float_ops", 64, 128, 0, k_float_ops, (const Op3 *)d, dout, n));
  CU_OK(cudaDeviceSynchronize());
  to_host(got, dout, n);
  int subnormal_results = 0;
  for (int i = 0; i < n; i++) {
    uint32_t want = reference(h[i]);
    ck_assert_msg(got[i] == want, "op %d on 0x%08x, 0x%08x: 0x%08x, the reference says 0x%08x", h[i].op, h[i].a,
                  h[i].b, got[i], want);
    subnormal_results += (want & 0x7f800000u) == 0 && (want & 0x7fffffu) != 0;
  }
  ck_assert_msg(subnormal_results > 100, "only %d subnormal results: the sample does not cover them", subnormal_results);
  free(h);
  free(got);
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(dout));
}
END_TEST

/* ================================================================ f16 */

struct HCase {
  uint32_t f;
  unsigned short want;
  const char *what;
};

static const HCase k_hcases[] = {
    {0x3f800000, 0x3c00, "1"},
    {0x477fe000, 0x7bff, "65504 (HALF_MAX)"},
    {0x477fefff, 0x7bff, "just under the midpoint above HALF_MAX"},
    {0x477ff000, 0x7c00, "65520: a tie, to even (infinity)"},
    {0x49742400, 0x7c00, "1e6: infinity"},
    {0xc9742400, 0xfc00, "-1e6: -infinity"},
    {0x33800000, 0x0001, "2^-24: the least subnormal"},
    {0x33000000, 0x0000, "2^-25: a tie, to even (zero)"},
    {0x33000001, 0x0001, "just over 2^-25"},
    {0x33c00000, 0x0002, "1.5*2^-24: a tie, to even (2*2^-24)"},
    {0x38800000, 0x0400, "2^-14: the least normal"},
    {0x387fc000, 0x03ff, "the greatest subnormal"},
    {0x387fe000, 0x0400, "a tie between the greatest subnormal and the least normal"},
    {0x38000000, 0x0200, "2^-15"},
    {0x37ffffff, 0x0200, "just under 2^-15"},
    {0x3f801000, 0x3c00, "1 + 2^-11: a tie, to even (down)"},
    {0x3f803000, 0x3c02, "1 + 3*2^-11: a tie, to even (up)"},
    {0x80000000, 0x8000, "-0"},
    {0x00000001, 0x0000, "a binary32 subnormal: +0"},
    {0xb0800000, 0x8000, "-2^-30: -0"},
    {0x7f800000, 0x7c00, "infinity"},
    {0xff800000, 0xfc00, "-infinity"},
    {0x7fc00000, 0x7fff, "NaN: canonical"},
    {0xffc00001, 0x7fff, "negative NaN with a payload: canonical"},
    {0x7f800001, 0x7fff, "signalling NaN: canonical"},
};
#define N_HCASES (sizeof k_hcases / sizeof k_hcases[0])

__global__ void k_f2h(const uint32_t *in, unsigned short *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __half_as_ushort(__float2half_rn(__uint_as_float(in[i])));
}

__global__ void k_h2f(uint32_t *out, unsigned short *round_trip) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 65536; i += gridDim.x * blockDim.x) {
    float f = __half2float(__ushort_as_half((unsigned short)i));
    out[i] = __float_as_uint(f);
    round_trip[i] = __half_as_ushort(__float2half_rn(f));
  }
}

/* binary32 -> binary16 by scaling (exact: powers of two) and nearbyint (ties to even). */
static unsigned short ref_f2h(uint32_t bits) {
  float f = u2f(bits);
  unsigned short sign = (bits >> 16) & 0x8000u;
  if (isnan(f)) return 0x7fff;
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00u;
  if (a < ldexp(1.0, -14)) return sign | (unsigned short)nearbyint(a * ldexp(1.0, 24)); /* 1024: the least normal */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  e -= 1;       /* a = 1.x * 2^e */
  double q = nearbyint(a * ldexp(1.0, 10 - e));
  if (q == 2048.0) {
    q = 1024.0;
    e++;
  }
  if (e + 15 >= 31) return sign | 0x7c00u;
  return sign | (unsigned short)(((e + 15) << 10) | ((int)q - 1024));
}

static uint32_t ref_h2f(unsigned h) {
  unsigned e = (h >> 10) & 31u, m = h & 1023u;
  double v;
  if (e == 31) return m ? 0x7fffffffu : ((h & 0x8000u) ? 0xff800000u : 0x7f800000u);
  v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024 + m), (int)e - 25);
  return f2u((float)((h & 0x8000u) ? -v : v));
}

START_TEST(f16_conversions_on_tricky_values) {
  uint32_t in[N_HCASES];
  unsigned short got[N_HCASES];
  for (size_t i = 0; i < N_HCASES; i++) in[i] = k_hcases[i].f;
  uint32_t *d = dev_alloc<uint32_t>(N_HCASES);
  unsigned short *dout = dev_alloc<unsigned short>(N_HCASES);
  to_dev(d, in, N_HCASES);
  CU_OK(sim_launch("k_f2h", 1, 32, 0, k_f2h, (const uint32_t *)d, dout, (int)N_HCASES));
  CU_OK(cudaDeviceSynchronize());
  to_host(got, dout, N_HCASES);
  for (size_t i = 0; i < N_HCASES; i++) {
    ck_assert_msg(got[i] == k_hcases[i].want, "__float2half_rn(%s, 0x%08x): 0x%04x, expected 0x%04x", k_hcases[i].what,
                  k_hcases[i].f, got[i], k_hcases[i].want);
    ck_assert_msg(ref_f2h(in[i]) == k_hcases[i].want, "the test's reference disagrees on %s", k_hcases[i].what);
  }
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(dout));
}
END_TEST

START_TEST(f16_conversions_match_a_reference) {
  /* every binary16 to binary32 and back */
  uint32_t *hf = (uint32_t *)malloc(65536 * sizeof(uint32_t));
  unsigned short *rt = (unsigned short *)malloc(65536 * sizeof(unsigned short));
  uint32_t *df = dev_alloc<uint32_t>(65536);
  unsigned short *drt = dev_alloc<unsigned short>(65536);
  CU_OK(sim_launch("k_h2f", 32, 256, 0, k_h2f, df, drt));
  CU_OK(cudaDeviceSynchronize());
  to_host(hf, df, 65536);
  to_host(rt, drt, 65536);
  for (unsigned h = 0; h < 65536; h++) {
    bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    ck_assert_msg(hf[h] == ref_h2f(h), "__half2float(0x%04x): 0x%08x, expected 0x%08x", h, hf[h], ref_h2f(h));
    ck_assert_msg(rt[h] == (nan ? 0x7fffu : h), "0x%04x -> float -> half gave 0x%04x", h, rt[h]);
  }
  /* binary32 to binary16 over a sample of every exponent, and around every f16 rounding point */
  const int n = 1 << 17;
  uint32_t *in = (uint32_t *)malloc(n * sizeof(uint32_t));
  unsigned short *got = (unsigned short *)malloc(n * sizeof(unsigned short));
  uint64_t seed = 12345;
  for (int i = 0; i < n; i++) {
    if (i < n / 2) {
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      in[i] = (uint32_t)(seed >> 16);
    } else { /* the binary32 neighbours of midpoints between consecutive halves */
      unsigned h = (unsigned)(i - n / 2) % 0x7c00u;
      uint32_t mid = f2u((float)((double)u2f(ref_h2f(h)) * 0.5 + (double)u2f(ref_h2f(h + 1)) * 0.5));
      in[i] = mid + (uint32_t)((i / 0x7c00) % 3) - 1u; /* below, at, above */
    }
  }
  uint32_t *d = dev_alloc<uint32_t>(n);
  unsigned short *dout = dev_alloc<unsigned short>(n);
  to_dev(d, in, n);
  CU_OK(sim_launch("k_f2h", 64, 256, 0, k_f2h, (const uint32_t *)d, dout, n));
  CU_OK(cudaDeviceSynchronize());
  to_host(got, dout, n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(got[i] == ref_f2h(in[i]), "__float2half_rn(0x%08x): 0x%04x, expected 0x%04x", in[i], got[i],
                  ref_f2h(in[i]));
  free(hf);
  free(rt);
  free(in);
  free(got);
  CU_OK(cudaFree(df));
  CU_OK(cudaFree(drt));
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(dout));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_arith");
  TCase *tc = sim_tcase(s, "f32");
  tcase_add_test(tc, rn_intrinsics_on_tricky_values);
  tcase_add_test(tc, rn_intrinsics_match_a_reference);
  tc = sim_tcase(s, "f16");
  tcase_add_test(tc, f16_conversions_on_tricky_values);
  tcase_add_test(tc, f16_conversions_match_a_reference);
  return sim_run(s);
}
