/*
 * make_corpus.c: writes the seed corpora under <fuzz dir>/corpus/fuzz_<name>/.
 *
 *   build/fuzz/fuzz_make_corpus fuzz      (from the repository root; overwrites seed-* files,
 *                                          leaves crash-* and other files alone)
 *
 * fuzz_keycodec    hand-picked codec shapes: one table, mixed kinds, 32-bit keys that need
 *                  the Kraft fallback, infeasible key spaces, invalid arguments, 4096+ tables.
 * fuzz_store_open  stores saved by emc_store_save (dense + hashed, f32 + f16, names, empty
 *                  hashed tables), each with fixup flags 0 and 7, plus a few damaged copies
 *                  (truncated, a flipped size with checksums repaired).
 * fuzz_api_ops     deterministic pseudo-random operation streams of several lengths, and a
 *                  few written out by hand (insert/lookup/flush/destroy cycles).
 * fuzz_store_attach  the shared memory segments of small shared stores (dense + hashed,
 *                  f32 + f16, Adagrad state, hashed ids present), and a truncated copy.
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embcache.h"
#include "internal.h"

static const char *g_root;

static void die(const char *what) {
  fprintf(stderr, "make_corpus: %s (%s; %s)\n", what, strerror(errno), emc_last_error_detail());
  exit(1);
}

static void put(const char *target, const char *name, const void *p, size_t n) {
  char path[1024];
  FILE *f;
  snprintf(path, sizeof path, "%s/corpus/%s", g_root, target);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) die(path);
  snprintf(path, sizeof path, "%s/corpus/%s/seed-%s", g_root, target, name);
  f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) die(path);
}

/* ---------------------------------------------------------------- keycodec */
typedef struct kbuf {
  unsigned char b[4096 * 3 + 16];
  size_t n;
} kbuf;
static void kb_u8(kbuf *k, unsigned v) { k->b[k->n++] = (unsigned char)v; }
static void kb_head(kbuf *k, unsigned n_small, unsigned key_sel, uint64_t seed) {
  int i;
  k->n = 0;
  kb_u8(k, n_small); /* < 0x80: n_tables = 1 + n_small % 24 */
  kb_u8(k, key_sel); /* 0: 64 bits, 5: 32 bits, 7|(j<<3): invalid */
  for (i = 0; i < 8; i++) kb_u8(k, (unsigned)(seed >> (8 * i)) & 0xffu);
}
/* rows = 2^e (+x for x in 1..63 with mode 1), kind 0 dense / 1 hashed */
static void kb_table(kbuf *k, unsigned e, unsigned kind, unsigned x) {
  kb_u8(k, e);
  kb_u8(k, kind);
  kb_u8(k, x);
}

static void keycodec_seeds(void) {
  const char *T = "fuzz_keycodec";
  kbuf k;
  unsigned i;
  kb_head(&k, 0, 0, 0); kb_table(&k, 10, 0, 0); put(T, "one-dense-64", k.b, k.n);
  kb_head(&k, 0, 5, 0); kb_table(&k, 10, 1, 0); put(T, "one-hashed-32", k.b, k.n);
  kb_head(&k, 2, 0, 42);
  kb_table(&k, 20, 0, 0); kb_table(&k, 3, 1, 0x41); kb_table(&k, 12, 0, 0x85);
  put(T, "three-mixed-64", k.b, k.n);
  /* 32-bit keys: a big table and several middling ones: Huffman leaves one short */
  kb_head(&k, 5, 5, 7);
  kb_table(&k, 30, 0, 0); kb_table(&k, 28, 0, 0); kb_table(&k, 28, 1, 0);
  kb_table(&k, 27, 0, 0); kb_table(&k, 1, 0, 0); kb_table(&k, 0, 1, 0);
  put(T, "kraft-fallback-32", k.b, k.n);
  kb_head(&k, 1, 5, 0); kb_table(&k, 31, 0, 0); kb_table(&k, 31, 0, 0);
  put(T, "keyspace-32", k.b, k.n);
  kb_head(&k, 0, 5, 0); kb_table(&k, 31, 0, 0x40 | 1); put(T, "too-wide-32", k.b, k.n);
  kb_head(&k, 0, 0, 0); kb_table(&k, 40, 0, 0); put(T, "max-rows-64", k.b, k.n);
  kb_head(&k, 3, 0, UINT64_MAX);
  kb_table(&k, 40, 0, 0); kb_table(&k, 40, 1, 0xff); kb_table(&k, 39, 0, 0); kb_table(&k, 0, 1, 0);
  put(T, "huge-64", k.b, k.n);
  kb_head(&k, 1, 0, 0); kb_table(&k, 255, 0, 0); kb_table(&k, 3, 0, 0); put(T, "zero-rows", k.b, k.n);
  kb_head(&k, 0, 0, 0); kb_table(&k, 3, 255, 0); put(T, "bad-kind", k.b, k.n);
  kb_head(&k, 0, 7 | (1 << 3), 0); kb_table(&k, 3, 0, 0); put(T, "key-bits-16", k.b, k.n);
  kb_head(&k, 23, 0, 3);
  for (i = 0; i < 24; i++) kb_table(&k, i, i & 1u, (i * 37u) & 0xffu);
  put(T, "twenty-four-64", k.b, k.n);
  kb_head(&k, 23, 5, 3);
  for (i = 0; i < 24; i++) kb_table(&k, 26 + i % 3, i & 1u, 0);
  put(T, "twenty-four-32", k.b, k.n);
  kb_head(&k, 15, 5, 9);
  for (i = 0; i < 16; i++) kb_table(&k, 5, 0, 0);
  put(T, "equal-weights-32", k.b, k.n);
  /* many tables: shape bit 7, u16 count */
  {
    static const unsigned counts[3] = {4096, 4097, 1000};
    static const char *names[3] = {"max-tables", "too-many-tables", "thousand-tables"};
    int c;
    for (c = 0; c < 3; c++) {
      k.n = 0;
      kb_u8(&k, 0x80);
      kb_u8(&k, counts[c] & 0xffu);
      kb_u8(&k, counts[c] >> 8);
      kb_u8(&k, c == 2 ? 5 : 0);
      for (i = 0; i < 8; i++) kb_u8(&k, 0);
      for (i = 0; i < counts[c]; i++) kb_table(&k, (i * 7u) % (c == 2 ? 20u : 41u), i & 1u, i & 0xffu);
      put(T, names[c], k.b, k.n);
    }
  }
}

/* ---------------------------------------------------------------- store_open */
static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b;
  long len = -1;
  if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
    die(path);
  b = malloc((size_t)len + 1);
  if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) die(path);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static void put_store(const char *name, emc_store *s, const char *tmp) {
  const char *T = "fuzz_store_open";
  unsigned char *b, *in;
  size_t n;
  char nm[128];
  if (emc_store_save(s, tmp) != EMC_OK) die("emc_store_save");
  b = slurp(tmp, &n);
  in = malloc(n + 1);
  if (!in) die("malloc");
  memcpy(in + 1, b, n);
  in[0] = 0;
  snprintf(nm, sizeof nm, "%s", name);
  put(T, nm, in, n + 1);
  in[0] = 7;
  snprintf(nm, sizeof nm, "%s-fix", name);
  put(T, nm, in, n + 1);
  if (n > 80) { /* truncated in the descriptors */
    snprintf(nm, sizeof nm, "%s-trunc", name);
    put(T, nm, in, 1 + 80);
    /* a descriptor's rows field bumped, checksums repaired by the harness */
    in[1 + 64 + 16] ^= 0x01;
    snprintf(nm, sizeof nm, "%s-rows-fix", name);
    put(T, nm, in, n + 1);
  }
  free(in);
  free(b);
  remove(tmp);
}

static void store_seeds(void) {
  char tmp[256];
  emc_store *s;
  const char *dir = getenv("TMPDIR");
  snprintf(tmp, sizeof tmp, "%s/emc_make_corpus_%ld.emc", dir && *dir ? dir : "/tmp", (long)getpid());
  {
    emc_table_desc d[1] = {{"dense", EMC_TABLE_DENSE, 4, 3, EMC_DTYPE_F32, EMC_STATE_NONE}};
    if (emc_store_create(d, 1, &s) != EMC_OK) die("create");
    if (emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 1) != EMC_OK) die("fill");
    put_store("dense-f32", s, tmp);
    emc_store_destroy(s);
  }
  {
    emc_table_desc d[1] = {{"h", EMC_TABLE_HASHED, 8, 5, EMC_DTYPE_F16, EMC_STATE_NONE}};
    uint64_t ids[3] = {7, UINT64_MAX, 1ull << 40};
    uint16_t rows[15];
    unsigned i;
    for (i = 0; i < 15; i++) rows[i] = (uint16_t)(0x3c00u + i);
    if (emc_store_create(d, 1, &s) != EMC_OK) die("create");
    if (emc_store_write(s, 0, ids, 3, rows) != EMC_OK) die("write");
    put_store("hashed-f16", s, tmp);
    emc_store_destroy(s);
  }
  {
    emc_table_desc d[3] = {{"users", EMC_TABLE_DENSE, 6, 2, EMC_DTYPE_F16, EMC_STATE_NONE},
                           {NULL, EMC_TABLE_HASHED, 4, 1, EMC_DTYPE_F32, EMC_STATE_NONE},
                           {"items_with_a_longer_name", EMC_TABLE_HASHED, 3, 4, EMC_DTYPE_F32, EMC_STATE_NONE}};
    uint64_t ids[2] = {1, 2};
    float rows[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (emc_store_create(d, 3, &s) != EMC_OK) die("create");
    if (emc_store_fill_uniform(s, 0, 0.0f, 4.0f, 9) != EMC_OK) die("fill");
    if (emc_store_write(s, 2, ids, 2, rows) != EMC_OK) die("write");
    put_store("mixed", s, tmp);
    emc_store_destroy(s);
  }
  {
    emc_table_desc d[1] = {{"", EMC_TABLE_HASHED, 1, 1, EMC_DTYPE_F16, EMC_STATE_NONE}};
    if (emc_store_create(d, 1, &s) != EMC_OK) die("create");
    put_store("hashed-empty", s, tmp);
    emc_store_destroy(s);
  }
  {
    emc_table_desc d[1] = {{"x", EMC_TABLE_DENSE, 1, 1, EMC_DTYPE_F32, EMC_STATE_NONE}};
    if (emc_store_create(d, 1, &s) != EMC_OK) die("create");
    put_store("dense-one", s, tmp);
    emc_store_destroy(s);
  }
  { /* version 2: a table with optimizer state beside a plain one */
    emc_table_desc d[2] = {{"adagrad", EMC_TABLE_HASHED, 6, 3, EMC_DTYPE_F16, EMC_STATE_ADAGRAD},
                           {"plain", EMC_TABLE_DENSE, 3, 2, EMC_DTYPE_F32, EMC_STATE_NONE}};
    uint64_t ids[2] = {11, 1ull << 50};
    uint16_t rows[6] = {0x3c00, 0x4000, 0x4200, 0xbc00, 0x3800, 0x0000};
    if (emc_store_create(d, 2, &s) != EMC_OK) die("create");
    if (emc_store_write(s, 0, ids, 2, rows) != EMC_OK) die("write");
    if (emc_store_fill_uniform(s, 1, -1.0f, 1.0f, 3) != EMC_OK) die("fill");
    put_store("state-v2", s, tmp);
    emc_store_destroy(s);
  }
  {
    const char *T = "fuzz_store_open";
    static const unsigned char junk[] = "\x07" "EMBCSTOR";
    put(T, "magic-only", junk, sizeof junk - 1);
    put(T, "empty", "", 0);
  }
}

/* ---------------------------------------------------------------- api_ops */
static void api_seeds(void) {
  const char *T = "fuzz_api_ops";
  static const size_t lens[10] = {8, 24, 48, 64, 96, 128, 200, 300, 500, 800};
  unsigned char b[1024];
  unsigned i;
  size_t k;
  for (i = 0; i < 10; i++) {
    uint64_t st = 0xC0FFEEull + i;
    char nm[32];
    for (k = 0; k < lens[i]; k++) b[k] = (unsigned char)(emc__splitmix64(&st) >> 56);
    snprintf(nm, sizeof nm, "random-%zu", lens[i]);
    put(T, nm, b, lens[i]);
  }
  {
    /* two tables (dense f32 dim 4 x 8 rows, hashed f16 dim 3 x cap 4), filled / pre-written;
     * cache 2048 bytes, t1/t2 0.95/0.80, 64-bit keys, unified index 8; then
     * insert, lookup_ex, flush, stats, lookup, destroy+recreate, store op, misc */
    static const unsigned char s[] = {
        1,    /* 2 tables */
        0x0c, 7, /* dense f32 dim 4, 8 rows */
        0x09, 3, /* hashed f16 dim 3, 4 rows */
        1, 0x13, /* init: fill seed 1; hashed: 3 ids */
        5, 0x04, /* cache: 2048 B, thresholds 0, 64-bit, unified 8 */
        2, 3, 0, 1, 2, 2, 0, 1, 9, 0,   /* insert: 3 dense ids, 2 hashed ids (dup) */
        1, 2, 3, 0x41, 4, 0, 1, 0, /* lookup_ex: 2 dense ids, 4 hashed (where on) */
        3, 4,                            /* flush, stats */
        0, 5, 0, 1, 2, 3, 0x80, 1, 7, 0, /* lookup with an edge id */
        5, 3, 0x05,                      /* recreate: 200 B, 32-bit keys */
        2, 1, 0xc4, 1, 0, 0,             /* insert an out-of-range dense id */
        2, 0, 5, 0, 1, 2, 3, 4, 0,       /* insert 5 hashed ids: over capacity */
        0, 1, 0, 0, 0xf1,                /* lookup with offsets[0] != 0 */
        6, 0x00, 6, 0x10, 6, 0x20, 6, 0x40,
        7, 0x00, 0x10, 7, 0x31, 7, 0x40, 7, 0x50, 7, 0x61,
        5, 0xe0, 0x00,                   /* recreate with invalid thresholds: no cache */
        2, 2, 0, 1, 1, 0, 1, 0,          /* store write without a cache */
        0, 1, 0, 1, 5, 0, 0,             /* store read without a cache */
        6, 0x31, 9, 7, 0,
        5, 6, 0x81,                      /* recreate: 8192 B, host backend */
        3};
    put(T, "scripted", s, sizeof s);
  }
  {
    /* training calls (opcode 4 with bit 3): two tables (dense f32 dim 4 x 8 rows, hashed f16
     * dim 3 x cap 4), cache 2048 B; prefetch, dedup, apply SUM and MEAN (duplicates, a new
     * hashed id), a lookup, a flush (the store then equals the model), a refused apply */
    static const unsigned char s[] = {
        1, 0x0c, 7, 0x09, 3, 1, 0x12, 5, 0x04,
        0x0c, 3, 0, 1, 0, 2, 0, 1, 0, 0x00,             /* prefetch: 3 dense, 2 hashed */
        0x0c, 4, 2, 2, 3, 2, 2, 0, 1, 0, 0x01,          /* dedup: duplicates */
        0x0c, 2, 1, 1, 2, 2, 5, 0, 0x02,                /* apply SUM: dup dense, new hashed id */
        8, 0xf8, 16, 4, 0x10, 0xf0, 8, 0x7f, 0x81,     /*   gradients (x / 8) */
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
        0x0c, 3, 1, 1, 1, 0, 0, 0x06,                   /* apply MEAN: one id three times */
        8, 8, 8, 8, 16, 16, 16, 16, 0xe8, 0, 0, 0,
        0, 2, 1, 5, 1, 2, 0,                            /* lookup */
        3,                                              /* flush: the store is the model */
        0x0c, 1, 0xc4, 0, 0, 0x02, 1, 1, 1, 1,          /* apply with a dense id out of range */
        0x0c, 0, 2, 0, 1, 0xf1, 0x01,                   /* dedup with offsets[0] != 0 */
        3};
    put(T, "training", s, sizeof s);
  }
  {
    /* one hashed table of capacity 2, hammered with the id pool: capacity errors */
    unsigned char s[256];
    size_t n = 0;
    s[n++] = 0; s[n++] = 0x01; s[n++] = 1; s[n++] = 0; s[n++] = 2; s[n++] = 0;
    for (i = 0; i < 40; i++) {
      s[n++] = 2; s[n++] = (unsigned char)(1 + i % 3);
      s[n++] = (unsigned char)(i % 12); s[n++] = (unsigned char)((i * 5) % 12); s[n++] = (unsigned char)(i % 7); s[n++] = 0;
      if (n > 230) break;
    }
    put(T, "hashed-capacity", s, n);
  }
  {
    /* three tables, tiny cache (64 B), many lookups: constant eviction */
    unsigned char s[512];
    size_t n = 0;
    uint64_t st = 77;
    s[n++] = 2;
    s[n++] = 0x04; s[n++] = 15; s[n++] = 0x05; s[n++] = 9; s[n++] = 0x1e; s[n++] = 15;
    s[n++] = 1; s[n++] = 0x37; s[n++] = 0;
    s[n++] = 2 | (3 << 5); s[n++] = 0x08;
    while (n < 480) {
      unsigned op = (unsigned)(emc__splitmix64(&st) >> 61) & 3u;
      s[n++] = (unsigned char)(op == 3 ? 2 : op == 2 ? 3 : op);
      if (op != 2) {
        unsigned t;
        for (t = 0; t < 3; t++) {
          unsigned c = 1 + (unsigned)(emc__splitmix64(&st) % 5), j;
          s[n++] = (unsigned char)c;
          for (j = 0; j < c; j++) s[n++] = (unsigned char)(emc__splitmix64(&st) % 64);
        }
        s[n++] = 0;
        if (op == 1) s[n++] = 1;
      }
    }
    put(T, "evict-churn", s, n);
  }
}

/* ---------------------------------------------------------------- store_attach */
/* The segment of a shared store, as bytes (what emc_store_attach maps). */
static void put_segment(const char *T, const char *seed, const char *name, size_t cut) {
  struct stat sb;
  unsigned char *p;
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd < 0 || fstat(fd, &sb) != 0) die(name);
  p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) die(name);
  put(T, seed, p, cut && cut < (size_t)sb.st_size ? cut : (size_t)sb.st_size);
  munmap(p, (size_t)sb.st_size);
  close(fd);
}

static void attach_seeds(void) {
  const char *T = "fuzz_store_attach";
  char name[64];
  emc_table_desc a[3] = {{"d", EMC_TABLE_DENSE, 40, 3, EMC_DTYPE_F32, EMC_STATE_NONE},
                         {"h", EMC_TABLE_HASHED, 20, 4, EMC_DTYPE_F16, EMC_STATE_NONE},
                         {"s", EMC_TABLE_DENSE, 8, 2, EMC_DTYPE_F32, EMC_STATE_ADAGRAD}};
  emc_store *s;
  uint64_t ids[8] = {1, 5, 9, 1000, 77, 1ull << 40, 3, 12};
  float rows[8 * 4];
  int k;
  snprintf(name, sizeof name, "/emc-corpus-%ld", (long)getpid());
  for (k = 0; k < 8 * 4; k++) rows[k] = (float)k * 0.5f;
  for (k = 0; k < 3; k++) { /* one table; three tables; three tables with rows and ids */
    shm_unlink(name);
    if (emc_store_create_shared(name, a, k == 0 ? 1 : 3, &s) != EMC_OK) die("create_shared");
    if (k == 2) {
      if (emc_store_fill_uniform(s, 0, -1.0f, 1.0f, 5) != EMC_OK ||
          emc_store_write(s, 1, ids, 8, rows) != EMC_OK ||
          emc_store_fill_uniform(s, 2, 0.0f, 1.0f, 6) != EMC_OK)
        die("fill");
    }
    put_segment(T, k == 0 ? "one-table" : k == 1 ? "three-tables" : "filled", name, 0);
    if (k == 2) put_segment(T, "truncated", name, 4096);
    emc_store_destroy(s);
    shm_unlink(name);
  }
}

int main(int argc, char **argv) {
  char path[1024];
  if (argc != 2) {
    fprintf(stderr, "usage: %s FUZZ_DIR   (the repository's fuzz/ directory)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  snprintf(path, sizeof path, "%s/corpus", g_root);
  if (mkdir(path, 0777) != 0 && errno != EEXIST) die(path);
  keycodec_seeds();
  store_seeds();
  api_seeds();
  attach_seeds();
  printf("make_corpus: seeds written under %s/corpus/\n", g_root);
  return 0;
}
