/*
 * emc_cuda.cu: the device side of embcache.
 *
 * This release ships the device probe used to pick a backend and the first kernel built on
 * the shared per-item header (lib/emc_item.h): global keys of a batch, computed by the same
 * code the host backend runs. tests/test_gpu_keys.c compares it with the host byte for byte.
 * Everything here is reached through the small C-callable interface in cuda/emc_cuda.h, so
 * lib/ builds with a plain C compiler.
 */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>

extern "C" {
#include "emc_item.h"
#include "emc_cuda.h"
}

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
    emc__k_global_keys<<<blocks, 256>>>(codes, n_tables, hash_seed, ids, offsets, keys);
    ok = emc__cuda_ok(cudaGetLastError(), err, err_len);
  }
  ok = ok && emc__cuda_ok(cudaMemcpy(keys_host, keys, total * sizeof *keys, cudaMemcpyDeviceToHost), err, err_len);
  cudaFree(codes);
  cudaFree(ids);
  cudaFree(offsets);
  cudaFree(keys);
  return ok;
}

/* Probe a host-built index on the device: positions of keys (the shared emc__index_find). */
__global__ void __launch_bounds__(256)
emc__k_index_find(emc__index_view ix, uint64_t empty, const uint64_t *keys, uint64_t n,
                  int64_t *pos) {
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    pos[i] = emc__index_find(&ix, keys[i], empty);
}

extern "C" int emc__cuda_index_find(const emc__index_view *ix_host, uint64_t empty,
                                    const uint64_t *keys_host, uint64_t n, int64_t *pos_host,
                                    char *err, size_t err_len) {
  emc__index_view ix = *ix_host;
  uint64_t slots = ix.n_buckets * EMC__BUCKET, *keys = NULL;
  int64_t *pos = NULL;
  int ok = 1;
  ix.keys = ix.ids = ix.locs = NULL;
  ok = ok && emc__cuda_ok(cudaMalloc(&ix.keys, slots * sizeof(uint64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&ix.ids, slots * sizeof(uint64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&ix.locs, slots * sizeof(uint64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&keys, (n ? n : 1) * sizeof(uint64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&pos, (n ? n : 1) * sizeof(int64_t)), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ix.keys, ix_host->keys, slots * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ix.ids, ix_host->ids, slots * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ix.locs, ix_host->locs, slots * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(keys, keys_host, n * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  if (ok && n > 0) {
    unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    emc__k_index_find<<<blocks, 256>>>(ix, empty, keys, n, pos);
    ok = emc__cuda_ok(cudaGetLastError(), err, err_len);
  }
  ok = ok && emc__cuda_ok(cudaMemcpy(pos_host, pos, n * sizeof(int64_t), cudaMemcpyDeviceToHost), err, err_len);
  cudaFree(ix.keys);
  cudaFree(ix.ids);
  cudaFree(ix.locs);
  cudaFree(keys);
  cudaFree(pos);
  return ok;
}

/* Optimistic slot reads on the device (the shared emc__slot_read) over a host-built page:
 * ok[i] = 1 and row i copied when slot i holds id ids[i]. */
__global__ void __launch_bounds__(256)
emc__k_slot_read(unsigned char *page, emc__page_layout L, uint32_t table, const uint64_t *ids,
                 uint32_t n, size_t row_bytes, unsigned char *out, int *ok) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    ok[i] = emc__slot_read(page, &L, i, table, ids[i], out + (size_t)i * row_bytes, row_bytes);
}

extern "C" int emc__cuda_slot_read(const unsigned char *page_host, size_t page_bytes,
                                   const emc__page_layout *L, uint32_t table,
                                   const uint64_t *ids_host, uint32_t n, size_t row_bytes,
                                   unsigned char *out_host, int *ok_host, char *err,
                                   size_t err_len) {
  unsigned char *page = NULL, *out = NULL;
  uint64_t *ids = NULL;
  int *okd = NULL, ok = 1;
  ok = ok && emc__cuda_ok(cudaMalloc(&page, page_bytes), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&out, (size_t)n * row_bytes + 1), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&ids, (size_t)n * sizeof(uint64_t) + 8), err, err_len);
  ok = ok && emc__cuda_ok(cudaMalloc(&okd, (size_t)n * sizeof(int) + 4), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(page, page_host, page_bytes, cudaMemcpyHostToDevice), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ids, ids_host, (size_t)n * sizeof(uint64_t), cudaMemcpyHostToDevice), err, err_len);
  if (ok && n > 0) {
    emc__k_slot_read<<<(n + 255) / 256, 256>>>(page, *L, table, ids, n, row_bytes, out, okd);
    ok = emc__cuda_ok(cudaGetLastError(), err, err_len);
  }
  ok = ok && emc__cuda_ok(cudaMemcpy(out_host, out, (size_t)n * row_bytes, cudaMemcpyDeviceToHost), err, err_len);
  ok = ok && emc__cuda_ok(cudaMemcpy(ok_host, okd, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost), err, err_len);
  cudaFree(page);
  cudaFree(out);
  cudaFree(ids);
  cudaFree(okd);
  return ok;
}
