/* CUDA_OK: a CUDA runtime call in a GPU test must succeed (a Check assertion naming the call
 * and the runtime's error). Shared by the GPU suites. */
#ifndef EMCT_CUDA_OK_H
#define EMCT_CUDA_OK_H
#include <check.h>
#include <cuda_runtime_api.h>

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));             \
  } while (0)

#endif
