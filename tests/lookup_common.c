/* lookup_common.c: helpers shared by the host-lookup suites (see lookup_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "lookup_common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ time */
double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------ caches */
emc_cache *make_cache_t2(emct_world *w, size_t capacity, float t2, uint32_t key_bits,
                         uint64_t unified, uint64_t hash_seed, uint32_t admission) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = capacity;
  cfg.evict_high = 0.95f;
  cfg.evict_low = t2;
  cfg.key_bits = key_bits;
  cfg.unified_index_rows = unified;
  cfg.hash_seed = hash_seed;
  cfg.admission = admission;
  EMCT_OK(emc_cache_create(w->store, &cfg, &c));
  ck_assert_int_eq(emc_cache_backend(c), EMC_BACKEND_HOST);
  return c;
}

emc_cache *make_cache(emct_world *w, size_t capacity, uint32_t key_bits,
                      uint64_t unified, uint64_t hash_seed, uint32_t admission) {
  return make_cache_t2(w, capacity, 0.80f, key_bits, unified, hash_seed, admission);
}

/* ------------------------------------------------------------------ rows */
void pattern_batch(const emct_world *w, const uint64_t *ids, const uint64_t *offsets,
                   uint64_t tag, unsigned char *rows) {
  uint32_t t;
  uint64_t i;
  unsigned char *p = rows;
  for (t = 0; t < w->n; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++, p += w->row_bytes[t])
      emct_pattern_row(t, ids[i], tag * 1000003u + i, w->spec[t].dim, w->spec[t].dtype, p);
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  ck_assert_msg(p != NULL, "out of memory (%zu bytes)", n);
  return p;
}

/* ------------------------------------------------------------------ batches */
void bb_init(bbuild *b, uint32_t nt, uint64_t cap) {
  memset(b, 0, sizeof *b);
  ck_assert(nt < 8);
  b->nt = nt;
  b->cap = cap;
  b->tab = xmalloc(cap * sizeof *b->tab);
  b->rank = xmalloc(cap * sizeof *b->rank);
  b->ids = xmalloc(cap * sizeof *b->ids);
  b->ranks = xmalloc(cap * sizeof *b->ranks);
}

void bb_free(bbuild *b) {
  free(b->tab); free(b->rank); free(b->ids); free(b->ranks);
}

void bb_add(bbuild *b, uint32_t t, uint64_t rank) {
  if (b->n >= b->cap) ck_assert_msg(0, "test sizes: a batch of more than %llu ids", (unsigned long long)b->cap);
  b->tab[b->n] = t;
  b->rank[b->n] = rank;
  b->n++;
}

void bb_group(bbuild *b, const emct_world *w) {
  uint32_t t;
  uint64_t i, k = 0;
  b->offsets[0] = 0;
  for (t = 0; t < b->nt; t++) {
    for (i = 0; i < b->n; i++)
      if (b->tab[i] == t) {
        b->ranks[k] = b->rank[i];
        b->ids[k] = emct_id_of(w, t, b->rank[i]);
        k++;
      }
    b->offsets[t + 1] = k;
  }
  ck_assert_uint_eq(k, b->n);
}
