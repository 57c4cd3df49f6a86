/*
 * store_ref.h: what test_store (the store's API) and test_store_file (its file format) share:
 * a reference model of a store (refstore: every table's rows as written, hashed ids in
 * insertion order) and the checks of a failing call (a fresh detail, *out untouched).
 */
#ifndef EMC_TEST_STORE_REF_H
#define EMC_TEST_STORE_REF_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* ck_assert_msg marks a point (a write to Check's channel) on every passing check, which
 * dominates hot loops: REQUIRE only reports failures. */
#define REQUIRE(cond, ...)                  \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* What a failing emc_store_create / emc_store_open must leave in *out. */
extern int store_sentinel_obj;
#define OUT_SENTINEL ((emc_store *)&store_sentinel_obj)

static inline uint64_t rng_next(uint64_t *s) { return emc__splitmix64(s); }
static inline uint64_t rng_below(uint64_t *s, uint64_t n) { return n ? emc__mulhi(rng_next(s), n) : 0; }

size_t row_bytes_of(const emc_table_desc *d);

/* Set this thread's detail to a known text (kept in primed) so a later failure must replace it. */
extern char primed[512];
void prime_detail(void);
/* expr fails with `want` and records a new, non-empty detail */
#define ST_FRESH(expr, want)                                                              \
  do {                                                                                    \
    prime_detail();                                                                       \
    EMCT_ST(expr, want);                                                                  \
    REQUIRE(strcmp(emc_last_error_detail(), primed) != 0,                                 \
            "%s failed but did not record its own detail (still '%s')", #expr, primed);   \
  } while (0)

void path_in(char *buf, size_t cap, const char *dir, const char *name);
/* Open must fail with want, leave *out untouched and record a fresh detail. */
void expect_open_fails(const char *path, emc_status want, const char *what);

/* ------------------------------------------------------------- reference model */
typedef struct refstore {
  uint32_t n;
  emc_table_desc desc[8];
  size_t rb[8];
  unsigned char *rows[8];    /* dense: rows * rb; hashed: cap * rb in insertion order */
  uint64_t *ids[8];          /* hashed: cap ids in insertion order */
  uint64_t count[8];
} refstore;

void ref_init(refstore *r, const emc_table_desc *d, uint32_t n);
void ref_free(refstore *r);
int64_t ref_find(const refstore *r, uint32_t t, uint64_t id);
void ref_write(refstore *r, uint32_t t, const uint64_t *ids, size_t n, const void *rows);
/* The store equals the reference: descriptors, counts, every present row, some absent ids. */
void ref_check(const refstore *r, const emc_store *s, const char *what);
/* deterministic distinct-ish row contents */
void fill_rows(void *rows, size_t n, const emc_table_desc *d, uint32_t table, uint64_t tag,
               const uint64_t *ids);

#endif
