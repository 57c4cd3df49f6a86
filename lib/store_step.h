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

#endif /* EMC_STORE_STEP_H */
