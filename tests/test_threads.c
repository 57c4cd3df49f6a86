/*
 * test_threads: the concurrency suite (label "threads"; meant to run under ThreadSanitizer
 * too: configure with CC=clang -DEMC_SANITIZE=thread).
 *
 * embcache.h documents emc_lookup, emc_lookup_ex, emc_insert, emc_flush and emc_get_stats as
 * callable concurrently from any number of threads (and emc_store_read concurrently with
 * anything). These tests run exactly those calls at once on a small cache, so evictions,
 * write-backs, index rebuilds and unified-index entries happen all the time, and check:
 *
 *   every row a lookup returns is a value its key legitimately held during the call
 *     Rows are generated from (table, rank, generation g) and can be decoded: a reader
 *     decodes g from the row and requires (1) the row belongs to this table and rank, (2) the
 *     whole row is the row of generation g (not torn, not mixed with another row), and
 *     (3) done_before <= g <= started_after, where done_before is the last generation of the
 *     key whose emc_insert had returned before the lookup began and started_after the
 *     largest generation any writer had published (before calling emc_insert) by the time
 *     the lookup returned. Generation 0 of a hashed key is "absent": a zero row.
 *   after the traffic: the exact counters (lookups, inserts) and the stats invariants, the
 *     cache structure (emc__cache_check), and after emc_flush the store holds the last
 *     generation of every key; a quiescent lookup of every key returns exactly that.
 *   lookups only: every row equals the store's row (uniform values), where[] is exact and
 *     the store is untouched.
 *   emc_get_stats from several threads at once: counters never go backwards, gauges stay
 *     within the budget.
 *
 * The same file, compiled with EMCT_GPU, is the GPU suite test_gpu_threads (label gpu): the
 * cache is a CUDA cache, every reader looks up from device buffers on a stream of its own
 * (four reader streams at once) while writer threads insert generation-encoded rows under
 * constant eviction; the rows are checked as above, the device structures by emc__cuda_check.
 * It exits 77 where no device answers, and runs without fork (CUDA does not survive fork).
 *
 * Seeds and time: each case runs under EMCT_SEEDS seeds (default 4; 2 under sanitizers), the
 * iterations shared between them, and prints the rows it looked up and checked; EMCT_THREADS_SECONDS=S turns the suite into a hunt
 * of S seconds (new seeds until each case's share has passed). History: with the compact
 * index this suite failed about one run in ten ("stale row: older than a committed insert",
 * issue 16: a reader decided on an entry word without re-checking the key it belonged to);
 * tests/test_protocol.c now forces that interleaving, and every other of one reader step
 * against one writer step.
 *
 * Keys are split between writers (rank % n_writers), so the generations of one key are
 * inserted in order by one thread. Worker threads never call ck_assert (Check's failure path
 * is not thread-safe): they record the first failure and stop; the main thread asserts.
 * Work is bounded by iteration counts, scaled down under sanitizers (emct_scale).
 *
 * History: these tests found a race in an earlier eviction pass (a lookup's stamp older than
 * every stamp the pass's first scan saw sent its histogram index out of bounds); stamps are
 * now ages clamped by the writer (lib/item/policy.h, "LRU stamps"), which no lookup can undercut.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#ifdef EMCT_GPU
#include <cuda_runtime_api.h>

#include "emc_cuda.h"
#endif

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Rows are generation rows (tests/common.h: emct_gen_row, emct_gen_decode). */
#ifdef EMCT_GPU
#define EMCT_GPU_ON 1
#else
#define EMCT_GPU_ON 0
#endif

#define HOT 64u
#define MAX_TABLES 3u

/* --------------------------------------------------------------- shared state */
typedef struct tinfo {
  emc_table_kind kind;
  emc_dtype dtype;
  uint32_t dim;
  size_t row_bytes;
  uint64_t universe; /* ranks [0, universe) */
  uint64_t present;  /* hashed: ranks [0, present) hold generation 1 at start */
} tinfo;

typedef struct shared {
  emc_cache *c;
  emc_store *store;
  const emct_world *w; /* ids of ranks (emct_id_of); static mode: reference rows */
  int static_mode;     /* 1: no writers; rows compared with w->ref / w->present */
  uint32_t n;
  tinfo tb[MAX_TABLES];
  uint32_t *started[MAX_TABLES]; /* per rank: largest generation published by its writer */
  uint32_t *done[MAX_TABLES];    /* per rank: last generation whose emc_insert returned */
  uint32_t n_writers;
  uint64_t reader_iters, writer_iters;
  uint32_t reader_ids, writer_ids; /* at most this many ids per table per batch */
  uint32_t big_ids; /* > 0: reader 0 looks up exactly this many hot ids per table per batch */
  uint64_t big_iters; /* ... in this many iterations */
  uint64_t high_bytes, capacity, index_bytes;
  int stop; /* atomic: readers and writers are done (flushers, stats threads stop) */
} shared;

typedef struct worker {
  shared *sh;
  uint32_t index;
  pthread_t th;
  emct_rng rng;
  int failed;
  char err[1024];
  /* results (read by the main thread after join) */
  uint64_t iters, positions, nowhere_positions, n_cache, n_store, n_absent;
  uint64_t range_errors;
  emc_stats last; /* stats threads: last snapshot */
} worker;

static void wfail(worker *wk, const char *fmt, ...) EMC_PRINTF(2, 3);
static void wfail(worker *wk, const char *fmt, ...) {
  va_list ap;
  if (wk->failed) return;
  wk->failed = 1;
  va_start(ap, fmt);
  vsnprintf(wk->err, sizeof wk->err, fmt, ap);
  va_end(ap);
}

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

static const char *kind_name(emc_table_kind k) { return k == EMC_TABLE_DENSE ? "dense" : "hashed"; }
static const char *dtype_name(emc_dtype d) { return d == EMC_DTYPE_F32 ? "f32" : "f16"; }

/* ------------------------------------------------------------------- readers */
/* Check one returned row. lo/hi: generation window; rank >= universe: a foreign hashed id
 * (never present). Returns 0 and records the failure on a bad row. */
static int check_row(worker *wk, uint32_t t, uint64_t rank, uint64_t pos, const unsigned char *row,
                     int where, uint32_t lo, uint32_t hi, unsigned char *scratch) {
  shared *sh = wk->sh;
  const tinfo *ti = &sh->tb[t];
  uint64_t id = emct_id_of(sh->w, t, rank);
  char hx[64];
  if (sh->static_mode || rank >= ti->universe) {
    int present = rank < ti->universe && sh->w->present[t][rank];
    const unsigned char *want = present ? sh->w->ref[t] + rank * ti->row_bytes : NULL;
    long d = want ? emct_first_diff(row, want, ti->row_bytes) : (emct_is_zero(row, ti->row_bytes) ? -1 : 0);
    if (d >= 0) {
      wfail(wk, "table %u (%s %s dim %u) id %llu (rank %llu%s) at position %llu: byte %ld "
            "differs from the store's row (got %s)", t, kind_name(ti->kind), dtype_name(ti->dtype),
            ti->dim, (unsigned long long)id, (unsigned long long)rank,
            rank >= ti->universe ? ", foreign" : "", (unsigned long long)pos, d,
            emct_hex(row + (d & ~3L), ti->row_bytes - (size_t)(d & ~3L), hx, sizeof hx));
      return 0;
    }
    if (where >= 0 && (present ? where == EMC_WHERE_ABSENT : where != EMC_WHERE_ABSENT)) {
      wfail(wk, "table %u id %llu (rank %llu) at position %llu: %s but where = %d", t,
            (unsigned long long)id, (unsigned long long)rank, (unsigned long long)pos,
            present ? "present" : "absent", where);
      return 0;
    }
    return 1;
  }
  if (emct_is_zero(row, ti->row_bytes)) {
    /* the absent value: legitimate only while generation 0 may still be current */
    if (lo != 0 || where == EMC_WHERE_CACHE || where == EMC_WHERE_STORE) {
      wfail(wk, "table %u (%s %s dim %u) id %llu (rank %llu) at position %llu: zero row "
            "(where %d) but generation %u was committed before the lookup", t,
            kind_name(ti->kind), dtype_name(ti->dtype), ti->dim, (unsigned long long)id,
            (unsigned long long)rank, (unsigned long long)pos, where, lo);
      return 0;
    }
    /* a zero row from the cache or the store would be a placeholder: a new hashed id's
     * store row is filled before the id is published (emc__store_find_or_add) */
    return 1;
  }
  {
    int64_t g = emct_gen_decode(t, rank, ti->dim, ti->dtype, row, scratch);
    if (g < 0 || (uint32_t)g < lo || (uint32_t)g > hi || where == EMC_WHERE_ABSENT) {
      wfail(wk, "table %u (%s %s dim %u) id %llu (rank %llu) at position %llu, where %d: %s "
            "(decoded generation %lld, window [%u, %u]); row starts %s", t,
            kind_name(ti->kind), dtype_name(ti->dtype), ti->dim, (unsigned long long)id,
            (unsigned long long)rank, (unsigned long long)pos, where,
            g < 0 ? "row is not a whole row of this key (torn or foreign)"
                  : where == EMC_WHERE_ABSENT ? "non-zero row reported absent"
                  : (uint32_t)g < lo ? "stale row: older than a committed insert"
                                     : "row from the future: no writer had started it",
            (long long)g, lo, hi, emct_hex(row, ti->row_bytes, hx, sizeof hx));
      return 0;
    }
  }
  return 1;
}

static uint64_t pick_rank(worker *wk, const tinfo *ti, uint32_t stride, uint32_t off) {
  uint64_t span = emct_rng_next(&wk->rng) & 1u ? HOT : ti->universe;
  return emct_rng_below(&wk->rng, span / stride) * stride + off;
}

typedef struct batch {
  uint64_t *ids, *ranks, offsets[MAX_TABLES + 1];
  uint32_t *lo, *hi, *gen;
  uint8_t *where;
  unsigned char *rows, *scratch;
  size_t bytes;
} batch;

static int batch_alloc(batch *b, const shared *sh, uint32_t per_table) {
  size_t n = (size_t)sh->n * per_table + 1, bytes = 0;
  uint32_t t;
  for (t = 0; t < sh->n; t++) bytes += per_table * sh->tb[t].row_bytes;
  memset(b, 0, sizeof *b);
  b->bytes = bytes;
  b->ids = calloc(n, sizeof *b->ids);
  b->ranks = calloc(n, sizeof *b->ranks);
  b->lo = calloc(n, sizeof *b->lo);
  b->hi = calloc(n, sizeof *b->hi);
  b->gen = calloc(n, sizeof *b->gen);
  b->where = calloc(n, 1);
  b->rows = calloc(bytes + 1, 1);
  b->scratch = calloc((size_t)EMC_MAX_DIM * 4, 1);
  return b->ids && b->ranks && b->lo && b->hi && b->gen && b->where && b->rows && b->scratch;
}

static void batch_free(batch *b) {
  free(b->ids); free(b->ranks); free(b->lo); free(b->hi); free(b->gen); free(b->where);
  free(b->rows); free(b->scratch);
}

#ifdef EMCT_GPU
/* A reader's device side: its stream and device copies of ids, out and where. */
typedef struct gpu_io {
  cudaStream_t st;
  void *ids, *out, *where;
} gpu_io;

static int gpu_io_init(gpu_io *g, size_t n, size_t bytes) {
  memset(g, 0, sizeof *g);
  return cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) == cudaSuccess &&
         cudaMalloc(&g->ids, n * 8 + 8) == cudaSuccess && cudaMalloc(&g->out, bytes + 16) == cudaSuccess &&
         cudaMalloc(&g->where, n + 1) == cudaSuccess;
}

static void gpu_io_free(gpu_io *g) {
  if (g->st) cudaStreamDestroy(g->st);
  cudaFree(g->ids);
  cudaFree(g->out);
  cudaFree(g->where);
}

/* emc_lookup_ex from device buffers on the reader's own stream, results back to b. */
static emc_status gpu_lookup(shared *sh, gpu_io *g, batch *b, uint64_t k, int use_where) {
  size_t bytes = 0;
  uint32_t t;
  emc_status st;
  for (t = 0; t < sh->n; t++) bytes += (b->offsets[t + 1] - b->offsets[t]) * sh->tb[t].row_bytes;
  if (cudaMemcpyAsync(g->ids, b->ids, k * 8, cudaMemcpyHostToDevice, g->st) != cudaSuccess)
    return EMC_ECUDA;
  st = emc_lookup_ex(sh->c, g->ids, b->offsets, g->out, use_where ? g->where : NULL, g->st);
  if (st != EMC_OK) return st;
  if (cudaMemcpyAsync(b->rows, g->out, bytes, cudaMemcpyDeviceToHost, g->st) != cudaSuccess ||
      (use_where && cudaMemcpyAsync(b->where, g->where, k, cudaMemcpyDeviceToHost, g->st) != cudaSuccess) ||
      cudaStreamSynchronize(g->st) != cudaSuccess)
    return EMC_ECUDA;
  return EMC_OK;
}
#endif

static void *reader_main(void *arg) {
  worker *wk = arg;
  shared *sh = wk->sh;
  batch b;
  uint64_t it;
  uint32_t t, dense_t = MAX_TABLES;
  uint32_t per_table = wk->index == 0 && sh->big_ids ? sh->big_ids : sh->reader_ids;
  uint64_t my_iters = wk->index == 0 && sh->big_ids ? sh->big_iters : sh->reader_iters;
#ifdef EMCT_GPU
  gpu_io gio;
#endif
  if (!batch_alloc(&b, sh, per_table > sh->reader_ids ? per_table : sh->reader_ids)) {
    wfail(wk, "reader %u: out of memory", wk->index);
    batch_free(&b);
    return NULL;
  }
#ifdef EMCT_GPU
  if (!gpu_io_init(&gio, (size_t)sh->n * (per_table > sh->reader_ids ? per_table : sh->reader_ids),
                   b.bytes)) {
    wfail(wk, "reader %u: no stream or device buffers", wk->index);
    gpu_io_free(&gio);
    batch_free(&b);
    return NULL;
  }
#endif
  for (t = 0; t < sh->n; t++)
    if (sh->tb[t].kind == EMC_TABLE_DENSE && dense_t == MAX_TABLES) dense_t = t;
  for (it = 0; it < my_iters && !wk->failed; it++) {
    uint64_t k = 0, i;
    int use_where = !(wk->index == 0 && (it & 1u));
    emc_status st;
    unsigned char *row;
    b.offsets[0] = 0;
    for (t = 0; t < sh->n; t++) {
      const tinfo *ti = &sh->tb[t];
      int big = wk->index == 0 && sh->big_ids;
      uint64_t m = big ? sh->big_ids : emct_rng_below(&wk->rng, sh->reader_ids + 1);
      for (i = 0; i < m; i++, k++) {
        uint64_t r = big ? emct_rng_below(&wk->rng, HOT) : pick_rank(wk, ti, 1, 0);
        if (ti->kind == EMC_TABLE_HASHED && emct_rng_below(&wk->rng, 16) == 0)
          r = ti->universe + emct_rng_below(&wk->rng, 100000); /* foreign: never present */
        b.ranks[k] = r;
        b.ids[k] = emct_id_of(sh->w, t, r);
        if (!sh->static_mode && r < ti->universe) b.lo[k] = LD_ACQ(&sh->done[t][r]);
      }
      b.offsets[t + 1] = k;
    }
    /* now and then a batch with a dense id out of range: refused, out untouched */
    if (dense_t < MAX_TABLES && wk->index == 1 && it % 32 == 5 && k > 0 &&
        b.offsets[dense_t + 1] > b.offsets[dense_t]) {
      uint64_t save = b.ids[b.offsets[dense_t]];
      size_t j;
      memset(b.rows, 0xab, b.bytes);
      b.ids[b.offsets[dense_t]] = sh->w->spec[dense_t].rows + emct_rng_below(&wk->rng, 5);
      st = emc_lookup_ex(sh->c, b.ids, b.offsets, b.rows, b.where, NULL);
      if (st != EMC_ERANGE) {
        wfail(wk, "reader %u: lookup with a dense id out of range returned %s, not EMC_ERANGE",
              wk->index, emc_status_name(st));
        break;
      }
      for (j = 0; j < b.bytes; j++)
        if (b.rows[j] != 0xab) break;
      if (j < b.bytes) {
        wfail(wk, "reader %u: refused lookup wrote byte %zu of out", wk->index, j);
        break;
      }
      b.ids[b.offsets[dense_t]] = save;
      wk->range_errors++;
    }
    memset(b.where, 0xee, k + 1);
#ifdef EMCT_GPU
    st = gpu_lookup(sh, &gio, &b, k, use_where);
#else
    st = use_where ? emc_lookup_ex(sh->c, b.ids, b.offsets, b.rows, b.where, NULL)
                   : emc_lookup(sh->c, b.ids, b.offsets, b.rows, NULL);
#endif
    if (st != EMC_OK) {
      wfail(wk, "reader %u iteration %llu: lookup of %llu ids returned %s (%s)", wk->index,
            (unsigned long long)it, (unsigned long long)k, emc_status_name(st),
            emc_last_error_detail());
      break;
    }
    if (!sh->static_mode)
      for (t = 0; t < sh->n; t++)
        for (i = b.offsets[t]; i < b.offsets[t + 1]; i++)
          if (b.ranks[i] < sh->tb[t].universe) b.hi[i] = LD_ACQ(&sh->started[t][b.ranks[i]]);
    row = b.rows;
    for (t = 0; t < sh->n && !wk->failed; t++) {
      const tinfo *ti = &sh->tb[t];
      for (i = b.offsets[t]; i < b.offsets[t + 1]; i++, row += ti->row_bytes) {
        int where = use_where ? b.where[i] : -1;
        if (use_where) {
          if (where != EMC_WHERE_CACHE && where != EMC_WHERE_STORE && where != EMC_WHERE_ABSENT) {
            wfail(wk, "reader %u: where[%llu] = %d is no emc_where", wk->index,
                  (unsigned long long)i, where);
            break;
          }
          wk->n_cache += where == EMC_WHERE_CACHE;
          wk->n_store += where == EMC_WHERE_STORE;
          wk->n_absent += where == EMC_WHERE_ABSENT;
        }
        if (!check_row(wk, t, b.ranks[i], i, row, where, b.lo[i], b.hi[i], b.scratch)) break;
      }
    }
    if (use_where && b.where[k] != 0xee)
      wfail(wk, "reader %u: lookup_ex wrote where[] past the batch", wk->index);
    wk->positions += k;
    if (!use_where) wk->nowhere_positions += k;
    wk->iters++;
  }
#ifdef EMCT_GPU
  gpu_io_free(&gio);
#endif
  batch_free(&b);
  return NULL;
}

/* ------------------------------------------------------------------- writers */
static void *writer_main(void *arg) {
  worker *wk = arg;
  shared *sh = wk->sh;
  batch b;
  uint64_t it;
  uint32_t t;
  if (!batch_alloc(&b, sh, sh->writer_ids)) {
    wfail(wk, "writer %u: out of memory", wk->index);
    batch_free(&b);
    return NULL;
  }
  for (it = 0; it < sh->writer_iters && !wk->failed; it++) {
    uint64_t k = 0, i;
    unsigned char *row = b.rows;
    emc_status st;
    b.offsets[0] = 0;
    for (t = 0; t < sh->n && !wk->failed; t++) {
      const tinfo *ti = &sh->tb[t];
      uint64_t m = emct_rng_below(&wk->rng, sh->writer_ids + 1);
      for (i = 0; i < m; i++, k++, row += ti->row_bytes) {
        uint64_t r;
        uint32_t g;
        /* this writer's keys only; now and then a duplicate of the previous id */
        if (i > 0 && emct_rng_below(&wk->rng, 8) == 0) r = b.ranks[k - 1];
        else r = pick_rank(wk, ti, sh->n_writers, wk->index);
        g = LD_RLX(&sh->started[t][r]) + 1u;
        if (g > emct_gen_max(ti->dtype)) {
          wfail(wk, "writer %u: table %u rank %llu would need generation %u > %u (test sizes)",
                wk->index, t, (unsigned long long)r, g, emct_gen_max(ti->dtype));
          break;
        }
        ST_REL(&sh->started[t][r], g); /* published before the insert can show it */
        b.ranks[k] = r;
        b.ids[k] = emct_id_of(sh->w, t, r);
        b.gen[k] = g;
        emct_gen_row(t, r, g, ti->dim, ti->dtype, row);
      }
      b.offsets[t + 1] = k;
    }
    if (wk->failed) break;
    st = emc_insert(sh->c, b.ids, b.offsets, b.rows, NULL);
    if (st != EMC_OK) {
      wfail(wk, "writer %u iteration %llu: insert of %llu rows returned %s (%s)", wk->index,
            (unsigned long long)it, (unsigned long long)k, emc_status_name(st),
            emc_last_error_detail());
      break;
    }
    for (t = 0; t < sh->n; t++)
      for (i = b.offsets[t]; i < b.offsets[t + 1]; i++) ST_REL(&sh->done[t][b.ranks[i]], b.gen[i]);
    wk->positions += k;
    wk->iters++;
  }
  batch_free(&b);
  return NULL;
}

/* ------------------------------------------------------------- flush, stats */
static void *flusher_main(void *arg) {
  worker *wk = arg;
  shared *sh = wk->sh;
  while (!wk->failed && (!LD_ACQ(&sh->stop) || wk->iters == 0)) {
    emc_status st = emc_flush(sh->c, NULL);
    if (st != EMC_OK) {
      wfail(wk, "flusher: emc_flush returned %s (%s)", emc_status_name(st), emc_last_error_detail());
      break;
    }
    wk->iters++;
    pause_us(300);
  }
  return NULL;
}

#define STAT_COUNTERS(X)                                                                    \
  X(lookups) X(hits) X(misses) X(absent) X(admissions) X(admit_skipped) X(inserts)          \
  X(evictions) X(writebacks) X(evict_passes) X(retries) X(unified_hits)

static void *stats_main(void *arg) {
  worker *wk = arg;
  shared *sh = wk->sh;
  emc_stats cur, prev;
  int have = 0;
  memset(&prev, 0, sizeof prev);
  while (!wk->failed && (!LD_ACQ(&sh->stop) || wk->iters == 0)) {
    emc_status st = emc_get_stats(sh->c, &cur);
    if (st != EMC_OK) {
      wfail(wk, "stats: emc_get_stats returned %s", emc_status_name(st));
      break;
    }
#define MONO(f)                                                                            \
    if (have && cur.f < prev.f)                                                            \
      wfail(wk, "stats %u: counter " #f " went back from %llu to %llu", wk->index,         \
            (unsigned long long)prev.f, (unsigned long long)cur.f);
    STAT_COUNTERS(MONO)
#undef MONO
    if (cur.bytes_in_use > sh->high_bytes)
      wfail(wk, "stats %u: bytes_in_use %llu > t1 * capacity %llu", wk->index,
            (unsigned long long)cur.bytes_in_use, (unsigned long long)sh->high_bytes);
    if (cur.capacity_bytes != sh->capacity || cur.index_bytes != sh->index_bytes)
      wfail(wk, "stats %u: capacity %llu / index bytes %llu changed (were %llu / %llu)", wk->index,
            (unsigned long long)cur.capacity_bytes, (unsigned long long)cur.index_bytes,
            (unsigned long long)sh->capacity, (unsigned long long)sh->index_bytes);
    if (sh->static_mode && (cur.inserts || cur.dirty_rows || cur.writebacks))
      wfail(wk, "stats %u: inserts %llu dirty %llu writebacks %llu without writers", wk->index,
            (unsigned long long)cur.inserts, (unsigned long long)cur.dirty_rows,
            (unsigned long long)cur.writebacks);
    prev = cur;
    have = 1;
    wk->iters++;
    pause_us(50);
  }
  wk->last = prev;
  return NULL;
}

/* --------------------------------------------------------------- the runner */
/* The white-box check of the backend under test, and the invariants emct_check_cache adds
 * for the host backend. */
static void check_cache(emc_cache *c, const emct_world *w, int no_inserts, const char *what) {
#ifdef EMCT_GPU
  emc_stats s;
  emc_status st = emc__cuda_check(c);
  (void)w;
  (void)no_inserts;
  ck_assert_msg(st == EMC_OK, "%s: emc__cuda_check: %s (%s)", what, emc_status_name(st),
                emc_last_error_detail());
  EMCT_OK(emc_get_stats(c, &s));
  ck_assert_msg(s.hits + s.misses + s.absent == s.lookups, "%s: counters do not add up", what);
#else
  emct_check_cache(c, w, no_inserts, what);
#endif
}

typedef struct run_config {
  const char *name;
  uint32_t n;
  emct_tspec spec[MAX_TABLES];
  size_t capacity;
  float t1, t2;
  uint32_t key_bits;
  uint64_t unified_rows;
  uint32_t readers, writers, flushers, statters;
  uint64_t reader_iters, writer_iters, big_iters; /* before emct_scale */
  uint32_t reader_ids, writer_ids, big_ids;
} run_config;

typedef struct run_totals {
  uint64_t positions, nowhere, cache, store, absent, inserted, range_errors;
  uint64_t retries, evictions, writebacks, unified; /* the cache's counters */
} run_totals;

static void start_all(worker *wk, uint32_t n, shared *sh, uint64_t seed, void *(*fn)(void *)) {
  uint32_t i;
  for (i = 0; i < n; i++) {
    memset(&wk[i], 0, sizeof wk[i]);
    wk[i].sh = sh;
    wk[i].index = i;
    emct_rng_seed(&wk[i].rng, seed * 1000003u + i);
    ck_assert_int_eq(pthread_create(&wk[i].th, NULL, fn, &wk[i]), 0);
  }
}

static void join_all(worker *wk, uint32_t n) {
  uint32_t i;
  for (i = 0; i < n; i++) ck_assert_int_eq(pthread_join(wk[i].th, NULL), 0);
}

static void assert_workers(const worker *wk, uint32_t n, const char *role, const char *what) {
  uint32_t i;
  for (i = 0; i < n; i++)
    ck_assert_msg(!wk[i].failed, "%s: %s %u: %s", what, role, i, wk[i].err);
}

/* Read every rank of every table from the store and check it holds generation done[t][r]. */
static void check_store_final(const shared *sh, const char *what) {
  uint32_t t;
  unsigned char *buf = malloc((size_t)EMC_MAX_DIM * 4), *scratch = malloc((size_t)EMC_MAX_DIM * 4);
  ck_assert(buf && scratch);
  for (t = 0; t < sh->n; t++) {
    const tinfo *ti = &sh->tb[t];
    uint64_t r, count = 0, have = 0;
    for (r = 0; r < ti->universe; r++) {
      uint64_t id = emct_id_of(sh->w, t, r);
      uint32_t g = sh->done[t][r];
      ck_assert_msg(g == sh->started[t][r], "%s: table %u rank %llu: started %u != done %u", what,
                    t, (unsigned long long)r, sh->started[t][r], g);
      EMCT_OK(emc_store_read(sh->store, t, &id, 1, buf));
      if (g == 0) {
        ck_assert_msg(emct_is_zero(buf, ti->row_bytes),
                      "%s: store table %u id %llu (rank %llu) never written but not zero", what,
                      t, (unsigned long long)id, (unsigned long long)r);
      } else {
        int64_t got = emct_gen_decode(t, r, ti->dim, ti->dtype, buf, scratch);
        ck_assert_msg(got == (int64_t)g,
                      "%s: store table %u (%s %s) id %llu (rank %llu) holds generation %lld, the "
                      "last inserted is %u", what, t, kind_name(ti->kind), dtype_name(ti->dtype),
                      (unsigned long long)id, (unsigned long long)r, (long long)got, g);
        count++;
      }
    }
    if (ti->kind == EMC_TABLE_HASHED) {
      EMCT_OK(emc_store_table_count(sh->store, t, &have));
      ck_assert_msg(have == count, "%s: hashed table %u holds %llu ids, %llu were written", what, t,
                    (unsigned long long)have, (unsigned long long)count);
    }
  }
  free(buf);
  free(scratch);
}

/* Quiescent lookup of every rank of every table: exactly the last generation. */
static void check_lookup_final(const shared *sh, const char *what) {
  uint64_t offsets[MAX_TABLES + 1], total = 0, k = 0, r, i;
  uint64_t *ids, *ranks;
  uint8_t *where;
  unsigned char *out, *row, *scratch = malloc((size_t)EMC_MAX_DIM * 4);
  size_t bytes = 0;
  uint32_t t;
  for (t = 0; t < sh->n; t++) {
    total += sh->tb[t].universe;
    bytes += sh->tb[t].universe * sh->tb[t].row_bytes;
  }
  ids = malloc(total * sizeof *ids);
  ranks = malloc(total * sizeof *ranks);
  where = malloc(total);
  out = malloc(bytes);
  ck_assert(ids && ranks && where && out && scratch);
  offsets[0] = 0;
  for (t = 0; t < sh->n; t++) {
    for (r = 0; r < sh->tb[t].universe; r++, k++) {
      ranks[k] = r;
      ids[k] = emct_id_of(sh->w, t, r);
    }
    offsets[t + 1] = k;
  }
  EMCT_OK(emc_lookup_ex(sh->c, ids, offsets, out, where, NULL));
  row = out;
  for (t = 0; t < sh->n; t++) {
    const tinfo *ti = &sh->tb[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, row += ti->row_bytes) {
      uint32_t g = sh->done[t][ranks[i]];
      if (g == 0) {
        ck_assert_msg(emct_is_zero(row, ti->row_bytes) && where[i] == EMC_WHERE_ABSENT,
                      "%s: table %u rank %llu never written: where %u, zero %d", what, t,
                      (unsigned long long)ranks[i], where[i], emct_is_zero(row, ti->row_bytes));
      } else {
        int64_t got = emct_gen_decode(t, ranks[i], ti->dim, ti->dtype, row, scratch);
        ck_assert_msg(got == (int64_t)g && where[i] != EMC_WHERE_ABSENT,
                      "%s: table %u (%s %s) rank %llu: quiescent lookup gave generation %lld "
                      "(where %u), the last inserted is %u", what, t, kind_name(ti->kind),
                      dtype_name(ti->dtype), (unsigned long long)ranks[i], (long long)got,
                      where[i], g);
      }
    }
  }
  free(ids); free(ranks); free(where); free(out); free(scratch);
}

/* Quiescent: a lookup whose ids miss admits them (nothing holds the writer lock, nothing is
 * pinned), and every miss is counted as admitted or skipped. */
static void check_admission(const shared *sh, const char *what) {
  const tinfo *ti = &sh->tb[0];
  uint64_t offsets[MAX_TABLES + 1], ids[64], n = ti->universe < 64 ? ti->universe : 64, i, misses = 0;
  uint8_t where[64];
  unsigned char *out = malloc(64 * (size_t)ti->row_bytes);
  emc_stats a, b;
  uint32_t t;
  ck_assert(out);
  offsets[0] = 0;
  for (t = 1; t <= sh->n; t++) offsets[t] = n;
  for (i = 0; i < n; i++) ids[i] = emct_id_of(sh->w, 0, i);
  EMCT_OK(emc_get_stats(sh->c, &a));
  EMCT_OK(emc_lookup_ex(sh->c, ids, offsets, out, where, NULL));
#ifdef EMCT_GPU
  EMCT_OK(emc_flush(sh->c, NULL)); /* the misses are admitted by the writer call after it */
#endif
  EMCT_OK(emc_get_stats(sh->c, &b));
  for (i = 0; i < n; i++) misses += where[i] == EMC_WHERE_STORE;
  ck_assert_msg(b.admissions - a.admissions + b.admit_skipped - a.admit_skipped == misses,
                "%s: a quiescent lookup missed %llu rows, admitted %llu and skipped %llu", what,
                (unsigned long long)misses, (unsigned long long)(b.admissions - a.admissions),
                (unsigned long long)(b.admit_skipped - a.admit_skipped));
  ck_assert_msg(misses == 0 || b.admissions > a.admissions,
                "%s: a quiescent lookup admitted none of its %llu misses (%llu skipped)", what,
                (unsigned long long)misses, (unsigned long long)(b.admit_skipped - a.admit_skipped));
  free(out);
}

/* One run of rc's configuration under `seed`, its readers and writers doing `iter_pct` % of
 * rc's iterations; adds what it did to *sum. */
static void run_traffic(const run_config *rc, uint64_t seed, uint32_t iter_pct, run_totals *sum) {
  emct_world w;
  shared sh;
  emc_cache_config cfg;
  emc__cache_debug dbg;
  emc_stats s0, s;
  worker *rd, *wr, *fl, *stt;
  run_totals tot;
  uint32_t t, i;
  int static_mode = rc->writers == 0;
  char what[128];

  emct_world_init(&w, rc->spec, rc->n, 1.0, seed);
  memset(&sh, 0, sizeof sh);
  memset(&tot, 0, sizeof tot);
  sh.w = &w;
  sh.store = w.store;
  sh.n = rc->n;
  sh.static_mode = static_mode;
  sh.n_writers = rc->writers ? rc->writers : 1;
  sh.reader_iters = emct_gpu_scale(emct_scale(rc->reader_iters * iter_pct / 100 + 1, 3), 16);
  sh.writer_iters = emct_gpu_scale(emct_scale(rc->writer_iters * iter_pct / 100 + 1, 3), 16);
  sh.reader_ids = rc->reader_ids;
  sh.writer_ids = rc->writer_ids;
  sh.big_ids = rc->big_ids;
  sh.big_iters = emct_scale(rc->big_iters * iter_pct / 100 + 1, 3);
  ck_assert(rc->n <= MAX_TABLES);
  for (t = 0; t < rc->n; t++) {
    tinfo *ti = &sh.tb[t];
    uint64_t r;
    ti->kind = w.spec[t].kind;
    ti->dtype = w.spec[t].dtype;
    ti->dim = w.spec[t].dim;
    ti->row_bytes = w.row_bytes[t];
    ti->universe = w.spec[t].universe;
    ti->present = w.spec[t].present;
    ck_assert_msg((static_mode || ti->universe <= EMCT_GEN_MAX_UNIVERSE) && ti->universe >= HOT,
                  "test sizes: universe");
    ck_assert_msg(ti->kind == EMC_TABLE_DENSE || ti->universe <= w.spec[t].rows,
                  "test sizes: hashed capacity below the universe");
    sh.started[t] = calloc(ti->universe, sizeof(uint32_t));
    sh.done[t] = calloc(ti->universe, sizeof(uint32_t));
    ck_assert(sh.started[t] && sh.done[t]);
    if (static_mode) continue;
    /* generation 1 of every present rank, written to the store before the cache exists */
    {
      unsigned char *rows = malloc(ti->present * ti->row_bytes + 1);
      uint64_t *ids = malloc((ti->present + 1) * sizeof *ids);
      ck_assert(rows && ids);
      for (r = 0; r < ti->present; r++) {
        ids[r] = emct_id_of(&w, t, r);
        emct_gen_row(t, r, 1, ti->dim, ti->dtype, rows + r * ti->row_bytes);
        sh.started[t][r] = sh.done[t][r] = 1;
      }
      EMCT_OK(emc_store_write(w.store, t, ids, ti->present, rows));
      free(rows);
      free(ids);
    }
  }

  emct_cache_config_init(&cfg);
  cfg.backend = EMCT_GPU_ON ? EMC_BACKEND_CUDA : EMC_BACKEND_HOST;
  cfg.capacity_bytes = rc->capacity;
  if (rc->t1 > 0) cfg.evict_high = rc->t1;
  if (rc->t2 > 0) cfg.evict_low = rc->t2;
  if (rc->key_bits) cfg.key_bits = rc->key_bits;
  cfg.unified_index_rows = rc->unified_rows;
  cfg.hash_seed = seed;
  EMCT_OK(emc_cache_create(w.store, &cfg, &sh.c));
  EMCT_OK(emc_get_stats(sh.c, &s0));
#ifdef EMCT_GPU
  (void)dbg; /* host-backend counters; t1 as the pool geometry computes it */
  sh.high_bytes = (uint64_t)((double)cfg.capacity_bytes * cfg.evict_high);
#else
  EMCT_OK(emc__cache_get_debug(sh.c, &dbg));
  sh.high_bytes = dbg.high_bytes;
#endif
  sh.capacity = s0.capacity_bytes;
  sh.index_bytes = s0.index_bytes;

  rd = calloc(rc->readers + 1, sizeof *rd);
  wr = calloc(rc->writers + 1, sizeof *wr);
  fl = calloc(rc->flushers + 1, sizeof *fl);
  stt = calloc(rc->statters + 1, sizeof *stt);
  ck_assert(rd && wr && fl && stt);
  start_all(stt, rc->statters, &sh, seed + 4, stats_main);
  start_all(fl, rc->flushers, &sh, seed + 3, flusher_main);
  start_all(wr, rc->writers, &sh, seed + 2, writer_main);
  start_all(rd, rc->readers, &sh, seed + 1, reader_main);
  join_all(rd, rc->readers);
  join_all(wr, rc->writers);
  ST_REL(&sh.stop, 1);
  join_all(fl, rc->flushers);
  join_all(stt, rc->statters);

  snprintf(what, sizeof what, "%s (seed %llu)", rc->name, (unsigned long long)seed);
  assert_workers(rd, rc->readers, "reader", what);
  assert_workers(wr, rc->writers, "writer", what);
  assert_workers(fl, rc->flushers, "flusher", what);
  assert_workers(stt, rc->statters, "stats thread", what);
  for (i = 0; i < rc->readers; i++) {
    uint64_t want = i == 0 && sh.big_ids ? sh.big_iters : sh.reader_iters;
    ck_assert_msg(rd[i].iters == want, "%s: reader %u ran %llu of %llu iterations", what, i,
                  (unsigned long long)rd[i].iters, (unsigned long long)want);
    tot.positions += rd[i].positions;
    tot.nowhere += rd[i].nowhere_positions;
    tot.cache += rd[i].n_cache;
    tot.store += rd[i].n_store;
    tot.absent += rd[i].n_absent;
    tot.range_errors += rd[i].range_errors;
  }
  for (i = 0; i < rc->writers; i++) {
    ck_assert_msg(wr[i].iters == sh.writer_iters, "%s: writer %u ran %llu of %llu iterations", what,
                  i, (unsigned long long)wr[i].iters, (unsigned long long)sh.writer_iters);
    tot.inserted += wr[i].positions;
  }
  for (i = 0; i < rc->flushers; i++)
    ck_assert_msg(fl[i].iters > 0, "%s: flusher %u never ran", what, i);

  /* counters after the traffic: exact where the test knows the numbers */
  EMCT_OK(emc_get_stats(sh.c, &s));
  for (i = 0; i < rc->statters; i++) {
    ck_assert_msg(stt[i].iters > 0, "%s: stats thread %u never ran", what, i);
#define NOT_AHEAD(f)                                                                       \
    ck_assert_msg(stt[i].last.f <= s.f, "%s: stats thread %u saw " #f " %llu > final %llu", \
                  what, i, (unsigned long long)stt[i].last.f, (unsigned long long)s.f);
    STAT_COUNTERS(NOT_AHEAD)
#undef NOT_AHEAD
  }
  ck_assert_msg(s.lookups == tot.positions, "%s: lookups %llu, the readers looked up %llu", what,
                (unsigned long long)s.lookups, (unsigned long long)tot.positions);
  ck_assert_msg(s.hits + s.misses + s.absent == s.lookups,
                "%s: hits %llu + misses %llu + absent %llu != lookups %llu", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent, (unsigned long long)s.lookups);
  ck_assert_msg(s.hits >= tot.cache && s.misses >= tot.store && s.absent >= tot.absent &&
                    s.hits - tot.cache + s.misses - tot.store + s.absent - tot.absent == tot.nowhere,
                "%s: stats (hits %llu, misses %llu, absent %llu) disagree with where[] (cache "
                "%llu, store %llu, absent %llu, plus %llu positions without where)", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent, (unsigned long long)tot.cache,
                (unsigned long long)tot.store, (unsigned long long)tot.absent,
                (unsigned long long)tot.nowhere);
  if (tot.nowhere == 0)
    ck_assert_msg(s.hits == tot.cache && s.misses == tot.store && s.absent == tot.absent,
                  "%s: stats and where[] disagree", what);
  ck_assert_msg(s.inserts == tot.inserted, "%s: inserts %llu, the writers inserted %llu rows",
                what, (unsigned long long)s.inserts, (unsigned long long)tot.inserted);
  ck_assert_msg(s.hits > 0 && s.misses > 0, "%s: no hits (%llu) or no misses (%llu)", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses);
  ck_assert_msg(s.evictions > 0 && s.evict_passes > 0,
                "%s: the cache never evicted (evictions %llu, passes %llu): too large for the test",
                what, (unsigned long long)s.evictions, (unsigned long long)s.evict_passes);
  /* a lookup admits only when it wins the writer lock's trylock: under load every try may lose,
   * so the traffic only proves the admission path ran; check_admission proves it admits */
  ck_assert_msg(s.admissions + s.admit_skipped > 0, "%s: no admission was tried", what);
  if (!static_mode) ck_assert_msg(s.writebacks > 0, "%s: no write-backs", what);
  sum->positions += tot.positions;
  sum->cache += tot.cache;
  sum->store += tot.store;
  sum->absent += tot.absent;
  sum->nowhere += tot.nowhere;
  sum->inserted += tot.inserted;
  sum->range_errors += tot.range_errors;
  sum->retries += s.retries;
  sum->evictions += s.evictions;
  sum->writebacks += s.writebacks;
  sum->unified += s.unified_hits;
  check_cache(sh.c, &w, static_mode, what);
  check_admission(&sh, what);

  if (static_mode) {
    emct_world_check_store(&w, what); /* lookups never change the store */
  } else {
    EMCT_OK(emc_flush(sh.c, NULL));
    EMCT_OK(emc_get_stats(sh.c, &s));
    ck_assert_msg(s.dirty_rows == 0, "%s: %llu dirty rows after emc_flush", what,
                  (unsigned long long)s.dirty_rows);
    check_store_final(&sh, what);
    check_lookup_final(&sh, what);
    check_cache(sh.c, &w, 0, what);
  }
  EMCT_OK(emc_cache_destroy(sh.c));
  if (static_mode) emct_world_check_store(&w, what);
  else check_store_final(&sh, what);

  if (getenv("EMCT_VERBOSE"))
    fprintf(stderr,
            "%s: %llu lookups (hits %llu, misses %llu, absent %llu, unified %llu, retries %llu"
            "), %llu inserts, %llu admissions (%llu skipped), %llu evictions "
            "in %llu passes, %llu write-backs, %llu refused lookups\n",
            what, (unsigned long long)s.lookups, (unsigned long long)s.hits,
            (unsigned long long)s.misses, (unsigned long long)s.absent,
            (unsigned long long)s.unified_hits, (unsigned long long)s.retries,
            (unsigned long long)s.inserts,
            (unsigned long long)s.admissions, (unsigned long long)s.admit_skipped,
            (unsigned long long)s.evictions, (unsigned long long)s.evict_passes,
            (unsigned long long)s.writebacks, (unsigned long long)tot.range_errors);

  for (t = 0; t < rc->n; t++) {
    free(sh.started[t]);
    free(sh.done[t]);
  }
  free(rd); free(wr); free(fl); free(stt);
  emct_world_free(&w);
}

/* ------------------------------------------------------------------ seeds and time
 * Each test case runs its configuration under several seeds (each seed gives other hashed
 * ids, another key codec seed, other thread schedules): EMCT_SEEDS of them (default 4, 2 under
 * sanitizers), each doing 100 / seeds % of the case's iterations (at least a quarter). With
 * EMCT_THREADS_SECONDS=S the suite hunts for S seconds instead: each case draws new seeds at
 * full iterations until its share of S has passed. Every case prints what it checked. */
static uint32_t n_cases = 1; /* test cases of the suite, set by main (shares of the time) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  char *end;
  unsigned long long x;
  if (!v || !*v) return dflt;
  x = strtoull(v, &end, 10);
  ck_assert_msg(*end == '\0', "%s=%s is not a number", name, v);
  return x;
}

static void run_seeds(const run_config *rc, uint64_t base) {
  uint64_t hunt_s = env_u64("EMCT_THREADS_SECONDS", 0);
  uint64_t seeds = env_u64("EMCT_SEEDS", EMCT_SANITIZED || emct_gpu_quick() ? 2 : 4), k;
  uint32_t pct = seeds >= 4 ? 25u : (uint32_t)(100 / (seeds ? seeds : 1));
  double t0 = now_s(), share = hunt_s ? (double)hunt_s / n_cases : 0.0;
  run_totals sum;
  memset(&sum, 0, sizeof sum);
  if (pct > 100) pct = 100;
  if (hunt_s) pct = 100;
  for (k = 0; hunt_s ? (k == 0 || now_s() - t0 < share) : k < seeds; k++)
    run_traffic(rc, base + 1000u * k, pct, &sum);
  fprintf(stderr,
          "test_threads: %s: %llu seeds (%llu, %llu, ...) in %.1f s: %llu rows looked up and "
          "checked (cache %llu, store %llu, absent %llu, %llu without where), %llu inserted; "
          "%llu retries, %llu evictions, %llu write-backs, %llu unified-entry reads\n",
          rc->name, (unsigned long long)k, (unsigned long long)base,
          (unsigned long long)(base + 1000u), now_s() - t0, (unsigned long long)sum.positions,
          (unsigned long long)sum.cache, (unsigned long long)sum.store,
          (unsigned long long)sum.absent, (unsigned long long)sum.nowhere,
          (unsigned long long)sum.inserted, (unsigned long long)sum.retries,
          (unsigned long long)sum.evictions, (unsigned long long)sum.writebacks,
          (unsigned long long)sum.unified);
}

#ifdef EMCT_GPU
/* Four reader streams (device buffers) and writer threads inserting generation-encoded rows,
 * the cache evicting all along: every row a value its key legitimately held. */
START_TEST(gpu_four_streams_one_writer) {
  run_config rc = {
      .name = "gpu: 4 reader streams, 1 writer, mixed tables, 32-bit keys",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 8, EMC_DTYPE_F16, 900, 300},
               {EMC_TABLE_DENSE, 600, 33, EMC_DTYPE_F16, 0, 0}},
      .capacity = 48u << 10,
      .key_bits = 32,
      .unified_rows = 64,
      .readers = 4, .writers = 1, .flushers = 1, .statters = 1,
      .reader_iters = 4000, .writer_iters = 2000,
      .reader_ids = 48, .writer_ids = 16};
  run_seeds(&rc, 133);
}
END_TEST

START_TEST(gpu_four_streams_two_writers_hashed) {
  run_config rc = {
      .name = "gpu: 4 reader streams, 2 writers, hashed f32, unified entries",
      .n = 1,
      .spec = {{EMC_TABLE_HASHED, 1024, 12, EMC_DTYPE_F32, 1000, 500}},
      .capacity = 16u << 10,
      .t1 = 0.9f, .t2 = 0.6f,
      .unified_rows = 96,
      .readers = 4, .writers = 2, .flushers = 0, .statters = 1,
      .reader_iters = 4000, .writer_iters = 2000,
      .reader_ids = 48, .writer_ids = 12};
  run_seeds(&rc, 122);
}
END_TEST

START_TEST(gpu_four_streams_lookups_only) {
  run_config rc = {
      .name = "gpu: 4 reader streams, lookups only",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 24, EMC_DTYPE_F16, 800, 400},
               {EMC_TABLE_DENSE, 512, 5, EMC_DTYPE_F32, 0, 0}},
      .capacity = 32u << 10,
      .unified_rows = 128,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 4000,
      .reader_ids = 32};
  run_seeds(&rc, 144);
}
END_TEST

int main(void) {
  int failed;
  Suite *s;
  TCase *tc;
  SRunner *sr;
  if (!emct_gpu_present("test_gpu_threads")) return 77;
  s = suite_create("gpu_threads");
  tc = tcase_create("concurrency");
  tcase_add_test(tc, gpu_four_streams_one_writer);
  tcase_add_test(tc, gpu_four_streams_two_writers_hashed);
  tcase_add_test(tc, gpu_four_streams_lookups_only);
  n_cases = 3;
  tcase_set_timeout(tc, 600.0 + 2.0 * (double)env_u64("EMCT_THREADS_SECONDS", 0) / n_cases);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
#else
/* ------------------------------------------------------------------- tests */
/* dense f32 only: 3 readers, 1 writer, 1 flusher, 1 stats thread; about a third of the rows fit */
START_TEST(readers_writer_dense_f32) {
  run_config rc = {
      .name = "dense f32",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0}},
      .capacity = 24u << 10,
      .unified_rows = 0,
      .readers = 3, .writers = 1, .flushers = 1, .statters = 1,
      .reader_iters = 30000, .writer_iters = 30000,
      .reader_ids = 48, .writer_ids = 16};
  run_seeds(&rc, 11);
}
END_TEST

/* hashed f32 only, half the ids present at start, the rest created by inserts; 2 writers;
 * a few unified-index entries, so they are created, dropped and turned back into slots */
START_TEST(readers_writers_hashed_f32) {
  run_config rc = {
      .name = "hashed f32",
      .n = 1,
      .spec = {{EMC_TABLE_HASHED, 1024, 12, EMC_DTYPE_F32, 1000, 500}},
      .capacity = 16u << 10,
      .t1 = 0.9f, .t2 = 0.6f,
      .unified_rows = 96,
      .readers = 3, .writers = 2, .flushers = 1, .statters = 1,
      .reader_iters = 30000, .writer_iters = 20000,
      .reader_ids = 48, .writer_ids = 12};
  run_seeds(&rc, 22);
}
END_TEST

/* three tables in every batch: dense f32, hashed f16, dense f16 with an odd row size (66
 * bytes: rows that end inside a 4-byte word); 32-bit keys; 2 writers, 2 stats threads */
START_TEST(readers_writers_mixed_f16) {
  run_config rc = {
      .name = "mixed dense/hashed f32/f16",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 8, EMC_DTYPE_F16, 900, 300},
               {EMC_TABLE_DENSE, 600, 33, EMC_DTYPE_F16, 0, 0}},
      .capacity = 48u << 10,
      .key_bits = 32,
      .unified_rows = 64,
      .readers = 3, .writers = 2, .flushers = 1, .statters = 2,
      .reader_iters = 20000, .writer_iters = 10000,
      .reader_ids = 24, .writer_ids = 8};
  run_seeds(&rc, 33);
}
END_TEST

/* no writers: 4 readers and 2 stats threads over uniform rows; every row must equal the
 * store's, where[] is exact, and the store is untouched */
START_TEST(concurrent_lookups_only) {
  run_config rc = {
      .name = "lookups only",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 24, EMC_DTYPE_F16, 800, 400},
               {EMC_TABLE_DENSE, 512, 5, EMC_DTYPE_F32, 0, 0}},
      .capacity = 32u << 10,
      .unified_rows = 128,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 2,
      .reader_iters = 30000,
      .reader_ids = 32};
  run_seeds(&rc, 44);
}
END_TEST

/* A slow reader: reader 0 looks up batches of 4096 hot ids, so the clock value it took at the
 * start of a call is old by the time it copies (and stamps) its hits, while three readers with
 * small batches keep the clock moving and eviction passes running. Its stamps can be older
 * than every stamp an eviction pass saw in its first scan. */
START_TEST(slow_reader_old_stamps) {
  run_config rc = {
      .name = "slow reader",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1024, 8, EMC_DTYPE_F32, 0, 0}},
      .capacity = 12u << 10,
      .unified_rows = 0,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 40000, .big_iters = 300,
      .reader_ids = 8, .big_ids = 4096};
  run_seeds(&rc, 66);
}
END_TEST

/* Many small rows (4 bytes) in a larger cache: eviction passes scan tens of thousands of
 * slots while six readers with more threads than cores (so readers are preempted in the
 * middle of a lookup) keep hitting and stamping slots. */
START_TEST(many_readers_long_passes) {
  run_config rc = {
      .name = "long passes",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1u << 17, 1, EMC_DTYPE_F32, 0, 0}},
      .capacity = 48u << 10, /* fills within the sanitizers' third of the iterations */
      .t1 = 0.95f, .t2 = 0.93f,
      .unified_rows = 0,
      .readers = 6, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 10000,
      .reader_ids = 64};
  run_seeds(&rc, 77);
}
END_TEST

/* emc_get_stats from four threads at once, while readers, a writer and a flusher run */
START_TEST(concurrent_stats) {
  run_config rc = {
      .name = "stats",
      .n = 2,
      .spec = {{EMC_TABLE_DENSE, 512, 8, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 512, 8, EMC_DTYPE_F32, 512, 256}},
      .capacity = 12u << 10,
      .unified_rows = 32,
      .readers = 2, .writers = 1, .flushers = 1, .statters = 4,
      .reader_iters = 10000, .writer_iters = 10000,
      .reader_ids = 16, .writer_ids = 8};
  run_seeds(&rc, 55);
}
END_TEST

int main(void) {
  Suite *s = suite_create("threads");
  TCase *tc = tcase_create("concurrency");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, readers_writer_dense_f32);
  tcase_add_test(tc, readers_writers_hashed_f32);
  tcase_add_test(tc, readers_writers_mixed_f16);
  tcase_add_test(tc, concurrent_lookups_only);
  tcase_add_test(tc, concurrent_stats);
  tcase_add_test(tc, slow_reader_old_stamps);
  tcase_add_test(tc, many_readers_long_passes);
  n_cases = 7;
  /* a hunt's case runs its share of the time, then finishes the seed under way */
  /* 4 s of work on an idle 2-core machine; the margin is for a machine that runs other suites */
  tcase_set_timeout(tc, emct_timeout(120) + 2.0 * (double)env_u64("EMCT_THREADS_SECONDS", 0) / n_cases);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
#endif
