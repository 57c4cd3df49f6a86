/*
 * test_group: the training group of a shared store (emc_group_*, lib/group.c; seed D).
 *
 *   steps        4 rank processes, each with its own host cache over one shared store, 300
 *                steps of Zipf batches over a dense f32 and a hashed f16 table (new hashed ids
 *                from several ranks in one step), for SGD and row-wise Adagrad, SUM and MEAN:
 *                after the last step the store (rows and Adagrad state) is bitwise what one
 *                process gets applying the merged gradient G of every step to a private copy,
 *                computed here independently (g_r in position order, G in rank order, MEAN
 *                over the ranks with the row); after every step each rank's cache returns
 *                the store's rows
 *   a rank dies  killed before it arrives: the others return EMC_ETIMEDOUT within the timeout
 *                and the store is the reference after the steps before; killed while it
 *                writes a committed step (the test point "group: row applied"): a survivor
 *                completes the step, the store is the reference after it
 *   bad input    joins (private store, rank, n_ranks, twice, timeout 0), a rank's bad batch
 *                and ranks with different optimizers refuse the step for every rank and
 *                change nothing
 */
#define _GNU_SOURCE 1
#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

EMCT_SHARED_LOCK_TSAN_OPTIONS

/* Compiled with EMCT_GPU it is test_gpu_group (label gpu): the ranks' caches are CUDA caches
 * (cuda/sync.cu; the CPU model of the device in make test), the references host caches. This
 * process never touches the device (emct_gpu_present_in_child, tests/common.c). */
#ifdef EMCT_GPU
#include "emc_cuda.h"
#define BACKEND EMC_BACKEND_CUDA
#define CACHE_CHECK(c) emc__cuda_check(c)
#else
#define BACKEND EMC_BACKEND_HOST
#define CACHE_CHECK(c) emc__cache_check(c)
#endif

#define RANKS 4u
#define DROWS 512u
#define DIM0 8u     /* dense f32 */
#define HCAP 2048u
#define HUNIV 1500u /* hashed ranks drawn from; none exists at start */
#define DIM1 4u     /* hashed f16 */
#define ND 24u      /* dense ids per rank and step */
#define NH 12u      /* hashed ids per rank and step */
#define NPOS (ND + NH)

static const emc_table_desc TABLES[2] = {
    {"dense", EMC_TABLE_DENSE, DROWS, DIM0, EMC_DTYPE_F32, EMC_STATE_ADAGRAD},
    {"hashed", EMC_TABLE_HASHED, HCAP, DIM1, EMC_DTYPE_F16, EMC_STATE_ADAGRAD}};

static uint64_t hid(uint64_t k) { return 0x9e3779b97f4a7c15ull * (k + 3u) >> 5; }
static uint32_t dim_of(uint32_t t) { return t == 0 ? DIM0 : DIM1; }

static char g_made[4][64];
static unsigned g_n_made;
static void unlink_made(void) {
  unsigned i, r;
  for (i = 0; i < g_n_made; i++) {
    char b[96];
    shm_unlink(g_made[i]);
    for (r = 0; r < RANKS; r++) {
      snprintf(b, sizeof b, "%s.g%u", g_made[i], r);
      shm_unlink(b);
    }
  }
}
static const char *fresh_name(void) {
  static unsigned n;
  char *b = g_made[g_n_made < 4 ? g_n_made : 3];
  snprintf(b, sizeof g_made[0], "/emct-grp-%d-%u", (int)getpid(), n++);
  shm_unlink(b);
  if (g_n_made == 0) atexit(unlink_made);
  if (g_n_made < 4) g_n_made++;
  return b;
}

/* The optimizer of configuration cfg: 0 SGD SUM, 1 Adagrad MEAN, 2 SGD MEAN, 3 Adagrad SUM. */
static void opt_of(int cfg, emc_optimizer *o) {
  emc_optimizer_init(o);
  o->kind = cfg % 2 ? EMC_OPT_ROWWISE_ADAGRAD : EMC_OPT_SGD;
  o->merge = cfg == 1 || cfg == 2 ? EMC_MERGE_MEAN : EMC_MERGE_SUM;
  o->lr = 0.05f;
  o->initial_accumulator = 0.1f;
}

/* Rank r's batch of step k: ids (offsets {0, ND, NPOS}) and gradients, from (r, k) alone. */
static void batch_of(uint32_t r, uint64_t k, uint64_t *ids, float *grads) {
  emct_rng rng;
  emct_zipf zd, zh;
  uint32_t i, j;
  float *g = grads;
  emct_rng_seed(&rng, (k << 8) | r);
  emct_zipf_init(&zd, DROWS, 1.1);
  emct_zipf_init(&zh, HUNIV, 0.8);
  for (i = 0; i < NPOS; i++) {
    uint32_t dim = i < ND ? DIM0 : DIM1;
    ids[i] = i < ND ? emct_zipf_sample(&zd, &rng) : hid(emct_zipf_sample(&zh, &rng));
    for (j = 0; j < dim; j++, g++)
      *g = (float)((int64_t)emct_rng_below(&rng, 2001) - 1000) / 1024.0f;
  }
}

/* The reference: step k of every rank merged by the rule, applied to the private cache rc. */
static void ref_step(emc_cache *rc, uint64_t k, const emc_optimizer *o, uint32_t n_ranks) {
  uint64_t ids[RANKS][NPOS], uids[RANKS * NPOS], off[3];
  float gr[RANKS][ND * DIM0 + NH * DIM1];
  static float G[RANKS * NPOS][DIM0], grads[RANKS * NPOS * DIM0];
  uint32_t cnt[RANKS * NPOS], r, nu = 0, t, i, j, p;
  emc_optimizer one = *o;
  for (r = 0; r < n_ranks; r++) batch_of(r, k, ids[r], gr[r]);
  for (t = 0; t < 2; t++) {
    uint32_t lo = t == 0 ? 0 : ND, hi = t == 0 ? ND : NPOS, dim = dim_of(t), first = nu;
    for (r = 0; r < n_ranks; r++) {
      /* g_r for each distinct id of this rank, in increasing position order */
      for (p = lo; p < hi; p++) {
        float gsum[DIM0];
        uint32_t q, u;
        int earlier = 0;
        for (q = lo; q < p; q++) earlier |= ids[r][q] == ids[r][p];
        if (earlier) continue;
        for (j = 0; j < dim; j++) gsum[j] = gr[r][(t == 0 ? 0 : ND * DIM0) + (p - lo) * dim + j];
        for (q = p + 1; q < hi; q++)
          if (ids[r][q] == ids[r][p])
            for (j = 0; j < dim; j++)
              gsum[j] = gsum[j] + gr[r][(t == 0 ? 0 : ND * DIM0) + (q - lo) * dim + j];
        for (u = first; u < nu && uids[u] != ids[r][p]; u++) {}
        if (u == nu) { /* first rank with the row */
          uids[nu] = ids[r][p];
          cnt[nu] = 1;
          memcpy(G[nu++], gsum, dim * sizeof(float));
        } else {
          for (j = 0; j < dim; j++) G[u][j] = G[u][j] + gsum[j];
          cnt[u]++;
        }
      }
    }
    for (i = first; i < nu; i++) {
      if (o->merge == EMC_MERGE_MEAN && cnt[i] > 1)
        for (j = 0; j < dim; j++) G[i][j] = G[i][j] / (float)cnt[i];
      memcpy(grads + (t == 0 ? i * DIM0 : first * DIM0 + (i - first) * DIM1), G[i],
             dim * sizeof(float));
    }
    off[t + 1] = nu;
  }
  off[0] = 0;
  one.merge = EMC_MERGE_SUM; /* each row once: its G as it is */
  EMCT_OK(emc_apply_gradients(rc, uids, off, grads, &one, NULL));
}

/* Every dense row and every hashed rank of the two stores, rows and state, bitwise. */
static void same_stores(const emc_store *a, const emc_store *b, const char *what) {
  static uint64_t ids[HUNIV];
  static unsigned char ra[HUNIV * DIM0 * 4], rb[HUNIV * DIM0 * 4];
  static float sa[HUNIV], sb[HUNIV];
  uint32_t t, i;
  uint64_t ca, cb;
  for (t = 0; t < 2; t++) {
    uint32_t n = t == 0 ? DROWS : HUNIV;
    size_t bytes = (size_t)n * dim_of(t) * (t == 0 ? 4 : 2);
    for (i = 0; i < n; i++) ids[i] = t == 0 ? i : hid(i);
    EMCT_OK(emc_store_read(a, t, ids, n, ra));
    EMCT_OK(emc_store_read(b, t, ids, n, rb));
    ck_assert_msg(emct_first_diff(ra, rb, bytes) == -1, "%s: table %u: rows differ at byte %ld",
                  what, t, emct_first_diff(ra, rb, bytes));
    EMCT_OK(emc_store_read_state(a, t, ids, n, sa));
    EMCT_OK(emc_store_read_state(b, t, ids, n, sb));
    ck_assert_msg(emct_first_diff(sa, sb, n * 4) == -1, "%s: table %u: state differs", what, t);
    EMCT_OK(emc_store_table_count(a, t, &ca));
    EMCT_OK(emc_store_table_count(b, t, &cb));
    ck_assert_msg(ca == cb, "%s: table %u holds %llu rows, the reference %llu", what, t,
                  (unsigned long long)ca, (unsigned long long)cb);
  }
}


typedef struct ctl {
  uint32_t killed;   /* the kill hook fired (once, in one process) */
  uint64_t last_ok;  /* per rank below: the last step that returned EMC_OK */
  uint64_t ok[RANKS];
  uint32_t timedout[RANKS];
  uint64_t waited_ms[RANKS]; /* how long the EMC_ETIMEDOUT step took */
} ctl;

static ctl *g_ctl;
static int g_kill_armed;
static void kill_hook(int kind, const char *what) {
  static unsigned rows;
  (void)kind;
  if (!g_kill_armed || strcmp(what, "group: row applied") != 0) return;
  if (++rows == 3 && __atomic_exchange_n(&g_ctl->killed, 1u, __ATOMIC_ACQ_REL) == 0)
    raise(SIGKILL); /* mid-way through a committed step's rows */
}

/* mode 0: all steps; 1: rank 2 dies before step `at`; 2: the applier of step `at` dies
 * after writing 3 of its rows. */
static void rank_main(const char *name, uint32_t r, int cfg, uint64_t steps, int mode, uint64_t at) {
  emc_store *s = NULL;
  emc_cache *c = NULL;
  emc_cache_config cc;
  emc_group *g = NULL;
  emc_optimizer o;
  uint64_t ids[NPOS], off[3] = {0, ND, NPOS}, k;
  float grads[ND * DIM0 + NH * DIM1];
  static unsigned char rows[ND * DIM0 * 4 + NH * DIM1 * 2], want[ND * DIM0 * 4 + NH * DIM1 * 2];
  CHILD_CHECK(emc_store_attach(name, &s) == EMC_OK, "attach");
  emct_cache_config_init(&cc);
  cc.backend = BACKEND;
  cc.capacity_bytes = 16u << 10; /* small: rows come and go */
  cc.key_bits = r % 2 ? 32 : 64;
  CHILD_CHECK(emc_cache_create(s, &cc, &c) == EMC_OK, "cache");
  CHILD_CHECK(emc_group_join(s, r, RANKS, 2000, &g) == EMC_OK, "join");
  opt_of(cfg, &o);
  if (mode == 2) emc__tp_hook = kill_hook;
  for (k = 1; k <= steps; k++) {
    emc_status st;
    batch_of(r, k, ids, grads);
    CHILD_CHECK(emc_lookup(c, ids, off, rows, NULL) == EMC_OK, "lookup"); /* the forward pass */
    if (mode == 1 && r == 2 && k == at) raise(SIGKILL);
    if (mode == 2 && k == at) __atomic_store_n(&g_kill_armed, 1, __ATOMIC_RELEASE);
    {
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      st = emc_group_apply_gradients(g, c, ids, off, grads, &o, NULL);
      clock_gettime(CLOCK_MONOTONIC, &b);
      if (st == EMC_ETIMEDOUT) {
        g_ctl->timedout[r] = (uint32_t)k;
        g_ctl->waited_ms[r] = (uint64_t)((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000);
        break;
      }
    }
    CHILD_CHECK(st == EMC_OK, "rank %u, step %llu: %s", r, (unsigned long long)k, emc_status_name(st));
    g_ctl->ok[r] = k;
    if (mode == 0 && k % 7 == 0) { /* the cache returns the store's rows */
      CHILD_CHECK(emc_lookup(c, ids, off, rows, NULL) == EMC_OK, "lookup");
      CHILD_CHECK(emc_store_read(s, 0, ids, ND, want) == EMC_OK &&
                      emc_store_read(s, 1, ids + ND, NH, want + ND * DIM0 * 4) == EMC_OK, "read");
      CHILD_CHECK(memcmp(rows, want, sizeof rows) == 0, "rank %u, step %llu: the cache's rows are "
                  "not the store's", r, (unsigned long long)k);
    }
  }
  CHILD_CHECK(emc_group_leave(g) == EMC_OK, "leave");
  CHILD_CHECK(CACHE_CHECK(c) == EMC_OK, "cache check: %s", emc_last_error_detail());
  CHILD_CHECK(emc_cache_destroy(c) == EMC_OK, "destroy");
  emc_store_destroy(s);
  _exit(0);
}

/* Run RANKS rank processes over a fresh shared store; returns it (and its name). */
static emc_store *run_ranks(int cfg, uint64_t steps, int mode, uint64_t at, const char **name_out,
                            int *status) {
  const char *name = fresh_name();
  emc_store *s = NULL;
  pid_t kids[RANKS];
  uint32_t r;
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 11));
  for (r = 0; r < RANKS; r++) {
    fflush(NULL);
    if ((kids[r] = fork()) == 0) rank_main(name, r, cfg, steps, mode, at);
    ck_assert_int_gt(kids[r], 0);
  }
  for (r = 0; r < RANKS; r++) { /* reaped as they end: a dead rank must not stay a zombie */
    int stt = 0;
    uint32_t q;
    pid_t p = waitpid(-1, &stt, 0);
    ck_assert_int_gt(p, 0);
    for (q = 0; q < RANKS; q++)
      if (kids[q] == p) status[q] = stt;
  }
  *name_out = name;
  return s;
}

/* The reference store after `steps` steps of n_ranks ranks (its cache in *rc, flushed). */
static emc_store *reference(int cfg, uint64_t steps, uint32_t n_ranks, emc_cache **rc) {
  emc_store *ref = NULL;
  emc_cache_config cc;
  emc_optimizer o;
  uint64_t k;
  EMCT_OK(emc_store_create(TABLES, 2, &ref));
  EMCT_OK(emc_store_fill_uniform(ref, 0, -1.0f, 1.0f, 11));
  emct_cache_config_init(&cc);
  cc.backend = EMC_BACKEND_HOST;
  cc.capacity_bytes = 8u << 10;
  EMCT_OK(emc_cache_create(ref, &cc, rc));
  opt_of(cfg, &o);
  for (k = 1; k <= steps; k++) ref_step(*rc, k, &o, n_ranks);
  EMCT_OK(emc_flush(*rc, NULL));
  return ref;
}

START_TEST(steps_equal_the_reference) {
  const char *name;
  int status[RANKS];
  uint64_t steps = emct_gpu_scale(emct_scale(300, 3), 10); /* the model: 30 */
  emc_cache *rc;
  emc_store *ref, *s;
  uint32_t r;
  g_ctl = mmap(NULL, sizeof *g_ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(g_ctl, 0, sizeof *g_ctl);
  s = run_ranks(_i, steps, 0, 0, &name, status);
  for (r = 0; r < RANKS; r++)
    ck_assert_msg(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0,
                  "configuration %d: rank %u failed (status %d)", _i, r, status[r]);
  ref = reference(_i, steps, RANKS, &rc);
  same_stores(s, ref, "after the last step");
  EMCT_OK(emc_cache_destroy(rc));
  emc_store_destroy(ref);
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
  munmap(g_ctl, sizeof *g_ctl);
}
END_TEST

/* _i 0: rank 2 dies before it arrives at step 40; 1: the applier of step 40 dies mid-way. */
START_TEST(a_rank_dies) {
  const char *name;
  int status[RANKS];
  emc_cache *rc;
  emc_store *ref, *s;
  uint32_t r;
  uint64_t at = emct_gpu_quick() ? 12 : 40, whole = _i == 0 ? at - 1 : at;
  g_ctl = mmap(NULL, sizeof *g_ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(g_ctl, 0, sizeof *g_ctl);
  s = run_ranks(3, 100, _i == 0 ? 1 : 2, at, &name, status);
  for (r = 0; r < RANKS; r++) {
    int killed = WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL;
    if (killed) {
      ck_assert_uint_eq(g_ctl->ok[r], at - 1);
      continue;
    }
    ck_assert_msg(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0, "rank %u failed (%d)", r,
                  status[r]);
    ck_assert_msg(g_ctl->timedout[r] != 0, "rank %u never timed out", r);
    ck_assert_msg(g_ctl->waited_ms[r] < 2000 + 1500, "rank %u waited %llu ms for a dead rank", r,
                  (unsigned long long)g_ctl->waited_ms[r]);
    /* the step a dead applier committed was completed: the survivors saw it succeed */
    ck_assert_uint_eq(g_ctl->ok[r], whole);
  }
  ck_assert_uint_eq(_i == 0 ? 1 : g_ctl->killed, 1);
  ref = reference(3, whole, RANKS, &rc);
  same_stores(s, ref, _i == 0 ? "a rank died before step 40" : "the applier of step 40 died");
  EMCT_OK(emc_cache_destroy(rc));
  emc_store_destroy(ref);
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
  munmap(g_ctl, sizeof *g_ctl);
}
END_TEST

/* A group of one whose applier dies in the middle of writing its committed step: the next
 * process to take the store's lock, a plain writer, finishes the step first (seg_recover), so
 * its own write is not overwritten by a later completion. */
START_TEST(the_next_writer_finishes_a_dead_appliers_step) {
  const char *name = fresh_name();
  emc_store *s = NULL, *ref;
  emc_cache *rc;
  emc_optimizer o;
  emc_group *g = NULL;
  pid_t pid;
  int stt = 0;
  uint64_t id;
  unsigned char row[DIM0 * 4], got[DIM0 * 4];
  g_ctl = mmap(NULL, sizeof *g_ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(g_ctl, 0, sizeof *g_ctl);
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 11));
  fflush(NULL);
  if ((pid = fork()) == 0) { /* rank 0 of 1: step 1, killed after 3 of its rows */
    emc_store *cs = NULL;
    emc_cache *c = NULL;
    emc_cache_config cc;
    uint64_t ids[NPOS], off[3] = {0, ND, NPOS};
    float grads[ND * DIM0 + NH * DIM1];
    CHILD_CHECK(emc_store_attach(name, &cs) == EMC_OK, "attach");
    emct_cache_config_init(&cc);
    cc.backend = BACKEND;
    cc.capacity_bytes = 1u << 20;
    CHILD_CHECK(emc_cache_create(cs, &cc, &c) == EMC_OK, "cache");
    CHILD_CHECK(emc_group_join(cs, 0, 1, 1000, &g) == EMC_OK, "join");
    opt_of(0, &o);
    batch_of(0, 1, ids, grads);
    emc__tp_hook = kill_hook;
    g_kill_armed = 1;
    (void)emc_group_apply_gradients(g, c, ids, off, grads, &o, NULL);
    _exit(5); /* not reached */
  }
  ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
  ck_assert(WIFSIGNALED(stt) && WTERMSIG(stt) == SIGKILL);
  /* the writer: its lock finds the holder dead, finishes step 1, then writes a row step 1
   * changed (the first dense id of its batch) */
  {
    uint64_t ids[NPOS];
    float grads[ND * DIM0 + NH * DIM1];
    batch_of(0, 1, ids, grads);
    id = ids[0];
  }
  memset(row, 0, sizeof row);
  row[0] = 0x42;
  EMCT_OK(emc_store_write(s, 0, &id, 1, row));
  EMCT_OK(emc_group_join(s, 0, 1, 1000, &g)); /* nothing left to finish */
  EMCT_OK(emc_group_leave(g));
  EMCT_OK(emc_store_read(s, 0, &id, 1, got));
  ck_assert_int_eq(emct_first_diff(got, row, sizeof row), -1);
  /* every other row is the reference after step 1 */
  ref = reference(0, 1, 1, &rc);
  EMCT_OK(emc_cache_destroy(rc));
  EMCT_OK(emc_store_write(ref, 0, &id, 1, row));
  same_stores(s, ref, "a dead applier's step, then a write");
  emc_store_destroy(ref);
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
  munmap(g_ctl, sizeof *g_ctl);
}
END_TEST

/* ================================================================= threads, bad input */
typedef struct trank {
  emc_store *s;
  emc_group *g;
  emc_cache *c;
  uint32_t r;
  int bad;          /* 1: a dense id out of range; 2: another learning rate */
  emc_status st;
} trank;

static void *trank_step(void *a) {
  trank *t = a;
  uint64_t ids[NPOS], off[3] = {0, ND, NPOS};
  float grads[ND * DIM0 + NH * DIM1];
  emc_optimizer o;
  batch_of(t->r, 1, ids, grads);
  opt_of(0, &o);
  if (t->bad == 1) ids[3] = DROWS;
  if (t->bad == 2) o.lr = 0.5f;
  t->st = emc_group_apply_gradients(t->g, t->c, ids, off, grads, &o, NULL);
  return NULL;
}

static void step_threads(trank *tr, uint32_t n) {
  pthread_t th[RANKS];
  uint32_t i;
  for (i = 0; i < n; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, trank_step, &tr[i]), 0);
  for (i = 0; i < n; i++) pthread_join(th[i], NULL);
}

START_TEST(bad_joins_and_refused_steps) {
  const char *name = fresh_name();
  emc_store *s = NULL, *priv = NULL, *snap = NULL;
  emc_group *g = NULL, *o = (emc_group *)(uintptr_t)0x9;
  emc_cache_config cc;
  trank tr[2];
  uint32_t i;
  EMCT_OK(emc_store_create_shared(name, TABLES, 2, &s));
  EMCT_OK(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 11));
  EMCT_OK(emc_store_create(TABLES, 2, &priv));
  EMCT_OK(emc_store_create(TABLES, 2, &snap));
  EMCT_OK(emc_store_fill_uniform(snap, 0, -1.0f, 1.0f, 11));
  EMCT_ST(emc_group_join(priv, 0, 2, 100, &o), EMC_EINVAL);
  EMCT_ST(emc_group_join(NULL, 0, 2, 100, &o), EMC_EINVAL);
  EMCT_ST(emc_group_join(s, 0, 2, 100, NULL), EMC_EINVAL);
  EMCT_ST(emc_group_join(s, 2, 2, 100, &o), EMC_EINVAL);
  EMCT_ST(emc_group_join(s, 0, 0, 100, &o), EMC_EINVAL);
  EMCT_ST(emc_group_join(s, 0, 2, 0, &o), EMC_EINVAL);
  EMCT_ST(emc_group_join(s, 0, 300, 100, &o), EMC_EINVAL);
  ck_assert(o == (emc_group *)(uintptr_t)0x9);
  EMCT_OK(emc_group_join(s, 0, 2, 2000, &g));
  EMCT_ST(emc_group_join(s, 0, 2, 100, &o), EMC_EINVAL); /* rank 0 again */
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "already joined"));
  EMCT_ST(emc_group_join(s, 1, 3, 100, &o), EMC_EINVAL); /* another size */
  ck_assert(o == (emc_group *)(uintptr_t)0x9);
  emc_store_destroy(s); /* refused: a group uses it */
  ck_assert_ptr_nonnull(strstr(emc_last_error_detail(), "group"));
  EMCT_ST(emc_group_apply_gradients(NULL, NULL, NULL, NULL, NULL, NULL, NULL), EMC_EINVAL);
  memset(tr, 0, sizeof tr);
  tr[0].g = g;
  EMCT_OK(emc_group_join(s, 1, 2, 2000, &tr[1].g));
  emct_cache_config_init(&cc);
  cc.backend = BACKEND; /* two caches of this backend over one mapping */
  cc.capacity_bytes = 1u << 20;
  for (i = 0; i < 2; i++) {
    tr[i].s = s;
    tr[i].r = i;
    EMCT_OK(emc_cache_create(s, &cc, &tr[i].c));
  }
  /* rank 1's batch is bad: it returns its own reason, rank 0 the refusal; nothing changed */
  tr[1].bad = 1;
  step_threads(tr, 2);
  ck_assert_int_eq(tr[1].st, EMC_ERANGE);
  ck_assert_int_eq(tr[0].st, EMC_ERANGE);
  same_stores(s, snap, "a refused step");
  /* different optimizers */
  tr[1].bad = 2;
  step_threads(tr, 2);
  ck_assert_int_eq(tr[0].st, EMC_EINVAL);
  ck_assert_int_eq(tr[1].st, EMC_EINVAL);
  same_stores(s, snap, "divergent optimizers");
  /* a good step, threads as ranks: the store moves */
  tr[1].bad = 0;
  step_threads(tr, 2);
  ck_assert_int_eq(tr[0].st, EMC_OK);
  ck_assert_int_eq(tr[1].st, EMC_OK);
  {
    emc_cache *rc;
    emc_optimizer op;
    opt_of(0, &op);
    cc.backend = EMC_BACKEND_HOST;
    EMCT_OK(emc_cache_create(snap, &cc, &rc));
    ref_step(rc, 1, &op, 2);
    EMCT_OK(emc_cache_destroy(rc));
    same_stores(s, snap, "a step of two threads");
  }
  /* rank 1 leaves: rank 0's next step fails at once, and nobody joins a broken group */
  EMCT_OK(emc_group_leave(tr[1].g));
  tr[1].g = NULL;
  step_threads(tr, 1);
  ck_assert_int_eq(tr[0].st, EMC_ETIMEDOUT);
  EMCT_ST(emc_group_join(s, 1, 2, 100, &o), EMC_ETIMEDOUT);
  EMCT_OK(emc_group_leave(g));
  /* everyone left: a new group (of another size) forms */
  EMCT_OK(emc_group_join(s, 0, 1, 100, &g));
  tr[0].g = g;
  step_threads(tr, 1);
  ck_assert_int_eq(tr[0].st, EMC_OK);
  EMCT_OK(emc_group_leave(g));
  EMCT_OK(emc_group_leave(NULL));
  for (i = 0; i < 2; i++) EMCT_OK(emc_cache_destroy(tr[i].c));
  emc_store_destroy(priv);
  emc_store_destroy(snap);
  emc_store_destroy(s);
  EMCT_OK(emc_store_unlink(name));
}
END_TEST


int main(void) {
  Suite *su;
  TCase *tc;
  SRunner *sr;
  int failed;
#ifdef EMCT_GPU
  { /* (before Check allocates: nothing leaks) */
    int dev = emct_gpu_present_in_child("test_gpu_group");
    if (dev != 0) return dev;
  }
#endif
  su = suite_create("group");
  tc = tcase_create("group");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, steps_equal_the_reference, 0, 4);
  tcase_add_loop_test(tc, a_rank_dies, 0, 2);
  tcase_add_test(tc, the_next_writer_finishes_a_dead_appliers_step);
  tcase_add_test(tc, bad_joins_and_refused_steps);
  suite_add_tcase(su, tc);
  sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
