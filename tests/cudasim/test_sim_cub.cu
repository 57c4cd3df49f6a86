/*
 * test_sim_cub.cu: the model's CUB (cuda/sim/README.md, "CUB" and "Threads"): BlockReduce,
 * BlockScan and WarpScan built from the model's barriers, with CUB's results (BlockReduce's
 * defined in thread 0 only); TempStorage reused without a __syncthreads gives wrong results;
 * DeviceScan and DeviceSegmentedRadixSort / DeviceRadixSort with their results, stability and
 * CUB's temporary-storage protocol.
 */
#include <cub/cub.cuh>

#include <algorithm>
#include <vector>

#include "cudasim_test.h"

/* ================================================================ block and warp */

#define BR_THREADS 128

__global__ void k_block_reduce(const int *in, int *sum_out, int *max_out, int *partial_out) {
  typedef cub::BlockReduce<int, BR_THREADS> BR;
  __shared__ typename BR::TempStorage tmp;
  int v = in[blockIdx.x * BR_THREADS + threadIdx.x];
  int sum = BR(tmp).Sum(v);
  __syncthreads(); /* TempStorage reused: CUB's rule */
  int mx = BR(tmp).Reduce(v, cub::Max());
  __syncthreads();
  int partial = BR(tmp).Sum(v, 10); /* the first 10 threads' inputs */
  sum_out[blockIdx.x * BR_THREADS + threadIdx.x] = sum;
  max_out[blockIdx.x * BR_THREADS + threadIdx.x] = mx;
  partial_out[blockIdx.x * BR_THREADS + threadIdx.x] = partial;
}

START_TEST(block_reduce_gives_thread_0_the_result) {
  const int blocks = 3, n = blocks * BR_THREADS;
  std::vector<int> h(n), sum(n), mx(n), part(n);
  for (int i = 0; i < n; i++) h[i] = (i * 37) % 101 - 50;
  int *din = dev_alloc<int>(n), *ds = dev_alloc<int>(n), *dm = dev_alloc<int>(n), *dp = dev_alloc<int>(n);
  to_dev(din, h.data(), n);
  CU_OK(sim_launch("k_block_reduce", blocks, BR_THREADS, 0, k_block_reduce, (const int *)din, ds, dm, dp));
  CU_OK(cudaDeviceSynchronize());
  to_host(sum.data(), ds, n);
  to_host(mx.data(), dm, n);
  to_host(part.data(), dp, n);
  for (int b = 0; b < blocks; b++) {
    int s = 0, m = -1000, p = 0;
    for (int t = 0; t < BR_THREADS; t++) {
      s += h[b * BR_THREADS + t];
      m = std::max(m, h[b * BR_THREADS + t]);
      if (t < 10) p += h[b * BR_THREADS + t];
    }
    ck_assert_int_eq(sum[b * BR_THREADS], s);
    ck_assert_int_eq(mx[b * BR_THREADS], m);
    ck_assert_int_eq(part[b * BR_THREADS], p);
    /* the other threads' results are undefined in CUB: the model gives them the poison */
    for (int t = 1; t < BR_THREADS; t++) {
      ck_assert_msg((unsigned)sum[b * BR_THREADS + t] == SIM_POISON_SHARED, "block %d thread %d got a defined sum", b, t);
      ck_assert_msg((unsigned)mx[b * BR_THREADS + t] == SIM_POISON_SHARED, "block %d thread %d got a defined max", b, t);
    }
  }
  CU_OK(cudaFree(din));
  CU_OK(cudaFree(ds));
  CU_OK(cudaFree(dm));
  CU_OK(cudaFree(dp));
}
END_TEST

/* Two reductions on one TempStorage, with or without the __syncthreads between them. */
__global__ void k_reduce_twice(int *out, int with_barrier) {
  typedef cub::BlockReduce<int, 64> BR;
  __shared__ typename BR::TempStorage tmp;
  int a = BR(tmp).Sum(1);
  if (with_barrier) __syncthreads();
  int b = BR(tmp).Sum(1000);
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = a;
    out[blockIdx.x * 2 + 1] = b;
  }
}

START_TEST(block_reduce_temp_storage_reuse_needs_a_barrier) {
  const int blocks = 8;
  int *d = dev_alloc<int>(2 * blocks), h[16];
  CU_OK(sim_launch("k_reduce_twice", blocks, 64, 0, k_reduce_twice, d, 1));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 2 * blocks);
  for (int b = 0; b < blocks; b++) {
    ck_assert_int_eq(h[2 * b], 64);
    ck_assert_int_eq(h[2 * b + 1], 64000);
  }
  CU_OK(sim_launch("k_reduce_twice_racy", blocks, 64, 0, k_reduce_twice, d, 0));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 2 * blocks);
  /* thread 0 sums the first reduction's slots after the barrier; every thread that runs before
   * it has already overwritten its slot with the second reduction's input. Thread 0 runs first
   * in a block with probability 1/64 (seeded order): over 8 blocks some block must be wrong. */
  int wrong = 0;
  for (int b = 0; b < blocks; b++) wrong += h[2 * b] != 64;
  ck_assert_msg(wrong > 0, "TempStorage reused without __syncthreads gave the right sum in every block");
  CU_OK(cudaFree(d));
}
END_TEST

/* CUB's BlockReduce checks the block's size against its template size. */
__global__ void k_reduce_wrong_size(int *out) {
  typedef cub::BlockReduce<int, 64> BR;
  __shared__ typename BR::TempStorage tmp;
  *out = BR(tmp).Sum(1);
}

START_TEST(block_reduce_of_the_wrong_size_faults) {
  int *d = dev_alloc<int>(1);
  CU_OK(sim_launch("k_reduce_wrong_size", 1, 32, 0, k_reduce_wrong_size, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "cub::BlockReduce", "k_reduce_wrong_size",
               "template size");
  CU_OK(cudaFree(d));
}
END_TEST

#define BS_THREADS 96

__global__ void k_block_scan(const int *in, int *ex, int *inc, int *agg) {
  typedef cub::BlockScan<int, BS_THREADS> BS;
  __shared__ typename BS::TempStorage tmp;
  int v = in[threadIdx.x], e, i, a;
  BS(tmp).ExclusiveSum(v, e, a);
  __syncthreads();
  BS(tmp).InclusiveSum(v, i);
  ex[threadIdx.x] = e;
  inc[threadIdx.x] = i;
  agg[threadIdx.x] = a;
}

START_TEST(block_scan_results) {
  int h[BS_THREADS], ex[BS_THREADS], inc[BS_THREADS], agg[BS_THREADS];
  for (int i = 0; i < BS_THREADS; i++) h[i] = (i * 7) % 13 - 3;
  int *din = dev_alloc<int>(BS_THREADS), *de = dev_alloc<int>(BS_THREADS), *di = dev_alloc<int>(BS_THREADS),
      *da = dev_alloc<int>(BS_THREADS);
  to_dev(din, h, BS_THREADS);
  CU_OK(sim_launch("k_block_scan", 1, BS_THREADS, 0, k_block_scan, (const int *)din, de, di, da));
  CU_OK(cudaDeviceSynchronize());
  to_host(ex, de, BS_THREADS);
  to_host(inc, di, BS_THREADS);
  to_host(agg, da, BS_THREADS);
  int acc = 0, total = 0;
  for (int i = 0; i < BS_THREADS; i++) total += h[i];
  for (int i = 0; i < BS_THREADS; i++) {
    ck_assert_int_eq(ex[i], acc);
    acc += h[i];
    ck_assert_int_eq(inc[i], acc);
    ck_assert_int_eq(agg[i], total); /* every thread gets the block aggregate */
  }
  CU_OK(cudaFree(din));
  CU_OK(cudaFree(de));
  CU_OK(cudaFree(di));
  CU_OK(cudaFree(da));
}
END_TEST

__global__ void k_warp_scan(const int *in, int *inc, int *ex, int *agg) {
  typedef cub::WarpScan<int> WS;
  __shared__ typename WS::TempStorage tmp[2];
  unsigned w = threadIdx.x / 32u;
  int v = in[threadIdx.x], i, e, a;
  WS(tmp[w]).InclusiveSum(v, i, a);
  WS(tmp[w]).ExclusiveSum(v, e);
  inc[threadIdx.x] = i;
  ex[threadIdx.x] = e;
  agg[threadIdx.x] = a;
}

START_TEST(warp_scan_results) {
  int h[64], inc[64], ex[64], agg[64];
  for (int i = 0; i < 64; i++) h[i] = i % 5 + (i >= 32 ? 100 : 0);
  int *din = dev_alloc<int>(64), *di = dev_alloc<int>(64), *de = dev_alloc<int>(64), *da = dev_alloc<int>(64);
  to_dev(din, h, 64);
  CU_OK(sim_launch("k_warp_scan", 1, 64, 0, k_warp_scan, (const int *)din, di, de, da));
  CU_OK(cudaDeviceSynchronize());
  to_host(inc, di, 64);
  to_host(ex, de, 64);
  to_host(agg, da, 64);
  for (int w = 0; w < 2; w++) {
    int acc = 0, total = 0;
    for (int l = 0; l < 32; l++) total += h[w * 32 + l];
    for (int l = 0; l < 32; l++) {
      ck_assert_int_eq(ex[w * 32 + l], acc);
      acc += h[w * 32 + l];
      ck_assert_int_eq(inc[w * 32 + l], acc);
      ck_assert_int_eq(agg[w * 32 + l], total);
    }
  }
  CU_OK(cudaFree(din));
  CU_OK(cudaFree(di));
  CU_OK(cudaFree(de));
  CU_OK(cudaFree(da));
}
END_TEST

/* ================================================================ device-wide */

START_TEST(device_scan_results_and_temp_storage) {
  const int n = 10000;
  std::vector<unsigned> h(n), out(n);
  for (int i = 0; i < n; i++) h[i] = (unsigned)(i % 7);
  unsigned *din = dev_alloc<unsigned>(n), *dout = dev_alloc<unsigned>(n);
  to_dev(din, h.data(), n);
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t bytes = 0;
  CU_OK(cub::DeviceScan::ExclusiveSum(NULL, bytes, din, dout, n, s)); /* sizes, enqueues nothing */
  ck_assert_uint_gt(bytes, 0);
  unsigned char *tmp = NULL;
  CU_OK(cudaMalloc(&tmp, bytes));
  CU_OK(cudaMemset(tmp, 0, bytes));
  /* too small a buffer */
  size_t small = bytes - 1;
  CU_ERR(cudaErrorInvalidValue, cub::DeviceScan::ExclusiveSum(tmp, small, din, dout, n, s));
  /* a host pointer where device memory belongs */
  CU_ERR(cudaErrorInvalidValue, cub::DeviceScan::ExclusiveSum(tmp, bytes, h.data(), dout, n, s));
  (void)cudaGetLastError();
  CU_OK(cub::DeviceScan::ExclusiveSum(tmp, bytes, din, dout, n, s));
  CU_OK(cudaStreamSynchronize(s));
  to_host(out.data(), dout, n);
  unsigned acc = 0;
  for (int i = 0; i < n; i++) {
    ck_assert_uint_eq(out[i], acc);
    acc += h[i];
  }
  /* the scratch it was given is overwritten when it runs */
  std::vector<unsigned char> t(bytes);
  to_host(t.data(), tmp, bytes);
  for (size_t i = 0; i < bytes; i++) ck_assert_msg(t[i] == 0xCB, "scratch byte %zu is 0x%02x after the scan", i, t[i]);
  /* stream order: the result is there only after the stream's work ran */
  CU_OK(cub::DeviceScan::InclusiveSum(tmp, bytes, din, dout, n, s));
  CU_OK(cudaStreamSynchronize(s));
  to_host(out.data(), dout, n);
  acc = 0;
  for (int i = 0; i < n; i++) {
    acc += h[i];
    ck_assert_uint_eq(out[i], acc);
  }
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFree(tmp));
  CU_OK(cudaFree(din));
  CU_OK(cudaFree(dout));
}
END_TEST

START_TEST(segmented_radix_sort_is_stable_by_the_bits_asked) {
  const int n = 400, segs = 3;
  int begin[segs] = {0, 100, 300}, end[segs] = {100, 250, 400}; /* 250..299 in no segment */
  std::vector<unsigned long long> k(n), ko(n);
  std::vector<unsigned> v(n), vo(n);
  for (int i = 0; i < n; i++) {
    k[i] = ((unsigned long long)(i * 7919 % 23) << 4) | (unsigned long long)(i % 3) | (1ull << 50);
    v[i] = (unsigned)i;
  }
  unsigned long long *dk = dev_alloc<unsigned long long>(n), *dko = dev_alloc<unsigned long long>(n);
  unsigned *dv = dev_alloc<unsigned>(n), *dvo = dev_alloc<unsigned>(n);
  int *db = dev_alloc<int>(segs), *de = dev_alloc<int>(segs);
  to_dev(dk, k.data(), n);
  to_dev(dv, v.data(), n);
  to_dev(db, begin, segs);
  to_dev(de, end, segs);
  for (int pass = 0; pass < 2; pass++) {
    /* pass 0: the whole key; pass 1: bits [0, 4) only */
    int bb = 0, eb = pass == 0 ? 64 : 4;
    CU_OK(cudaMemset(dko, 0x77, n * sizeof(unsigned long long)));
    CU_OK(cudaMemset(dvo, 0x77, n * sizeof(unsigned)));
    size_t bytes = 0;
    CU_OK(cub::DeviceSegmentedRadixSort::SortPairs(NULL, bytes, dk, dko, dv, dvo, n, segs, db, de, bb, eb));
    unsigned char *tmp = NULL;
    CU_OK(cudaMalloc(&tmp, bytes));
    size_t small = bytes / 2;
    CU_ERR(cudaErrorInvalidValue, cub::DeviceSegmentedRadixSort::SortPairs(tmp, small, dk, dko, dv, dvo, n, segs, db, de, bb, eb));
    CU_ERR(cudaErrorInvalidValue, cub::DeviceSegmentedRadixSort::SortPairs(tmp, bytes, dk, dk + 1, dv, dvo, n, segs, db, de, bb, eb));
    (void)cudaGetLastError();
    CU_OK(cub::DeviceSegmentedRadixSort::SortPairs(tmp, bytes, dk, dko, dv, dvo, n, segs, db, de, bb, eb));
    CU_OK(cudaDeviceSynchronize());
    to_host(ko.data(), dko, n);
    to_host(vo.data(), dvo, n);
    unsigned long long mask = eb == 64 ? ~0ull : (1ull << eb) - 1;
    for (int s = 0; s < segs; s++) {
      /* the expected order: a stable sort of the segment by the bits */
      std::vector<int> idx;
      for (int i = begin[s]; i < end[s]; i++) idx.push_back(i);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return (k[a] & mask) < (k[b] & mask); });
      for (int i = begin[s]; i < end[s]; i++) {
        int want = idx[i - begin[s]];
        ck_assert_msg(ko[i] == k[want] && vo[i] == (unsigned)want, "pass %d segment %d position %d: key 0x%llx value %u, "
                      "expected key 0x%llx value %d", pass, s, i, ko[i], vo[i], k[want], want);
      }
    }
    for (int i = 250; i < 300; i++) {
      ck_assert_msg(ko[i] == 0x7777777777777777ull && vo[i] == 0x77777777u, "position %d outside every segment was written", i);
    }
    CU_OK(cudaFree(tmp));
  }
  /* DeviceRadixSort: one segment */
  size_t bytes = 0;
  CU_OK(cub::DeviceRadixSort::SortPairs(NULL, bytes, dk, dko, dv, dvo, n));
  unsigned char *tmp = NULL;
  CU_OK(cudaMalloc(&tmp, bytes));
  CU_OK(cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dko, dv, dvo, n));
  CU_OK(cudaDeviceSynchronize());
  to_host(ko.data(), dko, n);
  to_host(vo.data(), dvo, n);
  for (int i = 1; i < n; i++) {
    ck_assert(ko[i - 1] <= ko[i]);
    if (ko[i - 1] == ko[i]) ck_assert_msg(vo[i - 1] < vo[i], "equal keys out of their input order at %d", i);
    ck_assert(k[vo[i]] == ko[i]);
  }
  CU_OK(cudaFree(tmp));
  CU_OK(cudaFree(dk));
  CU_OK(cudaFree(dko));
  CU_OK(cudaFree(dv));
  CU_OK(cudaFree(dvo));
  CU_OK(cudaFree(db));
  CU_OK(cudaFree(de));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_cub");
  TCase *tc = sim_tcase(s, "block");
  tcase_add_test(tc, block_reduce_gives_thread_0_the_result);
  tcase_add_test(tc, block_reduce_temp_storage_reuse_needs_a_barrier);
  tcase_add_test(tc, block_reduce_of_the_wrong_size_faults);
  tcase_add_test(tc, block_scan_results);
  tcase_add_test(tc, warp_scan_results);
  tc = sim_tcase(s, "device");
  tcase_add_test(tc, device_scan_results_and_temp_storage);
  tcase_add_test(tc, segmented_radix_sort_is_stable_by_the_bits_asked);
  return sim_run(s);
}
