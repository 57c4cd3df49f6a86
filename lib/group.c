/*
 * group.c: the training group of a shared store (issue 20; seed document D): N trainer
 * processes, each with its own cache over one shared store, apply the sparse update of all
 * ranks once per step.
 *
 * State: the group's block in the store's segment (emc__grp, lib/store/seg.h) and one staging
 * segment per rank, "<store name>.g<rank>" (a header, then records), which only its rank
 * writes. A step k (emc_group_apply_gradients):
 *   1. contribute  each rank sums its gradients per distinct (table, id) in increasing
 *                  position order (g_r) into records of its staging segment, stores its
 *                  optimizer beside them, then arrived = k (release); a rank whose own batch
 *                  is bad arrives too, with the status, so the step is refused for everyone;
 *   2. claim       the first rank that sees every rank arrived claims the step (CAS on
 *                  the claim word: the step and its claimer) and takes the store's lock;
 *   3. stage       the claimer merges the records in increasing rank order (G = sum of g_r;
 *                  EMC_MERGE_MEAN: divided by the number of ranks in which the row occurred),
 *                  checks the step (optimizers equal, Adagrad state, hashed capacity), steps
 *                  each row from its store value and writes the new rows (row and state) to its
 *                  staging segment; then apply_step = k (release): the commit point;
 *   4. apply       the staged rows are written to the store (announced in the update log
 *                  first, published after: every cache drops its copies), done = k (release);
 *   5. every rank sees done >= k, takes done_status, and applies the log to its cache.
 * Nothing changes the store before the commit point, and what is committed is whole new rows
 * (not deltas): writing them again is harmless. So a claimer that dies before it leaves the
 * store as it was (the step is lost: the others return EMC_ETIMEDOUT), and one that dies after
 * it leaves the step to whoever next sees it dead (a waiting rank) or next joins: they apply
 * the staged rows again under the lock. The store is always the state after a whole number
 * of steps. Waiting ranks poll (yield, then sleeps of about 1 ms at most) and check every rank's process
 * every 10 ms: a rank that left, died or did not arrive within timeout_ms breaks the group
 * (broken = epoch): every step then returns EMC_ETIMEDOUT until all ranks have left and a new
 * group forms (a new epoch).
 * A CUDA cache's batch is copied to the host first (emc__cache_grad_batch). Steps 1, 3 and 4
 * are computed in group_step.c; this file is the protocol.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "group.h"

#define LIVE_CHECK_MS 10u /* how often a waiting rank checks that the others' processes live */

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A process's state letter and start time (field 22 of /proc/<pid>/stat, clock ticks since
 * boot): 0, or -1 when it has no entry (gone). */
static int proc_stat(uint32_t pid, char *state, uint64_t *start) {
  char path[64], buf[1024];
  const char *p;
  ssize_t n;
  int fd, f;
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -1;
  n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  if (!(p = strrchr(buf, ')')) || p[1] != ' ') return -1; /* "pid (comm) S f4 ... f22 ..." */
  *state = p[2];
  for (p += 2, f = 3; f < 22 && (p = strchr(p, ' ')); f++) p++;
  *start = p ? strtoull(p, NULL, 10) : 0;
  return 0;
}

/* Is the rank process (pid, start) gone: no such process, a zombie (dead, not yet reaped: it
 * holds nothing), or another process under a reused pid? Ranks share one PID namespace. */
static int rank_dead(uint32_t pid, uint64_t start) {
  char state;
  uint64_t st;
  if (pid == 0) return 1;
  if (proc_stat(pid, &state, &st) != 0) /* no /proc: kill() says whether the pid exists */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
  return state == 'Z' || state == 'X' || (start != 0 && st != start);
}

static uint64_t self_start(void) {
  char state;
  uint64_t st = 0;
  return proc_stat((uint32_t)getpid(), &state, &st) == 0 ? st : 0;
}

/* ----------------------------------------------------------------- the calls */
static void sleep_us(unsigned us) {
  struct timespec ts = {0, (long)us * 1000};
  nanosleep(&ts, NULL);
}


/* The claim word (emc__grp.claimed): step << 9 | tag. Claiming a step and breaking the group
 * at it are one compare-and-swap on it, so every rank agrees on which happened. */
#define TAG_BITS 9u
#define TAG_BROKEN 0x1ffu
static uint64_t claim_word(uint64_t k, uint32_t tag) { return k << TAG_BITS | tag; }

/* Break the group at step k, unless a rank claimed it first (then 0: wait for it). */
static int break_at(emc_group *g, uint64_t k, uint64_t seen) {
  if (seen >> TAG_BITS >= k) return 0;
  if (!__atomic_compare_exchange_n(&g->G->claimed, &seen, claim_word(k, TAG_BROKEN), 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return (seen & TAG_BROKEN) == TAG_BROKEN;
  EMC_ST_RELAXED(&g->G->broken, g->epoch);
  return 1;
}

/* Wait for step k to finish (or claim and run it); its status. */
static emc_status wait_step(emc_group *g, uint64_t k) {
  emc__grp *G = g->G;
  uint64_t start = now_ms(), last_check = start;
  unsigned spins = 0, nap = 20;
  for (;;) {
    uint64_t now, w;
    uint32_t tag;
    int check;
    if (EMC_LD_ACQUIRE(&G->done) >= k) {
      emc_status st = (emc_status)EMC_LD_RELAXED(&G->done_status);
      if (st == EMC_OK) return EMC_OK;
      return EMC_FAIL(st, "%.*s", (int)sizeof G->detail, G->detail);
    }
    now = spins < 64 ? start : now_ms();
    check = now - last_check >= LIVE_CHECK_MS;
    if (check) last_check = now;
    w = EMC_LD_ACQUIRE(&G->claimed);
    tag = (uint32_t)(w & TAG_BROKEN);
    if (tag == TAG_BROKEN)
      return EMC_FAIL(EMC_ETIMEDOUT, "the group is broken (a rank left, died or was late): "
                      "every rank must leave before it forms again");
    if (w >> TAG_BITS >= k) { /* claimed: wait while the claimer lives */
      const emc__grp_rank *q = &G->ranks[(tag - 1u) % EMC__GROUP_MAX_RANKS];
      if (check && rank_dead(EMC_LD_RELAXED(&q->pid), EMC_LD_RELAXED(&q->start))) {
        emc_status st = emc__store_lock(g->s); /* repairs what it left, finishes a commit */
        if (st != EMC_OK) return st;
        emc__grp_complete_pending(g->s);
        if (EMC_LD_RELAXED(&G->done) < k) { /* it died before its commit: the step is lost */
          EMC_ST_RELAXED(&G->claimed, claim_word(k, TAG_BROKEN));
          EMC_ST_RELAXED(&G->broken, g->epoch);
          emc__store_unlock(g->s);
          return EMC_FAIL(EMC_ETIMEDOUT, "rank %u claimed the step and died before staging it "
                          "(nothing changed); the group is broken: every rank must leave "
                          "before it forms again", tag - 1u);
        }
        emc__store_unlock(g->s);
        continue;
      }
    } else { /* arrivals */
      uint32_t r, all = 1, dead = EMC__GROUP_MAX_RANKS;
      for (r = 0; r < g->n_ranks; r++) {
        const emc__grp_rank *q = &G->ranks[r];
        uint32_t pid = EMC_LD_ACQUIRE(&q->pid);
        /* a rank not joined yet is waited for (one that left broke the group) */
        if (pid != 0 && EMC_LD_RELAXED(&q->epoch) == g->epoch && EMC_LD_ACQUIRE(&q->arrived) >= k)
          continue;
        all = 0;
        if (check && pid != 0 && rank_dead(pid, EMC_LD_RELAXED(&q->start))) dead = r;
      }
      if (all && EMC_LD_RELAXED(&G->broken) != g->epoch) {
        if (__atomic_compare_exchange_n(&G->claimed, &w, claim_word(k, g->rank + 1u), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
          emc_status st = emc__store_lock(g->s);
          if (st != EMC_OK) {
            emc__grp_finish(G, k, st);
            return st;
          }
          emc__grp_complete_pending(g->s); /* an older step a dead applier committed */
          st = emc__grp_run_step(g, k);
          emc__grp_finish(G, k, st);
          emc__store_unlock(g->s);
        }
        continue; /* done >= k now, or another rank claimed or broke the step */
      }
      if (dead < EMC__GROUP_MAX_RANKS || EMC_LD_RELAXED(&G->broken) == g->epoch ||
          now - start > g->timeout_ms) {
        uint32_t late = 0;
        while (late + 1 < g->n_ranks && EMC_LD_ACQUIRE(&G->ranks[late].arrived) >= k) late++;
        if (break_at(g, k, w))
          return EMC_FAIL(EMC_ETIMEDOUT, "rank %u %s; the group is broken: every rank must leave "
                          "before it forms again", dead < EMC__GROUP_MAX_RANKS ? dead : late,
                          dead < EMC__GROUP_MAX_RANKS ? "died"
                          : EMC_LD_RELAXED(&G->broken) == g->epoch ? "left, died or was late"
                                                                    : "did not arrive in time");
        continue; /* a rank claimed the step meanwhile: wait for it */
      }
    }
    if (++spins < 64) {
      sched_yield();
    } else {
      sleep_us(nap);
      if (nap < 1000) nap *= 2;
    }
  }
}

emc_status emc_group_apply_gradients(emc_group *g, emc_cache *c, const uint64_t *ids,
                                     const uint64_t *offsets, const void *grads,
                                     const emc_optimizer *opt, void *stream) {
  emc__grp *G;
  emc__grp_rank *me;
  uint64_t k;
  size_t bytes = 0;
  emc_status local, st;
  char detail[256] = "";
  uint64_t *hids = NULL, *hoffs = NULL;
  void *hgrads = NULL;
  if (!g) return EMC_FAIL(EMC_EINVAL, "group is NULL");
  G = g->G;
  me = &G->ranks[g->rank];
  if (EMC_LD_RELAXED(&G->broken) == g->epoch)
    return EMC_FAIL(EMC_ETIMEDOUT, "the group is broken (a rank left, died or was late): every "
                    "rank must leave before it forms again");
  k = g->step + 1;
  /* this rank's batch: a bad one still arrives (refused), so that every rank returns */
  if (!c) local = EMC_FAIL(EMC_EINVAL, "cache is NULL");
  else if (c->store != g->s)
    local = EMC_FAIL(EMC_EINVAL, "the cache serves another store (or another mapping of it) "
                     "than the one the group was joined on");
  else local = emc__cache_grad_batch(c, ids, offsets, grads, stream, &hids, &hoffs, &hgrads);
  if (local == EMC_OK && hoffs) { /* a CUDA cache: its batch, copied to the host */
    ids = hids;
    offsets = hoffs;
    grads = hgrads;
  }
  if (local == EMC_OK) local = emc__check_apply(c, ids, offsets, grads, opt);
  if (local == EMC_OK) local = emc__grp_contribute(g, c, ids, offsets, (const float *)grads, &bytes);
  free(hids);
  free(hoffs);
  free(hgrads);
  if (local != EMC_OK) snprintf(detail, sizeof detail, "%s", emc_last_error_detail());
  { /* the header (mapped since join: STAGE_HDR bytes at least) */
    stage_hdr *h = (stage_hdr *)(void *)g->map;
    if (local == EMC_OK) memcpy(&h->opt, opt, sizeof *opt);
    h->step = k;
  }
  EMC_ST_RELAXED(&me->contrib_bytes, (uint64_t)bytes);
  EMC_ST_RELAXED(&me->refused, (uint32_t)local);
  EMC_ST_RELEASE(&me->arrived, k);
  st = wait_step(g, k);
  g->step = k;
  if (c && c->store == g->s) { /* its copies of the new rows go (or are refreshed) */
    emc_status s2 = emc__cache_sync(c);
    if (st == EMC_OK && local == EMC_OK) st = s2;
  }
  if (local != EMC_OK) return EMC_FAIL(local, "%s", detail); /* its own reason */
  return st;
}

emc_status emc_group_join(emc_store *s, uint32_t rank, uint32_t n_ranks, uint32_t timeout_ms,
                          emc_group **out) {
  emc_group *g;
  emc__grp *G;
  emc__grp_rank *me;
  uint32_t r;
  int e;
  emc_status st = EMC_OK;
  if (!s || !out) return EMC_FAIL(EMC_EINVAL, "store or out is NULL");
  if (!s->seg) return EMC_FAIL(EMC_EINVAL, "a training group needs a shared store");
  if (n_ranks == 0 || n_ranks > EMC__GROUP_MAX_RANKS)
    return EMC_FAIL(EMC_EINVAL, "n_ranks = %u, must be 1..%u", n_ranks, EMC__GROUP_MAX_RANKS);
  if (rank >= n_ranks) return EMC_FAIL(EMC_EINVAL, "rank %u >= n_ranks %u", rank, n_ranks);
  if (timeout_ms == 0) return EMC_FAIL(EMC_EINVAL, "timeout_ms is 0");
  if (strlen(s->seg_name) + 5 > 255)
    return EMC_FAIL(EMC_EINVAL, "the store's name is too long for the group's staging names "
                    "(\"<name>.g<rank>\" must fit 255 bytes)");
  if (!(g = emc__calloc(1, sizeof *g))) return EMC_FAIL(EMC_ENOMEM, "group");
  g->s = s;
  g->G = G = s->seg_grp;
  g->rank = rank;
  g->n_ranks = n_ranks;
  g->timeout_ms = timeout_ms;
  g->fd = -1;
  emc__stage_name(s, rank, g->stage, sizeof g->stage);
  if ((st = emc__store_lock(s)) != EMC_OK) {
    free(g);
    return st;
  }
  emc__grp_complete_pending(s); /* a step its dead applier committed */
  for (r = 0; r < EMC__GROUP_MAX_RANKS; r++) { /* ranks whose process is gone */
    uint32_t pid = EMC_LD_RELAXED(&G->ranks[r].pid);
    if (pid != 0 && rank_dead(pid, EMC_LD_RELAXED(&G->ranks[r].start))) {
      EMC_ST_RELAXED(&G->ranks[r].pid, 0u);
      if (G->joined > 0) G->joined--;
      EMC_ST_RELAXED(&G->broken, G->epoch);
    }
  }
  if (G->joined == 0) G->n_ranks = 0;
  me = &G->ranks[rank];
  if (G->n_ranks != 0 && G->n_ranks != n_ranks) {
    st = EMC_FAIL(EMC_EINVAL, "the group has %u ranks, not %u", G->n_ranks, n_ranks);
  } else if (G->n_ranks != 0 && EMC_LD_RELAXED(&G->broken) == G->epoch) {
    st = EMC_FAIL(EMC_ETIMEDOUT, "the group is broken (a rank left, died or was late): every "
                  "rank must leave before it forms again");
  } else if (EMC_LD_RELAXED(&me->pid) != 0) {
    st = EMC_FAIL(EMC_EINVAL, "rank %u has already joined (process %u)", rank,
                  EMC_LD_RELAXED(&me->pid));
  } else if ((g->fd = shm_open(g->stage, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
    e = errno;
    st = EMC_FAIL(e == ENOMEM ? EMC_ENOMEM : EMC_EIO, "staging segment '%s': %s", g->stage,
                  strerror(e));
  } else if ((st = emc__grp_stage_reserve(g, STAGE_HDR)) == EMC_OK) {
    if (G->n_ranks == 0) { /* a new group */
      G->n_ranks = n_ranks;
      G->epoch++;
      EMC_ST_RELAXED(&G->claimed, claim_word(EMC_LD_RELAXED(&G->done), 0));
    }
    g->epoch = G->epoch;
    g->step = EMC_LD_RELAXED(&G->done);
    EMC_ST_RELAXED(&me->arrived, g->step);
    EMC_ST_RELAXED(&me->contrib_bytes, 0u);
    EMC_ST_RELAXED(&me->refused, 0u);
    EMC_ST_RELAXED(&me->epoch, g->epoch);
    EMC_ST_RELAXED(&me->start, self_start());
    EMC_ST_RELEASE(&me->pid, (uint32_t)getpid());
    G->joined++;
  }
  if (st != EMC_OK && g->fd >= 0) shm_unlink(g->stage); /* its own, made above (under the lock) */
  emc__store_unlock(s);
  if (st != EMC_OK) {
    if (g->map) munmap(g->map, g->map_bytes);
    if (g->fd >= 0) close(g->fd);
    free(g);
    return st;
  }
  pthread_mutex_lock(&s->lock);
  s->caches++; /* the store is not destroyed under a group */
  pthread_mutex_unlock(&s->lock);
  *out = g;
  return EMC_OK;
}

emc_status emc_group_leave(emc_group *g) {
  emc__grp *G;
  emc_status st;
  if (!g) return EMC_OK;
  G = g->G;
  st = emc__store_lock(g->s);
  if (st == EMC_OK) {
    emc__grp_rank *me = &G->ranks[g->rank];
    emc__grp_complete_pending(g->s); /* before its staged rows can go */
    /* its slot, and so its staging name, only while this process holds them (a forked
     * child's copy of the handle, or a slot cleared and joined again, are not its) */
    if (EMC_LD_RELAXED(&me->pid) == (uint32_t)getpid() && EMC_LD_RELAXED(&me->epoch) == g->epoch) {
      EMC_ST_RELAXED(&me->pid, 0u);
      EMC_ST_RELAXED(&me->epoch, 0u);
      if (G->joined > 0) G->joined--;
      if (G->joined == 0) G->n_ranks = 0;
      else EMC_ST_RELAXED(&G->broken, g->epoch); /* the others cannot step without it */
      shm_unlink(g->stage);
    }
    emc__store_unlock(g->s);
  }
  if (g->map) munmap(g->map, g->map_bytes);
  if (g->fd >= 0) close(g->fd);
  pthread_mutex_lock(&g->s->lock);
  g->s->caches--;
  pthread_mutex_unlock(&g->s->lock);
  free(g);
  return st;
}
