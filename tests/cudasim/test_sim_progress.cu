/*
 * test_sim_progress.cu: forward progress (cuda/sim/README.md, "Forward progress"). CUDA
 * guarantees no progress between kernels, between streams, or between a kernel and the host: a
 * kernel that waits for a state another kernel would make is a forward-progress violation, which
 * the model's watchdog reports (cudaErrorLaunchTimeout) instead of hanging. A thread may wait
 * for another thread of its own block that is running.
 *
 * Run three ways (tests/cudasim/CMakeLists.txt):
 *   serial mode, EMC_CUDASIM_WATCHDOG small   the violations are reported at once
 *   EMC_CUDASIM_MODE=concurrent               two streams' kernels really overlap: a kernel
 *                                             spinning on a flag that a kernel of another
 *                                             stream sets completes
 *   `test_sim_progress plain-spin` with EMC_CUDASIM_WATCHDOG_S=1: a spin on plain loads, which
 *                                             the model cannot count, ends the process (status
 *                                             124) with the report (never a hang)
 */
#include "cudasim_test.h"

static bool serial_mode() { return strcmp(emcsim_mode(), "serial") == 0; }

/* Spin until *flag is set, backing off; then record that it finished. */
__global__ void k_spin_wait(unsigned *flag, unsigned *done) {
  while (atomicAdd(flag, 0u) == 0u) __nanosleep(100);
  atomicExch(done, 1u);
}
__global__ void k_set_flag(unsigned *flag) { atomicExch(flag, 1u); }

START_TEST(wait_for_a_later_kernel_is_a_violation) {
  if (!serial_mode()) return; /* concurrent mode: the same outcome, only slower to reach */
  unsigned *flag = dev_alloc<unsigned>(2);
  emcsim_counters before, after;
  emcsim_get_counters(&before);
  CU_OK(cudaMemset(flag, 0, 2 * sizeof(unsigned)));
  CU_OK(sim_launch("k_spin_wait", 1, 1, 0, k_spin_wait, flag, flag + 1));
  CU_OK(sim_launch("k_set_flag", 1, 1, 0, k_set_flag, flag));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchTimeout, "forward-progress violation", "k_spin_wait",
               "EMC_CUDASIM_WATCHDOG");
  emcsim_get_counters(&after);
  ck_assert_uint_eq(after.violations, before.violations + 1);
  CU_OK(cudaFree(flag));
}
END_TEST

/* Kernel A on one stream spins on a flag that kernel B on another stream sets; the host waits
 * for A's stream. Serial mode: B never runs meanwhile (a violation). Concurrent mode: B runs on
 * its stream's thread at the same time, and A completes. */
START_TEST(wait_for_another_streams_kernel) {
  cudaStream_t sa, sb;
  unsigned *flag = dev_alloc<unsigned>(2), h[2];
  CU_OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  for (int round = 0; round < (serial_mode() ? 1 : 4); round++) {
    CU_OK(cudaMemset(flag, 0, 2 * sizeof(unsigned)));
    CU_OK(sim_launch("k_spin_wait", 1, 1, sa, k_spin_wait, flag, flag + 1));
    CU_OK(sim_launch("k_set_flag", 1, 1, sb, k_set_flag, flag));
    cudaError_t e = cudaStreamSynchronize(sa);
    if (serial_mode()) {
      EXPECT_FAULT(e, cudaErrorLaunchTimeout, "forward-progress violation", "k_spin_wait", "serial");
    } else {
      ck_assert_msg(e == cudaSuccess, "concurrent mode: the spinning kernel did not complete: %s (%s)",
                    cudaGetErrorName(e), emcsim_last_fault());
      CU_OK(cudaDeviceSynchronize());
      to_host(h, flag, 2);
      ck_assert_uint_eq(h[0], 1);
      ck_assert_uint_eq(h[1], 1);
    }
  }
  CU_OK(cudaStreamDestroy(sa));
  CU_OK(cudaStreamDestroy(sb));
  CU_OK(cudaFree(flag));
}
END_TEST

/* A thread waits for another thread of its block (in another warp), which finishes some work
 * first: it completes in every mode (the model preempts the spinning thread). */
__global__ void k_wait_in_block(unsigned *out) {
  __shared__ unsigned ready, value;
  if (threadIdx.x == 0) ready = 0;
  __syncthreads();
  if (threadIdx.x == 70) {
    unsigned v = 0;
    for (unsigned i = 0; i < 1000; i++) v += atomicAdd(&out[1], 1u) & 1u; /* instrumented work */
    value = v + 12345u;
    __threadfence_block();
    atomicExch(&ready, 1u);
  } else if (threadIdx.x == 3) {
    while (atomicAdd(&ready, 0u) == 0u) {
    } /* no back-off: the model still preempts it */
    __threadfence_block();
    out[0] = value;
  }
}

START_TEST(wait_for_a_thread_of_the_block_completes) {
  unsigned *d = dev_alloc<unsigned>(2), h[2];
  CU_OK(cudaMemset(d, 0, 2 * sizeof(unsigned)));
  CU_OK(sim_launch("k_wait_in_block", 1, 96, 0, k_wait_in_block, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 2);
  ck_assert_uint_eq(h[0], 500u + 12345u);
  ck_assert_uint_eq(h[1], 1000u);
  CU_OK(cudaFree(d));
}
END_TEST

/* A thread waits for a flag that another thread of its block sets only after a __syncthreads
 * the waiting thread never reaches: a deadlock inside the block, reported as a violation. */
__global__ void k_wait_behind_barrier(unsigned *flag) {
  if (threadIdx.x == 0) {
    while (atomicAdd(flag, 0u) == 0u) __nanosleep(100);
  } else {
    __syncthreads();
    atomicExch(flag, 1u);
  }
}

START_TEST(wait_behind_a_barrier_is_a_violation) {
  if (!serial_mode()) return;
  unsigned *flag = dev_alloc<unsigned>(1);
  CU_OK(cudaMemset(flag, 0, sizeof(unsigned)));
  CU_OK(sim_launch("k_wait_behind_barrier", 1, 64, 0, k_wait_behind_barrier, flag));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchTimeout, "forward-progress violation", "k_wait_behind_barrier",
               "thread (0,0,0)");
  CU_OK(cudaFree(flag));
}
END_TEST

/* Concurrent mode: producer and consumer streams ordered by an event, many times. */
__global__ void k_fill(unsigned *p, unsigned n, unsigned v) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v + i;
}
__global__ void k_check_fill(const unsigned *p, unsigned n, unsigned v, unsigned *bad) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (p[i] != v + i) atomicAdd(bad, 1u);
}

START_TEST(event_ordered_streams_are_correct) {
  const unsigned n = 4096;
  cudaStream_t prod, cons;
  cudaEvent_t e;
  unsigned *buf = dev_alloc<unsigned>(n), *bad = dev_alloc<unsigned>(1), hb = 1;
  CU_OK(cudaStreamCreateWithFlags(&prod, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&cons, cudaStreamNonBlocking));
  CU_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CU_OK(cudaMemset(bad, 0, sizeof(unsigned)));
  for (unsigned r = 0; r < 16; r++) {
    CU_OK(sim_launch("k_fill", 4, 128, prod, k_fill, buf, n, r * 100000u));
    CU_OK(cudaEventRecord(e, prod));
    CU_OK(cudaStreamWaitEvent(cons, e, 0));
    CU_OK(sim_launch("k_check_fill", 4, 128, cons, k_check_fill, (const unsigned *)buf, n, r * 100000u, bad));
    /* the next fill must not overwrite what the check still reads */
    CU_OK(cudaEventRecord(e, cons));
    CU_OK(cudaStreamWaitEvent(prod, e, 0));
  }
  CU_OK(cudaDeviceSynchronize());
  to_host(&hb, bad, 1);
  ck_assert_uint_eq(hb, 0);
  CU_OK(cudaEventDestroy(e));
  CU_OK(cudaStreamDestroy(prod));
  CU_OK(cudaStreamDestroy(cons));
  CU_OK(cudaFree(buf));
  CU_OK(cudaFree(bad));
}
END_TEST

/* A spin on plain (volatile) loads: the model cannot count it; its wall-clock watchdog ends the
 * process. Never returns. */
__global__ void k_plain_spin(const volatile unsigned *flag) {
  while (*flag == 0u) {
  }
}

static int plain_spin(void) {
  unsigned *flag = NULL;
  if (cudaMalloc(&flag, sizeof(unsigned)) != cudaSuccess || cudaMemset(flag, 0, sizeof(unsigned)) != cudaSuccess)
    return 2;
  sim_launch("k_plain_spin", 1, 1, 0, k_plain_spin, (const volatile unsigned *)flag);
  cudaError_t e = cudaDeviceSynchronize();
  fprintf(stderr, "plain-spin: cudaDeviceSynchronize returned %s: the watchdog did not end the process\n",
          cudaGetErrorName(e));
  return 3;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "plain-spin") == 0) return plain_spin();
  printf("test_sim_progress: %s mode\n", emcsim_mode());
  Suite *s = suite_create("cudasim_progress");
  TCase *tc = sim_tcase(s, "progress");
  tcase_add_test(tc, wait_for_a_later_kernel_is_a_violation);
  tcase_add_test(tc, wait_for_another_streams_kernel);
  tcase_add_test(tc, wait_for_a_thread_of_the_block_completes);
  tcase_add_test(tc, wait_behind_a_barrier_is_a_violation);
  tcase_add_test(tc, event_ordered_streams_are_correct);
  return sim_run(s);
}
