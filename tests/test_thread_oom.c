/*
 * test_thread_oom: running out of address space while caches start their admission threads
 * fails calls with EMC_ENOMEM (or lets them succeed), never ends the process.
 *
 * With jemalloc as the process's malloc (this suite links it, as every program linked through
 * the package does), a thread's first allocation binds it to an arena, creating one for each
 * of the first 4 x CPUs threads; when that creation fails, jemalloc 5.3 dereferences a NULL
 * arena. The admission thread used to allocate its row buffer as its first act, so a cache
 * created with little address space left took the process down (SIGSEGV; found with
 * emc-bench under ulimit -v). The thread now allocates nothing itself (admit_host.c).
 *
 * Each case forks a child that caps its own address space (RLIMIT_AS) a little above what it
 * uses, then creates background-admission caches until creation fails or 48 exist and looks
 * up a batch of misses through each (their threads admit them). The child exits 0 whatever
 * the calls returned, as long as every status is EMC_OK or EMC_ENOMEM; the parent checks that
 * it exited and did not die of a signal, for several margins. Skipped (77) under sanitizers,
 * whose shadow memory needs far more address space than any cap here.
 */
#define _GNU_SOURCE 1
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define MAX_CACHES 48
#define IDS 256
#define ROWS 4096

/* Bytes of address space this process maps now (VmSize). */
static unsigned long long vm_bytes(void) {
  unsigned long long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%llu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* The child: exit 0 when every call returned EMC_OK or EMC_ENOMEM, 1 otherwise. */
static int child(unsigned long long margin) {
  emc_table_desc td = {"t", EMC_TABLE_DENSE, ROWS, 16, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *s[MAX_CACHES];
  emc_cache *c[MAX_CACHES];
  uint64_t ids[IDS], off[2] = {0, IDS};
  static float out[IDS * 16];
  struct rlimit rl;
  int n = 0, bad = 0, i, k;
  alarm(60); /* a child that hangs (a drain waiting for good) ends by SIGALRM: a failure */
  /* the soft limit only (the hard one may be below what we would ask, and lowering it needs
   * no privilege but raising does) */
  if (getrlimit(RLIMIT_AS, &rl) != 0) return 1;
  {
    rlim_t want = (rlim_t)(vm_bytes() + margin);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) want = rl.rlim_max;
    rl.rlim_cur = want;
  }
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 1;
  for (n = 0; n < MAX_CACHES; n++) { /* a store each: a store serves one cache */
    emc_cache_config cfg;
    emc_status st = emc_store_create(&td, 1, &s[n]);
    if (st == EMC_ENOMEM) break;
    if (st != EMC_OK) {
      fprintf(stderr, "emc_store_create: %s: %s\n", emc_status_name(st), emc_last_error_detail());
      bad = 1;
      break;
    }
    emc_cache_config_init(&cfg);
    cfg.backend = EMC_BACKEND_HOST;
    cfg.capacity_bytes = 128u << 10;
    cfg.admission = EMC_ADMISSION_BACKGROUND;
    st = emc_cache_create(s[n], &cfg, &c[n]);
    if (st != EMC_OK) {
      if (st != EMC_ENOMEM) {
        fprintf(stderr, "emc_cache_create: %s: %s\n", emc_status_name(st),
                emc_last_error_detail());
        bad = 1;
      }
      emc_store_destroy(s[n]);
      break;
    }
  }
  for (i = 0; i < n; i++) {
    emc_status st;
    for (k = 0; k < IDS; k++) ids[k] = (uint64_t)k;
    st = emc_lookup(c[i], ids, off, out, NULL);
    if (st != EMC_OK && st != EMC_ENOMEM) bad = 1;
    st = emc_flush(c[i], NULL); /* waits for the thread's admissions */
    if (st != EMC_OK && st != EMC_ENOMEM) bad = 1;
  }
  for (i = 0; i < n; i++) {
    emc_cache_destroy(c[i]);
    emc_store_destroy(s[i]);
  }
  fprintf(stderr, "margin %llu MiB: %d caches\n", margin >> 20, n);
  return bad;
}

START_TEST(address_space_runs_out_as_threads_start) {
  /* margins around where caches stop fitting: some threads start with room, some without */
  static const unsigned long long margin_mib[] = {8, 12, 16, 24, 32, 48, 64};
  unsigned long long m = margin_mib[_i];
  pid_t pid = fork();
  int st = 0;
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(child(m << 20));
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(!WIFSIGNALED(st), "margin %llu MiB: the child died of signal %d", m,
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "margin %llu MiB: a call returned neither EMC_OK nor EMC_ENOMEM (exit %d)", m,
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

int main(void) {
  Suite *s;
  TCase *tc;
  SRunner *sr;
  int failed;
  if (EMCT_SANITIZED) {
    fprintf(stderr, "test_thread_oom: skipped under a sanitizer (its shadow memory)\n");
    return 77;
  }
  s = suite_create("thread_oom");
  tc = tcase_create("rlimit_as");
  tcase_add_loop_test(tc, address_space_runs_out_as_threads_start, 0, 7);
  tcase_set_timeout(tc, emct_timeout(60));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* each case forks its own child */
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
