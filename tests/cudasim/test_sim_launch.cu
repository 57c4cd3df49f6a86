/*
 * test_sim_launch.cu: the model's launch rules (cuda/sim/README.md, "Launches"): sm_90's block
 * and grid limits, shared memory and cudaFuncSetAttribute, each project kernel's real sm_90
 * resources (the table that cuda/sim/tools/kernel_limits.py builds from nvcc:
 * BUILD/cuda/sim/emcsim_limits.inc), and the C form of cudaLaunchKernel.
 *
 * EMCSIM_LIMITS_INC names the generated table; EMCSIM_HAVE_NVCC is 1 when the build found nvcc
 * (then the table must hold the project's kernels; without it the table is empty and the
 * resource checks are skipped, saying so).
 */
#include "cudasim_test.h"

__device__ void mark(unsigned *out) {
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (b == 0) out[t] = t + 1u;
}
__global__ void k_mark(unsigned *out) { mark(out); }

START_TEST(block_and_grid_limits) {
  unsigned *d = dev_alloc<unsigned>(1024);
  /* the limits themselves are fine */
  CU_OK(sim_launch("k_mark", 1, 1024, 0, k_mark, d));
  CU_OK(sim_launch("k_mark", dim3(1, 1, 1), dim3(16, 1, 64), 0, k_mark, d));
  CU_OK(sim_launch("k_mark", dim3(1, 65535, 1), dim3(1), 0, k_mark, d));
  CU_OK(cudaDeviceSynchronize());
  /* beyond them: cudaErrorInvalidConfiguration, at the launch, and not sticky */
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", 1, 1025, 0, k_mark, d));
  ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", 1, dim3(32, 32, 2), 0, k_mark, d));
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", 1, dim3(1, 1, 65), 0, k_mark, d));
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", dim3(1, 65536, 1), 1, 0, k_mark, d));
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", dim3(1, 1, 65536), 1, 0, k_mark, d));
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", dim3(0), 32, 0, k_mark, d));
  CU_ERR(cudaErrorInvalidConfiguration, sim_launch("k_mark", 1, dim3(0), 0, k_mark, d));
  CU_OK(cudaDeviceSynchronize());
  (void)cudaGetLastError();
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(device_properties_are_an_h100s) {
  cudaDeviceProp p;
  int v = 0, n = 0;
  CU_OK(cudaGetDeviceCount(&n));
  ck_assert_int_ge(n, 1);
  CU_OK(cudaGetDeviceProperties(&p, 0));
  ck_assert_int_eq(p.major, 9);
  ck_assert_int_eq(p.minor, 0);
  ck_assert_int_eq(p.warpSize, 32);
  ck_assert_int_eq(p.maxThreadsPerBlock, 1024);
  ck_assert_uint_eq(p.sharedMemPerBlock, 48u << 10);
  ck_assert_uint_eq(p.sharedMemPerBlockOptin, 227u << 10);
  ck_assert_int_eq(p.regsPerBlock, 65536);
  CU_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  ck_assert_int_eq(v, 227 << 10);
  CU_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxGridDimY, 0));
  ck_assert_int_eq(v, 65535);
}
END_TEST

/* ================================================================ shared memory */

__global__ void k_smem_default(unsigned *out) { mark(out); }
__global__ void k_smem_raised(unsigned *out) { mark(out); }

START_TEST(dynamic_shared_memory_limits) {
  unsigned *d = dev_alloc<unsigned>(1024);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(32);
  /* 48 KB without an attribute */
  cfg.dynamicSmemBytes = 48u << 10;
  CU_OK(cudaLaunchKernelEx(&cfg, k_smem_default, d));
  cfg.dynamicSmemBytes = (48u << 10) + 1;
  CU_ERR(cudaErrorInvalidValue, cudaLaunchKernelEx(&cfg, k_smem_default, d));
  /* cudaFuncAttributeMaxDynamicSharedMemorySize raises it, up to sm_90's 227 KB */
  CU_ERR(cudaErrorInvalidValue, cudaFuncSetAttribute(k_smem_raised, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (227 << 10) + 1));
  CU_OK(cudaFuncSetAttribute(k_smem_raised, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10));
  cfg.dynamicSmemBytes = 100u << 10;
  CU_OK(cudaLaunchKernelEx(&cfg, k_smem_raised, d));
  cfg.dynamicSmemBytes = (100u << 10) + 1;
  CU_ERR(cudaErrorInvalidValue, cudaLaunchKernelEx(&cfg, k_smem_raised, d));
  /* the attribute is the kernel's: the other kernel still has 48 KB */
  cfg.dynamicSmemBytes = (48u << 10) + 1;
  CU_ERR(cudaErrorInvalidValue, cudaLaunchKernelEx(&cfg, k_smem_default, d));
  CU_OK(cudaDeviceSynchronize());
  (void)cudaGetLastError();
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ the project's kernels' resources */

struct Limit {
  char name[512];
  unsigned maxntid, regs, smem;
};

/* The generated table, one `{"name", maxntid, regs, smem},` line per kernel. */
static int read_limits(Limit *out, int cap) {
  FILE *f = fopen(EMCSIM_LIMITS_INC, "r");
  char line[4096];
  int n = 0;
  ck_assert_msg(f != NULL, "cannot open %s", EMCSIM_LIMITS_INC);
  while (fgets(line, sizeof line, f) && n < cap) {
    Limit l;
    if (sscanf(line, " {\"%511[^\"]\", %u, %u, %u}", l.name, &l.maxntid, &l.regs, &l.smem) == 4) out[n++] = l;
  }
  fclose(f);
  return n;
}

/* The most threads a block of this kernel may have on an H100: its __launch_bounds__, and the
 * registers: ceil(regs * 32 / 256) * 256 a warp, 65536 a block. */
static unsigned max_threads(const Limit &l) {
  unsigned per_warp = (l.regs * 32u + 255u) / 256u * 256u, m = 1024u;
  if (l.maxntid && l.maxntid < m) m = l.maxntid;
  if (per_warp && 65536u / per_warp * 32u < m) m = 65536u / per_warp * 32u;
  return m;
}

START_TEST(project_kernel_resources_are_enforced) {
  static Limit lim[256];
  int n = read_limits(lim, 256);
  unsigned *d = dev_alloc<unsigned>(1024);
#if !EMCSIM_HAVE_NVCC
  printf("project_kernel_resources_are_enforced: no nvcc at build time: the table is empty (%d entries); "
         "only sm_90's limits are checked\n", n);
  CU_OK(sim_launch("emc_k_lookup", 1, 512, 0, k_mark, d)); /* unknown to the model: allowed */
#else
  int found_lookup = 0;
  for (int i = 0; i < n; i++) found_lookup |= strcmp(lim[i].name, "emc_k_lookup") == 0;
  ck_assert_msg(found_lookup, "%s has no emc_k_lookup (%d entries)", EMCSIM_LIMITS_INC, n);
  /* the issue's example: the lookup kernel, __launch_bounds__(256), launched with 512 threads */
  CU_ERR(cudaErrorLaunchOutOfResources, sim_launch("emc_k_lookup", 1, 512, 0, k_mark, d));
  ck_assert_int_eq(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  CU_OK(cudaDeviceSynchronize()); /* not sticky */
  /* every kernel of the table: its limit runs, one warp more does not */
  for (int i = 0; i < n; i++) {
    unsigned m = max_threads(lim[i]);
    if (lim[i].smem > (48u << 10)) continue; /* needs the attribute: not a plain launch */
    cudaError_t e = sim_launch(lim[i].name, 1, m, 0, k_mark, d);
    ck_assert_msg(e == cudaSuccess, "%s (bound %u, %u registers) with %u threads: %s", lim[i].name, lim[i].maxntid,
                  lim[i].regs, m, cudaGetErrorName(e));
    if (m < 1024) {
      unsigned more = m % 32u ? m + 1u : m + 32u;
      e = sim_launch(lim[i].name, 1, more, 0, k_mark, d);
      ck_assert_msg(e == cudaErrorLaunchOutOfResources, "%s (bound %u, %u registers) with %u threads: %s, expected "
                    "cudaErrorLaunchOutOfResources", lim[i].name, lim[i].maxntid, lim[i].regs, more, cudaGetErrorName(e));
    }
    /* static shared memory counts against the 48 KB too */
    if (lim[i].smem > 0) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1);
      cfg.blockDim = dim3(m);
      cfg.dynamicSmemBytes = (48u << 10) - lim[i].smem;
      emcsim_set_kernel_name(lim[i].name);
      e = cudaLaunchKernelEx(&cfg, k_mark, d);
      ck_assert_msg(e == cudaSuccess, "%s with %u static + %zu dynamic bytes: %s", lim[i].name, lim[i].smem,
                    cfg.dynamicSmemBytes, cudaGetErrorName(e));
      cfg.dynamicSmemBytes++;
      emcsim_set_kernel_name(lim[i].name);
      e = cudaLaunchKernelEx(&cfg, k_mark, d);
      ck_assert_msg(e == cudaErrorInvalidValue, "%s with %u static + %zu dynamic bytes: %s", lim[i].name, lim[i].smem,
                    cfg.dynamicSmemBytes, cudaGetErrorName(e));
    }
  }
  printf("project_kernel_resources_are_enforced: %d kernels checked\n", n);
#endif
  CU_OK(cudaDeviceSynchronize());
  (void)cudaGetLastError();
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ the C form */

__global__ void k_never_launched(int *p) { *p = 1; }
struct Pair {
  int a;
  double b;
};
__global__ void k_sum_args(int *out, Pair p, short s) { *out = p.a + (int)p.b + s; }

START_TEST(c_form_needs_a_registered_kernel) {
  int *d = dev_alloc<int>(1), r = 0;
  void *args1[] = {&d};
  CU_ERR(cudaErrorInvalidDeviceFunction,
         cudaLaunchKernel((const void *)k_never_launched, dim3(1), dim3(1), args1, 0, (cudaStream_t)0));
  (void)cudaGetLastError();
  /* after a typed launch the C form works, with the argument values of its array */
  Pair p = {40, 1.5};
  short s = 1;
  CU_OK(sim_launch("k_sum_args", 1, 1, 0, k_sum_args, d, p, s));
  CU_OK(cudaDeviceSynchronize());
  to_host(&r, d, 1);
  ck_assert_int_eq(r, 42);
  p.a = 100;
  s = 7;
  void *args[] = {&d, &p, &s};
  CU_OK(cudaLaunchKernel((const void *)k_sum_args, dim3(1), dim3(1), args, 0, (cudaStream_t)0));
  p.a = -1; /* read at the launch: too late */
  CU_OK(cudaDeviceSynchronize());
  to_host(&r, d, 1);
  ck_assert_int_eq(r, 108);
  CU_OK(cudaFree(d));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_launch");
  TCase *tc = sim_tcase(s, "launch");
  tcase_add_test(tc, block_and_grid_limits);
  tcase_add_test(tc, device_properties_are_an_h100s);
  tcase_add_test(tc, dynamic_shared_memory_limits);
  tcase_add_test(tc, project_kernel_resources_are_enforced);
  tcase_add_test(tc, c_form_needs_a_registered_kernel);
  return sim_run(s);
}
