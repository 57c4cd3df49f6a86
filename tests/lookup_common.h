/*
 * lookup_common.h: helpers shared by the host-lookup suites (test_lookup_paths.c,
 * test_lookup_writers.c, test_admission.c), over tests/common.h's worlds.
 *
 *   time        now_s (monotonic seconds), pause_us.
 *   caches      make_cache / make_cache_t2: a host-backend cache over a world's store;
 *               get_stats / get_debug (emc_get_stats, emc__cache_get_debug, asserted).
 *   rows        pattern_batch (insert rows), xmalloc (rows are checked with common.h's
 *               emct_world_check_rows / _store).
 *   batches     bbuild: a batch of (table, rank) pairs in any order, grouped by table.
 */
#ifndef EMC_TESTS_LOOKUP_COMMON_H
#define EMC_TESTS_LOOKUP_COMMON_H

#include "common.h"

#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* ------------------------------------------------------------------ time */
double now_s(void);
void pause_us(long us);

/* ------------------------------------------------------------------ caches */
/* A host-backend cache over w's store: evict_high 0.95, evict_low t2 (0.80 for make_cache). */
emc_cache *make_cache_t2(emct_world *w, size_t capacity, float t2, uint32_t key_bits,
                         uint64_t unified, uint64_t hash_seed, uint32_t admission);
emc_cache *make_cache(emct_world *w, size_t capacity, uint32_t key_bits, uint64_t unified,
                      uint64_t hash_seed, uint32_t admission);

/* ------------------------------------------------------------------ rows */
/* Pattern rows (emct_pattern_row) for an insert batch; tag makes each call's rows new. */
void pattern_batch(const emct_world *w, const uint64_t *ids, const uint64_t *offsets,
                   uint64_t tag, unsigned char *rows);

/* malloc, asserted (at least 1 byte). */
void *xmalloc(size_t n);


/* ------------------------------------------------------------------ batches
 * A batch under construction: (table, rank) pairs in any order, grouped by table (stably) at
 * the end. */
typedef struct bbuild {
  uint32_t nt;
  uint64_t n, cap;
  uint32_t *tab;
  uint64_t *rank;
  /* grouped */
  uint64_t *ids, *ranks, offsets[8];
} bbuild;

void bb_init(bbuild *b, uint32_t nt, uint64_t cap);
void bb_free(bbuild *b);
void bb_add(bbuild *b, uint32_t t, uint64_t rank);
/* Group the pairs by table: ids, ranks and offsets. */
void bb_group(bbuild *b, const emct_world *w);

#endif
