/*
 * seg_log.c: the update log of a shared store (issue 20): which rows were written, so that
 * every cache over the store, in any process, drops or refreshes its copies of them.
 *
 * The segment holds a ring of log_cap entries (the tables' rows, rounded up to a power of two
 * within 1024 .. 32768) (table, id, seq), a published counter
 * log_seq and, per table, last_seq (>= the seq of every entry of the table). A write (every
 * writer holds the store's lock) runs in three steps:
 *   1. announce  emc__log_ids / emc__log_batch / emc__log_table: the entries are written at
 *                log_pending + 1, ... (each slot by a seqlock of its own: seq 0, the fields,
 *                then seq), after the tables' last_seq; nothing is published yet;
 *   2. the rows change (store.c's versioned row writes);
 *   3. publish   emc__log_publish: log_seq = log_pending (release), before the lock is
 *                released and the call returns.
 * A call refused before it changed any row withdraws its announcement instead
 * (emc__log_mark before step 1, emc__log_withdraw after it): a cache that had read the log up
 * to log_seq keeps its copies. The ring slots the announcement wrote stay written and the
 * tables' last_seq raised, so a cache further behind than the ring then takes the wrapped
 * path for those tables (it drops them, as for any wrap: conservative, never stale).
 * So a write completed before a reader loads log_seq (acquire) is published to it, with its
 * rows. A writer that dies between 1 and 3 has announced everything it may have changed:
 * whoever takes its lock next publishes log_pending (shared.c, seg_recover). Announcing more
 * than was written only makes caches drop rows that were fine.
 *
 * A reader that last saw log_seq = S and now sees C reads the entries S + 1 .. C. An entry
 * it cannot read intact (its slot rewritten by a later write: C - S > the ring, or a running
 * writer's announcement lapped it) means the log wrapped past the reader: it then drops every
 * table whose last_seq > S (lib/sync_host.c). A table-wide write (emc_store_fill_uniform)
 * announces no entries: it skips log_pending past a whole ring, so every reader behind it
 * takes the wrapped path for that table.
 */
#include "seg.h"

uint64_t emc__log_seq(const emc_store *s) {
  return s->seg ? EMC_LD_ACQUIRE(&s->seg->log_seq) : 0;
}

uint64_t emc__log_cap(const emc_store *s) { return s->seg ? s->seg_log_cap : 0; }

uint64_t emc__log_table_seq(const emc_store *s, uint32_t table) {
  return s->seg ? EMC_LD_RELAXED(&s->seg_recs[table].last_seq) : 0;
}

/* The next entry number (from log_pending, never behind log_seq), and table's last_seq
 * raised to `upto` before any slot is rewritten: a reader that finds a rewritten slot then
 * sees the table's new last_seq (the slot's seq is loaded acquire). */
static uint64_t log_next(emc_store *s) {
  struct emc__seg_hdr *h = s->seg;
  uint64_t p = EMC_LD_RELAXED(&h->log_pending), q = EMC_LD_RELAXED(&h->log_seq);
  /* a segment written over: numbers near the end restart from 0 (the published sequence then
   * goes back, and every cache drops everything: lib/sync_host.c); a pending number behind,
   * or absurdly far ahead of, the published one is ignored */
  if (q >= (1ull << 62)) return 0;
  return p > q && p - q < (1ull << 40) ? p : q;
}

static void log_raise(emc_store *s, uint32_t table, uint64_t upto) {
  uint64_t *ls = &s->seg_recs[table].last_seq;
  if (EMC_LD_RELAXED(ls) < upto) EMC_ST_RELAXED(ls, upto);
}

static void log_put(emc_store *s, uint64_t q, uint32_t table, uint64_t id) {
  emc__seg_log_ent *e = &s->seg_log[q & (s->seg_log_cap - 1u)];
  EMC_ST_RELAXED(&e->seq, 0);
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&e->table, table);
  EMC_ST_RELAXED(&e->id, id);
  EMC_ST_RELEASE(&e->seq, q);
}

/* Entries q0 + 1 .. q0 + n of one table: only the last ring's worth is written (the earlier
 * ones would be overwritten at once; readers behind them take the wrapped path). */
static void log_run(emc_store *s, uint64_t q0, uint32_t table, const uint64_t *ids, uint64_t n) {
  uint64_t i = n > s->seg_log_cap ? n - s->seg_log_cap : 0;
  for (; i < n; i++) log_put(s, q0 + 1u + i, table, ids[i]);
}

void emc__log_ids(emc_store *s, uint32_t table, const uint64_t *ids, uint64_t n) {
  uint64_t q0;
  if (!s->seg || n == 0) return;
  q0 = log_next(s);
  log_raise(s, table, q0 + n);
  EMC_FENCE_RELEASE();
  log_run(s, q0, table, ids, n);
  EMC_ST_RELAXED(&s->seg->log_pending, q0 + n);
}

void emc__log_batch(emc_store *s, const uint64_t *ids, const uint64_t *offsets) {
  uint64_t q0, q;
  uint32_t t;
  if (!s->seg || offsets[s->n_tables] == 0) return;
  q0 = log_next(s);
  for (t = 0, q = q0; t < s->n_tables; t++) {
    q += offsets[t + 1] - offsets[t];
    if (offsets[t + 1] > offsets[t]) log_raise(s, t, q);
  }
  EMC_FENCE_RELEASE();
  for (t = 0, q = q0; t < s->n_tables; t++) {
    uint64_t n = offsets[t + 1] - offsets[t];
    log_run(s, q, t, ids + offsets[t], n);
    q += n;
  }
  EMC_ST_RELAXED(&s->seg->log_pending, q);
}

void emc__log_table(emc_store *s, uint32_t table) {
  uint64_t q;
  if (!s->seg) return;
  q = log_next(s) + s->seg_log_cap + 1u; /* every reader behind it wraps */
  log_raise(s, table, q);
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&s->seg->log_pending, q);
}

uint64_t emc__log_mark(const emc_store *s) {
  return s->seg ? EMC_LD_RELAXED(&s->seg->log_pending) : 0;
}

/* Only before any row of the announcement changed, the lock held since the mark: entries past
 * log_seq are unpublished, so no reader has seen them; a writer that dies after this has
 * announced nothing. The slots it wrote and the tables' raised last_seq stay: a reader the
 * log wraps past drops those tables (harmless, as announcing more than was written is). */
void emc__log_withdraw(emc_store *s, uint64_t mark) {
  if (s->seg) EMC_ST_RELAXED(&s->seg->log_pending, mark);
}

void emc__log_publish(emc_store *s) {
  struct emc__seg_hdr *h;
  uint64_t p;
  if (!s->seg) return;
  h = s->seg;
  p = EMC_LD_RELAXED(&h->log_pending);
  if (p != EMC_LD_RELAXED(&h->log_seq)) EMC_ST_RELEASE(&h->log_seq, p);
}

int emc__log_entry(const emc_store *s, uint64_t q, uint32_t *table, uint64_t *id) {
  const emc__seg_log_ent *e = &s->seg_log[q & (s->seg_log_cap - 1u)];
  uint32_t t;
  uint64_t i;
  if (EMC_LD_ACQUIRE(&e->seq) != q) return 0;
  t = EMC_LD_RELAXED(&e->table);
  i = EMC_LD_RELAXED(&e->id);
  EMC_FENCE_ACQUIRE();
  if (EMC_LD_RELAXED(&e->seq) != q || t >= s->n_tables) return 0;
  *table = t;
  *id = i;
  return 1;
}
