/* error.c: status names and texts, the thread-local failure detail, jemalloc wrappers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jemalloc/jemalloc.h>

#include "internal.h"

unsigned emc_version(void) { return EMC_VERSION_NUMBER; }
const char *emc_version_string(void) { return EMC_VERSION_STRING; }

const char *emc_strerror(emc_status s) {
  switch (s) {
#define EMC__STATUS_TEXT(name, value, text) \
  case name:                                \
    return text;
    EMC_STATUS_MAP(EMC__STATUS_TEXT)
#undef EMC__STATUS_TEXT
  }
  return "unknown status";
}

const char *emc_status_name(emc_status s) {
  switch (s) {
#define EMC__STATUS_NAME(name, value, text) \
  case name:                                \
    return #name;
    EMC_STATUS_MAP(EMC__STATUS_NAME)
#undef EMC__STATUS_NAME
  }
  return "EMC_UNKNOWN";
}

static _Thread_local char emc__detail[512];

const char *emc_last_error_detail(void) { return emc__detail; }

emc_status emc__fail(emc_status st, const char *func, const char *file, int line,
                     const char *fmt, ...) {
  va_list ap;
  int n = snprintf(emc__detail, sizeof emc__detail, "%s: ", func);
  if (n < 0 || (size_t)n >= sizeof emc__detail) n = 0;
  va_start(ap, fmt);
  vsnprintf(emc__detail + n, sizeof emc__detail - (size_t)n, fmt, ap);
  va_end(ap);
#ifndef NDEBUG
  {
    size_t len = strlen(emc__detail);
    if (len + 2 < sizeof emc__detail) snprintf(emc__detail + len, sizeof emc__detail - len, " [%s:%d]", file, line);
  }
#else
  (void)file;
  (void)line;
#endif
  return st;
}

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
