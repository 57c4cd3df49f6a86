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
 *                  `claimed`, k - 1 -> k) and takes the store's lock;
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
 * of steps. Waiting ranks poll (yield, then sleeps up to 1 ms) and check every rank's process
 * every 10 ms: a rank that left, died or did not arrive within timeout_ms breaks the group
 * (broken = epoch): every step then returns EMC_ETIMEDOUT until all ranks have left and a new
 * group forms (a new epoch).
 * Host caches only (CUDA caches over a shared store are not built yet).
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

#include "host_cache.h"
#include "store/seg.h"

#define STAGE_HDR 128u    /* the staging segment's header: the rank's optimizer, its step */
#define LIVE_CHECK_MS 10u /* how often a waiting rank checks that the others' processes live */

typedef struct stage_hdr {
  emc_optimizer opt; /* the rank's optimizer at its last arrival */
  uint64_t step;
} stage_hdr;

struct emc_group {
  emc_store *s;
  emc__grp *G;
  uint32_t rank, n_ranks, timeout_ms, epoch;
  uint64_t step;          /* the last step this rank took part in */
  char stage[300];        /* its staging segment's name */
  int fd;
  unsigned char *map;     /* its staging segment, mapped */
  size_t map_bytes;
};


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

/* ----------------------------------------------------------------- staging segments */
/* Room for `bytes` in this rank's staging segment (grown, remapped). */
static emc_status stage_reserve(emc_group *g, size_t bytes) {
  size_t want = g->map_bytes ? g->map_bytes : 4096;
  unsigned char *m;
  int e;
  if (bytes <= g->map_bytes) return EMC_OK;
  while (want < bytes) {
    if (want > SIZE_MAX / 2) return EMC_FAIL(EMC_ENOMEM, "a staging segment of %zu bytes", bytes);
    want *= 2;
  }
  if ((e = ftruncate(g->fd, (off_t)want) != 0 ? errno : posix_fallocate(g->fd, 0, (off_t)want)) != 0)
    return EMC_FAIL(e == ENOSPC || e == ENOMEM ? EMC_ENOMEM : EMC_EIO,
                    "staging segment '%s' of %zu bytes: %s", g->stage, want, strerror(e));
  m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
  if (m == MAP_FAILED) {
    e = errno;
    return EMC_FAIL(e == ENOMEM ? EMC_ENOMEM : EMC_EIO, "mapping staging segment '%s': %s",
                    g->stage, strerror(e));
  }
  if (g->map) munmap(g->map, g->map_bytes);
  g->map = m;
  g->map_bytes = want;
  return EMC_OK;
}

/* ----------------------------------------------------------------- contribution */
/* Rank-local: sum the batch's gradients per distinct (table, id) in increasing position
 * order into records after the staging header; their bytes into *bytes. */
static emc_status contribute(emc_group *g, const emc_cache *c, const uint64_t *ids,
                             const uint64_t *offsets, const float *grads, size_t *bytes) {
  const emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], *uniq = NULL, uoff[EMC_MAX_TABLES + 1], p;
  uint32_t *inv = NULL, t;
  unsigned char *seen = NULL;
  size_t need = STAGE_HDR, at;
  const float *gt = grads;
  emc_status st = EMC_OK;
  *bytes = 0;
  if (total == 0) return stage_reserve(g, STAGE_HDR);
  uniq = emc__mallocn(total, sizeof *uniq);
  inv = emc__mallocn(total, sizeof *inv);
  seen = emc__calloc((size_t)total, 1);
  if (!uniq || !inv || !seen) {
    st = EMC_FAIL(EMC_ENOMEM, "gradient scratch for %llu ids", (unsigned long long)total);
    goto out;
  }
  if ((st = emc__dedup_batch(s->n_tables, ids, offsets, uniq, uoff, inv)) != EMC_OK) goto out;
  for (t = 0; t < s->n_tables; t++)
    need += (size_t)(uoff[t + 1] - uoff[t]) * emc__rec_bytes(4u * s->tables[t].dim);
  if ((st = stage_reserve(g, need)) != EMC_OK) goto out;
  for (t = 0, at = STAGE_HDR; t < s->n_tables; t++) {
    uint32_t dim = s->tables[t].dim;
    size_t rb = emc__rec_bytes(4u * dim), base = at - (size_t)uoff[t] * rb;
    for (p = offsets[t]; p < offsets[t + 1]; p++, gt += dim) {
      unsigned char *r = g->map + base + (size_t)inv[p] * rb;
      float *acc = (float *)(void *)(r + sizeof(emc__rec_hdr));
      if (!seen[inv[p]]) {
        emc__rec_hdr h = {t, 0, ids[p]};
        memcpy(r, &h, sizeof h);
        memcpy(acc, gt, dim * sizeof *acc);
        seen[inv[p]] = 1;
      } else {
        emc__grad_add(acc, gt, dim);
      }
    }
    at += (size_t)(uoff[t + 1] - uoff[t]) * rb;
  }
  *bytes = at - STAGE_HDR;
out:
  free(uniq);
  free(inv);
  free(seen);
  return st;
}

/* ----------------------------------------------------------------- the claimer's step */
typedef struct merged {
  uint64_t cap, n, *id, *slot_of; /* slot_of: cap slots, index + 1 of a merged row, 0 empty */
  uint32_t *table, *count;
  size_t *acc_at;                 /* float offset of each merged row's gradient in acc */
  float *acc;
  unsigned char *copy;            /* the ranks' contributions, copied out of shared memory */
} merged;

static void merged_free(merged *m) {
  free(m->id);
  free(m->slot_of);
  free(m->table);
  free(m->count);
  free(m->acc_at);
  free(m->acc);
  free(m->copy);
}

/* Merge every rank's records in increasing rank order (maps[r]: its staging segment). */
/* Merge every rank's records in increasing rank order (maps[r]: its staging segment). Each
 * contribution is copied out of shared memory once, so what is sized is what is parsed. */
static emc_status merge(emc_group *g, const unsigned char *const *maps, const size_t *lens,
                        merged *m) {
  const emc_store *s = g->s;
  size_t cb[EMC__GROUP_MAX_RANKS], total = 0, at;
  uint64_t recs = 0, floats = 0;
  uint32_t r;
  for (r = 0; r < g->n_ranks; r++) {
    uint64_t b = EMC_LD_RELAXED(&g->G->ranks[r].contrib_bytes);
    if (b > lens[r] || STAGE_HDR + b > lens[r] || (b & 7u))
      return EMC_FAIL(EMC_ECORRUPT, "rank %u's contribution (%llu bytes) runs past its staging "
                      "segment", r, (unsigned long long)b);
    cb[r] = (size_t)b;
    total += cb[r];
  }
  if (!(m->copy = emc__malloc(total + 8)))
    return EMC_FAIL(EMC_ENOMEM, "a copy of %zu bytes of contributions", total);
  for (r = 0, at = 0; r < g->n_ranks; r++) {
    memcpy(m->copy + at, maps[r] + STAGE_HDR, cb[r]);
    at += cb[r];
  }
  for (at = 0; at + sizeof(emc__rec_hdr) <= total;) { /* sizes: every record distinct */
    emc__rec_hdr h;
    memcpy(&h, m->copy + at, sizeof h);
    if (h.table >= s->n_tables)
      return EMC_FAIL(EMC_ECORRUPT, "a contribution names table %u of %u", h.table, s->n_tables);
    if (s->tables[h.table].kind == EMC_TABLE_DENSE && h.id >= s->tables[h.table].rows)
      return EMC_FAIL(EMC_ECORRUPT, "a contribution names id %llu of table %u (%llu rows)",
                      (unsigned long long)h.id, h.table,
                      (unsigned long long)s->tables[h.table].rows);
    recs++;
    floats += s->tables[h.table].dim;
    at += emc__rec_bytes(4u * s->tables[h.table].dim);
  }
  if (at != total) return EMC_FAIL(EMC_ECORRUPT, "a contribution ends inside a record");
  m->cap = emc__u64_pow2_at_least(2 * recs + 2, 16);
  m->slot_of = emc__mallocn(m->cap, sizeof *m->slot_of);
  m->id = emc__mallocn(recs + 1, sizeof *m->id);
  m->table = emc__mallocn(recs + 1, sizeof *m->table);
  m->count = emc__mallocn(recs + 1, sizeof *m->count);
  m->acc_at = emc__mallocn(recs + 1, sizeof *m->acc_at);
  m->acc = emc__mallocn(floats + 1, sizeof *m->acc);
  if (!m->slot_of || !m->id || !m->table || !m->count || !m->acc_at || !m->acc)
    return EMC_FAIL(EMC_ENOMEM, "merging %llu gradient rows", (unsigned long long)recs);
  memset(m->slot_of, 0, m->cap * sizeof *m->slot_of);
  floats = 0;
  for (at = 0; at < total;) { /* in rank order: the copies lie rank after rank */
    emc__rec_hdr h;
    uint32_t dim;
    uint64_t i;
    const float *gr;
    memcpy(&h, m->copy + at, sizeof h);
    dim = s->tables[h.table].dim;
    gr = (const float *)(const void *)(m->copy + at + sizeof h);
    for (i = emc__fmix64(h.id ^ ((uint64_t)h.table << 48)) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
      uint64_t v = m->slot_of[i];
      if (v == 0) { /* the first rank with this row */
        m->slot_of[i] = ++m->n;
        m->id[m->n - 1] = h.id;
        m->table[m->n - 1] = h.table;
        m->count[m->n - 1] = 1;
        m->acc_at[m->n - 1] = (size_t)floats;
        memcpy(m->acc + floats, gr, dim * sizeof(float));
        floats += dim;
        break;
      }
      if (m->id[v - 1] == h.id && m->table[v - 1] == h.table) {
        emc__grad_add(m->acc + m->acc_at[v - 1], gr, dim);
        m->count[v - 1]++;
        break;
      }
    }
    at += emc__rec_bytes(4u * dim);
  }
  return EMC_OK;
}

/* The claimer's step k, the store's lock held: merge, check, stage, commit, apply. */
static emc_status run_step(emc_group *g, uint64_t k) {
  emc_store *s = g->s;
  emc__grp *G = g->G;
  const unsigned char *maps[EMC__GROUP_MAX_RANKS];
  size_t lens[EMC__GROUP_MAX_RANKS], at, apply_off;
  merged m;
  emc_optimizer o;
  uint64_t fresh[EMC_MAX_TABLES] = {0}, i;
  unsigned char *buf = NULL;
  uint32_t r, t, widest = 16;
  emc_status st = EMC_OK;
  memset(&m, 0, sizeof m);
  memset(maps, 0, sizeof maps);
  /* under the lock: a rank that left (or a join that found one dead) since the claim makes
   * the step fail for everyone, who all see it through done */
  if (EMC_LD_RELAXED(&G->broken) == g->epoch)
    return EMC_FAIL(EMC_ETIMEDOUT, "a rank left or died before the step was applied (nothing "
                    "changed); the group is broken: every rank must leave before it forms again");
  for (r = 0; r < g->n_ranks; r++) { /* a rank that refused its own batch refuses the step */
    uint32_t why = EMC_LD_RELAXED(&G->ranks[r].refused);
    if (why > (uint32_t)EMC_ETIMEDOUT) why = (uint32_t)EMC_ECORRUPT;
    if (why != EMC_OK)
      return EMC_FAIL((emc_status)why, "rank %u refused its batch (%s); nothing changed", r,
                      emc_status_name((emc_status)why));
  }
  for (r = 0; r < g->n_ranks; r++) {
    if (r == g->rank) { /* its own: the mapping it has */
      maps[r] = g->map;
      lens[r] = g->map_bytes;
    } else if ((st = emc__stage_peer(s, r, STAGE_HDR, &maps[r], &lens[r])) != EMC_OK) {
      goto out;
    }
  }
  memcpy(&o, &((const stage_hdr *)(const void *)maps[0])->opt, sizeof o);
  for (r = 1; r < g->n_ranks; r++) {
    const emc_optimizer *q = &((const stage_hdr *)(const void *)maps[r])->opt;
    if (q->kind != o.kind || q->merge != o.merge || memcmp(&q->lr, &o.lr, 4) != 0 ||
        memcmp(&q->eps, &o.eps, 4) != 0 || memcmp(&q->initial_accumulator, &o.initial_accumulator, 4) != 0) {
      st = EMC_FAIL(EMC_EINVAL, "ranks 0 and %u passed different optimizers; nothing changed", r);
      goto out;
    }
  }
  if ((st = merge(g, maps, lens, &m)) != EMC_OK) goto out;
  /* checks before anything is staged: Adagrad state, hashed capacity */
  for (i = 0; i < m.n; i++) {
    const emc__table *tb = &s->tables[m.table[i]];
    if (o.kind == EMC_OPT_ROWWISE_ADAGRAD && tb->state != EMC_STATE_ADAGRAD) {
      st = EMC_FAIL(EMC_EINVAL, "row-wise Adagrad needs an accumulator per row: table %u ('%s') "
                    "has none; nothing changed", m.table[i], tb->name);
      goto out;
    }
    if (tb->kind == EMC_TABLE_HASHED && emc__store_find(tb, m.id[i]) < 0) fresh[m.table[i]]++;
    if (tb->full_bytes > widest) widest = tb->full_bytes;
  }
  for (t = 0; t < s->n_tables; t++)
    if (s->tables[t].kind == EMC_TABLE_HASHED &&
        (st = emc__check_room(&s->tables[t], t, fresh[t])) != EMC_OK)
      goto out;
  /* stage the new rows after this rank's contribution */
  apply_off = STAGE_HDR + (size_t)EMC_LD_RELAXED(&G->ranks[g->rank].contrib_bytes);
  apply_off = (apply_off + 63u) & ~(size_t)63u;
  for (i = 0, at = apply_off; i < m.n; i++) at += emc__rec_bytes(s->tables[m.table[i]].full_bytes);
  if (!(buf = emc__malloc(widest))) {
    st = EMC_FAIL(EMC_ENOMEM, "a row buffer");
    goto out;
  }
  if (maps[g->rank] == g->map) maps[g->rank] = NULL; /* stage_reserve may move it */
  if ((st = stage_reserve(g, at)) != EMC_OK) goto out;
  for (i = 0, at = apply_off; i < m.n; i++) {
    const emc__table *tb = &s->tables[m.table[i]];
    int64_t row = tb->kind == EMC_TABLE_DENSE ? (int64_t)m.id[i] : emc__store_find(tb, m.id[i]);
    float state = 0.0f, *gv = m.acc + m.acc_at[i];
    emc__rec_hdr h = {m.table[i], 0, m.id[i]};
    if (row >= 0) emc__store_full_read(s, m.table[i], (uint64_t)row, buf);
    else memset(buf, 0, tb->full_bytes); /* a new hashed id starts from zeros */
    if (o.merge == EMC_MERGE_MEAN) emc__grad_mean(gv, m.count[i], tb->dim);
    if (tb->state != EMC_STATE_NONE) memcpy(&state, buf + tb->state_off, 4);
    emc__opt_step(buf, &state, gv, tb->dim, tb->dtype, (uint32_t)o.kind, o.lr, o.eps,
                  o.initial_accumulator);
    if (tb->state != EMC_STATE_NONE) memcpy(buf + tb->state_off, &state, 4);
    memcpy(g->map + at, &h, sizeof h);
    memcpy(g->map + at + sizeof h, buf, tb->full_bytes);
    at += emc__rec_bytes(tb->full_bytes);
  }
  /* the commit point: from here the step happens, whoever finishes it */
  EMC_ST_RELAXED(&G->apply_rank, g->rank);
  EMC_ST_RELAXED(&G->apply_off, (uint64_t)apply_off);
  EMC_ST_RELAXED(&G->apply_rows, m.n);
  EMC_ST_RELAXED(&G->apply_bytes, (uint64_t)(at - apply_off));
  EMC_ST_RELEASE(&G->apply_step, k);
  EMC__TP(EMC__TP_WRITE, "group: step committed");
  st = emc__stage_apply(s, g->map + apply_off, at - apply_off, m.n);
out:
  for (r = 0; r < g->n_ranks; r++)
    if (maps[r] && maps[r] != g->map) munmap((void *)maps[r], lens[r]);
  merged_free(&m);
  free(buf);
  return st;
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
          st = run_step(g, k);
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
  (void)stream; /* host caches only */
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
  else local = emc__check_apply(c, ids, offsets, grads, opt);
  if (local == EMC_OK) local = contribute(g, c, ids, offsets, (const float *)grads, &bytes);
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
  if (c && c->store == g->s && c->host) emc__host_sync(c); /* its copies of the new rows go */
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
  } else if ((st = stage_reserve(g, STAGE_HDR)) == EMC_OK) {
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
