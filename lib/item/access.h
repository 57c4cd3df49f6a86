/*
 * lib/item/access.h: memory access (relaxed / acquire / release helpers), the tests' test
 * points, host vector reads and the row copy and stride.
 * Part of emc_item.h, which includes the parts in order and defines EMC_HD: include
 * emc_item.h, never this file alone (the file comment of emc_item.h gives the rules).
 */
#ifndef EMC_ITEM_ACCESS_H
#define EMC_ITEM_ACCESS_H

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

#endif /* EMC_ITEM_ACCESS_H */
