/*
 * lookup_threads.h: T caller threads looking one batch up in one cache together (emc-bench
 * --threads). Public API only (embcache.h).
 *
 * The batch (grouped by table: see embcache.h, "Batches") is split by position into T
 * contiguous parts, part k holding positions [n*k/T, n*(k+1)/T) of n. Each part is a valid
 * batch of its own: offsets of n_tables + 1 entries (the whole batch's clamped to the part and
 * shifted to 0), ids from the part's first position, and out (and where) from where the
 * whole-batch lookup writes that position's row, so every row lands where one emc_lookup_ex
 * of the whole batch puts it. Thread k looks part k up with emc_lookup_ex (emc_lookup
 * without where); an empty part makes no call.
 *
 * The pool starts T - 1 threads once; the thread calling emcb_lt_lookup is the T-th and
 * looks up part 0. Per batch the caller releases the workers (a generation counter under a
 * mutex, a condition variable) and waits until the last of them is done, so a batch's
 * lookups all run between the call and its return, and the workers sleep between batches.
 *
 * Functions return 0 or an emc_status (EMC_EINVAL for bad arguments, EMC_ENOMEM, the status
 * of a failed emc_* call; a failed thread start is EMC_ENOMEM). One caller at a time.
 */
#ifndef EMC_BENCH_LOOKUP_THREADS_H
#define EMC_BENCH_LOOKUP_THREADS_H

#include <stddef.h>
#include <stdint.h>

#include "embcache.h"

#define EMCB_LT_MAX_THREADS 64u

typedef struct emcb_lt emcb_lt;

/* Start a pool of n_threads callers (1 .. EMCB_LT_MAX_THREADS; the calling thread is one). */
int emcb_lt_create(unsigned n_threads, emcb_lt **out);
/* Stop and join the threads, free the pool. NULL is fine. */
void emcb_lt_destroy(emcb_lt *lt);
/* Split the batch layout `offsets` (n_tables + 1 host entries) of store s's batches into the
 * parts above; every batch looked up until the next plan has this layout. Each part's byte
 * offset in `out` is emc_batch_bytes of the batch's positions before it. */
int emcb_lt_plan(emcb_lt *lt, const emc_store *s, const uint64_t *offsets, uint32_t n_tables);
/* Look one batch up in c: ids, out (emc_batch_bytes of the planned layout) and where (NULL,
 * or one byte per position) as for emc_lookup_ex of the whole batch, host memory, stream
 * NULL. Returns EMC_OK or the status of the lowest failing part; that part's detail is then
 * in emcb_lt_detail. */
emc_status emcb_lt_lookup(emcb_lt *lt, emc_cache *c, const uint64_t *ids, void *out,
                          uint8_t *where);
/* The emc_last_error_detail() of the part that failed the last emcb_lt_lookup ("" if none). */
const char *emcb_lt_detail(const emcb_lt *lt);

#endif /* EMC_BENCH_LOOKUP_THREADS_H */
