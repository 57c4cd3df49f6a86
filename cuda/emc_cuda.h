/* emc_cuda.h: the C-callable interface of cuda/ (plain C; no CUDA headers needed). */
#ifndef EMC_CUDA_H
#define EMC_CUDA_H
#include <stddef.h>
#include <stdint.h>

#include "embcache.h"
#include "emc_item.h"

/* Number of CUDA devices, or -1 when the runtime answers with an error (the text in err). */
int emc__cuda_device_count(char *err, size_t err_len);

/* The CUDA backend (cuda/cache_cuda.cu and the stage files dev.cuh lists); c->cfg.device has
 * been checked. Same contracts as the
 * public calls, with pointers in host or device memory (see include/embcache.h). */
int emc__cuda_available(int device);
emc_status emc__cuda_create(emc_cache *c);
void emc__cuda_destroy(emc_cache *c);
emc_status emc__cuda_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets, void *out,
                     uint8_t *where, void *stream);
emc_status emc__cuda_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                     const void *rows, void *stream);
emc_status emc__cuda_flush(emc_cache *c, void *stream);
emc_status emc__cuda_prefetch(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                              void *stream);
emc_status emc__cuda_apply(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                           const void *grads, const emc_optimizer *opt, void *stream);
emc_status emc__cuda_dedup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                           uint64_t *unique_ids, uint64_t *unique_offsets, uint32_t *inverse,
                           void *stream);
emc_status emc__cuda_stats(const emc_cache *c, emc_stats *out);
/* A CUDA cache over a shared store (cuda/sync.cu). sync: refresh the copies the store's update
 * log names (takes the store's lock when there are any); sync_held: the same, the caller holding
 * the store's lock. refuse_capture: EMC_EUNSUPPORTED on a stream being captured. args: host
 * copies of a batch (offsets validated; buf: rows, or f32 gradients when grads), after the
 * caller's stream; the caller frees them. quiesce: wait for the cache's writer stream.
 * count_host_writes: stats of writes run on the host. */
emc_status emc__cuda_shared_sync(emc_cache *c);
emc_status emc__cuda_shared_sync_held(emc_cache *c);
emc_status emc__cuda_shared_refuse_capture(emc_cache *c, void *stream);
emc_status emc__cuda_shared_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                 const void *buf, int grads, void *stream, uint64_t **hids,
                                 uint64_t **hoffs, void **hbuf);
emc_status emc__cuda_quiesce(emc_cache *c);
void emc__cuda_count_host_writes(emc_cache *c, uint64_t inserts, uint64_t grad_rows);
/* White-box check of a CUDA cache's device structures (tests): EMC_OK or EMC_ECORRUPT with a
 * detail. Waits for the device. */
emc_status emc__cuda_check(emc_cache *c);
/* The index's shape (tests; waits for the device): see cuda/check.cu. */
typedef struct emc__ix_shape {
  uint64_t slots, empty, tombs, longest_cluster; /* longest_cluster in buckets */
} emc__ix_shape;
emc_status emc__cuda_index_shape(emc_cache *c, emc__ix_shape *out);
emc_status emc__cuda_table_rows(const emc_cache *c, uint32_t table, uint64_t *out);
/* Scratch slots held by callers' captured graphs, after freeing those whose graphs are gone
 * (tests). */
uint32_t emc__cuda_captured_slots(emc_cache *c);

/* Global keys of a batch computed on device 0 by the shared per-item code (host pointers in
 * and out; copies and synchronizes). Returns 1 on success, 0 with the CUDA error in err. */
int emc__cuda_global_keys(const emc__table_code *codes, uint32_t n_tables, uint64_t hash_seed,
                          const uint64_t *ids, const uint64_t *offsets, uint64_t *keys, char *err,
                          size_t err_len);

/* Probe a host-built index on the device with the lookup kernel's cooperative probe:
 * pos[i] = the slot of keys[i] or -1, as emc__index_find gives it. ix: host arrays (keys only
 * are read). Returns 1 on success, 0 with the CUDA error in err. */
int emc__cuda_index_find(const emc__index_view *ix, const uint64_t *keys, uint64_t n, int64_t *pos,
                         char *err, size_t err_len);
#endif
