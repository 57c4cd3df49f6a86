/*
 * test_gpu_devices: a CUDA cache on a machine with several devices (pre-flight defect 11).
 *
 * Every call leaves the caller's current device as it found it, whichever device the cache is
 * on; memory of another device than the cache's is refused with EMC_EINVAL (ids, offsets, out,
 * where, rows, grads), peer access enabled or not (include/embcache.h, "CUDA backend"); memory
 * of the cache's device works whichever device is current. CTest runs it with
 * EMC_CUDASIM_DEVICES=2 (the CPU model of the device then has two). With one device only the
 * one-device half runs (it says so); exits 77 where no device answers. Never forks.
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#include "cuda_ok.h"

static const emct_tspec specs[] = {{EMC_TABLE_DENSE, 500, 8, EMC_DTYPE_F32, 0, 0},
                                   {EMC_TABLE_HASHED, 400, 4, EMC_DTYPE_F16, 300, 200}};
static int n_devices;

static int current_device(void) {
  int d = -1;
  CUDA_OK(cudaGetDevice(&d));
  return d;
}

/* A batch looked up through cache c with ids/out of device `dev` (-1: host memory) must give
 * the reference rows; the current device `cur` stays current. */
static void lookup_from(emct_world *w, emc_cache *c, int dev, int cur, const char *what) {
  uint64_t cnt[2] = {20, 12}, ids[32], ranks[32], offsets[3], n;
  size_t bytes;
  unsigned char out[32 * 32];
  n = emct_world_batch(w, cnt, ids, ranks, offsets);
  bytes = emct_world_batch_bytes(w, offsets);
  if (dev < 0) {
    EMCT_OK(emc_lookup(c, ids, offsets, out, NULL));
  } else {
    uint64_t *dids;
    unsigned char *dout;
    CUDA_OK(cudaSetDevice(dev));
    CUDA_OK(cudaMalloc((void **)&dids, n * 8));
    CUDA_OK(cudaMalloc((void **)&dout, bytes));
    CUDA_OK(cudaMemcpy(dids, ids, n * 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaSetDevice(cur));
    EMCT_OK(emc_lookup(c, dids, offsets, dout, NULL));
    ck_assert_msg(current_device() == cur, "%s: the current device moved to %d", what,
                  current_device());
    CUDA_OK(cudaSetDevice(dev));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost));
    cudaFree(dids);
    cudaFree(dout);
    CUDA_OK(cudaSetDevice(cur));
  }
  ck_assert_msg(current_device() == cur, "%s: the current device moved to %d", what,
                current_device());
  emct_world_check_rows(w, ranks, offsets, out, NULL, what);
}

START_TEST(current_device_kept) {
  emct_world w;
  emc_cache *c;
  emc_cache_config cfg;
  emc_stats st;
  int cache_dev = n_devices > 1 ? 1 : 0, other = 0;
  emct_world_init(&w, specs, 2, 1.0, 81);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 32u << 10;
  cfg.device = cache_dev;
  CUDA_OK(cudaSetDevice(other));
  EMCT_OK(emc_cache_create(w.store, &cfg, &c));
  ck_assert_int_eq(current_device(), other);
  lookup_from(&w, c, -1, other, "host buffers");
  lookup_from(&w, c, cache_dev, other, "buffers of the cache's device");
  EMCT_OK(emc_get_stats(c, &st));
  ck_assert_int_eq(current_device(), other);
  EMCT_OK(emc_flush(c, NULL));
  ck_assert_int_eq(current_device(), other);
  EMCT_OK(emc_cache_destroy(c));
  ck_assert_int_eq(current_device(), other);
  emct_world_check_store(&w, "current device kept");
  emct_world_free(&w);
}
END_TEST

START_TEST(other_device_memory_refused) {
  emct_world w;
  emc_cache *c;
  emc_cache_config cfg;
  emc_optimizer opt;
  uint64_t cnt[2] = {8, 8}, ids[16], ranks[16], offsets[3], n, *d1ids, *d1off;
  unsigned char out[16 * 32], *d1out;
  float *d1grads;
  uint8_t *d1where;
  int peer, round;
  if (n_devices < 2) {
    printf("test_gpu_devices: one device: other_device_memory_refused needs two "
           "(EMC_CUDASIM_DEVICES=2 on the model)\n");
    return;
  }
  emct_world_init(&w, specs, 2, 1.0, 82);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_CUDA;
  cfg.capacity_bytes = 32u << 10;
  cfg.device = 0;
  emc_optimizer_init(&opt);
  CUDA_OK(cudaSetDevice(0));
  EMCT_OK(emc_cache_create(w.store, &cfg, &c));
  n = emct_world_batch(&w, cnt, ids, ranks, offsets);
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaMalloc((void **)&d1ids, n * 8));
  CUDA_OK(cudaMalloc((void **)&d1off, sizeof offsets));
  CUDA_OK(cudaMalloc((void **)&d1out, sizeof out));
  CUDA_OK(cudaMalloc((void **)&d1where, n));
  CUDA_OK(cudaMalloc((void **)&d1grads, n * 8 * 4));
  CUDA_OK(cudaMemcpy(d1ids, ids, n * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d1off, offsets, sizeof offsets, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d1grads, 0, n * 8 * 4));
  ck_assert_int_eq(cudaDeviceCanAccessPeer(&peer, 1, 0), cudaSuccess);
  for (round = 0; round < 2; round++) { /* without, then with peer access (device 1 -> 0) */
    CUDA_OK(cudaSetDevice(1));
    if (round == 1 && peer) CUDA_OK(cudaDeviceEnablePeerAccess(0, 0));
#define REFUSED(call, name)                                                                \
  do {                                                                                     \
    EMCT_ST(call, EMC_EINVAL);                                                             \
    ck_assert_msg(strstr(emc_last_error_detail(), name) != NULL, "%s: detail '%s'", name,  \
                  emc_last_error_detail());                                                \
    ck_assert_int_eq(current_device(), 1);                                                 \
  } while (0)
    REFUSED(emc_lookup(c, d1ids, offsets, out, NULL), "ids");
    REFUSED(emc_lookup(c, ids, offsets, d1out, NULL), "out");
    REFUSED(emc_lookup(c, ids, d1off, out, NULL), "offsets");
    REFUSED(emc_lookup_ex(c, ids, offsets, out, d1where, NULL), "where");
    REFUSED(emc_insert(c, ids, offsets, d1out, NULL), "rows");
    REFUSED(emc_prefetch(c, d1ids, offsets, NULL), "ids");
    REFUSED(emc_apply_gradients(c, ids, offsets, d1grads, &opt, NULL), "grads");
#undef REFUSED
    /* and nothing changed: the same batch from host memory still reads the reference */
    EMCT_OK(emc_lookup(c, ids, offsets, out, NULL));
    ck_assert_int_eq(current_device(), 1);
    emct_world_check_rows(&w, ranks, offsets, out, NULL, "after the refusals");
  }
  cudaFree(d1ids);
  cudaFree(d1off);
  cudaFree(d1out);
  cudaFree(d1where);
  cudaFree(d1grads);
  CUDA_OK(cudaSetDevice(0));
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "other device");
  emct_world_free(&w);
}
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  if (!emct_gpu_present("test_gpu_devices")) return 77;
  if (cudaGetDeviceCount(&n_devices) != cudaSuccess) return 77;
  s = suite_create("gpu_devices");
  tc = tcase_create("devices");
  tcase_add_test(tc, current_device_kept);
  tcase_add_test(tc, other_device_memory_refused);
  tcase_set_timeout(tc, emct_timeout(300));
  suite_add_tcase(s, tc);
  return emct_run_nofork(s);
}
