/*
 * store_step.c: a batch written or stepped straight into a store's rows (store_step.h). The
 * arithmetic is the host backend's (lib/train_host.c, emc__host_apply): a CUDA cache over a
 * shared store runs its writes here, so that every process's copies of a row hold the same bits
 * whichever backend stepped it.
 */
#include <stdlib.h>
#include <string.h>

#include "store_step.h"

/* Hashed tables: the batch's new ids fit (before anything changes). */
static emc_status check_capacity(const emc_store *s, const uint64_t *ids, const uint64_t *offsets) {
  uint32_t t;
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t n = offsets[t + 1] - offsets[t], fresh;
    if (n == 0 || tb->kind != EMC_TABLE_HASHED) continue;
    fresh = emc__count_new_ids(tb, ids + offsets[t], (size_t)n);
    if (fresh == (uint64_t)-1)
      return EMC_FAIL(EMC_ENOMEM, "scratch set of %llu ids", (unsigned long long)n);
    EMC_TRY(emc__check_room(tb, t, fresh));
  }
  return EMC_OK;
}

void emc__group_positions(const uint32_t *inv, uint32_t base, uint64_t n, uint64_t nu,
                          uint64_t *start, uint64_t *fill, uint64_t *order) {
  uint64_t p, u;
  memset(start, 0, (nu + 1) * sizeof *start);
  for (p = 0; p < n; p++) start[inv[p] - base + 1]++;
  for (u = 0; u < nu; u++) start[u + 1] += start[u];
  memcpy(fill, start, nu * sizeof *fill);
  for (p = 0; p < n; p++) order[fill[inv[p] - base]++] = p;
}

void emc__merge_grads(float *acc, const float *gt, const uint64_t *order, uint64_t a, uint64_t b,
                      uint32_t dim, emc_grad_merge merge) {
  uint64_t q;
  memcpy(acc, gt + order[a] * dim, dim * sizeof *acc);
  for (q = a + 1; q < b; q++) emc__grad_add(acc, gt + order[q] * dim, dim);
  if (merge == EMC_MERGE_MEAN) emc__grad_mean(acc, (uint32_t)(b - a), dim);
}

static emc_status no_row(const emc__table *tb, uint32_t t, uint64_t id) {
  return EMC_FAIL(EMC_ECORRUPT, "table %u ('%s'): id %llu has no valid store row (the shared "
                  "segment's id map was written over); rows before it were written", t, tb->name,
                  (unsigned long long)id);
}

emc_status emc__store_step_insert(emc_store *s, const uint64_t *ids, const uint64_t *offsets,
                                  const void *rows) {
  const unsigned char *src = (const unsigned char *)rows;
  uint32_t t;
  uint64_t p;
  EMC_TRY(check_capacity(s, ids, offsets));
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    for (p = offsets[t]; p < offsets[t + 1]; p++, src += tb->row_bytes) { /* the last wins */
      int64_t row = tb->kind == EMC_TABLE_DENSE ? (int64_t)ids[p] : emc__store_find(tb, ids[p]);
      if (row < 0) { /* a new hashed id: its row holds the value before the id is published */
        if (emc__store_find_or_add(s, t, ids[p], src) < 0) return no_row(tb, t, ids[p]);
        continue;
      }
      emc__store_row_write(s, t, (uint64_t)row, src);
    }
  }
  return EMC_OK;
}

emc_status emc__store_step_apply(emc_store *s, const uint64_t *ids, const uint64_t *offsets,
                                 const float *grads, const emc_optimizer *opt, uint64_t *rows) {
  uint64_t total = offsets[s->n_tables], uoff[EMC_MAX_TABLES + 1], u, most_dim = 1,
           most_bytes = 16;
  uint64_t *uniq = NULL, *start = NULL, *order = NULL, *fill = NULL;
  uint32_t *inv = NULL, t;
  float *acc = NULL;
  unsigned char *buf = NULL;
  const float *gt = grads;
  emc_status st = EMC_OK;
  *rows = 0;
  if (total == 0) return EMC_OK;
  EMC_TRY(check_capacity(s, ids, offsets));
  for (t = 0; t < s->n_tables; t++) {
    if (s->tables[t].dim > most_dim) most_dim = s->tables[t].dim;
    if (s->tables[t].full_bytes > most_bytes) most_bytes = s->tables[t].full_bytes;
  }
  uniq = emc__mallocn(total, sizeof *uniq);
  inv = emc__mallocn(total, sizeof *inv);
  start = emc__mallocn(total + 1, sizeof *start);
  fill = emc__mallocn(total, sizeof *fill);
  order = emc__mallocn(total, sizeof *order);
  acc = emc__mallocn(most_dim, sizeof *acc);
  buf = emc__malloc(most_bytes);
  if (!uniq || !inv || !start || !fill || !order || !acc || !buf) {
    st = EMC_FAIL(EMC_ENOMEM, "gradient scratch for %llu ids", (unsigned long long)total);
    goto out;
  }
  if ((st = emc__dedup_batch(s->n_tables, ids, offsets, uniq, uoff, inv)) != EMC_OK) goto out;
  for (t = 0; t < s->n_tables && st == EMC_OK; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t o = offsets[t], n = offsets[t + 1] - o, u0 = uoff[t], nu = uoff[t + 1] - u0;
    uint32_t dim = tb->dim;
    if (n == 0) continue;
    emc__group_positions(inv + o, (uint32_t)u0, n, nu, start, fill, order);
    for (u = 0; u < nu; u++) {
      uint64_t id = uniq[u0 + u];
      int64_t row;
      float state = 0.0f;
      emc__merge_grads(acc, gt, order, start[u], start[u + 1], dim, opt->merge);
      row = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find_or_add(s, t, id, NULL);
      if (row < 0) {
        st = no_row(tb, t, id);
        break;
      }
      emc__store_full_read(s, t, (uint64_t)row, buf);
      if (tb->state != EMC_STATE_NONE) memcpy(&state, buf + tb->state_off, 4);
      emc__opt_step(buf, &state, acc, dim, tb->dtype, (uint32_t)opt->kind, opt->lr, opt->eps,
                    opt->initial_accumulator);
      if (tb->state != EMC_STATE_NONE) memcpy(buf + tb->state_off, &state, 4);
      emc__store_full_write(s, t, (uint64_t)row, buf);
      (*rows)++;
    }
    gt += n * dim;
  }
out:
  free(uniq);
  free(inv);
  free(start);
  free(fill);
  free(order);
  free(acc);
  free(buf);
  return st;
}
