/*
 * test_sim_devices.cu: the model with several devices, or none (EMC_CUDASIM_DEVICES; README,
 * "Settings" and "Memory"). With two: a kernel of device 0 may reach device 1's memory only
 * after cudaDeviceEnablePeerAccess, and host memory pinned for device 1 only when it was
 * pinned portable; faults are sticky per device. With none: cudaGetDeviceCount fails like on a
 * machine without a GPU.
 */
#include <cub/cub.cuh>

#include "cudasim_test.h"

__global__ void k_inc(int *p) { atomicAdd(p, 1); }

static int device_count(void) {
  int n = -1;
  cudaError_t e = cudaGetDeviceCount(&n);
  return e == cudaSuccess ? n : (e == cudaErrorNoDevice ? 0 : -1);
}

START_TEST(no_device) {
  int n = -1;
  void *p = NULL;
  CU_ERR(cudaErrorNoDevice, cudaGetDeviceCount(&n));
  ck_assert_int_eq(n, 0);
  CU_ERR(cudaErrorNoDevice, cudaMalloc(&p, 16));
  CU_ERR(cudaErrorInvalidDevice, cudaSetDevice(0));
}
END_TEST

START_TEST(peer_memory_needs_peer_access) {
  int *mem1 = NULL, can = 0, h = 0;
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaMalloc(&mem1, sizeof(int)));
  CU_OK(cudaMemset(mem1, 0, sizeof(int)));
  cudaPointerAttributes a;
  CU_OK(cudaPointerGetAttributes(&a, mem1));
  ck_assert_int_eq(a.type, cudaMemoryTypeDevice);
  ck_assert_int_eq(a.device, 1);
  CU_OK(cudaSetDevice(0));
  CU_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
  ck_assert_int_eq(can, 1);
  CU_OK(cudaDeviceCanAccessPeer(&can, 0, 0));
  ck_assert_int_eq(can, 0);
  /* break: device 0's kernel on device 1's memory */
  CU_OK(sim_launch("k_inc", 1, 32, 0, k_inc, mem1));
  cudaError_t e = cudaDeviceSynchronize();
  /* the fault is device 0's: device 1 still works */
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaMemcpy(&h, mem1, sizeof(int), cudaMemcpyDeviceToHost));
  ck_assert_int_eq(h, 0);
  (void)cudaSetDevice(0); /* may return device 0's sticky error ("errors of previous launches") */
  EXPECT_FAULT(e, cudaErrorIllegalAddress, "illegal address", "k_inc", "memory of device 1, and peer access to it is not enabled");
  /* keep: with peer access */
  CU_OK(cudaDeviceEnablePeerAccess(1, 0));
  CU_ERR(cudaErrorPeerAccessAlreadyEnabled, cudaDeviceEnablePeerAccess(1, 0));
  (void)cudaGetLastError();
  CU_OK(sim_launch("k_inc", 1, 32, 0, k_inc, mem1));
  CU_OK(cudaDeviceSynchronize());
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaMemcpy(&h, mem1, sizeof(int), cudaMemcpyDeviceToHost));
  ck_assert_int_eq(h, 32);
  /* and without it again */
  CU_OK(cudaSetDevice(0));
  CU_OK(cudaDeviceDisablePeerAccess(1));
  CU_OK(sim_launch("k_inc", 1, 32, 0, k_inc, mem1));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_inc", "memory of device 1");
  /* CUB refuses another device's memory */
  size_t bytes = 0;
  int *out0 = dev_alloc<int>(1);
  CU_OK(cub::DeviceScan::ExclusiveSum(NULL, bytes, mem1, out0, 1));
  void *tmp = NULL;
  CU_OK(cudaMalloc(&tmp, bytes));
  CU_ERR(cudaErrorInvalidValue, cub::DeviceScan::ExclusiveSum(tmp, bytes, mem1, out0, 1));
  (void)cudaGetLastError();
  CU_OK(cudaFree(tmp));
  CU_OK(cudaFree(out0));
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaFree(mem1));
  CU_OK(cudaSetDevice(0));
}
END_TEST

START_TEST(pinned_memory_of_another_device_needs_portable) {
  int *plain = NULL, *portable = NULL;
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaHostAlloc(&plain, sizeof(int), cudaHostAllocDefault));
  CU_OK(cudaHostAlloc(&portable, sizeof(int), cudaHostAllocPortable));
  *plain = 0;
  *portable = 0;
  CU_OK(cudaSetDevice(0));
  CU_OK(sim_launch("k_inc", 1, 8, 0, k_inc, portable));
  CU_OK(cudaDeviceSynchronize());
  ck_assert_int_eq(*portable, 8);
  CU_OK(sim_launch("k_inc", 1, 8, 0, k_inc, plain));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "illegal address", "k_inc",
               "pinned for device 1 without the portable flag");
  ck_assert_int_eq(*plain, 0);
  CU_OK(cudaFreeHost(plain));
  CU_OK(cudaFreeHost(portable));
}
END_TEST

START_TEST(device_numbers) {
  int d = -1;
  CU_ERR(cudaErrorInvalidDevice, cudaSetDevice(2));
  CU_ERR(cudaErrorInvalidDevice, cudaSetDevice(-1));
  (void)cudaGetLastError();
  CU_OK(cudaSetDevice(1));
  CU_OK(cudaGetDevice(&d));
  ck_assert_int_eq(d, 1);
  CU_OK(cudaSetDevice(0));
}
END_TEST

int main(void) {
  int n = device_count();
  printf("test_sim_devices: %d devices\n", n);
  Suite *s = suite_create("cudasim_devices");
  TCase *tc = sim_tcase(s, "devices");
  if (n == 0) {
    tcase_add_test(tc, no_device);
  } else if (n >= 2) {
    tcase_add_test(tc, device_numbers);
    tcase_add_test(tc, peer_memory_needs_peer_access);
    tcase_add_test(tc, pinned_memory_of_another_device_needs_portable);
  } else {
    fprintf(stderr, "test_sim_devices: run with EMC_CUDASIM_DEVICES=0 or 2 (got %d devices)\n", n);
    return 1;
  }
  return sim_run(s);
}
