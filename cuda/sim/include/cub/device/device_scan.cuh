/*
 * cub/device/device_scan.cuh (CPU model): cub::DeviceScan::ExclusiveSum / InclusiveSum of
 * num_items values in device memory, in stream order. Temporary storage as CUB's protocol: a
 * call with d_temp_storage == NULL sets the size and enqueues nothing; a smaller buffer is
 * cudaErrorInvalidValue; the buffer given is overwritten (poison) when the scan runs.
 */
#ifndef EMCSIM_CUB_DEVICE_SCAN_CUH
#define EMCSIM_CUB_DEVICE_SCAN_CUH
#include <cuda_runtime.h>

#include <iterator>
#include <vector>

#include "emcsim/library.h"

namespace cub {
struct DeviceScan {
  static size_t emcsim_temp_bytes(long long n) { return 512 + (size_t)((n + 2047) / 2048 + 32) * 16; }

  template <typename In, typename Out>
  static cudaError_t emcsim_scan(void *d_temp, size_t &temp_bytes, In d_in, Out d_out, int num_items,
                                 cudaStream_t stream, bool inclusive, const char *name) {
    typedef typename std::iterator_traits<In>::value_type T;
    size_t need = emcsim_temp_bytes(num_items);
    if (!d_temp) {
      temp_bytes = need;
      return cudaSuccess;
    }
    if (num_items < 0 || temp_bytes < need) return cudaErrorInvalidValue;
    if (num_items == 0) return cudaSuccess;
    cudaError_t e = ::emcsim::check_device_range(d_temp, need, "DeviceScan temporary storage");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(&d_in[0], sizeof(T) * (size_t)num_items, "DeviceScan input");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(&d_out[0], sizeof(T) * (size_t)num_items, "DeviceScan output");
    if (e != cudaSuccess) return e;
    return ::emcsim::submit_fn(stream, name, [=]() {
      std::vector<T> in((size_t)num_items);
      for (int i = 0; i < num_items; i++) in[(size_t)i] = d_in[i];
      ::emcsim::poison_scratch(d_temp, need);
      T acc = T(0);
      for (int i = 0; i < num_items; i++) {
        if (inclusive) {
          acc = acc + in[(size_t)i];
          d_out[i] = acc;
        } else {
          d_out[i] = acc;
          acc = acc + in[(size_t)i];
        }
      }
    });
  }

  template <typename In, typename Out>
  static cudaError_t ExclusiveSum(void *d_temp, size_t &temp_bytes, In d_in, Out d_out, int num_items,
                                  cudaStream_t stream = 0) {
    return emcsim_scan(d_temp, temp_bytes, d_in, d_out, num_items, stream, false, "cub::DeviceScan::ExclusiveSum");
  }
  template <typename In, typename Out>
  static cudaError_t InclusiveSum(void *d_temp, size_t &temp_bytes, In d_in, Out d_out, int num_items,
                                  cudaStream_t stream = 0) {
    return emcsim_scan(d_temp, temp_bytes, d_in, d_out, num_items, stream, true, "cub::DeviceScan::InclusiveSum");
  }
};
}  // namespace cub
#endif
