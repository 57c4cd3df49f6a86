/*
 * test_sim_memory.cu: the model's memory rules (cuda/sim/README.md, "Memory"): the poison
 * bytes of fresh and freed memory, cudaPointerGetAttributes, cudaHostRegister's page rule, the
 * reachability check of every instrumented access (atomics, emcsim::ld/st, fences), copies and
 * their directions, and atomics from many threads.
 */
#include <malloc.h>

#include "cudasim_test.h"

/* ================================================================ poison */

START_TEST(fresh_memory_is_poisoned) {
  unsigned char h[1000];
  unsigned char *d = NULL, *pinned = NULL, *host = NULL, *dasync = NULL;
  CU_OK(cudaMalloc(&d, sizeof h));
  to_host(h, d, sizeof h);
  for (size_t i = 0; i < sizeof h; i++) ck_assert_msg(h[i] == 0xCB, "cudaMalloc byte %zu is 0x%02x", i, h[i]);
  CU_OK(cudaMallocAsync(&dasync, sizeof h, 0));
  CU_OK(cudaStreamSynchronize(0));
  to_host(h, dasync, sizeof h);
  for (size_t i = 0; i < sizeof h; i++) ck_assert_msg(h[i] == 0xCB, "cudaMallocAsync byte %zu is 0x%02x", i, h[i]);
  CU_OK(cudaHostAlloc(&pinned, 1000, cudaHostAllocDefault));
  CU_OK(cudaMallocHost(&host, 1000));
  for (size_t i = 0; i < 1000; i++) {
    ck_assert_msg(pinned[i] == 0xCD, "cudaHostAlloc byte %zu is 0x%02x", i, pinned[i]);
    ck_assert_msg(host[i] == 0xCD, "cudaMallocHost byte %zu is 0x%02x", i, host[i]);
  }
  CU_OK(cudaFree(d));
  CU_OK(cudaFreeAsync(dasync, 0));
  CU_OK(cudaFreeHost(pinned));
  CU_OK(cudaFreeHost(host));
}
END_TEST

/* Freed memory is filled with 0xDF before it goes. Reading it afterwards is a use after free:
 * only in a build without AddressSanitizer, on glibc (whose free of a small chunk writes only
 * the first 16 bytes of the chunk and the last 8, which the check skips), and not when
 * MALLOC_PERTURB_ makes glibc scribble over freed memory itself. */
START_TEST(freed_memory_is_poisoned) {
#if defined(SIM_ASAN) || !defined(__GLIBC__)
  printf("freed_memory_is_poisoned: skipped (AddressSanitizer or not glibc: the read is a use after free)\n");
#else
  if (getenv("MALLOC_PERTURB_")) {
    printf("freed_memory_is_poisoned: skipped (MALLOC_PERTURB_ is set)\n");
    return;
  }
  unsigned char *d = NULL;
  CU_OK(cudaMalloc(&d, 512));
  CU_OK(cudaMemset(d, 0x11, 512));
  CU_OK(cudaFree(d));
  volatile unsigned char *v = d;
  for (size_t i = 32; i < 512 - 32; i++) ck_assert_msg(v[i] == SIM_POISON_FREED, "freed byte %zu is 0x%02x", i, v[i]);
#endif
}
END_TEST

/* ================================================================ pointer attributes */

START_TEST(pointer_attributes_classify_memory) {
  cudaPointerAttributes a;
  char *d = NULL, *pinned = NULL, *reg = NULL, *pageable = (char *)malloc(64);
  CU_OK(cudaMalloc(&d, 1024));
  CU_OK(cudaHostAlloc(&pinned, 1024, cudaHostAllocDefault));
  ck_assert_int_eq(posix_memalign((void **)&reg, 4096, 8192), 0);
  CU_OK(cudaHostRegister(reg, 8192, cudaHostRegisterDefault));

  CU_OK(cudaPointerGetAttributes(&a, d + 100)); /* an interior pointer */
  ck_assert_int_eq(a.type, cudaMemoryTypeDevice);
  ck_assert_int_eq(a.device, 0);
  ck_assert_ptr_eq(a.devicePointer, d + 100);
  ck_assert_ptr_null(a.hostPointer);

  CU_OK(cudaPointerGetAttributes(&a, pinned + 8));
  ck_assert_int_eq(a.type, cudaMemoryTypeHost);
  ck_assert_int_eq(a.device, 0);
  ck_assert_ptr_eq(a.devicePointer, pinned + 8); /* unified addressing: the same address */
  ck_assert_ptr_eq(a.hostPointer, pinned + 8);

  CU_OK(cudaPointerGetAttributes(&a, reg + 5000));
  ck_assert_int_eq(a.type, cudaMemoryTypeHost);
  ck_assert_ptr_eq(a.devicePointer, reg + 5000);
  ck_assert_ptr_eq(a.hostPointer, reg + 5000);

  CU_OK(cudaPointerGetAttributes(&a, pageable));
  ck_assert_int_eq(a.type, cudaMemoryTypeUnregistered);
  ck_assert_int_eq(a.device, -2); /* cudaInvalidDeviceId */
  ck_assert_ptr_null(a.devicePointer);
  ck_assert_ptr_eq(a.hostPointer, pageable);

  /* cudaHostGetDevicePointer: pinned or registered memory only */
  void *dp = NULL;
  CU_OK(cudaHostGetDevicePointer(&dp, pinned, 0));
  ck_assert_ptr_eq(dp, pinned);
  CU_OK(cudaHostGetDevicePointer(&dp, reg + 1, 0));
  ck_assert_ptr_eq(dp, reg + 1);
  CU_ERR(cudaErrorInvalidValue, cudaHostGetDevicePointer(&dp, pageable, 0));
  CU_ERR(cudaErrorInvalidValue, cudaHostGetDevicePointer(&dp, d, 0));
  (void)cudaGetLastError();

  CU_OK(cudaHostUnregister(reg));
  CU_OK(cudaPointerGetAttributes(&a, reg));
  ck_assert_int_eq(a.type, cudaMemoryTypeUnregistered);
  CU_OK(cudaFree(d));
  CU_OK(cudaFreeHost(pinned));
  free(reg);
  free(pageable);
}
END_TEST

/* ================================================================ cudaHostRegister */

START_TEST(host_register_refuses_a_shared_page) {
  char *buf = NULL, *pinned = NULL;
  ck_assert_int_eq(posix_memalign((void **)&buf, 4096, 4 * 4096), 0);
  CU_OK(cudaHostRegister(buf, 100, 0));                    /* page 0 */
  CU_ERR(cudaErrorHostMemoryAlreadyRegistered, cudaHostRegister(buf + 200, 100, 0)); /* page 0 again */
  CU_OK(cudaHostRegister(buf + 4096 + 8, 100, 0));         /* page 1 */
  CU_ERR(cudaErrorHostMemoryAlreadyRegistered, cudaHostRegister(buf + 2 * 4096 - 8, 16, 0)); /* pages 1-2 */
  CU_OK(cudaHostRegister(buf + 2 * 4096, 4096, 0));        /* page 2 exactly */
  /* a failed registration is not sticky */
  (void)cudaGetLastError();
  CU_OK(cudaDeviceSynchronize());
  /* pinned memory counts as registered, by page */
  CU_OK(cudaHostAlloc(&pinned, 100, 0));
  CU_ERR(cudaErrorHostMemoryAlreadyRegistered, cudaHostRegister(pinned + 50, 10, 0));
  /* unregistering takes the start of a registered range */
  CU_ERR(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(buf + 1));
  CU_ERR(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(pinned));
  CU_OK(cudaHostUnregister(buf));
  CU_ERR(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(buf));
  CU_OK(cudaHostRegister(buf + 200, 100, 0)); /* page 0 is free again */
  CU_OK(cudaHostUnregister(buf + 200));
  CU_OK(cudaHostUnregister(buf + 4096 + 8));
  CU_OK(cudaHostUnregister(buf + 2 * 4096));
  (void)cudaGetLastError();
  CU_OK(cudaFreeHost(pinned));
  free(buf);
}
END_TEST

/* ================================================================ reachability of accesses */

__global__ void k_atomic_inc(int *p) { atomicAdd(p, 1); }
__global__ void k_ld_relaxed(const int *p, int *out) { *out = emcsim::ld(p, __ATOMIC_RELAXED, "x"); }
__global__ void k_st_release(int *p) { emcsim::st(p, 42, __ATOMIC_RELEASE, "y"); }

START_TEST(kernel_reaches_device_pinned_registered_memory) {
  int *d = dev_alloc<int>(4), *pinned = NULL, *reg = NULL, *out = dev_alloc<int>(1), h;
  CU_OK(cudaMemset(d, 0, 4 * sizeof(int)));
  CU_OK(cudaHostAlloc(&pinned, sizeof(int), 0));
  ck_assert_int_eq(posix_memalign((void **)&reg, 4096, 4096), 0);
  CU_OK(cudaHostRegister(reg, 4096, 0));
  *pinned = 10;
  *reg = 20;
  CU_OK(sim_launch("k_atomic_inc", 2, 32, 0, k_atomic_inc, d + 3));
  CU_OK(sim_launch("k_atomic_inc", 1, 32, 0, k_atomic_inc, pinned));
  CU_OK(sim_launch("k_atomic_inc", 1, 32, 0, k_atomic_inc, reg));
  CU_OK(sim_launch("k_st_release", 1, 1, 0, k_st_release, d));
  CU_OK(sim_launch("k_ld_relaxed", 1, 1, 0, k_ld_relaxed, (const int *)d, out));
  CU_OK(cudaDeviceSynchronize());
  to_host(&h, d + 3, 1);
  ck_assert_int_eq(h, 64);
  ck_assert_int_eq(*pinned, 42);
  ck_assert_int_eq(*reg, 52);
  to_host(&h, out, 1);
  ck_assert_int_eq(h, 42);
  CU_OK(cudaHostUnregister(reg));
  CU_OK(cudaFreeHost(pinned));
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(out));
  free(reg);
}
END_TEST

START_TEST(kernel_on_pageable_memory_faults) {
  int *pageable = (int *)malloc(64), *out = dev_alloc<int>(1);
  pageable[0] = 7;
  CU_OK(sim_launch("k_atomic_inc", 1, 1, 0, k_atomic_inc, pageable));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_atomic_inc",
               "pageable host memory");
  ck_assert_int_eq(pageable[0], 7); /* the access did not happen */
  CU_OK(sim_launch("k_ld_relaxed", 1, 1, 0, k_ld_relaxed, (const int *)pageable, out));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_ld_relaxed", "load of 4 bytes");
  CU_OK(cudaFree(out));
  free(pageable);
}
END_TEST

START_TEST(kernel_on_freed_or_past_the_end_faults) {
  int *d = dev_alloc<int>(64); /* 256 bytes: the allocation's whole extent */
  CU_OK(sim_launch("k_atomic_inc", 1, 1, 0, k_atomic_inc, d + 64));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_atomic_inc", NULL);
  CU_OK(cudaFree(d));
  /* a stale pointer: the check refuses it before the access (safe under AddressSanitizer) */
  CU_OK(sim_launch("k_atomic_inc", 1, 1, 0, k_atomic_inc, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_atomic_inc",
               "memory already freed");
}
END_TEST

/* A fault stops the kernel: its other threads and blocks do not run, and later work on the
 * device does not run either. */
__global__ void k_count_then_fault(int *count, int *bad) {
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(bad, 1); /* before it counts itself */
  atomicAdd(count, 1);
}

START_TEST(fault_stops_the_kernel_and_later_work) {
  int *count = dev_alloc<int>(1), *bad = (int *)malloc(sizeof(int)), h = -1;
  int *pinned = NULL;
  CU_OK(cudaHostAlloc(&pinned, sizeof(int), 0));
  *pinned = 5;
  CU_OK(cudaMemset(count, 0, sizeof(int)));
  CU_OK(sim_launch("k_count_then_fault", 64, 64, 0, k_count_then_fault, count, bad));
  /* after the fault: never runs. (Serial mode: the launch is accepted, the fault comes later;
   * concurrent mode: the fault may already be there, and the launch returns it.) */
  cudaError_t e = sim_launch("k_atomic_inc", 1, 1, 0, k_atomic_inc, pinned);
  ck_assert_msg(e == cudaSuccess || e == cudaErrorIllegalAddress, "the launch after the fault returned %s",
                cudaGetErrorName(e));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_count_then_fault", NULL);
  to_host(&h, count, 1);
  ck_assert_msg(h >= 0 && h < 64 * 64, "%d threads counted themselves although block 0 faulted first", h);
  ck_assert_int_eq(*pinned, 5);
  CU_OK(cudaFree(count));
  CU_OK(cudaFreeHost(pinned));
  free(bad);
}
END_TEST

/* ================================================================ copies */

START_TEST(copies_check_directions_and_ranges) {
  int *d = dev_alloc<int>(16), *d2 = dev_alloc<int>(16), h[16], *pinned = NULL;
  for (int i = 0; i < 16; i++) h[i] = i * i;
  CU_OK(cudaHostAlloc(&pinned, 16 * sizeof(int), 0));
  CU_OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  CU_OK(cudaMemcpy(d2, d, sizeof h, cudaMemcpyDeviceToDevice));
  CU_OK(cudaMemcpy(pinned, d2, sizeof h, cudaMemcpyDefault));
  for (int i = 0; i < 16; i++) ck_assert_int_eq(pinned[i], i * i);
  /* kinds that contradict the pointers */
  CU_ERR(cudaErrorInvalidMemcpyDirection, cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice));
  CU_ERR(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost));
  CU_ERR(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToDevice));
  CU_ERR(cudaErrorInvalidMemcpyDirection, cudaMemcpy(d, d2, sizeof h, cudaMemcpyHostToHost));
  /* past the end of a device allocation (64 bytes, rounded to 256) */
  CU_ERR(cudaErrorInvalidValue, cudaMemcpy(d, pinned, 257, cudaMemcpyHostToDevice));
  CU_ERR(cudaErrorInvalidValue, cudaMemset(d, 0, 257));
  CU_ERR(cudaErrorInvalidValue, cudaMemset(h, 0, sizeof h)); /* host memory */
  /* none of these is sticky */
  ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  CU_OK(cudaDeviceSynchronize());
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(d2));
  CU_OK(cudaFreeHost(pinned));
}
END_TEST

/* The device's memory is EMC_CUDASIM_MEM_MB (an H100's 80 GB): cudaMemGetInfo counts what is
 * allocated (in 256-byte units), and an allocation beyond what is free fails (not sticky). */
START_TEST(device_memory_is_bounded) {
  size_t free0, total, free1;
  void *p = NULL, *big = (void *)1;
  CU_OK(cudaMemGetInfo(&free0, &total));
  ck_assert_uint_eq(total, (size_t)81559 << 20);
  CU_OK(cudaMalloc(&p, 1000));
  CU_OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free0 - free1, 1024);
  CU_ERR(cudaErrorMemoryAllocation, cudaMalloc(&big, free1 + 1));
  ck_assert_int_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
  CU_OK(cudaFree(p));
  CU_OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free1, free0);
}
END_TEST

/* cudaFree waits for the device: work pending before it has run when it returns. */
__global__ void k_store_word(int *p, int v) { *p = v; }

START_TEST(free_waits_for_the_device) {
  int *pinned = NULL, *d = dev_alloc<int>(1);
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU_OK(cudaHostAlloc(&pinned, sizeof(int), 0));
  CU_OK(sim_launch("k_store_word", 1, 1, s, k_store_word, pinned, 31));
  CU_OK(cudaFree(d));
  ck_assert_int_eq(*pinned, 31);
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFreeHost(pinned));
}
END_TEST

/* A copy from pageable memory is staged at the call: the caller may reuse its buffer at once,
 * although (serial mode) the copy runs later. A copy into pageable memory waits for itself. */
START_TEST(pageable_copies_are_staged) {
  int *d = dev_alloc<int>(8), src[8], back[8];
  cudaStream_t s;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 8; i++) src[i] = 100 + i;
  CU_OK(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyHostToDevice, s));
  for (int i = 0; i < 8; i++) src[i] = -1;
  memset(back, 0, sizeof back);
  CU_OK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s)); /* waits for both */
  for (int i = 0; i < 8; i++) ck_assert_int_eq(back[i], 100 + i);
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ atomics */

struct Counters {
  unsigned add, sum, ormask, xormask, exch_seen;
  int max, min, sub;
  unsigned long long add64;
  unsigned inc, cas_count, local_ok;
  float fadd;
  double dadd;
};

__device__ unsigned g_device_counter; /* a __device__ variable: the program's globals are reachable */

__global__ void k_atomics(Counters *c, unsigned *exch_slot, unsigned *shared_totals) {
  __shared__ unsigned block_count;
  unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  atomicAdd(&block_count, 1u);
  atomicAdd(&c->add, 1u);
  atomicAdd(&c->sum, gid);
  atomicMax(&c->max, (int)gid);
  atomicMin(&c->min, (int)gid);
  atomicOr(&c->ormask, 1u << (gid % 32u));
  atomicXor(&c->xormask, gid);
  atomicSub(&c->sub, 2);
  atomicAdd(&c->add64, 1ull << 33);
  atomicInc(&c->inc, 99u); /* wraps to 0 after 99 */
  unsigned old = atomicExch(exch_slot, gid + 1u);
  if (old != 0) atomicAdd(&c->exch_seen, 1u);
  /* an increment by compare-and-swap */
  unsigned cur = c->cas_count, seen;
  while ((seen = atomicCAS(&c->cas_count, cur, cur + 1u)) != cur) cur = seen;
  atomicAdd(&c->fadd, 0.5f);
  atomicAdd(&c->dadd, 0.25);
  atomicAdd(&g_device_counter, 1u);
  unsigned mine = 0; /* the thread's own stack (local memory) is reachable */
  atomicAdd(&mine, 3u);
  if (mine == 3u) atomicAdd(&c->local_ok, 1u);
  __syncthreads();
  if (threadIdx.x == 0) shared_totals[blockIdx.x] = block_count;
}

__global__ void k_read_device_counter(unsigned *out) { *out = atomicAdd(&g_device_counter, 0u); }

START_TEST(atomics_from_many_threads) {
  const unsigned blocks = 64, threads = 256, n = blocks * threads;
  Counters h, *d = dev_alloc<Counters>(1);
  unsigned *slot = dev_alloc<unsigned>(1), *totals = dev_alloc<unsigned>(blocks), ht[64], dc, *ddc = dev_alloc<unsigned>(1);
  memset(&h, 0, sizeof h);
  h.max = -1;
  h.min = 1 << 30;
  h.sub = 0;
  to_dev(d, &h, 1);
  CU_OK(cudaMemset(slot, 0, sizeof(unsigned)));
  CU_OK(sim_launch("k_atomics", blocks, threads, 0, k_atomics, d, slot, totals));
  CU_OK(sim_launch("k_read_device_counter", 1, 1, 0, k_read_device_counter, ddc));
  CU_OK(cudaDeviceSynchronize());
  to_host(&h, d, 1);
  to_host(ht, totals, blocks);
  to_host(&dc, ddc, 1);
  unsigned xr = 0;
  for (unsigned i = 0; i < n; i++) xr ^= i;
  ck_assert_uint_eq(h.add, n);
  ck_assert_uint_eq(h.sum, n * (n - 1) / 2);
  ck_assert_int_eq(h.max, (int)n - 1);
  ck_assert_int_eq(h.min, 0);
  ck_assert_uint_eq(h.ormask, 0xffffffffu);
  ck_assert_uint_eq(h.xormask, xr);
  ck_assert_int_eq(h.sub, -2 * (int)n);
  ck_assert(h.add64 == (unsigned long long)n << 33);
  ck_assert_uint_eq(h.inc, n % 100u);
  ck_assert_uint_eq(h.exch_seen, n - 1);
  ck_assert_uint_eq(h.cas_count, n);
  ck_assert(h.fadd == 0.5f * (float)n); /* exact: sums of halves below 2^24 */
  ck_assert(h.dadd == 0.25 * n);
  ck_assert_uint_eq(dc, n);
  ck_assert_uint_eq(h.local_ok, n);
  for (unsigned b = 0; b < blocks; b++) ck_assert_uint_eq(ht[b], threads);
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(slot));
  CU_OK(cudaFree(totals));
  CU_OK(cudaFree(ddc));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_memory");
  TCase *tc = sim_tcase(s, "poison");
  tcase_add_test(tc, fresh_memory_is_poisoned);
  tcase_add_test(tc, freed_memory_is_poisoned);
  tc = sim_tcase(s, "attributes");
  tcase_add_test(tc, pointer_attributes_classify_memory);
  tcase_add_test(tc, host_register_refuses_a_shared_page);
  tc = sim_tcase(s, "access");
  tcase_add_test(tc, kernel_reaches_device_pinned_registered_memory);
  tcase_add_test(tc, kernel_on_pageable_memory_faults);
  tcase_add_test(tc, kernel_on_freed_or_past_the_end_faults);
  tcase_add_test(tc, fault_stops_the_kernel_and_later_work);
  tc = sim_tcase(s, "copies");
  tcase_add_test(tc, copies_check_directions_and_ranges);
  tcase_add_test(tc, pageable_copies_are_staged);
  tcase_add_test(tc, device_memory_is_bounded);
  tcase_add_test(tc, free_waits_for_the_device);
  tc = sim_tcase(s, "atomics");
  tcase_add_test(tc, atomics_from_many_threads);
  return sim_run(s);
}
