/*
 * emc_cuda.cu: the device probe used to pick a backend, and device twins of the shared
 * per-item code for the GPU tests: global keys of a batch (tests/gpu/test_gpu_keys.c) and the
 * lookup kernel's cooperative probe over a host-built index, both compared with the host's
 * answers byte for byte.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "dev.cuh"

/* Clear a failed call's error so it does not leak into the caller's next CUDA call. */
static int emc__cuda_ok(cudaError_t e, char *err, size_t err_len) {
  if (e == cudaSuccess) return 1;
  if (err && err_len) snprintf(err, err_len, "%s (%d): %s", cudaGetErrorName(e), (int)e, cudaGetErrorString(e));
  (void)cudaGetLastError();
  return 0;
}

/* cudaGetDeviceCount answers cudaErrorInsufficientDriver ("driver version is insufficient")
 * both for an old driver and for no driver at all. The runtime reaches the driver through
 * libcuda.so.1: if that cannot be loaded, there is no driver, and the error says so. */
extern "C" int emc__cuda_device_count(char *err, size_t err_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver) {
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
      const char *why = dlerror();
      (void)cudaGetLastError();
      if (err && err_len)
        snprintf(err, err_len, "no NVIDIA driver found (%s)", why ? why : "libcuda.so.1 not loadable");
      return -1;
    }
    dlclose(drv);
  }
  if (!emc__cuda_ok(e, err, err_len)) return -1;
  return n;
}

/* One thread per id, grid-stride; table of each id by binary search over offsets. */
__global__ void __launch_bounds__(256)
emc__k_global_keys(const emc__table_code *codes, uint32_t n_tables, uint64_t hash_seed,
                   const uint64_t *ids, const uint64_t *offsets, uint64_t *keys) {
  uint64_t total = offsets[n_tables];
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (uint64_t)gridDim.x * blockDim.x) {
    uint32_t lo = 0, hi = n_tables; /* largest t with offsets[t] <= i */
    while (hi - lo > 1) {
      uint32_t mid = (lo + hi) / 2;
      if (offsets[mid] <= i) lo = mid; else hi = mid;
    }
    keys[i] = emc__global_key(&codes[lo], ids[i], hash_seed);
  }
}

extern "C" int emc__cuda_global_keys(const emc__table_code *codes_host, uint32_t n_tables,
                                     uint64_t hash_seed, const uint64_t *ids_host,
                                     const uint64_t *offsets_host, uint64_t *keys_host, char *err,
                                     size_t err_len) {
  uint64_t total = offsets_host[n_tables];
  emc__table_code *codes = NULL;
  uint64_t *ids = NULL, *offsets = NULL, *keys = NULL;
  int ok = 1;
  if (total == 0) return 1;
  ok = ok && emc__cuda_ok(cudaMalloc(&codes, n_tables * sizeof *codes), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&ids, total * sizeof *ids), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&offsets, (n_tables + 1) * sizeof *offsets), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&keys, total * sizeof *keys), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(codes, codes_host, n_tables * sizeof *codes, cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ids, ids_host, total * sizeof *ids, cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(offsets, offsets_host, (n_tables + 1) * sizeof *offsets, cudaMemcpyHostToDevice), err, err_len);
  if (ok) {
    unsigned blocks = (unsigned)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    ok = emc__cuda_ok(EMC_LAUNCH(emc__k_global_keys, blocks, 256, 0, codes, n_tables, hash_seed, ids, offsets, keys),
                      err, err_len);
  }
  ok = ok && emc__cuda_ok(cudaMemcpy(keys_host, keys, total * sizeof *keys, cudaMemcpyDeviceToHost), err, err_len);
  cudaFree(codes);
  cudaFree(ids);
  cudaFree(offsets);
  cudaFree(keys);
  return ok;
}

/* Probe a host-built index on the device with the lookup kernel's cooperative probe
 * (dev.cuh, coop_probe: 8 lanes per key, four keys per warp). */
__global__ void __launch_bounds__(256)
emc__k_index_find(emc__index_view ix, const uint64_t *keys, uint64_t n, int64_t *pos) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  for (uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w * 4 < n; w += warps) {
    uint64_t i = w * 4 + (lane >> 3);
    int64_t p = coop_probe(ix, i < n ? keys[i] : 0, i < n);
    if (i < n && (lane & 7u) == 0) pos[i] = p;
  }
}

extern "C" int emc__cuda_index_find(const emc__index_view *ix_host, const uint64_t *keys_host,
                                    uint64_t n, int64_t *pos_host, char *err, size_t err_len) {
  emc__index_view ix = *ix_host;
  uint64_t slots = ix.n_buckets * EMC__BUCKET, *keys = NULL;
  size_t kb = ix.key_bits == 32 ? 4 : 8;
  int64_t *pos = NULL;
  int ok = 1;
  ix.keys = NULL;
  ix.lm = NULL;
  ix.stamps = NULL;
  ix.epoch = NULL;
  ok = ok && emc__cuda_ok(cudaMalloc(&ix.keys, slots * kb), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&keys, (n ? n : 1) * sizeof(uint64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&pos, (n ? n : 1) * sizeof(int64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ix.keys, ix_host->keys, slots * kb, cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(keys, keys_host, n * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  if (ok && n > 0) {
    unsigned blocks = (unsigned)((n + 31) / 32 < 4096 ? (n + 31) / 32 : 4096);
    ok = emc__cuda_ok(EMC_LAUNCH(emc__k_index_find, blocks, 256, 0, ix, keys, n, pos), err, err_len);
  }
  ok = ok && emc__cuda_ok(cudaMemcpy(pos_host, pos, n * sizeof(int64_t), cudaMemcpyDeviceToHost), err, err_len);
  cudaFree(ix.keys);
  cudaFree(keys);
  cudaFree(pos);
  return ok;
}
