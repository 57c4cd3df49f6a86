/*
 * test_gpu_alloc_fail: the CUDA backend running out of memory (device and host) at every point
 * of a scenario: cache create, lookups under constant eviction, inserts (new hashed ids too),
 * prefetches, dedups, flush, destroy, from host buffers (staged) and device buffers.
 *
 * lib/alloc.c's failure-injection hook also guards the CUDA backend's cudaMalloc,
 * cudaMallocAsync, cudaHostAlloc and cudaHostRegister (cuda/cache_cuda.h, emc__cu_*): a
 * counting run numbers every failure point of the scenario, host and device; then the
 * scenario runs once per point with that point failing. For every run: a call that fails
 * returns EMC_ENOMEM or EMC_EDEVMEM with a fresh detail, its outputs are untouched, the device
 * structures pass emc__cuda_check, the call then succeeds when repeated, and at the end the
 * store equals the reference: no data lost. Exits 77 where no device answers; Check runs
 * without fork (CUDA does not survive fork).
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "emc_cuda.h"

#include "cuda_ok.h"

static const char k_marker[] = "emc_store_table: s or out is NULL";

static void mark_detail(void) {
  ck_assert(emc_store_table(NULL, 0, NULL) == EMC_EINVAL);
}

typedef struct run {
  long long point;
  int failures;
  const char *step;
} run;

/* 0 when st is EMC_OK; 1 after checking a failure (an injected one, documented, detailed). */
static int failed(run *R, emc_status st) {
  size_t bytes = 0;
  const char *kind = emc__inject_last(&bytes);
  if (st == EMC_OK) return 0;
  ck_assert_msg(emc__inject_failed() > 0, "point %lld: %s returned %s with nothing injected (%s)",
                R->point, R->step, emc_status_name(st), emc_last_error_detail());
  ck_assert_msg(st == EMC_ENOMEM || st == EMC_EDEVMEM,
                "point %lld (%s of %zu bytes): %s returned %s (%s)", R->point, kind ? kind : "?",
                bytes, R->step, emc_status_name(st), emc_last_error_detail());
  ck_assert_msg(strncmp(emc_last_error_detail(), k_marker, sizeof k_marker - 1) != 0,
                "point %lld: %s failed without a detail of its own", R->point, R->step);
  R->failures++;
  return 1;
}

static const emct_tspec k_spec[2] = {
    {EMC_TABLE_DENSE, 3000, 16, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_HASHED, 2000, 8, EMC_DTYPE_F16, 1500, 800},
};

#define PER_T 96
#define ROUNDS (emct_gpu_quick() ? 3 : 9) /* the model: fewer rounds, every kind of call still */

/* The scenario, its failure points armed (fail_at: emc__inject_arm's; -1 counts them) once
 * its world and buffers exist. Returns the number of points it passed. */
static long long scenario(run *R, int device_bufs, long long fail_at) {
  emct_world w;
  emc_cache_config cfg;
  emc_cache *c = (emc_cache *)(uintptr_t)0x77;
  uint64_t ids[2 * PER_T], ranks[2 * PER_T], offsets[3], counts[2] = {PER_T, PER_T};
  uint64_t uids[2 * PER_T], uoffs[3];
  uint32_t inv[2 * PER_T];
  unsigned char *out, *rows;
  uint64_t *d_ids = NULL;
  unsigned char *d_out = NULL;
  size_t bytes;
  long long points;
  int k, j;
  emct_world_init(&w, k_spec, 2, 1.05, 91);
  out = malloc(2 * PER_T * 64 + 16);
  rows = malloc(2 * PER_T * 64 + 16);
  ck_assert(out && rows);
  if (device_bufs) {
    CUDA_OK(cudaMalloc((void **)&d_ids, sizeof ids));
    CUDA_OK(cudaMalloc((void **)&d_out, 2 * PER_T * 64 + 16));
  }
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 48u << 10; /* a few hundred rows: eviction all along */
  emc__inject_arm(fail_at, 0, 0);
  R->step = "emc_cache_create";
  for (;;) {
    mark_detail();
    if (!failed(R, emc_cache_create(w.store, &cfg, &c))) break;
    ck_assert_msg(c == (emc_cache *)(uintptr_t)0x77, "point %lld: a failed create wrote *out",
                  R->point);
  }
  for (k = 0; k < ROUNDS; k++) {
    emct_world_batch(&w, counts, ids, ranks, offsets);
    bytes = emct_world_batch_bytes(&w, offsets);
    R->step = "emc_lookup";
    for (;;) {
      emc_status st;
      memset(out, 0xA5, bytes + 16);
      mark_detail();
      if (device_bufs) {
        CUDA_OK(cudaMemcpy(d_ids, ids, sizeof ids, cudaMemcpyHostToDevice));
        st = emc_lookup(c, d_ids, offsets, d_out, NULL);
        if (st == EMC_OK) CUDA_OK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));
      } else {
        st = emc_lookup(c, ids, offsets, out, NULL);
      }
      if (!failed(R, st)) break;
      if (!device_bufs)
        for (j = 0; j < (int)bytes; j++)
          ck_assert_msg(out[j] == 0xA5, "point %lld: a failed lookup wrote out", R->point);
      EMCT_OK(emc__cuda_check(c));
    }
    emct_world_check_rows(&w, ranks, offsets, out, NULL, "lookup");
    if (k % 3 == 1) { /* inserts of hashed ids below the capacity: new ones included */
      for (j = 0; j < (int)offsets[2]; j++)
        emct_pattern_row(j < (int)offsets[1] ? 0 : 1, ids[j], (uint64_t)k * 1000 + (uint64_t)j,
                         k_spec[j < (int)offsets[1] ? 0 : 1].dim, k_spec[j < (int)offsets[1] ? 0 : 1].dtype,
                         rows + emct_pos_offset(&w, offsets, j < (int)offsets[1] ? 0 : 1, (uint64_t)j));
      R->step = "emc_insert";
      for (;;) {
        mark_detail();
        if (!failed(R, emc_insert(c, ids, offsets, rows, NULL))) break;
        EMCT_OK(emc__cuda_check(c));
      }
      emct_world_apply_insert(&w, ranks, offsets, rows);
    }
    if (k % 3 == 2) {
      emc_status st;
      R->step = "emc_prefetch";
      for (;;) {
        mark_detail();
        st = emc_prefetch(c, ids, offsets, NULL);
        if (st == EMC_ECAPACITY || !failed(R, st)) break;
        EMCT_OK(emc__cuda_check(c));
      }
      R->step = "emc_dedup";
      for (;;) {
        memset(uoffs, 0xA5, sizeof uoffs);
        mark_detail();
        if (!failed(R, emc_dedup(c, ids, offsets, uids, uoffs, inv, NULL))) break;
        ck_assert_msg(uoffs[0] == 0xA5A5A5A5A5A5A5A5ull, "point %lld: a failed dedup wrote", R->point);
      }
      for (j = 0; j < (int)offsets[2]; j++)
        ck_assert_msg(uids[inv[j]] == ids[j], "point %lld: dedup inverse", R->point);
    }
  }
  R->step = "emc_flush";
  for (;;) {
    mark_detail();
    if (!failed(R, emc_flush(c, NULL))) break;
  }
  EMCT_OK(emc__cuda_check(c));
  R->step = "emc_cache_destroy";
  for (;;) {
    mark_detail();
    if (!failed(R, emc_cache_destroy(c))) break;
  }
  points = emc__inject_disarm();
  emct_world_check_store(&w, "after destroy"); /* no data lost */
  emct_world_free(&w);
  cudaFree(d_ids);
  cudaFree(d_out);
  free(out);
  free(rows);
  return points;
}

static void sweep(int device_bufs) {
  run R;
  long long n, p;
  memset(&R, 0, sizeof R);
  R.point = -1;
  n = scenario(&R, device_bufs, -1);
  ck_assert_msg(n > 10, "the scenario passed only %lld failure points", n);
  for (p = 0; p < n; p++) {
    R.point = p;
    scenario(&R, device_bufs, p);
  }
  printf("test_gpu_alloc_fail (%s buffers): %lld failure points, %d failing calls\n",
         device_bufs ? "device" : "host", n, R.failures);
}

START_TEST(host_buffers) { sweep(0); }
END_TEST

START_TEST(device_buffers) { sweep(1); }
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_alloc_fail")) return 77;
  s = suite_create("gpu_alloc_fail");
  tc = tcase_create("sweep");
  tcase_add_test(tc, host_buffers);
  tcase_add_test(tc, device_buffers);
  tcase_set_timeout(tc, 900);
  suite_add_tcase(s, tc);
  return emct_run_nofork(s);
}
