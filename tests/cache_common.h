/*
 * cache_common.h: what the parts of test_cache share (cache_common.c holds them):
 *   test_cache.c    Zipf lookups against the reference, inserts and write-back, a batch
 *                   bigger than the cache, invariants, the hit ratio between LRU bounds; main
 *   cache_edges.c   empty and all-duplicate batches, absent hashed ids, the unified index,
 *                   hashed key collisions, emc_lookup_ex's where[], the index's size
 */
#ifndef EMC_TESTS_CACHE_COMMON_H
#define EMC_TESTS_CACHE_COMMON_H

#include <check.h>

#include "common.h"

/* A host cache over w's store (capacity, t1, t2, key width, unified index rows). */
emc_cache *make_cache(emct_world *w, size_t capacity, float t1, float t2, uint32_t key_bits,
                      uint64_t unified_rows);
/* Bytes of every row of the world's universes at the slot stride. */
uint64_t world_stride_bytes(const emct_world *w);
/* Bytes of a batch of per_table ids in every table. */
size_t max_batch_bytes(const emct_world *w, uint64_t per_table);
/* One lookup through emc_lookup_ex: rows against the reference, where[] against presence and
 * against the stats deltas, then every cache invariant. */
void lookup_checked(emc_cache *c, emct_world *w, const uint64_t *ids, const uint64_t *ranks,
                    const uint64_t *offsets, unsigned char *out, uint8_t *where, int no_inserts,
                    const char *what);
/* Pattern rows for an insert batch; tag makes each position's row unique. */
void pattern_batch(const emct_world *w, const uint64_t *ids, const uint64_t *offsets, uint64_t tag,
                   unsigned char *rows);
/* cache_edges.c's tests, added to the "edges" case. */
void cache_edges_tests(TCase *te);

#endif /* EMC_TESTS_CACHE_COMMON_H */
