/*
 * group_step.c: the computation of a training group's step (lib/group.c has the protocol):
 * a rank's contribution (its gradients summed per distinct row, in position order, into its
 * staging segment), and the claimer's work under the store's lock: merge the contributions in
 * rank order, check the step, stage the new rows, commit, apply (lib/store/stage.c).
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "group.h"

/* ----------------------------------------------------------------- staging segments */
/* Room for `bytes` in this rank's staging segment (grown, remapped). */
emc_status emc__grp_stage_reserve(emc_group *g, size_t bytes) {
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
emc_status emc__grp_contribute(emc_group *g, const emc_cache *c, const uint64_t *ids,
                               const uint64_t *offsets, const float *grads, size_t *bytes) {
  const emc_store *s = c->store;
  uint64_t total = offsets[s->n_tables], *uniq = NULL, uoff[EMC_MAX_TABLES + 1], p;
  uint32_t *inv = NULL, t;
  unsigned char *seen = NULL;
  size_t need = STAGE_HDR, at;
  const float *gt = grads;
  emc_status st = EMC_OK;
  *bytes = 0;
  if (total == 0) return emc__grp_stage_reserve(g, STAGE_HDR);
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
  if ((st = emc__grp_stage_reserve(g, need)) != EMC_OK) goto out;
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
emc_status emc__grp_run_step(emc_group *g, uint64_t k) {
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
  if ((st = emc__grp_stage_reserve(g, at)) != EMC_OK) goto out;
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
