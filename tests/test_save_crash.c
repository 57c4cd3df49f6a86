/*
 * test_save_crash: emc_store_save under SIGKILL and under concurrent saves to one path.
 *
 * Every store saved here is a function of one seed: table 0 (dense) and table 1 (hashed, a
 * fixed id set) hold emc_uniform_row(seed, ...) rows and table 2's only row holds the seed's
 * 8 bytes. verify() opens the path and checks every row against the seed it names, so a file
 * mixing two saves, a truncated file or a foreign one is caught.
 *
 *   kill_during_save (loop: 0 = O_TMPFILE, 1 = named temporaries as without O_TMPFILE)
 *     A child saves new versions to the path in a loop, reporting each EMC_OK through a pipe;
 *     the parent SIGKILLs it at a random moment (within three version + save cycles after it
 *     is ready), then: the path opens to the last version reported EMC_OK or to the one being
 *     saved when the kill came (a save killed after its rename); never to anything else.
 *     O_TMPFILE: a kill leaves no file behind, except in the window between link and rename
 *     (counted, and at most a tenth of the kills); then the parent saves to the path itself
 *     and no temporary of the dead child may remain (each save removes those of dead
 *     processes). Named temporaries: the same, with a leftover after most kills.
 *   concurrent_saves
 *     Four threads save their own stores to one path twelve times each while a fifth opens it
 *     over and over, then three processes do the same: every call returns EMC_OK, every open
 *     succeeds and verifies, and at the end the path holds one of the saved stores and the
 *     directory holds nothing else.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define REQUIRE(cond, ...) ck_assert_msg((cond), __VA_ARGS__)

/* ------------------------------------------------------------------ versioned stores */
#define HASH_IDS 512u

typedef struct shape {
  uint64_t dense_rows; /* table 0 */
  uint32_t dim;
} shape;

static uint64_t hashed_id(uint64_t k) { return emc__fmix64(k + 0x5151); }

static emc_store *make_store(const shape *sh) {
  emc_table_desc td[3] = {{"dense", EMC_TABLE_DENSE, sh->dense_rows, sh->dim, EMC_DTYPE_F32, EMC_STATE_NONE},
                          {"hashed", EMC_TABLE_HASHED, HASH_IDS, 8, EMC_DTYPE_F16, EMC_STATE_NONE},
                          {"seed", EMC_TABLE_DENSE, 1, 2, EMC_DTYPE_F32, EMC_STATE_NONE}};
  emc_store *s;
  uint64_t ids[HASH_IDS], k;
  unsigned char *zero = calloc(HASH_IDS, 16);
  ck_assert(zero != NULL);
  EMCT_OK(emc_store_create(td, 3, &s));
  for (k = 0; k < HASH_IDS; k++) ids[k] = hashed_id(k);
  EMCT_OK(emc_store_write(s, 1, ids, HASH_IDS, zero));
  free(zero);
  return s;
}

/* Make s the store of `seed` (no check framework in children: returns 0 on failure). */
static int set_version(emc_store *s, uint64_t seed) {
  uint64_t id = 0;
  return emc_store_fill_uniform(s, 0, -1.0f, 1.0f, seed) == EMC_OK &&
         emc_store_fill_uniform(s, 1, -1.0f, 1.0f, seed) == EMC_OK &&
         emc_store_write(s, 2, &id, 1, &seed) == EMC_OK;
}

/* Open path and check it is wholly the store of the seed it names; returns the seed, or 0
 * with *why set when it is not (no ck_assert: threads call it). */
static uint64_t verify(const char *path, const shape *sh, char *why, size_t cap) {
  emc_store *o;
  emc_status st = emc_store_open(path, &o);
  uint64_t seed = 0, id = 0, k;
  unsigned char got[256 * 4], want[256 * 4];
  uint32_t dim = sh->dim;
  if (st != EMC_OK) {
    snprintf(why, cap, "emc_store_open: %s (%s)", emc_status_name(st), emc_last_error_detail());
    return 0;
  }
  if (emc_store_read(o, 2, &id, 1, &seed) != EMC_OK || seed == 0) {
    snprintf(why, cap, "no seed row");
    seed = 0;
    goto out;
  }
  for (k = 0; k < sh->dense_rows + HASH_IDS; k++) {
    uint32_t t = k < sh->dense_rows ? 0 : 1, d = t == 0 ? dim : 8;
    uint64_t rid = t == 0 ? k : hashed_id(k - sh->dense_rows);
    emc_dtype dt = t == 0 ? EMC_DTYPE_F32 : EMC_DTYPE_F16;
    if (emc_store_read(o, t, &rid, 1, got) != EMC_OK ||
        emc_uniform_row(seed, t, rid, -1.0f, 1.0f, d, dt, want) != EMC_OK ||
        memcmp(got, want, d * emc_dtype_size(dt)) != 0) {
      snprintf(why, cap, "seed %llu: table %u id %llu is not that seed's row",
               (unsigned long long)seed, t, (unsigned long long)rid);
      seed = 0;
      goto out;
    }
  }
out:
  emc_store_destroy(o);
  return seed;
}

/* Entries of dir other than `keep`: the temporaries left behind. Names of the first one into
 * first (may be NULL). */
static int strays(const char *dir, const char *keep, char *first, size_t cap) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  ck_assert(d != NULL);
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, keep)) continue;
    if (n++ == 0 && first) snprintf(first, cap, "%s", e->d_name);
  }
  closedir(d);
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ kill -9 during saves */
/* The child: build the store, say "ready" (seed 0), then save version after version, writing
 * each seed to the pipe once its save returned EMC_OK. Never returns. */
static void saver_child(int wfd, const char *path, const shape *sh, uint64_t first_seed) {
  emc_store *s = make_store(sh);
  uint64_t seed, zero = 0;
  if (write(wfd, &zero, 8) != 8) _exit(3);
  for (seed = first_seed;; seed++) {
    if (!set_version(s, seed)) _exit(4);
    if (emc_store_save(s, path) != EMC_OK) _exit(5);
    if (write(wfd, &seed, 8) != 8) _exit(6);
  }
}

START_TEST(kill_during_save) {
  const int named = _i; /* 1: the path taken where O_TMPFILE is missing */
  const shape sh = {4096, 64}; /* a 1.1 MB file */
  const int iters = (int)emct_scale(named ? 50 : 100, 4);
  char dir[4096], path[4200], stray[512], why[512];
  const char *base = "ckpt.emc";
  emc_store *mine;
  emct_rng rng;
  uint64_t prev_seed = 1; /* what the path holds before each child */
  double t0, t_save;
  int it, after_kill = 0, saved_once = 0, kills_after_rename = 0;
  emc__save_named_temp = named;
  emct_rng_seed(&rng, 0xdead + (uint64_t)named);
  emct_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/%s", dir, base);
  mine = make_store(&sh);
  t0 = now_s(); /* one cycle of the child: a new version, then its save */
  ck_assert(set_version(mine, prev_seed));
  EMCT_OK(emc_store_save(mine, path));
  t_save = now_s() - t0;
  if (t_save < 1e-3) t_save = 1e-3;
  for (it = 0; it < iters; it++) {
    int p[2], status;
    pid_t pid;
    uint64_t msg, first = 1000000ull * (uint64_t)(it + 1), last_ok = 0, got;
    ssize_t r;
    ck_assert(pipe(p) == 0);
    pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
      close(p[0]);
      saver_child(p[1], path, &sh, first);
    }
    close(p[1]);
    REQUIRE(read(p[0], &msg, 8) == 8 && msg == 0, "child %d did not start", it);
    { /* a random moment within the child's next three versions */
      struct timespec ts;
      double d = emct_rng_double(&rng) * 3.0 * t_save;
      ts.tv_sec = (time_t)d;
      ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
      nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    ck_assert(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
            "child %d ended otherwise (status %#x): a save failed", it, status);
    while ((r = read(p[0], &msg, 8)) == 8) last_ok = msg;
    close(p[0]);
    /* the path: the last version reported EMC_OK, or the one in flight (killed after rename) */
    got = verify(path, &sh, why, sizeof why);
    REQUIRE(got != 0, "kill %d: the path does not hold a complete store: %s", it, why);
    if (last_ok == 0)
      REQUIRE(got == prev_seed || got == first,
              "kill %d: the path holds seed %llu; expected the previous %llu or the first save "
              "%llu", it, (unsigned long long)got, (unsigned long long)prev_seed,
              (unsigned long long)first);
    else
      REQUIRE(got == last_ok || got == last_ok + 1,
              "kill %d: the path holds seed %llu; the last EMC_OK save wrote %llu", it,
              (unsigned long long)got, (unsigned long long)last_ok);
    kills_after_rename += got != (last_ok ? last_ok : prev_seed);
    saved_once += last_ok != 0;
    /* what the kill left behind; then a save of ours removes it (its process is gone) */
    if (strays(dir, base, stray, sizeof stray) > 0) {
      char pfx[64];
      after_kill++;
      snprintf(pfx, sizeof pfx, "%s.tmp-%ld-", base, (long)pid);
      REQUIRE(strncmp(stray, pfx, strlen(pfx)) == 0, "kill %d left '%s', not a temporary of the "
              "dead child %ld", it, stray, (long)pid);
    }
    prev_seed = 2 + (uint64_t)it;
    ck_assert(set_version(mine, prev_seed));
    EMCT_OK(emc_store_save(mine, path));
    REQUIRE(strays(dir, base, stray, sizeof stray) == 0,
            "kill %d: '%s' is still there after the next save", it, stray);
  }
  printf("kill_during_save (%s): %d kills at random moments within 3 x %.1f ms (version + save); "
         "%d hit a child that had saved at least once, %d landed after a rename not yet "
         "reported; %d left a temporary (removed by the next save)\n",
         named ? "named temporaries" : "O_TMPFILE", iters, t_save * 1e3, saved_once,
         kills_after_rename, after_kill);
  if (!named)
    REQUIRE(after_kill <= iters / 10, "O_TMPFILE saves left a temporary after %d of %d kills",
            after_kill, iters);
  emc__save_named_temp = 0; /* the next test may run in this process (CK_FORK=no) */
  emc_store_destroy(mine);
  emct_rmdir(dir);
}
END_TEST

/* ------------------------------------------------------------------ concurrent saves */
#define SAVERS 4
#define SAVES_EACH 12

typedef struct saver_arg {
  const char *path;
  const shape *sh;
  uint64_t seed;
  int failures;
  char why[256];
} saver_arg;

static void *saver_thread(void *p) {
  saver_arg *a = p;
  emc_store *s = make_store(a->sh);
  int k;
  if (!set_version(s, a->seed)) a->failures++;
  for (k = 0; k < SAVES_EACH; k++) {
    emc_status st = emc_store_save(s, a->path);
    if (st != EMC_OK && a->failures++ == 0)
      snprintf(a->why, sizeof a->why, "save %d: %s (%s)", k, emc_status_name(st),
               emc_last_error_detail());
  }
  emc_store_destroy(s);
  return NULL;
}

typedef struct reader_arg {
  const char *path;
  const shape *sh;
  volatile int stop;
  int opens, failures;
  char why[512];
} reader_arg;

static void *reader_thread(void *p) {
  reader_arg *a = p;
  char why[512];
  while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
    uint64_t seed = verify(a->path, a->sh, why, sizeof why);
    a->opens++;
    if (seed == 0 && a->failures++ == 0) snprintf(a->why, sizeof a->why, "%s", why);
  }
  return NULL;
}

START_TEST(concurrent_saves) {
  const shape sh = {1024, 32};
  char dir[4096], path[4200], stray[512], why[512];
  pthread_t th[SAVERS], rd;
  saver_arg a[SAVERS];
  reader_arg ra;
  emc_store *s;
  uint64_t got;
  int k;
  emct_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/shared.emc", dir);
  s = make_store(&sh);
  ck_assert(set_version(s, 99));
  EMCT_OK(emc_store_save(s, path));
  emc_store_destroy(s);
  /* threads */
  memset(&ra, 0, sizeof ra);
  ra.path = path;
  ra.sh = &sh;
  ck_assert(pthread_create(&rd, NULL, reader_thread, &ra) == 0);
  for (k = 0; k < SAVERS; k++) {
    memset(&a[k], 0, sizeof a[k]);
    a[k].path = path;
    a[k].sh = &sh;
    a[k].seed = 100 + (uint64_t)k;
    ck_assert(pthread_create(&th[k], NULL, saver_thread, &a[k]) == 0);
  }
  for (k = 0; k < SAVERS; k++) ck_assert(pthread_join(th[k], NULL) == 0);
  __atomic_store_n(&ra.stop, 1, __ATOMIC_RELEASE);
  ck_assert(pthread_join(rd, NULL) == 0);
  for (k = 0; k < SAVERS; k++)
    REQUIRE(a[k].failures == 0, "thread %d: %d saves failed; first: %s", k, a[k].failures, a[k].why);
  REQUIRE(ra.failures == 0, "%d of %d concurrent opens failed; first: %s", ra.failures, ra.opens,
          ra.why);
  got = verify(path, &sh, why, sizeof why);
  REQUIRE(got >= 100 && got < 100 + SAVERS, "after the threads: seed %llu (%s)",
          (unsigned long long)got, got ? "not a thread's" : why);
  REQUIRE(strays(dir, "shared.emc", stray, sizeof stray) == 0, "threads left '%s'", stray);
  /* processes */
  {
    pid_t pids[3];
    int status;
    for (k = 0; k < 3; k++) {
      pids[k] = fork();
      ck_assert(pids[k] >= 0);
      if (pids[k] == 0) {
        emc_store *c = make_store(&sh);
        int j;
        if (!set_version(c, 200 + (uint64_t)k)) _exit(2);
        for (j = 0; j < SAVES_EACH; j++)
          if (emc_store_save(c, path) != EMC_OK) _exit(3);
        emc_store_destroy(c);
        _exit(0);
      }
    }
    for (k = 0; k < 3; k++) {
      ck_assert(waitpid(pids[k], &status, 0) == pids[k]);
      REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "saving process %d: status %#x", k,
              status);
    }
  }
  got = verify(path, &sh, why, sizeof why);
  REQUIRE(got >= 200 && got < 203, "after the processes: seed %llu (%s)", (unsigned long long)got,
          got ? "not a process's" : why);
  REQUIRE(strays(dir, "shared.emc", stray, sizeof stray) == 0, "processes left '%s'", stray);
  printf("concurrent_saves: %d threads x %d saves with %d verified opens meanwhile, then 3 "
         "processes x %d saves: all EMC_OK, the path holds seed %llu\n",
         SAVERS, SAVES_EACH, ra.opens, SAVES_EACH, (unsigned long long)got);
  emct_rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("save_crash");
  TCase *tc = tcase_create("save_crash");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tc, kill_during_save, 0, 2);
  tcase_add_test(tc, concurrent_saves);
  tcase_set_timeout(tc, emct_timeout(120));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
