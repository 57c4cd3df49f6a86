/* cache_common.c: test_cache's helpers (cache_common.h). */
#include <string.h>

#include "cache_common.h"

emc_cache *make_cache(emct_world *w, size_t capacity, float t1, float t2, uint32_t key_bits,
                      uint64_t unified_rows) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = capacity;
  cfg.evict_high = t1;
  cfg.evict_low = t2;
  cfg.key_bits = key_bits;
  cfg.unified_index_rows = unified_rows;
  EMCT_OK(emc_cache_create(w->store, &cfg, &c));
  ck_assert_int_eq(emc_cache_backend(c), EMC_BACKEND_HOST);
  return c;
}

uint64_t world_stride_bytes(const emct_world *w) {
  uint64_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += w->spec[t].universe * emc__row_stride(w->row_bytes[t]);
  return b;
}

size_t max_batch_bytes(const emct_world *w, uint64_t per_table) {
  size_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += (size_t)per_table * w->row_bytes[t];
  return b;
}

void lookup_checked(emc_cache *c, emct_world *w, const uint64_t *ids, const uint64_t *ranks,
                    const uint64_t *offsets, unsigned char *out, uint8_t *where, int no_inserts,
                    const char *what) {
  emc_stats s0 = get_stats(c), s1;
  uint64_t n = offsets[w->n], i, wc = 0, ws = 0, wa = 0;
  memset(where, 0xee, n ? n : 1);
  EMCT_OK(emc_lookup_ex(c, ids, offsets, out, where, NULL));
  emct_world_check_rows(w, ranks, offsets, out, where, what);
  for (i = 0; i < n; i++) {
    ck_assert_msg(where[i] <= EMC_WHERE_ABSENT, "%s: where[%llu] = %u", what,
                  (unsigned long long)i, where[i]);
    wc += where[i] == EMC_WHERE_CACHE;
    ws += where[i] == EMC_WHERE_STORE;
    wa += where[i] == EMC_WHERE_ABSENT;
  }
  s1 = get_stats(c);
  ck_assert_msg(s1.lookups - s0.lookups == n, "%s: lookups +%llu for %llu ids", what,
                (unsigned long long)(s1.lookups - s0.lookups), (unsigned long long)n);
  ck_assert_msg(s1.hits - s0.hits == wc && s1.misses - s0.misses == ws &&
                    s1.absent - s0.absent == wa,
                "%s: stats +%llu hits +%llu misses +%llu absent, where says %llu/%llu/%llu", what,
                (unsigned long long)(s1.hits - s0.hits), (unsigned long long)(s1.misses - s0.misses),
                (unsigned long long)(s1.absent - s0.absent), (unsigned long long)wc,
                (unsigned long long)ws, (unsigned long long)wa);
  ck_assert_msg(s1.unified_hits - s0.unified_hits <= ws, "%s: unified hits beyond misses", what);
  /* single-threaded: nothing is skipped for a busy lock; every admissible miss is admitted
   * or skipped (duplicates of the batch neither) */
  ck_assert_msg(s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped <= ws,
                "%s: more admissions than misses", what);
  emct_check_cache(c, w, no_inserts, what);
}

void pattern_batch(const emct_world *w, const uint64_t *ids, const uint64_t *offsets, uint64_t tag,
                   unsigned char *rows) {
  uint32_t t;
  uint64_t i;
  unsigned char *p = rows;
  for (t = 0; t < w->n; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, p += w->row_bytes[t])
      emct_pattern_row(t, ids[i], tag * 1000003u + i, w->spec[t].dim, w->spec[t].dtype, p);
}
