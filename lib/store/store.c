/*
 * store.c: the CPU embedding store, the source of truth for every row.
 *
 * Each table's rows live in one page-aligned emc__alloc_in block (one arena per store) at
 * the stride emc__row_stride(row_bytes). Hashed tables add a flat open-addressing map
 * id -> row (linear probing, power-of-two capacity >= 2 * rows, never deleted from) and an
 * append-only row -> id array, which lets the cache validate a unified-index entry.
 *
 * Concurrency: readers never lock. Row contents are protected by striped versions
 * (emc__store_row_read/write); map slots are published id first, then row + 1 with release.
 * Writers of a private store are serialized by the store lock, or by the attached cache's
 * writer lock (the store refuses direct writes while a cache is attached). A shared store
 * (shared.c) serves any number of caches in any process: every writer, a cache's too, takes
 * the segment's lock, and announces and publishes what it writes in the update log
 * (seg_log.c), by which the caches drop their copies.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

size_t emc_dtype_size(emc_dtype d) {
  return d == EMC_DTYPE_F32 ? 4 : d == EMC_DTYPE_F16 ? 2 : 0;
}

/* ----------------------------------------------------------------- create/destroy */
static void table_free(const emc_store *s, emc__table *t) {
  free(t->name);
  if (!s->seg) { /* a shared store's tables live in its segment (unmapped by store_free) */
    emc__free(t->base, t->base_bytes);
    emc__free(t->map_ids, t->map_cap * sizeof(uint64_t));
    emc__free(t->map_rowp1, t->map_cap * sizeof(uint64_t));
    emc__free(t->row_ids, t->rows * sizeof(uint64_t));
  }
  memset(t, 0, sizeof *t);
}

static void store_free(emc_store *s) {
  uint32_t i;
  if (!s) return;
  for (i = 0; i < s->n_tables; i++) table_free(s, &s->tables[i]);
  free(s->tables);
  if (s->seg) emc__seg_unmap(s);
  else free(s->stripes);
  free(s->seg_name);
  emc__arena_destroy(s->arena);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

emc_status emc__table_desc_check(const emc_table_desc *d, uint32_t i) {
  if (d->kind != EMC_TABLE_DENSE && d->kind != EMC_TABLE_HASHED)
    return EMC_FAIL(EMC_EINVAL, "table %u: kind %d is neither dense nor hashed", i, (int)d->kind);
  if (d->dtype != EMC_DTYPE_F32 && d->dtype != EMC_DTYPE_F16)
    return EMC_FAIL(EMC_EINVAL, "table %u: dtype %d is neither f32 nor f16", i, (int)d->dtype);
  if (d->rows == 0 || d->rows > EMC_MAX_ROWS)
    return EMC_FAIL(EMC_EINVAL, "table %u: rows = %llu, must be 1..2^40", i,
                    (unsigned long long)d->rows);
  if (d->dim == 0 || d->dim > EMC_MAX_DIM)
    return EMC_FAIL(EMC_EINVAL, "table %u: dim = %u, must be 1..%u", i, d->dim, EMC_MAX_DIM);
  if (d->name && strlen(d->name) > 255)
    return EMC_FAIL(EMC_EINVAL, "table %u: name longer than 255 bytes", i);
  if (d->state != EMC_STATE_NONE && d->state != EMC_STATE_ADAGRAD)
    return EMC_FAIL(EMC_EINVAL, "table %u: state %d is neither NONE nor ADAGRAD", i,
                    (int)d->state);
  return EMC_OK;
}

/* A zeroed block of whole pages for table memory: a CUDA cache registers (pins) the store's
 * blocks with the device, which pins whole pages, so no two stores' blocks may share a page
 * (two caches over stores whose blocks shared a page failed with
 * cudaErrorHostMemoryAlreadyRegistered: defect 10 of the GPU pre-flight review). */
static void *table_block(const emc_store *s, size_t bytes) {
  if (bytes > SIZE_MAX - 4095) return NULL;
  return emc__alloc_in(s->arena, (bytes + 4095) & ~(size_t)4095, 4096, 1);
}

/* Table i's shape from its descriptor: every field but the memory (base, the map, row_ids);
 * sizes overflow-checked. *map_bytes and *ids_bytes: a hashed table's map arrays and row ids
 * (0 for dense). The private store and the shared segment (shared.c) size tables with it. */
emc_status emc__table_shape(emc__table *t, uint32_t i, const emc_table_desc *d,
                            size_t *map_bytes, size_t *ids_bytes) {
  const char *nm = t->name ? t->name : "";
  t->count = &t->count_own;
  t->kind = d->kind;
  t->dtype = d->dtype;
  t->dim = d->dim;
  t->row_bytes = (uint32_t)(d->dim * emc_dtype_size(d->dtype));
  t->state = (uint32_t)d->state;
  t->state_off = (t->row_bytes + 3u) & ~3u;
  t->full_bytes = emc__full_bytes(t->row_bytes, t->state);
  t->stride = (uint32_t)emc__row_stride(t->full_bytes);
  t->rows = d->rows;
  *map_bytes = *ids_bytes = 0;
  if (!emc__size_mul64(t->rows, t->stride, &t->base_bytes))
    return EMC_FAIL(EMC_ENOMEM, "table %u ('%s'): %llu rows of %u bytes overflow", i, nm,
                    (unsigned long long)t->rows, t->stride);
  if (t->kind == EMC_TABLE_HASHED) {
    uint64_t cap = emc__u64_pow2_at_least(2 * t->rows, 16); /* rows <= 2^40: no wrap */
    if (cap == 0 || !emc__size_mul64(cap, sizeof(uint64_t), map_bytes) ||
        !emc__size_mul64(t->rows, sizeof(uint64_t), ids_bytes))
      return EMC_FAIL(EMC_ENOMEM, "table %u ('%s'): the id map of %llu rows overflows", i, nm,
                      (unsigned long long)t->rows);
    t->map_cap = cap;
  }
  return EMC_OK;
}

/* Table i's name: d's, or "t<i>" (a malloc'ed copy). */
emc_status emc__table_name(emc__table *t, uint32_t i, const char *name) {
  char buf[32];
  if (!name) {
    snprintf(buf, sizeof buf, "t%u", i);
    name = buf;
  }
  t->name = emc__malloc(strlen(name) + 1);
  if (!t->name) return EMC_FAIL(EMC_ENOMEM, "table %u: name", i);
  strcpy(t->name, name);
  return EMC_OK;
}

/* Allocate table i's memory from its descriptor (rows zero, map empty). */
emc_status emc__table_init(emc_store *s, uint32_t i, const emc_table_desc *d) {
  emc__table *t = &s->tables[i];
  size_t map_bytes, ids_bytes;
  uint64_t cap;
  EMC_TRY(emc__table_name(t, i, d->name));
  EMC_TRY(emc__table_shape(t, i, d, &map_bytes, &ids_bytes));
  /* map_cap is set only once all three blocks exist, so table_free never frees with a size
   * that was not allocated */
  cap = t->map_cap;
  t->map_cap = 0;
  t->base = table_block(s, t->base_bytes);
  if (!t->base)
    return EMC_FAIL(EMC_ENOMEM, "table %u ('%s'): cannot allocate %zu bytes of rows", i, t->name,
                    t->base_bytes);
  if (t->kind == EMC_TABLE_HASHED) {
    t->map_ids = table_block(s, map_bytes);
    t->map_rowp1 = table_block(s, map_bytes);
    t->row_ids = table_block(s, ids_bytes);
    if (!t->map_ids || !t->map_rowp1 || !t->row_ids) {
      emc__free(t->map_ids, map_bytes);
      emc__free(t->map_rowp1, map_bytes);
      emc__free(t->row_ids, ids_bytes);
      t->map_ids = t->map_rowp1 = t->row_ids = NULL;
      return EMC_FAIL(EMC_ENOMEM, "table %u ('%s'): cannot allocate the id map of %llu slots",
                      i, t->name, (unsigned long long)cap);
    }
    t->map_cap = cap;
  }
  return EMC_OK;
}

/* An empty store shell of n tables (no table memory yet). */
emc_status emc__store_shell(uint32_t n_tables, emc_store **out) {
  emc_store *s = emc__calloc(1, sizeof *s);
  if (!s) return EMC_FAIL(EMC_ENOMEM, "store");
  s->tables = emc__calloc(n_tables, sizeof *s->tables);
  s->stripes = emc__calloc(EMC__STORE_STRIPES, sizeof *s->stripes);
  s->wlock = &s->lock;
  if (!s->tables || !s->stripes || pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s->tables);
    free(s->stripes);
    free(s);
    return EMC_FAIL(EMC_ENOMEM, "store of %u tables", n_tables);
  }
  s->n_tables = n_tables;
  s->arena = emc__arena_create();
  *out = s;
  return EMC_OK;
}

void emc__store_free(emc_store *s) { store_free(s); }

emc_status emc_store_create(const emc_table_desc *tables, uint32_t n_tables, emc_store **out) {
  emc_store *s = NULL;
  uint32_t i;
  emc_status st;
  if (!tables || !out) return EMC_FAIL(EMC_EINVAL, "tables or out is NULL");
  if (n_tables == 0 || n_tables > EMC_MAX_TABLES)
    return EMC_FAIL(EMC_EINVAL, "n_tables = %u, must be 1..%u", n_tables, EMC_MAX_TABLES);
  for (i = 0; i < n_tables; i++) EMC_TRY(emc__table_desc_check(&tables[i], i));
  EMC_TRY(emc__store_shell(n_tables, &s));
  for (i = 0; i < n_tables; i++) {
    st = emc__table_init(s, i, &tables[i]);
    if (st != EMC_OK) {
      store_free(s);
      return st;
    }
  }
  *out = s;
  return EMC_OK;
}

void emc_store_destroy(emc_store *s) {
  int attached;
  if (!s) return;
  pthread_mutex_lock(&s->lock); /* `attached`, `caches`: this process's */
  attached = s->attached || s->caches;
  pthread_mutex_unlock(&s->lock);
  if (attached) {
    (void)EMC_FAIL(EMC_EINVAL, "the store has an attached cache (or a training group); destroy "
                               "the cache (leave the group) first (the store was not freed)");
    return;
  }
  store_free(s);
}

uint32_t emc_store_n_tables(const emc_store *s) { return s ? s->n_tables : 0; }

emc_status emc_store_table(const emc_store *s, uint32_t table, emc_table_desc *out) {
  const emc__table *t;
  if (!s || !out) return EMC_FAIL(EMC_EINVAL, "s or out is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  t = &s->tables[table];
  out->name = t->name;
  out->kind = t->kind;
  out->rows = t->rows;
  out->dim = t->dim;
  out->dtype = t->dtype;
  out->state = (emc_row_state)t->state;
  return EMC_OK;
}

emc_status emc_store_table_count(const emc_store *s, uint32_t table, uint64_t *out) {
  const emc__table *t;
  if (!s || !out) return EMC_FAIL(EMC_EINVAL, "s or out is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  t = &s->tables[table];
  *out = t->kind == EMC_TABLE_DENSE ? t->rows : EMC_LD_ACQUIRE(t->count);
  return EMC_OK;
}

/* ----------------------------------------------------------------- hashed map */
static uint64_t map_home(const emc__table *t, uint64_t id) { return emc__map_home(id, t->map_cap); }

int64_t emc__store_find(const emc__table *t, uint64_t id) {
  int64_t row = emc__map_find(t->map_ids, t->map_rowp1, t->map_cap, id);
  /* a row past the table only comes from a corrupted shared segment: absent, never read */
  return row >= 0 && (uint64_t)row < t->rows ? row : -1;
}

int64_t emc__store_find_or_add(emc_store *s, uint32_t table, uint64_t id, const void *init) {
  emc__table *t = &s->tables[table];
  uint64_t i = map_home(t, id), n, row;
  for (n = 0; n < t->map_cap; n++) {
    uint64_t rp = EMC_LD_RELAXED(&t->map_rowp1[i]);
    if (rp == 0) break;
    if (EMC_LD_RELAXED(&t->map_ids[i]) == id) /* past the rows: a corrupted shared segment */
      return rp - 1u < t->rows ? (int64_t)(rp - 1u) : -1;
    i = (i + 1u) & (t->map_cap - 1u);
  }
  row = EMC_LD_RELAXED(t->count);
  if (row >= t->rows) return -1; /* full (the map is never more than half full) */
  /* the row is unreachable until map_rowp1 is published: fill it first */
  if (init) emc__store_row_write(s, table, row, init);
  EMC_ST_RELAXED(&t->row_ids[row], id);
  EMC_ST_RELAXED(&t->map_ids[i], id);
  EMC_ST_RELEASE(&t->map_rowp1[i], row + 1u);
  EMC__TP(EMC__TP_WRITE, "store: id mapped");
  EMC_ST_RELEASE(t->count, row + 1u);
  EMC__TP(EMC__TP_WRITE, "store: id published");
  return (int64_t)row;
}

/* ----------------------------------------------------------------- row versions */
static void store_read_bytes(const emc_store *s, uint32_t table, uint64_t row, void *dst,
                             uint32_t bytes) {
  const emc__table *t = &s->tables[table];
  uint32_t *v = &s->stripes[emc__store_stripe(table, row)];
  const unsigned char *src = emc__store_row(t, row);
  unsigned waits = 0;
  for (;;) {
    uint32_t v1 = EMC_LD_ACQUIRE(v), v2;
    EMC__TP(EMC__TP_READ, "store read: version");
    if (v1 & 1u) {
      EMC__TP(EMC__TP_RETRY, "store read: a writer holds the row");
      /* a shared store's writer may be another process that died mid-write: after a while,
       * look (its robust lock tells) and repair its row (shared.c) */
      if (s->seg && ++waits % 256u == 0) emc__seg_reader_stuck(s);
      sched_yield();
      continue;
    }
    emc__row_load(dst, src, bytes);
    EMC__TP(EMC__TP_READ, "store read: row copied");
    EMC_FENCE_ACQUIRE();
    v2 = EMC_LD_RELAXED(v);
    if (v1 == v2) return;
    EMC__TP(EMC__TP_RETRY, "store read: version moved");
  }
}

static void store_write_bytes(emc_store *s, uint32_t table, uint64_t row, const void *src,
                              uint32_t bytes) {
  const emc__table *t = &s->tables[table];
  uint32_t *v = &s->stripes[emc__store_stripe(table, row)];
  /* even under the lock, but for a shared segment scribbled on (or left odd by a writer whose
   * death nobody repaired yet): start from the next even value */
  uint32_t v0 = (EMC_LD_RELAXED(v) + 1u) & ~1u;
  if (s->seg) { /* the old row, for a writer's death */
    emc__seg_undo_begin(s, table, row, bytes);
    EMC__TP(EMC__TP_WRITE, "store: undo kept");
  }
  EMC_ST_RELAXED(v, v0 + 1u);
  EMC__TP(EMC__TP_WRITE, "store: version odd");
  EMC_FENCE_RELEASE();
  emc__row_store(emc__store_row(t, row), src, bytes);
  EMC__TP(EMC__TP_WRITE, "store: row written");
  EMC_ST_RELEASE(v, v0 + 2u);
  EMC__TP(EMC__TP_WRITE, "store: version even");
  if (s->seg) emc__seg_undo_end(s);
}

void emc__store_row_read(const emc_store *s, uint32_t table, uint64_t row, void *dst) {
  store_read_bytes(s, table, row, dst, s->tables[table].row_bytes);
}
void emc__store_row_write(emc_store *s, uint32_t table, uint64_t row, const void *src) {
  store_write_bytes(s, table, row, src, s->tables[table].row_bytes);
}
void emc__store_full_read(const emc_store *s, uint32_t table, uint64_t row, void *dst) {
  store_read_bytes(s, table, row, dst, s->tables[table].full_bytes);
}
void emc__store_full_write(emc_store *s, uint32_t table, uint64_t row, const void *src) {
  store_write_bytes(s, table, row, src, s->tables[table].full_bytes);
}

emc_status emc__store_attach(emc_store *s) {
  emc_status st = EMC_OK;
  pthread_mutex_lock(&s->lock);
  if (s->seg) /* a shared store serves any number of caches (they write through) */
    s->caches++;
  else if (s->attached)
    st = EMC_FAIL(EMC_EUNSUPPORTED, "the store already serves a cache (one cache per store)");
  else
    s->attached = 1;
  pthread_mutex_unlock(&s->lock);
  return st;
}

void emc__store_detach(emc_store *s) {
  pthread_mutex_lock(&s->lock);
  if (s->seg) s->caches--;
  else s->attached = 0;
  pthread_mutex_unlock(&s->lock);
}

/* ----------------------------------------------------------------- batches */
emc_status emc__check_offsets(const emc_store *s, const uint64_t *offsets, uint64_t *total_ids,
                              size_t *bytes) {
  uint32_t t;
  size_t b = 0, ids_bytes;
  if (!s || !offsets) return EMC_FAIL(EMC_EINVAL, "store or offsets is NULL");
  if (offsets[0] != 0)
    return EMC_FAIL(EMC_EINVAL, "offsets[0] = %llu, must be 0", (unsigned long long)offsets[0]);
  for (t = 0; t < s->n_tables; t++) {
    uint64_t n;
    size_t seg;
    if (offsets[t + 1] < offsets[t])
      return EMC_FAIL(EMC_EINVAL, "offsets decrease at table %u (%llu < %llu)", t,
                      (unsigned long long)offsets[t + 1], (unsigned long long)offsets[t]);
    n = offsets[t + 1] - offsets[t];
    if (!emc__size_mul64(n, s->tables[t].row_bytes, &seg) || !emc__size_add(b, seg, &b))
      return EMC_FAIL(EMC_EINVAL, "batch byte size overflows at table %u", t);
  }
  /* the ids array (8 bytes per id) must be possible at all: offsets claiming more ids than an
   * address space holds would make every size derived from them wrap */
  if (!emc__size_mul64(offsets[s->n_tables], sizeof(uint64_t), &ids_bytes))
    return EMC_FAIL(EMC_EINVAL, "offsets declare %llu ids, more than an address space holds",
                    (unsigned long long)offsets[s->n_tables]);
  if (total_ids) *total_ids = offsets[s->n_tables];
  if (bytes) *bytes = b;
  return EMC_OK;
}

emc_status emc__check_dense_ids(const emc_store *s, const uint64_t *ids, const uint64_t *offsets) {
  uint32_t t;
  uint64_t i;
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    if (tb->kind != EMC_TABLE_DENSE) continue;
    for (i = offsets[t]; i < offsets[t + 1]; i++)
      if (ids[i] >= tb->rows)
        return EMC_FAIL(EMC_ERANGE, "table %u ('%s'): ids[%llu] = %llu >= rows %llu", t, tb->name,
                        (unsigned long long)i, (unsigned long long)ids[i],
                        (unsigned long long)tb->rows);
  }
  return EMC_OK;
}

emc_status emc_batch_bytes(const emc_store *s, const uint64_t *offsets, size_t *out) {
  if (!out) return EMC_FAIL(EMC_EINVAL, "out is NULL");
  return emc__check_offsets(s, offsets, NULL, out);
}

/* ----------------------------------------------------------------- uniform fill */
static void uniform_row(uint64_t seed, uint32_t table, uint64_t id, float lo, float hi,
                        uint32_t dim, emc_dtype dtype, void *out) {
  uint64_t st = emc__uniform_state(seed, table, id);
  uint32_t j;
  if (dtype == EMC_DTYPE_F32) {
    float *o = out;
    for (j = 0; j < dim; j++) o[j] = emc__uniform_elem(st, j, lo, hi);
  } else {
    unsigned char *o = out;
    for (j = 0; j < dim; j++) {
      uint16_t h = emc__f32_to_f16(emc__uniform_elem(st, j, lo, hi));
      memcpy(o + 2u * j, &h, 2);
    }
  }
}

static emc_status check_bounds(float lo, float hi) {
  if (!isfinite(lo) || !isfinite(hi) || !(lo <= hi))
    return EMC_FAIL(EMC_EINVAL, "bounds [%g, %g) are not finite with lo <= hi", (double)lo,
                    (double)hi);
  return EMC_OK;
}

emc_status emc_uniform_row(uint64_t seed, uint32_t table, uint64_t id, float lo, float hi,
                           uint32_t dim, emc_dtype dtype, void *out) {
  if (!out) return EMC_FAIL(EMC_EINVAL, "out is NULL");
  if (dim == 0 || dim > EMC_MAX_DIM) return EMC_FAIL(EMC_EINVAL, "dim = %u", dim);
  if (dtype != EMC_DTYPE_F32 && dtype != EMC_DTYPE_F16)
    return EMC_FAIL(EMC_EINVAL, "dtype %d", (int)dtype);
  EMC_TRY(check_bounds(lo, hi));
  uniform_row(seed, table, id, lo, hi, dim, dtype, out);
  return EMC_OK;
}

/* n ids (8 bytes each) and n packed rows must be buffers an address space can hold. */
static emc_status check_buffers(const emc__table *t, size_t n) {
  size_t b;
  if (!emc__size_mul(n, sizeof(uint64_t), &b) || !emc__size_mul(n, t->row_bytes, &b))
    return EMC_FAIL(EMC_EINVAL, "n = %zu ids of %u-byte rows: more than an address space holds",
                    n, t->row_bytes);
  return EMC_OK;
}

/* Lock the store for a direct write; fails if a cache is attached. */
static emc_status lock_for_write(emc_store *s) {
  EMC_TRY(emc__store_lock(s));
  if (s->attached) {
    emc__store_unlock(s);
    return EMC_FAIL(EMC_EUNSUPPORTED,
                    "a cache is attached to this store: write through emc_insert, or destroy "
                    "the cache first");
  }
  return EMC_OK;
}

emc_status emc_store_fill_uniform(emc_store *s, uint32_t table, float lo, float hi,
                                  uint64_t seed) {
  emc__table *t;
  unsigned char *buf;
  uint64_t r, n;
  if (!s) return EMC_FAIL(EMC_EINVAL, "s is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  EMC_TRY(check_bounds(lo, hi));
  t = &s->tables[table];
  buf = emc__malloc(t->stride);
  if (!buf) return EMC_FAIL(EMC_ENOMEM, "row buffer");
  {
    emc_status st = lock_for_write(s);
    if (st != EMC_OK) {
      free(buf);
      return st;
    }
  }
  n = t->kind == EMC_TABLE_DENSE ? t->rows : EMC_LD_RELAXED(t->count);
  if (n > t->rows) { /* a shared segment's count written over */
    emc_status st = emc__check_room(t, table, 0);
    emc__store_unlock(s);
    free(buf);
    return st;
  }
  emc__log_table(s, table); /* a shared store's caches drop the table */
  for (r = 0; r < n; r++) {
    uint64_t id = t->kind == EMC_TABLE_DENSE ? r : t->row_ids[r];
    uniform_row(seed, table, id, lo, hi, t->dim, t->dtype, buf);
    emc__store_row_write(s, table, r, buf);
  }
  emc__log_publish(s);
  emc__store_unlock(s);
  free(buf);
  return EMC_OK;
}

emc_status emc__check_room(const emc__table *t, uint32_t table, uint64_t fresh) {
  uint64_t used = EMC_LD_RELAXED(t->count);
  if (used > t->rows)
    return EMC_FAIL(EMC_ECORRUPT, "table %u ('%s') counts %llu rows of %llu (the shared "
                    "segment was written over); nothing changed", table, t->name,
                    (unsigned long long)used, (unsigned long long)t->rows);
  if (fresh > t->rows - used)
    return EMC_FAIL(EMC_ERANGE, "table %u ('%s'): %llu new ids exceed the free capacity %llu",
                    table, t->name, (unsigned long long)fresh,
                    (unsigned long long)(t->rows - used));
  return EMC_OK;
}

/* Hashed: number of distinct ids in ids[0..n) absent from the table (for the capacity check).
 * Returns (uint64_t)-1 when the scratch set cannot be allocated. */
uint64_t emc__count_new_ids(const emc__table *t, const uint64_t *ids, size_t n) {
  uint64_t cap, *set, *used, fresh = 0;
  size_t i, set_bytes;
  /* a set of >= 2n slots: 2n and its bytes must not wrap (n comes from the caller) */
  if ((uint64_t)n > (UINT64_MAX >> 2)) return (uint64_t)-1;
  cap = emc__u64_pow2_at_least(2 * (uint64_t)n, 16);
  if (cap == 0 || !emc__size_mul64(cap, sizeof *set, &set_bytes)) return (uint64_t)-1;
  set = emc__malloc(set_bytes);
  used = emc__calloc((size_t)(cap / 64 + 1), sizeof *used);
  if (!set || !used) {
    free(set);
    free(used);
    return (uint64_t)-1;
  }
  for (i = 0; i < n; i++) {
    uint64_t h;
    if (emc__store_find(t, ids[i]) >= 0) continue;
    h = emc__fmix64(ids[i]) & (cap - 1u);
    for (;;) {
      if (!(used[h / 64] >> (h % 64) & 1u)) {
        used[h / 64] |= 1ull << (h % 64);
        set[h] = ids[i];
        fresh++;
        break;
      }
      if (set[h] == ids[i]) break;
      h = (h + 1u) & (cap - 1u);
    }
  }
  free(set);
  free(used);
  return fresh;
}

emc_status emc_store_write(emc_store *s, uint32_t table, const uint64_t *ids, size_t n,
                           const void *rows) {
  emc__table *t;
  size_t i;
  emc_status st = EMC_OK;
  if (!s) return EMC_FAIL(EMC_EINVAL, "s is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  if (n == 0) return EMC_OK;
  if (!ids || !rows) return EMC_FAIL(EMC_EINVAL, "ids or rows is NULL with n = %zu", n);
  t = &s->tables[table];
  EMC_TRY(check_buffers(t, n));
  EMC_TRY(lock_for_write(s));
  if (t->kind == EMC_TABLE_DENSE) {
    for (i = 0; i < n; i++)
      if (ids[i] >= t->rows) {
        st = EMC_FAIL(EMC_ERANGE, "table %u ('%s'): ids[%zu] = %llu >= rows %llu", table, t->name,
                      i, (unsigned long long)ids[i], (unsigned long long)t->rows);
        goto out;
      }
  } else {
    uint64_t fresh = emc__count_new_ids(t, ids, n);
    if (fresh == (uint64_t)-1) {
      st = EMC_FAIL(EMC_ENOMEM, "scratch set of %zu ids", n);
      goto out;
    }
    if ((st = emc__check_room(t, table, fresh)) != EMC_OK) goto out;
  }
  emc__log_ids(s, table, ids, n); /* a shared store's caches drop these rows */
  for (i = 0; i < n; i++) {
    const unsigned char *src = (const unsigned char *)rows + i * (size_t)t->row_bytes;
    int64_t row = t->kind == EMC_TABLE_DENSE ? (int64_t)ids[i]
                                              : emc__store_find_or_add(s, table, ids[i], src);
    if (row < 0) { /* capacity was checked: only a corrupted shared segment's map gets here */
      st = EMC_FAIL(EMC_ECORRUPT, "table %u ('%s'): ids[%zu] = %llu has no valid row (the "
                    "shared segment's id map is corrupt); rows before it were written", table,
                    t->name, i, (unsigned long long)ids[i]);
      goto out;
    }
    emc__store_row_write(s, table, (uint64_t)row, src);
  }
out:
  emc__log_publish(s);
  emc__store_unlock(s);
  return st;
}

emc_status emc_store_read(const emc_store *s, uint32_t table, const uint64_t *ids, size_t n,
                          void *rows) {
  const emc__table *t;
  size_t i;
  if (!s) return EMC_FAIL(EMC_EINVAL, "s is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  if (n == 0) return EMC_OK;
  if (!ids || !rows) return EMC_FAIL(EMC_EINVAL, "ids or rows is NULL with n = %zu", n);
  t = &s->tables[table];
  EMC_TRY(check_buffers(t, n));
  if (t->kind == EMC_TABLE_DENSE) {
    for (i = 0; i < n; i++)
      if (ids[i] >= t->rows)
        return EMC_FAIL(EMC_ERANGE, "table %u ('%s'): ids[%zu] = %llu >= rows %llu", table,
                        t->name, i, (unsigned long long)ids[i], (unsigned long long)t->rows);
    for (i = 0; i < n; i++)
      emc__store_row_read(s, table, ids[i], (unsigned char *)rows + i * (size_t)t->row_bytes);
  } else {
    for (i = 0; i < n; i++) {
      unsigned char *dst = (unsigned char *)rows + i * (size_t)t->row_bytes;
      int64_t row = emc__store_find(t, ids[i]);
      if (row < 0) memset(dst, 0, t->row_bytes);
      else emc__store_row_read(s, table, (uint64_t)row, dst);
    }
  }
  return EMC_OK;
}

emc_status emc_store_read_state(const emc_store *s, uint32_t table, const uint64_t *ids, size_t n,
                                float *out) {
  const emc__table *t;
  unsigned char *buf;
  size_t i;
  if (!s) return EMC_FAIL(EMC_EINVAL, "s is NULL");
  if (table >= s->n_tables)
    return EMC_FAIL(EMC_ERANGE, "table %u >= n_tables %u", table, s->n_tables);
  t = &s->tables[table];
  if (t->state == EMC_STATE_NONE)
    return EMC_FAIL(EMC_EINVAL, "table %u ('%s') keeps no optimizer state", table, t->name);
  if (n == 0) return EMC_OK;
  if (!ids || !out) return EMC_FAIL(EMC_EINVAL, "ids or out is NULL with n = %zu", n);
  EMC_TRY(check_buffers(t, n)); /* as emc_store_read (out's n floats are fewer bytes) */
  if (t->kind == EMC_TABLE_DENSE)
    for (i = 0; i < n; i++)
      if (ids[i] >= t->rows)
        return EMC_FAIL(EMC_ERANGE, "table %u ('%s'): ids[%zu] = %llu >= rows %llu", table,
                        t->name, i, (unsigned long long)ids[i], (unsigned long long)t->rows);
  if (!(buf = emc__malloc(t->stride))) return EMC_FAIL(EMC_ENOMEM, "row buffer");
  for (i = 0; i < n; i++) {
    int64_t row = t->kind == EMC_TABLE_DENSE ? (int64_t)ids[i] : emc__store_find(t, ids[i]);
    float v = 0.0f;
    if (row >= 0) {
      emc__store_full_read(s, table, (uint64_t)row, buf); /* row and state under one version */
      memcpy(&v, buf + t->state_off, sizeof v);
    }
    out[i] = v;
  }
  free(buf);
  return EMC_OK;
}
