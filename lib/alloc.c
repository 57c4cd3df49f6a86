/*
 * alloc.c: every allocation the library makes, and the failure-injection hook the test suite
 * uses to make any one of them fail.
 *
 *   emc__malloc / emc__calloc   small host structures (libc malloc; free() releases them)
 *   emc__alloc / emc__alloc_in  big row memory: jemalloc mallocx on the store's private arena,
 *                               or posix_memalign under AddressSanitizer (emc__free)
 *   emc__fdopen                 a FILE for an open descriptor (stdio allocates its buffer)
 *   emc__xxh64_create           an XXH64 streaming state (XXH64_createState allocates)
 *
 * Each of them first asks emc__inject_fail(). Disarmed (always, outside tests) that is one
 * relaxed load. Armed, every such failure point counts itself, and the chosen one fails as the
 * real call fails when memory runs out (NULL, errno = ENOMEM). The hook sits above the
 * jemalloc / posix_memalign choice, so both builds inject at the same points.
 */
#define _XOPEN_SOURCE 700 /* fdopen; ffs, which MALLOCX_ALIGN expands to */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jemalloc/jemalloc.h>
#include <xxhash.h>

#include "internal.h"

/* ------------------------------------------------------------------ injection */
/* All accessed with relaxed atomics: tests arm and disarm from one thread, but library calls
 * on other threads may pass a failure point meanwhile (ThreadSanitizer must stay quiet). */
static int inj_armed;              /* 0: every point succeeds */
static long long inj_fail_at;      /* index of the first point that fails */
static int inj_sticky;             /* 1: every point from fail_at on fails */
static size_t inj_min_bytes;       /* only points asking for >= this many bytes count */
static long long inj_count;        /* points counted since arming */
static long long inj_failed;       /* failures injected since arming */
static const char *inj_last_what;  /* kind of the last failed point (static string) */
static size_t inj_last_bytes;      /* its size */

void emc__inject_arm(long long fail_at, size_t min_bytes, int sticky) {
  __atomic_store_n(&inj_fail_at, fail_at < 0 ? -1 : fail_at, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_min_bytes, min_bytes, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_sticky, sticky != 0, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_count, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_failed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_what, (const char *)NULL, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_armed, 1, __ATOMIC_RELEASE);
}

long long emc__inject_disarm(void) {
  __atomic_store_n(&inj_armed, 0, __ATOMIC_RELEASE);
  return __atomic_load_n(&inj_count, __ATOMIC_RELAXED);
}

long long emc__inject_count(void) { return __atomic_load_n(&inj_count, __ATOMIC_RELAXED); }

long long emc__inject_failed(void) { return __atomic_load_n(&inj_failed, __ATOMIC_RELAXED); }

const char *emc__inject_last(size_t *bytes) {
  if (bytes) *bytes = __atomic_load_n(&inj_last_bytes, __ATOMIC_RELAXED);
  return __atomic_load_n(&inj_last_what, __ATOMIC_RELAXED);
}

int emc__inject_fail(const char *what, size_t bytes) {
  long long k, at;
  if (!__atomic_load_n(&inj_armed, __ATOMIC_ACQUIRE)) return 0;
  if (bytes < __atomic_load_n(&inj_min_bytes, __ATOMIC_RELAXED)) return 0;
  k = __atomic_fetch_add(&inj_count, 1, __ATOMIC_RELAXED);
  at = __atomic_load_n(&inj_fail_at, __ATOMIC_RELAXED);
  if (at < 0 || k < at || (k > at && !__atomic_load_n(&inj_sticky, __ATOMIC_RELAXED))) return 0;
  __atomic_fetch_add(&inj_failed, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_what, what, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_bytes, bytes, __ATOMIC_RELAXED);
  errno = ENOMEM;
  return 1;
}

/* ------------------------------------------------------------------ small structures */
void *emc__malloc(size_t bytes) {
  if (emc__inject_fail("malloc", bytes)) return NULL;
  return malloc(bytes ? bytes : 1);
}

void *emc__calloc(size_t n, size_t size) {
  size_t bytes;
  if (!emc__size_mul(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  if (emc__inject_fail("calloc", bytes)) return NULL;
  return calloc(n ? n : 1, size ? size : 1);
}

FILE *emc__fdopen(int fd, const char *mode) {
  if (emc__inject_fail("fdopen", BUFSIZ)) return NULL;
  return fdopen(fd, mode);
}

XXH64_state_t *emc__xxh64_create(void) {
  XXH64_state_t *h;
  if (emc__inject_fail("XXH64_createState", 0)) return NULL;
  h = XXH64_createState();
  if (!h) errno = ENOMEM;
  return h;
}

/* ------------------------------------------------------------------ row memory (jemalloc) */
/* Under AddressSanitizer the big allocations go through the C allocator so ASan sees their
 * bounds; otherwise through jemalloc's non-standard API (mallocx/dallocx), which works even
 * where the process's malloc is not jemalloc. */
#if defined(__SANITIZE_ADDRESS__)
#define EMC__USE_LIBC_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMC__USE_LIBC_ALLOC 1
#endif
#endif

unsigned emc__arena_create(void) {
#ifdef EMC__USE_LIBC_ALLOC
  return 0;
#else
  unsigned a = 0;
  size_t sz = sizeof a;
  if (mallctl("arenas.create", &a, &sz, NULL, 0) != 0) return 0;
  return a;
#endif
}

void emc__arena_destroy(unsigned arena) {
#ifndef EMC__USE_LIBC_ALLOC
  char cmd[64];
  if (arena == 0) return;
  snprintf(cmd, sizeof cmd, "arena.%u.destroy", arena);
  (void)mallctl(cmd, NULL, NULL, NULL, 0);
#else
  (void)arena;
#endif
}

void *emc__alloc(size_t bytes, size_t align, int zero) { return emc__alloc_in(0, bytes, align, zero); }

void *emc__alloc_in(unsigned arena, size_t bytes, size_t align, int zero) {
  if (bytes == 0) bytes = 1;
  if (align < 16) align = 16;
  /* above the allocator choice: the same points fail with jemalloc and under ASan */
  if (emc__inject_fail("mallocx", bytes)) return NULL;
#ifdef EMC__USE_LIBC_ALLOC
  (void)arena;
  {
    void *p = NULL;
    if (posix_memalign(&p, align, bytes) != 0) return NULL;
    if (zero) memset(p, 0, bytes);
    return p;
  }
#else
  {
    int flags = MALLOCX_ALIGN(align) | (zero ? MALLOCX_ZERO : 0);
    if (arena != 0) flags |= MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
    return mallocx(bytes, flags);
  }
#endif
}

void emc__free(void *p, size_t bytes) {
  if (!p) return;
#ifdef EMC__USE_LIBC_ALLOC
  (void)bytes;
  free(p);
#else
  (void)bytes;
  dallocx(p, MALLOCX_TCACHE_NONE);
#endif
}
