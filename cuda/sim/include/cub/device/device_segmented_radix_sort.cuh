/*
 * cub/device/device_segmented_radix_sort.cuh (CPU model): cub::DeviceSegmentedRadixSort::
 * SortPairs: each segment [begin_offsets[s], end_offsets[s]) sorted by the key bits
 * [begin_bit, end_bit), stably (an LSD radix sort is stable), values moved with their keys;
 * positions outside every segment are not written. Offsets are read from device memory when
 * the sort runs. The input and output buffers must not overlap (CUB's two-buffer form).
 */
#ifndef EMCSIM_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH
#define EMCSIM_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "emcsim/library.h"

namespace cub {
struct DeviceSegmentedRadixSort {
  static size_t emcsim_temp_bytes(long long n, long long segs, size_t kv) {
    return 1024 + (size_t)n * kv + (size_t)segs * 16;
  }
  template <typename K> static K emcsim_digits(K k, int begin_bit, int end_bit) {
    K mask = end_bit - begin_bit >= (int)(8 * sizeof(K)) ? (K)~(K)0 : (K)(((K)1 << (end_bit - begin_bit)) - 1);
    return (K)((k >> begin_bit) & mask);
  }

  template <typename K, typename V, typename BeginIt, typename EndIt>
  static cudaError_t SortPairs(void *d_temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                               V *vals_out, int num_items, int num_segments, BeginIt begin_offsets,
                               EndIt end_offsets, int begin_bit = 0, int end_bit = (int)(sizeof(K) * 8),
                               cudaStream_t stream = 0) {
    size_t need = emcsim_temp_bytes(num_items, num_segments, sizeof(K) + sizeof(V));
    if (!d_temp) {
      temp_bytes = need;
      return cudaSuccess;
    }
    if (num_items < 0 || num_segments < 0 || temp_bytes < need || begin_bit < 0 ||
        end_bit > (int)(8 * sizeof(K)) || begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    if (num_items == 0 || num_segments == 0) return cudaSuccess;
    size_t kb = sizeof(K) * (size_t)num_items, vb = sizeof(V) * (size_t)num_items;
    if ((const char *)keys_in < (const char *)keys_out + kb && (const char *)keys_out < (const char *)keys_in + kb)
      return cudaErrorInvalidValue;
    cudaError_t e = ::emcsim::check_device_range(d_temp, need, "SortPairs temporary storage");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(keys_in, kb, "SortPairs keys_in");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(keys_out, kb, "SortPairs keys_out");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(vals_in, vb, "SortPairs values_in");
    if (e == cudaSuccess) e = ::emcsim::check_device_range(vals_out, vb, "SortPairs values_out");
    if (e != cudaSuccess) return e;
    return ::emcsim::submit_fn(stream, "cub::DeviceSegmentedRadixSort::SortPairs", [=]() {
      ::emcsim::poison_scratch(d_temp, need);
      for (int s = 0; s < num_segments; s++) {
        long long b = (long long)begin_offsets[s], en = (long long)end_offsets[s];
        if (b < 0 || en > num_items || en <= b) continue;
        std::vector<std::pair<K, V>> seg;
        for (long long i = b; i < en; i++) seg.push_back({keys_in[i], vals_in[i]});
        std::stable_sort(seg.begin(), seg.end(), [&](const std::pair<K, V> &x, const std::pair<K, V> &y) {
          return emcsim_digits(x.first, begin_bit, end_bit) < emcsim_digits(y.first, begin_bit, end_bit);
        });
        for (long long i = b; i < en; i++) {
          keys_out[i] = seg[(size_t)(i - b)].first;
          vals_out[i] = seg[(size_t)(i - b)].second;
        }
      }
    });
  }
};
}  // namespace cub
#endif
