/*
 * test_store_shared: stores in POSIX shared memory (lib/store/shared.c), across processes.
 *
 *   processes   a store created in one process is read and written by another (dense and
 *               hashed tables, f32 and f16, optimizer state); hashed ids added by either
 *               process are seen by both
 *   lifetime    the rows outlive their creator while the name exists; unlink removes the
 *               name, not a mapping in use
 *   racing      writers in two processes and readers in two more: every row read is whole
 *               (one generation in every element) and generations never go back
 *   dying       a writer killed while it holds the lock: before its row changes, in the
 *               middle of a row (the next reader or writer puts the old row back), after the
 *               row is whole again (it stays), and between publishing a hashed id and
 *               counting it (the next writer counts it); nobody waits for the dead
 *   files       save from a shared store, open a file into a new shared store
 *   bad input   names, missing names, foreign, truncated and other-version segments, a
 *               segment never finished, a CUDA cache over a shared store, a bad file for
 *               emc_store_open_shared (no name left behind)
 */
#define _GNU_SOURCE 1
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

EMCT_SHARED_LOCK_TSAN_OPTIONS

#define DENSE_ROWS 512u
#define HASHED_CAP 600u
#define DIM_A 8u /* dense f32, Adagrad state */
#define DIM_B 5u /* hashed f16 */

static char g_name[64];

/* Names this test process made, removed at its exit whatever happened (a failed assertion
 * skips the test's own unlink; a name left behind would refuse a later run with the same
 * pid). */
static char g_made[8][80];
static unsigned g_n_made;
static void unlink_made(void) {
  unsigned i;
  for (i = 0; i < g_n_made; i++) {
    char b[96];
    shm_unlink(g_made[i]);
    snprintf(b, sizeof b, "%s-b", g_made[i]);
    shm_unlink(b);
  }
}

/* A fresh name for this test process ("/emct-<pid>-<n>"), cleared of any leftover. */
static const char *fresh_name(void) {
  static unsigned n;
  snprintf(g_name, sizeof g_name, "/emct-%d-%u", (int)getpid(), n++);
  shm_unlink(g_name);
  if (g_n_made == 0) atexit(unlink_made);
  if (g_n_made < 8) snprintf(g_made[g_n_made++], sizeof g_made[0], "%s", g_name);
  return g_name;
}

static const emc_table_desc TABLES[2] = {
    {"dense", EMC_TABLE_DENSE, DENSE_ROWS, DIM_A, EMC_DTYPE_F32, EMC_STATE_ADAGRAD},
    {"hashed", EMC_TABLE_HASHED, HASHED_CAP, DIM_B, EMC_DTYPE_F16, EMC_STATE_NONE}};

static uint32_t dim_of(uint32_t t) { return t == 0 ? DIM_A : DIM_B; }
static emc_dtype dt_of(uint32_t t) { return t == 0 ? EMC_DTYPE_F32 : EMC_DTYPE_F16; }
static size_t rb_of(uint32_t t) { return dim_of(t) * emc_dtype_size(dt_of(t)); }
/* hashed ids: sparse, far apart; the rank of hashed id number k is k */
static uint64_t hid(uint64_t k) { return 0x9e3779b97f4a7c15ull * (k + 1u) >> 7; }

/* Write generation g of ranks [lo, hi) of table t (rank: dense id, or hashed id number). */
static void write_gen(emc_store *s, uint32_t t, uint64_t lo, uint64_t hi, uint32_t g) {
  uint64_t r;
  unsigned char row[64];
  for (r = lo; r < hi; r++) {
    uint64_t id = t == 0 ? r : hid(r);
    emct_gen_row(t, r, g, dim_of(t), dt_of(t), row);
    ck_assert_int_eq(emc_store_write(s, t, &id, 1, row), EMC_OK);
  }
}

/* The generation rank r of table t holds (-1: torn or wrong; -2: absent, a zero row). */
static int64_t read_gen(const emc_store *s, uint32_t t, uint64_t r) {
  unsigned char row[64], scratch[64];
  uint64_t id = t == 0 ? r : hid(r);
  ck_assert_int_eq(emc_store_read(s, t, &id, 1, row), EMC_OK);
  if (emct_is_zero(row, rb_of(t))) return -2;
  return emct_gen_decode(t, r, dim_of(t), dt_of(t), row, scratch);
}

static int wait_child(pid_t pid) {
  int stt = 0;
  ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
  return WIFEXITED(stt) ? WEXITSTATUS(stt) : 128 + (WIFSIGNALED(stt) ? WTERMSIG(stt) : 0);
}


/* ------------------------------------------------------------------ processes */
START_TEST(processes_share_rows) {
  const char *name = fresh_name();
  emc_store *s;
  uint64_t n;
  pid_t pid;
  float state;
  uint64_t id0 = 3;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  write_gen(s, 0, 0, DENSE_ROWS, 1);
  write_gen(s, 1, 0, 100, 1);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    emc_store *a;
    uint64_t r, cnt;
    emc_table_desc d;
    CHILD_CHECK(emc_store_attach(name, &a) == EMC_OK, "attach");
    CHILD_CHECK(emc_store_n_tables(a) == 2 && emc_store_table(a, 1, &d) == EMC_OK &&
                    strcmp(d.name, "hashed") == 0 && d.rows == HASHED_CAP && d.dim == DIM_B,
                "tables");
    for (r = 0; r < DENSE_ROWS; r++) CHILD_CHECK(read_gen(a, 0, r) == 1, "dense rank %llu", (unsigned long long)r);
    for (r = 0; r < 100; r++) CHILD_CHECK(read_gen(a, 1, r) == 1, "hashed rank %llu", (unsigned long long)r);
    CHILD_CHECK(read_gen(a, 1, 100) == -2, "an id never written reads as zeros");
    /* the child's writes: new generations, new hashed ids */
    for (r = 0; r < DENSE_ROWS; r += 2) {
      unsigned char row[64];
      emct_gen_row(0, r, 2, DIM_A, EMC_DTYPE_F32, row);
      CHILD_CHECK(emc_store_write(a, 0, &r, 1, row) == EMC_OK, "write");
    }
    for (r = 50; r < 200; r++) {
      unsigned char row[64];
      uint64_t id = hid(r);
      emct_gen_row(1, r, 2, DIM_B, EMC_DTYPE_F16, row);
      CHILD_CHECK(emc_store_write(a, 1, &id, 1, row) == EMC_OK, "write hashed");
    }
    CHILD_CHECK(emc_store_table_count(a, 1, &cnt) == EMC_OK && cnt == 200, "count %llu",
                (unsigned long long)cnt);
    emc_store_destroy(a);
    _exit(0);
  }
  ck_assert_int_eq(wait_child(pid), 0);
  {
    uint64_t r;
    for (r = 0; r < DENSE_ROWS; r++) ck_assert_int_eq(read_gen(s, 0, r), r % 2 == 0 ? 2 : 1);
    for (r = 0; r < 200; r++) ck_assert_int_eq(read_gen(s, 1, r), r < 50 ? 1 : 2);
  }
  ck_assert_int_eq(emc_store_table_count(s, 1, &n), EMC_OK);
  ck_assert_uint_eq(n, 200);
  /* optimizer state lives in the segment too: written with the row, zero here */
  ck_assert_int_eq(emc_store_read_state(s, 0, &id0, 1, &state), EMC_OK);
  ck_assert(state == 0.0f);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* ------------------------------------------------------------------ lifetime */
START_TEST(rows_outlive_their_creator) {
  const char *name = fresh_name();
  emc_store *s, *s2;
  pid_t pid = fork();
  uint64_t r;
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    emc_store *c;
    CHILD_CHECK(emc_store_create_shared(name, TABLES, 2, &c) == EMC_OK, "create");
    write_gen(c, 0, 0, DENSE_ROWS, 7);
    write_gen(c, 1, 0, 300, 7);
    emc_store_destroy(c);
    _exit(0);
  }
  ck_assert_int_eq(wait_child(pid), 0);
  ck_assert_int_eq(emc_store_attach(name, &s), EMC_OK);
  for (r = 0; r < DENSE_ROWS; r++) ck_assert_int_eq(read_gen(s, 0, r), 7);
  for (r = 0; r < 300; r++) ck_assert_int_eq(read_gen(s, 1, r), 7);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
  /* the name is gone; the mapping is not */
  ck_assert_int_eq(emc_store_attach(name, &s2), EMC_EIO);
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), strerror(ENOENT)));
  ck_assert_int_eq(emc_store_unlink(name), EMC_EIO);
  write_gen(s, 0, 0, 10, 8);
  ck_assert_int_eq(read_gen(s, 0, 9), 8);
  ck_assert_int_eq(read_gen(s, 1, 299), 7);
  emc_store_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ racing */
#define RACE_RANKS 64u
START_TEST(racing_processes_never_see_torn_rows) {
  const char *name = fresh_name();
  emc_store *s;
  pid_t pids[4];
  unsigned i;
  double secs = getenv("EMC_TEST_QUICK") ? 0.4 : 1.5;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  write_gen(s, 0, 0, RACE_RANKS, 1);
  write_gen(s, 1, 0, RACE_RANKS, 1);
  for (i = 0; i < 4; i++) {
    pids[i] = fork();
    ck_assert_int_ge(pids[i], 0);
    if (pids[i] == 0) {
      emc_store *a;
      struct timespec t0, t1;
      int64_t seen[2][RACE_RANKS];
      uint32_t g = 2, t;
      uint64_t reads = 0, changes = 0;
      CHILD_CHECK(emc_store_attach(name, &a) == EMC_OK, "attach");
      memset(seen, 0, sizeof seen);
      clock_gettime(CLOCK_MONOTONIC, &t0);
      for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > secs) break;
        for (t = 0; t < 2; t++) {
          if (i < 2) { /* writers: process i owns the ranks r % 2 == i, generations rise */
            uint64_t r = (g * 7u) % (RACE_RANKS / 2) * 2u + i, id = t == 0 ? r : hid(r);
            unsigned char row[64];
            /* f16 encodes 2048 generations, f32 16384: the f16 table gets every 8th step so
             * both keep changing for the whole run */
            uint32_t gt = t == 0 ? g : g / 8u;
            if (gt > emct_gen_max(dt_of(t)) || (t == 1 && g % 8u)) continue;
            emct_gen_row(t, r, gt, dim_of(t), dt_of(t), row);
            CHILD_CHECK(emc_store_write(a, t, &id, 1, row) == EMC_OK, "write");
          } else { /* readers: whole rows, and a rank's generation never goes back */
            uint64_t r;
            for (r = 0; r < RACE_RANKS; r++) {
              int64_t gr = read_gen(a, t, r);
              CHILD_CHECK(gr >= 1, "table %u rank %llu: torn or wrong row (%lld)", t,
                          (unsigned long long)r, (long long)gr);
              CHILD_CHECK(gr >= seen[t][r], "table %u rank %llu went back: %lld after %lld", t,
                          (unsigned long long)r, (long long)gr, (long long)seen[t][r]);
              changes += seen[t][r] != 0 && gr != seen[t][r];
              seen[t][r] = gr;
              reads++;
            }
          }
        }
        g++;
        if (i < 2) usleep(100); /* writers pace themselves: generations last the whole run */
      }
      /* the readers overlapped the writers: they saw rows change under them */
      CHILD_CHECK(i < 2 || (reads > 0 && changes > 0), "reads %llu, changes seen %llu",
                  (unsigned long long)reads, (unsigned long long)changes);
      emc_store_destroy(a);
      _exit(0);
    }
  }
  for (i = 0; i < 4; i++) ck_assert_int_eq(wait_child(pids[i]), 0);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* ------------------------------------------------------------------ dying */
static const char *g_die_at;
static void die_hook(int kind, const char *what) {
  (void)kind;
  if (g_die_at && strcmp(what, g_die_at) == 0) raise(SIGKILL);
}

/* A child attaches, arms die_hook at `step` and writes rank r (generation 9): it is killed
 * holding the lock. */
static void child_dies_writing(const char *name, const char *step, uint32_t t, uint64_t r) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    emc_store *a;
    unsigned char row[64];
    uint64_t id = t == 0 ? r : hid(r);
    CHILD_CHECK(emc_store_attach(name, &a) == EMC_OK, "attach");
    emct_gen_row(t, r, 9, dim_of(t), dt_of(t), row);
    g_die_at = step;
    emc__tp_hook = die_hook;
    emc_store_write(a, t, &id, 1, row);
    _exit(3); /* not reached: the hook kills the process */
  }
  ck_assert_int_eq(wait_child(pid), 128 + SIGKILL);
}

START_TEST(a_writer_dies_in_the_middle_of_a_row) {
  const char *name = fresh_name();
  emc_store *s;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  write_gen(s, 0, 0, DENSE_ROWS, 4);
  /* killed with the row's version odd and half of it (or all) written */
  child_dies_writing(name, "store: row written", 0, 17);
  /* a reader does not wait for the dead: it repairs, and reads the old row */
  ck_assert_int_eq(read_gen(s, 0, 17), 4);
  ck_assert_int_eq(read_gen(s, 0, 18), 4);
  /* killed again; this time a writer comes first */
  child_dies_writing(name, "store: row written", 0, 21);
  write_gen(s, 0, 30, 31, 5);
  ck_assert_int_eq(read_gen(s, 0, 21), 4);
  ck_assert_int_eq(read_gen(s, 0, 30), 5);
  write_gen(s, 0, 21, 22, 6);
  ck_assert_int_eq(read_gen(s, 0, 21), 6);
  /* killed after the row's version is even again, before its undo record is cleared: the
   * write is complete and stays (the repair must not put the old row back) */
  child_dies_writing(name, "store: version even", 0, 40);
  ck_assert_int_eq(read_gen(s, 0, 40), 9);
  write_gen(s, 0, 41, 42, 5); /* the next writer repairs (EOWNERDEAD) */
  ck_assert_int_eq(read_gen(s, 0, 40), 9);
  ck_assert_int_eq(read_gen(s, 0, 41), 5);
  /* and before the version went odd: nothing changed */
  child_dies_writing(name, "store: undo kept", 0, 50);
  write_gen(s, 0, 51, 52, 5);
  ck_assert_int_eq(read_gen(s, 0, 50), 4);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

START_TEST(a_writer_dies_between_mapping_and_counting_an_id) {
  const char *name = fresh_name();
  emc_store *s;
  uint64_t n;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  write_gen(s, 1, 0, 10, 1);
  child_dies_writing(name, "store: id mapped", 1, 10);
  /* the next writer repairs: the id is there (with the row its writer gave it first), counted
   * once, and new ids go to new rows */
  write_gen(s, 1, 11, 12, 2);
  ck_assert_int_eq(emc_store_table_count(s, 1, &n), EMC_OK);
  ck_assert_uint_eq(n, 12);
  ck_assert_int_eq(read_gen(s, 1, 10), 9);
  ck_assert_int_eq(read_gen(s, 1, 11), 2);
  ck_assert_int_eq(read_gen(s, 1, 9), 1);
  /* and before the id was mapped: nothing of it remains, the row is reused */
  child_dies_writing(name, "store: row written", 1, 12);
  write_gen(s, 1, 13, 14, 3);
  ck_assert_int_eq(emc_store_table_count(s, 1, &n), EMC_OK);
  ck_assert_uint_eq(n, 13);
  ck_assert_int_eq(read_gen(s, 1, 12), -2);
  ck_assert_int_eq(read_gen(s, 1, 13), 3);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* ------------------------------------------------------------------ files */
START_TEST(save_and_open_shared) {
  const char *name = fresh_name();
  char path[256], name2[80], bad[272];
  emc_store *s, *o, *a;
  uint64_t r, n;
  FILE *f;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  write_gen(s, 0, 0, DENSE_ROWS, 3);
  write_gen(s, 1, 0, 250, 3);
  snprintf(path, sizeof path, "%s/shared-%d.emc", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  ck_assert_int_eq(emc_store_save(s, path), EMC_OK);
  snprintf(name2, sizeof name2, "%s-b", name);
  ck_assert_int_eq(emc_store_open_shared(path, name2, &o), EMC_OK);
  ck_assert_int_eq(emc_store_attach(name2, &a), EMC_OK);
  for (r = 0; r < DENSE_ROWS; r++) ck_assert_int_eq(read_gen(a, 0, r), 3);
  for (r = 0; r < 250; r++) ck_assert_int_eq(read_gen(a, 1, r), 3);
  ck_assert_int_eq(emc_store_table_count(a, 1, &n), EMC_OK);
  ck_assert_uint_eq(n, 250);
  /* the name exists now: a second open under it is refused, the first untouched */
  ck_assert_int_eq(emc_store_open_shared(path, name2, &s), EMC_EIO);
  ck_assert_int_eq(read_gen(o, 1, 249), 3);
  emc_store_destroy(a);
  emc_store_destroy(o);
  ck_assert_int_eq(emc_store_unlink(name2), EMC_OK);
  /* a corrupt file: refused before any name is made */
  snprintf(bad, sizeof bad, "%s.bad", path);
  f = fopen(bad, "wb");
  ck_assert_ptr_nonnull(f);
  fputs("not a store", f);
  fclose(f);
  ck_assert_int_eq(emc_store_open_shared(bad, name2, &o), EMC_ECORRUPT);
  ck_assert_int_eq(emc_store_attach(name2, &a), EMC_EIO);
  unlink(bad);
  unlink(path);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* ------------------------------------------------------------------ bad input */
/* Raw access to a segment for corrupting it. */
static unsigned char *raw_map(const char *name, size_t *bytes) {
  struct stat sb;
  int fd = shm_open(name, O_RDWR, 0);
  unsigned char *p;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fstat(fd, &sb), 0);
  p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert(p != MAP_FAILED);
  close(fd);
  *bytes = (size_t)sb.st_size;
  return p;
}

START_TEST(bad_names_and_segments) {
  const char *name = fresh_name();
  char longname[300];
  emc_store *s, *a = (emc_store *)0x1;
  emc_cache *c = NULL;
  emc_cache_config cfg;
  unsigned char *p;
  size_t bytes;
  int fd;
  const char *bad[] = {NULL, "", "/", "noslash", "/a/b"};
  unsigned i;
  memset(longname, 'x', sizeof longname);
  longname[0] = '/';
  longname[299] = 0;
  for (i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_int_eq(emc_store_create_shared(bad[i], TABLES, 2, &s), EMC_EINVAL);
    ck_assert_int_eq(emc_store_attach(bad[i], &s), EMC_EINVAL);
    ck_assert_int_eq(emc_store_unlink(bad[i]), EMC_EINVAL);
  }
  ck_assert_int_eq(emc_store_create_shared(longname, TABLES, 2, &s), EMC_EINVAL);
  ck_assert_int_eq(emc_store_create_shared(name, NULL, 2, &s), EMC_EINVAL);
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 0, &s), EMC_EINVAL);
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, NULL), EMC_EINVAL);
  ck_assert_int_eq(emc_store_attach(name, NULL), EMC_EINVAL);
  /* refused calls made no name */
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_EIO);
  ck_assert(a == (emc_store *)0x1);

  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &a), EMC_EIO); /* exists */
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), strerror(EEXIST)));
  /* AUTO picks the host backend over a shared store (CUDA caches are asked for by name:
   * test_gpu_shared_cache) */
  emct_cache_config_init(&cfg);
  cfg.capacity_bytes = 1u << 20;
  ck_assert_int_eq(emc_cache_create(s, &cfg, &c), EMC_OK);
  ck_assert_int_eq(emc_cache_backend(c), EMC_BACKEND_HOST);
  ck_assert_int_eq(emc_cache_destroy(c), EMC_OK);
  c = NULL;
  /* another format version */
  p = raw_map(name, &bytes);
  p[8] ^= 0x40;
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  p[8] ^= 0x40;
  /* never finished: `ready` is the word after total_bytes */
  p[24] = 0;
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "never finished"));
  p[24] = 1;
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_OK);
  emc_store_destroy(a);
  munmap(p, bytes);
  /* truncated */
  fd = shm_open(name, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)(bytes / 2)), 0);
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  ck_assert_int_eq(ftruncate(fd, 100), 0);
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  close(fd);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
  /* not an embcache store */
  fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, 65536), 0);
  close(fd);
  p = raw_map(name, &bytes);
  memset(p, 0x5a, bytes);
  munmap(p, bytes);
  ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "not an embcache store"));
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* A record whose blocks point past the segment, or whose count passes its rows. */
START_TEST(corrupt_table_records) {
  const char *name = fresh_name();
  emc_store *s, *a;
  unsigned char *p;
  size_t bytes, i, at = 0;
  ck_assert_int_eq(emc_store_create_shared(name, TABLES, 2, &s), EMC_OK);
  p = raw_map(name, &bytes);
  /* the second record's name "hashed": its record starts there */
  for (i = 0; i + 7 < 8192 && !at; i++)
    if (memcmp(p + i, "hashed\0", 7) == 0) at = i;
  ck_assert_uint_gt(at, 0);
  {
    uint64_t v, *f = (uint64_t *)(p + at + 256 + 16 + 8); /* off_base */
    memcpy(&v, f, 8);
    *f = v + 4096;
    ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
    *f = v;
    f = (uint64_t *)(p + at + 256 + 16 + 8 + 32); /* count */
    memcpy(&v, f, 8);
    *f = HASHED_CAP + 1u;
    ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
    *f = v;
    p[at + 256] = 7; /* kind */
    ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
    p[at + 256] = EMC_TABLE_HASHED;
    memset(p + at, 'n', 256); /* name without its NUL */
    ck_assert_int_eq(emc_store_attach(name, &a), EMC_ECORRUPT);
  }
  munmap(p, bytes);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

int main(void) {
  Suite *su = suite_create("store_shared");
  TCase *tc = tcase_create("shared");
  SRunner *sr;
  int failed;
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, processes_share_rows);
  tcase_add_test(tc, rows_outlive_their_creator);
  tcase_add_test(tc, racing_processes_never_see_torn_rows);
  tcase_add_test(tc, a_writer_dies_in_the_middle_of_a_row);
  tcase_add_test(tc, a_writer_dies_between_mapping_and_counting_an_id);
  tcase_add_test(tc, save_and_open_shared);
  tcase_add_test(tc, bad_names_and_segments);
  tcase_add_test(tc, corrupt_table_records);
  suite_add_tcase(su, tc);
  sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
