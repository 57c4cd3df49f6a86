/*
 * fuzz_store_open.c: the store file loader (lib/store/store_io.c, emc_store_open).
 *
 * Input: u8 fixup flags, then the file's bytes. Checksums would stop almost every mutation at
 * the first section, so the flags let the fuzzer repair them before the file is written:
 *   bit 2  set the header's file_bytes to the real size
 *   bit 1  recompute the descriptor section's and each data section's XXH64 (sections are
 *          located with the sizes the file itself claims, as far as they lie in the file)
 *   bit 0  recompute the header's XXH64
 * The file goes to a private temporary path and emc_store_open must either
 *   - fail with EMC_ECORRUPT, EMC_EIO or EMC_ENOMEM, a detail, and *out untouched; or
 *   - succeed: then the store must match the file (descriptors, counts, every row of dense
 *     tables, every present hashed id and its row; an absent hashed id reads as zeros),
 *     save again, reopen equal, and a second save must be byte-identical to the first.
 */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include <xxhash.h>

#include "fuzz_common.h"

#define HDR 64u

/* A descriptor's fixed bytes and where its three uint64 fields start, by the file's version
 * (2 adds u32 state and u32 reserved after name_len). */
static uint32_t desc_fixed(const unsigned char *b) {
  uint32_t v;
  memcpy(&v, b + 8, 4);
  return v >= 2 ? 48u : 40u;
}
#define DESC_FIXED desc_fixed(b)
#define U64_AT (DESC_FIXED - 24u) /* rows; count at +8, data_bytes at +16 */

static char g_path[3][256];

static void cleanup(void) {
  int k;
  for (k = 0; k < 3; k++)
    if (g_path[k][0]) unlink(g_path[k]);
}

static void init_paths(void) {
  const char *dir = getenv("TMPDIR");
  int k;
  if (g_path[0][0]) return;
  if (!dir || !*dir) dir = "/tmp";
  for (k = 0; k < 3; k++)
    snprintf(g_path[k], sizeof g_path[k], "%s/emc_fuzz_store_%ld_%d.emc", dir, (long)getpid(), k);
  atexit(cleanup);
}

static uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t rd32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static void wr64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static uint32_t pad8(uint32_t n) { return (8u - (n & 7u)) & 7u; }

/* Repair the file per flags (see the top comment). */
static void fixup(unsigned char *b, size_t n, uint8_t flags) {
  if (n < HDR) return;
  if (flags & 4u) wr64(b + 24, (uint64_t)n);
  if (flags & 2u) {
    uint32_t nt = rd32(b + 12), i;
    uint64_t desc = rd64(b + 16), pos = HDR, sec;
    if (desc <= n - HDR && n - HDR - desc >= 8) {
      wr64(b + HDR + desc, XXH64(b + HDR, (size_t)desc, 0));
      sec = HDR + desc + 8;
      /* walk the descriptors for each table's data size */
      for (i = 0; i < nt && i < EMC_MAX_TABLES; i++) {
        uint32_t nl;
        uint64_t db;
        if (pos + DESC_FIXED > HDR + desc) break;
        nl = rd32(b + pos + 12);
        db = rd64(b + pos + U64_AT + 16);
        pos += DESC_FIXED + (uint64_t)nl + pad8(nl);
        if (db > n || sec > n || n - sec < 8 || n - sec - 8 < db) break;
        wr64(b + sec + db, XXH64(b + sec, (size_t)db, 0));
        sec += db + 8;
      }
    }
  }
  if (flags & 1u) wr64(b + 56, XXH64(b, 56, 0));
}

/* Bytes emc_store_open would allocate for the hashed tables the descriptors claim (rows,
 * id map, row ids; as lib/store/store.c sizes them). A hashed table's capacity is not bounded by
 * the file's size, so a few hundred bytes can ask for gigabytes; inputs over the limit are
 * skipped (see README.md, "Known limits"). EMC_FUZZ_STORE_MAX_MB overrides the limit. */
static uint64_t hashed_alloc_bytes(const unsigned char *b, size_t n) {
  uint32_t nt, i;
  uint64_t pos = HDR, total = 0;
  if (n < HDR) return 0;
  nt = rd32(b + 12);
  for (i = 0; i < nt && i < EMC_MAX_TABLES && pos + DESC_FIXED <= n; i++) {
    uint32_t kind = rd32(b + pos), dtype = rd32(b + pos + 4), dim = rd32(b + pos + 8);
    uint32_t nl = rd32(b + pos + 12);
    uint64_t rows = rd64(b + pos + U64_AT), cap = 16, stride;
    pos += DESC_FIXED + (uint64_t)nl + pad8(nl);
    if (kind != EMC_TABLE_HASHED || rows > EMC_MAX_ROWS || dim > EMC_MAX_DIM) continue;
    stride = emc__row_stride((uint64_t)dim * (dtype == 0 ? 4u : 2u) + 8u); /* (+ state) */
    while (cap < 2 * rows) cap <<= 1;
    total += rows * stride + cap * 16u + rows * 8u;
  }
  return total;
}

static int write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok;
  if (!f) return 0;
  ok = fwrite(p, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  return ok;
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  long len;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
      free(b);
      b = NULL;
    }
    *n = (size_t)len;
  }
  fclose(f);
  return b;
}

static size_t row_bytes(const emc_table_desc *d) { return (size_t)d->dim * emc_dtype_size(d->dtype); }

/* The loaded store must hold exactly what the file says (the file passed every check, so
 * its layout is the documented one). */
static void check_against_file(const emc_store *s, const unsigned char *b, size_t n) {
  uint32_t nt = rd32(b + 12), i;
  uint64_t desc = rd64(b + 16), pos = HDR, sec = HDR + desc + 8;
  FZ_CHECK(emc_store_n_tables(s) == nt, "n_tables %u, file says %u", emc_store_n_tables(s), nt);
  for (i = 0; i < nt; i++) {
    const unsigned char *d = b + pos;
    uint32_t kind = rd32(d), dtype = rd32(d + 4), dim = rd32(d + 8), nl = rd32(d + 12);
    uint32_t state = DESC_FIXED > 40u ? rd32(d + 16) : 0u;
    uint64_t rows = rd64(d + U64_AT), count = rd64(d + U64_AT + 8), db = rd64(d + U64_AT + 16), cnt, k;
    emc_table_desc td;
    size_t rb;
    unsigned char *got;
    const unsigned char *ids = NULL, *data;
    FZ_STATUS(emc_store_table(s, i, &td), EMC_OK, "emc_store_table");
    FZ_CHECK((uint32_t)td.kind == kind && (uint32_t)td.dtype == dtype && td.dim == dim &&
                 td.rows == rows && (uint32_t)td.state == state,
             "table %u: descriptor differs from the file", i);
    FZ_CHECK(strlen(td.name) == nl && memcmp(td.name, d + DESC_FIXED, nl) == 0,
             "table %u: name differs", i);
    FZ_STATUS(emc_store_table_count(s, i, &cnt), EMC_OK, "emc_store_table_count");
    FZ_CHECK(cnt == count, "table %u: count %llu, file says %llu", i, (unsigned long long)cnt,
             (unsigned long long)count);
    rb = row_bytes(&td);
    FZ_CHECK(sec + db + 8 <= n, "table %u: section beyond the file", i);
    data = b + sec;
    if (kind == EMC_TABLE_HASHED) {
      ids = data;
      data += 8 * count;
    }
    got = malloc(rb ? rb : 1);
    if (!got) abort();
    for (k = 0; k < count; k++) {
      uint64_t id = ids ? rd64(ids + 8 * k) : k;
      FZ_STATUS(emc_store_read(s, i, &id, 1, got), EMC_OK, "emc_store_read");
      FZ_CHECK(memcmp(got, data + k * rb, rb) == 0, "table %u id %llu: row differs from the file",
               i, (unsigned long long)id);
      if (state != 0) { /* version 2: the state words follow the rows */
        float sw, want;
        memcpy(&want, data + count * rb + 4 * k, 4);
        FZ_STATUS(emc_store_read_state(s, i, &id, 1, &sw), EMC_OK, "emc_store_read_state");
        FZ_CHECK(memcmp(&sw, &want, 4) == 0, "table %u id %llu: state differs from the file", i,
                 (unsigned long long)id);
      }
    }
    if (kind == EMC_TABLE_HASHED) {
      /* an id not in the file reads as zeros */
      uint64_t probe = 0x9E3779B97F4A7C15ull, j;
      for (j = 0; j < count; j++)
        if (rd64(ids + 8 * j) == probe) { probe++; j = (uint64_t)-1; }
      memset(got, 0xA5, rb);
      FZ_STATUS(emc_store_read(s, i, &probe, 1, got), EMC_OK, "emc_store_read(absent)");
      for (j = 0; j < rb; j++) FZ_CHECK(got[j] == 0, "table %u: absent id reads non-zero", i);
    } else {
      uint64_t bad = rows;
      FZ_STATUS(emc_store_read(s, i, &bad, 1, got), EMC_ERANGE, "emc_store_read(id = rows)");
    }
    free(got);
    pos += DESC_FIXED + (uint64_t)nl + pad8(nl);
    sec += db + 8;
  }
  FZ_CHECK(sec == n, "sections end at %llu of %zu bytes", (unsigned long long)sec, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *b, *f1, *f2;
  size_t n, n1 = 0, n2 = 0;
  emc_store *sentinel = (emc_store *)(uintptr_t)0x5a5a5a5a5a5a5a50ull;
  emc_store *s = sentinel, *s2 = sentinel;
  emc_status st;

  if (size < 1) return 0;
  init_paths();
  n = size - 1;
  b = malloc(n ? n : 1);
  if (!b) abort();
  memcpy(b, data + 1, n);
  fixup(b, n, data[0]);
  {
    const char *mb = getenv("EMC_FUZZ_STORE_MAX_MB");
    uint64_t limit = (mb && *mb ? strtoull(mb, NULL, 10) : 64u) << 20;
    if (hashed_alloc_bytes(b, n) > limit) {
      free(b);
      return 0;
    }
  }
  if (!write_file(g_path[0], b, n)) {
    fprintf(stderr, "fuzz_store_open: cannot write %s\n", g_path[0]);
    abort();
  }

  st = emc_store_open(g_path[0], &s);
  if (st != EMC_OK) {
    FZ_CHECK(st == EMC_ECORRUPT || st == EMC_EIO || st == EMC_ENOMEM,
             "emc_store_open failed with %s", emc_status_name(st));
    FZ_CHECK(emc_last_error_detail()[0] != '\0', "emc_store_open: %s with an empty detail",
             emc_status_name(st));
    FZ_CHECK(s == sentinel, "emc_store_open failed but changed *out");
    free(b);
    return 0;
  }
  FZ_CHECK(s != NULL && s != sentinel, "emc_store_open succeeded without a store");
  check_against_file(s, b, n);

  /* save, reopen, compare; a second save is byte-identical */
  FZ_STATUS(emc_store_save(s, g_path[1]), EMC_OK, "emc_store_save");
  FZ_STATUS(emc_store_open(g_path[1], &s2), EMC_OK, "emc_store_open(saved)");
  f1 = read_file(g_path[1], &n1);
  FZ_CHECK(f1 != NULL, "cannot read back %s", g_path[1]);
  check_against_file(s2, f1, n1);
  check_against_file(s, f1, n1);
  FZ_STATUS(emc_store_save(s2, g_path[2]), EMC_OK, "emc_store_save(reopened)");
  f2 = read_file(g_path[2], &n2);
  FZ_CHECK(f2 != NULL && n1 == n2 && memcmp(f1, f2, n1) == 0,
           "save -> open -> save is not byte-identical (%zu vs %zu bytes)", n1, n2);
  FZ_CHECK(n1 == n, "the saved file has %zu bytes, the input %zu", n1, n);
  free(f1);
  free(f2);
  emc_store_destroy(s2);
  emc_store_destroy(s);
  free(b);
  return 0;
}
