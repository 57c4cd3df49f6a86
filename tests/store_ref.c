/*
 * store_ref.c: the reference model and failure checks test_store and test_store_file share
 * (store_ref.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_ref.h"

int store_sentinel_obj;

size_t row_bytes_of(const emc_table_desc *d) { return (size_t)d->dim * emc_dtype_size(d->dtype); }

char primed[512];
void prime_detail(void) {
  ck_assert(emc_batch_bytes(NULL, NULL, NULL) == EMC_EINVAL); /* a call no test here makes */
  snprintf(primed, sizeof primed, "%s", emc_last_error_detail());
  ck_assert(primed[0] != '\0');
}

void path_in(char *buf, size_t cap, const char *dir, const char *name) {
  snprintf(buf, cap, "%s/%s", dir, name);
}

void expect_open_fails(const char *path, emc_status want, const char *what) {
  emc_store *out = OUT_SENTINEL;
  emc_status st;
  prime_detail();
  st = emc_store_open(path, &out);
  REQUIRE(st == want, "%s: emc_store_open returned %s, expected %s (%s)", what,
                emc_status_name(st), emc_status_name(want), emc_last_error_detail());
  REQUIRE(out == OUT_SENTINEL, "%s: *out changed on failure", what);
  REQUIRE(emc_last_error_detail()[0] != '\0' && strcmp(emc_last_error_detail(), primed) != 0,
                "%s: no fresh detail", what);
}

void ref_init(refstore *r, const emc_table_desc *d, uint32_t n) {
  uint32_t t;
  memset(r, 0, sizeof *r);
  r->n = n;
  for (t = 0; t < n; t++) {
    r->desc[t] = d[t];
    r->rb[t] = row_bytes_of(&d[t]);
    r->rows[t] = calloc(d[t].rows, r->rb[t]);
    r->ids[t] = calloc(d[t].rows, sizeof(uint64_t));
    ck_assert(r->rows[t] && r->ids[t]);
    if (d[t].kind == EMC_TABLE_DENSE) r->count[t] = d[t].rows;
  }
}
void ref_free(refstore *r) {
  uint32_t t;
  for (t = 0; t < r->n; t++) {
    free(r->rows[t]);
    free(r->ids[t]);
  }
}
int64_t ref_find(const refstore *r, uint32_t t, uint64_t id) {
  uint64_t k;
  if (r->desc[t].kind == EMC_TABLE_DENSE) return id < r->desc[t].rows ? (int64_t)id : -1;
  for (k = 0; k < r->count[t]; k++)
    if (r->ids[t][k] == id) return (int64_t)k;
  return -1;
}
void ref_write(refstore *r, uint32_t t, const uint64_t *ids, size_t n, const void *rows) {
  size_t i;
  for (i = 0; i < n; i++) {
    int64_t k = ref_find(r, t, ids[i]);
    if (k < 0) {
      ck_assert(r->count[t] < r->desc[t].rows);
      k = (int64_t)r->count[t]++;
      r->ids[t][k] = ids[i];
    }
    memcpy(r->rows[t] + (size_t)k * r->rb[t], (const unsigned char *)rows + i * r->rb[t], r->rb[t]);
  }
}
void ref_check(const refstore *r, const emc_store *s, const char *what) {
  uint32_t t;
  ck_assert_uint_eq(emc_store_n_tables(s), r->n);
  for (t = 0; t < r->n; t++) {
    emc_table_desc d;
    uint64_t cnt = 0, k;
    size_t rb = r->rb[t];
    unsigned char *buf = malloc(rb + 1), *zero = calloc(1, rb);
    ck_assert(buf && zero);
    EMCT_OK(emc_store_table(s, t, &d));
    REQUIRE(d.kind == r->desc[t].kind && d.rows == r->desc[t].rows &&
                      d.dim == r->desc[t].dim && d.dtype == r->desc[t].dtype,
                  "%s: table %u descriptor differs", what, t);
    if (r->desc[t].name) ck_assert_str_eq(d.name, r->desc[t].name);
    EMCT_OK(emc_store_table_count(s, t, &cnt));
    REQUIRE(cnt == r->count[t], "%s: table %u count %llu, want %llu", what, t,
                  (unsigned long long)cnt, (unsigned long long)r->count[t]);
    for (k = 0; k < r->count[t]; k++) {
      uint64_t id = r->desc[t].kind == EMC_TABLE_DENSE ? k : r->ids[t][k];
      long dpos;
      buf[rb] = 0x5a;
      EMCT_OK(emc_store_read(s, t, &id, 1, buf));
      dpos = emct_first_diff(buf, r->rows[t] + k * rb, rb);
      REQUIRE(dpos < 0, "%s: table %u id %llu: byte %ld differs", what, t,
                    (unsigned long long)id, dpos);
      REQUIRE(buf[rb] == 0x5a, "%s: read wrote past the row", what);
    }
    if (r->desc[t].kind == EMC_TABLE_HASHED) {
      uint64_t probe[4] = {0, ~0ull, 0x123456789ull, 0xdeadbeefcafef00dull}, i;
      for (i = 0; i < 4; i++) {
        if (ref_find(r, t, probe[i]) >= 0) continue;
        memset(buf, 0x77, rb);
        EMCT_OK(emc_store_read(s, t, &probe[i], 1, buf));
        REQUIRE(memcmp(buf, zero, rb) == 0, "%s: absent id %llx of table %u not zero", what,
                      (unsigned long long)probe[i], t);
      }
    }
    free(buf);
    free(zero);
  }
}

void fill_rows(void *rows, size_t n, const emc_table_desc *d, uint32_t table, uint64_t tag,
               const uint64_t *ids) {
  size_t i, rb = row_bytes_of(d);
  for (i = 0; i < n; i++)
    emct_pattern_row(table, ids[i], tag + i, d->dim, d->dtype, (unsigned char *)rows + i * rb);
}
