/*
 * cub/warp/warp_scan.cuh (CPU model): cub::WarpScan over a full warp, as CUB computes it:
 * log2(32) rounds of __shfl_up_sync (all 32 lanes must take part), the warp's total from lane
 * 31 by one more shuffle.
 */
#ifndef EMCSIM_CUB_WARP_SCAN_CUH
#define EMCSIM_CUB_WARP_SCAN_CUH
#include <cuda_runtime.h>

#include "cub/util_type.cuh"

namespace cub {
template <typename T, int LOGICAL_WARP_THREADS = 32> class WarpScan {
  static_assert(LOGICAL_WARP_THREADS == 32, "the model's WarpScan covers full warps");

 public:
  struct TempStorage {
    unsigned char unused;
  };
  __device__ WarpScan(TempStorage &) {}
  template <typename Op> __device__ void InclusiveScan(T input, T &output, Op op, T &aggregate) {
    unsigned lane = (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31u;
    T v = input;
    for (int d = 1; d < 32; d <<= 1) {
      T up = __shfl_up_sync(0xffffffffu, v, d);
      if ((int)lane >= d) v = op(up, v);
    }
    output = v;
    aggregate = __shfl_sync(0xffffffffu, v, 31);
  }
  __device__ void InclusiveSum(T input, T &output, T &aggregate) {
    InclusiveScan(input, output, cub::Sum(), aggregate);
  }
  __device__ void InclusiveSum(T input, T &output) {
    T agg;
    InclusiveSum(input, output, agg);
  }
  __device__ void ExclusiveSum(T input, T &output, T &aggregate) {
    T incl;
    InclusiveSum(input, incl, aggregate);
    output = incl - input;
  }
  __device__ void ExclusiveSum(T input, T &output) {
    T agg;
    ExclusiveSum(input, output, agg);
  }
};
}  // namespace cub
#endif
