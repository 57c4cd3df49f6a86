/*
 * cub/block/block_reduce.cuh (CPU model): cub::BlockReduce over a 1-D block of BLOCK_DIM_X
 * threads. Every thread of the block must call it (it holds a __syncthreads); the result is
 * defined in thread 0 only, as in CUB: the other threads get a poison value. Reusing the same
 * TempStorage needs a __syncthreads between the uses, as in CUB.
 */
#ifndef EMCSIM_CUB_BLOCK_REDUCE_CUH
#define EMCSIM_CUB_BLOCK_REDUCE_CUH
#include <cuda_runtime.h>

#include "cub/util_type.cuh"

namespace cub {
template <typename T, int BLOCK_DIM_X, int ALGORITHM = 0, int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockReduce {
  enum { THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z };

 public:
  struct TempStorage {
    T v[THREADS];
  };
  __device__ BlockReduce(TempStorage &t) : tmp(t) {}
  template <typename Op> __device__ T Reduce(T input, Op op) { return Reduce(input, op, THREADS); }
  template <typename Op> __device__ T Reduce(T input, Op op, int num_valid) {
    unsigned tid = linear();
    check();
    tmp.v[tid] = input;
    __syncthreads();
    if (tid != 0) return emcsim_undefined<T>();
    T acc = tmp.v[0];
    for (int i = 1; i < num_valid && i < THREADS; i++) acc = op(acc, tmp.v[i]);
    return acc;
  }
  __device__ T Sum(T input) { return Reduce(input, cub::Sum()); }
  __device__ T Sum(T input, int num_valid) { return Reduce(input, cub::Sum(), num_valid); }

 private:
  TempStorage &tmp;
  static unsigned linear() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
  }
  static void check() {
    if ((int)(blockDim.x * blockDim.y * blockDim.z) != THREADS)
      ::emcsim::device_fault(719, "cub::BlockReduce",
                             "the block's size differs from the BlockReduce's template size");
  }
};
}  // namespace cub
#endif
