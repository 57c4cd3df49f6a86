/*
 * consumer.c: a program outside embcache's build that uses an installed embcache the way
 * README's "Use it from your project" says (tests/check_install.sh builds it five ways).
 *
 * Builds a two-table store (f32 and f16), looks one batch up through a cache (backend AUTO:
 * CUDA where a device answers, else host), checks every row against emc_uniform_row, and
 * prints the backend and the host allocator. Exit 0 when every row is right; 1 otherwise.
 *   consumer [--expect-allocator PREFIX]   also fail unless emc_host_allocator() starts so
 */
#include <embcache.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    emc_status st_ = (call);                                                          \
    if (st_ != EMC_OK) {                                                              \
      fprintf(stderr, "consumer: %s: %s: %s\n", #call, emc_status_name(st_),          \
              emc_last_error_detail());                                               \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  const char *want_alloc = argc == 3 && strcmp(argv[1], "--expect-allocator") == 0 ? argv[2] : NULL;
  emc_table_desc tables[2] = {{"user", EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, EMC_STATE_NONE},
                              {"item", EMC_TABLE_DENSE, 500, 8, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *store = NULL;
  emc_cache *cache = NULL;
  emc_cache_config cfg;
  uint64_t ids[7] = {3, 999, 3, 0, 7, 499, 7}, offsets[3] = {0, 4, 7};
  static unsigned char out[4 * 16 * 4 + 3 * 8 * 2], want[16 * 4];
  size_t bytes = 0, at = 0;
  int bad = 0;

  CHECK(emc_store_create(tables, 2, &store));
  for (uint32_t t = 0; t < 2; t++) CHECK(emc_store_fill_uniform(store, t, -1.0f, 1.0f, 42));
  emc_cache_config_init(&cfg);
  cfg.capacity_bytes = 1u << 20;
  CHECK(emc_cache_create(store, &cfg, &cache));
  CHECK(emc_batch_bytes(store, offsets, &bytes));
  if (bytes != sizeof out) {
    fprintf(stderr, "consumer: emc_batch_bytes = %zu, expected %zu\n", bytes, sizeof out);
    return 1;
  }
  for (int pass = 0; pass < 2; pass++) { /* misses, then hits */
    /* the default admission may admit on the cache's thread: the flush waits for it */
    if (pass == 1) CHECK(emc_flush(cache, NULL));
    CHECK(emc_lookup(cache, ids, offsets, out, NULL));
    at = 0;
    for (uint32_t t = 0; t < 2; t++) {
      size_t rb = tables[t].dim * emc_dtype_size(tables[t].dtype);
      for (uint64_t p = offsets[t]; p < offsets[t + 1]; p++, at += rb) {
        CHECK(emc_uniform_row(42, t, ids[p], -1.0f, 1.0f, tables[t].dim, tables[t].dtype, want));
        bad += memcmp(out + at, want, rb) != 0;
      }
    }
  }
  emc_stats st;
  CHECK(emc_get_stats(cache, &st));
  printf("consumer: embcache %s, backend %s, %d wrong rows, hits %llu of %llu\n",
         emc_version_string(), emc_cache_backend(cache) == EMC_BACKEND_CUDA ? "cuda" : "host", bad,
         (unsigned long long)st.hits, (unsigned long long)st.lookups);
  printf("consumer: host allocator: %s\n", emc_host_allocator());
  CHECK(emc_cache_destroy(cache));
  emc_store_destroy(store);
  if (want_alloc && strncmp(emc_host_allocator(), want_alloc, strlen(want_alloc)) != 0) {
    fprintf(stderr, "consumer: expected the host allocator to be %s\n", want_alloc);
    return 1;
  }
  return bad != 0 || st.hits == 0;
}
