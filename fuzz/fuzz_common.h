/*
 * fuzz_common.h: helpers shared by the fuzz targets (static inline, header only).
 *
 *   fz        a byte reader over the fuzzer input. Past the end it yields bytes from a
 *             splitmix64 stream seeded by the input length, so decoding never fails and
 *             stays deterministic; fz_done() tells when the real input ran out.
 *   FZ_CHECK  abort() with a message when a property does not hold (the fuzzer's "crash").
 */
#ifndef EMC_FUZZ_COMMON_H
#define EMC_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embcache.h"
#include "internal.h"

/* The libFuzzer entry point every target defines (replay.c calls it too). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n  ", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fprintf(stderr, "\n  last error detail: %s\n", emc_last_error_detail());      \
      fflush(stderr);                                                               \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* st must be `want`; a failure must leave a non-empty detail. */
#define FZ_STATUS(st, want, what)                                                   \
  do {                                                                              \
    emc_status fz_st_ = (st), fz_want_ = (want);                                    \
    FZ_CHECK(fz_st_ == fz_want_, "%s returned %s, expected %s", (what),             \
             emc_status_name(fz_st_), emc_status_name(fz_want_));                   \
    if (fz_want_ != EMC_OK)                                                         \
      FZ_CHECK(emc_last_error_detail()[0] != '\0', "%s failed with %s, empty detail", \
               (what), emc_status_name(fz_st_));                                    \
  } while (0)

typedef struct fz {
  const uint8_t *p;
  size_t n, i;
  uint64_t prng;
} fz;

static inline void fz_init(fz *f, const uint8_t *p, size_t n) {
  f->p = p;
  f->n = n;
  f->i = 0;
  f->prng = 0x243F6A8885A308D3ull ^ (uint64_t)n;
}
static inline int fz_done(const fz *f) { return f->i >= f->n; }
static inline uint8_t fz_u8(fz *f) {
  if (f->i < f->n) return f->p[f->i++];
  return (uint8_t)(emc__splitmix64(&f->prng) >> 56);
}
static inline uint16_t fz_u16(fz *f) {
  uint16_t v = fz_u8(f);
  return (uint16_t)(v | (uint16_t)fz_u8(f) << 8);
}
static inline uint64_t fz_u64(fz *f) {
  uint64_t v = 0;
  int k;
  for (k = 0; k < 8; k++) v |= (uint64_t)fz_u8(f) << (8 * k);
  return v;
}

#endif /* EMC_FUZZ_COMMON_H */
