/*
 * shared.c: a store whose rows live in POSIX shared memory, one copy per machine
 * (emc_store_create_shared / _attach / _open_shared / _unlink; issue 20, part 1).
 *
 * The segment is position-independent: a header, one record per table, the stripe versions,
 * an undo row and every table's blocks (rows, id map, row ids), each at an offset from the
 * segment's start; each process maps it wherever mmap puts it and builds its own emc_store
 * around the mapping (names and pointers in process memory, nothing of it in the segment).
 *
 *   offset 0      emc__seg_hdr: magic, format version, sizes, `ready`, the undo record and
 *                 the writers' lock (a process-shared robust mutex)
 *   hdr_bytes     n_tables emc__seg_table records: descriptor, block offsets, `count`
 *   off_stripes   EMC__STORE_STRIPES row versions
 *   off_undo      one row slot (the widest full row): a row's old bytes while it is written
 *   off_log       the update log: log_cap entries (seg_log.c)
 *   off_group     the training group's block (emc__grp, lib/group.c)
 *   page-aligned  per table: rows, then (hashed) map ids, map rows + 1, row ids
 * Fresh shared memory is zero, which is what an empty store holds (zero rows, empty maps).
 *
 * Readers in any process never lock: rows are read by the stripe-version protocol of
 * store.c, the versions and maps being in the segment. Writers of every process serialize on
 * the segment's lock. A writer that dies while holding it leaves at most one row in flight:
 * store_write_bytes copies that row's old bytes to the undo slot first, so the next process
 * to take the lock (EOWNERDEAD) puts them back, makes every version even and completes a
 * hashed id whose map entry was published but not counted (seg_recover). A reader that finds
 * a version odd for long tries the lock and repairs the same way if its holder is dead; a
 * reader never waits for a dead process.
 *
 * Caches over a shared store write through and keep their copies fresh by the segment's
 * update log (seg_log.c, lib/sync_host.c); the segment also holds the training group's block
 * (lib/group.c), and seg_recover finishes a step a dead applier committed (stage.c). CUDA
 * caches register the whole segment once per process (cuda/sync.cu).
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seg.h"

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1u) / a * a; }

/* The segment's layout for these descriptors: each table's offsets into recs (shapes into
 * tabs, names not set), the total size. Descriptors already checked. */
static emc_status seg_layout(const emc_table_desc *d, uint32_t n, emc__table *tabs,
                             emc__seg_table *recs, uint64_t *hdr_bytes, uint64_t *off_stripes,
                             uint64_t *off_undo, uint64_t *undo_cap, uint64_t *off_log,
                             uint64_t *log_cap, uint64_t *off_group, uint64_t *total) {
  uint64_t at, widest = 16, rows = 0;
  uint32_t i;
  *hdr_bytes = round_up(sizeof(struct emc__seg_hdr), 64);
  at = *hdr_bytes + (uint64_t)n * sizeof(emc__seg_table);
  *off_stripes = round_up(at, 64);
  at = *off_stripes + (uint64_t)EMC__STORE_STRIPES * sizeof(uint32_t);
  for (i = 0; i < n; i++) {
    size_t mb, ib;
    EMC_TRY(emc__table_shape(&tabs[i], i, &d[i], &mb, &ib));
    if (tabs[i].stride > widest) widest = tabs[i].stride;
    rows += tabs[i].rows;
  }
  for (*log_cap = EMC__SEG_LOG_MIN; *log_cap < rows && *log_cap < EMC__SEG_LOG_MAX;) *log_cap <<= 1;
  *off_undo = round_up(at, 64);
  *undo_cap = widest;
  at = *off_undo + widest;
  *off_log = round_up(at, 64);
  at = *off_log + *log_cap * sizeof(emc__seg_log_ent);
  *off_group = round_up(at, 64);
  at = *off_group + sizeof(emc__grp);
  for (i = 0; i < n; i++) {
    const emc__table *t = &tabs[i];
    emc__seg_table *r = &recs[i];
    uint64_t blocks[4] = {t->base_bytes, 0, 0, 0}, *offs[4] = {&r->off_base, &r->off_map_ids,
                                                               &r->off_map_rowp1, &r->off_row_ids};
    unsigned b;
    if (t->kind == EMC_TABLE_HASHED) {
      blocks[1] = blocks[2] = t->map_cap * 8u;
      blocks[3] = t->rows * 8u;
    }
    memset(r, 0, sizeof *r);
    r->kind = (uint32_t)d[i].kind;
    r->dtype = (uint32_t)d[i].dtype;
    r->dim = d[i].dim;
    r->state = (uint32_t)d[i].state;
    r->rows = d[i].rows;
    for (b = 0; b < 4; b++) {
      if (b > 0 && t->kind != EMC_TABLE_HASHED) break;
      at = round_up(at, 4096); /* whole pages, as table_block: a CUDA cache may register them */
      if (at > UINT64_MAX / 2 || blocks[b] > UINT64_MAX / 2 - at)
        return EMC_FAIL(EMC_ENOMEM, "table %u: the shared segment's size overflows", i);
      *offs[b] = at;
      at += blocks[b];
    }
  }
  *total = round_up(at, 4096);
  if (*total > (uint64_t)SIZE_MAX / 2)
    return EMC_FAIL(EMC_ENOMEM, "a shared segment of %llu bytes", (unsigned long long)*total);
  return EMC_OK;
}

/* A record's descriptor (its name aside). */
static void rec_desc(const emc__seg_table *r, emc_table_desc *d) {
  memset(d, 0, sizeof *d);
  d->kind = (emc_table_kind)r->kind;
  d->dtype = (emc_dtype)r->dtype;
  d->dim = r->dim;
  d->rows = r->rows;
  d->state = (emc_row_state)r->state;
}

/* "/name": what shm_open accepts portably (one leading slash, no other, 2..255 bytes). */
static emc_status check_name(const char *name) {
  size_t n;
  if (!name) return EMC_FAIL(EMC_EINVAL, "name is NULL");
  n = strlen(name);
  if (n < 2 || n > 255 || name[0] != '/' || strchr(name + 1, '/'))
    return EMC_FAIL(EMC_EINVAL, "shared memory name '%s': must be '/' and 1..254 more bytes, "
                    "without another '/'", name);
  return EMC_OK;
}

/* The process's emc_store over a mapped segment, from checked copies of its header (hv) and
 * records (recs): nothing it keeps (offsets, sizes, names, the undo slot) is read from the
 * segment again, so a process that scribbles on the header later cannot move them. */
/* Huge pages for the rows where the system gives them to shared memory (a hint: with
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled "advise" or "within_size"; "never" keeps
 * 4 KiB pages, and lookups of a large store then miss the TLB more than a private store's). */
static void seg_advise(void *h, size_t bytes) {
#ifdef MADV_HUGEPAGE
  if (bytes >= ((size_t)4 << 20)) (void)madvise(h, bytes, MADV_HUGEPAGE);
#else
  (void)h;
  (void)bytes;
#endif
}

static emc_status bind_store(struct emc__seg_hdr *h, size_t bytes, const struct emc__seg_hdr *hv,
                             const emc__seg_table *recs, const char *name, emc_store **out) {
  unsigned char *base = (unsigned char *)h;
  emc__seg_table *live = (emc__seg_table *)(base + hv->hdr_bytes);
  emc_store *s = NULL;
  uint32_t i;
  emc_status st;
  EMC_TRY(emc__store_shell(hv->n_tables, &s));
  free(s->stripes);
  s->stripes = (uint32_t *)(base + hv->off_stripes);
  s->seg = h;
  s->seg_bytes = bytes;
  s->seg_undo = base + hv->off_undo;
  s->seg_undo_cap = (uint32_t)hv->undo_cap;
  s->wlock = &h->lock;
  seg_advise(h, bytes);
  if (!(s->seg_name = emc__malloc(strlen(name) + 1))) {
    s->seg_bytes = 0; /* the caller unmaps */
    emc__store_free(s);
    return EMC_FAIL(EMC_ENOMEM, "the store's name");
  }
  strcpy(s->seg_name, name);
  s->seg_log = (struct emc__seg_log_ent *)(base + hv->off_log);
  s->seg_log_cap = hv->log_cap;
  s->seg_grp = (struct emc__grp *)(base + hv->off_group);
  s->seg_recs = live;
  for (i = 0; i < hv->n_tables; i++) {
    emc__table *t = &s->tables[i];
    const emc__seg_table *r = &recs[i];
    emc_table_desc d;
    size_t mb, ib;
    rec_desc(r, &d);
    if ((st = emc__table_name(t, i, r->name)) != EMC_OK ||
        (st = emc__table_shape(t, i, &d, &mb, &ib)) != EMC_OK) {
      s->seg_bytes = 0; /* the caller unmaps */
      emc__store_free(s);
      return st;
    }
    t->base = base + r->off_base;
    if (t->kind == EMC_TABLE_HASHED) {
      t->map_ids = (uint64_t *)(base + r->off_map_ids);
      t->map_rowp1 = (uint64_t *)(base + r->off_map_rowp1);
      t->row_ids = (uint64_t *)(base + r->off_row_ids);
      t->count = &live[i].count; /* shared: the one word every process counts in */
    } else {
      t->count = &t->count_own;
    }
  }
  *out = s;
  return EMC_OK;
}

int emc__seg_lock_init(pthread_mutex_t *m) {
  pthread_mutexattr_t ma;
  int e = pthread_mutexattr_init(&ma);
  if (e == 0) {
    if ((e = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED)) == 0 &&
        (e = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST)) == 0)
      e = pthread_mutex_init(m, &ma);
    pthread_mutexattr_destroy(&ma);
  }
  return e;
}

void emc__seg_lock_span(size_t *off, size_t *len) {
  *off = offsetof(struct emc__seg_hdr, lock);
  *len = sizeof(pthread_mutex_t);
}

void emc__seg_unmap(emc_store *s) {
  if (s->seg && s->seg_bytes) munmap(s->seg, s->seg_bytes);
  s->seg = NULL;
  s->stripes = NULL;
}

/* Create the segment and map it; `ready` set now, or (open_shared) once the caller has
 * loaded it (seg_set_ready), so that nobody attaches to a half-loaded store. */
static emc_status create_seg(const char *name, const emc_table_desc *tables, uint32_t n_tables,
                             int ready, emc_store **out) {
  emc__table *tabs = NULL;
  emc__seg_table *recs = NULL;
  struct emc__seg_hdr *h = NULL;
  uint64_t hdr_bytes, off_stripes, off_undo, undo_cap, off_log, log_cap, off_group, total;
  uint32_t i;
  int fd = -1, e;
  emc_status st;
  EMC_TRY(check_name(name));
  if (!tables || !out) return EMC_FAIL(EMC_EINVAL, "tables or out is NULL");
  if (n_tables == 0 || n_tables > EMC_MAX_TABLES)
    return EMC_FAIL(EMC_EINVAL, "n_tables = %u, must be 1..%u", n_tables, EMC_MAX_TABLES);
  for (i = 0; i < n_tables; i++) EMC_TRY(emc__table_desc_check(&tables[i], i));
  tabs = emc__calloc(n_tables, sizeof *tabs);
  recs = emc__calloc(n_tables, sizeof *recs);
  if (!tabs || !recs) {
    st = EMC_FAIL(EMC_ENOMEM, "layout of %u tables", n_tables);
    goto out;
  }
  if ((st = seg_layout(tables, n_tables, tabs, recs, &hdr_bytes, &off_stripes, &off_undo,
                       &undo_cap, &off_log, &log_cap, &off_group, &total)) != EMC_OK)
    goto out;
  for (i = 0; i < n_tables; i++) { /* names (<= 255 bytes: emc__table_desc_check) */
    if ((st = emc__table_name(&tabs[i], i, tables[i].name)) != EMC_OK) goto out;
    strcpy(recs[i].name, tabs[i].name);
  }
  fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    e = errno;
    st = EMC_FAIL(e == ENOMEM ? EMC_ENOMEM : EMC_EIO, "shm_open('%s'): %s", name, strerror(e));
    goto out;
  }
  /* posix_fallocate, not ftruncate alone: tmpfs reserves nothing for a hole, and a store
   * larger than /dev/shm's free space would map fine and die of SIGBUS at its first write */
  if ((e = ftruncate(fd, (off_t)total) != 0 ? errno : posix_fallocate(fd, 0, (off_t)total)) != 0 ||
      (h = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    e = e ? e : errno;
    h = NULL;
    shm_unlink(name);
    st = EMC_FAIL(e == ENOMEM || e == ENOSPC ? EMC_ENOMEM : EMC_EIO,
                  "shared memory '%s' of %llu bytes: %s", name, (unsigned long long)total,
                  strerror(e));
    goto out;
  }
  memcpy(h->magic, EMC__SEG_MAGIC, 8);
  h->version = EMC__SEG_VERSION;
  h->n_tables = n_tables;
  h->total_bytes = total;
  h->lock_bytes = (uint32_t)sizeof(pthread_mutex_t);
  h->hdr_bytes = hdr_bytes;
  h->off_stripes = off_stripes;
  h->off_undo = off_undo;
  h->undo_cap = undo_cap;
  h->off_log = off_log;
  h->log_cap = log_cap;
  h->off_group = off_group;
  memcpy((unsigned char *)h + hdr_bytes, recs, (size_t)n_tables * sizeof *recs);
  if (emc__seg_lock_init(&h->lock) != 0) {
    munmap(h, (size_t)total);
    h = NULL;
    shm_unlink(name);
    st = EMC_FAIL(EMC_EIO, "shared memory '%s': cannot make a process-shared robust lock", name);
    goto out;
  }
  if ((st = bind_store(h, (size_t)total, h, recs, name, out)) != EMC_OK) {
    munmap(h, (size_t)total);
    shm_unlink(name);
    goto out;
  }
  if (ready) __atomic_store_n(&h->ready, 1u, __ATOMIC_RELEASE);
out:
  if (fd >= 0) close(fd);
  if (tabs)
    for (i = 0; i < n_tables; i++) free(tabs[i].name);
  free(tabs);
  free(recs);
  return st;
}

emc_status emc_store_create_shared(const char *name, const emc_table_desc *tables,
                                   uint32_t n_tables, emc_store **out) {
  return create_seg(name, tables, n_tables, 1, out);
}

/* Does the mapped segment hold an embcache store this build can use? Every offset and size
 * is recomputed from the records' descriptors and compared, so a record cannot point
 * outside the segment. */
static emc_status seg_check(const char *name, struct emc__seg_hdr *h, uint64_t bytes,
                            struct emc__seg_hdr *hv, emc__seg_table **recs_out) {
  emc__seg_table *recs = NULL, *want = NULL;
  emc__table *tabs = NULL;
  emc_table_desc *d = NULL;
  uint64_t hdr_bytes, off_stripes, off_undo, undo_cap, off_log, log_cap, off_group, total;
  uint32_t i, n, ms;
  emc_status st = EMC_OK;
  if (bytes < sizeof *h || memcmp(h->magic, EMC__SEG_MAGIC, 8) != 0)
    return EMC_FAIL(EMC_ECORRUPT, "shared memory '%s' is not an embcache store", name);
  if (h->version != EMC__SEG_VERSION)
    return EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': format version %u, this library reads %u",
                    name, h->version, EMC__SEG_VERSION);
  for (ms = 0; !__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE); ms++) {
    struct timespec ts = {0, 1000000};
    if (ms >= EMC__SEG_READY_WAIT_MS)
      return EMC_FAIL(EMC_ECORRUPT, "shared memory '%s' was never finished by its creator", name);
    nanosleep(&ts, NULL);
  }
  memcpy(hv, h, sizeof *hv); /* from here on, the copy: the segment may change under us */
  n = hv->n_tables;
  if (hv->lock_bytes != sizeof(pthread_mutex_t) || n == 0 || n > EMC_MAX_TABLES ||
      hv->total_bytes != bytes || hv->hdr_bytes != round_up(sizeof *h, 64) ||
      hv->hdr_bytes + (uint64_t)n * sizeof *recs > bytes)
    return EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': a header of %u tables, %llu bytes, does not "
                    "match its size %llu (truncated?)", name, n,
                    (unsigned long long)hv->total_bytes, (unsigned long long)bytes);
  recs = emc__calloc(n, sizeof *recs);
  if (recs) memcpy(recs, (unsigned char *)h + hv->hdr_bytes, (size_t)n * sizeof *recs);
  tabs = emc__calloc(n, sizeof *tabs);
  want = emc__calloc(n, sizeof *want);
  d = emc__calloc(n, sizeof *d);
  if (!recs || !tabs || !want || !d) {
    st = EMC_FAIL(EMC_ENOMEM, "checking %u tables", n);
    goto out;
  }
  for (i = 0; i < n; i++) {
    if (memchr(recs[i].name, 0, EMC__SEG_NAME_BYTES) == NULL) {
      st = EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': table %u's name is not terminated", name, i);
      goto out;
    }
    rec_desc(&recs[i], &d[i]);
    if (emc__table_desc_check(&d[i], i) != EMC_OK) {
      char why[256]; /* EMC_FAIL writes the buffer emc_last_error_detail reads */
      snprintf(why, sizeof why, "%s", emc_last_error_detail());
      st = EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': table %u: %s", name, i, why);
      goto out;
    }
  }
  if (seg_layout(d, n, tabs, want, &hdr_bytes, &off_stripes, &off_undo, &undo_cap, &off_log,
                 &log_cap, &off_group, &total) != EMC_OK ||
      total != bytes || off_stripes != hv->off_stripes || off_undo != hv->off_undo ||
      undo_cap != hv->undo_cap || off_log != hv->off_log || log_cap != hv->log_cap ||
      off_group != hv->off_group) {
    st = EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': its layout does not follow from its tables",
                  name);
    goto out;
  }
  for (i = 0; i < n; i++)
    if (want[i].off_base != recs[i].off_base || want[i].off_map_ids != recs[i].off_map_ids ||
        want[i].off_map_rowp1 != recs[i].off_map_rowp1 ||
        want[i].off_row_ids != recs[i].off_row_ids || recs[i].count > recs[i].rows) {
      st = EMC_FAIL(EMC_ECORRUPT, "shared memory '%s': table %u's blocks or count are off", name, i);
      goto out;
    }
out:
  if (tabs)
    for (i = 0; i < n; i++) free(tabs[i].name);
  free(tabs);
  free(want);
  free(d);
  if (st == EMC_OK) *recs_out = recs;
  else free(recs);
  return st;
}

static const char zero_magic[8];

emc_status emc_store_attach(const char *name, emc_store **out) {
  struct stat sb;
  struct emc__seg_hdr *h = NULL, hv;
  emc__seg_table *recs = NULL;
  unsigned ms;
  int fd, e;
  emc_status st;
  EMC_TRY(check_name(name));
  if (!out) return EMC_FAIL(EMC_EINVAL, "out is NULL");
  fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    e = errno;
    return EMC_FAIL(EMC_EIO, "shm_open('%s'): %s", name, strerror(e));
  }
  /* a creator between shm_open and its header (size 0, then a zero header) is waited for */
  for (ms = 0;; ms++) {
    struct timespec ts = {0, 1000000};
    if (fstat(fd, &sb) != 0) {
      e = errno;
      close(fd);
      return EMC_FAIL(EMC_EIO, "fstat of shared memory '%s': %s", name, strerror(e));
    }
    if ((uint64_t)sb.st_size >= sizeof *h) {
      h = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (h == MAP_FAILED) {
        e = errno;
        close(fd);
        return EMC_FAIL(e == ENOMEM ? EMC_ENOMEM : EMC_EIO, "mmap of shared memory '%s': %s",
                        name, strerror(e));
      }
      if (memcmp(h->magic, zero_magic, 8) != 0) break;
      munmap(h, (size_t)sb.st_size);
      h = NULL;
    }
    if (ms >= EMC__SEG_READY_WAIT_MS) {
      close(fd);
      return EMC_FAIL(EMC_ECORRUPT, "shared memory '%s' holds %lld bytes and no header: not an "
                      "embcache store (truncated, or its creator died)", name, (long long)sb.st_size);
    }
    nanosleep(&ts, NULL);
  }
  close(fd);
  if ((st = seg_check(name, h, (uint64_t)sb.st_size, &hv, &recs)) != EMC_OK ||
      (st = bind_store(h, (size_t)sb.st_size, &hv, recs, name, out)) != EMC_OK) {
    free(recs);
    munmap(h, (size_t)sb.st_size);
    return st;
  }
  free(recs);
  return EMC_OK;
}

emc_status emc_store_open_shared(const char *path, const char *name, emc_store **out) {
  emc_store *f = NULL, *s = NULL;
  emc_table_desc *d = NULL;
  unsigned char *row = NULL;
  uint32_t i;
  emc_status st;
  EMC_TRY(check_name(name));
  if (!path || !out) return EMC_FAIL(EMC_EINVAL, "path or out is NULL");
  /* the file is read (and verified) whole first: nothing is created for a bad file */
  EMC_TRY(emc_store_open(path, &f));
  if (!(d = emc__calloc(f->n_tables, sizeof *d))) {
    emc_store_destroy(f);
    return EMC_FAIL(EMC_ENOMEM, "descriptors of %u tables", f->n_tables);
  }
  for (i = 0; i < f->n_tables; i++) emc_store_table(f, i, &d[i]);
  if ((st = create_seg(name, d, f->n_tables, 0, &s)) != EMC_OK) goto out;
  for (i = 0; i < f->n_tables; i++) {
    const emc__table *ft = &f->tables[i];
    uint64_t k, n = ft->kind == EMC_TABLE_DENSE ? ft->rows : EMC_LD_RELAXED(ft->count);
    free(row);
    if (!(row = emc__malloc(ft->stride))) {
      st = EMC_FAIL(EMC_ENOMEM, "row buffer");
      goto out;
    }
    if ((st = emc__store_lock(s)) != EMC_OK) goto out;
    for (k = 0; k < n; k++) {
      uint64_t r = k;
      emc__store_full_read(f, i, k, row);
      if (ft->kind == EMC_TABLE_HASHED) {
        int64_t q = emc__store_find_or_add(s, i, ft->row_ids[k], NULL);
        if (q < 0) { /* cannot happen: the new segment has the file's capacity */
          emc__store_unlock(s);
          st = EMC_FAIL(EMC_ECORRUPT, "table %u: id %llu found no row", i,
                        (unsigned long long)ft->row_ids[k]);
          goto out;
        }
        r = (uint64_t)q;
      }
      emc__store_full_write(s, i, r, row);
    }
    emc__store_unlock(s);
  }
  __atomic_store_n(&s->seg->ready, 1u, __ATOMIC_RELEASE); /* attachable only now */
out:
  if (st != EMC_OK && s) {
    emc_store_destroy(s);
    shm_unlink(name); /* not emc_store_unlink: the detail keeps the failure's own text */
    s = NULL;
  }
  if (s) *out = s;
  free(row);
  free(d);
  emc_store_destroy(f);
  return st;
}

emc_status emc_store_unlink(const char *name) {
  int e;
  EMC_TRY(check_name(name));
  if (shm_unlink(name) != 0) {
    e = errno;
    return EMC_FAIL(EMC_EIO, "shm_unlink('%s'): %s", name, strerror(e));
  }
  return EMC_OK;
}

/* ----------------------------------------------------------------- writers' lock, repair */
/* What a writer that died holding the lock left (the lock held, by the caller). */
static void seg_recover(emc_store *s) {
  struct emc__seg_hdr *h = s->seg;
  uint32_t i;
  if (EMC_LD_RELAXED(&h->undo_valid)) {
    /* a row in flight: its write finished only if its version is even again; while it is
     * odd, readers wait, so the old bytes go back under the odd version, then it is evened */
    uint32_t t = EMC_LD_RELAXED(&h->undo_table), bytes = EMC_LD_RELAXED(&h->undo_bytes);
    uint64_t row = EMC_LD_RELAXED(&h->undo_row);
    if (t < s->n_tables && row < s->tables[t].rows && bytes <= s->tables[t].full_bytes &&
        bytes <= s->seg_undo_cap) {
      uint32_t *v = &s->stripes[emc__store_stripe(t, row)];
      if (EMC_LD_RELAXED(v) & 1u) {
        emc__row_store(emc__store_row(&s->tables[t], row), s->seg_undo, bytes);
        EMC_ST_RELEASE(v, EMC_LD_RELAXED(v) + 1u);
      }
    }
    EMC_FENCE_RELEASE();
    EMC_ST_RELAXED(&h->undo_valid, 0u);
  }
  emc__seg_even_stripes(s); /* readers wait on odd versions */
  /* what the dead writer announced may have changed: published now (seg_log.c) */
  emc__log_publish(s);
  for (i = 0; i < s->n_tables; i++) { /* an id published in the map but not counted */
    emc__table *t = &s->tables[i];
    uint64_t c = EMC_LD_RELAXED(t->count);
    if (t->kind == EMC_TABLE_HASHED && c < t->rows &&
        emc__store_find(t, EMC_LD_RELAXED(&t->row_ids[c])) == (int64_t)c)
      EMC_ST_RELEASE(t->count, c + 1u);
  }
  /* a training step its dead applier committed: finished before any other writer runs (a
   * later write to one of its rows would otherwise be overwritten by its completion) */
  emc__grp_complete_pending(s);
}

emc_status emc__store_lock(emc_store *s) {
  int e = pthread_mutex_lock(s->wlock);
  if (e == EOWNERDEAD) {
    seg_recover(s);
    pthread_mutex_consistent(s->wlock);
  } else if (e != 0) { /* only a shared segment's lock, written over, fails */
    return EMC_FAIL(EMC_ECORRUPT, "the store's writers' lock is unusable: %s (shared memory "
                    "written over?)", strerror(e));
  }
  return EMC_OK;
}

void emc__store_unlock(emc_store *s) { pthread_mutex_unlock(s->wlock); }

void emc__seg_reader_stuck(const emc_store *cs) {
  emc_store *s = (emc_store *)cs; /* the repair writes shared memory, never *cs itself */
  int e = pthread_mutex_trylock(s->wlock);
  /* the lock free (or its holder dead) and the version still odd: no writer is running, so
   * an odd version is a dead writer's, or the segment was scribbled on; repair either way */
  if (e == 0 || e == EOWNERDEAD) seg_recover(s);
  if (e == EOWNERDEAD) pthread_mutex_consistent(s->wlock);
  if (e == 0 || e == EOWNERDEAD) pthread_mutex_unlock(s->wlock);
}

void emc__seg_even_stripes(emc_store *s) {
  uint32_t i;
  if (!s->seg) return;
  for (i = 0; i < EMC__STORE_STRIPES; i++)
    if (EMC_LD_RELAXED(&s->stripes[i]) & 1u)
      EMC_ST_RELEASE(&s->stripes[i], EMC_LD_RELAXED(&s->stripes[i]) + 1u);
}

void emc__seg_undo_begin(emc_store *s, uint32_t table, uint64_t row, uint32_t bytes) {
  struct emc__seg_hdr *h = s->seg;
  emc__row_load(s->seg_undo, emc__store_row(&s->tables[table], row), bytes);
  EMC_ST_RELAXED(&h->undo_table, table);
  EMC_ST_RELAXED(&h->undo_row, row);
  EMC_ST_RELAXED(&h->undo_bytes, bytes);
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&h->undo_valid, 1u);
  EMC_FENCE_RELEASE();
}

void emc__seg_undo_end(emc_store *s) {
  EMC_FENCE_RELEASE();
  EMC_ST_RELAXED(&s->seg->undo_valid, 0u);
}
