/*
 * test_gpu_cache: the CUDA backend against the host backend and the reference model.
 *
 * Every scenario builds two identical worlds (same tables, same fill seed), puts a host cache
 * on one and a CUDA cache on the other, and drives both with the same random batches: lookups
 * (Zipf or near-uniform ids), inserts of fresh rows, flushes. Every lookup's rows must be the
 * same bytes on both backends and equal to the reference; at the end both caches are
 * destroyed (writing back) and both stores must equal the reference. Covered: dims 1..512
 * (odd ones too), f32 and f16, 32- and 64-bit keys, dense and hashed tables (absent ids too),
 * heavy eviction, batches larger than the cache, host and device memory for ids/offsets/out,
 * concurrent lookups on two streams while a third thread inserts, bad ids, a budget above the
 * device's memory. After every lookup, emc__cuda_check verifies the device structures.
 *
 * EMC_TEST_QUICK=1 runs a quarter of the batches (for compute-sanitizer).
 * Exits 77 (CTest SKIP_RETURN_CODE) when no CUDA device answers. Check runs NOFORK: CUDA does
 * not survive fork.
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "emc_cuda.h"

#include "cuda_ok.h"

typedef struct pair {
  emct_world wh, wd;  /* host-backend world, CUDA-backend world */
  emc_cache *ch, *cd;
} pair;

static void pair_init(pair *p, const emct_tspec *spec, uint32_t n, double alpha, uint64_t seed,
                      size_t capacity, uint32_t key_bits) {
  emc_cache_config cfg;
  emct_world_init(&p->wh, spec, n, alpha, seed);
  emct_world_init(&p->wd, spec, n, alpha, seed);
  emct_cache_config_init(&cfg);
  cfg.capacity_bytes = capacity;
  cfg.key_bits = key_bits;
  cfg.unified_index_rows = 4096;
  cfg.backend = EMC_BACKEND_HOST;
  EMCT_OK(emc_cache_create(p->wh.store, &cfg, &p->ch));
  cfg.backend = EMC_BACKEND_CUDA;
  EMCT_OK(emc_cache_create(p->wd.store, &cfg, &p->cd));
  ck_assert_int_eq(emc_cache_backend(p->cd), EMC_BACKEND_CUDA);
}

static void pair_free(pair *p, const char *what) {
  EMCT_OK(emc_cache_destroy(p->ch));
  EMCT_OK(emc_cache_destroy(p->cd));
  emct_world_check_store(&p->wh, what);
  emct_world_check_store(&p->wd, what);
  emct_world_free(&p->wh);
  emct_world_free(&p->wd);
}

/* Device copies of a batch (ids, offsets, out, where), for the device-pointer paths. */
typedef struct dbatch {
  uint64_t *ids, *offsets;
  unsigned char *out;
  uint8_t *where;
} dbatch;

static void dbatch_make(dbatch *d, const uint64_t *ids, uint64_t n, const uint64_t *offsets,
                        uint32_t nt, size_t bytes) {
  CUDA_OK(cudaMalloc((void **)&d->ids, n * 8 + 8));
  CUDA_OK(cudaMalloc((void **)&d->offsets, (nt + 1) * 8));
  CUDA_OK(cudaMalloc((void **)&d->out, bytes + 16));
  CUDA_OK(cudaMalloc((void **)&d->where, n + 1));
  CUDA_OK(cudaMemcpy(d->ids, ids, n * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d->offsets, offsets, (nt + 1) * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d->out, 0xa5, bytes + 16));
}
static void dbatch_free(dbatch *d) {
  cudaFree(d->ids);
  cudaFree(d->offsets);
  cudaFree(d->out);
  cudaFree(d->where);
}

typedef struct scen {
  const char *name;
  double alpha;
  uint32_t key_bits;
  size_t capacity;
  uint64_t per_table;   /* ids per table per batch (random 0 .. 2x) */
  int batches;
  int insert_every;     /* 0: no inserts */
  int device_ptrs;      /* 0 host, 1 device ids/out (host offsets), 2 device offsets too */
} scen;

/* After a lookup's writer call, the index keeps its probes for absent keys short, as the host
 * backend's does (lib/index.c, emc__hix_maintain): tombstones are re-packed before EMPTY slots
 * fall under 1/64 of the index. A miss walks its cluster to the first bucket with an EMPTY
 * slot; the device once re-packed no cluster over 32 buckets and never hurried, so tombstones
 * piled up until misses walked the whole index (first GPU run, bench/GPU_RESULTS.md). */
static void index_probeable(emc_cache *c, const char *what) {
  emc__ix_shape sh;
  EMCT_OK(emc__cuda_index_shape(c, &sh));
  ck_assert_msg(sh.tombs == 0 || sh.empty >= sh.slots / 64, /* k_repack's own threshold */
                "%s: the index has %llu EMPTY slots of %llu (%llu tombstones; longest cluster %llu "
                "buckets): probes for absent keys walk long clusters", what,
                (unsigned long long)sh.empty, (unsigned long long)sh.slots,
                (unsigned long long)sh.tombs, (unsigned long long)sh.longest_cluster);
}

static emct_rng trng; /* seeded in main */
static int quick;      /* emct_gpu_quick(): a quarter of the batches */
static int memcheck;   /* EMC_TEST_QUICK=1 (compute-sanitizer runs) */

static void run(const emct_tspec *spec, uint32_t nt, const scen *sc, uint64_t seed) {
  pair p;
  uint64_t *counts = calloc(nt, 8), *offsets = calloc(nt + 1, 8), *offsets2 = calloc(nt + 1, 8);
  uint64_t maxn = sc->per_table * 2 * nt + 1, *ids = malloc(maxn * 8), *ranks = malloc(maxn * 8);
  uint64_t *ids2 = malloc(maxn * 8), *ranks2 = malloc(maxn * 8);
  int b;
  char what[160];
  emc_stats sh, sd;
  int batches = quick ? (sc->batches + 3) / 4 : sc->batches;
  pair_init(&p, spec, nt, sc->alpha, seed, sc->capacity, sc->key_bits);
  for (b = 0; b < batches; b++) {
    uint64_t n, i;
    uint32_t t;
    size_t bytes;
    unsigned char *oh, *od;
    uint8_t *whr, *wdr;
    for (t = 0; t < nt; t++) counts[t] = emct_rng_next(&trng) % (2 * sc->per_table + 1);
    n = emct_world_batch(&p.wh, counts, ids, ranks, offsets);
    /* the CUDA world draws the same batch (same rng) */
    ck_assert_uint_eq(emct_world_batch(&p.wd, counts, ids2, ranks2, offsets2), n);
    ck_assert(memcmp(ids, ids2, n * 8) == 0);
    bytes = emct_world_batch_bytes(&p.wh, offsets);
    oh = malloc(bytes + 1);
    od = malloc(bytes + 1);
    whr = malloc(n + 1);
    wdr = malloc(n + 1);
    memset(oh, 0x5a, bytes + 1);
    memset(od, 0xa5, bytes + 1);
    snprintf(what, sizeof what, "%s batch %d (%llu ids)", sc->name, b, (unsigned long long)n);
    EMCT_OK(emc_lookup_ex(p.ch, ids, offsets, oh, whr, NULL));
    if (sc->device_ptrs) {
      dbatch d;
      dbatch_make(&d, ids, n, offsets, nt, bytes);
      EMCT_OK(emc_lookup_ex(p.cd, d.ids, sc->device_ptrs == 2 ? d.offsets : offsets, d.out,
                            d.where, NULL));
      CUDA_OK(cudaMemcpy(od, d.out, bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(wdr, d.where, n, cudaMemcpyDeviceToHost));
      dbatch_free(&d);
    } else {
      EMCT_OK(emc_lookup_ex(p.cd, ids, offsets, od, wdr, NULL));
    }
    {
      long d = emct_first_diff(oh, od, bytes);
      ck_assert_msg(d < 0, "%s: host and CUDA rows differ at byte %ld of %zu", what, d, bytes);
    }
    emct_world_check_rows(&p.wd, ranks, offsets, od, wdr, what);
    {
      emc_status cs = emc__cuda_check(p.cd);
      ck_assert_msg(cs == EMC_OK, "%s: emc__cuda_check: %s", what, emc_last_error_detail());
    }
    index_probeable(p.cd, what);
    for (i = 0; i < n; i++) /* absent is absent on both; cache vs store may differ */
      ck_assert_msg((whr[i] == EMC_WHERE_ABSENT) == (wdr[i] == EMC_WHERE_ABSENT),
                    "%s: position %llu: where %u (host) vs %u (CUDA)", what, (unsigned long long)i,
                    whr[i], wdr[i]);
    free(oh);
    free(od);
    free(whr);
    free(wdr);
    if (sc->insert_every && b % sc->insert_every == sc->insert_every - 1) {
      /* insert rows for a fresh batch of ids (duplicates included: the last wins) */
      unsigned char *rows;
      uint64_t k = 0;
      for (t = 0; t < nt; t++) counts[t] = emct_rng_next(&trng) % (sc->per_table + 1);
      n = emct_world_batch(&p.wh, counts, ids, ranks, offsets);
      ck_assert_uint_eq(emct_world_batch(&p.wd, counts, ids2, ranks2, offsets2), n);
      bytes = emct_world_batch_bytes(&p.wh, offsets);
      rows = malloc(bytes + 1);
      for (t = 0; t < nt; t++)
        for (i = offsets[t]; i < offsets[t + 1]; i++, k++)
          emct_pattern_row(t, ids[i], (uint64_t)b * 1000003u + k, p.wh.desc[t].dim,
                           p.wh.desc[t].dtype, rows + emct_pos_offset(&p.wh, offsets, t, i));
      EMCT_OK(emc_insert(p.ch, ids, offsets, rows, NULL));
      if (sc->device_ptrs) {
        void *dids, *drows;
        CUDA_OK(cudaMalloc(&dids, n * 8 + 8));
        CUDA_OK(cudaMalloc(&drows, bytes + 16));
        CUDA_OK(cudaMemcpy(dids, ids, n * 8, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(drows, rows, bytes, cudaMemcpyHostToDevice));
        EMCT_OK(emc_insert(p.cd, dids, offsets, drows, NULL));
        cudaFree(dids);
        cudaFree(drows);
      } else {
        EMCT_OK(emc_insert(p.cd, ids, offsets, rows, NULL));
      }
      emct_world_apply_insert(&p.wh, ranks, offsets, rows);
      emct_world_apply_insert(&p.wd, ranks, offsets, rows);
      free(rows);
    }
    if (b % 17 == 16) {
      EMCT_OK(emc_flush(p.ch, NULL));
      EMCT_OK(emc_flush(p.cd, NULL));
    }
  }
  /* the CUDA cache's counters add up (its admissions done first: they run on its writer
   * stream), the per-table row counts too */
  EMCT_OK(emc_flush(p.cd, NULL));
  EMCT_OK(emc_get_stats(p.ch, &sh));
  EMCT_OK(emc_get_stats(p.cd, &sd));
  {
    uint64_t sum = 0, r;
    uint32_t t;
    for (t = 0; t < nt; t++) {
      EMCT_OK(emc_get_table_rows_cached(p.cd, t, &r));
      sum += r;
    }
    ck_assert_uint_eq(sum, sd.rows_cached);
    EMCT_ST(emc_get_table_rows_cached(p.cd, nt, &r), EMC_ERANGE);
  }
  ck_assert_uint_eq(sd.lookups, sh.lookups);
  ck_assert_uint_eq(sd.hits + sd.misses + sd.absent, sd.lookups);
  ck_assert_uint_eq(sd.absent, sh.absent);
  ck_assert_uint_le(sd.bytes_in_use, sd.capacity_bytes);
  ck_assert_uint_le(sd.bytes_reserved, sd.capacity_bytes + (uint64_t)nt * (256u << 10) + (1u << 20));
  fprintf(stderr,
          "%-28s host: hits %llu misses %llu evictions %llu | cuda: hits %llu misses %llu "
          "admissions %llu skipped %llu evictions %llu passes %llu unified %llu rows %llu\n",
          sc->name, (unsigned long long)sh.hits, (unsigned long long)sh.misses,
          (unsigned long long)sh.evictions, (unsigned long long)sd.hits,
          (unsigned long long)sd.misses, (unsigned long long)sd.admissions,
          (unsigned long long)sd.admit_skipped, (unsigned long long)sd.evictions,
          (unsigned long long)sd.evict_passes, (unsigned long long)sd.unified_hits,
          (unsigned long long)sd.rows_cached);
  if (sh.evictions > 100) /* the host cache had to evict: so must the CUDA cache */
    ck_assert_uint_gt(sd.evictions, 0);
  ck_assert_uint_gt(sd.hits, 0);
  pair_free(&p, sc->name);
  free(counts); free(offsets); free(offsets2); free(ids); free(ranks); free(ids2); free(ranks2);
}

/* dense/hashed, f32/f16, dims 1..512 with odd ones */
static const emct_tspec mixed[] = {
    {EMC_TABLE_DENSE, 20000, 64, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_DENSE, 3000, 7, EMC_DTYPE_F16, 0, 0},
    {EMC_TABLE_HASHED, 8000, 1, EMC_DTYPE_F32, 6000, 4000},
    {EMC_TABLE_HASHED, 5000, 33, EMC_DTYPE_F16, 4000, 3000},
    {EMC_TABLE_DENSE, 2000, 512, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_DENSE, 50, 3, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_DENSE, 100000, 16, EMC_DTYPE_F16, 0, 0},
};
#define N_MIXED (sizeof mixed / sizeof mixed[0])

START_TEST(zipf_heavy_eviction_64) {
  scen s = {"zipf, 64-bit keys, 256 KiB", 1.05, 64, 256u << 10, 300, 40, 5, 0};
  run(mixed, N_MIXED, &s, 11);
}
END_TEST

START_TEST(uniform_32bit_keys) {
  scen s = {"uniform, 32-bit keys, 1 MiB", 0.01, 32, 1u << 20, 300, 30, 4, 0};
  run(mixed, N_MIXED, &s, 12);
}
END_TEST

START_TEST(device_pointers) {
  scen s = {"device ids/out, host offsets", 1.05, 64, 512u << 10, 200, 25, 3, 1};
  scen s2 = {"device ids/out/offsets", 1.2, 32, 2u << 20, 200, 25, 3, 2};
  run(mixed, N_MIXED, &s, 13);
  run(mixed, N_MIXED, &s2, 14);
}
END_TEST

START_TEST(batch_larger_than_cache) {
  scen s = {"batch > cache (64 KiB)", 0.8, 64, 64u << 10, 2000, 12, 3, 0};
  run(mixed, N_MIXED, &s, 15);
}
END_TEST

/* A CUDA cache of `capacity` bytes over w's store, the suites' configuration otherwise. */
static emc_cache *cuda_cache(const emct_world *w, size_t capacity) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = capacity;
  EMCT_OK(emc_cache_create(w->store, &cfg, &c));
  return c;
}

/* Lookups run ahead of the writer stream: a batch's misses looked up again before the writer
 * call that admits them ran are granted slots a second time, and the later writer call finds
 * the ids cached and leaves those slots free. Free slots in a page that is no longer its
 * table's current page must be found again (collected as an eviction pass collects them), or
 * the pool runs out of pages while the rows in use stay far under t1, no pass ever runs, and
 * every later miss is skipped (test_gpu_shared_cache on the CPU model: 805 misses skipped at
 * 51 KiB of a 64 KiB budget, no eviction, every page held). Nor may such slots spread over
 * every page first: a page's free slots serve its own table only, so table 0's run-ahead
 * lookups must leave pages for table 1's rows that come after. */
START_TEST(repeated_misses_waste_no_pages) {
  static const emct_tspec two[] = {{EMC_TABLE_DENSE, 4096, 16, EMC_DTYPE_F32, 0, 0},
                                   {EMC_TABLE_DENSE, 4096, 16, EMC_DTYPE_F32, 0, 0}};
  /* ROUNDS windows of ids per table; 2 * PER * ROUNDS rows in all, 45 KiB (under t2) */
  enum { PER = 24, ROUNDS = 15, WIN = 4, GROUP = 8, ROW = 64, N = 2 * PER * ROUNDS };
  static uint64_t ids[N];
  static unsigned char out[N * ROW];
  static uint8_t where[N];
  emct_world w;
  emc_cache *c;
  emc_stats st;
  uint64_t off[3], *dids, i;
  unsigned char *dout;
  cudaStream_t s;
  uint32_t t;
  int r;
  emct_world_init(&w, two, 2, 0.5, 5);
  c = cuda_cache(&w, 64u << 10);
  CUDA_OK(cudaStreamCreate(&s));
  CUDA_OK(cudaMalloc((void **)&dids, sizeof ids));
  CUDA_OK(cudaMalloc((void **)&dout, WIN * PER * ROW));
  for (i = 0; i < N; i++) ids[i] = (i % (N / 2) * 5) % 4096; /* table 0's, then table 1's */
  CUDA_OK(cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice));
  for (t = 0; t < 2; t++) { /* table 0 first, table 1 after */
    for (r = 0; r < ROUNDS; r++) {
      /* a window of WIN rounds' ids, all but the last round's looked up by the windows
       * before: when an earlier window's writer call admitted those meanwhile, this one's
       * call leaves their granted slots free, and its new ids spill to a new page. No wait
       * between the lookups of a group: their writer calls may all run after them (on a
       * GPU that is up to its timing; the CPU model's concurrent mode does it often) */
      uint64_t n = (uint64_t)(r + WIN <= ROUNDS ? WIN : ROUNDS - r) * PER;
      off[0] = 0, off[1] = t == 0 ? n : 0, off[2] = n;
      EMCT_OK(emc_lookup(c, dids + (uint64_t)t * (N / 2) + (uint64_t)r * PER, off, dout, s));
      if (r % GROUP == GROUP - 1) CUDA_OK(cudaStreamSynchronize(s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
  }
  EMCT_OK(emc_flush(c, NULL));
  EMCT_OK(emc_get_stats(c, &st));
  /* (misses past the distinct ids: repeats looked up before their writer call ran; the CPU
   * model's serial mode runs the writer stream early and has few, its concurrent mode many) */
  fprintf(stderr, "%-28s cuda: misses %llu for %u distinct ids, %llu bytes of pages held\n",
          "repeated misses", (unsigned long long)st.misses, N, (unsigned long long)st.bytes_reserved);
  ck_assert_msg(st.admit_skipped == 0 && st.rows_cached == N,
                "%llu of %u distinct rows cached, %llu misses skipped, with %llu of %llu bytes in "
                "use and %llu bytes of pages held", (unsigned long long)st.rows_cached, N,
                (unsigned long long)st.admit_skipped, (unsigned long long)st.bytes_in_use,
                (unsigned long long)st.capacity_bytes, (unsigned long long)st.bytes_reserved);
  ck_assert_uint_eq(st.evictions, 0);
  off[0] = 0, off[1] = N / 2, off[2] = N; /* every row now a hit, and right */
  EMCT_OK(emc_lookup_ex(c, ids, off, out, where, NULL));
  for (i = 0; i < N; i++) {
    ck_assert_msg(where[i] == EMC_WHERE_CACHE, "table %u id %llu: where %u", (unsigned)(i >= N / 2),
                  (unsigned long long)ids[i], where[i]);
    ck_assert(memcmp(out + i * ROW, w.ref[i >= N / 2] + ids[i] * ROW, ROW) == 0);
  }
  EMCT_OK(emc__cuda_check(c));
  CUDA_OK(cudaFree(dids));
  CUDA_OK(cudaFree(dout));
  CUDA_OK(cudaStreamDestroy(s));
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

/* A page belongs to one table until it is empty: after passes under table 0's uniform load
 * every page it holds has free slots, and table 1's later load found no page, under t1, with
 * no pass to run (the host backend's twin: cache_edges.c). A plan that runs out of pages makes
 * the next writer call take pages back (evict.cu, reclaim), a few each call, so table 1's
 * working set is all cached after some repeats. */
START_TEST(a_table_without_pages_takes_one_back) {
  static const emct_tspec spec[2] = {{EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0},
                                     {EMC_TABLE_DENSE, 20000, 16, EMC_DTYPE_F32, 0, 0}};
  enum { A_BATCH = 100, B_ROWS = 250, B_REPS = 12, ROW = 64 };
  static uint64_t ids[B_ROWS];
  static unsigned char out[B_ROWS * ROW];
  static uint8_t where[B_ROWS];
  const int a_batches = quick ? 100 : 300;
  emct_world w;
  emct_rng rng;
  emc_cache *c;
  emc_stats st;
  uint64_t offs[3], i, skipped = 0;
  int b;
  emct_world_init(&w, spec, 2, 1.0, 91);
  c = cuda_cache(&w, 64u << 10);
  emct_rng_seed(&rng, 7);
  for (b = 0; b < a_batches; b++) {
    for (i = 0; i < A_BATCH; i++) ids[i] = emct_rng_below(&rng, 20000);
    offs[0] = 0, offs[1] = A_BATCH, offs[2] = A_BATCH;
    EMCT_OK(emc_lookup(c, ids, offs, out, NULL));
  }
  EMCT_OK(emc_flush(c, NULL));
  ck_assert_uint_gt(get_stats(c).evictions, 0);
  for (b = 0; b < B_REPS; b++) {
    for (i = 0; i < B_ROWS; i++) ids[i] = i;
    offs[0] = 0, offs[1] = 0, offs[2] = B_ROWS;
    EMCT_OK(emc_lookup_ex(c, ids, offs, out, where, NULL));
    for (i = 0; i < B_ROWS; i++)
      ck_assert(memcmp(out + i * ROW, w.ref[1] + i * ROW, ROW) == 0);
    EMCT_OK(emc_flush(c, NULL)); /* (the admissions done: the next repeat sees them) */
    st = get_stats(c);
    if (b >= B_REPS - 2) {
      for (i = 0; i < B_ROWS; i++)
        ck_assert_msg(where[i] == EMC_WHERE_CACHE, "repeat %d: table 1 row %llu missed (%llu of "
                      "%llu bytes in use, %llu bytes of pages held, %llu misses skipped)", b,
                      (unsigned long long)i, (unsigned long long)st.bytes_in_use,
                      (unsigned long long)st.capacity_bytes, (unsigned long long)st.bytes_reserved,
                      (unsigned long long)st.admit_skipped);
      if (b == B_REPS - 1) ck_assert_uint_eq(st.admit_skipped, skipped);
    }
    skipped = st.admit_skipped;
  }
  EMCT_OK(emc__cuda_check(c));
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "after pages were taken back");
  emct_world_free(&w);
}
END_TEST

/* Near-uniform ids over large tables through a small cache: nearly every lookup misses, each
 * writer call evicts what the last one admitted, and the index fills with tombstones unless the
 * re-pack keeps up (index_probeable, after every lookup). */
START_TEST(miss_churn_keeps_index_probeable) {
  static const emct_tspec churn[] = {
      {EMC_TABLE_DENSE, 400000, 8, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_DENSE, 200000, 16, EMC_DTYPE_F16, 0, 0},
  };
  scen s = {"miss churn (128 KiB)", 0.01, 32, 128u << 10, 1500, 60, 0, 0};
  run(churn, 2, &s, 17);
}
END_TEST

START_TEST(large_cache_no_eviction) {
  scen s = {"large cache (16 MiB)", 1.05, 64, 16u << 20, 400, 20, 4, 0};
  run(mixed, N_MIXED, &s, 16);
}
END_TEST

START_TEST(random_shapes) {
  /* random table shapes, dims 1..512, both dtypes and kinds */
  int r;
  for (r = 0; r < (quick ? 2 : 6); r++) {
    emct_tspec sp[6];
    uint32_t nt = 1 + (uint32_t)(emct_rng_next(&trng) % 6), t;
    scen s = {"random shapes", 0.6 + (double)(emct_rng_next(&trng) % 80) / 100.0,
              r % 2 ? 32u : 64u, (size_t)(64u << 10) << (emct_rng_next(&trng) % 5), 150, 15, 4, r % 3};
    for (t = 0; t < nt; t++) {
      uint64_t rows = 16 + emct_rng_next(&trng) % 20000;
      sp[t].kind = emct_rng_next(&trng) % 3 == 0 ? EMC_TABLE_HASHED : EMC_TABLE_DENSE;
      sp[t].rows = rows;
      sp[t].dim = 1 + (uint32_t)(emct_rng_next(&trng) % 512);
      sp[t].dtype = emct_rng_next(&trng) % 2 ? EMC_DTYPE_F16 : EMC_DTYPE_F32;
      sp[t].universe = sp[t].kind == EMC_TABLE_HASHED ? rows : 0;
      sp[t].present = sp[t].kind == EMC_TABLE_HASHED ? rows / 2 : 0;
    }
    run(sp, nt, &s, 100 + (uint64_t)r);
  }
}
END_TEST

/* ---------------------------------------------------------------- concurrency */
typedef struct lookup_thread {
  emct_world *w;       /* reference (read-only: tables 0 and 1 are never inserted) */
  emc_cache *c;
  cudaStream_t stream;
  uint64_t seed;
  int iters, failed;
  char msg[256];
} lookup_thread;

static void *lookup_main(void *arg) {
  lookup_thread *L = arg;
  emct_rng r;
  uint32_t nt = L->w->n, t;
  uint64_t n = 0, *ids = malloc(4096 * 8), *ranks = malloc(4096 * 8), offsets[8] = {0};
  void *dids = NULL, *dout = NULL;
  unsigned char *out = malloc(4096 * 2048);
  int it;
  emct_rng_seed(&r, L->seed);
  if (cudaMalloc(&dids, 4096 * 8) != cudaSuccess || cudaMalloc(&dout, 4096 * 2048) != cudaSuccess) {
    snprintf(L->msg, sizeof L->msg, "cudaMalloc failed");
    L->failed = 1;
    return NULL;
  }
  for (it = 0; it < L->iters && !L->failed; it++) {
    size_t bytes = 0;
    uint64_t i;
    n = 0;
    for (t = 0; t < nt; t++) {
      uint64_t cnt = t < 2 ? 1 + emct_rng_next(&r) % 600 : 0;
      for (i = 0; i < cnt; i++, n++) {
        ranks[n] = emct_rng_next(&r) % L->w->spec[t].rows;
        ids[n] = emct_id_of(L->w, t, ranks[n]);
      }
      offsets[t + 1] = n;
      bytes += cnt * L->w->row_bytes[t];
    }
    if (cudaMemcpyAsync(dids, ids, n * 8, cudaMemcpyHostToDevice, L->stream) != cudaSuccess ||
        emc_lookup(L->c, dids, offsets, dout, L->stream) != EMC_OK ||
        cudaMemcpyAsync(out, dout, bytes, cudaMemcpyDeviceToHost, L->stream) != cudaSuccess ||
        cudaStreamSynchronize(L->stream) != cudaSuccess) {
      snprintf(L->msg, sizeof L->msg, "iteration %d: %s", it, emc_last_error_detail());
      L->failed = 1;
      break;
    }
    {
      const unsigned char *o = out;
      for (t = 0; t < nt && !L->failed; t++)
        for (i = offsets[t]; i < offsets[t + 1]; i++, o += L->w->row_bytes[t])
          if (memcmp(o, L->w->ref[t] + ranks[i] * L->w->row_bytes[t], L->w->row_bytes[t]) != 0) {
            snprintf(L->msg, sizeof L->msg, "iteration %d: table %u rank %llu: wrong row", it, t,
                     (unsigned long long)ranks[i]);
            L->failed = 1;
            break;
          }
    }
  }
  cudaFree(dids);
  cudaFree(dout);
  free(ids);
  free(ranks);
  free(out);
  return NULL;
}

START_TEST(two_streams_and_an_inserter) {
  static const emct_tspec sp[3] = {
      {EMC_TABLE_DENSE, 30000, 32, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_HASHED, 20000, 9, EMC_DTYPE_F16, 20000, 20000},
      {EMC_TABLE_DENSE, 10000, 64, EMC_DTYPE_F32, 0, 0},
  };
  emct_world w;
  emc_cache *c;
  emc_cache_config cfg;
  lookup_thread L[2];
  pthread_t th[2];
  int i, k;
  emct_world_init(&w, sp, 3, 1.0, 21);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 512u << 10; /* evicting all along */
  EMCT_OK(emc_cache_create(w.store, &cfg, &c));
  for (i = 0; i < 2; i++) {
    memset(&L[i], 0, sizeof L[i]);
    L[i].w = &w;
    L[i].c = c;
    L[i].seed = 1000 + (uint64_t)i;
    L[i].iters = quick ? 30 : 150;
    CUDA_OK(cudaStreamCreateWithFlags(&L[i].stream, cudaStreamNonBlocking));
    ck_assert_int_eq(pthread_create(&th[i], NULL, lookup_main, &L[i]), 0);
  }
  /* this thread inserts into table 2 meanwhile (host pointers) */
  for (k = 0; k < (quick ? 20 : 100); k++) {
    uint64_t ids[256], ranks[256], offsets[4] = {0, 0, 0, 256};
    unsigned char rows[256 * 256];
    int j;
    for (j = 0; j < 256; j++) {
      ranks[j] = emct_rng_next(&trng) % 10000;
      ids[j] = ranks[j];
      emct_pattern_row(2, ids[j], (uint64_t)k * 256 + (uint64_t)j, 64, EMC_DTYPE_F32, rows + j * 256);
    }
    EMCT_OK(emc_insert(c, ids, offsets, rows, NULL));
    emct_world_apply_insert(&w, ranks, offsets, rows);
  }
  for (i = 0; i < 2; i++) {
    ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    ck_assert_msg(!L[i].failed, "lookup thread %d: %s", i, L[i].msg);
    CUDA_OK(cudaStreamDestroy(L[i].stream));
  }
  EMCT_OK(emc__cuda_check(c));
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "two streams and an inserter");
  emct_world_free(&w);
}
END_TEST

/* A hashed row evicted from the cache keeps a unified-index entry to its store row; the next
 * lookup of it is served through that entry (a miss, where STORE) and admits it again, so the
 * lookup after that is a hit. Both backends, the same steps (pre-flight defect 6: the CUDA
 * lookup recorded only plain misses for admission, so such rows were never cached again). */
START_TEST(unified_rows_readmitted) {
  enum { N = 6000, B = 200, Q = 100 };
  static const emct_tspec sp[] = {{EMC_TABLE_HASHED, 8000, 16, EMC_DTYPE_F32, N, N}};
  emct_world w[2];
  emc_cache *c[2];
  emc_cache_config cfg;
  uint64_t *ids = malloc(N * 8), *ranks = malloc(N * 8), offsets[2], i;
  unsigned char *out = malloc((size_t)B * 64);
  uint8_t where[B], where2[B];
  emc_stats a, b;
  int k;
  ck_assert(ids && ranks && out);
  emct_cache_config_init(&cfg);
  cfg.capacity_bytes = 64u << 10; /* about 1,000 rows of 64 bytes: most of the 6,000 go */
  cfg.unified_index_rows = 16384;
  for (k = 0; k < 2; k++) {
    emct_world_init(&w[k], sp, 1, 1.0, 77);
    cfg.backend = k ? EMC_BACKEND_CUDA : EMC_BACKEND_HOST;
    EMCT_OK(emc_cache_create(w[k].store, &cfg, &c[k]));
    for (i = 0; i < N; i++) {
      ranks[i] = i;
      ids[i] = emct_id_of(&w[k], 0, i);
    }
    /* every row once, B at a time: the early ones are evicted to unified entries */
    for (i = 0; i < N; i += B) {
      offsets[0] = 0;
      offsets[1] = B;
      EMCT_OK(emc_lookup_ex(c[k], ids + i, offsets, out, where, NULL));
      emct_world_check_rows(&w[k], ranks + i, offsets, out, where, "unified: fill");
      EMCT_OK(emc_flush(c[k], NULL));
    }
    /* the first Q rows again: through their unified entries, then admitted */
    offsets[1] = Q;
    EMCT_OK(emc_get_stats(c[k], &a));
    EMCT_OK(emc_lookup_ex(c[k], ids, offsets, out, where, NULL));
    emct_world_check_rows(&w[k], ranks, offsets, out, where, "unified: again");
    EMCT_OK(emc_flush(c[k], NULL));
    EMCT_OK(emc_get_stats(c[k], &b));
    ck_assert_msg(b.unified_hits - a.unified_hits >= Q / 2,
                  "%s: %llu of %d evicted rows came back through a unified entry", k ? "cuda" : "host",
                  (unsigned long long)(b.unified_hits - a.unified_hits), Q);
    EMCT_OK(emc_lookup_ex(c[k], ids, offsets, out, where2, NULL));
    emct_world_check_rows(&w[k], ranks, offsets, out, where2, "unified: admitted");
    for (i = 0; i < Q; i++)
      ck_assert_msg(where2[i] == EMC_WHERE_CACHE,
                    "%s: position %llu: where %u after a lookup through its unified entry (then %u)",
                    k ? "cuda" : "host", (unsigned long long)i, where2[i], where[i]);
    if (k) {
      emc_status cs = emc__cuda_check(c[k]);
      ck_assert_msg(cs == EMC_OK, "unified: emc__cuda_check: %s", emc_last_error_detail());
    }
    EMCT_OK(emc_cache_destroy(c[k]));
    emct_world_check_store(&w[k], "unified");
    emct_world_free(&w[k]);
  }
  free(ids); free(ranks); free(out);
}
END_TEST

/* ---------------------------------------------------------------- errors */
/* Many small stores, a CUDA cache on each, all alive at once: each cache registers its
 * store's blocks with the device, which pins whole pages, so blocks of two stores must never
 * share a page (pre-flight defect 10: the second cache failed with
 * cudaErrorHostMemoryAlreadyRegistered). */
START_TEST(many_small_stores_at_once) {
  enum { NS = 8 };
  static const emct_tspec tiny[] = {{EMC_TABLE_DENSE, 10, 4, EMC_DTYPE_F32, 0, 0},
                                    {EMC_TABLE_HASHED, 16, 3, EMC_DTYPE_F16, 12, 8}};
  emct_world w[NS];
  emc_cache *c[NS];
  emc_cache_config cfg;
  int i;
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 64u << 10;
  for (i = 0; i < NS; i++) {
    emct_world_init(&w[i], tiny, 2, 1.0, 300 + (uint64_t)i);
    EMCT_OK(emc_cache_create(w[i].store, &cfg, &c[i]));
  }
  for (i = 0; i < NS; i++) {
    uint64_t cnt[2] = {8, 8}, ids[16], ranks[16], offsets[3];
    unsigned char out[16 * 16];
    uint8_t where[16];
    emct_world_batch(&w[i], cnt, ids, ranks, offsets);
    EMCT_OK(emc_lookup_ex(c[i], ids, offsets, out, where, NULL));
    emct_world_check_rows(&w[i], ranks, offsets, out, where, "small store");
  }
  for (i = 0; i < NS; i++) {
    EMCT_OK(emc_cache_destroy(c[i]));
    emct_world_check_store(&w[i], "small store");
    emct_world_free(&w[i]);
  }
}
END_TEST

START_TEST(bad_ids_and_budgets) {
  static const emct_tspec sp[2] = {
      {EMC_TABLE_DENSE, 1000, 8, EMC_DTYPE_F32, 0, 0},
      {EMC_TABLE_HASHED, 100, 4, EMC_DTYPE_F16, 100, 50},
  };
  emct_world w;
  emc_cache *c = NULL, *c2 = (emc_cache *)0x1;
  emc_cache_config cfg;
  uint64_t ids[3] = {5, 1000, 7}, offsets[3] = {0, 3, 3};
  unsigned char out[3 * 32], *dout;
  uint64_t *dids;
  size_t free_b = 0, total_b = 0;
  emc_stats s0, s1;
  emct_world_init(&w, sp, 2, 1.0, 31);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  /* a budget above the device's memory is refused at create */
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  cfg.capacity_bytes = total_b + ((size_t)1 << 30);
  EMCT_ST(emc_cache_create(w.store, &cfg, &c2), EMC_EDEVMEM);
  ck_assert_ptr_eq(c2, (emc_cache *)0x1);
  cfg.capacity_bytes = 1u << 20;
  EMCT_OK(emc_cache_create(w.store, &cfg, &c));
  /* host ids: checked before anything changes */
  EMCT_OK(emc_get_stats(c, &s0));
  EMCT_ST(emc_lookup(c, ids, offsets, out, NULL), EMC_ERANGE);
  EMCT_ST(emc_insert(c, ids, offsets, out, NULL), EMC_ERANGE);
  EMCT_OK(emc_get_stats(c, &s1));
  ck_assert_uint_eq(s1.lookups, s0.lookups);
  ck_assert_uint_eq(s1.inserts, s0.inserts);
  { /* a training call from host buffers: the device's verdict comes back before it returns */
    float grads[3 * 8] = {1.0f};
    emc_optimizer opt;
    emc_optimizer_init(&opt);
    EMCT_ST(emc_apply_gradients(c, ids, offsets, grads, &opt, NULL), EMC_ERANGE);
    ck_assert_msg(strstr(emc_last_error_detail(), "1000") != NULL, "detail: %s", emc_last_error_detail());
    EMCT_ST(emc_prefetch(c, ids, offsets, NULL), EMC_ERANGE);
    EMCT_OK(emc_flush(c, NULL)); /* reported by the calls themselves, not again */
    EMCT_OK(emc_get_stats(c, &s1));
    ck_assert_uint_eq(s1.dirty_rows, 0);
    ck_assert_uint_eq(s1.pinned_rows, 0);
  }
  /* device ids: the bad position reads zero, and the next flush reports it */
  CUDA_OK(cudaMalloc((void **)&dids, sizeof ids));
  CUDA_OK(cudaMalloc((void **)&dout, sizeof out));
  CUDA_OK(cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice));
  EMCT_OK(emc_lookup(c, dids, offsets, dout, NULL));
  CUDA_OK(cudaMemcpy(out, dout, 3 * 32, cudaMemcpyDeviceToHost));
  {
    static const unsigned char zero[32];
    ck_assert(memcmp(out + 32, zero, 32) == 0);
    ck_assert(memcmp(out, w.ref[0] + 5 * 32, 32) == 0);
    ck_assert(memcmp(out + 64, w.ref[0] + 7 * 32, 32) == 0);
  }
  EMCT_ST(emc_flush(c, NULL), EMC_ERANGE);
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "id 1000"));
  EMCT_OK(emc_flush(c, NULL)); /* reported once */
  /* NULL arguments */
  EMCT_ST(emc_lookup(c, NULL, offsets, dout, NULL), EMC_EINVAL);
  EMCT_ST(emc_lookup(c, dids, NULL, dout, NULL), EMC_EINVAL);
  EMCT_ST(emc_lookup(c, dids, offsets, NULL, NULL), EMC_EINVAL);
  {
    uint64_t bad_off[3] = {0, 3, 2};
    EMCT_ST(emc_lookup(c, dids, bad_off, dout, NULL), EMC_EINVAL);
  }
  /* a batch whose scratch cannot fit the device: EMC_EDEVMEM, nothing launched, and the cache
   * still serves the next call (not in quick mode: compute-sanitizer reports the deliberately
   * failing cudaMallocAsync as an error) */
  if (!memcheck) {
    uint64_t huge[3] = {0, 1ull << 31, 1ull << 31};
    EMCT_ST(emc_lookup(c, dids, huge, dout, NULL), EMC_EDEVMEM);
    ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "cudaMalloc"));
    ids[1] = 999;
    EMCT_OK(emc_lookup(c, ids, offsets, out, NULL));
    ck_assert(memcmp(out + 32, w.ref[0] + 999 * 32, 32) == 0);
    EMCT_OK(emc__cuda_check(c));
  }
  cudaFree(dids);
  cudaFree(dout);
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "bad ids");
  emct_world_free(&w);
}
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_cache")) return 77;
  emct_rng_seed(&trng, 42);
  quick = emct_gpu_quick();
  memcheck = getenv("EMC_TEST_QUICK") && getenv("EMC_TEST_QUICK")[0] == '1';
  s = suite_create("gpu_cache");
  tc = tcase_create("twin");
  tcase_add_test(tc, zipf_heavy_eviction_64);
  tcase_add_test(tc, uniform_32bit_keys);
  tcase_add_test(tc, device_pointers);
  tcase_add_test(tc, batch_larger_than_cache);
  tcase_add_test(tc, miss_churn_keeps_index_probeable);
  tcase_add_test(tc, repeated_misses_waste_no_pages);
  tcase_add_test(tc, a_table_without_pages_takes_one_back);
  tcase_add_test(tc, large_cache_no_eviction);
  tcase_add_test(tc, random_shapes);
  tcase_add_test(tc, two_streams_and_an_inserter);
  tcase_add_test(tc, unified_rows_readmitted);
  tcase_add_test(tc, many_small_stores_at_once);
  tcase_add_test(tc, bad_ids_and_budgets);
  tcase_set_timeout(tc, emct_timeout(600));
  suite_add_tcase(s, tc);
  return emct_run_nofork(s);
}
