/*
 * fuzz_store_attach.c: the shared-store segment checks (lib/store/shared.c, emc_store_attach).
 *
 * Input: the bytes of a shared memory segment (the seeds are real segments of small stores).
 * They become the segment "/emc-fuzz-<pid>" (its `ready` word forced to 1: a segment never
 * finished only makes attach wait, tests/test_store_shared.c covers it; its writers' lock
 * re-initialised: the mutex's own bytes are trusted, lib/internal.h) and emc_store_attach
 * must either
 *   - fail with EMC_ECORRUPT or EMC_ENOMEM, a detail, and *out untouched; or
 *   - succeed: then every table's descriptor is valid, a hashed table's count is at most its
 *     rows, every row of up to 64 ids per table reads (present hashed ids: the row under
 *     them; absent ones: zeros), a dense row written reads back, and the store saves (or
 *     refuses a corrupt id map: EMC_ECORRUPT) and reopens with the counts it had when saved
 *     (between the counts before and after the save: a reader's repair of a dead writer's
 *     work may count one more id meanwhile).
 */
#define _GNU_SOURCE 1
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"

#define READY_AT 24u /* the header's `ready` word (lib/store/shared.c, emc__seg_hdr) */

static char g_name[64], g_path[256];

static void cleanup(void) {
  if (g_name[0]) shm_unlink(g_name);
  if (g_path[0]) unlink(g_path);
}

static void init_names(void) {
  const char *dir = getenv("TMPDIR");
  if (g_name[0]) return;
  snprintf(g_name, sizeof g_name, "/emc-fuzz-%ld", (long)getpid());
  snprintf(g_path, sizeof g_path, "%s/emc_fuzz_attach_%ld.emc", dir && *dir ? dir : "/tmp",
           (long)getpid());
  atexit(cleanup);
}

/* The segment: data, `ready` set; 0 when shared memory cannot be had (not the library's). */
static int make_segment(const uint8_t *data, size_t size) {
  int fd;
  unsigned char *p;
  shm_unlink(g_name);
  fd = shm_open(g_name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return 0;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return 0;
  }
  if (size > 0) {
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return 0;
    }
    memcpy(p, data, size);
    if (size >= READY_AT + 4) {
      uint32_t one = 1;
      memcpy(p + READY_AT, &one, 4);
    }
    { /* the lock as its creator made it: its own bytes are trusted (lib/internal.h) */
      size_t off, len;
      emc__seg_lock_span(&off, &len);
      if (size >= off + len) emc__seg_lock_init((pthread_mutex_t *)(void *)(p + off));
    }
    munmap(p, size);
  }
  close(fd);
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  emc_store *s = (emc_store *)(uintptr_t)0x5a, *o;
  emc_status st;
  uint32_t t, n;
  uint64_t before[64];
  if (size > (64u << 20)) return 0; /* the fuzzer's memory, not the library's */
  { /* a segment shorter than its header, or with a zero magic, only makes attach wait 2 s
     * for its creator (tests/test_store_shared.c): not worth the fuzzer's time */
    size_t off, len;
    static const uint8_t zero[8];
    emc__seg_lock_span(&off, &len);
    if (size < off + len || memcmp(data, zero, 8) == 0) return 0;
  }
  init_names();
  if (!make_segment(data, size)) return 0;
  st = emc_store_attach(g_name, &s);
  if (st != EMC_OK) {
    FZ_CHECK(st == EMC_ECORRUPT || st == EMC_ENOMEM, "attach: %s", emc_status_name(st));
    FZ_CHECK(emc_last_error_detail()[0] != '\0', "attach failed with an empty detail");
    FZ_CHECK(s == (emc_store *)(uintptr_t)0x5a, "a failed attach wrote *out");
    shm_unlink(g_name);
    return 0;
  }
  n = emc_store_n_tables(s);
  FZ_CHECK(n >= 1 && n <= EMC_MAX_TABLES, "%u tables", n);
  for (t = 0; t < n; t++) {
    emc_table_desc d;
    uint64_t cnt, k, ids[64];
    unsigned char *rows;
    size_t rb;
    FZ_STATUS(emc_store_table(s, t, &d), EMC_OK, "emc_store_table");
    FZ_CHECK(d.rows >= 1 && d.rows <= EMC_MAX_ROWS && d.dim >= 1 && d.dim <= EMC_MAX_DIM &&
                 (d.kind == EMC_TABLE_DENSE || d.kind == EMC_TABLE_HASHED),
             "table %u: a bad descriptor was accepted", t);
    FZ_STATUS(emc_store_table_count(s, t, &cnt), EMC_OK, "emc_store_table_count");
    FZ_CHECK(cnt <= d.rows, "table %u: count %llu > rows %llu", t, (unsigned long long)cnt,
             (unsigned long long)d.rows);
    rb = (size_t)d.dim * emc_dtype_size(d.dtype);
    rows = malloc(64 * rb);
    FZ_CHECK(rows != NULL, "row buffer");
    for (k = 0; k < 64; k++) /* dense: spread over the rows; hashed: whatever ids */
      ids[k] = d.kind == EMC_TABLE_DENSE ? (k * 2654435761u) % d.rows : k * 0x9e3779b97f4a7c15ull;
    FZ_STATUS(emc_store_read(s, t, ids, 64, rows), EMC_OK, "emc_store_read");
    if (d.kind == EMC_TABLE_DENSE) {
      memset(rows, 0x3c, rb);
      FZ_STATUS(emc_store_write(s, t, ids, 1, rows), EMC_OK, "emc_store_write");
      memset(rows, 0, rb);
      FZ_STATUS(emc_store_read(s, t, ids, 1, rows), EMC_OK, "emc_store_read");
      for (k = 0; k < rb; k++) FZ_CHECK(rows[k] == 0x3c, "table %u: a written row reads back wrong", t);
    }
    free(rows);
  }
  { /* counts before the save: a save samples each count once, and a repair of a dead
     * writer's work (a reader that finds a version odd) may count one more id meanwhile */
    for (t = 0; t < n && t < 64; t++) FZ_STATUS(emc_store_table_count(s, t, &before[t]), EMC_OK, "count");
  }
  st = emc_store_save(s, g_path);
  /* ECORRUPT: the maps' contents are not checked at attach (include/embcache.h); a save
   * refuses a map whose ids do not map back to their rows */
  FZ_CHECK(st == EMC_OK || st == EMC_ENOMEM || st == EMC_EIO || st == EMC_ECORRUPT, "save: %s",
           emc_status_name(st));
  if (st == EMC_OK) {
    st = emc_store_open(g_path, &o);
    FZ_CHECK(st == EMC_OK || st == EMC_ENOMEM, "reopen: %s", emc_status_name(st));
    if (st == EMC_OK) {
      FZ_CHECK(emc_store_n_tables(o) == n, "reopened with another table count");
      for (t = 0; t < n && t < 64; t++) {
        uint64_t a, b;
        FZ_STATUS(emc_store_table_count(s, t, &a), EMC_OK, "count");
        FZ_STATUS(emc_store_table_count(o, t, &b), EMC_OK, "count");
        FZ_CHECK(before[t] <= b && b <= a, "table %u: count %llu before the save, %llu after, "
                 "reopened %llu", t, (unsigned long long)before[t], (unsigned long long)a,
                 (unsigned long long)b);
      }
      emc_store_destroy(o);
    }
    unlink(g_path);
  }
  emc_store_destroy(s);
  shm_unlink(g_name);
  return 0;
}
