/*
 * emc_item.h: per-item logic shared by the host backend (lib/, C11) and the CUDA backend
 * (cuda/, CUDA C). Everything here is a small pure function or a flat, trivially-copyable
 * view over memory owned elsewhere, so the same code runs in host and device memory and the
 * host tests cover what the device runs.
 *
 * It is the one header to include; its parts live in lib/item/, one topic each:
 *   access.h  relaxed/acquire/release access helpers, the tests' test points, host vector
 *             reads, row copy and stride
 *   codec.h   hashing: fmix64 (index placement), an XXH3-64 twin for 8-byte ids (hashed
 *             tables); the key codec: global_key(T, F) = code(T) << (n - m) | f(F)
 *   index.h   the global index (bucketed open addressing, one copy, in-place tombstone
 *             re-pack), its entry encoding and the optimistic reader / serialized writer protocol
 *   pages.h   pool page layout (free bitmaps)
 *   policy.h  LRU stamps, the per-call miss set, admission planning
 *   rows.h    store rows (striped versions), f16 conversion, optimizers, uniform rows
 *
 * Rules: no allocation, no libc beyond <stdint.h>/<string.h>, no globals (but the tests' hook
 * of "test points", which exists only in the tests' build).
 */
#ifndef EMC_ITEM_H
#define EMC_ITEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define EMC_HD __host__ __device__ __forceinline__
#else
#define EMC_HD static inline
#endif

/* The parts, in dependency order (each uses only what the ones before it define). */
#include "item/access.h" /* memory access, test points, host vector reads, row copy */
#include "item/codec.h"  /* hashing, key codec */
#include "item/index.h"  /* the global index and its reader / writer protocol */
#include "item/pages.h"  /* pool pages */
#include "item/policy.h" /* LRU stamps, miss set, admission planning */
#include "item/rows.h"   /* store rows, f16, optimizers, uniform rows */

#endif /* EMC_ITEM_H */
