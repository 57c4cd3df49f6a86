/*
 * cuda_runtime.h: the CPU model of the device (cuda/sim/), under the toolkit's name. C++17.
 *
 * A CUDA source compiles against it with the host compiler:
 *     c++ -std=c++17 -I cuda/sim/include -x c++ FILE.cu -x none BUILD/libemc_cudasim.a -pthread
 * Kernels are launched with cudaLaunchKernelEx (the runtime's C++ variadic form) or the typed
 * cudaLaunchKernel; the <<<>>> syntax is not C++. The keywords (__global__, __device__,
 * __shared__, ...) become what the model needs: __shared__ variables are thread_local (a
 * block's fibers run on one OS thread) in the section `emcsim_shared`, which the model fills
 * with a poison byte before every block. cuda/sim/README.md says what the model checks.
 */
#ifndef EMCSIM_CUDA_RUNTIME_H
#define EMCSIM_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

/* the model runs the device's code paths (__CUDA_ARCH__), compiled once, for the host CPU */
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __grid_constant__
#define __launch_bounds__(...)
#define __shared__ thread_local __attribute__((section("emcsim_shared"), aligned(16)))

#include "emcsim/device.h"
#include "emcsim/vector_types.h"

/* ---------------------------------------------------------------- launches */
typedef struct cudaLaunchAttribute_st {
  int id;
  int pad;
  uint64_t val[8];
} cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute *attrs;
  unsigned int numAttrs;
} cudaLaunchConfig_t;

namespace emcsim {

/* What a launch keeps: the kernel and its arguments, copied at the launch (or at capture). */
struct Closure {
  virtual ~Closure() {}
  virtual void invoke() = 0;
  virtual Closure *clone() const = 0;
};

template <typename... P> struct KernelClosure final : Closure {
  void (*fn)(P...);
  std::tuple<typename std::decay<P>::type...> args;
  template <typename... A>
  KernelClosure(void (*f)(P...), A &&...a) : fn(f), args(std::forward<A>(a)...) {}
  void invoke() override { std::apply(fn, args); }
  Closure *clone() const override { return new KernelClosure(*this); }
};

template <typename... P, size_t... I>
Closure *closure_from_args(void (*f)(P...), void **args, std::index_sequence<I...>) {
  return new KernelClosure<P...>(f, *static_cast<typename std::decay<P>::type *>(args[I])...);
}

/* The model's launch: takes ownership of c. `key` identifies the kernel (its address); `from
 * args` rebuilds a closure from a void ** argument array (the C form). */
cudaError_t launch(const void *key, Closure *c, Closure *(*from_args)(const void *key, void **args),
                   dim3 grid, dim3 block, size_t smem, cudaStream_t stream);

template <typename... P> Closure *from_args_of(const void *key, void **args) {
  typedef void (*F)(P...);
  return closure_from_args(reinterpret_cast<F>(const_cast<void *>(key)), args,
                           std::index_sequence_for<P...>{});
}

}  // namespace emcsim

template <typename... ExpTypes, typename... ActTypes>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *config, void (*kernel)(ExpTypes...),
                               ActTypes &&...args) {
  static_assert(sizeof...(ExpTypes) == sizeof...(ActTypes), "wrong number of kernel arguments");
  if (!config) return cudaErrorInvalidValue;
  return ::emcsim::launch(reinterpret_cast<const void *>(kernel),
                          new ::emcsim::KernelClosure<ExpTypes...>(
                              kernel, static_cast<typename std::decay<ExpTypes>::type>(
                                          std::forward<ActTypes>(args))...),
                          &::emcsim::from_args_of<ExpTypes...>, config->gridDim, config->blockDim,
                          config->dynamicSmemBytes, config->stream);
}

template <typename... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void **args,
                             size_t smem = 0, cudaStream_t stream = 0) {
  if (sizeof...(P) > 0 && !args) return cudaErrorInvalidValue;
  return ::emcsim::launch(reinterpret_cast<const void *>(kernel),
                          ::emcsim::closure_from_args(kernel, args, std::index_sequence_for<P...>{}),
                          &::emcsim::from_args_of<P...>, grid, block, smem, stream);
}

template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), enum cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel), attr, value);
}

template <typename T>
cudaError_t cudaMallocAsync(T **p, size_t bytes, cudaStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void **>(p), bytes, stream);
}
template <typename T> cudaError_t cudaMalloc(T **p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void **>(p), bytes);
}
template <typename T> cudaError_t cudaHostAlloc(T **p, size_t bytes, unsigned int flags) {
  return cudaHostAlloc(reinterpret_cast<void **>(p), bytes, flags);
}
template <typename T> cudaError_t cudaMallocHost(T **p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void **>(p), bytes);
}

#endif /* __cplusplus */
#endif /* EMCSIM_CUDA_RUNTIME_H */
