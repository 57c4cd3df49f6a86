/*
 * procs.c: emc-bench --procs P (see procs.h).
 *
 * Each mode forks P workers. A worker maps the store (attaches the shared one, or builds and
 * fills a private one exactly as the parent fills the shared one), creates its host cache,
 * draws its own trace (seed + worker), warms the cache on `warmup` batches, then waits at a
 * barrier; the parent releases all workers at once and the machine's rate is every worker's
 * lookups over the wall time from the release to the last worker's end. Each measured batch
 * is drawn before its lookup (untimed inside the worker, but inside the machine's wall time:
 * the same for both modes). One row per table of each measured batch is checked against
 * emc_uniform_row. After the
 * measured batches a worker reads its own /proc/self/status and reports it; the parent waits
 * until every worker has reported before any exits, so the figures are of P live processes.
 */
#define _GNU_SOURCE 1
#include "procs.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jline.h"
#include "slot.h"
#include "trace.h"

#if defined(__SANITIZE_THREAD__)
#define EMCB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMCB_TSAN 1
#endif
#endif
#ifdef EMCB_TSAN
/* The workers fork while the shared store's robust lock and jemalloc's locks are known to
 * TSan's deadlock detector, which models one process and overflows its list of held locks
 * (tests/test_store_shared.c). Races are still detected. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "detect_deadlocks=0"; }
#endif

/* A sanitizer's shadow memory is resident memory of the process: the memory figures of such a
 * build say little (the JSON line names the sanitizer). */
#if defined(EMCB_TSAN)
#define EMCB_SANITIZER "thread"
#elif defined(__SANITIZE_ADDRESS__)
#define EMCB_SANITIZER "address"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMCB_SANITIZER "address"
#endif
#endif
#ifndef EMCB_SANITIZER
#define EMCB_SANITIZER "none"
#endif

#define MAX_PROCS 64u

typedef struct worker_out {
  uint64_t lookups, wrong;
  double lookup_s;        /* time inside emc_lookup */
  double end_s;           /* CLOCK_MONOTONIC at its last lookup's end */
  uint64_t rss_anon_kb, rss_shmem_kb, rss_file_kb;
  uint64_t hits;
  int status;             /* 0, or the emc_status that stopped it */
  char detail[200];
} worker_out;

typedef struct shared_ctl {
  uint32_t ready, go, reported, exit_ok;
  double go_s;
  worker_out w[MAX_PROCS];
} shared_ctl;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void wait_flag(const uint32_t *f, uint32_t want) {
  while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < want) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

static void read_status(worker_out *w) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "RssAnon: %llu", &v) == 1) w->rss_anon_kb = v;
    else if (sscanf(line, "RssShmem: %llu", &v) == 1) w->rss_shmem_kb = v;
    else if (sscanf(line, "RssFile: %llu", &v) == 1) w->rss_file_kb = v;
  }
  fclose(f);
}

static int fill_store(emc_store *s, const emcb_procs_cfg *c) {
  uint32_t t;
  for (t = 0; t < c->n_tables; t++) {
    emc_status st = emc_store_fill_uniform(s, t, -1.0f, 1.0f, c->seed);
    if (st != EMC_OK) return st;
  }
  return 0;
}

static emc_status make_store(const emcb_procs_cfg *c, const char *shared_name, emc_store **out) {
  emc_table_desc *d = calloc(c->n_tables, sizeof *d);
  emc_status st;
  uint32_t t;
  if (!d) return EMC_ENOMEM;
  for (t = 0; t < c->n_tables; t++) {
    d[t].kind = EMC_TABLE_DENSE;
    d[t].rows = c->rows[t];
    d[t].dim = c->dim;
    d[t].dtype = c->dtype;
  }
  st = shared_name ? emc_store_create_shared(shared_name, d, c->n_tables, out)
                   : emc_store_create(d, c->n_tables, out);
  free(d);
  if (st == EMC_OK && (st = (emc_status)fill_store(*out, c)) != EMC_OK) emc_store_destroy(*out);
  return st;
}

static void worker_fail(worker_out *w, emc_status st) {
  w->status = (int)st;
  snprintf(w->detail, sizeof w->detail, "%s", emc_last_error_detail());
}

/* One worker: k, over the shared store `name` (or its own private store when NULL). */
static void worker(const emcb_procs_cfg *c, shared_ctl *ctl, unsigned k, const char *name) {
  worker_out *w = &ctl->w[k];
  emc_store *s = NULL;
  emc_cache *cache = NULL;
  emc_cache_config cfg;
  emct_rng rng;
  emct_zipf *z = calloc(c->n_tables, sizeof *z);
  emct_perm *perm = calloc(c->n_tables, sizeof *perm);
  size_t n_ids = c->batch * c->n_tables, row_bytes = (size_t)c->dim * emc_dtype_size(c->dtype);
  uint64_t *ids = malloc(n_ids * sizeof *ids), *off = malloc((c->n_tables + 1) * sizeof *off);
  unsigned char *out = malloc(n_ids * row_bytes), *want = malloc(row_bytes);
  uint64_t total_bytes = 0, b;
  uint32_t t;
  emc_status st;
  emc_stats st0, st1;
  int at_barrier = 0; /* this worker counted itself in ctl->ready */
  if (!z || !perm || !ids || !off || !out || !want) {
    worker_fail(w, EMC_ENOMEM);
    goto out;
  }
  st = name ? emc_store_attach(name, &s) : make_store(c, NULL, &s);
  if (st != EMC_OK) {
    worker_fail(w, st);
    goto out;
  }
  for (t = 0; t < c->n_tables; t++) {
    total_bytes += c->rows[t] * emcb_slot_stride(row_bytes);
    emct_zipf_init(&z[t], c->rows[t], c->alpha);
    emct_perm_init(&perm[t], c->rows[t], c->seed * 31u + t);
    off[t] = (uint64_t)t * c->batch;
  }
  off[c->n_tables] = n_ids;
  emc_cache_config_init(&cfg);
  cfg.backend = EMC_BACKEND_HOST;
  cfg.capacity_bytes = emcb_budget_bytes((double)total_bytes * c->cache_frac);
  cfg.evict_high = (float)c->t1;
  cfg.evict_low = (float)c->t2;
  cfg.key_bits = c->key_bits;
  cfg.admission = c->admission;
  if ((st = emc_cache_create(s, &cfg, &cache)) != EMC_OK) {
    worker_fail(w, st);
    goto out;
  }
  emct_rng_seed(&rng, c->seed * 1000003u + k);
  for (b = 0; b < c->warmup + c->batches; b++) {
    double t0, t1;
    size_t i;
    if (b == c->warmup) { /* the barrier: every worker warmed, then all start at once */
      emc_get_stats(cache, &st0);
      __atomic_fetch_add(&ctl->ready, 1u, __ATOMIC_ACQ_REL);
      at_barrier = 1;
      wait_flag(&ctl->go, 1);
    }
    for (t = 0; t < c->n_tables; t++)
      for (i = 0; i < c->batch; i++)
        ids[off[t] + i] = emct_perm_apply(&perm[t], emct_zipf_sample(&z[t], &rng));
    t0 = mono_s();
    st = emc_lookup(cache, ids, off, out, NULL);
    t1 = mono_s();
    if (st != EMC_OK) {
      worker_fail(w, st);
      goto out;
    }
    if (b >= c->warmup) {
      w->lookup_s += t1 - t0;
      w->lookups += n_ids;
      w->end_s = t1;
      for (t = 0; t < c->n_tables; t++) { /* one row per table per batch, checked */
        size_t p = off[t] + (size_t)(b % c->batch);
        emc_uniform_row(c->seed, t, ids[p], -1.0f, 1.0f, c->dim, c->dtype, want);
        if (memcmp(out + p * row_bytes, want, row_bytes) != 0) w->wrong++;
      }
    }
  }
  if (c->batches == 0) {
    emc_get_stats(cache, &st0);
    __atomic_fetch_add(&ctl->ready, 1u, __ATOMIC_ACQ_REL);
    at_barrier = 1;
    wait_flag(&ctl->go, 1);
  }
  emc_get_stats(cache, &st1);
  w->hits = st1.hits - st0.hits;
out:
  read_status(w);
  if (!at_barrier) /* failed before it: counted as arrived, so the others are released */
    __atomic_fetch_add(&ctl->ready, 1u, __ATOMIC_ACQ_REL);
  __atomic_fetch_add(&ctl->reported, 1u, __ATOMIC_ACQ_REL);
  wait_flag(&ctl->exit_ok, 1); /* everyone measured alive */
  if (cache) emc_cache_destroy(cache);
  if (s) emc_store_destroy(s);
  _exit(w->status ? 2 : 0);
}

typedef struct mode_result {
  double machine_lps, wall_s;
  uint64_t lookups, wrong, hits;
  uint64_t anon_kb_sum, shmem_kb_max, file_kb_sum, anon_kb[MAX_PROCS], shmem_kb[MAX_PROCS];
  int failed;
} mode_result;

/* Wait until *counter reaches want, counting the workers that ended meanwhile (workers exit
 * only after exit_ok, so one that ends before has died: a signal, the OOM killer) as arrived:
 * otherwise one dead worker would keep the parent and every other worker waiting for good.
 * A reaped worker's pid becomes 0 and its wait status is kept in stt[]. */
static void wait_workers(const uint32_t *counter, unsigned want, pid_t *kids, int *stt,
                         mode_result *r) {
  unsigned dead = 0, k;
  for (k = 0; k < want; k++) dead += kids[k] == 0;
  while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) + dead < want) {
    struct timespec ts = {0, 200000};
    for (k = 0; k < want; k++) {
      pid_t w = kids[k] > 0 ? waitpid(kids[k], &stt[k], WNOHANG) : 0;
      if (w == kids[k] || (w < 0 && errno == ECHILD)) { /* ended (ECHILD: reaped for us) */
        if (w < 0) stt[k] = 0x7f; /* (not "exited 0": a status that reads as a signal) */
        kids[k] = 0;
        dead++;
        r->failed = 1;
      }
    }
    nanosleep(&ts, NULL);
  }
}

static int run_mode(const emcb_procs_cfg *c, shared_ctl *ctl, const char *name, mode_result *r) {
  pid_t kids[MAX_PROCS];
  int stt[MAX_PROCS] = {0};
  unsigned k;
  double end = 0;
  memset(ctl, 0, sizeof *ctl);
  memset(r, 0, sizeof *r);
  const pid_t parent = getpid();
  for (k = 0; k < c->procs; k++) {
    fflush(NULL);
    kids[k] = fork();
    if (kids[k] == 0) {
      /* a worker whose parent died would wait at the barrier for good */
      (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(2); /* it died before the request */
      worker(c, ctl, k, name);
    }
    if (kids[k] < 0) {
      fprintf(stderr, "emc-bench: --procs: fork: %s\n", strerror(errno));
      for (; k-- > 0;) kill(kids[k], SIGKILL);
      return 2;
    }
  }
  wait_workers(&ctl->ready, c->procs, kids, stt, r);
  ctl->go_s = mono_s();
  __atomic_store_n(&ctl->go, 1u, __ATOMIC_RELEASE);
  wait_workers(&ctl->reported, c->procs, kids, stt, r);
  __atomic_store_n(&ctl->exit_ok, 1u, __ATOMIC_RELEASE);
  for (k = 0; k < c->procs; k++) {
    if (kids[k] > 0) {
      if (waitpid(kids[k], &stt[k], 0) != kids[k]) stt[k] = 0x7f; /* not seen to exit 0 */
      kids[k] = 0;
    }
    if (!WIFEXITED(stt[k]) || WEXITSTATUS(stt[k]) != 0) {
      if (WIFSIGNALED(stt[k]))
        fprintf(stderr, "emc-bench: --procs: worker %u ended by signal %d\n", k, WTERMSIG(stt[k]));
      r->failed = 1;
    }
  }
  for (k = 0; k < c->procs; k++) {
    const worker_out *w = &ctl->w[k];
    if (w->status) {
      fprintf(stderr, "emc-bench: --procs: worker %u: %s: %s\n", k,
              emc_status_name((emc_status)w->status), w->detail);
      r->failed = 1;
    }
    r->lookups += w->lookups;
    r->wrong += w->wrong;
    r->hits += w->hits;
    r->anon_kb[k] = w->rss_anon_kb;
    r->shmem_kb[k] = w->rss_shmem_kb;
    r->anon_kb_sum += w->rss_anon_kb;
    r->file_kb_sum += w->rss_file_kb;
    if (w->rss_shmem_kb > r->shmem_kb_max) r->shmem_kb_max = w->rss_shmem_kb;
    if (w->end_s > end) end = w->end_s;
  }
  r->wall_s = end - ctl->go_s;
  r->machine_lps = r->wall_s > 0 ? (double)r->lookups / r->wall_s : 0;
  return r->failed ? 2 : 0;
}

/* base_kb: one store plus every process's memory but a store (from the private run: each
 * process's private memory less the store's bytes) - what P processes need if the store is
 * held once. */
static void emit(const emcb_procs_cfg *c, const char *mode, const mode_result *r,
                 uint64_t store_bytes, uint64_t cache_bytes, uint64_t seg_bytes, uint64_t base_kb,
                 FILE *out, FILE *out2) {
  jline j;
  unsigned k;
  uint64_t machine_kb = r->anon_kb_sum + (seg_bytes ? seg_bytes / 1024 : 0);
  jl_init(&j);
  jl_str(&j, "record", "procs");
  jl_str(&j, "mode", mode);
  jl_str(&j, "sanitizer", EMCB_SANITIZER);
  jl_u64(&j, "procs", c->procs);
  jl_u64(&j, "tables", c->n_tables);
  jl_u64(&j, "dim", c->dim);
  jl_u64(&j, "batch", c->batch);
  jl_u64(&j, "batches", c->batches);
  jl_num(&j, "alpha", c->alpha);
  jl_num(&j, "cache_frac", c->cache_frac);
  jl_u64(&j, "store_bytes", store_bytes);
  jl_u64(&j, "cache_capacity_bytes", cache_bytes);
  jl_num(&j, "machine_lookups_per_s", r->machine_lps);
  jl_num(&j, "wall_s", r->wall_s);
  jl_num(&j, "hit_ratio", r->lookups ? (double)r->hits / (double)r->lookups : 0);
  jl_u64(&j, "rows_checked_wrong", r->wrong);
  jl_key(&j, "rss_anon_kb");
  jl_raw(&j, "[");
  for (k = 0; k < c->procs; k++) jl_raw(&j, "%s%" PRIu64, k ? "," : "", r->anon_kb[k]);
  jl_raw(&j, "]");
  jl_key(&j, "rss_shmem_kb");
  jl_raw(&j, "[");
  for (k = 0; k < c->procs; k++) jl_raw(&j, "%s%" PRIu64, k ? "," : "", r->shmem_kb[k]);
  jl_raw(&j, "]");
  jl_u64(&j, "segment_bytes", seg_bytes);
  /* the machine: every process's private memory, plus the shared segment once */
  jl_u64(&j, "machine_resident_kb", machine_kb);
  jl_u64(&j, "one_store_plus_processes_kb", base_kb);
  jl_num(&j, "machine_resident_over_one_store", (double)machine_kb / (double)base_kb);
  jl_end(&j);
  fputs(j.buf, out);
  if (out2) fputs(j.buf, out2);
  fflush(out);
}

int emcb_procs_run(const emcb_procs_cfg *c, FILE *out, FILE *out2) {
  char name[64];
  shared_ctl *ctl;
  emc_store *s = NULL;
  emc_status st;
  mode_result sh, pv;
  uint64_t store_bytes = 0, cache_bytes, seg_bytes = 0, row_bytes = (uint64_t)c->dim * emc_dtype_size(c->dtype);
  uint32_t t;
  int rc;
  if (c->procs < 1 || c->procs > MAX_PROCS) {
    fprintf(stderr, "emc-bench: --procs %u: 1..%u\n", c->procs, MAX_PROCS);
    return 2;
  }
  /* workers' exits are waited for: a SIGCHLD ignored by whoever started us would reap them */
  signal(SIGCHLD, SIG_DFL);
  for (t = 0; t < c->n_tables; t++) store_bytes += c->rows[t] * emcb_slot_stride(row_bytes);
  cache_bytes = emcb_budget_bytes((double)store_bytes * c->cache_frac);
  ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (ctl == MAP_FAILED) {
    fprintf(stderr, "emc-bench: --procs: mmap: %s\n", strerror(errno));
    return 2;
  }
  snprintf(name, sizeof name, "/emc-bench-%ld", (long)getpid());
  fprintf(stderr, "emc-bench: --procs %u: a shared store of %.1f MB in '%s'...\n", c->procs,
          (double)store_bytes / 1e6, name);
  emc_store_unlink(name); /* a leftover of a killed run with this pid */
  if ((st = make_store(c, name, &s)) != EMC_OK) {
    fprintf(stderr, "emc-bench: --procs: the shared store: %s: %s\n", emc_status_name(st),
            emc_last_error_detail());
    munmap(ctl, sizeof *ctl);
    return 2;
  }
  {
    FILE *f;
    char path[96];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    if ((f = fopen(path, "r"))) {
      fseek(f, 0, SEEK_END);
      seg_bytes = (uint64_t)ftell(f);
      fclose(f);
    }
  }
  /* the parent's own mapping stays (it created the store): the workers attach to it */
  rc = run_mode(c, ctl, name, &sh);
  emc_store_destroy(s);
  emc_store_unlink(name);
  if (rc == 0) {
    fprintf(stderr, "emc-bench: --procs %u: the same with a private store in each process...\n",
            c->procs);
    rc = run_mode(c, ctl, NULL, &pv);
  }
  if (rc == 0) {
    uint64_t store_kb = store_bytes / 1024, rest = 0, base_kb, sh_kb = sh.anon_kb_sum + seg_bytes / 1024;
    unsigned k;
    for (k = 0; k < c->procs; k++) rest += pv.anon_kb[k] > store_kb ? pv.anon_kb[k] - store_kb : 0;
    base_kb = store_kb + rest;
    emit(c, "shared", &sh, store_bytes, cache_bytes, seg_bytes, base_kb, out, out2);
    emit(c, "private", &pv, store_bytes, cache_bytes, 0, base_kb, out, out2);
    fprintf(stderr,
            "emc-bench: --procs %u, each with a host cache of %.1f MB (store %.1f MB):\n"
            "emc-bench:   shared store:   %.2f M lookups/s on the machine, resident %.1f MB "
            "(private %.1f MB summed + segment %.1f MB once)\n"
            "emc-bench:   private stores: %.2f M lookups/s on the machine, resident %.1f MB "
            "(private memory summed)\n"
            "emc-bench:   memory over one store plus each process's own (cache, buffers): "
            "shared %.2f, private %.2f\n",
            c->procs, (double)cache_bytes / 1e6, (double)store_bytes / 1e6, sh.machine_lps / 1e6,
            (double)(sh.anon_kb_sum * 1024 + seg_bytes) / 1e6, (double)sh.anon_kb_sum * 1024 / 1e6,
            (double)seg_bytes / 1e6, pv.machine_lps / 1e6, (double)pv.anon_kb_sum * 1024 / 1e6,
            (double)sh_kb / (double)base_kb, (double)pv.anon_kb_sum / (double)base_kb);
    if (sh.wrong || pv.wrong) {
      fprintf(stderr, "emc-bench: --procs: %" PRIu64 " wrong rows\n", sh.wrong + pv.wrong);
      rc = 1;
    }
  }
  munmap(ctl, sizeof *ctl);
  return rc;
}
