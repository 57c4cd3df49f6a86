/*
 * store_step.h: a batch written or stepped straight into a store's rows (lib/store_step.c),
 * for caches whose writes run on the host over a shared store (cuda/sync.cu) with the host
 * backend's arithmetic. Not installed.
 */
#ifndef EMC_STORE_STEP_H
#define EMC_STORE_STEP_H

#include "internal.h"

/* emc_insert's rows (packed by offsets, row_bytes each) into their store rows, the optimizer
 * state kept; hashed ids the store lacks get a row (capacity checked first: EMC_ECAPACITY,
 * nothing written). The store's lock held and the batch announced in its log by the caller;
 * ids and offsets checked (emc_insert's checks). */
EMC_INTERNAL emc_status emc__store_step_insert(emc_store *s, const uint64_t *ids,
                                               const uint64_t *offsets, const void *rows);
/* emc_apply_gradients' step on the store rows: per distinct (table, id), the gradients summed
 * in increasing position order (MEAN: divided by their count), then emc__opt_step on the row
 * and its state, as the host backend does; hashed ids the store lacks start from zeros
 * (capacity checked first). The same preconditions; *rows: the distinct rows stepped. */
EMC_INTERNAL emc_status emc__store_step_apply(emc_store *s, const uint64_t *ids,
                                              const uint64_t *offsets, const float *grads,
                                              const emc_optimizer *opt, uint64_t *rows);

/* The gradient merge of emc_apply_gradients, shared by the host backend (train_host.c) and
 * the store step above, so both give the same bits.
 * emc__group_positions: positions [0, n) of one table's segment grouped by distinct id, where
 * inv[p] - base is position p's distinct id (0 .. nu - 1): order[start[u] .. start[u + 1])
 * are the positions of id u in increasing order (a counting sort; start holds nu + 1 entries,
 * fill and order nu and n).
 * emc__merge_grads: acc = the gradients (rows of dim floats at gt) of positions
 * order[a .. b) summed in that order, and divided by b - a for EMC_MERGE_MEAN. */
EMC_INTERNAL void emc__group_positions(const uint32_t *inv, uint32_t base, uint64_t n, uint64_t nu,
                                       uint64_t *start, uint64_t *fill, uint64_t *order);
EMC_INTERNAL void emc__merge_grads(float *acc, const float *gt, const uint64_t *order, uint64_t a,
                                   uint64_t b, uint32_t dim, emc_grad_merge merge);

#endif /* EMC_STORE_STEP_H */
