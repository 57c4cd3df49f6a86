/*
 * test_admission: background admission on the host backend (white-box).
 *
 * With cfg.admission = EMC_ADMISSION_BACKGROUND a lookup records its misses and returns; a
 * thread of the cache admits them later (include/embcache.h, emc_cache_config.admission).
 *
 *   background admission (cfg.admission = EMC_ADMISSION_BACKGROUND)
 *              an unknown admission value is refused; after a lookup of distinct cold ids and
 *              emc_flush: admissions + admit_skipped == the admit-eligible misses (store rows,
 *              not absent ids), and a second lookup of the ids (which fit) hits; a small cache
 *              under Zipf batches and inserts: rows always equal the reference, and after each
 *              flush emc__cache_check and the stats invariants hold. Queued misses for sure: a
 *              helper thread's big insert holds the writer lock while a lookup queues its
 *              misses. Destroying a cache with misses queued (the counters show they were):
 *              the cache ran a thread of its own, which is gone after destroy (joined: the
 *              ASan build reports a use after free otherwise), every inserted row is in the
 *              store, a new cache attaches, nothing leaks (ASan's leak check). An insert of
 *              ids while their misses are queued (the insert waits for the lock before the
 *              lookup queues them, so it runs first): the queued admissions find the ids
 *              cached and leave them, the inserted values are what lookups return and what the
 *              store holds after emc_flush. fork(): the child's copy of such a cache admits
 *              inline and its flush and destroy return; the parent's cache goes on.
 *   the default, AUTO, without the thread
 *              where the admission thread cannot start (the tests' build fails it on
 *              request: emc__fail_thread_start, lib/internal.h), an AUTO cache admits inline
 *              (emc_cache_admission says so, no thread runs, a lookup's misses are cached
 *              when it returns) and BACKGROUND by name is EMC_ENOMEM with a detail; on one
 *              CPU (the creating thread's affinity) AUTO admits inline too.
 *
 * Check's passing assertions each write a record to its message file, so per-row checks here
 * reach ck_assert only on a failure (emct_world_check_rows / _store do so).
 * EMCT_VERBOSE=1 prints what each case covered.
 */
#define _GNU_SOURCE 1 /* sched_setaffinity, CPU_SET */
#include "common.h"
#include "lookup_common.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */
/* Admission threads ("emc-admit") of this process now (/proc/self/task). */
static int thread_count(void) {
  /* the cache's admission threads, by name (a sanitizer's runtime may start threads of its
   * own at any time) */
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  ck_assert_msg(d != NULL, "cannot open /proc/self/task");
  while ((e = readdir(d)) != NULL) {
    char path[300], comm[32] = "";
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if (!(f = fopen(path, "r"))) continue; /* the thread just ended */
    if (fgets(comm, sizeof comm, f) && strncmp(comm, "emc-admit", 9) == 0) n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

/* Wait up to `seconds` for the thread count to come back to base; returns the count. */
static int wait_threads(int base, double seconds) {
  double t0 = now_s();
  for (;;) {
    int n = thread_count();
    if (n == base) return n;
    if (now_s() - t0 > seconds) return n;
    pause_us(2000);
  }
}

/* ================================================================== background admission */
static const emct_tspec bg_spec[3] = {{EMC_TABLE_DENSE, 4000, 16, EMC_DTYPE_F32, 0, 0},
                                      {EMC_TABLE_HASHED, 3000, 3, EMC_DTYPE_F16, 3000, 1500},
                                      {EMC_TABLE_DENSE, 500, 64, EMC_DTYPE_F16, 0, 0}};

/* A lookup checked against the reference; returns the where[] counts. */
static void bg_lookup(emc_cache *c, const emct_world *w, const uint64_t *ids, const uint64_t *ranks,
                      const uint64_t *offsets, uint64_t *n_cache, uint64_t *n_store,
                      uint64_t *n_absent, const char *what) {
  uint64_t n = offsets[w->n], i;
  size_t bytes = emct_world_batch_bytes(w, offsets);
  unsigned char *out = xmalloc(bytes);
  uint8_t *where = xmalloc(n);
  EMCT_OK(emc_lookup_ex(c, ids, offsets, out, where, NULL));
  emct_world_check_rows(w, ranks, offsets, out, where, what);
  *n_cache = *n_store = *n_absent = 0;
  for (i = 0; i < n; i++) {
    *n_cache += where[i] == EMC_WHERE_CACHE;
    *n_store += where[i] == EMC_WHERE_STORE;
    *n_absent += where[i] == EMC_WHERE_ABSENT;
  }
  free(out);
  free(where);
}

START_TEST(background_admission_accounting) {
  emct_world w;
  emc_cache *c;
  bbuild b;
  uint64_t i, nc, ns, na, eligible, round, rounds = emct_gpu_scale(emct_scale(60, 3), 4);
  emc_stats s0, s1;
  emc_cache_config cfg;
  emct_world_init(&w, bg_spec, 3, 1.0, 515);
  bb_init(&b, 3, 8000);
  /* an admission mode the header does not name is refused */
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.admission = 3;
  {
    emc_cache *bad = NULL;
    EMCT_ST(emc_cache_create(w.store, &cfg, &bad), EMC_EINVAL);
    ck_assert(bad == NULL);
  }
  /* 1. a cache large enough for every row: distinct ids, all cold */
  c = make_cache(&w, (size_t)1 << 20, 64, 1024, 3, EMC_ADMISSION_BACKGROUND);
  for (i = 0; i < 1000; i++) bb_add(&b, 0, (i * 7) % 4000);
  for (i = 0; i < 1500; i++) bb_add(&b, 1, i * 2); /* ranks >= 1500 are absent */
  for (i = 0; i < 200; i++) bb_add(&b, 2, i);
  bb_group(&b, &w);
  s0 = get_stats(c);
  bg_lookup(c, &w, b.ids, b.ranks, b.offsets, &nc, &ns, &na, "cold distinct ids");
  ck_assert_uint_eq(nc, 0);
  ck_assert_uint_eq(na, 750);
  eligible = ns;
  ck_assert_uint_eq(eligible, 1000 + 750 + 200);
  EMCT_OK(emc_flush(c, NULL));
  s1 = get_stats(c);
  ck_assert_msg(s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped == eligible,
                "after emc_flush: %llu admitted + %llu skipped != %llu admit-eligible misses",
                (unsigned long long)(s1.admissions - s0.admissions),
                (unsigned long long)(s1.admit_skipped - s0.admit_skipped), (unsigned long long)eligible);
  ck_assert_uint_eq(s1.misses - s0.misses, eligible);
  ck_assert_uint_eq(s1.absent - s0.absent, 750);
  ck_assert_uint_eq(s1.rows_cached, s1.admissions);
  emct_check_cache(c, &w, 1, "background: after flush");
  /* the same ids again: every present id hits (they all fit), absent ones stay absent */
  bg_lookup(c, &w, b.ids, b.ranks, b.offsets, &nc, &ns, &na, "the same ids again");
  ck_assert_msg(nc == eligible && ns == 0 && na == 750,
                "second lookup: %llu hits, %llu misses, %llu absent (expected %llu hits)",
                (unsigned long long)nc, (unsigned long long)ns, (unsigned long long)na,
                (unsigned long long)eligible);
  EMCT_OK(emc_flush(c, NULL));
  ck_assert_uint_eq(get_stats(c).admissions, s1.admissions); /* nothing more to admit */
  emct_check_cache(c, &w, 1, "background: second lookup");
  EMCT_OK(emc_cache_destroy(c));

  /* 2. a small cache evicting all the time: Zipf batches with duplicates, inserts now and
   * then; rows always right; after each flush the structure and the stats add up */
  c = make_cache(&w, 24u << 10, 32, 256, 4, EMC_ADMISSION_BACKGROUND);
  for (round = 0; round < rounds; round++) {
    uint64_t counts[3] = {150, 150, 40}, ranks[340], ids[340], offs[4];
    char what[64];
    snprintf(what, sizeof what, "background churn %llu", (unsigned long long)round);
    emct_world_batch(&w, counts, ids, ranks, offs);
    bg_lookup(c, &w, ids, ranks, offs, &nc, &ns, &na, what);
    if (round % 7 == 3) {
      unsigned char rows[340 * 128];
      uint64_t ic[3] = {20, 20, 5};
      emct_world_batch(&w, ic, ids, ranks, offs);
      pattern_batch(&w, ids, offs, 300 + round, rows);
      EMCT_OK(emc_insert(c, ids, offs, rows, NULL));
      emct_world_apply_insert(&w, ranks, offs, rows);
      bg_lookup(c, &w, ids, ranks, offs, &nc, &ns, &na, "inserted ids");
      ck_assert_uint_eq(na, 0);
    }
    if (round % 5 == 4) {
      EMCT_OK(emc_flush(c, NULL));
      s1 = get_stats(c);
      ck_assert_uint_eq(s1.dirty_rows, 0);
      ck_assert_msg(s1.admissions + s1.admit_skipped <= s1.misses,
                    "%s: %llu admitted + %llu skipped > %llu misses", what,
                    (unsigned long long)s1.admissions, (unsigned long long)s1.admit_skipped,
                    (unsigned long long)s1.misses);
      emct_check_cache(c, &w, 0, what);
    }
  }
  EMCT_OK(emc_flush(c, NULL));
  s1 = get_stats(c);
  ck_assert_msg(s1.evictions > 0 && s1.admissions > 0 && s1.hits > 0,
                "background churn: evictions %llu admissions %llu hits %llu",
                (unsigned long long)s1.evictions, (unsigned long long)s1.admissions,
                (unsigned long long)s1.hits);
  emct_check_cache(c, &w, 0, "background churn: end");
  emct_world_check_store(&w, "background churn: store after flush");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_check_store(&w, "background churn: store after destroy");
  bb_free(&b);
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ queued misses
 * To have misses queued for sure, a helper thread holds the cache's writer lock: it inserts a
 * big batch B (an insert holds the lock throughout; its rows appear in rows_cached one by one,
 * which tells the test the lock is taken). Lookups meanwhile queue their misses, and the
 * admission thread waits for the lock. Dense ids are i * 7 mod 150000 (a bijection), so
 * batches over disjoint ranges of i are disjoint. */
static const emct_tspec bgq_spec[2] = {{EMC_TABLE_DENSE, 150000, 4, EMC_DTYPE_F32, 0, 0},
                                       {EMC_TABLE_HASHED, 20000, 3, EMC_DTYPE_F16, 20000, 15000}};

typedef struct qbatch {
  uint64_t *ids, *ranks, offs[3], n;
  unsigned char *out, *rows; /* a lookup's rows; rows to insert */
  uint8_t *where;
} qbatch;

static void qbatch_make(qbatch *q, const emct_world *w, uint64_t dense_from, uint64_t dense_n,
                        uint64_t hashed_from, uint64_t hashed_n, uint64_t tag) {
  uint64_t i, k = 0;
  size_t bytes;
  q->n = dense_n + hashed_n;
  q->ids = xmalloc(q->n * sizeof *q->ids);
  q->ranks = xmalloc(q->n * sizeof *q->ranks);
  q->offs[0] = 0;
  for (i = 0; i < dense_n; i++, k++) q->ids[k] = q->ranks[k] = (dense_from + i) * 7 % 150000;
  q->offs[1] = k;
  for (i = 0; i < hashed_n; i++, k++) q->ids[k] = emct_id_of(w, 1, q->ranks[k] = hashed_from + i);
  q->offs[2] = k;
  bytes = emct_world_batch_bytes(w, q->offs);
  q->out = xmalloc(bytes);
  q->rows = xmalloc(bytes);
  q->where = xmalloc(q->n);
  pattern_batch(w, q->ids, q->offs, tag, q->rows);
}

static void qbatch_free(qbatch *q) {
  free(q->ids); free(q->ranks); free(q->out); free(q->rows); free(q->where);
}

static uint64_t count_where(const uint8_t *where, uint64_t n, uint8_t v) {
  uint64_t i, c = 0;
  for (i = 0; i < n; i++) c += where[i] == v;
  return c;
}

typedef struct qcall {
  emc_cache *c;
  qbatch *b;
  int insert;     /* 1: emc_insert of b->rows; 0: emc_lookup_ex into b->out, b->where */
  long delay_us;  /* before the call */
  emc_status st;
  int returned;   /* atomic: the call returned */
  int release;    /* atomic: the thread may end (it waits for this after its call) */
  pthread_t th;
} qcall;

static void *qcall_main(void *arg) {
  qcall *q = arg;
  if (q->delay_us) pause_us(q->delay_us);
  q->st = q->insert ? emc_insert(q->c, q->b->ids, q->b->offs, q->b->rows, NULL)
                    : emc_lookup_ex(q->c, q->b->ids, q->b->offs, q->b->out, q->b->where, NULL);
  ST_REL(&q->returned, 1);
  while (!LD_ACQ(&q->release)) pause_us(100);
  return NULL;
}

static void qcall_start(qcall *q, emc_cache *c, qbatch *b, int insert, long delay_us) {
  q->c = c;
  q->b = b;
  q->insert = insert;
  q->delay_us = delay_us;
  q->st = EMC_OK;
  q->returned = q->release = 0;
  ck_assert_int_eq(pthread_create(&q->th, NULL, qcall_main, q), 0);
}

/* Wait until the call returned (the thread stays, until qcall_join). */
static void qcall_wait(qcall *q) {
  while (!LD_ACQ(&q->returned)) pause_us(50);
}

static void qcall_join(qcall *q, const char *what) {
  ST_REL(&q->release, 1);
  ck_assert_int_eq(pthread_join(q->th, NULL), 0);
  ck_assert_msg(q->st == EMC_OK, "%s: %s returned %s", what, q->insert ? "emc_insert" : "emc_lookup_ex",
                emc_status_name(q->st));
}

/* Start the helper's insert of b and wait until it holds the writer lock (rows_cached moves);
 * 0 if it did not within 2 s. */
static int hold_lock(qcall *h, emc_cache *c, qbatch *b) {
  uint64_t r0 = get_stats(c).rows_cached, e0 = get_stats(c).evictions;
  double t0 = now_s();
  qcall_start(h, c, b, 1, 0);
  for (;;) {
    emc_stats s = get_stats(c);
    if (s.rows_cached != r0 || s.evictions != e0) return 1;
    if (now_s() - t0 > 2.0) return 0;
  }
}

/* Each inserted row is the reference's (after apply): the store's rows after a flush. */
static void qbatch_apply(emct_world *w, const qbatch *q) {
  emct_world_apply_insert(w, q->ranks, q->offs, q->rows);
}

/* Misses queued while the writer lock is held, dirty rows inserted before, then
 * emc_cache_destroy while the misses are still queued (the counters say they were: a round of
 * the thread adds its admissions when it ends): the cache's thread ran and is gone after
 * destroy, every inserted row is in the store, the store serves a new cache, and nothing
 * leaks (the ASan build's leak check fails the test). Rounds (a fresh cache each) until one
 * destroy met queued misses, at least 2, at most 10. */
START_TEST(background_destroy_with_queued_misses) {
  emct_world w;
  uint64_t round, nc, ns, na, queued_rounds = 0;
  emct_world_init(&w, bgq_spec, 2, 1.0, 616);
  for (round = 0; round < 10 && (round < 2 || queued_rounds == 0); round++) {
    emc_cache *c;
    qbatch b, x, y;
    qcall h;
    emc_stats s0, s1;
    uint64_t elig_x;
    int base, during, after;
    char what[96];
    snprintf(what, sizeof what, "destroy with queued misses, round %llu", (unsigned long long)round);
    qbatch_make(&b, &w, 0, 60000, 0, 0, 100 + round);           /* the lock holder */
    qbatch_make(&x, &w, 60000, 40000, 0, 8000, 0);               /* misses to queue */
    qbatch_make(&y, &w, 100000 + round * 300, 300, 14800 + round * 20, 200, 200 + round);
    base = thread_count();
    /* 64 KiB: B's insert and X's admissions take eviction passes */
    c = make_cache(&w, 64u << 10, 64, 4096, 5 + round, EMC_ADMISSION_BACKGROUND);
    EMCT_OK(emc_insert(c, y.ids, y.offs, y.rows, NULL)); /* dirty rows; new hashed ids */
    qbatch_apply(&w, &y);
    s0 = get_stats(c);
    ck_assert_msg(hold_lock(&h, c, &b), "%s: the helper's insert never started", what);
    EMCT_OK(emc_lookup_ex(c, x.ids, x.offs, x.out, x.where, NULL));
    qcall_wait(&h);
    s1 = get_stats(c);
    during = thread_count(); /* admission threads only (the helper is not counted) */
    qcall_join(&h, what);
    EMCT_OK(emc_cache_destroy(c));
    after = wait_threads(base, 2.0);
    qbatch_apply(&w, &b);
    /* X was read while B's insert held the lock: B and X are disjoint, so X's rows are the
     * reference's */
    emct_world_check_rows(&w, x.ranks, x.offs, x.out, x.where, what);
    elig_x = count_where(x.where, x.n, EMC_WHERE_STORE);
    ck_assert_msg(elig_x > x.n / 2, "%s: only %llu of %llu positions of X missed", what,
                  (unsigned long long)elig_x, (unsigned long long)x.n);
    queued_rounds += s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped < elig_x;
    if (getenv("EMCT_VERBOSE"))
      fprintf(stderr, "%s: %llu misses queued, %llu admitted or skipped when destroy began\n",
              what, (unsigned long long)elig_x,
              (unsigned long long)(s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped));
    ck_assert_msg(during > base,
                  "%s: background admission: no thread of the cache ran while %llu misses were "
                  "queued (%d threads before the cache, %d with misses queued)", what,
                  (unsigned long long)elig_x, base, during);
    ck_assert_msg(after == base, "%s: %d threads after emc_cache_destroy, %d before the cache "
                  "was created (the cache's thread was not joined)", what, after, base);
    /* nothing lost: every inserted row (y: dirty, some new hashed ids; B: dirty or written
     * through) is in the store, every other row unchanged */
    emct_world_check_store(&w, what);
    /* the store was detached: a new cache attaches and serves the rows */
    c = make_cache(&w, 64u << 10, 64, 4096, 5, EMC_ADMISSION_INLINE);
    bg_lookup(c, &w, y.ids, y.ranks, y.offs, &nc, &ns, &na, "new cache");
    ck_assert_uint_eq(na, 0);
    EMCT_OK(emc_cache_destroy(c));
    qbatch_free(&b); qbatch_free(&x); qbatch_free(&y);
  }
  ck_assert_msg(queued_rounds > 0, "in %llu rounds no emc_cache_destroy met queued misses: the "
                "case was not exercised", (unsigned long long)round);
  emct_world_free(&w);
}
END_TEST

/* An insert of ids whose misses are queued: while a helper's insert holds the writer lock, the
 * test's insert of X waits for the lock, and then a lookup of X (another thread, a little later)
 * queues X's misses; the admission thread, woken by them, waits for the lock behind the
 * insert. So X's queued admissions find X cached (neither admitted nor skipped). The inserted
 * (dirty) values win: lookups return them, at once and after the queue drained, and the store
 * holds them after emc_flush. Rounds (a fresh cache each) until one showed the interleaving,
 * at least 2, at most 10. */
START_TEST(background_insert_while_queued) {
  emct_world w;
  uint64_t round, nc, ns, na, raced_rounds = 0;
  emct_world_init(&w, bgq_spec, 2, 1.0, 717);
  for (round = 0; round < 10 && (round < 2 || raced_rounds == 0); round++) {
    emc_cache *c;
    qbatch b, x, x2;
    qcall h, l;
    emc_stats s0, s1;
    uint64_t elig_x, delta, i, n_old = 0, n_new = 0;
    unsigned char *old;
    size_t xbytes;
    char what[96];
    snprintf(what, sizeof what, "insert while queued, round %llu", (unsigned long long)round);
    qbatch_make(&b, &w, 0, 60000, 0, 0, 300 + round);
    qbatch_make(&x, &w, 60000, 300, 5000 + round * 100, 100, 400 + round);
    qbatch_make(&x2, &w, 60000, 300, 5000 + round * 100, 100, 0); /* X again, to look up */
    xbytes = emct_world_batch_bytes(&w, x.offs);
    /* the rows X has now (before its insert) */
    old = xmalloc(xbytes);
    {
      const unsigned char *src;
      unsigned char *p = old;
      uint32_t t;
      for (t = 0; t < 2; t++)
        for (i = x.offs[t]; i < x.offs[t + 1]; i++, p += w.row_bytes[t]) {
          src = w.ref[t] + x.ranks[i] * w.row_bytes[t];
          memcpy(p, src, w.row_bytes[t]);
        }
    }
    /* room for every row: nothing is evicted, so the inserted rows stay cached */
    c = make_cache(&w, (size_t)8 << 20, 32, 1024, 6 + round, EMC_ADMISSION_BACKGROUND);
    s0 = get_stats(c);
    ck_assert_msg(hold_lock(&h, c, &b), "%s: the helper's insert never started", what);
    qcall_start(&l, c, &x2, 0, 5000); /* the lookup of X, 5 ms later */
    EMCT_OK(emc_insert(c, x.ids, x.offs, x.rows, NULL));
    qcall_join(&l, what);
    qcall_join(&h, what);
    qbatch_apply(&w, &b);
    /* the lookup's rows: each X row is its old or its inserted value (old when the lookup ran
     * before the insert, as intended) */
    {
      const unsigned char *o = x2.out, *p = old, *q = x.rows;
      uint32_t t;
      for (t = 0; t < 2; t++) {
        size_t rb = w.row_bytes[t];
        for (i = x.offs[t]; i < x.offs[t + 1]; i++, o += rb, p += rb, q += rb) {
          int is_old = memcmp(o, p, rb) == 0, is_new = memcmp(o, q, rb) == 0;
          int present = w.present[t][x.ranks[i]];
          if (!(is_old || is_new) ||
              (is_old && x2.where[i] != (present ? EMC_WHERE_STORE : EMC_WHERE_ABSENT)) ||
              (is_new && !is_old && x2.where[i] == EMC_WHERE_ABSENT))
            ck_assert_msg(0, "%s: X position %llu: the row is %s, where %u", what,
                          (unsigned long long)i, is_old ? "the old one" : is_new ? "the inserted one" : "neither the old nor the inserted one",
                          x2.where[i]);
          n_old += is_old;
          n_new += is_new && !is_old;
        }
      }
    }
    qbatch_apply(&w, &x);
    elig_x = count_where(x2.where, x.n, EMC_WHERE_STORE);
    /* at once: the inserted values */
    bg_lookup(c, &w, x.ids, x.ranks, x.offs, &nc, &ns, &na, "inserted ids at once");
    ck_assert_uint_eq(na, 0);
    EMCT_OK(emc_flush(c, NULL));
    s1 = get_stats(c);
    ck_assert_uint_eq(s1.dirty_rows, 0);
    ck_assert_uint_eq(s1.evictions, 0);
    /* the lookup's queued misses: admitted or skipped, except those the insert cached first */
    delta = s1.admissions - s0.admissions + s1.admit_skipped - s0.admit_skipped;
    ck_assert_msg(delta <= elig_x, "%s: %llu admitted or skipped for %llu misses", what,
                  (unsigned long long)delta, (unsigned long long)elig_x);
    raced_rounds += n_new == 0 && elig_x > 0 && delta < elig_x;
    if (getenv("EMCT_VERBOSE"))
      fprintf(stderr, "%s: lookup saw %llu old and %llu inserted rows; %llu misses, %llu admitted "
              "or skipped\n", what, (unsigned long long)n_old, (unsigned long long)n_new,
              (unsigned long long)elig_x, (unsigned long long)delta);
    /* after the queue drained: the inserted values, cached, and in the store */
    bg_lookup(c, &w, x.ids, x.ranks, x.offs, &nc, &ns, &na, "inserted ids after flush");
    ck_assert_msg(nc == x.n, "%s: %llu of %llu inserted rows cached after the flush", what,
                  (unsigned long long)nc, (unsigned long long)x.n);
    emct_world_check_store(&w, what);
    emct_check_cache(c, &w, 0, what);
    EMCT_OK(emc_cache_destroy(c));
    emct_world_check_store(&w, what);
    qbatch_free(&b); qbatch_free(&x); qbatch_free(&x2);
    free(old);
  }
  ck_assert_msg(raced_rounds > 0, "in %llu rounds the insert never came before the queued "
                "admissions of its ids: the case was not exercised", (unsigned long long)round);
  emct_world_free(&w);
}
END_TEST

/* ------------------------------------------------------------------ flush under load
 * emc_flush waits for the misses of lookups that returned before it, not for the queue to
 * empty: with two threads looking up cold ids without a pause, every flush returns (before
 * the fix a drain waited for the queue to empty, which never happened while lookups ran).
 * Each flush must also leave the stats of the lookups before it complete: no id repeats, so
 * every miss is admitted or skipped exactly once, and admissions + admit_skipped cover the
 * misses of the lookups that returned before the flush began. */
#define LOOKER_IDS 4000000u /* ids of one looker thread: [seed, seed + LOOKER_IDS) */
typedef struct looker {
  emc_cache *c;
  uint64_t seed;
  int *stop;
  uint64_t misses_done; /* misses of this thread's lookups that returned (atomic) */
} looker;

/* fork(): a child's copy of a cache that runs an admission thread has no such thread. It
 * admits inline (a miss is cached when the lookup returns), and emc_flush and
 * emc_cache_destroy return instead of waiting for the parent's thread; the parent's cache
 * goes on as before. The child reports by its exit code (an alarm ends a hung one). */
static int child_of_fork(emc_cache *c, const emct_world *w, const uint64_t *ids,
                         const uint64_t *offsets) {
  uint64_t n = offsets[w->n], i;
  unsigned char *out = malloc(emct_world_batch_bytes(w, offsets));
  uint8_t *where = malloc(n);
  signal(SIGALRM, SIG_DFL); /* Check's handler would kill the whole process group */
  alarm((unsigned)emct_timeout(30));
  if (!out || !where) return 2;
  if (emc_cache_admission(c) != EMC_ADMISSION_INLINE) return 7;
  if (emc_lookup_ex(c, ids, offsets, out, where, NULL) != EMC_OK) return 3;
  if (emc_lookup_ex(c, ids, offsets, out, where, NULL) != EMC_OK) return 3;
  for (i = 0; i < n; i++)
    if (where[i] != EMC_WHERE_CACHE) return 4; /* not admitted when the first lookup returned */
  if (emc_flush(c, NULL) != EMC_OK) return 5;
  if (emc_cache_destroy(c) != EMC_OK) return 6;
  free(out);
  free(where);
  return 0;
}

START_TEST(background_fork_child_admits_inline) {
  emct_world w;
  emc_cache *c;
  uint64_t counts[3] = {60, 0, 20}, ranks[80], ids[80], offs[4], nc, ns, na;
  emc_stats before, after;
  pid_t pid;
  int status = 0;
  emct_world_init(&w, bg_spec, 3, 1.0, 616);
  c = make_cache(&w, (size_t)1 << 20, 64, 1024, 7, EMC_ADMISSION_BACKGROUND);
  ck_assert_int_eq(emc_cache_admission(c), EMC_ADMISSION_BACKGROUND);
  emct_world_batch(&w, counts, ids, ranks, offs);
  bg_lookup(c, &w, ids, ranks, offs, &nc, &ns, &na, "before the fork");
  EMCT_OK(emc_flush(c, NULL)); /* the thread idles (holds no lock) when the fork comes */
  emct_world_batch(&w, counts, ids, ranks, offs);
  fflush(NULL);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(child_of_fork(c, &w, ids, offs));
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child of fork(): %s %d (2 no memory, 3 lookup failed, 4 its misses were not "
                "cached when the lookup returned, 5 flush, 6 destroy failed, 7 "
                "emc_cache_admission is not INLINE)",
                WIFEXITED(status) ? "exit" : "signal (an alarm: it hung)",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  /* the parent's cache and thread: the child's admissions were the child's own, so the batch
   * misses here, and the thread admits it */
  ck_assert_int_eq(emc_cache_admission(c), EMC_ADMISSION_BACKGROUND);
  before = get_stats(c);
  bg_lookup(c, &w, ids, ranks, offs, &nc, &ns, &na, "parent after the fork");
  EMCT_OK(emc_flush(c, NULL));
  after = get_stats(c);
  /* (misses count positions, admissions distinct rows: the batch repeats ids) */
  ck_assert_msg(ns > 0 && after.admissions > before.admissions &&
                    after.admissions + after.admit_skipped - before.admissions -
                            before.admit_skipped <= after.misses - before.misses,
                "parent after the fork: %llu misses, %llu admitted, %llu skipped",
                (unsigned long long)(after.misses - before.misses),
                (unsigned long long)(after.admissions - before.admissions),
                (unsigned long long)(after.admit_skipped - before.admit_skipped));
  emct_check_cache(c, &w, 1, "parent after the fork");
  EMCT_OK(emc_cache_destroy(c));
  emct_world_free(&w);
}
END_TEST

static void *looker_main(void *arg) {
  looker *l = arg;
  uint64_t ids[256], off[2] = {0, 256}, x = l->seed;
  uint8_t where[256];
  float *out = malloc(256 * 2 * sizeof *out);
  int i;
  if (!out) return NULL;
  while (!__atomic_load_n(l->stop, __ATOMIC_RELAXED)) {
    uint64_t m = 0;
    if (x + 256 > l->seed + LOOKER_IDS) { /* this thread's ids are used up: idle */
      pause_us(1000);
      continue;
    }
    for (i = 0; i < 256; i++) ids[i] = x++; /* never repeated: each miss admitted or skipped once */
    if (emc_lookup_ex(l->c, ids, off, out, where, NULL) != EMC_OK) break;
    for (i = 0; i < 256; i++) m += where[i] == EMC_WHERE_STORE;
    __atomic_fetch_add(&l->misses_done, m, __ATOMIC_SEQ_CST);
  }
  free(out);
  return NULL;
}

START_TEST(background_flush_under_load) {
  emc_table_desc d = {"d", EMC_TABLE_DENSE, 2 * LOOKER_IDS, 2, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *st;
  emc_cache *c;
  emc_cache_config cfg;
  looker l[2];
  pthread_t th[2];
  int stop = 0, i, k, flushes = emct_gpu_quick() ? 2 : 4;
  EMCT_OK(emc_store_create(&d, 1, &st));
  emct_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 256u << 10; /* a small cache: a short queue (at most the rows it holds) */
  cfg.admission = EMC_ADMISSION_BACKGROUND;
  EMCT_OK(emc_cache_create(st, &cfg, &c));
  for (i = 0; i < 2; i++) {
    l[i].c = c;
    l[i].seed = (uint64_t)i * LOOKER_IDS;
    l[i].stop = &stop;
    l[i].misses_done = 0;
    ck_assert_int_eq(pthread_create(&th[i], NULL, looker_main, &l[i]), 0);
  }
  pause_us(100000);
  for (k = 0; k < flushes; k++) {
    uint64_t before = __atomic_load_n(&l[0].misses_done, __ATOMIC_SEQ_CST) +
                      __atomic_load_n(&l[1].misses_done, __ATOMIC_SEQ_CST);
    double t0 = now_s(), took;
    emc_stats s;
    EMCT_OK(emc_flush(c, NULL)); /* the suite's timeout catches a flush that never returns */
    took = now_s() - t0;
    EMCT_OK(emc_get_stats(c, &s));
    ck_assert_msg(s.admissions + s.admit_skipped >= before,
                  "flush %d: %llu admitted + %llu skipped < %llu misses of lookups that "
                  "returned before the flush", k, (unsigned long long)s.admissions,
                  (unsigned long long)s.admit_skipped, (unsigned long long)before);
    if (getenv("EMCT_VERBOSE")) fprintf(stderr, "flush %d under load: %.3f s\n", k, took);
    ck_assert_msg(took < emct_timeout(10.0), "flush %d took %.1f s under load", k, took);
    pause_us(20000);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  for (i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(th[i], NULL), 0);
  ck_assert_msg(l[0].misses_done > 0 && l[1].misses_done > 0, "the lookup threads did not run");
  EMCT_OK(emc__cache_check(c));
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(st);
}
END_TEST

/* ================================================================== AUTO without the thread */
/* An AUTO cache over w (1 MiB: every row of bg_spec's first table fits), created with the
 * admission thread failing to start when `fail`. */
static emc_cache *auto_cache(emct_world *w, emc_admission admission, int fail, emc_status *st) {
  emc_cache_config cfg;
  emc_cache *c = NULL;
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = (size_t)1 << 20;
  cfg.admission = admission;
  __atomic_store_n(&emc__fail_thread_start, fail, __ATOMIC_SEQ_CST);
  *st = emc_cache_create(w->store, &cfg, &c);
  __atomic_store_n(&emc__fail_thread_start, 0, __ATOMIC_SEQ_CST);
  return c;
}

/* Cold distinct ids of table 0 looked up once: with inline admission each is cached when the
 * lookup returns (no flush), so the stats count them and the same lookup then hits. */
static void check_admits_inline(emc_cache *c, const emct_world *w, const char *what) {
  bbuild b;
  uint64_t i, nc, ns, na;
  emc_stats s0, s1;
  bb_init(&b, 3, 500);
  for (i = 0; i < 500; i++) bb_add(&b, 0, i * 3);
  bb_group(&b, w);
  s0 = get_stats(c);
  bg_lookup(c, w, b.ids, b.ranks, b.offsets, &nc, &ns, &na, what);
  ck_assert_msg(nc == 0 && ns == 500, "%s: %llu hits, %llu misses of 500 cold ids", what,
                (unsigned long long)nc, (unsigned long long)ns);
  s1 = get_stats(c); /* no emc_flush: inline admission is done when the lookup returns */
  ck_assert_msg(s1.admissions - s0.admissions == 500,
                "%s: %llu of 500 misses admitted when the lookup returned", what,
                (unsigned long long)(s1.admissions - s0.admissions));
  bg_lookup(c, w, b.ids, b.ranks, b.offsets, &nc, &ns, &na, what);
  ck_assert_msg(nc == 500, "%s: the second lookup hit %llu of 500", what, (unsigned long long)nc);
  bb_free(&b);
}

START_TEST(auto_without_thread_admits_inline) {
  emct_world w;
  emc_cache *c;
  emc_status st;
  const int base = thread_count();
  emct_world_init(&w, bg_spec, 3, 1.0, 519);
  /* the thread fails to start: AUTO admits inline */
  c = auto_cache(&w, EMC_ADMISSION_AUTO, 1, &st);
  EMCT_OK(st);
  ck_assert_int_eq(emc_cache_admission(c), EMC_ADMISSION_INLINE);
  ck_assert_int_eq(thread_count(), base);
  check_admits_inline(c, &w, "AUTO, thread failed");
  emct_check_cache(c, &w, 1, "AUTO, thread failed");
  EMCT_OK(emc_cache_destroy(c));
  /* BACKGROUND by name: refused, with the reason; the store is free for the next cache */
  c = auto_cache(&w, EMC_ADMISSION_BACKGROUND, 1, &st);
  ck_assert_int_eq(st, EMC_ENOMEM);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(emc_last_error_detail(), "admission thread") != NULL,
                "detail \"%s\" does not name the admission thread", emc_last_error_detail());
  ck_assert_int_eq(thread_count(), base);
  c = auto_cache(&w, EMC_ADMISSION_BACKGROUND, 0, &st);
  EMCT_OK(st);
  ck_assert_int_eq(emc_cache_admission(c), EMC_ADMISSION_BACKGROUND);
  ck_assert_int_eq(thread_count(), base + 1);
  EMCT_OK(emc_cache_destroy(c));
  ck_assert_int_eq(wait_threads(base, emct_timeout(5.0)), base);
  /* one CPU in the creating thread's affinity mask: AUTO admits inline */
  {
    cpu_set_t was, one;
    int cpu;
    CPU_ZERO(&was);
    ck_assert_int_eq(sched_getaffinity(0, sizeof was, &was), 0);
    for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &was); cpu++) continue;
    ck_assert_int_lt(cpu, CPU_SETSIZE);
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    c = auto_cache(&w, EMC_ADMISSION_AUTO, 0, &st);
    ck_assert_int_eq(sched_setaffinity(0, sizeof was, &was), 0);
    EMCT_OK(st);
    ck_assert_int_eq(emc_cache_admission(c), EMC_ADMISSION_INLINE);
    ck_assert_int_eq(thread_count(), base);
    check_admits_inline(c, &w, "AUTO on one CPU");
    EMCT_OK(emc_cache_destroy(c));
    /* and with the mask back, the thread (where the process has 2 CPUs or more) */
    c = auto_cache(&w, EMC_ADMISSION_AUTO, 0, &st);
    EMCT_OK(st);
    ck_assert_int_eq(emc_cache_admission(c), CPU_COUNT(&was) >= 2 ? EMC_ADMISSION_BACKGROUND
                                                                  : EMC_ADMISSION_INLINE);
    EMCT_OK(emc_cache_destroy(c));
  }
  emct_world_free(&w);
}
END_TEST

int main(void) {
  Suite *s = suite_create("admission");
  TCase *tb = tcase_create("background admission");
  SRunner *sr;
  int failed;
  tcase_add_test(tb, background_admission_accounting);
  tcase_add_test(tb, background_destroy_with_queued_misses);
  tcase_add_test(tb, background_flush_under_load);
  tcase_add_test(tb, background_insert_while_queued);
  tcase_add_test(tb, background_fork_child_admits_inline);
  tcase_add_test(tb, auto_without_thread_admits_inline);
  tcase_set_timeout(tb, emct_timeout(60));
  suite_add_tcase(s, tb);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
