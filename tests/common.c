/* common.c: helpers shared by the Check suites (see common.h). */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <dirent.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long emct_first_diff(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  size_t i;
  for (i = 0; i < n; i++)
    if (x[i] != y[i]) return (long)i;
  return -1;
}

const char *emct_hex(const void *p, size_t n, char *buf, size_t cap) {
  const unsigned char *b = p;
  size_t i, o = 0;
  if (cap == 0) return buf;
  buf[0] = '\0';
  for (i = 0; i < n && i < 16 && o + 4 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%02x ", b[i]);
  return buf;
}

/* ------------------------------------------------------------ temp files */
char *emct_tmpdir(char *buf, size_t cap) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  snprintf(buf, cap, "%s/emc_test_XXXXXX", base);
  ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp(%s) failed", buf);
  return buf;
}

int emct_gpu_quick(void) {
#ifdef EMCT_CUDASIM
  return 1;
#else
  const char *q = getenv("EMC_TEST_QUICK");
  return q && q[0] && strcmp(q, "0") != 0;
#endif
}

int emct_gpu_present(const char *suite) {
  int n = 0;
  if (emc_device_count(&n) == EMC_OK && n > 0) return 1;
  printf("%s: no CUDA device (%s): skipped\n", suite, emc_last_error_detail());
  return 0;
}

int emct_gpu_present_in_child(const char *suite) {
  int stt = 0, ok;
  pid_t p;
  fflush(NULL);
  if ((p = fork()) == 0) {
    ok = emct_gpu_present(suite);
    fflush(NULL); /* (its "skipped" line) */
    _exit(ok ? 0 : 77);
  }
  if (p < 0 || waitpid(p, &stt, 0) != p) stt = -1;
  if (WIFEXITED(stt) && (WEXITSTATUS(stt) == 0 || WEXITSTATUS(stt) == 77)) return WEXITSTATUS(stt);
  fprintf(stderr, "%s: the device probe failed (status %d)\n", suite, stt);
  return 1;
}

void emct_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[4096];
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) rmdir(p);
  }
  closedir(d);
  rmdir(dir);
}

unsigned char *emct_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf;
  long sz;
  ck_assert_msg(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc(sz > 0 ? (size_t)sz : 1);
  ck_assert(buf != NULL);
  ck_assert_msg(fread(buf, 1, (size_t)sz, f) == (size_t)sz, "short read of %s", path);
  fclose(f);
  *n = (size_t)sz;
  return buf;
}

void emct_write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "cannot create %s", path);
  if (n) ck_assert_msg(fwrite(p, 1, n, f) == n, "short write of %s", path);
  ck_assert(fclose(f) == 0);
}

/* ------------------------------------------------------------------ worlds */
uint64_t emct_id_of(const emct_world *w, uint32_t t, uint64_t rank) {
  if (w->spec[t].kind == EMC_TABLE_DENSE) return rank;
  return emc__fmix64(rank ^ ((uint64_t)(t + 1) << 52)); /* a bijection: distinct ranks, ids */
}

void emct_world_init(emct_world *w, const emct_tspec *spec, uint32_t n, double alpha,
                     uint64_t seed) {
  uint32_t t;
  memset(w, 0, sizeof *w);
  w->n = n;
  w->seed = seed;
  w->alpha = alpha;
  w->spec = calloc(n, sizeof *w->spec);
  w->desc = calloc(n, sizeof *w->desc);
  w->row_bytes = calloc(n, sizeof *w->row_bytes);
  w->ref = calloc(n, sizeof *w->ref);
  w->present = calloc(n, sizeof *w->present);
  w->zipf = calloc(n, sizeof *w->zipf);
  w->perm = calloc(n, sizeof *w->perm);
  ck_assert(w->spec && w->desc && w->row_bytes && w->ref && w->present && w->zipf && w->perm);
  emct_rng_seed(&w->rng, seed ^ 0x1234567ull);
  for (t = 0; t < n; t++) {
    emct_tspec *s = &w->spec[t];
    *s = spec[t];
    if (s->kind == EMC_TABLE_DENSE) s->universe = s->present = s->rows;
    ck_assert_msg(s->present <= s->universe && s->present <= s->rows,
                  "bad test spec for table %u", t);
    w->desc[t].name = NULL;
    w->desc[t].kind = s->kind;
    w->desc[t].rows = s->rows;
    w->desc[t].dim = s->dim;
    w->desc[t].dtype = s->dtype;
    w->row_bytes[t] = (size_t)s->dim * emc_dtype_size(s->dtype);
    w->ref[t] = calloc(s->universe, w->row_bytes[t]);
    w->present[t] = calloc(s->universe, 1);
    ck_assert(w->ref[t] && w->present[t]);
    ck_assert(emct_zipf_init(&w->zipf[t], s->universe, alpha) == 0);
    emct_perm_init(&w->perm[t], s->universe, seed + t);
  }
  EMCT_OK(emc_store_create(w->desc, n, &w->store));
  for (t = 0; t < n; t++) {
    emct_tspec *s = &w->spec[t];
    uint64_t r;
    if (s->kind == EMC_TABLE_HASHED && s->present > 0) {
      /* write the present ids (zero rows), then fill them */
      uint64_t chunk = 4096, i;
      uint64_t *ids = malloc(chunk * sizeof *ids);
      unsigned char *zero = calloc(chunk, w->row_bytes[t]);
      ck_assert(ids && zero);
      for (r = 0; r < s->present; r += chunk) {
        uint64_t m = s->present - r < chunk ? s->present - r : chunk;
        for (i = 0; i < m; i++) ids[i] = emct_id_of(w, t, r + i);
        EMCT_OK(emc_store_write(w->store, t, ids, m, zero));
      }
      free(ids);
      free(zero);
    }
    EMCT_OK(emc_store_fill_uniform(w->store, t, EMCT_LO, EMCT_HI, seed));
    for (r = 0; r < s->present; r++) {
      EMCT_OK(emc_uniform_row(seed, t, emct_id_of(w, t, r), EMCT_LO, EMCT_HI, s->dim, s->dtype,
                              w->ref[t] + r * w->row_bytes[t]));
      w->present[t][r] = 1;
    }
  }
}

void emct_world_free(emct_world *w) {
  uint32_t t;
  emc_store_destroy(w->store);
  for (t = 0; t < w->n; t++) {
    free(w->ref[t]);
    free(w->present[t]);
  }
  free(w->spec); free(w->desc); free(w->row_bytes); free(w->ref); free(w->present);
  free(w->zipf); free(w->perm);
  memset(w, 0, sizeof *w);
}

size_t emct_world_batch_bytes(const emct_world *w, const uint64_t *offsets) {
  size_t b = 0;
  uint32_t t;
  for (t = 0; t < w->n; t++) b += (size_t)(offsets[t + 1] - offsets[t]) * w->row_bytes[t];
  return b;
}

size_t emct_pos_offset(const emct_world *w, const uint64_t *offsets, uint32_t t, uint64_t i) {
  size_t b = 0;
  uint32_t u;
  for (u = 0; u < t; u++) b += (size_t)(offsets[u + 1] - offsets[u]) * w->row_bytes[u];
  return b + (size_t)(i - offsets[t]) * w->row_bytes[t];
}

uint64_t emct_world_batch(emct_world *w, const uint64_t *counts, uint64_t *ids,
                          uint64_t *ranks, uint64_t *offsets) {
  uint32_t t;
  uint64_t k = 0, i;
  offsets[0] = 0;
  for (t = 0; t < w->n; t++) {
    for (i = 0; i < counts[t]; i++, k++) {
      uint64_t r = emct_perm_apply(&w->perm[t], emct_zipf_sample(&w->zipf[t], &w->rng));
      ranks[k] = r;
      ids[k] = emct_id_of(w, t, r);
    }
    offsets[t + 1] = k;
  }
  return k;
}

void emct_world_check_rows(const emct_world *w, const uint64_t *ranks, const uint64_t *offsets,
                           const void *out, const uint8_t *where, const char *what) {
  const unsigned char *o = out;
  uint32_t t;
  uint64_t i;
  char h1[64], h2[64];
  for (t = 0; t < w->n; t++) {
    size_t rb = w->row_bytes[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, o += rb) {
      uint64_t r = ranks[i];
      const unsigned char *want = w->ref[t] + r * rb;
      long d = emct_first_diff(o, want, rb);
      /* ck_assert only on a failure: a passing ck_assert writes a record to Check's message
       * file, which costs seconds over the millions of rows some suites check */
      if (d >= 0)
        ck_assert_msg(d < 0,
                      "%s: table %u (%s, dim %u, %s) id %llu (rank %llu) at batch position %llu: "
                      "byte %ld of %zu differs: got %s want %s",
                      what, t, w->spec[t].kind == EMC_TABLE_DENSE ? "dense" : "hashed",
                      w->spec[t].dim, w->spec[t].dtype == EMC_DTYPE_F32 ? "f32" : "f16",
                      (unsigned long long)emct_id_of(w, t, r), (unsigned long long)r,
                      (unsigned long long)i, d, rb,
                      emct_hex(o + (d & ~3L), rb - (size_t)(d & ~3L), h1, sizeof h1),
                      emct_hex(want + (d & ~3L), rb - (size_t)(d & ~3L), h2, sizeof h2));
      if (where) {
        if (w->present[t][r] && !(where[i] == EMC_WHERE_CACHE || where[i] == EMC_WHERE_STORE))
          ck_assert_msg(where[i] == EMC_WHERE_CACHE || where[i] == EMC_WHERE_STORE,
                        "%s: table %u id %llu at position %llu is present but where = %u", what,
                        t, (unsigned long long)emct_id_of(w, t, r), (unsigned long long)i,
                        where[i]);
        else if (!w->present[t][r] && where[i] != EMC_WHERE_ABSENT)
          ck_assert_msg(where[i] == EMC_WHERE_ABSENT,
                        "%s: table %u id %llu at position %llu is absent but where = %u", what, t,
                        (unsigned long long)emct_id_of(w, t, r), (unsigned long long)i, where[i]);
      }
    }
  }
}

void emct_world_apply_insert(emct_world *w, const uint64_t *ranks, const uint64_t *offsets,
                             const void *rows) {
  const unsigned char *p = rows;
  uint32_t t;
  uint64_t i;
  for (t = 0; t < w->n; t++) {
    size_t rb = w->row_bytes[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, p += rb) {
      memcpy(w->ref[t] + ranks[i] * rb, p, rb);
      w->present[t][ranks[i]] = 1;
    }
  }
}

void emct_world_check_store(const emct_world *w, const char *what) {
  uint32_t t;
  for (t = 0; t < w->n; t++) {
    size_t rb = w->row_bytes[t];
    uint64_t u = w->spec[t].universe, r, cnt = 0, chunk = 1024;
    uint64_t *ids = malloc(chunk * sizeof *ids);
    unsigned char *buf = malloc(chunk * rb);
    char h1[64], h2[64];
    ck_assert(ids && buf);
    for (r = 0; r < u; r += chunk) {
      uint64_t m = u - r < chunk ? u - r : chunk, i;
      for (i = 0; i < m; i++) ids[i] = emct_id_of(w, t, r + i);
      EMCT_OK(emc_store_read(w->store, t, ids, m, buf));
      for (i = 0; i < m; i++) {
        const unsigned char *want = w->ref[t] + (r + i) * rb;
        long d = emct_first_diff(buf + i * rb, want, rb);
        if (d >= 0) /* ck_assert only on a failure (see emct_world_check_rows) */
          ck_assert_msg(d < 0, "%s: store table %u id %llu (rank %llu): byte %ld differs: got %s want %s",
                        what, t, (unsigned long long)ids[i], (unsigned long long)(r + i), d,
                        emct_hex(buf + i * rb + (d & ~3L), rb - (size_t)(d & ~3L), h1, sizeof h1),
                        emct_hex(want + (d & ~3L), rb - (size_t)(d & ~3L), h2, sizeof h2));
        cnt += w->present[t][r + i];
      }
    }
    if (w->spec[t].kind == EMC_TABLE_HASHED) {
      uint64_t c = 0;
      EMCT_OK(emc_store_table_count(w->store, t, &c));
      if (c != cnt)
        ck_assert_msg(c == cnt, "%s: hashed table %u holds %llu ids, the reference %llu", what, t,
                      (unsigned long long)c, (unsigned long long)cnt);
    }
    free(ids);
    free(buf);
  }
}

void emct_pattern_row(uint32_t table, uint64_t id, uint64_t tag, uint32_t dim, emc_dtype dtype,
                      void *out) {
  uint32_t j;
  for (j = 0; j < dim; j++) {
    uint64_t h = emc__fmix64(((uint64_t)table << 48) ^ (id * 0x9E3779B97F4A7C15ull) ^ (tag << 20) ^ j);
    /* 2 .. 1001.5 in steps of 0.5: exact in f16 (11-bit significand) and f32 */
    float v = 2.0f + (float)(h % 2000u) * 0.5f;
    if (dtype == EMC_DTYPE_F32) memcpy((float *)out + j, &v, 4);
    else ((uint16_t *)out)[j] = emc__f32_to_f16(v);
  }
}

void emct_check_cache(emc_cache *c, const emct_world *w, int no_inserts, const char *what) {
  emc_stats s;
  emc__cache_debug d;
  emc_status st = emc__cache_check(c);
  uint64_t sum_rows = 0, sum_bytes = 0;
  uint32_t t;
  ck_assert_msg(st == EMC_OK, "%s: emc__cache_check: %s (%s)", what, emc_status_name(st),
                emc_last_error_detail());
  EMCT_OK(emc_get_stats(c, &s));
  EMCT_OK(emc__cache_get_debug(c, &d));
  for (t = 0; t < w->n; t++) {
    uint64_t r = 0;
    EMCT_OK(emc_get_table_rows_cached(c, t, &r));
    sum_rows += r;
    sum_bytes += r * emc__row_stride(w->row_bytes[t]);
  }
  ck_assert_msg(s.hits + s.misses + s.absent == s.lookups,
                "%s: hits %llu + misses %llu + absent %llu != lookups %llu", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent, (unsigned long long)s.lookups);
  ck_assert_msg(sum_rows == s.rows_cached, "%s: per-table rows cached sum %llu != rows_cached %llu",
                what, (unsigned long long)sum_rows, (unsigned long long)s.rows_cached);
  ck_assert_msg(sum_bytes == s.bytes_in_use,
                "%s: sum of rows * stride %llu != bytes_in_use %llu", what,
                (unsigned long long)sum_bytes, (unsigned long long)s.bytes_in_use);
  ck_assert_msg(s.bytes_in_use <= d.high_bytes,
                "%s: bytes_in_use %llu > t1 * capacity %llu after a call", what,
                (unsigned long long)s.bytes_in_use, (unsigned long long)d.high_bytes);
  ck_assert_msg(d.calls_above_high == 0, "%s: %llu calls returned above t1 * capacity", what,
                (unsigned long long)d.calls_above_high);
  ck_assert_msg(d.passes_above_low == 0,
                "%s: %llu eviction passes ended above t2 * capacity (max after pass %llu, low %llu)",
                what, (unsigned long long)d.passes_above_low,
                (unsigned long long)d.max_bytes_after_pass, (unsigned long long)d.low_bytes);
  ck_assert_msg(d.passes == s.evict_passes, "%s: debug passes %llu != stats evict_passes %llu",
                what, (unsigned long long)d.passes, (unsigned long long)s.evict_passes);
  ck_assert_msg(s.capacity_bytes == c->cfg.capacity_bytes, "%s: capacity_bytes %llu != %zu", what,
                (unsigned long long)s.capacity_bytes, c->cfg.capacity_bytes);
  ck_assert_msg(s.admissions >= s.evictions || !no_inserts,
                "%s: evictions %llu > admissions %llu without inserts", what,
                (unsigned long long)s.evictions, (unsigned long long)s.admissions);
  if (no_inserts) {
    ck_assert_msg(s.rows_cached + s.evictions == s.admissions,
                  "%s: resident %llu + evicted %llu != admitted %llu", what,
                  (unsigned long long)s.rows_cached, (unsigned long long)s.evictions,
                  (unsigned long long)s.admissions);
    ck_assert_msg(s.dirty_rows == 0 && s.writebacks == 0,
                  "%s: dirty %llu writebacks %llu without inserts", what,
                  (unsigned long long)s.dirty_rows, (unsigned long long)s.writebacks);
  } else {
    ck_assert_msg(s.rows_cached + s.evictions >= s.admissions &&
                      s.rows_cached + s.evictions <= s.admissions + s.inserts,
                  "%s: resident %llu + evicted %llu outside [admitted %llu, admitted + inserts %llu]",
                  what, (unsigned long long)s.rows_cached, (unsigned long long)s.evictions,
                  (unsigned long long)s.admissions,
                  (unsigned long long)(s.admissions + s.inserts));
    ck_assert_msg(s.dirty_rows <= s.rows_cached, "%s: dirty %llu > resident %llu", what,
                  (unsigned long long)s.dirty_rows, (unsigned long long)s.rows_cached);
  }
}

int emct_run_nofork(Suite *s) {
  SRunner *sr = srunner_create(s);
  int failed;
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

/* ------------------------------------------------------------ generation rows */
uint32_t emct_gen_max(emc_dtype dt) {
  return dt == EMC_DTYPE_F32 ? (1u << (24u - EMCT_GEN_RANK_BITS)) - 1u : 2047u;
}

static uint32_t gen_elem_mask(uint32_t t, uint32_t j) {
  return (uint32_t)(emc__fmix64(((uint64_t)(t + 1) << 32) | j) & 0xffffffu);
}

void emct_gen_row(uint32_t t, uint64_t rank, uint32_t g, uint32_t dim, emc_dtype dt, void *out) {
  uint32_t j;
  for (j = 0; j < dim; j++) {
    if (dt == EMC_DTYPE_F32) {
      uint32_t v = (((g << EMCT_GEN_RANK_BITS) | (uint32_t)rank) ^ gen_elem_mask(t, j)) + 1u;
      float f = (float)v;
      memcpy((float *)out + j, &f, 4);
    } else {
      uint32_t v = ((g + (uint32_t)rank * (2u * j + 1u) + 37u * t + 11u * j) & 2047u) + 1u;
      ((uint16_t *)out)[j] = emc__f32_to_f16((float)v);
    }
  }
}

int emct_is_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i;
  for (i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

int64_t emct_gen_decode(uint32_t t, uint64_t rank, uint32_t dim, emc_dtype dt, const void *row,
                        void *scratch) {
  uint32_t g;
  size_t rb = (size_t)dim * emc_dtype_size(dt);
  float f;
  if (dt == EMC_DTYPE_F32) {
    uint32_t v;
    memcpy(&f, row, 4);
    if (!(f >= 1.0f && f <= 16777216.0f)) return -1;
    v = (uint32_t)f;
    if ((float)v != f) return -1;
    v = (v - 1u) ^ gen_elem_mask(t, 0);
    if ((v & (EMCT_GEN_MAX_UNIVERSE - 1u)) != (uint32_t)rank) return -1;
    g = v >> EMCT_GEN_RANK_BITS;
  } else {
    uint32_t v;
    f = emc__f16_to_f32(((const uint16_t *)row)[0]);
    if (!(f >= 1.0f && f <= 2048.0f)) return -1;
    v = (uint32_t)f;
    if ((float)v != f) return -1;
    g = (v - 1u - (uint32_t)rank - 37u * t) & 2047u;
  }
  emct_gen_row(t, rank, g, dim, dt, scratch);
  return memcmp(scratch, row, rb) == 0 ? (int64_t)g : -1;
}

emc_stats get_stats(const emc_cache *c) {
  emc_stats s;
  EMCT_OK(emc_get_stats(c, &s));
  return s;
}

emc__cache_debug get_debug(const emc_cache *c) {
  emc__cache_debug d;
  EMCT_OK(emc__cache_get_debug(c, &d));
  return d;
}
