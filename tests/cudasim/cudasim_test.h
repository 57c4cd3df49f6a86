/*
 * cudasim_test.h: what the tests of the CPU model of the device (tests/cudasim/) share.
 *
 * Each test program is a CUDA source compiled as C++17 against cuda/sim/include and linked
 * with the model (emc_cudasim). The suites run in one process without fork (CUDA does not
 * survive fork, and neither does the model's state); a test that breaks a rule on purpose
 * checks the fault with EXPECT_FAULT, which also resets the model (emcsim_reset) so that the
 * next test starts on a clean device. Every test starts with emcsim_reset() too (the checked
 * fixture), so a failed test cannot leave a sticky fault to the next one.
 *
 *   CU_OK(call)                       the call returns cudaSuccess
 *   CU_ERR(want, call)                the call returns `want`
 *   EXPECT_FAULT(got, want, rule, kernel, detail)
 *                                     `got` (the error of the call that ran the kernel) is
 *                                     `want`; the model's one-line report names the rule, the
 *                                     kernel and contains `detail` (NULL: not checked); the
 *                                     fault is sticky (the next calls return `want` too); then
 *                                     emcsim_reset() and the device works again
 *   sim_launch(name, grid, block, stream, kernel, args...)
 *                                     cudaLaunchKernelEx under a kernel name (the model's
 *                                     reports and its launch-resource table use it)
 */
#ifndef EMC_CUDASIM_TEST_H
#define EMC_CUDASIM_TEST_H

#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SIM_ASAN)
#define SIM_ASAN 1
#endif

#define CU_OK(call)                                                                            \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s returned %s (model fault: \"%s\")", #call,            \
                  cudaGetErrorName(e_), emcsim_last_fault());                                  \
  } while (0)

#define CU_ERR(want, call)                                                                     \
  do {                                                                                         \
    cudaError_t e_ = (call), w_ = (want);                                                      \
    ck_assert_msg(e_ == w_, "%s returned %s, expected %s (model fault: \"%s\")", #call,        \
                  cudaGetErrorName(e_), cudaGetErrorName(w_), emcsim_last_fault());            \
  } while (0)

/* Launch `kernel` under `name` with cudaLaunchKernelEx (the runtime's variadic C++ form). */
template <typename... P, typename... A>
static inline cudaError_t sim_launch(const char *name, dim3 grid, dim3 block, cudaStream_t stream,
                                     void (*kernel)(P...), A &&...args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  emcsim_set_kernel_name(name);
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

static inline void sim_expect_fault(cudaError_t got, cudaError_t want, const char *rule,
                                    const char *kernel, const char *detail, const char *file,
                                    int line) {
  char name[160];
  const char *f = emcsim_last_fault();
  ck_assert_msg(got == want, "%s:%d: the call that ran the kernel returned %s, expected %s (model fault: \"%s\")",
                file, line, cudaGetErrorName(got), cudaGetErrorName(want), f);
  ck_assert_msg(f[0] != '\0', "%s:%d: %s returned, but the model holds no fault report", file, line,
                cudaGetErrorName(got));
  ck_assert_msg(strchr(f, '\n') == NULL, "%s:%d: the report is not one line: \"%s\"", file, line, f);
  ck_assert_msg(strstr(f, rule) != NULL, "%s:%d: the report does not name the rule \"%s\": \"%s\"", file,
                line, rule, f);
  snprintf(name, sizeof name, "kernel %s,", kernel);
  ck_assert_msg(strstr(f, name) != NULL, "%s:%d: the report does not name the kernel %s: \"%s\"", file,
                line, kernel, f);
  if (detail)
    ck_assert_msg(strstr(f, detail) != NULL, "%s:%d: the report does not say \"%s\": \"%s\"", file, line,
                  detail, f);
  /* sticky, as a corrupted context: every later call on the device fails the same way */
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 64);
  ck_assert_msg(e == want, "%s:%d: after the fault cudaMalloc returned %s, expected the sticky %s", file,
                line, cudaGetErrorName(e), cudaGetErrorName(want));
  e = cudaDeviceSynchronize();
  ck_assert_msg(e == want, "%s:%d: after the fault cudaDeviceSynchronize returned %s, expected the sticky %s",
                file, line, cudaGetErrorName(e), cudaGetErrorName(want));
  e = cudaGetLastError();
  ck_assert_msg(e == want, "%s:%d: after the fault cudaGetLastError returned %s, expected the sticky %s",
                file, line, cudaGetErrorName(e), cudaGetErrorName(want));
  emcsim_reset();
  ck_assert_msg(emcsim_last_fault()[0] == '\0', "%s:%d: emcsim_reset left the fault \"%s\"", file, line,
                emcsim_last_fault());
  e = cudaDeviceSynchronize();
  ck_assert_msg(e == cudaSuccess, "%s:%d: after emcsim_reset cudaDeviceSynchronize returned %s", file, line,
                cudaGetErrorName(e));
}
#define EXPECT_FAULT(got, want, rule, kernel, detail) \
  sim_expect_fault((got), (want), (rule), (kernel), (detail), __FILE__, __LINE__)

/* The checked fixture of every test case: a clean device (no sticky fault, nothing pending). */
static inline void sim_setup(void) { emcsim_reset(); }

/* Run the suite without fork; 0 when every test passed, else 1. */
static inline int sim_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_VERBOSE);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}

/* A test case with the checked fixture; add tests with tcase_add_test. */
static inline TCase *sim_tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, sim_setup, NULL);
  suite_add_tcase(s, tc);
  return tc;
}

/* Device buffer helpers: allocate n elements, read them back to the host. */
template <typename T> static inline T *dev_alloc(size_t n) {
  T *p = NULL;
  CU_OK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}
template <typename T> static inline void to_host(T *h, const T *d, size_t n) {
  CU_OK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
}
template <typename T> static inline void to_dev(T *d, const T *h, size_t n) {
  CU_OK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
}

#define SIM_POISON_SHARED 0xA5A5A5A5u /* __shared__ at every block start; CUB's undefined values */
#define SIM_POISON_DEVICE 0xCBCBCBCBu /* cudaMalloc, cudaMallocAsync; CUB scratch after use */
#define SIM_POISON_PINNED 0xCDCDCDCDu /* cudaHostAlloc, cudaMallocHost */
#define SIM_POISON_FREED 0xDFu        /* freed memory, before it goes */

#endif /* EMC_CUDASIM_TEST_H */
