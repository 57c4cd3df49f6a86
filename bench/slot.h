/*
 * slot.h: what one cached row costs in a cache's budget, as the benches count it.
 *
 * The library charges a resident row its slot stride (emc_stats.bytes_in_use = rows * stride;
 * t1 and t2 compare against it). The stride is lib/emc_item.h's emc__row_stride, which the
 * public header does not export, so the benches keep this one copy of it (emc-bench,
 * emc-bench-gpu, per_table.c and warmup.c all size budgets with it). tests/test_warmup.c
 * checks that it equals the library's for every row size up to EMC_MAX_DIM f32 elements, so
 * a change of the library's layout fails a test instead of skewing every budget.
 */
#ifndef EMC_BENCH_SLOT_H
#define EMC_BENCH_SLOT_H

#include <stddef.h>
#include <stdint.h>

/* Slot bytes of a row of row_bytes packed bytes: rounded up to 4, to 8, and to a multiple of
 * 16 beyond 8 (so 16-byte vector loads apply to every row of a table). */
static inline uint64_t emcb_slot_stride(uint64_t row_bytes) {
  if (row_bytes <= 4) return 4;
  if (row_bytes <= 8) return 8;
  return (row_bytes + 15u) & ~(uint64_t)15u;
}

/* A budget of `bytes` (a product of a byte count and a fraction, in double) as a capacity_bytes:
 * clamped to SIZE_MAX / 2, so that a huge fraction (--cache-frac 1e300) cannot overflow the
 * conversion; the library then refuses the budget with its own status. */
static inline size_t emcb_budget_bytes(double bytes) {
  return bytes > (double)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)bytes;
}

#endif /* EMC_BENCH_SLOT_H */
