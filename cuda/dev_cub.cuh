/*
 * dev_cub.cuh: the writer kernels' block- and warp-wide primitives (CUB), for the stage files
 * that use them (admit.cu, evict.cu, train.cu). Kept out of dev.cuh: every .cu includes that,
 * and CUB's block headers cost about 5 s of nvcc per file (the host-only .cu files need none).
 */
#ifndef EMC_DEV_CUB_CUH
#define EMC_DEV_CUB_CUH

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_scan.cuh>

#include "dev.cuh"

/* Block-wide primitives of the writer kernels (CUB), for blocks of EMC_WR_THREADS threads. */
#define EMC_WR_THREADS 256
typedef cub::BlockReduce<ull, EMC_WR_THREADS> emc_block_reduce;
typedef cub::BlockScan<ull, EMC_WR_THREADS> emc_block_scan;

/* Exclusive prefix sums over per-table values in chunks of EMC_WR_THREADS (tables in order):
 * calls f(t, prefix_t, value_t) for every table t < n. All threads of the block call it. */
template <typename Value, typename F>
__device__ __forceinline__ void table_scan(uint32_t n, Value value, F f) {
  __shared__ typename emc_block_scan::TempStorage tmp;
  __shared__ ull carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (uint32_t t0 = 0; t0 < n; t0 += EMC_WR_THREADS) {
    uint32_t t = t0 + threadIdx.x;
    ull mine = t < n ? (ull)value(t) : 0, excl, total;
    emc_block_scan(tmp).ExclusiveSum(mine, excl, total);
    if (t < n) f(t, carry + excl, mine);
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
}

/* Warp-cooperative free-bit search: the slot index of the k-th (0-based) set bit of a page's
 * bitmap, found with one word per lane and a warp prefix of popcounts (emc__bitmap_nth is its
 * host twin). -1 when fewer bits are set. All 32 lanes call it with the same arguments. */
__device__ __forceinline__ int64_t warp_bitmap_nth(const uint64_t *words, uint32_t n_words, uint32_t k) {
  unsigned lane = threadIdx.x & 31u;
  for (uint32_t base = 0; base < n_words; base += 32) {
    __shared__ typename cub::WarpScan<uint32_t>::TempStorage scan[8]; /* 8 warps a block */
    uint64_t x = base + lane < n_words ? words[base + lane] : 0;
    uint32_t c = (uint32_t)__popcll(x), incl, total;
    cub::WarpScan<uint32_t>(scan[(threadIdx.x >> 5) & 7u]).InclusiveSum(c, incl, total);
    if (k < total) {
      uint32_t excl = incl - c;
      unsigned hit = __ballot_sync(0xffffffffu, k >= excl && k < incl);
      int src = __ffs(hit) - 1;
      uint64_t w = __shfl_sync(0xffffffffu, x, src);
      uint32_t kk = k - __shfl_sync(0xffffffffu, excl, src), lo = (uint32_t)w, c0 = __popc(lo);
      uint32_t b = kk < c0 ? __fns(lo, 0, (int)kk + 1) : 32u + __fns((uint32_t)(w >> 32), 0, (int)(kk - c0) + 1);
      return (int64_t)(base + (uint32_t)src) * 64 + b;
    }
    k -= total;
  }
  return -1;
}

#endif /* EMC_DEV_CUB_CUH */
