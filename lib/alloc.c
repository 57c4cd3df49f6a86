/*
 * alloc.c: every allocation the library makes, and the failure-injection hook the test suite
 * uses to make any one of them fail.
 *
 *   emc__malloc / emc__calloc   small host structures (libc malloc; free() releases them)
 *   emc__alloc / emc__alloc_in  big row memory (store rows, hashed-table maps, the host
 *                               backend's pool arena, index and stamps), from one of the two
 *                               providers below (emc__free)
 *   emc__fdopen                 a FILE for an open descriptor (stdio allocates its buffer)
 *   emc__xxh64_create           an XXH64 streaming state (XXH64_createState allocates)
 *
 * Each of them first asks emc__inject_fail(). Disarmed (always, outside tests) that is one
 * relaxed load. Armed, every such failure point counts itself, and the chosen one fails as the
 * real call fails when memory runs out (NULL, errno = ENOMEM). The hook sits above the
 * provider choice, so every provider fails at the same points.
 *
 * Two providers, chosen once per process when the library is loaded (below: "When"):
 *
 *   jemalloc  its non-standard API (mallocx/dallocx/mallctl: private arenas, no thread
 *             cache), found with dlopen("libjemalloc.so.2") + dlsym; blocks from 2 MiB are
 *             2 MiB-aligned and MADV_HUGEPAGE'd like the system provider's;
 *   system    mmap for blocks of EMC__SYS_MMAP_MIN bytes and more (zero pages for free;
 *             MADV_HUGEPAGE from 2 MiB, so big row tables get transparent huge pages where the
 *             kernel allows), posix_memalign below.
 *
 * Why jemalloc is not simply linked: Debian's libjemalloc.so.2 is built with initial-exec TLS
 * (DT_FLAGS STATIC_TLS and a 2.6 KiB PT_TLS segment). glibc places such TLS in the static TLS
 * block, which is sized at program start; an object that needs it and is loaded later with
 * dlopen (ctypes.CDLL, a plugin) gets only the block's small surplus and fails with
 * "cannot allocate memory in static TLS block". When libembcache.so had jemalloc as a
 * DT_NEEDED dependency, every dlopen of libembcache.so failed that way. libjemalloc_pic.a has
 * the same initial-exec relocations (R_X86_64_GOTTPOFF), so linking it into libembcache.so
 * would only move the problem. So libembcache.so does not depend on jemalloc; this file
 * dlopens it, which succeeds when the process already has it (programs linked through the
 * CMake package or pkg-config link -ljemalloc, so it is loaded at start-up; LD_PRELOAD) or
 * when the surplus happens to be large enough, and otherwise falls back to the system
 * provider, saying why in emc_host_allocator().
 *
 * When: in a constructor, as the library is loaded (at program start for a program linked
 * with it, static or shared; inside dlopen for ctypes.CDLL or a plugin), never inside an API
 * call. dlopen allocates through the process's malloc, and glibc's loader cannot always undo
 * a failed allocation: past dlopen's point of no return (mapping libjemalloc's dependencies,
 * libstdc++ and libgcc_s, in a process that lacks them) it ends the whole process with status
 * 127 ("out of memory"). Inside an API call that broke the rule that an allocation failure is
 * EMC_ENOMEM; at load time the same failure is the loader's own, as for any library the
 * program loads. tests/test_alloc_fail_process.c fails every allocation of the process in
 * turn inside API calls and checks that no API call dlopens. The pthread_once below stays:
 * it makes the choice once whoever asks first (the constructor, in practice).
 *
 * Under AddressSanitizer everything goes through posix_memalign/free (no header, no mmap) so
 * ASan sees every block's bounds. EMC_HOST_ALLOCATOR=system in the environment forces the
 * system provider (tests, diagnosis).
 */
#define _GNU_SOURCE 1 /* MAP_ANONYMOUS, MADV_HUGEPAGE, fdopen */

#include <errno.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h> /* MALLOCX_* flag encodings only; no symbol is linked */
#include <xxhash.h>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMC__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMC__ASAN 1
#endif
#endif

#define EMC__JEMALLOC_SONAME "libjemalloc.so.2"
#define EMC__SYS_MMAP_MIN ((size_t)1 << 20)  /* blocks this big or bigger are mmap()ed */
#define EMC__SYS_HUGE_MIN ((size_t)2 << 20)  /* and MADV_HUGEPAGE'd from this size */
#define EMC__SYS_MAGIC 0x454d43616c6c6f63ull /* "EMCalloc" */

typedef enum { PROV_SYSTEM = 0, PROV_JEMALLOC = 1, PROV_ASAN = 2 } provider;

static struct {
  provider prov;                                            /* fixed after alloc_once */
  void *(*mallocx)(size_t, int);                            /* jemalloc only */
  void (*dallocx)(void *, int);                             /* jemalloc only */
  int (*mallctl)(const char *, void *, size_t *, void *, size_t); /* jemalloc only */
  char desc[384];                                           /* emc_host_allocator() */
} emc__alloc_state;

static pthread_once_t emc__alloc_once_ctl = PTHREAD_ONCE_INIT;

static void alloc_resolve(void) {
  char *const d = emc__alloc_state.desc;
  const size_t dn = sizeof emc__alloc_state.desc;
#ifdef EMC__ASAN
  emc__alloc_state.prov = PROV_ASAN;
  snprintf(d, dn, "system: posix_memalign (AddressSanitizer build)");
#else
  const char *why = NULL;
  const char *force = getenv("EMC_HOST_ALLOCATOR");
  void *h = NULL;
  if (force && strcmp(force, "system") == 0) {
    why = "EMC_HOST_ALLOCATOR=system";
  } else if ((h = dlopen(EMC__JEMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL)) == NULL) {
    why = dlerror();
    if (!why) why = EMC__JEMALLOC_SONAME ": dlopen failed";
  } else {
    /* Function pointers from dlsym: POSIX guarantees the conversion, ISO C does not. */
    void *mx = dlsym(h, "mallocx"), *dx = dlsym(h, "dallocx"), *mc = dlsym(h, "mallctl");
    if (!mx || !dx || !mc) {
      why = EMC__JEMALLOC_SONAME " lacks mallocx/dallocx/mallctl";
      dlclose(h);
    } else {
      memcpy(&emc__alloc_state.mallocx, &mx, sizeof mx);
      memcpy(&emc__alloc_state.dallocx, &dx, sizeof dx);
      memcpy(&emc__alloc_state.mallctl, &mc, sizeof mc);
      /* h stays open for the life of the process: jemalloc memory may outlive any cache */
    }
  }
  if (why == NULL) {
    const char *version = "?";
    size_t len = sizeof version;
    if (emc__alloc_state.mallctl("version", (void *)&version, &len, NULL, 0) != 0) version = "?";
    emc__alloc_state.prov = PROV_JEMALLOC;
    snprintf(d, dn, "jemalloc %s (mallocx on private arenas)", version);
  } else {
    emc__alloc_state.prov = PROV_SYSTEM;
    snprintf(d, dn, "system: mmap + MADV_HUGEPAGE for blocks >= %zu MiB, posix_memalign below "
             "(jemalloc not used: %s)", EMC__SYS_MMAP_MIN >> 20, why);
  }
#endif
}

static provider alloc_provider(void) {
  pthread_once(&emc__alloc_once_ctl, alloc_resolve);
  return emc__alloc_state.prov;
}

/* The provider is chosen when the library is loaded, not at its first allocation inside an API
 * call (see "When" above). EMC_HOST_ALLOCATOR is read here, so it must be set before. */
__attribute__((constructor)) static void alloc_at_load(void) { (void)alloc_provider(); }

const char *emc_host_allocator(void) {
  alloc_provider();
  return emc__alloc_state.desc;
}

/* ------------------------------------------------------------------ system provider
 * Every block carries a header just below the pointer handed out, so emc__sys_free knows how
 * the block was made without trusting the caller's byte count. The prefix before the pointer
 * is a multiple of the alignment and at least the header (heap) or a page (mmap). */
typedef struct sys_hdr {
  uint64_t magic;  /* EMC__SYS_MAGIC ^ (uintptr_t)pointer: catches foreign frees */
  uint64_t mapped; /* bytes of the mapping (mmap), 0 for posix_memalign */
  void *base;      /* what mmap / posix_memalign returned */
  uint64_t pad;    /* keeps the header 32 bytes */
} sys_hdr;

static void *sys_alloc(size_t bytes, size_t align, int zero) {
  size_t pre = align > sizeof(sys_hdr) ? align : sizeof(sys_hdr);
  unsigned char *base, *p;
  sys_hdr *hd;
  if (bytes >= EMC__SYS_MMAP_MIN) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len;
    if (pre < page) pre = page;
    /* over-map by the alignment when it exceeds the page; mmap is page aligned */
    len = pre + bytes + (align > page ? align : 0);
    if (len < bytes) return NULL;
    base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= EMC__SYS_HUGE_MIN) (void)madvise(base, len, MADV_HUGEPAGE); /* a hint */
#endif
    p = (unsigned char *)(((uintptr_t)base + pre + align - 1) & ~(uintptr_t)(align - 1));
    hd = (sys_hdr *)(void *)(p - sizeof(sys_hdr));
    hd->mapped = len; /* anonymous pages are zero: `zero` costs nothing */
  } else {
    void *b = NULL;
    if (pre + bytes < bytes || posix_memalign(&b, align, pre + bytes) != 0) return NULL;
    base = b;
    p = base + pre;
    if (zero) memset(p, 0, bytes);
    hd = (sys_hdr *)(void *)(p - sizeof(sys_hdr));
    hd->mapped = 0;
  }
  hd->magic = EMC__SYS_MAGIC ^ (uint64_t)(uintptr_t)p;
  hd->base = base;
  hd->pad = 0;
  return p;
}

static void sys_free(void *ptr) {
  sys_hdr *hd = (sys_hdr *)(void *)((unsigned char *)ptr - sizeof(sys_hdr));
  if (hd->magic != (EMC__SYS_MAGIC ^ (uint64_t)(uintptr_t)ptr)) {
    /* not ours: leaking is the only safe answer (library code never aborts) */
    return;
  }
  hd->magic = 0;
  if (hd->mapped) munmap(hd->base, (size_t)hd->mapped);
  else free(hd->base);
}

/* ------------------------------------------------------------------ the provider calls
 * bytes >= 1 and align a power of two >= 16 (emc__alloc_in guarantees both). */
unsigned emc__sys_arena_create(void) {
  unsigned a = 0;
  size_t sz = sizeof a;
  if (alloc_provider() != PROV_JEMALLOC) return 0;
  if (emc__alloc_state.mallctl("arenas.create", &a, &sz, NULL, 0) != 0) return 0;
  return a;
}

void emc__sys_arena_destroy(unsigned arena) {
  char cmd[64];
  if (arena == 0 || alloc_provider() != PROV_JEMALLOC) return;
  snprintf(cmd, sizeof cmd, "arena.%u.destroy", arena);
  (void)emc__alloc_state.mallctl(cmd, NULL, NULL, NULL, 0);
}

void *emc__sys_alloc(unsigned arena, size_t bytes, size_t align, int zero) {
  switch (alloc_provider()) {
    case PROV_JEMALLOC: {
      int flags;
      void *p;
      /* big blocks (row tables, the pool arena, the index) start on a 2 MiB boundary and ask
       * for transparent huge pages, as the system provider's do: lookups touch them at
       * random, and a TLB miss per row costs more than the row */
      if (bytes >= EMC__SYS_HUGE_MIN && align < EMC__SYS_HUGE_MIN) align = EMC__SYS_HUGE_MIN;
      flags = MALLOCX_ALIGN(align) | (zero ? MALLOCX_ZERO : 0);
      if (arena != 0) flags |= MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
      p = emc__alloc_state.mallocx(bytes, flags);
#ifdef MADV_HUGEPAGE
      if (p && bytes >= EMC__SYS_HUGE_MIN) /* a hint; the whole 2 MiB pages of the block */
        (void)madvise(p, bytes & ~(EMC__SYS_HUGE_MIN - 1), MADV_HUGEPAGE);
#endif
      return p;
    }
    case PROV_ASAN: {
      void *p = NULL;
      if (posix_memalign(&p, align, bytes) != 0) return NULL;
      if (zero) memset(p, 0, bytes);
      return p;
    }
    case PROV_SYSTEM:
      break;
  }
  return sys_alloc(bytes, align, zero);
}

void emc__sys_free(void *p) {
  if (!p) return;
  switch (alloc_provider()) {
    case PROV_JEMALLOC: emc__alloc_state.dallocx(p, MALLOCX_TCACHE_NONE); return;
    case PROV_ASAN: free(p); return;
    case PROV_SYSTEM: break;
  }
  sys_free(p);
}

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

/* What both arms report (emc__inject_failed, emc__inject_last), reset when either is armed. */
static void inj_reset_reports(void) {
  __atomic_store_n(&inj_failed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_what, (const char *)NULL, __ATOMIC_RELAXED);
}

void emc__inject_arm(long long fail_at, size_t min_bytes, int sticky) {
  __atomic_store_n(&inj_fail_at, fail_at < 0 ? -1 : fail_at, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_min_bytes, min_bytes, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_sticky, sticky != 0, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_count, 0, __ATOMIC_RELAXED);
  inj_reset_reports();
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

/* Launch failures, armed and counted apart from the points above (a sweep over allocations
 * keeps its points when launches are added). */
static int inj_l_armed;          /* 0: every launch proceeds */
static long long inj_l_fail_at;  /* index of the launch that fails */
static long long inj_l_count;    /* launches counted since arming */

void emc__inject_launches_arm(long long fail_at) {
  __atomic_store_n(&inj_l_fail_at, fail_at < 0 ? -1 : fail_at, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_l_count, 0, __ATOMIC_RELAXED);
  inj_reset_reports();
  __atomic_store_n(&inj_l_armed, 1, __ATOMIC_RELEASE);
}

long long emc__inject_launches_disarm(void) {
  __atomic_store_n(&inj_l_armed, 0, __ATOMIC_RELEASE);
  return __atomic_load_n(&inj_l_count, __ATOMIC_RELAXED);
}

int emc__inject_launch(const char *kernel) {
  long long k;
  if (!__atomic_load_n(&inj_l_armed, __ATOMIC_ACQUIRE)) return 0;
  k = __atomic_fetch_add(&inj_l_count, 1, __ATOMIC_RELAXED);
  if (k != __atomic_load_n(&inj_l_fail_at, __ATOMIC_RELAXED)) return 0;
  __atomic_fetch_add(&inj_failed, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_what, kernel, __ATOMIC_RELAXED);
  __atomic_store_n(&inj_last_bytes, (size_t)0, __ATOMIC_RELAXED);
  return 1;
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

void *emc__mallocn(uint64_t n, size_t size) {
  size_t bytes;
  if (!emc__size_mul64(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return emc__malloc(bytes);
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

/* ------------------------------------------------------------------ big allocations
 * The provider above, behind the failure-injection hook. */
unsigned emc__arena_create(void) { return emc__sys_arena_create(); }

void emc__arena_destroy(unsigned arena) { emc__sys_arena_destroy(arena); }

void *emc__alloc(size_t bytes, size_t align, int zero) { return emc__alloc_in(0, bytes, align, zero); }

void *emc__alloc_in(unsigned arena, size_t bytes, size_t align, int zero) {
  if (bytes == 0) bytes = 1;
  if (align < 16) align = 16;
  /* above the provider choice: the same points fail with jemalloc, mmap and under ASan */
  if (emc__inject_fail("mallocx", bytes)) return NULL;
  return emc__sys_alloc(arena, bytes, align, zero);
}

void emc__free(void *p, size_t bytes) {
  (void)bytes;
  emc__sys_free(p);
}
