/* lookup_threads.c: T caller threads looking one batch up together (see lookup_threads.h). */
#define _POSIX_C_SOURCE 200809L

#include "lookup_threads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lt_part {
  struct emcb_lt *lt;
  uint64_t *offsets;   /* n_tables + 1: the part as a batch of its own */
  uint64_t lo, n;      /* its first position in the whole batch, its positions */
  size_t out_byte;     /* where its rows start in the whole batch's out */
  emc_status st;       /* its last lookup's status */
  char detail[512];    /* ... and emc_last_error_detail() when that failed */
  pthread_t thread;    /* parts 1 .. T-1 */
} lt_part;

struct emcb_lt {
  unsigned n_threads;
  unsigned started;    /* worker threads running (parts 1 .. started) */
  uint32_t n_tables;   /* of the plan; 0 before the first */
  lt_part parts[EMCB_LT_MAX_THREADS];
  /* the batch in flight, written by the caller before it bumps gen */
  emc_cache *cache;
  const uint64_t *ids;
  unsigned char *out;
  uint8_t *where;
  /* the hand-off */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;        /* batches released so far */
  unsigned pending;    /* workers still on the current batch */
  int quit;
  const char *failed;  /* detail of the lowest failing part of the last lookup */
};

static void run_part(emcb_lt *lt, lt_part *p) {
  p->st = EMC_OK;
  if (p->n == 0) return;
  p->st = emc_lookup_ex(lt->cache, lt->ids + p->lo, p->offsets, lt->out + p->out_byte,
                        lt->where ? lt->where + p->lo : NULL, NULL);
  if (p->st != EMC_OK) snprintf(p->detail, sizeof p->detail, "%s", emc_last_error_detail());
}

static void *worker(void *arg) {
  lt_part *p = arg;
  emcb_lt *lt = p->lt;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&lt->mu);
    while (lt->gen == seen && !lt->quit) pthread_cond_wait(&lt->go, &lt->mu);
    if (lt->quit) {
      pthread_mutex_unlock(&lt->mu);
      return NULL;
    }
    seen = lt->gen;
    pthread_mutex_unlock(&lt->mu);
    run_part(lt, p);
    pthread_mutex_lock(&lt->mu);
    if (--lt->pending == 0) pthread_cond_signal(&lt->done);
    pthread_mutex_unlock(&lt->mu);
  }
}

int emcb_lt_create(unsigned n_threads, emcb_lt **out) {
  if (!out || n_threads < 1 || n_threads > EMCB_LT_MAX_THREADS) return EMC_EINVAL;
  emcb_lt *lt = calloc(1, sizeof *lt);
  if (!lt) return EMC_ENOMEM;
  lt->n_threads = n_threads;
  lt->failed = "";
  int ok = 0; /* what is initialized: 1 mutex, 2 + go, 3 + done */
  if (pthread_mutex_init(&lt->mu, NULL) == 0 && ++ok && pthread_cond_init(&lt->go, NULL) == 0 &&
      ++ok && pthread_cond_init(&lt->done, NULL) == 0)
    ++ok;
  if (ok < 3) {
    if (ok >= 2) pthread_cond_destroy(&lt->go);
    if (ok >= 1) pthread_mutex_destroy(&lt->mu);
    free(lt);
    return EMC_ENOMEM;
  }
  for (unsigned k = 0; k < n_threads; k++) lt->parts[k].lt = lt;
  for (unsigned k = 1; k < n_threads; k++) {
    if (pthread_create(&lt->parts[k].thread, NULL, worker, &lt->parts[k]) != 0) {
      emcb_lt_destroy(lt); /* stops the ones started */
      return EMC_ENOMEM;
    }
    lt->started = k;
  }
  *out = lt;
  return 0;
}

void emcb_lt_destroy(emcb_lt *lt) {
  if (!lt) return;
  pthread_mutex_lock(&lt->mu);
  lt->quit = 1;
  pthread_cond_broadcast(&lt->go);
  pthread_mutex_unlock(&lt->mu);
  for (unsigned k = 1; k <= lt->started; k++) pthread_join(lt->parts[k].thread, NULL);
  for (unsigned k = 0; k < lt->n_threads; k++) free(lt->parts[k].offsets);
  pthread_cond_destroy(&lt->done);
  pthread_cond_destroy(&lt->go);
  pthread_mutex_destroy(&lt->mu);
  free(lt);
}

int emcb_lt_plan(emcb_lt *lt, const emc_store *s, const uint64_t *offsets, uint32_t n_tables) {
  if (!lt || !s || !offsets || n_tables == 0) return EMC_EINVAL;
  const uint64_t n = offsets[n_tables], T = lt->n_threads;
  for (unsigned k = 0; k < lt->n_threads; k++) {
    lt_part *p = &lt->parts[k];
    uint64_t *off = realloc(p->offsets, ((size_t)n_tables + 1) * sizeof *off);
    if (!off) return EMC_ENOMEM;
    p->offsets = off;
    const uint64_t lo = n * k / T, hi = n * (k + 1) / T;
    /* the positions before the part, as a batch: its byte size is the part's offset in out */
    for (uint32_t t = 0; t <= n_tables; t++) off[t] = offsets[t] < lo ? offsets[t] : lo;
    emc_status st = emc_batch_bytes(s, off, &p->out_byte);
    if (st != EMC_OK) return st;
    for (uint32_t t = 0; t <= n_tables; t++) {
      const uint64_t x = offsets[t] < lo ? lo : offsets[t] > hi ? hi : offsets[t];
      off[t] = x - lo;
    }
    p->lo = lo;
    p->n = hi - lo;
  }
  lt->n_tables = n_tables;
  return 0;
}

emc_status emcb_lt_lookup(emcb_lt *lt, emc_cache *c, const uint64_t *ids, void *out,
                          uint8_t *where) {
  if (!lt || lt->n_tables == 0) return EMC_EINVAL;
  lt->failed = "";
  lt->cache = c;
  lt->ids = ids;
  lt->out = out;
  lt->where = where;
  pthread_mutex_lock(&lt->mu);
  lt->pending = lt->n_threads - 1;
  lt->gen++;
  pthread_cond_broadcast(&lt->go);
  pthread_mutex_unlock(&lt->mu);
  run_part(lt, &lt->parts[0]);
  pthread_mutex_lock(&lt->mu);
  while (lt->pending > 0) pthread_cond_wait(&lt->done, &lt->mu);
  pthread_mutex_unlock(&lt->mu);
  for (unsigned k = 0; k < lt->n_threads; k++)
    if (lt->parts[k].st != EMC_OK) {
      lt->failed = lt->parts[k].detail;
      return lt->parts[k].st;
    }
  return EMC_OK;
}

const char *emcb_lt_detail(const emcb_lt *lt) { return lt ? lt->failed : ""; }
