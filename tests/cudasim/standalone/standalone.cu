/*
 * standalone.cu: a CUDA program as a user of the model writes it, compiled exactly as
 * cuda/sim/README.md says (tests/cudasim/run_standalone.cmake does):
 *     c++ -std=c++17 -I cuda/sim/include -x c++ standalone.cu -x none BUILD/libemc_cudasim.a -pthread
 * A grid-stride saxpy, then a sum: a warp reduction with __shfl_down_sync, the warps' partial
 * sums through __shared__ memory, one atomicAdd per block. Prints "standalone: ok" when the
 * device's results are right; anything else exits nonzero.
 */
#include <cuda_runtime.h>
#include <stdio.h>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}

__global__ void sum(int n, const float *y, float *total) {
  __shared__ float warp_sums[8];
  float v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += y[i];
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += warp_sums[w];
    atomicAdd(total, s);
  }
}

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t e = (call);                                                                 \
    if (e != cudaSuccess) {                                                                 \
      fprintf(stderr, "standalone: %s failed: %s\n", #call, cudaGetErrorString(e));         \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  enum { N = 4096 };
  static float x[N], y[N];
  float *dx, *dy, *dt, total = 0;
  for (int i = 0; i < N; i++) {
    x[i] = (float)(i % 16);
    y[i] = 1.0f;
  }
  CHECK(cudaMalloc(&dx, sizeof x));
  CHECK(cudaMalloc(&dy, sizeof y));
  CHECK(cudaMalloc(&dt, sizeof(float)));
  CHECK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y, sizeof y, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dt, 0, sizeof(float)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(8);
  cfg.blockDim = dim3(256);
  CHECK(cudaLaunchKernelEx(&cfg, saxpy, N, 2.0f, (const float *)dx, dy));
  CHECK(cudaLaunchKernelEx(&cfg, sum, (int)N, (const float *)dy, dt));
  CHECK(cudaMemcpy(&total, dt, sizeof total, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
  /* y[i] = 2 (i % 16) + 1; the sum: 256 rounds of 2 * 120 + 16 = 256, all exact in float */
  for (int i = 0; i < N; i++)
    if (y[i] != 2.0f * (float)(i % 16) + 1.0f) {
      fprintf(stderr, "standalone: y[%d] = %g\n", i, y[i]);
      return 1;
    }
  if (total != 256.0f * 256.0f) {
    fprintf(stderr, "standalone: the sum is %g, expected %g\n", total, 256.0f * 256.0f);
    return 1;
  }
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaFree(dt));
  printf("standalone: ok (sum %g)\n", total);
  return 0;
}
