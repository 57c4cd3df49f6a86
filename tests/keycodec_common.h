/*
 * keycodec_common.h: what the parts of test_keycodec share (keycodec_common.c holds them):
 * the property checks of a built codec, its keys, and the table-size sets they run on.
 *   test_keycodec.c   the codec's properties on many table-size sets, its errors; main
 *   keycodec_api.c    the same through the public API (emc_cache_global_key, keyspace errors
 *                     from emc_cache_create)
 */
#ifndef EMC_TESTS_KEYCODEC_COMMON_H
#define EMC_TESTS_KEYCODEC_COMMON_H

#include <check.h>

#include "common.h"

/* ck_assert_msg marks a point (a write to Check's channel) on every passing check, which
 * dominates hot loops: REQUIRE only reports failures. */
#define REQUIRE(cond, ...)                  \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

typedef unsigned __int128 u128;

static uint64_t rng_next(uint64_t *s) { return emc__splitmix64(s); }
static uint64_t rng_below(uint64_t *s, uint64_t n) { return n ? emc__mulhi(rng_next(s), n) : 0; }
/* log-uniform in [1, 2^maxbits] */
uint64_t rng_logu(uint64_t *s, uint32_t maxbits);
/* libxxhash's XXH3 of id's 8 little-endian bytes: what hashed keys are built from */
uint64_t lib_xxh3(uint64_t id, uint64_t seed);
/* success iff every table leaves a code bit and sum 2^bits(T) + 2 <= 2^key_bits */
int codec_should_fit(const uint64_t *rows, uint32_t n, uint32_t key_bits);
/* Structural properties of a built codec (see test_keycodec.c's comment). */
void check_codec(const emc__codec *c, const uint64_t *rows, const emc_table_kind *kinds,
                 uint32_t n, uint32_t key_bits, uint64_t seed, const char *what);
/* One key of table t for id: its round trip and where it lies. */
void check_key(const emc__codec *c, uint32_t t, uint64_t id, uint64_t key, const char *what);
void check_sampled(const emc__codec *c, uint64_t *rng, uint32_t per_table, const char *what);
void check_random_keys(const emc__codec *c, uint64_t *rng, uint32_t n_keys, const char *what);

/* A set of table sizes and kinds, made by gen_config for one of the GEN_ kinds. */
typedef struct cfgset {
  uint64_t *rows;
  emc_table_kind *kinds;
  uint32_t n;
  char what[96];
} cfgset;

enum { GEN_CRITEO, GEN_LOGU, GEN_ONES, GEN_MANY, GEN_FIB, GEN_EQUAL, GEN_SKEW, GEN_COUNT };

extern const uint64_t criteo_rows[26];
void gen_config(cfgset *g, int gen, uint32_t key_bits, uint64_t *rng);
void free_config(cfgset *g);

/* keycodec_api.c's tests, added to the suite's case. */
void keycodec_api_tests(TCase *tc);

#endif /* EMC_TESTS_KEYCODEC_COMMON_H */
