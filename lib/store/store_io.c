/*
 * store_io.c: the store file format (emc_store_save / emc_store_open).
 *
 * All integers little-endian. Every section ends with the XXH64 (seed 0) of its bytes.
 *
 *   header, 64 bytes
 *     char     magic[8]       "EMBCSTOR"
 *     uint32   version        1, or 2 when a table keeps optimizer state (both are read)
 *     uint32   n_tables       1 .. EMC_MAX_TABLES
 *     uint64   desc_bytes     bytes of the descriptor section, checksum excluded
 *     uint64   file_bytes     bytes of the whole file
 *     uint64   reserved[3]    0 (anything else: refused as foreign, EMC_ECORRUPT)
 *     uint64   xxh64          of the 56 bytes above
 *   descriptor section: n_tables records, then uint64 xxh64
 *     uint32 kind, uint32 dtype, uint32 dim, uint32 name_len (<= 255),
 *     version 2 only: uint32 state (emc_row_state), uint32 reserved (0),
 *     uint64 rows (dense: rows; hashed: capacity), uint64 count (rows present),
 *     uint64 data_bytes, name (name_len bytes, no NUL), zero padding to 8 bytes (checked)
 *   one data section per table, then uint64 xxh64
 *     hashed: count ids (uint64), then count rows; dense: rows rows.
 *     Rows are packed (dim * dtype size bytes each), in row order.
 *     version 2, tables with state: then count state words (f32, EMC_STATE_ADAGRAD's
 *     accumulator), in row order.
 * A version-1 file opens with every table's state EMC_STATE_NONE; a store without state is
 * saved as version 1, so older readers open it.
 *
 * Open checks the header, then every size against the file's real size, then each section's
 * checksum while loading into a fresh store; any failure frees everything, so a store is
 * returned whole or not at all.
 */
#define _GNU_SOURCE /* O_TMPFILE, AT_EMPTY_PATH */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "../internal.h"

#define EMC__FILE_MAGIC "EMBCSTOR"
#define EMC__FILE_VERSION 2u /* the newest this library reads and writes */
#define EMC__HDR_BYTES 64u
#define EMC__DESC_FIXED 40u    /* version 1 */
#define EMC__DESC_FIXED_V2 48u /* version 2: state, reserved */

typedef struct wr {
  FILE *f;
  XXH64_state_t *h;
  int err;
} wr;

static void wr_bytes(wr *w, const void *p, size_t n) {
  if (w->err || n == 0) return;
  if (fwrite(p, 1, n, w->f) != n) w->err = errno ? errno : EIO;
  if (w->h) XXH64_update(w->h, p, n);
}
static void wr_u32(wr *w, uint32_t v) { wr_bytes(w, &v, 4); }
static void wr_u64(wr *w, uint64_t v) { wr_bytes(w, &v, 8); }
static void wr_sum(wr *w) {
  uint64_t d = XXH64_digest(w->h);
  XXH64_state_t *h = w->h;
  w->h = NULL;
  wr_u64(w, d);
  XXH64_reset(h, 0);
  w->h = h;
}

static uint64_t table_count(const emc__table *t) {
  return t->kind == EMC_TABLE_DENSE ? t->rows : EMC_LD_ACQUIRE(t->count);
}
static uint64_t table_data_bytes(const emc__table *t, uint64_t count) {
  return (t->kind == EMC_TABLE_HASHED ? count * 8u : 0u) + count * t->row_bytes +
         (t->state != EMC_STATE_NONE ? count * 4u : 0u);
}
/* The version a store is saved as: 2 only when a table keeps state. */
static uint32_t store_version(const emc_store *s) {
  uint32_t i;
  for (i = 0; i < s->n_tables; i++)
    if (s->tables[i].state != EMC_STATE_NONE) return 2u;
  return 1u;
}
static uint32_t pad8(uint32_t n) { return (8u - (n & 7u)) & 7u; }

/* ----------------------------------------------------------------- save
 * A save never exposes a partial file at `path`, and leaves no file behind when it fails or
 * is killed:
 *   1. the store is written to an unnamed file in path's directory (O_TMPFILE), fsynced;
 *   2. the file gets a unique temporary name there (linkat through /proc/self/fd, or
 *      AT_EMPTY_PATH), which is renamed over `path` at once; then the directory is fsynced.
 * A process killed before step 2 leaves nothing (the unnamed file vanishes with it); only a
 * kill between linkat and rename, two system calls apart, leaves a named temporary.
 * Where O_TMPFILE is not supported (or the file cannot be linked), step 1 writes to a named
 * temporary created with O_EXCL instead. Temporaries are named "<name>.tmp-<pid>-<hex>", so
 * saves from several threads or processes never share one; each save first removes
 * temporaries of <name> left by processes that no longer exist.
 * Concurrent saves to one path: each writes its own file and the last rename wins; the path
 * always holds one complete store. */

/* Tests set this to take the named-temporary path, as on a filesystem without O_TMPFILE. */
int emc__save_named_temp = 0;

#define IO_STATUS(e) ((e) == ENOMEM ? EMC_ENOMEM : EMC_EIO)

typedef struct save_names {
  char *dir;  /* directory of path ("." when path has no slash) */
  char *base; /* last component of path (points into a copy) */
  char *tmp;  /* buffer for "<path>.tmp-<pid>-<16 hex>" */
  size_t tmp_cap;
} save_names;

static void names_free(save_names *n) {
  free(n->dir);
  free(n->tmp);
  memset(n, 0, sizeof *n);
}

static emc_status names_init(save_names *n, const char *path) {
  size_t len = strlen(path), cap;
  const char *slash = strrchr(path, '/');
  memset(n, 0, sizeof *n);
  if (len == 0 || path[len - 1] == '/') return EMC_FAIL(EMC_EIO, "'%s' names a directory", path);
  if (!emc__size_add(len, 64, &cap)) return EMC_FAIL(EMC_EINVAL, "path is too long");
  n->dir = emc__malloc(cap);
  n->tmp = emc__malloc(cap);
  if (!n->dir || !n->tmp) {
    names_free(n);
    return EMC_FAIL(EMC_ENOMEM, "path buffers of %zu bytes", cap);
  }
  n->tmp_cap = cap;
  if (!slash) {
    strcpy(n->dir, ".");
    n->base = n->dir + 2;
    strcpy(n->base, path);
  } else {
    size_t dl = (size_t)(slash - path);
    if (dl == 0) dl = 1; /* "/x": the root */
    memcpy(n->dir, path, dl);
    n->dir[dl] = 0;
    n->base = n->dir + dl + 1;
    strcpy(n->base, slash + 1);
  }
  return EMC_OK;
}

/* A fresh temporary name for path: unique per process, thread and call (the caller still
 * creates or links it exclusively and retries on EEXIST). */
static void next_tmp_name(save_names *n, const char *path) {
  static uint64_t counter;
  uint64_t k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  uint64_t r = emc__fmix64(k ^ ((uint64_t)(uintptr_t)&k << 17) ^ (uint64_t)time(NULL) ^
                           ((uint64_t)getpid() << 40));
  snprintf(n->tmp, n->tmp_cap, "%s.tmp-%ld-%016llx", path, (long)getpid(), (unsigned long long)r);
}

/* Remove "<base>.tmp-<pid>-..." (and the older "<base>.tmp.<pid>") in dir whose process is
 * gone. Best effort: errors are ignored. */
static void remove_stale_temps(const save_names *n) {
  DIR *d = opendir(n->dir);
  struct dirent *e;
  size_t bl = strlen(n->base);
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    const char *q = e->d_name;
    char *end;
    long pid;
    if (strncmp(q, n->base, bl) != 0 || strncmp(q + bl, ".tmp", 4) != 0) continue;
    q += bl + 4;
    if (*q != '-' && *q != '.') continue;
    errno = 0;
    pid = strtol(q + 1, &end, 10);
    if (errno || end == q + 1 || pid <= 0 || (*end != '-' && *end != 0)) continue;
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    (void)unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

/* Give the unnamed file fd the name n->tmp (fresh). 0, or an errno. */
static int link_tmpfile(int fd, save_names *n, const char *path) {
  char proc[64];
  int tries, e = 0;
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  for (tries = 0; tries < 64; tries++) {
    next_tmp_name(n, path);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, n->tmp, AT_SYMLINK_FOLLOW) == 0) return 0;
    e = errno;
    if (e == ENOENT && linkat(fd, "", AT_FDCWD, n->tmp, AT_EMPTY_PATH) == 0) return 0; /* no /proc */
    if (e != EEXIST) return e;
  }
  return e;
}

/* Create a named temporary next to path (O_EXCL, mode 0666 less the umask, as fopen would). */
static int create_named_temp(save_names *n, const char *path) {
  int tries, fd = -1;
  for (tries = 0; tries < 64; tries++) {
    next_tmp_name(n, path);
    fd = open(n->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) break;
  }
  return fd;
}

/* fsync a directory so a rename in it is durable. 0, or an errno (EINVAL: the filesystem
 * cannot sync directories, which is not an error). */
static int sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), e = 0;
  if (fd < 0) return errno;
  if (fsync(fd) != 0 && errno != EINVAL) e = errno;
  close(fd);
  return e;
}

/* Write the whole file to w->f and fsync it. Returns EMC_OK or the status (detail set). */
static emc_status write_store(const emc_store *s, wr *w, const uint64_t *counts,
                              uint64_t desc_bytes, uint64_t file_bytes, const char *what) {
  uint32_t i;
  unsigned char hdr[EMC__HDR_BYTES], *row = NULL;
  static const unsigned char zeros[8] = {0};
  emc_status st = EMC_OK;
  /* header */
  memset(hdr, 0, sizeof hdr);
  memcpy(hdr, EMC__FILE_MAGIC, 8);
  {
    uint32_t v = store_version(s), n = s->n_tables;
    uint64_t d;
    memcpy(hdr + 8, &v, 4);
    memcpy(hdr + 12, &n, 4);
    memcpy(hdr + 16, &desc_bytes, 8);
    memcpy(hdr + 24, &file_bytes, 8);
    d = XXH64(hdr, 56, 0);
    memcpy(hdr + 56, &d, 8);
  }
  {
    XXH64_state_t *h = w->h;
    w->h = NULL;
    wr_bytes(w, hdr, sizeof hdr);
    w->h = h;
    XXH64_reset(w->h, 0);
  }
  /* descriptors */
  for (i = 0; i < s->n_tables; i++) {
    const emc__table *t = &s->tables[i];
    uint32_t nl = (uint32_t)strlen(t->name);
    wr_u32(w, (uint32_t)t->kind);
    wr_u32(w, (uint32_t)t->dtype);
    wr_u32(w, t->dim);
    wr_u32(w, nl);
    if (store_version(s) >= 2) {
      wr_u32(w, t->state);
      wr_u32(w, 0);
    }
    wr_u64(w, t->rows);
    wr_u64(w, counts[i]);
    wr_u64(w, table_data_bytes(t, counts[i]));
    wr_bytes(w, t->name, nl);
    wr_bytes(w, zeros, pad8(nl));
  }
  wr_sum(w);
  /* data */
  for (i = 0; i < s->n_tables && !w->err; i++) {
    const emc__table *t = &s->tables[i];
    uint64_t r;
    free(row);
    row = emc__malloc(t->stride);
    if (!row) {
      st = EMC_FAIL(EMC_ENOMEM, "row buffer");
      break;
    }
    if (t->kind == EMC_TABLE_HASHED) {
      for (r = 0; r < counts[i]; r++) {
        uint64_t id = EMC_LD_RELAXED(&t->row_ids[r]);
        /* each saved id must be its row's (only a corrupted shared segment breaks this; the
         * file would not open again) */
        if (emc__store_find(t, id) != (int64_t)r) {
          st = EMC_FAIL(EMC_ECORRUPT, "table %u ('%s'): row %llu's id %llu does not map back "
                        "to it (a corrupted shared segment): nothing saved", i, t->name,
                        (unsigned long long)r, (unsigned long long)id);
          break;
        }
        wr_u64(w, id);
      }
      if (st != EMC_OK) break;
    }
    if (t->state != EMC_STATE_NONE) { /* each row read once with its state (one version) */
      unsigned char *states = emc__mallocn(counts[i] ? counts[i] : 1, 4);
      if (!states) {
        st = EMC_FAIL(EMC_ENOMEM, "state words of %llu rows", (unsigned long long)counts[i]);
        break;
      }
      for (r = 0; r < counts[i] && !w->err; r++) {
        emc__store_full_read(s, i, r, row);
        wr_bytes(w, row, t->row_bytes);
        memcpy(states + 4 * r, row + t->state_off, 4);
      }
      wr_bytes(w, states, counts[i] * 4); /* then the state words, in row order */
      free(states);
    } else {
      for (r = 0; r < counts[i] && !w->err; r++) {
        emc__store_row_read(s, i, r, row);
        wr_bytes(w, row, t->row_bytes);
      }
    }
    wr_sum(w);
  }
  free(row);
  if (st != EMC_OK) return st;
  if (!w->err && fflush(w->f) != 0) w->err = errno ? errno : EIO;
  if (!w->err && fsync(fileno(w->f)) != 0) w->err = errno ? errno : EIO;
  if (w->err) return EMC_FAIL(IO_STATUS(w->err), "writing %s: %s", what, strerror(w->err));
  return EMC_OK;
}

emc_status emc_store_save(const emc_store *s, const char *path) {
  save_names nm = {0};
  wr w = {0};
  uint32_t i;
  uint64_t desc_bytes = 0, file_bytes, *counts = NULL;
  int fd = -1, named = 0, e;
  emc_status st = EMC_OK;

  if (!s || !path) return EMC_FAIL(EMC_EINVAL, "s or path is NULL");
  {
    /* the rename would replace whatever path names: a device (say /dev/null, for a caller
     * running as root), FIFO or socket, or a link to one (/dev/stdout), is refused rather
     * than replaced by a store file (checked when the call starts) */
    struct stat sb;
    int special = lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode) &&
                  (!S_ISLNK(sb.st_mode) ||
                   (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)));
    if (special)
      return EMC_FAIL(EMC_EIO, "'%s' is not a regular file (a device, FIFO or socket, or a link to "
                      "one): not replaced", path);
  }
  EMC_TRY(names_init(&nm, path));
  counts = emc__calloc(s->n_tables, sizeof *counts);
  w.h = emc__xxh64_create();
  if (!counts || !w.h) {
    st = EMC_FAIL(EMC_ENOMEM, "save buffers");
    goto out;
  }
  /* Sizes first (a hashed table's count is sampled once: rows added later are not saved). */
  file_bytes = EMC__HDR_BYTES;
  for (i = 0; i < s->n_tables; i++) {
    const emc__table *t = &s->tables[i];
    uint32_t nl = (uint32_t)strlen(t->name);
    counts[i] = table_count(t);
    desc_bytes += (store_version(s) >= 2 ? EMC__DESC_FIXED_V2 : EMC__DESC_FIXED) + nl + pad8(nl);
    file_bytes += table_data_bytes(t, counts[i]) + 8u;
  }
  file_bytes += desc_bytes + 8u;

  remove_stale_temps(&nm);
  /* 1. the file, unnamed where the filesystem allows */
  if (!emc__save_named_temp) fd = open(nm.dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    e = errno;
    if (!emc__save_named_temp && e != EOPNOTSUPP && e != EISDIR && e != EINVAL) {
      st = EMC_FAIL(IO_STATUS(e), "cannot create a file in '%s' for '%s': %s", nm.dir, path,
                    strerror(e));
      goto out;
    }
    if ((fd = create_named_temp(&nm, path)) < 0) {
      e = errno;
      st = EMC_FAIL(IO_STATUS(e), "cannot create '%s': %s", nm.tmp, strerror(e));
      goto out;
    }
    named = 1;
  }
  if (!(w.f = emc__fdopen(fd, "wb"))) {
    e = errno;
    close(fd);
    st = EMC_FAIL(IO_STATUS(e), "cannot open a stream on the file for '%s': %s", path, strerror(e));
    goto out;
  }
  st = write_store(s, &w, counts, desc_bytes, file_bytes, named ? nm.tmp : "the new file");
  /* 2. a name, then the path */
  if (st == EMC_OK && !named) {
    if ((e = link_tmpfile(fileno(w.f), &nm, path)) != 0)
      st = EMC_FAIL(IO_STATUS(e), "cannot link the new file into '%s': %s", nm.dir, strerror(e));
    else
      named = 1;
  }
  if (st == EMC_OK && rename(nm.tmp, path) != 0) {
    e = errno;
    st = EMC_FAIL(IO_STATUS(e), "rename '%s' -> '%s': %s", nm.tmp, path, strerror(e));
  }
  if (st != EMC_OK && named) unlink(nm.tmp);
  if (fclose(w.f) != 0 && st == EMC_OK) {
    e = errno; /* the data was fsynced: a close error here would be unusual */
    st = EMC_FAIL(IO_STATUS(e), "closing '%s': %s", path, strerror(e));
  }
  w.f = NULL;
  if (st == EMC_OK && (e = sync_dir(nm.dir)) != 0)
    st = EMC_FAIL(IO_STATUS(e), "'%s' is in place, but fsync of its directory '%s' failed: %s",
                  path, nm.dir, strerror(e));
out:
  free(counts);
  names_free(&nm);
  if (w.h) XXH64_freeState(w.h);
  return st;
}

/* ----------------------------------------------------------------- open */
typedef struct rd {
  FILE *f;
  XXH64_state_t *h;
  uint64_t left; /* bytes of the file not yet read */
} rd;

/* Read n bytes; EMC_ECORRUPT if the file ends first, EMC_EIO on a read error. */
static emc_status rd_bytes(rd *r, void *p, size_t n, const char *what) {
  if (n > r->left) return EMC_FAIL(EMC_ECORRUPT, "file truncated in %s", what);
  if (fread(p, 1, n, r->f) != n)
    return ferror(r->f) ? EMC_FAIL(EMC_EIO, "read error in %s", what)
                        : EMC_FAIL(EMC_ECORRUPT, "file truncated in %s", what);
  r->left -= n;
  if (r->h) XXH64_update(r->h, p, n);
  return EMC_OK;
}

static emc_status rd_sum(rd *r, const char *what) {
  uint64_t want = XXH64_digest(r->h), got;
  XXH64_state_t *h = r->h;
  emc_status st;
  r->h = NULL;
  st = rd_bytes(r, &got, 8, what);
  r->h = h;
  XXH64_reset(h, 0);
  if (st != EMC_OK) return st;
  if (got != want) return EMC_FAIL(EMC_ECORRUPT, "checksum mismatch in %s", what);
  return EMC_OK;
}

typedef struct file_desc {
  uint32_t kind, dtype, dim, name_len, state;
  uint64_t rows, count, data_bytes;
  char name[256];
} file_desc;

emc_status emc_store_open(const char *path, emc_store **out) {
  rd r = {0};
  struct stat sb;
  unsigned char hdr[EMC__HDR_BYTES], *row = NULL;
  uint32_t version, n_tables, i, dfix;
  uint64_t desc_bytes, file_bytes, sum = EMC__HDR_BYTES, d;
  file_desc *fd = NULL;
  emc_store *s = NULL;
  emc_status st = EMC_OK;

  if (!path || !out) return EMC_FAIL(EMC_EINVAL, "path or out is NULL");
  {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the mode check rejects it */
    int fdn = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), e;
    if (fdn < 0) {
      e = errno;
      return EMC_FAIL(IO_STATUS(e), "cannot open '%s': %s", path, strerror(e));
    }
    if (fstat(fdn, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      close(fdn);
      return EMC_FAIL(EMC_EIO, "'%s' is not a regular file", path);
    }
    if (fcntl(fdn, F_SETFL, fcntl(fdn, F_GETFL) & ~O_NONBLOCK) != 0 || !(r.f = emc__fdopen(fdn, "rb"))) {
      e = errno;
      close(fdn);
      return EMC_FAIL(IO_STATUS(e), "cannot open '%s': %s", path, strerror(e));
    }
  }
  r.left = (uint64_t)sb.st_size;
  r.h = emc__xxh64_create();
  if (!r.h) {
    fclose(r.f);
    return EMC_FAIL(EMC_ENOMEM, "hash state");
  }

  /* header */
  {
    XXH64_state_t *h = r.h;
    r.h = NULL;
    st = rd_bytes(&r, hdr, sizeof hdr, "header");
    r.h = h;
    XXH64_reset(r.h, 0);
  }
  if (st != EMC_OK) goto fail;
  if (memcmp(hdr, EMC__FILE_MAGIC, 8) != 0) {
    st = EMC_FAIL(EMC_ECORRUPT, "'%s' is not an embcache store (bad magic)", path);
    goto fail;
  }
  memcpy(&d, hdr + 56, 8);
  if (d != XXH64(hdr, 56, 0)) {
    st = EMC_FAIL(EMC_ECORRUPT, "header checksum mismatch");
    goto fail;
  }
  memcpy(&version, hdr + 8, 4);
  memcpy(&n_tables, hdr + 12, 4);
  memcpy(&desc_bytes, hdr + 16, 8);
  memcpy(&file_bytes, hdr + 24, 8);
  if (version < 1 || version > EMC__FILE_VERSION) {
    st = EMC_FAIL(EMC_ECORRUPT, "format version %u, this library reads 1 .. %u", version,
                  EMC__FILE_VERSION);
    goto fail;
  }
  dfix = version >= 2 ? EMC__DESC_FIXED_V2 : EMC__DESC_FIXED;
  /* Versions 1 and 2 write zeros there: anything else is a file of another writer or a later
   * format that this reader would misread, so it is foreign, not ignored. */
  for (i = 32; i < 56; i++)
    if (hdr[i] != 0) {
      st = EMC_FAIL(EMC_ECORRUPT, "reserved header byte %u is 0x%02x, must be 0", i, hdr[i]);
      goto fail;
    }
  if (n_tables == 0 || n_tables > EMC_MAX_TABLES || file_bytes != (uint64_t)sb.st_size ||
      desc_bytes > file_bytes ||
      desc_bytes < (uint64_t)n_tables * dfix) {
    st = EMC_FAIL(EMC_ECORRUPT, "inconsistent header (n_tables %u, file %llu of %llu bytes)",
                  n_tables, (unsigned long long)file_bytes, (unsigned long long)sb.st_size);
    goto fail;
  }

  /* descriptors, checked for consistency before any table memory is allocated */
  fd = emc__calloc(n_tables, sizeof *fd);
  if (!fd) {
    st = EMC_FAIL(EMC_ENOMEM, "descriptors");
    goto fail;
  }
  {
    uint64_t seen = 0;
    for (i = 0; i < n_tables; i++) {
      unsigned char fx[EMC__DESC_FIXED_V2], pad[8];
      const unsigned char *fx8; /* the three uint64 fields */
      emc_table_desc td = {0};
      uint64_t rb, want;
      uint32_t k, reserved = 0;
      if ((st = rd_bytes(&r, fx, dfix, "descriptors")) != EMC_OK) goto fail;
      memcpy(&fd[i].kind, fx, 4);
      memcpy(&fd[i].dtype, fx + 4, 4);
      memcpy(&fd[i].dim, fx + 8, 4);
      memcpy(&fd[i].name_len, fx + 12, 4);
      fd[i].state = 0;
      if (version >= 2) {
        memcpy(&fd[i].state, fx + 16, 4);
        memcpy(&reserved, fx + 20, 4);
      }
      fx8 = fx + dfix - 24;
      memcpy(&fd[i].rows, fx8, 8);
      memcpy(&fd[i].count, fx8 + 8, 8);
      memcpy(&fd[i].data_bytes, fx8 + 16, 8);
      if (reserved != 0 || fd[i].state > EMC_STATE_ADAGRAD) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: state %u, reserved %u", i, fd[i].state, reserved);
        goto fail;
      }
      if (fd[i].name_len > 255) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: name length %u", i, fd[i].name_len);
        goto fail;
      }
      if ((st = rd_bytes(&r, fd[i].name, fd[i].name_len, "descriptors")) != EMC_OK) goto fail;
      if ((st = rd_bytes(&r, pad, pad8(fd[i].name_len), "descriptors")) != EMC_OK) goto fail;
      for (k = 0; k < pad8(fd[i].name_len); k++)
        if (pad[k] != 0) {
          st = EMC_FAIL(EMC_ECORRUPT, "table %u: name padding byte %u is 0x%02x, must be 0", i, k,
                        pad[k]);
          goto fail;
        }
      fd[i].name[fd[i].name_len] = 0;
      seen += dfix + fd[i].name_len + pad8(fd[i].name_len);
      td.name = fd[i].name;
      td.kind = (emc_table_kind)fd[i].kind;
      td.dtype = (emc_dtype)fd[i].dtype;
      td.dim = fd[i].dim;
      td.rows = fd[i].rows;
      td.state = (emc_row_state)fd[i].state;
      if (fd[i].kind > 1 || fd[i].dtype > 1 || strlen(fd[i].name) != fd[i].name_len ||
          emc__table_desc_check(&td, i) != EMC_OK) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: invalid descriptor", i);
        goto fail;
      }
      rb = (uint64_t)fd[i].dim * (fd[i].dtype == EMC_DTYPE_F32 ? 4u : 2u);
      if (fd[i].count > fd[i].rows || (fd[i].kind == EMC_TABLE_DENSE && fd[i].count != fd[i].rows)) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: count %llu vs rows %llu", i,
                      (unsigned long long)fd[i].count, (unsigned long long)fd[i].rows);
        goto fail;
      }
      want = (fd[i].kind == EMC_TABLE_HASHED ? fd[i].count * 8u : 0u) + fd[i].count * rb +
             (fd[i].state != EMC_STATE_NONE ? fd[i].count * 4u : 0u);
      if (fd[i].data_bytes != want) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: data size %llu, expected %llu", i,
                      (unsigned long long)fd[i].data_bytes, (unsigned long long)want);
        goto fail;
      }
      if (want > file_bytes) {
        st = EMC_FAIL(EMC_ECORRUPT, "table %u: data size %llu exceeds the file size %llu", i,
                      (unsigned long long)want, (unsigned long long)file_bytes);
        goto fail;
      }
      sum += fd[i].data_bytes + 8u;
      if (sum > file_bytes) {
        st = EMC_FAIL(EMC_ECORRUPT, "table sizes exceed the file size");
        goto fail;
      }
    }
    if (seen != desc_bytes) {
      st = EMC_FAIL(EMC_ECORRUPT, "descriptor section is %llu bytes, header says %llu",
                    (unsigned long long)seen, (unsigned long long)desc_bytes);
      goto fail;
    }
    if ((st = rd_sum(&r, "descriptors")) != EMC_OK) goto fail;
    if (sum + desc_bytes + 8u != file_bytes) {
      st = EMC_FAIL(EMC_ECORRUPT, "sections add up to %llu bytes, file has %llu",
                    (unsigned long long)(sum + desc_bytes + 8u), (unsigned long long)file_bytes);
      goto fail;
    }
  }

  /* tables */
  if ((st = emc__store_shell(n_tables, &s)) != EMC_OK) goto fail;
  for (i = 0; i < n_tables; i++) {
    emc_table_desc td = {0};
    emc__table *t;
    uint64_t k;
    td.name = fd[i].name;
    td.kind = (emc_table_kind)fd[i].kind;
    td.dtype = (emc_dtype)fd[i].dtype;
    td.dim = fd[i].dim;
    td.rows = fd[i].rows;
    td.state = (emc_row_state)fd[i].state;
    if ((st = emc__table_init(s, i, &td)) != EMC_OK) goto fail;
    t = &s->tables[i];
    free(row);
    row = emc__malloc(t->stride);
    if (!row) {
      st = EMC_FAIL(EMC_ENOMEM, "row buffer");
      goto fail;
    }
    if (t->kind == EMC_TABLE_HASHED) {
      for (k = 0; k < fd[i].count; k++) {
        uint64_t id;
        if ((st = rd_bytes(&r, &id, 8, "hashed ids")) != EMC_OK) goto fail;
        if (emc__store_find_or_add(s, i, id, NULL) != (int64_t)k) {
          st = EMC_FAIL(EMC_ECORRUPT, "table %u: duplicate id %llu", i, (unsigned long long)id);
          goto fail;
        }
      }
    }
    for (k = 0; k < fd[i].count; k++) {
      if ((st = rd_bytes(&r, row, t->row_bytes, "rows")) != EMC_OK) goto fail;
      emc__row_store(emc__store_row(t, k), row, t->row_bytes);
    }
    if (t->state != EMC_STATE_NONE) /* the state words (the store is not shared yet) */
      for (k = 0; k < fd[i].count; k++)
        if ((st = rd_bytes(&r, emc__store_row(t, k) + t->state_off, 4, "state")) != EMC_OK) goto fail;
    if ((st = rd_sum(&r, "rows")) != EMC_OK) goto fail;
  }
  if (r.left != 0) {
    st = EMC_FAIL(EMC_ECORRUPT, "%llu trailing bytes", (unsigned long long)r.left);
    goto fail;
  }
  fclose(r.f);
  XXH64_freeState(r.h);
  free(fd);
  free(row);
  *out = s;
  return EMC_OK;

fail:
  if (r.f) fclose(r.f);
  if (r.h) XXH64_freeState(r.h);
  free(fd);
  free(row);
  emc__store_free(s);
  return st;
}
