/*
 * stage.c: a training step staged in shared memory (lib/group.c stages it; whoever holds the
 * store's lock next after its applier died applies it).
 *
 * A group's applier writes the step's new rows (whole rows with their optimizer state, not
 * deltas) into its staging segment "<store name>.g<rank>", then records where in the group's
 * block (apply_step, apply_rank, apply_off, apply_rows, apply_bytes: the commit point), then
 * writes the rows to the store and publishes done = apply_step. Writing the staged rows again
 * is harmless, so a step committed by an applier that died is completed here, under the lock,
 * by the next process to take it (shared.c, seg_recover: before any other writer can change a
 * row the step had not written yet), by a waiting rank, or by the next emc_group_join.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg.h"

void emc__stage_name(const emc_store *s, uint32_t rank, char *buf, size_t cap) {
  snprintf(buf, cap, "%s.g%u", s->seg_name, rank);
}

emc_status emc__stage_peer(const emc_store *s, uint32_t r, size_t need, const unsigned char **p,
                           size_t *bytes) {
  char name[300];
  struct stat sb;
  void *m;
  int fd, e;
  emc__stage_name(s, r, name, sizeof name);
  if ((fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0)) < 0) {
    e = errno;
    return EMC_FAIL(EMC_ECORRUPT, "rank %u's staging segment '%s': %s", r, name, strerror(e));
  }
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < need || sb.st_size == 0) {
    close(fd);
    return EMC_FAIL(EMC_ECORRUPT, "rank %u's staging segment '%s' is shorter than its records",
                    r, name);
  }
  m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  e = errno;
  close(fd);
  if (m == MAP_FAILED)
    return EMC_FAIL(e == ENOMEM ? EMC_ENOMEM : EMC_EIO, "mapping '%s': %s", name, strerror(e));
  *p = m;
  *bytes = (size_t)sb.st_size;
  return EMC_OK;
}

emc_status emc__stage_apply(emc_store *s, const unsigned char *p, size_t bytes, uint64_t n) {
  size_t at;
  uint64_t i;
  emc_status st = EMC_OK;
  for (i = 0, at = 0; i < n && at + sizeof(emc__rec_hdr) <= bytes; i++) { /* announced first */
    emc__rec_hdr h;
    memcpy(&h, p + at, sizeof h);
    if (h.table >= s->n_tables) break;
    emc__log_ids(s, h.table, &h.id, 1);
    at += emc__rec_bytes(s->tables[h.table].full_bytes);
  }
  for (i = 0, at = 0; i < n; i++) {
    emc__rec_hdr h;
    const emc__table *t;
    int64_t row;
    if (at + sizeof(emc__rec_hdr) > bytes) break;
    memcpy(&h, p + at, sizeof h);
    if (h.table >= s->n_tables || at + emc__rec_bytes(s->tables[h.table].full_bytes) > bytes) break;
    t = &s->tables[h.table];
    row = t->kind == EMC_TABLE_DENSE ? (h.id < t->rows ? (int64_t)h.id : -1)
                                     : emc__store_find_or_add(s, h.table, h.id, NULL);
    if (row >= 0) {
      emc__store_full_write(s, h.table, (uint64_t)row, p + at + sizeof h);
      EMC__TP(EMC__TP_WRITE, "group: row applied");
    } else {
      st = EMC_FAIL(EMC_ECORRUPT, "a staged row of table %u has no store row (the segment was "
                    "written over)", h.table);
    }
    at += emc__rec_bytes(t->full_bytes);
  }
  if (i < n && st == EMC_OK)
    st = EMC_FAIL(EMC_ECORRUPT, "staged rows end early (the segment was written over)");
  emc__log_publish(s);
  return st;
}

void emc__grp_finish(emc__grp *G, uint64_t k, emc_status st) {
  if (st != EMC_OK) snprintf(G->detail, sizeof G->detail, "%s", emc_last_error_detail());
  EMC_ST_RELAXED(&G->done_status, (uint32_t)st);
  EMC_ST_RELEASE(&G->done, k);
}

void emc__grp_complete_pending(emc_store *s) {
  emc__grp *G = s->seg_grp;
  uint64_t k = EMC_LD_ACQUIRE(&G->apply_step), off, rows, bytes;
  const unsigned char *p;
  size_t mb;
  emc_status st;
  if (!G || k <= EMC_LD_RELAXED(&G->done)) return;
  off = EMC_LD_RELAXED(&G->apply_off);
  rows = EMC_LD_RELAXED(&G->apply_rows);
  bytes = EMC_LD_RELAXED(&G->apply_bytes);
  if (off > SIZE_MAX / 2 || bytes > SIZE_MAX / 2) {
    emc__grp_finish(G, k, EMC_FAIL(EMC_ECORRUPT, "the staged step's record is written over"));
    return;
  }
  st = emc__stage_peer(s, EMC_LD_RELAXED(&G->apply_rank) % EMC__GROUP_MAX_RANKS,
                       (size_t)(off + bytes), &p, &mb);
  if (st == EMC_OK) {
    st = emc__stage_apply(s, p + off, (size_t)bytes, rows);
    munmap((void *)p, mb);
  }
  emc__grp_finish(G, k, st);
}
