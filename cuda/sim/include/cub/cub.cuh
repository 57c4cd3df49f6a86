/*
 * cub/cub.cuh: the CPU model's CUB: the algorithms cuda/ calls, with CUB's interfaces, results
 * and temporary-storage protocol (a first call with d_temp_storage == NULL sizes it; a buffer
 * smaller than that size is an error; the model scribbles over the buffer it was given).
 */
#ifndef EMCSIM_CUB_CUH
#define EMCSIM_CUB_CUH
#include "cub/block/block_reduce.cuh"
#include "cub/block/block_scan.cuh"
#include "cub/device/device_radix_sort.cuh"
#include "cub/device/device_scan.cuh"
#include "cub/device/device_segmented_radix_sort.cuh"
#include "cub/warp/warp_scan.cuh"
#endif
