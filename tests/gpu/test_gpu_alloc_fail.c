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
 * store equals the reference: no data lost.
 *
 * Then the same sweep over the kernel and graph launches of the scenario with host buffers,
 * and one over a burst of calls with device buffers that never waits
 * (emc__inject_launches_arm): a launch refused after other work of the same call was
 * enqueued (copies, the lookup kernel, the first stages of a writer call) must give EMC_ECUDA,
 * leave its scratch slot unused until that work is done (the model runs work lazily, so a slot
 * refilled or freed early gives wrong rows or a fault), leave no writer section open (one
 * whose k_wr_end failed is closed by the next call) and nothing held: the repeated call
 * succeeds and the store ends equal to the reference. Exits 77 where no device answers; Check
 * runs without fork (CUDA does not survive fork).
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
  int launches; /* 1: the points are kernel launches (emc__inject_launches_arm) */
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
  if (R->launches)
    ck_assert_msg(st == EMC_ECUDA, "launch %lld (%s): %s returned %s (%s)", R->point, kind ? kind : "?",
                  R->step, emc_status_name(st), emc_last_error_detail());
  else
    ck_assert_msg(st == EMC_ENOMEM || st == EMC_EDEVMEM,
                "point %lld (%s of %zu bytes): %s returned %s (%s)", R->point, kind ? kind : "?",
                bytes, R->step, emc_status_name(st), emc_last_error_detail());
  ck_assert_msg(strncmp(emc_last_error_detail(), k_marker, sizeof k_marker - 1) != 0,
                "point %lld: %s failed without a detail of its own", R->point, R->step);
  R->failures++;
  return 1;
}

/* The device structures after a failed call: sound (emc__cuda_check). */
static void check_after(const run *R, emc_cache *c) {
  emc_status st = emc__cuda_check(c);
  const char *kind = emc__inject_last(NULL);
  ck_assert_msg(st == EMC_OK, "%s %lld (%s) failing %s: emc__cuda_check returned %s (%s)",
                R->launches ? "launch" : "point", R->point, kind ? kind : "?", R->step,
                emc_status_name(st), emc_last_error_detail());
}

static const emct_tspec k_spec[2] = {
    {EMC_TABLE_DENSE, 3000, 16, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_HASHED, 2000, 8, EMC_DTYPE_F16, 1500, 800},
};

#define PER_T 96
#define ROUNDS (emct_gpu_quick() ? 3 : 9) /* the model: fewer rounds, every kind of call still */

/* Pattern rows for an insert of the batch (ids, offsets), tagged tag + position. */
static void insert_rows(const emct_world *w, const uint64_t *ids, const uint64_t *offsets, uint64_t tag,
                        unsigned char *rows) {
  for (uint64_t j = 0; j < offsets[2]; j++) {
    uint32_t t = j < offsets[1] ? 0 : 1;
    emct_pattern_row(t, ids[j], tag + j, k_spec[t].dim, k_spec[t].dtype, rows + emct_pos_offset(w, offsets, t, j));
  }
}

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
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 48u << 10; /* a few hundred rows: eviction all along */
  if (R->launches)
    emc__inject_launches_arm(fail_at);
  else
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
      check_after(R, c);
    }
    emct_world_check_rows(&w, ranks, offsets, out, NULL, "lookup");
    if (k % 3 == 1) { /* inserts of hashed ids below the capacity: new ones included */
      insert_rows(&w, ids, offsets, (uint64_t)k * 1000, rows);
      R->step = "emc_insert";
      for (;;) {
        mark_detail();
        if (!failed(R, emc_insert(c, ids, offsets, rows, NULL))) break;
        check_after(R, c);
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
        check_after(R, c);
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
    check_after(R, c);
  }
  EMCT_OK(emc__cuda_check(c));
  R->step = "emc_cache_destroy";
  for (;;) {
    mark_detail();
    if (!failed(R, emc_cache_destroy(c))) break;
  }
  points = R->launches ? emc__inject_launches_disarm() : emc__inject_disarm();
  emct_world_check_store(&w, "after destroy"); /* no data lost */
  emct_world_free(&w);
  cudaFree(d_ids);
  cudaFree(d_out);
  free(out);
  free(rows);
  return points;
}

/* A burst of calls with device buffers and no synchronization between them (lookups, a
 * prefetch, an insert), one launch of the burst failing: the failed call's slot still has work
 * in flight (its lookup kernel, the first stages of its writer call) while the next calls take
 * slots. A slot refilled or freed before that work is done shows as wrong rows or, under ASan,
 * as a use of freed memory. Returns the launches the burst made. */
#define BURST 6
static long long burst(run *R, long long fail_at) {
  const size_t stride = 2 * PER_T * 64 + 16;
  emct_world w;
  emc_cache *c = NULL;
  emc_cache_config cfg;
  uint64_t ids[BURST][2 * PER_T], ranks[BURST][2 * PER_T], offsets[BURST][3], counts[2] = {PER_T, PER_T};
  uint64_t *d_ids = NULL;
  unsigned char *d_out = NULL, *d_rows = NULL, *out = malloc(stride), *rows = malloc(stride);
  long long points;
  int b;
  ck_assert(out && rows);
  emct_world_init(&w, k_spec, 2, 1.05, 93);
  CUDA_OK(cudaMalloc((void **)&d_ids, sizeof ids));
  CUDA_OK(cudaMalloc((void **)&d_out, BURST * stride));
  CUDA_OK(cudaMalloc((void **)&d_rows, stride));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 48u << 10;
  cfg.prefetch_depth = 2;
  EMCT_OK(emc_cache_create(w.store, &cfg, &c));
  for (b = 0; b < BURST; b++) emct_world_batch(&w, counts, ids[b], ranks[b], offsets[b]);
  insert_rows(&w, ids[0], offsets[0], 7000, rows);
  CUDA_OK(cudaMemcpy(d_ids, ids, sizeof ids, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_rows, rows, stride, cudaMemcpyHostToDevice));
  emc__inject_launches_arm(fail_at);
  for (b = 0; b < BURST; b++) {
    R->step = "emc_lookup (burst)";
    for (;;) {
      mark_detail();
      if (!failed(R, emc_lookup(c, d_ids + (size_t)b * 2 * PER_T, offsets[b], d_out + (size_t)b * stride, NULL)))
        break;
    }
    if (b == 2) {
      emc_status st;
      R->step = "emc_prefetch (burst)";
      for (;;) {
        mark_detail();
        st = emc_prefetch(c, d_ids + (size_t)3 * 2 * PER_T, offsets[3], NULL);
        if (!failed(R, st)) break;
      }
    }
  }
  R->step = "emc_insert (burst)";
  for (;;) {
    mark_detail();
    if (!failed(R, emc_insert(c, d_ids, offsets[0], d_rows, NULL))) break;
  }
  points = emc__inject_launches_disarm();
  CUDA_OK(cudaDeviceSynchronize());
  for (b = 0; b < BURST; b++) { /* every lookup ran before the insert */
    CUDA_OK(cudaMemcpy(out, d_out + (size_t)b * stride, emct_world_batch_bytes(&w, offsets[b]),
                       cudaMemcpyDeviceToHost));
    emct_world_check_rows(&w, ranks[b], offsets[b], out, NULL, "burst lookup");
  }
  emct_world_apply_insert(&w, ranks[0], offsets[0], rows);
  if (fail_at >= 0) check_after(R, c);
  {
    emc_status st = emc_flush(c, NULL); /* the prefetch may report rows it could not pin */
    ck_assert_msg(st == EMC_OK || st == EMC_ECAPACITY, "launch %lld: flush after the burst: %s (%s)",
                  R->point, emc_status_name(st), emc_last_error_detail());
  }
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "after the burst");
  emct_world_free(&w);
  cudaFree(d_ids);
  cudaFree(d_out);
  cudaFree(d_rows);
  free(out);
  free(rows);
  return points;
}

/* The points a launch sweep fails: every one, or on the model (EMC_TEST_QUICK) every third,
 * starting from EMC_CUDASIM_SEED mod 3, so that make test's three runs of the suite (seeds S,
 * S + 1, S + 2) fail every launch between them. */
static long long launch_step(void) { return emct_gpu_quick() ? 3 : 1; }
static long long launch_first(void) {
  const char *e = getenv("EMC_CUDASIM_SEED");
  return e ? (long long)(strtoull(e, NULL, 10) % (unsigned long long)launch_step()) : 0;
}

static void sweep(int device_bufs, int launches) {
  run R;
  long long n, p;
  memset(&R, 0, sizeof R);
  R.point = -1;
  R.launches = launches;
  n = scenario(&R, device_bufs, -1);
  ck_assert_msg(n > 10, "the scenario passed only %lld failure points", n);
  for (p = launches ? launch_first() : 0; p < n; p += launches ? launch_step() : 1) {
    int before = R.failures;
    R.point = p;
    scenario(&R, device_bufs, p);
    if (R.failures == before) {
      const char *kind = emc__inject_last(NULL);
      /* a failure the backend absorbs (a slot's writer graph that failed to capture: its calls
       * run without it), or a point this run did not reach (the model's seeded order differs
       * from run to run, and with it which slots are free and how often a slot grows) */
      printf("  %s %lld (%s): no call failed\n", launches ? "launch" : "point", p, kind ? kind : "not reached");
    }
  }
  ck_assert_msg(launches ? R.failures > 0 : R.failures > n / 2, "only %d of %lld failure points made a call fail",
                R.failures, n);
  printf("test_gpu_alloc_fail (%s buffers): %lld %s, %d failing calls\n",
         device_bufs ? "device" : "host", n, launches ? "kernel launches" : "failure points", R.failures);
}

START_TEST(host_buffers) { sweep(0, 0); }
END_TEST

START_TEST(device_buffers) { sweep(1, 0); }
END_TEST

START_TEST(launch_host_buffers) { sweep(0, 1); }
END_TEST

START_TEST(launch_in_burst) {
  run R;
  long long n, p;
  memset(&R, 0, sizeof R);
  R.point = -1;
  R.launches = 1;
  n = burst(&R, -1);
  ck_assert_msg(n > 10, "the burst made only %lld launches", n);
  for (p = launch_first(); p < n; p += launch_step()) {
    R.point = p;
    burst(&R, p);
  }
  /* most launches of a burst may be absorbed (captures of new slots' writer graphs, which
   * concurrent mode makes many of) or not reached: at least one must fail a call */
  ck_assert_msg(R.failures > 0, "none of %lld launches made a call fail", n);
  printf("test_gpu_alloc_fail (burst, device buffers): %lld kernel launches, %d failing calls\n", n,
         R.failures);
}
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_alloc_fail")) return 77;
  s = suite_create("gpu_alloc_fail");
  tc = tcase_create("sweep");
  tcase_add_test(tc, host_buffers);
  tcase_add_test(tc, device_buffers);
  tcase_add_test(tc, launch_host_buffers);
  tcase_set_timeout(tc, 900);
  suite_add_tcase(s, tc);
  tc = tcase_create("burst");
  tcase_add_test(tc, launch_in_burst);
  tcase_set_timeout(tc, 900);
  suite_add_tcase(s, tc);
  return emct_run_nofork(s);
}
