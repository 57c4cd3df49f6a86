/*
 * group.h: the training group's process-side state, shared by group.c (the protocol: join,
 * arrive, claim or wait, leave) and group_step.c (a rank's contribution; the claimer's merge,
 * checks, staging and application). Not installed.
 */
#ifndef EMC_GROUP_H
#define EMC_GROUP_H

#include "host_cache.h"
#include "store/seg.h"

#define STAGE_HDR 128u    /* the staging segment's header: the rank's optimizer, its step */

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


/* Room for `bytes` in this rank's staging segment (grown, remapped). */
EMC_INTERNAL emc_status emc__grp_stage_reserve(emc_group *g, size_t bytes);
/* Rank-local: sum the batch's gradients per distinct (table, id) in increasing position order
 * into records after the staging header; their bytes into *bytes. */
EMC_INTERNAL emc_status emc__grp_contribute(emc_group *g, const emc_cache *c, const uint64_t *ids,
                                            const uint64_t *offsets, const float *grads,
                                            size_t *bytes);
/* The claimer's step k, the store's lock held: merge, check, stage, commit, apply. */
EMC_INTERNAL emc_status emc__grp_run_step(emc_group *g, uint64_t k);

#endif /* EMC_GROUP_H */
