/*
 * threads_workers.c: test_threads' threads (threads_common.h): readers, writers, flushers and
 * stats readers, each recording its first failure for the main thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "threads_common.h"

void wfail(worker *wk, const char *fmt, ...) {
  va_list ap;
  if (wk->failed) return;
  wk->failed = 1;
  va_start(ap, fmt);
  vsnprintf(wk->err, sizeof wk->err, fmt, ap);
  va_end(ap);
}

void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

const char *kind_name(emc_table_kind k) { return k == EMC_TABLE_DENSE ? "dense" : "hashed"; }
const char *dtype_name(emc_dtype d) { return d == EMC_DTYPE_F32 ? "f32" : "f16"; }

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

void *reader_main(void *arg) {
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
void *writer_main(void *arg) {
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
void *flusher_main(void *arg) {
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

void *stats_main(void *arg) {
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
