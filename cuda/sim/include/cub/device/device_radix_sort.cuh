/*
 * cub/device/device_radix_sort.cuh (CPU model): cub::DeviceRadixSort::SortPairs, one segment
 * of DeviceSegmentedRadixSort (same protocol and stability).
 */
#ifndef EMCSIM_CUB_DEVICE_RADIX_SORT_CUH
#define EMCSIM_CUB_DEVICE_RADIX_SORT_CUH
#include "cub/device/device_segmented_radix_sort.cuh"

namespace cub {
struct DeviceRadixSort {
  struct Span {
    long long n;
    long long operator[](int) const { return n; }
  };
  struct Zero {
    long long operator[](int) const { return 0; }
  };
  template <typename K, typename V>
  static cudaError_t SortPairs(void *d_temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                               V *vals_out, int num_items, int begin_bit = 0, int end_bit = (int)(sizeof(K) * 8),
                               cudaStream_t stream = 0) {
    return DeviceSegmentedRadixSort::SortPairs(d_temp, temp_bytes, keys_in, keys_out, vals_in, vals_out, num_items, 1,
                                               Zero(), Span{num_items}, begin_bit, end_bit, stream);
  }
};
}  // namespace cub
#endif
