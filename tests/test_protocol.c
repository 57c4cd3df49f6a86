/*
 * test_protocol: the index's reader/writer protocol (lib/item/index.h, "index") under forced
 * interleavings. Linked with the tests' build of the library (embcache_hooks), whose protocol
 * steps call a hook (lib/item/access.h, "test points"): this suite pauses a reader or a writer
 * thread at a chosen step and lets the other run, so an interleaving that a stress test meets
 * once in thousands of runs happens on every run.
 *
 * The cache is built into one fixed shape (build()): a dense table D and a hashed table H,
 * rows of 4 f32, a small index; key K (of D, or of H) is cached DIRTY with generation 2 while
 * the store still holds generation 1; around it, a cluster of two buckets b0, b1:
 *     b0   A1 .. A8 (dense keys whose home is b0), then A1 evicted: a tombstone in b0
 *     b1   slot 0: K (home b0, pushed on by the full b0)   slot 1: J, a hashed id of home b1
 *          whose row was evicted into a unified-index entry (it names J's store row)
 * so that a re-pack moves K into b0 and J's unified entry into K's old slot.
 *
 *   repack_under_reader_{dense,hashed}
 *        the interleaving of issue 16: a lookup of K finds K in b1 slot 0 and stops there; the
 *        re-pack runs; the lookup loads the entry word of that slot (now J's unified entry).
 *        A lookup must still return generation 2.
 *   repack_spares_other_misses
 *        a re-pack step paused inside the cluster: a lookup that misses a key homed elsewhere
 *        does not wait for it; one homed in the cluster retries until the step is over.
 *   interleavings_{dense,hashed}
 *        every interleaving of one reader step against one writer step: for each writer
 *        operation W below, each step i of a lookup of {K, J} and each step j of W, the reader
 *        runs to its step i, W runs to its step j, the reader runs on (when it has to wait for
 *        W it stops at its retry point and W finishes first), then W finishes. The rows must be
 *        whole, of the right key, and a value the key held during the lookup (W's value
 *        before, or after); emc__cache_check must pass and a quiescent lookup must return W's
 *        result. W: re-pack; insert of K (generation 3, in place); eviction of K (written
 *        back, then removed or turned into a unified entry); flush; eviction of K then a
 *        lookup that admits it again; insert of J (its unified entry turned into a slot).
 * Every test runs against both read paths of the lookup (lib/lookup_host.c and
 * lib/read_pipe.c): the pipelined batched read, whose stages carry the same test points at the
 * same protocol steps, and the per-row reference. The number of schedules run is printed.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include "host_cache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIM 4u
#define ROWB (DIM * 4u)
#define D_ROWS 4096u
#define H_CAP 4096u

/* The lookup's read path under test (lib/lookup_host.c, lib/read_pipe.c): 1 the pipelined
 * batched read, 0 the per-row reference; every test runs both. */
static int g_pipelined = 1;

/* ------------------------------------------------------------------ rows */
/* The row of (table, id, generation): exact small integers. */
static void row_of(uint32_t t, uint64_t id, uint32_t gen, float *out) {
  out[0] = (float)gen;
  out[1] = (float)(t + 1);
  out[2] = (float)(id & 0xffffu);
  out[3] = (float)((id >> 16) & 0xffffu);
}

/* Generation held by a row of (t, id), -1 when it is not a whole row of that key. */
static int64_t gen_of(uint32_t t, uint64_t id, const float *row) {
  float want[DIM];
  if (!(row[0] >= 0.0f && row[0] < 1000.0f)) return -1;
  row_of(t, id, (uint32_t)row[0], want);
  return memcmp(want, row, ROWB) == 0 ? (int64_t)row[0] : -1;
}

/* ------------------------------------------------------------------ the controller
 * Threads take a role (thread-local); the hook counts each role's steps and pauses the thread
 * at its `pause_at`-th step, or at its next retry point when `pause_on_retry` is set. */
enum { ROLE_NONE = 0, ROLE_READER = 1, ROLE_WRITER = 2 };
static __thread int tl_role;

typedef struct ctl {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count[3];          /* steps taken */
  int pause_at[3];       /* pause at this step (0: never) */
  int pause_on_retry[3]; /* pause at the next retry point */
  const char *pause_what[3]; /* pause at a step of this name for which pause_if() holds */
  int (*pause_if)(void);
  int paused[3];         /* the thread waits in the hook */
  int finished[3];       /* the thread's work returned */
  const char *at[3];     /* the step it paused at */
} ctl;
static ctl C = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void hook(int kind, const char *what) {
  int r = tl_role, counted;
  if (r == ROLE_NONE) return;
  /* a reader's steps are its loads and retries; a writer's, its stores. A reader thread's
   * admission (writer code) and a writer thread's lookups (reader code) are not paused. */
  counted = r == ROLE_READER ? (kind == EMC__TP_READ || kind == EMC__TP_RETRY) : kind == EMC__TP_WRITE;
  if (!counted) return;
  pthread_mutex_lock(&C.mu);
  C.count[r]++;
  if (C.count[r] == C.pause_at[r] || (kind == EMC__TP_RETRY && C.pause_on_retry[r]) ||
      (C.pause_what[r] && strcmp(what, C.pause_what[r]) == 0 && C.pause_if())) {
    C.paused[r] = 1;
    C.at[r] = what;
    pthread_cond_broadcast(&C.cv);
    while (C.paused[r]) pthread_cond_wait(&C.cv, &C.mu);
  }
  pthread_mutex_unlock(&C.mu);
}

static void ctl_reset(void) {
  pthread_mutex_lock(&C.mu);
  memset(C.count, 0, sizeof C.count);
  memset(C.pause_at, 0, sizeof C.pause_at);
  memset(C.pause_on_retry, 0, sizeof C.pause_on_retry);
  memset(C.paused, 0, sizeof C.paused);
  memset(C.finished, 0, sizeof C.finished);
  memset(C.pause_what, 0, sizeof C.pause_what);
  C.pause_if = NULL;
  pthread_mutex_unlock(&C.mu);
}

/* Wait until role r is paused or finished; returns 1 if paused. */
static int ctl_wait(int r) {
  int p;
  pthread_mutex_lock(&C.mu);
  while (!C.paused[r] && !C.finished[r]) pthread_cond_wait(&C.cv, &C.mu);
  p = C.paused[r];
  pthread_mutex_unlock(&C.mu);
  return p;
}

/* Let role r go on: no more pauses at counted steps, pause at a retry if asked. */
static void ctl_resume(int r, int pause_on_retry) {
  pthread_mutex_lock(&C.mu);
  C.pause_at[r] = 0;
  C.pause_what[r] = NULL;
  C.pause_on_retry[r] = pause_on_retry;
  C.paused[r] = 0;
  pthread_cond_broadcast(&C.cv);
  pthread_mutex_unlock(&C.mu);
}

static void ctl_finish(int r) {
  pthread_mutex_lock(&C.mu);
  C.finished[r] = 1;
  pthread_cond_broadcast(&C.cv);
  pthread_mutex_unlock(&C.mu);
}

/* ------------------------------------------------------------------ the shape */
typedef struct shape {
  int hashed_k;          /* K is a key of H (else of D) */
  emc_store *s;
  emc_cache *c;
  uint64_t a[8], k, j;   /* A1..A8 (dense), K (table tk), J (hashed) */
  uint32_t tk;           /* K's table: 0 D, 1 H */
  uint64_t b0, b1;       /* the cluster's buckets */
} shape;

static const emc_table_desc TABLES[2] = {
    {"D", EMC_TABLE_DENSE, D_ROWS, DIM, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"H", EMC_TABLE_HASHED, H_CAP, DIM, EMC_DTYPE_F32, EMC_STATE_NONE}};

static void config(emc_cache_config *cfg) {
  emct_cache_config_init(cfg);
  cfg->backend = EMC_BACKEND_HOST;
  cfg->capacity_bytes = 2048; /* about 120 rows: an index of a few tens of buckets */
  cfg->unified_index_rows = 4;
  cfg->hash_seed = 7;
}

static uint64_t home_of(const emc_cache *c, uint32_t t, uint64_t id) {
  uint64_t key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
  return emc__home_bucket(key, c->host->ix.n_buckets);
}

static int64_t pos_of(const emc_cache *c, uint32_t t, uint64_t id) {
  return emc__index_find(&c->host->ix, emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed));
}

/* Pick the ids once from a scratch cache (the codec and the index size depend only on the
 * store's tables and the configuration), so that the store can be written before the real
 * cache attaches. */
static void pick_ids(shape *sh) {
  emc_store *s;
  emc_cache *c;
  emc_cache_config cfg;
  uint64_t id, n = 0, nb;
  EMCT_OK(emc_store_create(TABLES, 2, &s));
  config(&cfg);
  EMCT_OK(emc_cache_create(s, &cfg, &c));
  nb = c->host->ix.n_buckets;
  ck_assert_msg(nb >= 4 && nb <= 64, "index of %llu buckets", (unsigned long long)nb);
  sh->b0 = home_of(c, 0, 0);
  sh->b1 = (sh->b0 + 1) % nb;
  for (id = 0; id < D_ROWS && n < 9; id++)
    if (home_of(c, 0, id) == sh->b0) {
      if (n < 8) sh->a[n] = id;
      else if (!sh->hashed_k) sh->k = id;
      n++;
    }
  ck_assert(n == 9);
  /* hashed ids: a scattered sequence, K of home b0, J of home b1 */
  sh->j = 0;
  if (sh->hashed_k) sh->k = 0;
  for (id = 1; (!sh->j || (sh->hashed_k && !sh->k)) && id < 1000000; id++) {
    uint64_t x = emc__fmix64(id * 0x9E3779B97F4A7C15ull);
    uint64_t h = home_of(c, 1, x);
    if (!sh->j && h == sh->b1) sh->j = x;
    else if (sh->hashed_k && !sh->k && h == sh->b0) sh->k = x;
  }
  ck_assert(sh->j && sh->k);
  sh->tk = sh->hashed_k ? 1u : 0u;
  EMCT_OK(emc_cache_destroy(c));
  emc_store_destroy(s);
}

/* Insert one row of (t, id, gen) through the cache. */
static void insert1(emc_cache *c, uint32_t t, uint64_t id, uint32_t gen) {
  float row[DIM];
  uint64_t offsets[3] = {0, t == 0 ? 1u : 0u, 1};
  row_of(t, id, gen, row);
  EMCT_OK(emc_insert(c, &id, offsets, row, NULL));
}

static void evict_key(emc_cache *c, uint32_t t, uint64_t id) {
  int64_t pos;
  pthread_mutex_lock(&c->host->lock);
  pos = pos_of(c, t, id);
  ck_assert(pos >= 0);
  ck_assert_msg(emc__evict_at(c, (uint64_t)pos) > 0, "nothing to evict at %lld", (long long)pos);
  pthread_mutex_unlock(&c->host->lock);
}

static void build(shape *sh, int hashed_k) {
  emc_cache_config cfg;
  float row[DIM];
  uint64_t kb;
  int i;
  memset(sh, 0, sizeof *sh);
  sh->hashed_k = hashed_k;
  pick_ids(sh);
  EMCT_OK(emc_store_create(TABLES, 2, &sh->s));
  row_of(sh->tk, sh->k, 1, row); /* generation 1 of K in the store */
  EMCT_OK(emc_store_write(sh->s, sh->tk, &sh->k, 1, row));
  config(&cfg);
  EMCT_OK(emc_cache_create(sh->s, &cfg, &sh->c));
  EMCT_OK(emc__cache_set_pipelined(sh->c, g_pipelined));
  for (i = 0; i < 8; i++) insert1(sh->c, 0, sh->a[i], 1);
  insert1(sh->c, sh->tk, sh->k, 2); /* dirty: the store keeps generation 1 */
  insert1(sh->c, 1, sh->j, 1);      /* a new hashed id: its store row holds generation 1 */
  evict_key(sh->c, 1, sh->j);       /* -> a unified-index entry */
  evict_key(sh->c, 0, sh->a[0]);    /* b0 is full: a tombstone */
  /* the shape, as the file comment draws it */
  kb = sh->b1 * EMC__BUCKET;
  ck_assert_int_eq(pos_of(sh->c, sh->tk, sh->k), (int64_t)kb);
  ck_assert_int_eq(pos_of(sh->c, 1, sh->j), (int64_t)kb + 1);
  ck_assert(emc__lm_loc(emc__ix_lm(&sh->c->host->ix, kb + 1)) & EMC__LOC_HOST);
  ck_assert(emc__ix_key(&sh->c->host->ix, sh->b0 * EMC__BUCKET) ==
            emc__key_tomb(sh->c->host->ix.key_bits));
  ck_assert(emc__ix_lm(&sh->c->host->ix, kb) & EMC__LM_DIRTY);
  EMCT_OK(emc__cache_check(sh->c));
}

static void unbuild(shape *sh) {
  EMCT_OK(emc_cache_destroy(sh->c));
  emc_store_destroy(sh->s);
}

/* ------------------------------------------------------------------ threads */
typedef struct reader_job {
  shape *sh;
  float out[2 * DIM];
  uint8_t where[2];
  emc_status st;
} reader_job;

/* A lookup of {K, J}: K's table first (offsets by table). */
static void *reader_main(void *arg) {
  reader_job *r = arg;
  uint64_t ids[2], offsets[3];
  tl_role = ROLE_READER;
  if (r->sh->tk == 0) {
    ids[0] = r->sh->k, ids[1] = r->sh->j;
    offsets[0] = 0, offsets[1] = 1, offsets[2] = 2;
  } else {
    ids[0] = r->sh->k, ids[1] = r->sh->j;
    offsets[0] = 0, offsets[1] = 0, offsets[2] = 2;
  }
  r->st = emc_lookup_ex(r->sh->c, ids, offsets, r->out, r->where, NULL);
  tl_role = ROLE_NONE;
  ctl_finish(ROLE_READER);
  return NULL;
}

typedef enum op {
  OP_REPACK, OP_INSERT_K, OP_EVICT_K, OP_FLUSH, OP_EVICT_READMIT_K, OP_INSERT_J, OP_COUNT
} op;
static const char *const OP_NAME[OP_COUNT] = {"re-pack", "insert K", "evict K", "flush",
                                              "evict K, lookup re-admits it", "insert J"};

typedef struct writer_job {
  shape *sh;
  op w;
} writer_job;

static void *writer_main(void *arg) {
  writer_job *wj = arg;
  shape *sh = wj->sh;
  emc_cache *c = sh->c;
  tl_role = ROLE_WRITER;
  switch (wj->w) {
  case OP_REPACK:
    pthread_mutex_lock(&c->host->lock);
    emc__hix_maintain(c, 1);
    pthread_mutex_unlock(&c->host->lock);
    break;
  case OP_INSERT_K:
    insert1(c, sh->tk, sh->k, 3);
    break;
  case OP_EVICT_K:
    evict_key(c, sh->tk, sh->k);
    break;
  case OP_FLUSH:
    EMCT_OK(emc_flush(c, NULL));
    break;
  case OP_EVICT_READMIT_K: {
    uint64_t offsets[3] = {0, sh->tk == 0 ? 1u : 0u, 1};
    float row[DIM];
    evict_key(c, sh->tk, sh->k);
    EMCT_OK(emc_lookup(c, &sh->k, offsets, row, NULL));
    break;
  }
  case OP_INSERT_J:
    insert1(c, 1, sh->j, 2);
    break;
  default:
    break;
  }
  tl_role = ROLE_NONE;
  ctl_finish(ROLE_WRITER);
  return NULL;
}

/* K's and J's generations before and after writer operation w (the shape's start). */
static void gens_of(op w, uint32_t *k_pre, uint32_t *k_post, uint32_t *j_pre, uint32_t *j_post) {
  *k_pre = 2, *k_post = w == OP_INSERT_K ? 3 : 2;
  *j_pre = 1, *j_post = w == OP_INSERT_J ? 2 : 1;
}

/* Check a returned row: whole, of its key, generation in {pre, post}. */
static void check_row(const shape *sh, uint32_t t, uint64_t id, const float *row, uint8_t where,
                      uint32_t pre, uint32_t post, const char *what) {
  int64_t g = gen_of(t, id, row);
  char hx[64];
  ck_assert_msg(g >= 0, "%s: table %u id %llu: not a whole row of the key (%s)", what, t,
                (unsigned long long)id, emct_hex(row, ROWB, hx, sizeof hx));
  ck_assert_msg(g == pre || g == post,
                "%s: table %u id %llu (%s) where %u: generation %lld, but the key held %u, then "
                "%u, during the lookup (%s)", what, t, (unsigned long long)id,
                id == sh->k ? "K" : "J", where, (long long)g, pre, post,
                g < pre ? "stale row" : "row from nowhere");
  ck_assert_msg(where == EMC_WHERE_CACHE || where == EMC_WHERE_STORE, "%s: where %u", what, where);
}

/* One schedule: reader to its step i (0: not paused), writer to its step j (0: not paused),
 * reader on (pausing at a retry), writer on, reader on. Returns the steps the reader and the
 * writer took, in *ri / *wj. */
static void run_schedule(int hashed_k, op w, int i, int j, int *ri, int *wjs, const char *name) {
  shape sh;
  reader_job rj;
  writer_job wj;
  pthread_t rt, wt;
  uint32_t k_pre, k_post, j_pre, j_post;
  char what[256];
  build(&sh, hashed_k);
  gens_of(w, &k_pre, &k_post, &j_pre, &j_post);
  memset(&rj, 0, sizeof rj);
  rj.sh = &sh;
  wj.sh = &sh;
  wj.w = w;
  ctl_reset();
  C.pause_at[ROLE_READER] = i;
  C.pause_at[ROLE_WRITER] = j;
  ck_assert_int_eq(pthread_create(&rt, NULL, reader_main, &rj), 0);
  ctl_wait(ROLE_READER);
  snprintf(what, sizeof what, "%s, K %s, writer '%s', reader step %d (%s), writer step %d", name,
           hashed_k ? "hashed" : "dense", OP_NAME[w], i, i ? C.at[ROLE_READER] : "-", j);
  ck_assert_int_eq(pthread_create(&wt, NULL, writer_main, &wj), 0);
  ctl_wait(ROLE_WRITER);
  ctl_resume(ROLE_READER, 1);
  if (ctl_wait(ROLE_READER)) { /* the reader waits for the writer: the writer goes first */
    ctl_resume(ROLE_WRITER, 0);
    ctl_wait(ROLE_WRITER);
    ctl_resume(ROLE_READER, 0);
    ctl_wait(ROLE_READER);
  }
  ctl_resume(ROLE_WRITER, 0);
  ck_assert_int_eq(pthread_join(rt, NULL), 0);
  ck_assert_int_eq(pthread_join(wt, NULL), 0);
  *ri = C.count[ROLE_READER];
  *wjs = C.count[ROLE_WRITER];
  ck_assert_msg(rj.st == EMC_OK, "%s: lookup returned %s", what, emc_status_name(rj.st));
  check_row(&sh, sh.tk, sh.k, rj.out, rj.where[0], k_pre, k_post, what);
  check_row(&sh, 1, sh.j, rj.out + DIM, rj.where[1], j_pre, j_post, what);
  /* afterwards: the structure holds, and a quiet lookup gives the writer's result */
  EMCT_OK(emc__cache_check(sh.c));
  rj.st = EMC_OK;
  reader_main(&rj);
  ck_assert_msg(gen_of(sh.tk, sh.k, rj.out) == k_post && gen_of(1, sh.j, rj.out + DIM) == j_post,
                "%s: quiescent lookup gave K %lld, J %lld; want %u, %u", what,
                (long long)gen_of(sh.tk, sh.k, rj.out), (long long)gen_of(1, sh.j, rj.out + DIM),
                k_post, j_post);
  EMCT_OK(emc_flush(sh.c, NULL));
  {
    float row[DIM];
    EMCT_OK(emc_store_read(sh.s, sh.tk, &sh.k, 1, row));
    ck_assert_msg(gen_of(sh.tk, sh.k, row) == k_post, "%s: store holds K %lld after flush", what,
                  (long long)gen_of(sh.tk, sh.k, row));
  }
  unbuild(&sh);
}

/* ------------------------------------------------------------------ tests */
/* Issue 16's interleaving: the reader found K in b1 slot 0 and stops before it loads the
 * entry word; the re-pack moves J's unified entry into that slot. */
static void repack_under_reader(int hashed_k) {
  int ri, wj;
  for (g_pipelined = 0; g_pipelined <= 1; g_pipelined++)
    run_schedule(hashed_k, OP_REPACK, 1, 0, &ri, &wj,
                 g_pipelined ? "re-pack under a reader (pipelined read)"
                             : "re-pack under a reader (per-row read)");
}
START_TEST(repack_under_reader_dense) { repack_under_reader(0); }
END_TEST
START_TEST(repack_under_reader_hashed) { repack_under_reader(1); }
END_TEST

/* A re-pack step paused in the cluster b0..b1 (published, nothing in it moved yet). A lookup
 * that misses a dense key homed outside it must be decided without waiting for the step (no
 * retry: the host's lookups wait only for the cluster of their own key, lib/host_cache.h,
 * emc__repack_raced); one that misses a key homed in it (A1, evicted) must retry, and get A1's
 * row once the step is over. */
static shape *g_cur; /* the shape of the running test, for the pause predicate */
static int always(void) { return 1; }
static int repacking_b0(void) {
  const emc__host_cache *h = g_cur->c->host;
  return h->repack_lo % h->ix.n_buckets == g_cur->b0;
}

typedef struct one_job {
  shape *sh;
  uint64_t id;
  float out[DIM];
  uint8_t where;
  emc_status st;
} one_job;

static void *one_reader_main(void *arg) {
  one_job *r = arg;
  uint64_t offsets[3] = {0, 1, 1};
  tl_role = ROLE_READER;
  r->st = emc_lookup_ex(r->sh->c, &r->id, offsets, r->out, &r->where, NULL);
  tl_role = ROLE_NONE;
  ctl_finish(ROLE_READER);
  return NULL;
}

/* Start a reader of `id` that pauses at its first retry; returns 1 if it paused there. */
static int one_lookup(one_job *r, pthread_t *t) {
  pthread_mutex_lock(&C.mu);
  C.count[ROLE_READER] = 0;
  C.paused[ROLE_READER] = C.finished[ROLE_READER] = 0;
  C.pause_on_retry[ROLE_READER] = 1;
  pthread_mutex_unlock(&C.mu);
  ck_assert_int_eq(pthread_create(t, NULL, one_reader_main, r), 0);
  return ctl_wait(ROLE_READER);
}

static void repack_spares_path(void) {
  shape sh;
  writer_job wj;
  one_job x, y;
  pthread_t wt, xt, yt;
  uint64_t id, nb;
  float want[DIM];
  const char *path = g_pipelined ? "pipelined read" : "per-row read";
  int paused;
  build(&sh, 0);
  g_cur = &sh;
  nb = sh.c->host->ix.n_buckets;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  x.sh = y.sh = &sh;
  y.id = sh.a[0]; /* A1: evicted (written back, generation 1), homed at b0 */
  ck_assert(pos_of(sh.c, 0, y.id) < 0);
  /* the writer: a full re-pack sweep, paused as the step begins (epoch odd, no cluster of it
   * published), then once the cluster at b0 is published */
  ctl_reset();
  C.pause_what[ROLE_WRITER] = "repack: epoch odd";
  C.pause_if = always;
  wj.sh = &sh;
  wj.w = OP_REPACK;
  ck_assert_int_eq(pthread_create(&wt, NULL, writer_main, &wj), 0);
  ck_assert_msg(ctl_wait(ROLE_WRITER), "%s: the re-pack step never began", path);
  x.id = D_ROWS - 1; /* never cached: the step has moved nothing yet */
  ck_assert(pos_of(sh.c, 0, x.id) < 0);
  paused = one_lookup(&x, &xt);
  if (paused) ctl_resume(ROLE_WRITER, 0); /* let everything end before failing */
  ck_assert_msg(!paused, "%s: a lookup that missed id %llu waited (%s) for a re-pack step that "
                "had moved nothing", path, (unsigned long long)x.id, C.at[ROLE_READER]);
  ck_assert_int_eq(pthread_join(xt, NULL), 0);
  ck_assert_int_eq(x.st, EMC_OK);
  ck_assert_int_eq(x.where, EMC_WHERE_STORE);

  pthread_mutex_lock(&C.mu);
  C.pause_what[ROLE_WRITER] = "repack: cluster published";
  C.pause_if = repacking_b0;
  C.paused[ROLE_WRITER] = 0;
  pthread_cond_broadcast(&C.cv);
  pthread_mutex_unlock(&C.mu);
  ck_assert_msg(ctl_wait(ROLE_WRITER), "%s: the re-pack never published the cluster at b0", path);
  {
    /* X: a dense id never cached, homed outside the published cluster [lo, hi) (the writer
     * is paused in the hook, after the mutex that publishes its stores to this thread) */
    const uint64_t lo = sh.c->host->repack_lo, len = sh.c->host->repack_hi - lo;
    ck_assert(len >= 2 && len < nb);
    for (id = D_ROWS - 1; id > 0; id--) {
      uint64_t h = home_of(sh.c, 0, id);
      if ((h + nb - lo % nb) % nb >= len && h != (lo + nb - 1) % nb && pos_of(sh.c, 0, id) < 0)
        break;
    }
    ck_assert(id > 0);
    x.id = id;
  }

  paused = one_lookup(&x, &xt);
  if (paused) ctl_resume(ROLE_WRITER, 0); /* let everything end before failing */
  ck_assert_msg(!paused, "%s: a lookup that missed an id homed at bucket %llu waited (%s) for "
                "the re-pack of buckets %llu..%llu", path,
                (unsigned long long)home_of(sh.c, 0, x.id), C.at[ROLE_READER],
                (unsigned long long)sh.b0, (unsigned long long)sh.b1);
  ck_assert_int_eq(pthread_join(xt, NULL), 0);
  ck_assert_int_eq(x.st, EMC_OK);
  ck_assert_int_eq(x.where, EMC_WHERE_STORE);
  memset(want, 0, sizeof want); /* never written: the store's zero row */
  ck_assert_msg(memcmp(x.out, want, ROWB) == 0, "%s: X's row is not the store's", path);

  paused = one_lookup(&y, &yt);
  ctl_resume(ROLE_WRITER, 0);
  ck_assert_msg(paused, "%s: a miss of A1, homed in the cluster being re-packed, was trusted",
                path);
  ctl_wait(ROLE_WRITER);
  ctl_resume(ROLE_READER, 0);
  ck_assert_int_eq(pthread_join(yt, NULL), 0);
  ck_assert_int_eq(pthread_join(wt, NULL), 0);
  ck_assert_int_eq(y.st, EMC_OK);
  ck_assert_msg(gen_of(0, y.id, y.out) == 1, "%s: A1 read as generation %lld", path,
                (long long)gen_of(0, y.id, y.out));
  EMCT_OK(emc__cache_check(sh.c));
  g_cur = NULL;
  unbuild(&sh);
}
START_TEST(repack_spares_other_misses) {
  for (g_pipelined = 0; g_pipelined <= 1; g_pipelined++) repack_spares_path();
}
END_TEST

static void interleavings_of_path(int hashed_k);
static void interleavings(int hashed_k) {
  for (g_pipelined = 0; g_pipelined <= 1; g_pipelined++) interleavings_of_path(hashed_k);
}

static void interleavings_of_path(int hashed_k) {
  int w, schedules = 0;
  for (w = 0; w < OP_COUNT; w++) {
    int r_steps, w_steps, i, j, dummy;
    /* free runs: how many steps each takes alone (the reader first, then the writer) */
    run_schedule(hashed_k, (op)w, 0, 0, &r_steps, &w_steps, "free run");
    ck_assert_msg(r_steps > 0 && w_steps > 0, "writer '%s': %d reader / %d writer steps",
                  OP_NAME[w], r_steps, w_steps);
    for (i = 1; i <= r_steps; i++)
      for (j = 0; j <= w_steps; j++, schedules++)
        run_schedule(hashed_k, (op)w, i, j, &dummy, &dummy, "interleaving");
  }
  fprintf(stderr, "test_protocol: K %s, %s read: %d schedules of one reader step against one "
          "writer step\n", hashed_k ? "hashed" : "dense", g_pipelined ? "pipelined" : "per-row",
          schedules);
}
START_TEST(interleavings_dense) { interleavings(0); }
END_TEST
START_TEST(interleavings_hashed) { interleavings(1); }
END_TEST

int main(void) {
  Suite *s = suite_create("protocol");
  TCase *tc = tcase_create("interleavings");
  SRunner *sr;
  int failed;
  emc__tp_hook = hook;
  tcase_add_test(tc, repack_under_reader_dense);
  tcase_add_test(tc, repack_under_reader_hashed);
  tcase_add_test(tc, repack_spares_other_misses);
  tcase_add_test(tc, interleavings_dense);
  tcase_add_test(tc, interleavings_hashed);
  tcase_set_timeout(tc, emct_timeout(120));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
