/*
 * trace.h: synthetic lookup traces for embcache benchmarks, tests and fuzzers.
 *
 * Self-contained: depends on libc and libm only, never on the embcache library, so a test
 * can check the library against it. Everything is deterministic given a seed.
 *
 *   emct_rng      xoshiro256** seeded through splitmix64.
 *   emct_perm     a fixed pseudo-random bijection of [0, n) (scatters hot ranks over ids).
 *   emct_zipf     Zipf(alpha) ranks over [0, n), O(1) per sample for any n and alpha > 0
 *                 (rejection-inversion, Hörmann & Derflinger 1996).
 *   emct_gen      batches in the library's batch format (grouped by table, see embcache.h).
 *   emct_dedup    first occurrences of distinct ids in a segment ("per distinct key" ratios).
 *   emct_lru      an exact LRU over (table, id) keys, measured in bytes.
 *
 * Functions that allocate return 0 on success and -1 on failure (bad argument or out of
 * memory); a failed init leaves nothing to free. Objects are not thread-safe.
 */
#ifndef EMC_TRACE_H
#define EMC_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ PRNG */
typedef struct emct_rng {
  uint64_t s[4]; /* xoshiro256** state, never all zero */
} emct_rng;

/* One step of splitmix64: advances *state and returns the next output. */
uint64_t emct_splitmix64(uint64_t *state);
/* Seed r from a 64-bit seed (any value, 0 included). */
void emct_rng_seed(emct_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t emct_rng_next(emct_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double emct_rng_double(emct_rng *r);
/* Uniform integer in [0, n), unbiased (Lemire's multiply-and-reject). n >= 1. */
uint64_t emct_rng_below(emct_rng *r, uint64_t n);

/* ----------------------------------------------------------- permutation */
/* A bijection of [0, n): three rounds of (multiply by an odd constant, add, xorshift) on the
 * smallest power-of-two domain [0, 2^b) >= n, each a bijection mod 2^b, then cycle-walking
 * until the value falls inside [0, n) (fewer than 2 rounds on average since 2^b < 2n). */
typedef struct emct_perm {
  uint64_t n;      /* domain size, >= 1 */
  uint64_t mask;   /* 2^b - 1 */
  uint32_t shift;  /* xorshift distance, max(1, b/2) */
  uint64_t mul[3]; /* odd multipliers */
  uint64_t add[3]; /* additive constants */
} emct_perm;

/* Set up the permutation of [0, n) chosen by seed. n >= 1 (n == 0 is treated as 1). */
void emct_perm_init(emct_perm *p, uint64_t n, uint64_t seed);
/* The image of x (x < n) under p; in [0, n). */
uint64_t emct_perm_apply(const emct_perm *p, uint64_t x);

/* ------------------------------------------------------------------ Zipf */
/* Ranks k in [0, n) with P(k) proportional to (k + 1)^-alpha. */
typedef struct emct_zipf {
  uint64_t n;        /* number of ranks, >= 1 */
  double alpha;      /* exponent, > 0 */
  double h_x1;       /* H(1.5) - 1 */
  double h_n;        /* H(n + 0.5) */
  double s;          /* squeeze constant: accept without evaluating H when k - x <= s */
} emct_zipf;

/* Returns 0, or -1 when n == 0 or alpha is not a finite number > 0. */
int emct_zipf_init(emct_zipf *z, uint64_t n, double alpha);
/* One rank in [0, n); 0 is the most frequent. Expected < 1.2 uniforms per sample. */
uint64_t emct_zipf_sample(const emct_zipf *z, emct_rng *r);

/* --------------------------------------------------------------- presets */
#define EMCT_CRITEO_KAGGLE_TABLES 26u
/* Cardinalities of the 26 categorical features of the Criteo Kaggle display-ads data set. */
extern const uint64_t emct_criteo_kaggle_rows[EMCT_CRITEO_KAGGLE_TABLES];

/* max(1, round(card * scale)); scale must be > 0. */
uint64_t emct_scale_rows(uint64_t card, double scale);

/* Row counts of a preset into rows[0 .. return value):
 *   "criteo-kaggle": the 26 cardinalities scaled by `scale`;
 *   "uniform":       uniform_tables tables of uniform_rows rows each.
 * Returns the table count, or 0 for an unknown name, bad arguments, or more than max_tables
 * tables. */
uint32_t emct_preset_rows(const char *name, double scale, uint32_t uniform_tables,
                          uint64_t uniform_rows, uint64_t *rows, uint32_t max_tables);

/* ------------------------------------------------------------- generator */
typedef enum emct_dist {
  EMCT_DIST_ZIPF = 0,   /* Zipf(alpha) ranks mapped through the table's permutation */
  EMCT_DIST_UNIFORM = 1 /* uniform over [0, rows) */
} emct_dist;

typedef struct emct_table_gen {
  uint64_t rows;   /* ids lie in [0, rows) */
  emct_zipf zipf;  /* rank sampler (EMCT_DIST_ZIPF) */
  emct_perm perm;  /* rank -> id */
  emct_rng rng;    /* this table's own stream, so tables are independent of each other */
} emct_table_gen;

typedef struct emct_gen {
  uint32_t n_tables;       /* tables */
  emct_dist dist;          /* id distribution */
  double alpha;            /* Zipf exponent (EMCT_DIST_ZIPF) */
  emct_table_gen *tables;  /* n_tables, owned */
} emct_gen;

/* Set up a generator over n_tables tables of rows[t] rows (each >= 1). alpha only matters for
 * EMCT_DIST_ZIPF. Returns 0, or -1 (bad argument, out of memory; *g is then zeroed). */
int emct_gen_init(emct_gen *g, const uint64_t *rows, uint32_t n_tables, emct_dist dist,
                  double alpha, uint64_t seed);
/* Free the generator's memory; a zeroed or NULL g is fine. */
void emct_gen_free(emct_gen *g);
/* The id that rank `rank` of table t maps to (the permutation; rank 0 is the hottest). */
uint64_t emct_gen_rank_to_id(const emct_gen *g, uint32_t t, uint64_t rank);
/* One batch of `batch` samples, each looking up one id per table, grouped by table:
 *   offsets: (n_tables + 1,) receives t * batch;  ids: (n_tables * batch,) receives the ids,
 *   ids[offsets[t] .. offsets[t+1]) drawn from table t. */
void emct_gen_batch(emct_gen *g, size_t batch, uint64_t *ids, uint64_t *offsets);

/* ----------------------------------------------------------------- dedup */
/* Finds the first occurrence of every distinct id of a segment. Open addressing with
 * generation stamps, so a call costs O(n) and never clears the table. */
typedef struct emct_dedup {
  uint64_t *keys;   /* cap ids */
  uint32_t *stamp;  /* cap generation stamps; a slot is used iff stamp == gen */
  uint32_t gen;     /* current generation */
  size_t cap;       /* power of two, >= 2 * the largest segment seen; 0 before first use */
} emct_dedup;

/* Zero *d (no allocation until the first call). */
void emct_dedup_init(emct_dedup *d);
void emct_dedup_free(emct_dedup *d);
/* Positions (indices into ids) of the first occurrence of each distinct id of ids[0 .. n),
 * in increasing order, into first[0 .. *n_first). first: n entries. Grows as needed.
 * Returns 0, or -1 when out of memory. */
int emct_dedup_first(emct_dedup *d, const uint64_t *ids, size_t n, size_t *first,
                     size_t *n_first);
/* The same over a whole batch, table by table: first[] receives positions into ids (global,
 * i.e. offsets[t] + i), table 0's first. first: offsets[n_tables] entries. */
int emct_dedup_batch(emct_dedup *d, const uint64_t *ids, const uint64_t *offsets,
                     uint32_t n_tables, size_t *first, size_t *n_first);

/* ------------------------------------------------------------------- LRU */
/* Exact LRU over (table, id) keys with a byte budget: a key of table t weighs row_bytes[t]
 * bytes. Flat arrays: an open-addressing index (linear probing, backward-shift deletion)
 * over nodes linked into one recency list by 32-bit indices. */
typedef struct emct_lru {
  uint32_t n_tables;     /* tables */
  uint64_t *row_bytes;   /* n_tables bytes per key, owned */
  uint64_t capacity;     /* byte budget */
  uint64_t used;         /* bytes of resident keys */
  uint32_t max_nodes;    /* most keys that can be resident at once */
  uint32_t n_nodes;      /* nodes ever taken from the pool (free ones are on free_head) */
  uint32_t free_head;    /* free node list through next[], EMCT_NIL when empty */
  uint32_t head, tail;   /* most / least recently used node, EMCT_NIL when empty */
  uint64_t *node_id;     /* max_nodes ids */
  uint32_t *node_table;  /* max_nodes tables */
  uint32_t *prev, *next; /* max_nodes recency links */
  uint32_t *slots;       /* slot_mask + 1 entries: node + 1, 0 = empty */
  uint64_t slot_mask;    /* index size - 1 (power of two >= 2 * max_nodes) */
  uint64_t resident;     /* keys resident now */
  uint64_t hits, misses, evictions; /* counters since init */
} emct_lru;

#define EMCT_NIL 0xffffffffu

/* capacity_bytes: the budget; row_bytes: (n_tables,) each >= 1; max_keys: an upper bound of
 * distinct keys (e.g. total rows), 0 for none. The node pool holds
 * min(capacity / min(row_bytes), max_keys) keys; returns -1 if that exceeds 2^32 - 2. */
int emct_lru_init(emct_lru *l, const uint64_t *row_bytes, uint32_t n_tables,
                  uint64_t capacity_bytes, uint64_t max_keys);
void emct_lru_free(emct_lru *l);
/* One access: 1 on a hit (the key becomes most recent); 0 on a miss, after which the key is
 * admitted as most recent, evicting least-recently-used keys until it fits (a key heavier
 * than the whole budget is not admitted). */
int emct_lru_access(emct_lru *l, uint32_t table, uint64_t id);
/* One batch: its distinct keys in order of first occurrence (table by table), each accessed
 * once. Adds to *hits and *distinct (either may be NULL). d is scratch; first is scratch of
 * offsets[n_tables] entries. Returns 0, or -1 when out of memory. */
int emct_lru_batch(emct_lru *l, emct_dedup *d, size_t *first, const uint64_t *ids,
                   const uint64_t *offsets, uint64_t *hits, uint64_t *distinct);
/* Access without admission: 1 on a hit (the key becomes most recent), 0 on a miss (counted,
 * nothing admitted). */
int emct_lru_touch(emct_lru *l, uint32_t table, uint64_t id);
/* Admit a key known to be absent as most recent, evicting as emct_lru_access does. */
void emct_lru_admit(emct_lru *l, uint32_t table, uint64_t id);
/* emct_lru_batch with the cache's batch phases: every distinct key of the batch is looked up
 * first (hits become most recent), then the misses are admitted in order of first occurrence,
 * so a batch's admissions never evict a row the same batch hits. */
int emct_lru_batch_phased(emct_lru *l, emct_dedup *d, size_t *first, const uint64_t *ids,
                          const uint64_t *offsets, uint64_t *hits, uint64_t *distinct);

#ifdef __cplusplus
}
#endif
#endif /* EMC_TRACE_H */
