/*
 * emcsim/library.h: what the model's CUB (cub/) asks of the runtime: device-wide work run in
 * stream order (captured into a graph like a kernel), and a check that a pointer the host passes
 * is device memory of the current device.
 */
#ifndef EMCSIM_LIBRARY_H
#define EMCSIM_LIBRARY_H

#include <stddef.h>

#include <functional>

#include "cuda_runtime_api.h"

namespace emcsim {
/* Enqueue fn on stream (or add it to the stream's capture) as the kernel `name`. */
cudaError_t submit_fn(cudaStream_t stream, const char *name, std::function<void()> fn);
/* cudaSuccess when [p, p + bytes) lies in device memory of the current device, else
 * cudaErrorInvalidValue with the reason recorded (EMC_CUDASIM_VERBOSE prints it). */
cudaError_t check_device_range(const void *p, size_t bytes, const char *what);
/* Fill [p, p + bytes) with the poison byte of scratch that a library call used. */
void poison_scratch(void *p, size_t bytes);
}  // namespace emcsim

#endif /* EMCSIM_LIBRARY_H */
