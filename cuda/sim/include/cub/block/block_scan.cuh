/*
 * cub/block/block_scan.cuh (CPU model): cub::BlockScan over a block of BLOCK_DIM_X threads:
 * ExclusiveSum / InclusiveSum / ExclusiveScan with a block aggregate. Every thread must call it
 * (two __syncthreads inside, as CUB's); reusing the TempStorage needs a __syncthreads between.
 */
#ifndef EMCSIM_CUB_BLOCK_SCAN_CUH
#define EMCSIM_CUB_BLOCK_SCAN_CUH
#include <cuda_runtime.h>

#include "cub/util_type.cuh"

namespace cub {
template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockScan {
  enum { THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z };

 public:
  struct TempStorage {
    T v[THREADS];
    T prefix[THREADS];
    T total;
  };
  __device__ BlockScan(TempStorage &t) : tmp(t) {}

  template <typename Op> __device__ void ExclusiveScan(T input, T &output, T init, Op op, T &aggregate) {
    unsigned tid = linear();
    check();
    tmp.v[tid] = input;
    __syncthreads();
    if (tid == 0) {
      T acc = init;
      for (int i = 0; i < THREADS; i++) {
        tmp.prefix[i] = acc;
        acc = op(acc, tmp.v[i]);
      }
      tmp.total = op(tmp.prefix[THREADS - 1], tmp.v[THREADS - 1]);
    }
    __syncthreads();
    output = tmp.prefix[tid];
    aggregate = tmp.total;
  }
  template <typename Op> __device__ void ExclusiveScan(T input, T &output, T init, Op op) {
    T agg;
    ExclusiveScan(input, output, init, op, agg);
  }
  __device__ void ExclusiveSum(T input, T &output, T &aggregate) {
    ExclusiveScan(input, output, T(0), cub::Sum(), aggregate);
    /* CUB's aggregate of a sum is the sum of the inputs (not init-based) */
  }
  __device__ void ExclusiveSum(T input, T &output) {
    T agg;
    ExclusiveSum(input, output, agg);
  }
  __device__ void InclusiveSum(T input, T &output, T &aggregate) {
    T ex;
    ExclusiveSum(input, ex, aggregate);
    output = ex + input;
  }
  __device__ void InclusiveSum(T input, T &output) {
    T agg;
    InclusiveSum(input, output, agg);
  }

 private:
  TempStorage &tmp;
  static unsigned linear() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
  }
  static void check() {
    if ((int)(blockDim.x * blockDim.y * blockDim.z) != THREADS)
      ::emcsim::device_fault(719, "cub::BlockScan", "the block's size differs from the BlockScan's template size");
  }
};
}  // namespace cub
#endif
