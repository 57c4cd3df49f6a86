/*
 * test_readme: the C snippets of README.md, verbatim, compiled and run.
 * If you edit one, edit the other: tests/check_readme.py (a CTest test) compares them.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define EMCT_README_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMCT_README_TSAN 1
#endif
#endif
#ifdef EMCT_README_TSAN
/* The shared store's lock is a robust mutex taken by other processes: TSan's deadlock
 * detector, which models one process, overflows its list of held locks (test_store_shared). */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "detect_deadlocks=0"; }
#endif

/* ---- README: An inference server ---- */
#include <embcache.h>
#include <stdio.h>

int serve(void);
int serve(void) {
  emc_table_desc tables[2] = {
    {"user", EMC_TABLE_DENSE, 1000000, 64, EMC_DTYPE_F32, EMC_STATE_NONE},
    {"item", EMC_TABLE_HASHED, 500000, 32, EMC_DTYPE_F16, EMC_STATE_NONE}};
  emc_store *store; emc_cache *cache; emc_cache_config cfg;
  if (emc_store_open("model.emc", &store) != EMC_OK &&        /* or build one: */
      emc_store_create(tables, 2, &store) != EMC_OK) return 1;
  emc_cache_config_init(&cfg);
  cfg.capacity_bytes = 256u << 20;                             /* 256 MiB of hot rows */
  if (emc_cache_create(store, &cfg, &cache) != EMC_OK) {
    fprintf(stderr, "%s\n", emc_last_error_detail()); return 1; }
  uint64_t ids[5] = {7, 42, 7, 0xdeadbeef, 12}, offsets[3] = {0, 3, 5};
  static unsigned char out[3 * 64 * 4 + 2 * 32 * 2];           /* emc_batch_bytes() */
  emc_status st = emc_lookup(cache, ids, offsets, out, NULL);  /* table 0: 3 ids, table 1: 2 */
  if (st != EMC_OK) fprintf(stderr, "%s: %s\n", emc_status_name(st), emc_last_error_detail());
  emc_cache_destroy(cache);
  emc_store_destroy(store);
  return st != EMC_OK;
}

/* ---- README: A trainer ---- */
emc_status train_step(emc_cache *cache, const emc_optimizer *opt,
                      const uint64_t *ids, const uint64_t *offsets,
                      const uint64_t *next_ids, const uint64_t *next_offsets,
                      float *rows, float *grads, void (*model)(const float *, float *));
/* one step of the pipeline: batch i+1 made resident (and pinned) while batch i trains */
emc_status train_step(emc_cache *cache, const emc_optimizer *opt,
                      const uint64_t *ids, const uint64_t *offsets,            /* batch i */
                      const uint64_t *next_ids, const uint64_t *next_offsets,  /* batch i+1 */
                      float *rows, float *grads, void (*model)(const float *, float *)) {
  emc_status st = emc_prefetch(cache, next_ids, next_offsets, NULL);
  if (st != EMC_OK && st != EMC_ECAPACITY) return st;  /* ECAPACITY: some rows left unpinned */
  if ((st = emc_lookup(cache, ids, offsets, rows, NULL)) != EMC_OK) return st;  /* all hits */
  model(rows, grads);                 /* forward, backward: d loss / d row, f32, packed like rows */
  return emc_apply_gradients(cache, ids, offsets, grads, opt, NULL);  /* rows stay in the cache */
}
/* setup:      emc_optimizer opt; emc_optimizer_init(&opt); opt.lr = 0.05f;
 *             (row-wise Adagrad: opt.kind = EMC_OPT_ROWWISE_ADAGRAD, tables created with
 *             .state = EMC_STATE_ADAGRAD: the accumulator lives beside each row)
 * checkpoint: emc_flush(cache, NULL); emc_store_save(store, "ckpt.emc"); */
/* ---- README: One store per machine ---- */
emc_status load_shared(const char *file, const char *name);
emc_status read_shared(const char *name, const uint64_t *ids, size_t n, void *rows);
/* the loader: the rows once per machine, in POSIX shared memory (a file, or emc_store_create_shared) */
emc_status load_shared(const char *file, const char *name) {
  emc_store *s;
  emc_status st = emc_store_open_shared(file, name, &s);  /* name: "/embcache-model" */
  if (st == EMC_OK) emc_store_destroy(s);               /* unmaps; the rows stay under name */
  return st;
}
/* every other process: map the same rows (no copy), read them without a lock, never torn */
emc_status read_shared(const char *name, const uint64_t *ids, size_t n, void *rows) {
  emc_store *s;
  emc_status st = emc_store_attach(name, &s);
  if (st != EMC_OK) return st;
  st = emc_store_read(s, 0, ids, n, rows);
  emc_store_destroy(s);
  return st;
}
/* a serving process (say eight per machine, one per GPU): its own cache over the one copy */
emc_status serve_shared(const char *name, const uint64_t *ids, const uint64_t *offsets, void *out);
emc_status serve_shared(const char *name, const uint64_t *ids, const uint64_t *offsets, void *out) {
  emc_store *s; emc_cache *c; emc_cache_config cfg;
  emc_status st = emc_store_attach(name, &s);
  if (st != EMC_OK) return st;
  emc_cache_config_init(&cfg);
  cfg.capacity_bytes = 64u << 20;                 /* a host cache of 64 MiB of hot rows */
  if ((st = emc_cache_create(s, &cfg, &c)) == EMC_OK) {
    st = emc_lookup(c, ids, offsets, out, NULL);  /* never older than a completed write */
    emc_cache_destroy(c);
  }
  emc_store_destroy(s);
  return st;
}
/* a trainer, rank r of four: each step's sparse update of all four is merged and applied once */
emc_status train_shared(const char *name, uint32_t rank, int steps,
                        void (*step)(uint32_t rank, int k, uint64_t *ids, uint64_t *offsets,
                                     float *grads));
emc_status train_shared(const char *name, uint32_t rank, int steps,
                        void (*step)(uint32_t rank, int k, uint64_t *ids, uint64_t *offsets,
                                     float *grads)) {
  static uint64_t ids[1024], offsets[2]; static float grads[1024 * 64];
  emc_store *s; emc_cache *c; emc_group *g; emc_optimizer opt;
  emc_status st = emc_store_attach(name, &s);
  if (st != EMC_OK) return st;
  emc_optimizer_init(&opt);
  if ((st = emc_cache_create(s, NULL, &c)) == EMC_OK) {
    if ((st = emc_group_join(s, rank, 4, 10000, &g)) == EMC_OK) {  /* 4 ranks, 10 s timeout */
      for (int k = 0; k < steps && st == EMC_OK; k++) {
        step(rank, k, ids, offsets, grads);     /* lookup, forward, backward: this rank's part */
        st = emc_group_apply_gradients(g, c, ids, offsets, grads, &opt, NULL);
      }                                         /* EMC_ETIMEDOUT: a rank died or was late */
      emc_group_leave(g);
    }
    emc_cache_destroy(c);
  }
  emc_store_destroy(s);
  return st;
}
/* retire:  emc_store_unlink(name); the memory goes when the last process destroys its store */
/* ---- end of README snippets ---- */

START_TEST(inference_snippet_runs) { ck_assert_int_eq(serve(), 0); }
END_TEST

/* The shared-store snippet: a child process loads a file into shared memory and exits; this
 * process attaches and reads the file's rows. */
START_TEST(shared_snippet_runs) {
  emc_table_desc td = {"emb", EMC_TABLE_DENSE, 100, 4, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *s;
  char path[256], name[64];
  uint64_t ids[3] = {5, 99, 0};
  float want[12], got[12];
  pid_t pid;
  int stt = 0;
  snprintf(path, sizeof path, "%s/readme-shared-%d.emc", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid());
  snprintf(name, sizeof name, "/emct-readme-%d", (int)getpid());
  ck_assert_int_eq(emc_store_create(&td, 1, &s), EMC_OK);
  ck_assert_int_eq(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 3), EMC_OK);
  ck_assert_int_eq(emc_store_read(s, 0, ids, 3, want), EMC_OK);
  ck_assert_int_eq(emc_store_save(s, path), EMC_OK);
  emc_store_destroy(s);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(load_shared(path, name) == EMC_OK ? 0 : 1);
  ck_assert_int_eq(waitpid(pid, &stt, 0), pid);
  ck_assert(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
  ck_assert_int_eq(read_shared(name, ids, 3, got), EMC_OK);
  ck_assert_mem_eq(got, want, sizeof want);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
  ck_assert_int_eq(read_shared(name, ids, 3, got), EMC_EIO);
  unlink(path);
}
END_TEST

/* The serving snippet in eight processes over one shared store: each reads the store's rows
 * through its own cache; the trainer snippet in four rank processes:
 * the store afterwards is what one process applying every rank's gradients computes (the
 * gradients are multiples of 1/64 and few, so every summation order gives the same floats). */
enum { S_ROWS = 2000, S_DIM = 64, S_STEPS = 25, S_N = 40 };
static void rank_step(uint32_t rank, int k, uint64_t *ids, uint64_t *offsets, float *grads) {
  int i, j;
  offsets[0] = 0;
  offsets[1] = S_N;
  for (i = 0; i < S_N; i++) {
    ids[i] = (uint64_t)((rank * 97u + (unsigned)k * 31u + (unsigned)i * (unsigned)i) % S_ROWS);
    for (j = 0; j < S_DIM; j++) grads[i * S_DIM + j] = (float)((int)((rank + (unsigned)i + (unsigned)j) % 5) - 2) / 64.0f;
  }
}

START_TEST(shared_serving_and_training_snippets_run) {
  emc_table_desc td = {"emb", EMC_TABLE_DENSE, S_ROWS, S_DIM, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *s, *ref;
  emc_cache *rc;
  emc_optimizer opt;
  char name[64];
  static float want[S_ROWS * S_DIM], got[S_ROWS * S_DIM];
  static uint64_t all[S_ROWS], ids[4 * S_N], off[2];
  static float grads[4 * S_N * S_DIM];
  pid_t kids[8];
  int i, k, stt;
  uint32_t r;
  snprintf(name, sizeof name, "/emct-readme2-%d", (int)getpid());
  shm_unlink(name);
  for (i = 0; i < S_ROWS; i++) all[i] = (uint64_t)i;
  ck_assert_int_eq(emc_store_create_shared(name, &td, 1, &s), EMC_OK);
  ck_assert_int_eq(emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 8), EMC_OK);
  ck_assert_int_eq(emc_store_read(s, 0, all, S_ROWS, want), EMC_OK);
  for (i = 0; i < 8; i++) { /* eight servers: each looks every row up through its cache */
    if ((kids[i] = fork()) == 0) {
      uint64_t o[2] = {0, S_ROWS};
      _exit(serve_shared(name, all, o, got) == EMC_OK && memcmp(got, want, sizeof got) == 0 ? 0 : 1);
    }
    ck_assert_int_gt(kids[i], 0);
  }
  for (i = 0; i < 8; i++) {
    ck_assert_int_eq(waitpid(kids[i], &stt, 0), kids[i]);
    ck_assert(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
  }
  for (r = 0; r < 4; r++) { /* four trainers */
    if ((kids[r] = fork()) == 0) _exit(train_shared(name, r, S_STEPS, rank_step) == EMC_OK ? 0 : 1);
    ck_assert_int_gt(kids[r], 0);
  }
  for (r = 0; r < 4; r++) {
    ck_assert_int_eq(waitpid(kids[r], &stt, 0), kids[r]);
    ck_assert(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
  }
  /* the reference: a private copy, every rank's batch of a step applied as one batch */
  ck_assert_int_eq(emc_store_create(&td, 1, &ref), EMC_OK);
  ck_assert_int_eq(emc_store_fill_uniform(ref, 0, -1.0f, 1.0f, 8), EMC_OK);
  ck_assert_int_eq(emc_cache_create(ref, NULL, &rc), EMC_OK);
  emc_optimizer_init(&opt);
  for (k = 0; k < S_STEPS; k++) {
    for (r = 0; r < 4; r++) rank_step(r, k, ids + r * S_N, off, grads + r * S_N * S_DIM);
    off[0] = 0;
    off[1] = 4 * S_N;
    ck_assert_int_eq(emc_apply_gradients(rc, ids, off, grads, &opt, NULL), EMC_OK);
  }
  ck_assert_int_eq(emc_cache_destroy(rc), EMC_OK);
  ck_assert_int_eq(emc_store_read(ref, 0, all, S_ROWS, want), EMC_OK);
  ck_assert_int_eq(emc_store_read(s, 0, all, S_ROWS, got), EMC_OK);
  ck_assert_mem_eq(got, want, sizeof got);
  emc_store_destroy(ref);
  emc_store_destroy(s);
  ck_assert_int_eq(emc_store_unlink(name), EMC_OK);
}
END_TEST

/* The trainer snippet, run for a few hundred steps against a plain reference of the same
 * updates: a toy model whose gradient is (row - target) / 8 per element. */
enum { T_ROWS = 5000, T_DIM = 8, T_N = 64, T_STEPS = 200 };
static void toy_model(const float *rows, float *grads) {
  int i;
  for (i = 0; i < T_N * T_DIM; i++) grads[i] = (rows[i] - (float)(i % 5)) * 0.125f;
}

static void next_batch(uint64_t *ids, uint64_t *seed) {
  int i;
  for (i = 0; i < T_N; i++) /* a skewed batch: duplicates and a hot set */
    ids[i] = ((*seed = *seed * 6364136223846793005ull + 1442695040888963407ull) >> 33) %
             (i % 2 ? 300u : (unsigned)T_ROWS);
}

START_TEST(trainer_snippet_matches_reference) {
  emc_table_desc td = {"emb", EMC_TABLE_DENSE, T_ROWS, T_DIM, EMC_DTYPE_F32, EMC_STATE_NONE};
  emc_store *store;
  emc_cache *cache;
  emc_cache_config cfg;
  emc_optimizer opt;
  float *ref = calloc((size_t)T_ROWS * T_DIM, sizeof *ref), rows[T_N * T_DIM], grads[T_N * T_DIM];
  float want[T_N * T_DIM], got[T_DIM];
  uint64_t batch[2][T_N], offsets[2] = {0, T_N}, seed = 99;
  int step, i, j, k;
  ck_assert_int_eq(emc_store_create(&td, 1, &store), EMC_OK);
  ck_assert_int_eq(emc_store_fill_uniform(store, 0, -1, 1, 5), EMC_OK);
  for (i = 0; i < T_ROWS; i++)
    ck_assert_int_eq(emc_uniform_row(5, 0, (uint64_t)i, -1, 1, T_DIM, EMC_DTYPE_F32, ref + i * T_DIM), EMC_OK);
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = 40000; /* far fewer rows than the table: evictions write rows back */
  ck_assert_int_eq(emc_cache_create(store, &cfg, &cache), EMC_OK);
  emc_optimizer_init(&opt);
  opt.lr = 0.05f;
  next_batch(batch[0], &seed);
  for (step = 0; step < T_STEPS; step++) {
    const uint64_t *ids = batch[step & 1];
    next_batch(batch[(step + 1) & 1], &seed);
    ck_assert_int_eq(train_step(cache, &opt, ids, offsets, batch[(step + 1) & 1], offsets, rows,
                                grads, toy_model),
                     EMC_OK);
    /* the reference: the rows before the step, then per distinct id the gradients of its
     * positions summed in position order and w = fmaf(-lr, g, w) */
    for (i = 0; i < T_N; i++) memcpy(want + i * T_DIM, ref + ids[i] * T_DIM, sizeof got);
    ck_assert_msg(memcmp(rows, want, sizeof rows) == 0, "step %d: a looked-up row differs", step);
    for (i = 0; i < T_N; i++) {
      float g[T_DIM];
      for (k = 0; k < i && ids[k] != ids[i]; k++) {}
      if (k < i) continue; /* not the first occurrence */
      memcpy(g, grads + i * T_DIM, sizeof g);
      for (k = i + 1; k < T_N; k++)
        if (ids[k] == ids[i])
          for (j = 0; j < T_DIM; j++) g[j] = g[j] + grads[k * T_DIM + j];
      for (j = 0; j < T_DIM; j++) ref[ids[i] * T_DIM + j] = fmaf(-opt.lr, g[j], ref[ids[i] * T_DIM + j]);
    }
  }
  ck_assert_int_eq(emc_flush(cache, NULL), EMC_OK);
  for (i = 0; i < T_ROWS; i++) {
    uint64_t id = (uint64_t)i;
    ck_assert_int_eq(emc_store_read(store, 0, &id, 1, got), EMC_OK);
    ck_assert_msg(memcmp(got, ref + i * T_DIM, sizeof got) == 0, "row %d differs after flush", i);
  }
  ck_assert_int_eq(emc_cache_destroy(cache), EMC_OK);
  emc_store_destroy(store);
  free(ref);
}
END_TEST

int main(void) {
  Suite *s = suite_create("readme");
  TCase *tc = tcase_create("snippets");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, inference_snippet_runs);
  tcase_add_test(tc, shared_snippet_runs);
  tcase_add_test(tc, shared_serving_and_training_snippets_run);
  tcase_add_test(tc, trainer_snippet_matches_reference);
  tcase_set_timeout(tc, 120);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
