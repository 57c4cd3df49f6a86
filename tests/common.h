/*
 * common.h: helpers shared by the Check suites.
 *
 *   status assertions  EMCT_OK / EMCT_ST print the call, the status name and the detail.
 *   sanitizers         EMCT_SANITIZED / EMCT_TSAN, emct_scale() to shrink work under them.
 *   worlds             a store whose every row is known: dense rows and present hashed ids
 *                      hold emc_uniform_row values, absent hashed ids read as zero rows, and a
 *                      reference copy (by rank) follows every insert the test makes.
 *   batches            Zipf batches over a world, grouped by table, with the rank of every id.
 */
#ifndef EMC_TESTS_COMMON_H
#define EMC_TESTS_COMMON_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embcache.h"
#include "internal.h"
#include "trace.h"

/* ------------------------------------------------------------ sanitizers */
#if defined(__SANITIZE_ADDRESS__)
#define EMCT_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define EMCT_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#undef EMCT_ASAN
#define EMCT_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#undef EMCT_TSAN
#define EMCT_TSAN 1
#endif
#endif
#if defined(EMCT_ASAN) || defined(EMCT_TSAN)
#define EMCT_SANITIZED 1
#else
#define EMCT_SANITIZED 0
#endif

/* n in a normal build, about n / div (at least 1) under a sanitizer. */
static inline uint64_t emct_scale(uint64_t n, uint64_t div) {
  uint64_t m;
  if (!EMCT_SANITIZED) return n;
  m = n / div;
  return m ? m : 1;
}

/* Suites whose processes share a store's robust lock in shared memory (one of them possibly
 * killed while holding it) put EMCT_SHARED_LOCK_TSAN_OPTIONS at file scope: TSan models one
 * process, and its deadlock detector's per-thread list of held locks overflows (a CHECK
 * failure, not a report) though every lock is released. Races are still detected. */
#if defined(EMCT_TSAN)
#define EMCT_SHARED_LOCK_TSAN_OPTIONS                                                         \
  const char *__tsan_default_options(void);                                                   \
  const char *__tsan_default_options(void) { return "detect_deadlocks=0"; }
#else
#define EMCT_SHARED_LOCK_TSAN_OPTIONS
#endif

/* In a forked child (a ck_assert there is not seen by the suite): check, or print the
 * condition's message and the library's last detail and _exit(1). Needs <unistd.h>. */
#define CHILD_CHECK(cond, ...)                                                                \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "child %d: ", (int)getpid());                                           \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fprintf(stderr, " (%s)\n", emc_last_error_detail());                                    \
      _exit(1);                                                                               \
    }                                                                                         \
  } while (0)

/* GPU suites run smaller on the CPU model of the device (cuda/sim/, a build with
 * -DEMC_CUDASIM=ON: EMCT_CUDASIM) and with EMC_TEST_QUICK=1 in the environment (a short run on
 * a lent device, scripts/gpu-check.sh): fewer iterations and smaller caches, the same checks. */
int emct_gpu_quick(void);
/* n normally; about n / div (at least 1) when emct_gpu_quick(). */
static inline uint64_t emct_gpu_scale(uint64_t n, uint64_t div) {
  uint64_t m;
  if (!emct_gpu_quick()) return n;
  m = n / div;
  return m ? m : 1;
}

/* Timeout in seconds for tcase_set_timeout: longer under sanitizers. */
/* The suites' cache configuration: the library's defaults with admission INLINE (a lookup's
 * misses are cached when it returns and the stats are exact without an emc_flush), which
 * their expectations assume. The default, EMC_ADMISSION_AUTO, is what test_admission's
 * background cases and test_api's configuration checks run. */
static inline void emct_cache_config_init(emc_cache_config *cfg) {
  emc_cache_config_init(cfg);
  cfg->admission = EMC_ADMISSION_INLINE;
}

static inline double emct_timeout(double normal_s) { return EMCT_SANITIZED ? normal_s * 4 : normal_s; }

/* ------------------------------------------------------------ assertions */
#define EMCT_OK(expr)                                                                     \
  do {                                                                                    \
    emc_status emct_st_ = (expr);                                                         \
    ck_assert_msg(emct_st_ == EMC_OK, "%s returned %s (%s)", #expr,                       \
                  emc_status_name(emct_st_), emc_last_error_detail());                    \
  } while (0)

/* expr must fail with `want` and leave a non-empty error detail. */
#define EMCT_ST(expr, want)                                                               \
  do {                                                                                    \
    emc_status emct_st_ = (expr);                                                         \
    ck_assert_msg(emct_st_ == (want), "%s returned %s, expected %s (detail: %s)", #expr,  \
                  emc_status_name(emct_st_), emc_status_name(want),                       \
                  emc_last_error_detail());                                               \
    if ((want) != EMC_OK)                                                                 \
      ck_assert_msg(emc_last_error_detail()[0] != '\0',                                   \
                    "%s failed with %s but left an empty detail", #expr,                  \
                    emc_status_name(emct_st_));                                           \
  } while (0)

/* A cache's stats and internal debug counters, each call asserted EMC_OK. */
emc_stats get_stats(const emc_cache *c);
emc__cache_debug get_debug(const emc_cache *c);

/* Index of the first byte where a and b differ, or -1. */
long emct_first_diff(const void *a, const void *b, size_t n);
/* Short hex dump of up to 16 bytes (static buffer per call site is not needed: returns buf). */
const char *emct_hex(const void *p, size_t n, char *buf, size_t cap);

/* -------------------------------------------------------------- temp files */
/* A fresh directory under $TMPDIR (or /tmp) into buf; returns buf. Fails the test on error. */
char *emct_tmpdir(char *buf, size_t cap);
/* Remove a directory and the plain files in it (not recursive). */
void emct_rmdir(const char *dir);
/* Read a whole file; *n receives its size. Caller frees. */
unsigned char *emct_read_file(const char *path, size_t *n);
/* Write a whole file. */
void emct_write_file(const char *path, const void *p, size_t n);

/* ------------------------------------------------------------------ worlds */
typedef struct emct_tspec {
  emc_table_kind kind; /* dense or hashed */
  uint64_t rows;       /* dense: rows; hashed: capacity (>= universe for insert tests) */
  uint32_t dim;
  emc_dtype dtype;
  uint64_t universe;   /* hashed: ids drawn from ranks [0, universe); dense: ignored (= rows) */
  uint64_t present;    /* hashed: ranks [0, present) are written at start; dense: ignored */
} emct_tspec;

typedef struct emct_world {
  uint32_t n;              /* tables */
  emct_tspec *spec;        /* n (dense universe/present filled in) */
  emc_table_desc *desc;    /* n */
  emc_store *store;        /* owned */
  size_t *row_bytes;       /* n */
  uint64_t seed;           /* fill seed */
  unsigned char **ref;     /* n arrays universe * row_bytes: the value of each rank now */
  uint8_t **present;       /* n arrays universe: hashed rank present in the store */
  emct_zipf *zipf;         /* n, over [0, universe) */
  emct_perm *perm;         /* n, rank -> permuted rank (hot ranks scattered) */
  emct_rng rng;
  double alpha;
} emct_world;

#define EMCT_LO (-1.0f)
#define EMCT_HI (1.0f)

/* Build the store and its reference (fails the test on error). */
void emct_world_init(emct_world *w, const emct_tspec *spec, uint32_t n, double alpha,
                     uint64_t seed);
/* Destroy the store (any cache must be destroyed first) and free everything. */
void emct_world_free(emct_world *w);
/* The id of rank r of table t: dense ids are ranks; hashed ids are scattered 64-bit values. */
uint64_t emct_id_of(const emct_world *w, uint32_t t, uint64_t rank);
/* Bytes of a batch with these offsets. */
size_t emct_world_batch_bytes(const emct_world *w, const uint64_t *offsets);
/* Byte offset of position i (which lies in table t's segment) inside a packed buffer. */
size_t emct_pos_offset(const emct_world *w, const uint64_t *offsets, uint32_t t, uint64_t i);
/* A Zipf batch: counts[t] ids for table t (counts may be 0). ids/ranks: sum(counts) entries,
 * offsets: n + 1. Returns the total. */
uint64_t emct_world_batch(emct_world *w, const uint64_t *counts, uint64_t *ids,
                          uint64_t *ranks, uint64_t *offsets);
/* Check every row of `out` against the reference; `where` (may be NULL) against presence. */
void emct_world_check_rows(const emct_world *w, const uint64_t *ranks, const uint64_t *offsets,
                           const void *out, const uint8_t *where, const char *what);
/* Apply an insert batch to the reference (duplicates: the last wins). */
void emct_world_apply_insert(emct_world *w, const uint64_t *ranks, const uint64_t *offsets,
                             const void *rows);
/* Compare the whole store (every rank of every table) with the reference. */
void emct_world_check_store(const emct_world *w, const char *what);

/* A deterministic row that depends on (table, id, tag): f32 values are small integers plus
 * halves, f16 values too, so they are exact in both types; never equal to a uniform row. */
void emct_pattern_row(uint32_t table, uint64_t id, uint64_t tag, uint32_t dim, emc_dtype dtype,
                      void *out);

/* Check the cache's structure and the stats invariants that hold after every call:
 * emc__cache_check, hits + misses + absent == lookups, bytes_in_use == sum of per-table
 * rows * stride, bytes_in_use <= t1 * capacity, no call returned above t1 and no pass ended
 * above t2. If no_inserts, rows_cached == admissions - evictions; otherwise
 * admissions - evictions <= rows_cached <= admissions + inserts - evictions. */
void emct_check_cache(emc_cache *c, const emct_world *w, int no_inserts, const char *what);


/* ------------------------------------------------------------ generation rows
 * Rows that encode (table t, rank, generation g), for tests whose writers race readers:
 * f32: element j = 1 + ((g << EMCT_GEN_RANK_BITS | rank) ^ mask(t, j)), an integer in
 *      [1, 2^24]: exact in binary32; rank and g decode from any element.
 * f16: element j = 1 + ((g + rank * (2j + 1) + 37 t + 11 j) mod 2048), an integer in
 *      [1, 2048]: exact in binary16; g decodes from element 0 given the rank, and element 1
 *      differs between ranks < 1024 apart.
 * Neither is ever zero, so a zero row is only the absent value. Ranks < EMCT_GEN_MAX_UNIVERSE. */
#define EMCT_GEN_RANK_BITS 10u
#define EMCT_GEN_MAX_UNIVERSE (1u << EMCT_GEN_RANK_BITS)
/* The largest generation a row of dtype dt encodes. */
uint32_t emct_gen_max(emc_dtype dt);
void emct_gen_row(uint32_t t, uint64_t rank, uint32_t g, uint32_t dim, emc_dtype dt, void *out);
/* The generation g with row == emct_gen_row(t, rank, g), or -1 (wrong key, torn, garbage).
 * scratch: a row's bytes. */
int64_t emct_gen_decode(uint32_t t, uint64_t rank, uint32_t dim, emc_dtype dt, const void *row,
                        void *scratch);
/* Are all n bytes at p zero? */
int emct_is_zero(const void *p, size_t n);

/* GPU suites: 1 when a CUDA device answers (emc_device_count); else prints
 * "<suite>: no CUDA device (<detail>): skipped" and returns 0, and the caller exits 77 (CTest's
 * SKIP_RETURN_CODE). Call it first in main: it allocates nothing Check's leak checks see. */
int emct_gpu_present(const char *suite);
/* The same question asked in a forked child, so that this process never touches the device and
 * the processes it forks later may use it: 0 a device, 77 none (skip), 1 the probe failed (it
 * crashed, or a sanitizer reported): main returns a non-zero answer as it is. */
int emct_gpu_present_in_child(const char *suite);

/* Run suite s in this process (CK_NOFORK: CUDA does not survive fork) and free it; the exit
 * status for main: 0 when every test passed, else 1. */
int emct_run_nofork(Suite *s);

#endif /* EMC_TESTS_COMMON_H */
