/*
 * test_alloc_fail_process: the process's own allocator failing inside API calls.
 *
 * test_alloc_fail fails the library's allocations (lib/alloc.c's hook). This suite fails the
 * process's: malloc, calloc, realloc, posix_memalign, aligned_alloc and memalign are defined
 * here, in the executable, so every allocation of the process goes through them: the
 * library's, libc's (stdio, qsort) and the dynamic loader's (glibc's ld.so allocates through
 * the program's malloc once it has started). While an API call runs they count themselves,
 * and the chosen one fails (NULL, errno ENOMEM), alone or with every later one until a call
 * reports a failure (sticky). Outside API calls nothing fails (Check, the checks).
 *
 * Each run of the scenario (store create, fill, write, save, open, cache create, lookups
 * under eviction, inserts, a training step (prefetch, dedup, apply_gradients), flush, save,
 * destroy) is a forked child, so a
 * run that ends the process is seen: glibc's loader ends it with status 127 ("out of memory")
 * when an allocation fails inside dlopen past its point of no return, which is why the
 * library must never dlopen inside an API call (it resolves jemalloc when it is loaded:
 * lib/alloc.c). dlopen is defined here too, and a call of it inside an API call fails the
 * suite. For every run:
 *   - the process survives and exits normally;
 *   - every call returns a status its declaration documents (contract.h), a failing call
 *     EMC_ENOMEM with a detail, and then succeeds when repeated without failures;
 *   - emc_host_allocator() names the provider in use;
 *   - after the final flush the store, and the file saved from it, hold every row written.
 * The executable links the library without jemalloc (EMBCACHE_NO_JEMALLOC), as a plugin or
 * Python's ctypes loads it: then resolving the provider maps libjemalloc and what it needs.
 *
 * Not under sanitizers (the suite exits 77, skipped): ASan and TSan define the allocator
 * themselves and hand memory from their own heaps to code that frees it through ours;
 * replacing malloc in the executable would bypass them and mix two heaps.
 */
#define _GNU_SOURCE 1 /* RTLD_NEXT */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "contract.h"

#if !EMCT_SANITIZED
/* ------------------------------------------------------------------ the process's allocator */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
void *memalign(size_t align, size_t n); /* <malloc.h>'s */

/* What runs between the children and the parent (a shared mapping). */
typedef struct shared {
  long long points;         /* allocations counted by the run */
  long long injected;       /* allocations made to fail */
  long long failures;       /* calls that failed (and were repeated) */
  long long dlopens;        /* dlopen calls inside an API call */
  char dlopen_file[256];    /* the first of them */
  char msg[1024];           /* why the run failed (exit status 3) */
} shared;

static shared *sh;
static int armed;             /* an API call runs: allocations count */
static long long fail_at = -1; /* the point that fails (-1: none) */
static int sticky;            /* every later point fails too, until a call reports it */
static long long count;       /* points counted in this run */
static long long injected;    /* failures injected in this run */

static int fail_now(void) {
  long long k;
  if (!__atomic_load_n(&armed, __ATOMIC_RELAXED)) return 0;
  k = __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
  if (fail_at < 0 || k < fail_at || (k > fail_at && !sticky)) return 0;
  __atomic_fetch_add(&injected, 1, __ATOMIC_RELAXED);
  errno = ENOMEM;
  return 1;
}

void *malloc(size_t n) { return fail_now() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return fail_now() ? NULL : __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return fail_now() ? NULL : __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return fail_now() ? NULL : __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p;
  if (a < sizeof(void *) || (a & (a - 1)) != 0) return EINVAL;
  if (fail_now()) return ENOMEM;
  p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
/* free: glibc's, which owns every block above. */

void *dlopen(const char *file, int mode) {
  static void *(*real)(const char *, int);
  if (__atomic_load_n(&armed, __ATOMIC_RELAXED) && sh) {
    if (sh->dlopens++ == 0)
      strncpy(sh->dlopen_file, file ? file : "(main program)", sizeof sh->dlopen_file - 1);
  }
  if (!real) {
    void *f = dlsym(RTLD_NEXT, "dlopen"); /* libc's (glibc >= 2.34) or libdl's */
    memcpy(&real, &f, sizeof f);
  }
  return real(file, mode);
}

/* ------------------------------------------------------------------ the child's checks */
static long long run_point;

static void child_fail(const char *fmt, ...) {
  va_list ap;
  int n;
  __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
  n = snprintf(sh->msg, sizeof sh->msg, "point %lld%s: ", run_point, sticky ? " (sticky)" : "");
  va_start(ap, fmt);
  vsnprintf(sh->msg + n, sizeof sh->msg - (size_t)n, fmt, ap);
  va_end(ap);
  _exit(3);
}

#define REQ(cond, ...)                 \
  do {                                 \
    if (!(cond)) child_fail(__VA_ARGS__); \
  } while (0)

static void arm(void) { __atomic_store_n(&armed, 1, __ATOMIC_RELAXED); }

/* After an API call: its status documented; 1 when it failed (the caller repeats it).
 * also_ok: a status that is a success for this call (emc_prefetch's EMC_ECAPACITY). */
static int api_done(const char *fn, emc_status st, emc_status also_ok) {
  long long inj = __atomic_load_n(&injected, __ATOMIC_RELAXED);
  static long long inj_seen;
  int fresh = inj > inj_seen;
  __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
  inj_seen = inj;
  REQ(emct_contract_documented(fn) & (1u << st), "%s returned %s, which its declaration does "
      "not document (%s)", fn, emc_status_name(st), emc_last_error_detail());
  if (st == EMC_OK || st == also_ok) return 0;
  REQ(fresh, "%s failed with %s, yet no allocation failed during it (%s)", fn,
      emc_status_name(st), emc_last_error_detail());
  REQ(st == EMC_ENOMEM, "%s failed with %s, not EMC_ENOMEM, when an allocation failed (%s)",
      fn, emc_status_name(st), emc_last_error_detail());
  REQ(emc_last_error_detail()[0] != '\0', "%s failed without a detail", fn);
  sh->failures++;
  if (sticky) fail_at = -1; /* the repeat must not fail again */
  return 1;
}

#define API(fn, ...) api_done(#fn, (arm(), fn(__VA_ARGS__)), EMC_OK)
#define API_OR(also_ok, fn, ...) api_done(#fn, (arm(), fn(__VA_ARGS__)), also_ok)

/* ------------------------------------------------------------------ the scenario */
#define NT 2
#define DENSE_ROWS 64u
#define HASH_CAP 48u
#define HASH_UNIVERSE 56u /* ranks >= HASH_CAP are never written */
#define MAX_BATCH 32u
static const emc_table_desc k_desc[NT] = {
    {"dense", EMC_TABLE_DENSE, DENSE_ROWS, 8, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"hashed", EMC_TABLE_HASHED, HASH_CAP, 4, EMC_DTYPE_F16, EMC_STATE_NONE}};

typedef struct model {
  unsigned char rows[NT][HASH_UNIVERSE > DENSE_ROWS ? HASH_UNIVERSE : DENSE_ROWS][32];
  uint8_t present[NT][HASH_UNIVERSE > DENSE_ROWS ? HASH_UNIVERSE : DENSE_ROWS];
  uint64_t universe[NT];
  uint32_t rb[NT];
} model;

static uint64_t id_of(uint32_t t, uint64_t r) { return t == 0 ? r : emc__fmix64(r + 0x5151); }

static void make_row(uint64_t tag, unsigned char *row, uint32_t rb, uint32_t t) {
  uint32_t k;
  for (k = 0; k < rb; k++) row[k] = (unsigned char)(tag * 31 + k * 7 + t);
  if (t == 1) /* f16: keep every element finite (exponent bits not all set) */
    for (k = 1; k < rb; k += 2) row[k] &= 0x3f;
}

static void check_store(emc_store *s, const model *m, const char *what) {
  unsigned char got[32], zero[32] = {0};
  uint32_t t;
  uint64_t r;
  for (t = 0; t < NT; t++)
    for (r = 0; r < m->universe[t]; r++) {
      uint64_t id = id_of(t, r);
      REQ(emc_store_read(s, t, &id, 1, got) == EMC_OK, "%s: read failed", what);
      REQ(memcmp(got, m->present[t][r] ? m->rows[t][r] : zero, m->rb[t]) == 0,
          "%s: table %u rank %llu differs from what was written", what, t, (unsigned long long)r);
    }
}

/* A batch of per_table ranks a table (hashed ranks below max_hashed). */
static void make_batch(emct_rng *rng, uint32_t per_table, uint64_t max_hashed, uint64_t *ids,
                           uint64_t *ranks, uint64_t *offs) {
  uint32_t t, k;
  uint64_t i = 0;
  offs[0] = 0;
  for (t = 0; t < NT; t++) {
    for (k = 0; k < per_table; k++, i++) {
      ranks[i] = emct_rng_below(rng, t == 0 ? DENSE_ROWS : max_hashed);
      ids[i] = id_of(t, ranks[i]);
    }
    offs[t + 1] = i;
  }
}

static void scenario(const char *path) {
  static model m;
  emc_store *s = NULL, *o = NULL;
  emc_cache *c = NULL;
  emc_cache_config cfg;
  emc_optimizer opt;
  emct_rng rng;
  uint64_t ids[MAX_BATCH], ranks[MAX_BATCH], offs[NT + 1], i, r;
  unsigned char rows[MAX_BATCH * 32], out[MAX_BATCH * 32];
  float grads[MAX_BATCH * 8];
  const char *prov;
  uint32_t t;
  int step;
  memset(&m, 0, sizeof m);
  emct_rng_seed(&rng, 7);
  for (t = 0; t < NT; t++) {
    m.universe[t] = t == 0 ? DENSE_ROWS : HASH_UNIVERSE;
    m.rb[t] = k_desc[t].dim * (uint32_t)emc_dtype_size(k_desc[t].dtype);
  }
  prov = (arm(), emc_host_allocator());
  __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
  REQ(strncmp(prov, "jemalloc", 8) == 0 || strncmp(prov, "system", 6) == 0,
      "emc_host_allocator() = \"%s\"", prov);
  while (API(emc_store_create, k_desc, NT, &s)) {}
  while (API(emc_store_fill_uniform, s, 0, -1.0f, 1.0f, 3)) {}
  for (r = 0; r < DENSE_ROWS; r++) {
    REQ(emc_uniform_row(3, 0, r, -1.0f, 1.0f, k_desc[0].dim, k_desc[0].dtype, m.rows[0][r]) ==
            EMC_OK, "uniform row");
    m.present[0][r] = 1;
  }
  for (i = 0; i < 24; i++) { /* hashed ranks 0..23 */
    ids[i] = id_of(1, i);
    make_row(i + 1, rows + i * m.rb[1], m.rb[1], 1);
  }
  while (API(emc_store_write, s, 1, ids, 24, rows)) {}
  for (i = 0; i < 24; i++) {
    memcpy(m.rows[1][i], rows + i * m.rb[1], m.rb[1]);
    m.present[1][i] = 1;
  }
  while (API(emc_store_save, s, path)) {}
  while (API(emc_store_open, path, &o)) {}
  check_store(o, &m, "reopened store");
  arm();
  emc_store_destroy(o);
  __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 1024; /* t1: ~30 rows of 32 bytes against a working set of 120 */
  cfg.unified_index_rows = 8;
  while (API(emc_cache_create, s, &cfg, &c)) {}
  emc_optimizer_init(&opt);
  opt.lr = 0.5f;
  for (step = 0; step < 8; step++) {
    size_t pos = 0;
    make_batch(&rng, 10, HASH_UNIVERSE, ids, ranks, offs);
    if (step & 1) {
      uint8_t where[MAX_BATCH];
      while (API(emc_lookup_ex, c, ids, offs, out, where, NULL)) {}
    } else {
      while (API(emc_lookup, c, ids, offs, out, NULL)) {}
    }
    for (t = 0; t < NT; t++)
      for (i = offs[t]; i < offs[t + 1]; i++, pos += m.rb[t]) {
        static const unsigned char zero[32];
        REQ(memcmp(out + pos, m.present[t][ranks[i]] ? m.rows[t][ranks[i]] : zero, m.rb[t]) == 0,
            "lookup step %d: table %u rank %llu differs", step, t, (unsigned long long)ranks[i]);
      }
    if (step % 3 == 1) { /* inserts, new hashed ids included */
      make_batch(&rng, 6, HASH_CAP, ids, ranks, offs);
      for (t = 0, pos = 0; t < NT; t++)
        for (i = offs[t]; i < offs[t + 1]; i++, pos += m.rb[t])
          make_row(100 * (uint64_t)step + i, rows + pos, m.rb[t], t);
      while (API(emc_insert, c, ids, offs, rows, NULL)) {}
      for (t = 0, pos = 0; t < NT; t++)
        for (i = offs[t]; i < offs[t + 1]; i++, pos += m.rb[t]) {
          memcpy(m.rows[t][ranks[i]], rows + pos, m.rb[t]);
          m.present[t][ranks[i]] = 1;
        }
    }
    if (step == 4) { /* a training step on the dense table: prefetch, then SGD */
      uint64_t d_offs[NT + 1] = {0, 4, 4}, d_ids[4] = {1, 2, 1, 9};
      uint32_t j, k;
      uint64_t u_ids[4], u_offs[NT + 1];
      uint32_t inv[4];
      while (API_OR(EMC_ECAPACITY, emc_prefetch, c, d_ids, d_offs, NULL)) {}
      while (API(emc_dedup, c, d_ids, d_offs, u_ids, u_offs, inv, NULL)) {}
      REQ(u_offs[1] == 3 && u_ids[inv[2]] == 1 && u_ids[inv[3]] == 9, "dedup's output is wrong");
      for (k = 0; k < 4 * 8; k++) grads[k] = (float)((int)(k % 5) - 2) / 4.0f;
      while (API(emc_apply_gradients, c, d_ids, d_offs, grads, &opt, NULL)) {}
      for (k = 0; k < 4; k++) { /* the reference: per distinct id, gradients summed in order */
        float g[8], *w = (float *)(void *)m.rows[0][d_ids[k]];
        uint32_t q;
        for (q = 0; q < k && d_ids[q] != d_ids[k]; q++) {}
        if (q < k) continue;
        memcpy(g, grads + k * 8, sizeof g);
        for (q = k + 1; q < 4; q++)
          if (d_ids[q] == d_ids[k])
            for (j = 0; j < 8; j++) g[j] = g[j] + grads[q * 8 + j];
        for (j = 0; j < 8; j++) w[j] = fmaf(-opt.lr, g[j], w[j]);
      }
    }
  }
  while (API(emc_flush, c, NULL)) {}
  while (API(emc_store_save, s, path)) {}
  while (API(emc_cache_destroy, c)) {}
  check_store(s, &m, "final store");
  while (API(emc_store_open, path, &o)) {}
  check_store(o, &m, "saved file");
  arm();
  emc_store_destroy(o);
  emc_store_destroy(s);
  __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
}

/* One run in a forked child: its exit status (0 good, 3 a failed check, anything else: the
 * process was ended). */
static int run_child(long long point, int is_sticky, const char *path, int *sig) {
  pid_t pid;
  int status;
  memset(sh, 0, sizeof *sh);
  *sig = 0;
  pid = fork();
  ck_assert_msg(pid >= 0, "fork failed");
  if (pid == 0) {
    run_point = point;
    fail_at = point;
    sticky = is_sticky;
    count = injected = 0;
    unlink(path);
    scenario(path);
    sh->points = count;
    sh->injected = injected;
    _exit(0);
  }
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status)) {
    *sig = WTERMSIG(status);
    return -1;
  }
  return WEXITSTATUS(status);
}

START_TEST(process_allocations_fail_in_turn) {
  char dir[4096], path[4200];
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
  long long n, p, died = 0, dlopened = 0, failures = 0, quiet = 0;
  char first_death[512] = "", first_dlopen[512] = "";
  struct timespec t0, t1;
  int is_sticky, sig, rc;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert(emct_contract_load() > 0); /* parsed once, before any child */
  if (base) {
    snprintf(dir, sizeof dir, "%s/emc_procfail_XXXXXX", base);
    ck_assert(mkdtemp(dir) != NULL);
  } else {
    emct_tmpdir(dir, sizeof dir);
  }
  snprintf(path, sizeof path, "%s/s.emc", dir);
  /* the counting run */
  rc = run_child(-1, 0, path, &sig);
  ck_assert_msg(rc == 0, "the run without failures %s: %s", rc < 0 ? "was killed" : "failed",
                rc == 3 ? sh->msg : "");
  if (sh->dlopens > 0 && dlopened++ == 0) /* reported at the end, after the sweep */
    snprintf(first_dlopen, sizeof first_dlopen, "the run without failures: dlopen(\"%s\")",
             sh->dlopen_file);
  n = sh->points;
  ck_assert_msg(n > 100, "only %lld allocations counted: is the interposition working?", n);
  for (is_sticky = 0; is_sticky < 2; is_sticky++)
    for (p = 0; p < n; p++) {
      rc = run_child(p, is_sticky, path, &sig);
      if (rc == 3) ck_abort_msg("%s", sh->msg);
      if (rc != 0) { /* ended by the loader (127) or a signal */
        if (died++ == 0)
          snprintf(first_death, sizeof first_death, "point %lld%s: the process %s %d", p,
                   is_sticky ? " (sticky)" : "", sig ? "was killed by signal" : "exited with",
                   sig ? sig : rc);
        continue;
      }
      if (sh->dlopens > 0 && dlopened++ == 0)
        snprintf(first_dlopen, sizeof first_dlopen, "point %lld: dlopen(\"%s\")", p,
                 sh->dlopen_file);
      ck_assert_msg(is_sticky || sh->injected == 1, "point %lld was not reached (%lld points "
                    "this run): the scenario is not deterministic", p, sh->points);
      failures += sh->failures;
      quiet += sh->failures == 0;
    }
  unlink(path);
  rmdir(dir);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("process_allocations_fail_in_turn: %lld allocation points, each failed alone and "
         "sticky: %lld runs, %lld runs ended the process, %lld runs with a dlopen inside an API "
         "call, %lld failing calls (all EMC_ENOMEM, repeated), %lld runs absorbed the failure, "
         "%.2f s\n", n, 2 * n, died, dlopened, failures, quiet,
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  fflush(stdout);
  ck_assert_msg(died == 0, "%lld of %lld runs ended the process; first: %s", died, 2 * n,
                first_death);
  ck_assert_msg(dlopened == 0, "%lld runs called dlopen inside an API call (an allocation "
                "failing in the loader ends the process); first: %s", dlopened, first_dlopen);
}
END_TEST
#endif /* !EMCT_SANITIZED */

int main(void) {
#if EMCT_SANITIZED
  printf("test_alloc_fail_process: skipped under sanitizers (they own malloc)\n");
  return 77;
#else
  Suite *s;
  TCase *tc;
  SRunner *sr;
  int failed_n;
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  s = suite_create("alloc_fail_process");
  tc = tcase_create("process");
  tcase_add_test(tc, process_allocations_fail_in_turn);
  tcase_set_timeout(tc, emct_timeout(120));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed_n = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed_n ? 1 : 0;
#endif
}
