/*
 * mrc.h: cache sizing from one trace: the exact LRU hit/miss-ratio curve over every cache
 * size (stack distances), and Belady's OPT at chosen sizes.
 *
 * Keys are integers in [0, n_keys), all of one size (a cache of C keys holds any C of them):
 * emc-bench's rows all have the same slot stride, so a byte budget B is C = floor(B / stride)
 * keys, and its key of (table t, id) is base[t] + id. Self-contained like trace.h (libc
 * only); part of the emc_trace library.
 *
 * Stack distances (Mattson, Gecsei, Slutz and Traiger 1970). LRU has the inclusion
 * property: a cache of C keys holds the C most recently used ones. An access whose key was
 * last used d distinct keys ago (its stack distance) hits exactly when C > d, so one pass that
 * histograms d gives the hits of every size at once: hits(C) = sum_{d < C} hist[d]. The
 * distance is the number of distinct keys accessed since the key's previous access: mark, in
 * a Fenwick tree over access times, the time of every key's latest access; d is the number of
 * marks after the previous access (a prefix-sum difference). O(log N) per access, O(N log N)
 * for a trace of N accesses, memory O(N + n_keys).
 *
 * OPT (Belady 1966, "MIN"): on a miss with the cache full, evict the resident key whose next
 * use is farthest in the future. Among policies that admit every missed key (demand paging,
 * as LRU and embcache do) it has the most hits at every size, so OPT >= LRU. One simulation
 * per size: next-use times from one backward pass, a max-heap of (next use, key) with lazy
 * deletion; O(N log N) per size.
 *
 * Counting: every access shapes the state; only those after emct_mrc_count_from_now() count
 * (warm-up first, then the measured accesses; call it before the first access when there is
 * no warm-up). emct_mrc_batch feeds a batch the way
 * emct_lru_batch accesses it (its distinct keys, table by table, in order of first
 * occurrence), so hits(floor(B / stride)) equals emct_lru_batch's hits with a byte budget B.
 */
#ifndef EMC_MRC_H
#define EMC_MRC_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emct_mrc_opt {
  uint64_t keys; /* cache size in keys */
  uint64_t hits; /* OPT's counted hits at that size */
} emct_mrc_opt;

typedef struct emct_mrc {
  uint64_t n_keys;       /* keys lie in [0, n_keys) */
  uint64_t max_accesses; /* capacity of the access log */
  uint64_t n;            /* accesses so far */
  uint64_t count_from;   /* accesses [count_from, n) are counted; UINT64_MAX: none yet */
  uint64_t *seq;         /* max_accesses keys, in order (OPT replays them) */
  uint64_t *last;        /* n_keys: 1 + time of the key's latest access, 0 = never */
  uint32_t *fen;         /* Fenwick tree over times 1 .. max_accesses: 1 at latest accesses */
  uint64_t *hist;        /* hist[d]: counted accesses at stack distance d; then prefix sums */
  uint64_t hist_len;     /* entries of hist in use (largest distance + 1) */
  uint64_t hist_cap;     /* entries allocated */
  uint64_t cold;         /* counted first accesses (no previous access: a miss at any size) */
  uint64_t distinct;     /* distinct keys over all accesses */
  int finished;          /* emct_mrc_finish ran: hist holds prefix sums, fen is freed */
  emct_mrc_opt *opt;     /* OPT results computed so far (memo) */
  size_t n_opt, opt_cap;
} emct_mrc;

/* n_keys >= 1; max_accesses: the most accesses that will be fed. Returns 0, or -1 (bad
 * argument, out of memory; *m is then zeroed). */
int emct_mrc_init(emct_mrc *m, uint64_t n_keys, uint64_t max_accesses);
void emct_mrc_free(emct_mrc *m);
/* Accesses fed from now on are counted (none are before the first call). */
void emct_mrc_count_from_now(emct_mrc *m);
/* One access of key (< n_keys). Returns 0, or -1 when max_accesses is exhausted or the
 * stack-distance histogram cannot grow (out of memory). Not after emct_mrc_finish. */
int emct_mrc_access(emct_mrc *m, uint64_t key);
/* One batch in emct_lru_batch's order; key of (t, id) is base[t] + id. d, first: scratch as
 * for emct_lru_batch. Adds the batch's distinct keys to *distinct (may be NULL). 0 or -1. */
int emct_mrc_batch(emct_mrc *m, emct_dedup *d, size_t *first, const uint64_t *ids,
                   const uint64_t *offsets, uint32_t n_tables, const uint64_t *base,
                   uint64_t *distinct);
/* Done feeding: turns the histogram into prefix sums and frees the Fenwick tree. */
void emct_mrc_finish(emct_mrc *m);
/* Counted accesses. */
uint64_t emct_mrc_counted(const emct_mrc *m);
/* Exact LRU's counted hits with a cache of `keys` keys (after emct_mrc_finish). O(1). */
uint64_t emct_mrc_lru_hits(const emct_mrc *m, uint64_t keys);
/* The smallest cache (in keys) at which LRU reaches its maximum hits (every counted access
 * except the cold ones): the largest stack distance + 1; 0 when nothing is counted. */
uint64_t emct_mrc_saturation(const emct_mrc *m);
/* OPT's counted hits with a cache of `keys` keys (after emct_mrc_finish): *hits. Results are
 * memoized. Returns 0, or -1 when out of memory. */
int emct_mrc_opt_hits(emct_mrc *m, uint64_t keys, uint64_t *hits);

#ifdef __cplusplus
}
#endif
#endif /* EMC_MRC_H */
