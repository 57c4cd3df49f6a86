/*
 * emcsim/device.h: the device side of the CPU model: built-in variables, warp and block
 * collectives, atomics, fences, the intrinsics cuda/ uses, and the calls every one of them makes
 * into the model (cuda/sim/src/device.cpp). C++ only; included by cuda_runtime.h.
 *
 * A thread of a block is a fiber; a block's fibers run on one OS thread, one at a time, and
 * switch only inside the calls below (collectives, __syncthreads, __nanosleep, and every few
 * hundred instrumented memory operations, so that a thread spinning on another thread of its
 * block lets it run, as independent thread scheduling does on sm_70+).
 */
#ifndef EMCSIM_DEVICE_H
#define EMCSIM_DEVICE_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "emcsim/vector_types.h"

namespace emcsim {


/* Warp collectives; the result for the calling lane. `site` names the call for reports. */
enum Coll : int {
  COLL_SYNCWARP = 1,
  COLL_BALLOT,
  COLL_ANY,
  COLL_ALL,
  COLL_SHFL,
  COLL_SHFL_UP,
  COLL_SHFL_DOWN,
  COLL_SHFL_XOR,
  COLL_MATCH_ANY,
  COLL_ACTIVEMASK
};
uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int arg, int width,
                         unsigned bytes, const char *site);
/* __syncthreads: every live thread of the block; `site` names the call. */
void syncthreads(const char *site);
/* __nanosleep: a back-off; counted by the forward-progress watchdog, and the thread yields. */
void nanosleep_ns(unsigned ns);
/* An instrumented memory operation on p (bytes, write or not): the address must be memory
 * the executing device can reach; counted by the watchdog; a preemption point now and then. */
void mem_op(const volatile void *p, size_t bytes, int write, const char *what);
/* A fence of the given C11 order (counted; the fence itself is __atomic_thread_fence). */
void fence_op(int order);
/* A fault raised by device code (device-side assert, trap). Does not return to the kernel. */
[[noreturn]] void device_fault(int cuda_error, const char *rule, const char *detail);
/* The clock of the executing thread (instrumented operations so far; for clock64()). */
uint64_t thread_clock();

/* ---------------------------------------------------------------- helpers */
template <typename T> inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp collectives move at most 8 bytes");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  return b;
}
template <typename T> inline T from_bits(uint64_t b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/* Relaxed/acquire/release accesses that the model instruments (used by the project's PTX
 * equivalents in dev.cuh and emc_item.h, and by the atomics below). */
template <typename T> inline T ld(const T *p, int order, const char *what) {
  mem_op(p, sizeof(T), 0, what);
  return __atomic_load_n(p, order);
}
template <typename T> inline void st(T *p, T v, int order, const char *what) {
  mem_op(p, sizeof(T), 1, what);
  __atomic_store_n(p, v, order);
}

}  // namespace emcsim

/* ---------------------------------------------------------------- built-in variables
 * Those of the fiber running on this OS thread: the model writes them at every switch. */
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

/* ---------------------------------------------------------------- barriers and collectives */
#define EMCSIM_STR2(x) #x
#define EMCSIM_STR(x) EMCSIM_STR2(x)
#define EMCSIM_SITE __FILE__ ":" EMCSIM_STR(__LINE__)

#define __syncthreads() ::emcsim::syncthreads(EMCSIM_SITE)
inline void emcsim_syncwarp(unsigned mask, const char *site) {
  (void)::emcsim::warp_collective(::emcsim::COLL_SYNCWARP, mask, 0, 0, 32, 0, site);
}
#define __syncwarp(...) emcsim_syncwarp_sel(EMCSIM_SITE, ##__VA_ARGS__)
inline void emcsim_syncwarp_sel(const char *site, unsigned mask = 0xffffffffu) { emcsim_syncwarp(mask, site); }

inline unsigned emcsim_ballot(unsigned mask, int pred, const char *site) {
  return (unsigned)::emcsim::warp_collective(::emcsim::COLL_BALLOT, mask, pred != 0, 0, 32, 4, site);
}
inline int emcsim_any(unsigned mask, int pred, const char *site) {
  return (int)::emcsim::warp_collective(::emcsim::COLL_ANY, mask, pred != 0, 0, 32, 4, site);
}
inline int emcsim_all(unsigned mask, int pred, const char *site) {
  return (int)::emcsim::warp_collective(::emcsim::COLL_ALL, mask, pred != 0, 0, 32, 4, site);
}
#define __ballot_sync(mask, pred) emcsim_ballot((mask), (pred), EMCSIM_SITE)
#define __any_sync(mask, pred) emcsim_any((mask), (pred), EMCSIM_SITE)
#define __all_sync(mask, pred) emcsim_all((mask), (pred), EMCSIM_SITE)
#define __activemask() \
  ((unsigned)::emcsim::warp_collective(::emcsim::COLL_ACTIVEMASK, 0, 0, 0, 32, 4, EMCSIM_SITE))

template <typename T>
inline T emcsim_shfl(int kind, unsigned mask, T v, int arg, int width, const char *site) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "__shfl*_sync moves a value of at most 8 bytes");
  return ::emcsim::from_bits<T>(
      ::emcsim::warp_collective(kind, mask, ::emcsim::to_bits(v), arg, width, sizeof(T), site));
}
#define __shfl_sync(mask, v, src, ...) \
  emcsim_shfl(::emcsim::COLL_SHFL, (mask), (v), (int)(src), emcsim_width(__VA_ARGS__ + 0), EMCSIM_SITE)
#define __shfl_up_sync(mask, v, d, ...) \
  emcsim_shfl(::emcsim::COLL_SHFL_UP, (mask), (v), (int)(d), emcsim_width(__VA_ARGS__ + 0), EMCSIM_SITE)
#define __shfl_down_sync(mask, v, d, ...) \
  emcsim_shfl(::emcsim::COLL_SHFL_DOWN, (mask), (v), (int)(d), emcsim_width(__VA_ARGS__ + 0), EMCSIM_SITE)
#define __shfl_xor_sync(mask, v, m, ...) \
  emcsim_shfl(::emcsim::COLL_SHFL_XOR, (mask), (v), (int)(m), emcsim_width(__VA_ARGS__ + 0), EMCSIM_SITE)
/* width argument: omitted (0 here) means warpSize */
inline int emcsim_width(int w) { return w == 0 ? 32 : w; }
template <typename T>
inline unsigned emcsim_match_any(unsigned mask, T v, const char *site) {
  return (unsigned)::emcsim::warp_collective(::emcsim::COLL_MATCH_ANY, mask, ::emcsim::to_bits(v), 0,
                                             32, sizeof(T), site);
}
#define __match_any_sync(mask, v) emcsim_match_any((mask), (v), EMCSIM_SITE)

/* ---------------------------------------------------------------- fences, sleep, clocks */
inline void __threadfence() { ::emcsim::fence_op(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { ::emcsim::fence_op(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { ::emcsim::fence_op(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned ns) { ::emcsim::nanosleep_ns(ns); }
inline long long clock64() { return (long long)::emcsim::thread_clock(); }
inline void __trap() { ::emcsim::device_fault(715, "__trap", "the kernel called __trap()"); }

/* ---------------------------------------------------------------- atomics (CUDA's overloads)
 * Device-scope atomics are relaxed in CUDA's memory model: so here. */
#define EMCSIM_ATOMIC_RMW(name, op, T)                                      \
  inline T name(T *p, T v) {                                                \
    ::emcsim::mem_op(p, sizeof(T), 1, #name);                               \
    return __atomic_##op(p, v, __ATOMIC_RELAXED);                           \
  }
#define EMCSIM_ATOMIC_INT_TYPES(name, op)                                   \
  EMCSIM_ATOMIC_RMW(name, op, int)                                          \
  EMCSIM_ATOMIC_RMW(name, op, unsigned int)                                 \
  EMCSIM_ATOMIC_RMW(name, op, unsigned long long int)
EMCSIM_ATOMIC_INT_TYPES(atomicAdd, fetch_add)
EMCSIM_ATOMIC_INT_TYPES(atomicAnd, fetch_and)
EMCSIM_ATOMIC_INT_TYPES(atomicOr, fetch_or)
EMCSIM_ATOMIC_INT_TYPES(atomicXor, fetch_xor)
EMCSIM_ATOMIC_RMW(atomicSub, fetch_sub, int)
EMCSIM_ATOMIC_RMW(atomicSub, fetch_sub, unsigned int)
EMCSIM_ATOMIC_RMW(atomicExch, exchange_n, int)
EMCSIM_ATOMIC_RMW(atomicExch, exchange_n, unsigned int)
EMCSIM_ATOMIC_RMW(atomicExch, exchange_n, unsigned long long int)
#undef EMCSIM_ATOMIC_INT_TYPES
#undef EMCSIM_ATOMIC_RMW
inline float atomicExch(float *p, float v) {
  ::emcsim::mem_op(p, 4, 1, "atomicExch");
  uint32_t b, old;
  memcpy(&b, &v, 4);
  old = __atomic_exchange_n((uint32_t *)p, b, __ATOMIC_RELAXED);
  memcpy(&v, &old, 4);
  return v;
}
template <typename T> inline T emcsim_atomic_minmax(T *p, T v, int is_max, const char *what) {
  ::emcsim::mem_op(p, sizeof(T), 1, what);
  T cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (is_max ? cur < v : v < cur)
    if (__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
  return cur;
}
#define EMCSIM_MINMAX(T)                                                              \
  inline T atomicMax(T *p, T v) { return emcsim_atomic_minmax<T>(p, v, 1, "atomicMax"); } \
  inline T atomicMin(T *p, T v) { return emcsim_atomic_minmax<T>(p, v, 0, "atomicMin"); }
EMCSIM_MINMAX(int)
EMCSIM_MINMAX(unsigned int)
EMCSIM_MINMAX(long long int)
EMCSIM_MINMAX(unsigned long long int)
#undef EMCSIM_MINMAX
#define EMCSIM_CAS(T)                                                        \
  inline T atomicCAS(T *p, T expected, T desired) {                          \
    ::emcsim::mem_op(p, sizeof(T), 1, "atomicCAS");                          \
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return expected;                                                         \
  }
EMCSIM_CAS(int)
EMCSIM_CAS(unsigned int)
EMCSIM_CAS(unsigned long long int)
EMCSIM_CAS(unsigned short int)
#undef EMCSIM_CAS
inline unsigned int atomicInc(unsigned int *p, unsigned int limit) {
  ::emcsim::mem_op(p, 4, 1, "atomicInc");
  unsigned int cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &cur, cur >= limit ? 0u : cur + 1u, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return cur;
}
template <typename F> inline F emcsim_atomic_fadd(F *p, F v) {
  typedef typename std::conditional<sizeof(F) == 4, uint32_t, uint64_t>::type U;
  ::emcsim::mem_op(p, sizeof(F), 1, "atomicAdd");
  U cur = __atomic_load_n((U *)p, __ATOMIC_RELAXED), next;
  for (;;) {
    F f;
    memcpy(&f, &cur, sizeof f);
    f = f + v;
    memcpy(&next, &f, sizeof f);
    if (__atomic_compare_exchange_n((U *)p, &cur, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      memcpy(&f, &cur, sizeof f);
      return f;
    }
  }
}
inline float atomicAdd(float *p, float v) { return emcsim_atomic_fadd(p, v); }
inline double atomicAdd(double *p, double v) { return emcsim_atomic_fadd(p, v); }

/* ---------------------------------------------------------------- integer intrinsics */
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long int x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long int x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long int x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned long long int __umul64hi(unsigned long long int a, unsigned long long int b) {
  return (unsigned long long int)(((unsigned __int128)a * b) >> 64);
}
inline long long int __mul64hi(long long int a, long long int b) {
  return (long long int)(((__int128)a * b) >> 64);
}
inline unsigned int __umulhi(unsigned int a, unsigned int b) {
  return (unsigned int)(((unsigned long long)a * b) >> 32);
}
/* __fns(mask, base, offset): the position of the offset-th set bit of mask from base (offset
 * > 0 counts upwards from base inclusive, < 0 downwards), 0xffffffff when there is none. */
inline unsigned int __fns(unsigned int mask, unsigned int base, int offset) {
  if (base > 31 || offset == 0) return 0xffffffffu;
  if (offset > 0) {
    for (int b = (int)base; b < 32; b++)
      if ((mask >> b) & 1u)
        if (--offset == 0) return (unsigned)b;
  } else {
    for (int b = (int)base; b >= 0; b--)
      if ((mask >> b) & 1u)
        if (++offset == 0) return (unsigned)b;
  }
  return 0xffffffffu;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline long long int __double_as_longlong(double d) {
  long long int i;
  memcpy(&i, &d, 8);
  return i;
}
inline double __longlong_as_double(long long int i) {
  double d;
  memcpy(&d, &i, 8);
  return d;
}

/* ---------------------------------------------------------------- float intrinsics
 * Round to nearest even, one rounding per operation, subnormals kept: IEEE binary32
 * arithmetic on the host (the model's sources are compiled with -ffp-contract=off, and
 * fmaf is the fused operation). Bit-exact with sm_90's __f*_rn, NaNs included: the GPU has
 * one binary32 NaN, 0x7fffffff (CUDART_NAN_F), whatever the operands' payloads and signs,
 * where x86 gives 0xffc00000 or propagates an operand's payload (fix: the model gave x86's). */
inline float emcsim_f32_nan(float r) { return r != r ? __builtin_bit_cast(float, 0x7fffffffu) : r; }
inline float __fadd_rn(float a, float b) { return emcsim_f32_nan(a + b); }
inline float __fsub_rn(float a, float b) { return emcsim_f32_nan(a - b); }
inline float __fmul_rn(float a, float b) { return emcsim_f32_nan(a * b); }
inline float __fdiv_rn(float a, float b) { return emcsim_f32_nan(a / b); }
inline float __fsqrt_rn(float a) { return emcsim_f32_nan(__builtin_sqrtf(a)); }
inline float __fmaf_rn(float a, float b, float c) { return emcsim_f32_nan(__builtin_fmaf(a, b, c)); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }

/* ---------------------------------------------------------------- min / max
 * CUDA's device-side overloads, for integer and floating types (mixed signedness as CUDA's:
 * the usual arithmetic conversions). */
template <typename A, typename B,
          typename = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type C;
  return (C)a < (C)b ? (C)a : (C)b;
}
template <typename A, typename B,
          typename = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type C;
  return (C)a < (C)b ? (C)b : (C)a;
}

#endif /* EMCSIM_DEVICE_H */
