/* warmup.c: the hot-set warm-up (see warmup.h). */
#define _POSIX_C_SOURCE 200809L

#include "warmup.h"
#include "slot.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ count */
#define MIN_SLOTS 1024u
#define MAX_KEYS 0xfffffffeull /* slots hold entry + 1 in 32 bits */

/* Slot of (table, id): MurmurHash3's finalizer over the id with the table mixed in, so
 * tables' equal ids (dense ids all start at 0) land apart. */
static uint64_t key_hash(uint32_t table, uint64_t id) {
  uint64_t k = id ^ ((uint64_t)table * 0x9e3779b97f4a7c15ull);
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

int emcb_warm_count_init(emcb_warm_count *w, uint32_t n_tables) {
  memset(w, 0, sizeof *w);
  if (n_tables == 0) return EMC_EINVAL;
  w->slots = calloc(MIN_SLOTS, sizeof *w->slots);
  if (!w->slots) return EMC_ENOMEM;
  w->n_tables = n_tables;
  w->slot_mask = MIN_SLOTS - 1;
  return 0;
}

void emcb_warm_count_free(emcb_warm_count *w) {
  free(w->table);
  free(w->id);
  free(w->count);
  free(w->slots);
  memset(w, 0, sizeof *w);
}

/* Double the entry arrays (they keep first-occurrence order, the plan's tie-break). */
static int grow_entries(emcb_warm_count *w) {
  uint64_t cap = w->cap_keys ? 2 * w->cap_keys : MIN_SLOTS / 2;
  if (cap > MAX_KEYS) cap = MAX_KEYS;
  if (cap <= w->n_keys) return EMC_ENOMEM; /* 2^32 - 2 distinct keys: the slot width */
  uint32_t *t = realloc(w->table, cap * sizeof *t);
  if (t) w->table = t;
  uint64_t *i = t ? realloc(w->id, cap * sizeof *i) : NULL;
  if (i) w->id = i;
  uint64_t *c = i ? realloc(w->count, cap * sizeof *c) : NULL;
  if (c) w->count = c;
  if (!c) return EMC_ENOMEM; /* the arrays that grew keep their entries; cap_keys is unchanged */
  w->cap_keys = cap;
  return 0;
}

/* Double the slot array and re-insert every entry (no tombstones: keys are never removed). */
static int grow_slots(emcb_warm_count *w) {
  uint64_t n = 2 * (w->slot_mask + 1), mask = n - 1;
  uint32_t *s = calloc(n, sizeof *s);
  if (!s) return EMC_ENOMEM;
  for (uint64_t k = 0; k < w->n_keys; k++) {
    uint64_t h = key_hash(w->table[k], w->id[k]) & mask;
    while (s[h]) h = (h + 1) & mask;
    s[h] = (uint32_t)(k + 1);
  }
  free(w->slots);
  w->slots = s;
  w->slot_mask = mask;
  return 0;
}

/* The slot holding (table, id), or the empty slot where it belongs. Linear probing at load
 * <= 1/2 visits about 2.5 slots per miss on average. */
static uint64_t find_slot(const emcb_warm_count *w, uint32_t table, uint64_t id) {
  uint64_t h = key_hash(table, id) & w->slot_mask;
  for (;;) {
    uint32_t e = w->slots[h];
    if (e == 0 || (w->id[e - 1] == id && w->table[e - 1] == table)) return h;
    h = (h + 1) & w->slot_mask;
  }
}

int emcb_warm_count_batch(emcb_warm_count *w, const uint64_t *ids, const uint64_t *offsets) {
  if (!w || !w->slots || !offsets || (!ids && offsets[w->n_tables] > 0) || offsets[0] != 0)
    return EMC_EINVAL;
  for (uint32_t t = 0; t < w->n_tables; t++)
    if (offsets[t + 1] < offsets[t]) return EMC_EINVAL;
  for (uint32_t t = 0; t < w->n_tables; t++) {
    for (uint64_t p = offsets[t]; p < offsets[t + 1]; p++) {
      uint64_t h = find_slot(w, t, ids[p]);
      if (w->slots[h]) {
        w->count[w->slots[h] - 1]++;
        w->accesses++;
        continue;
      }
      /* a new key: room for its entry, and the table stays at load <= 1/2 */
      int st = 0;
      if (w->n_keys == w->cap_keys) st = grow_entries(w);
      if (st == 0 && 2 * (w->n_keys + 1) > w->slot_mask + 1) {
        st = grow_slots(w);
        if (st == 0) h = find_slot(w, t, ids[p]);
      }
      if (st != 0) return st;
      w->table[w->n_keys] = t;
      w->id[w->n_keys] = ids[p];
      w->count[w->n_keys] = 1;
      w->slots[h] = (uint32_t)(++w->n_keys);
      w->accesses++;
    }
  }
  w->batches++;
  return 0;
}

uint64_t emcb_warm_count_of(const emcb_warm_count *w, uint32_t table, uint64_t id) {
  if (!w || !w->slots || table >= w->n_tables) return 0;
  uint32_t e = w->slots[find_slot(w, table, id)];
  return e ? w->count[e - 1] : 0;
}

/* ------------------------------------------------------------------ plan */
/* Sort keys: the count (saturated to 32 bits) complemented in the high half and the entry in
 * the low half, so ascending order is "most accesses first, then first occurrence first". */
static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

void emcb_warm_plan_free(emcb_warm_plan *p) {
  if (!p) return;
  free(p->row_bytes);
  free(p->row_cost);
  free(p->table);
  free(p->id);
  free(p->count);
  memset(p, 0, sizeof *p);
}

int emcb_warm_plan_make(const emcb_warm_count *w, const emc_store *s, uint64_t budget,
                        emcb_warm_plan *p) {
  if (!p) return EMC_EINVAL;
  memset(p, 0, sizeof *p);
  if (!w || !w->slots || !s || emc_store_n_tables(s) != w->n_tables) return EMC_EINVAL;
  const uint32_t T = w->n_tables;
  int st = EMC_ENOMEM;
  uint64_t *order = NULL, min_cost = UINT64_MAX;
  p->n_tables = T;
  p->budget = budget;
  p->sample_keys = w->n_keys;
  p->sample_accesses = w->accesses;
  p->sample_batches = w->batches;
  p->row_bytes = malloc(T * sizeof *p->row_bytes);
  p->row_cost = malloc(T * sizeof *p->row_cost);
  if (!p->row_bytes || !p->row_cost) goto fail;
  for (uint32_t t = 0; t < T; t++) {
    emc_table_desc d;
    if ((st = emc_store_table(s, t, &d)) != EMC_OK) goto fail;
    p->row_bytes[t] = (uint64_t)d.dim * emc_dtype_size(d.dtype);
    p->row_cost[t] = emcb_slot_stride(p->row_bytes[t]);
    if (p->row_cost[t] < min_cost) min_cost = p->row_cost[t];
  }
  st = EMC_ENOMEM;

  /* Rows that could fit at all: the plan's arrays never need more (a budget far below the
   * sample's size keeps the plan small however many keys were counted). */
  uint64_t most = budget / min_cost < w->n_keys ? budget / min_cost : w->n_keys;
  p->table = malloc((most ? most : 1) * sizeof *p->table);
  p->id = malloc((most ? most : 1) * sizeof *p->id);
  p->count = malloc((most ? most : 1) * sizeof *p->count);
  if (!p->table || !p->id || !p->count) goto fail;
  if (most == 0) return 0;

  /* Hottest first: one sort of all counted keys, O(n log n). */
  order = malloc(w->n_keys * sizeof *order);
  if (!order) goto fail;
  for (uint64_t k = 0; k < w->n_keys; k++) {
    uint64_t c = w->count[k] < 0xffffffffull ? w->count[k] : 0xffffffffull;
    order[k] = (0xffffffffull - c) << 32 | k;
  }
  qsort(order, w->n_keys, sizeof *order, cmp_u64);

  /* Greedy: take each row that still fits; stop once not even the cheapest row would. */
  for (uint64_t i = 0; i < w->n_keys && budget - p->bytes >= min_cost; i++) {
    uint64_t k = order[i] & 0xffffffffull, cost = p->row_cost[w->table[k]];
    if (cost > budget - p->bytes) continue;
    p->table[p->n_rows] = w->table[k];
    p->id[p->n_rows] = w->id[k];
    p->count[p->n_rows] = w->count[k];
    p->n_rows++;
    p->bytes += cost;
  }
  free(order);
  return 0;
fail:
  free(order);
  emcb_warm_plan_free(p);
  return st;
}

uint64_t emcb_warm_default_budget(const emc_cache_config *cfg) {
  /* the library's low_bytes: a size_t times a float below 1 (lib/pool.c) */
  return cfg ? (uint64_t)((double)cfg->capacity_bytes * cfg->evict_low) : 0;
}

/* ------------------------------------------------------------------ apply */
int emcb_warm_apply(emc_cache *c, const emcb_warm_plan *p, size_t chunk_rows, void *stream,
                    emcb_warm_applied *r) {
  emcb_warm_applied res;
  memset(&res, 0, sizeof res);
  if (r) memset(r, 0, sizeof *r);
  if (!c || !p || (p->n_rows > 0 && (!p->table || !p->id || !p->row_bytes))) return EMC_EINVAL;
  if (chunk_rows == 0) chunk_rows = 65536;
  if (chunk_rows > p->n_rows) chunk_rows = p->n_rows ? (size_t)p->n_rows : 1;
  const uint32_t T = p->n_tables;
  uint64_t max_row = 1;
  for (uint32_t t = 0; t < T; t++)
    if (p->row_bytes[t] > max_row) max_row = p->row_bytes[t];
  uint64_t *ids = malloc(chunk_rows * sizeof *ids);
  uint64_t *offsets = malloc((T + 1) * sizeof *offsets);
  uint64_t *fill = malloc((T + 1) * sizeof *fill);
  unsigned char *out = malloc(chunk_rows * max_row);
  emc_stats s0, s1;
  int st = EMC_ENOMEM;
  double t0 = now_s();
  if (!ids || !offsets || !fill || !out) goto done;
  if ((st = emc_get_stats(c, &s0)) != EMC_OK) goto done;

  /* Chunks from the cold end of the plan to the hot end: a lookup stamps the rows it admits
   * as most recently used, so the hottest rows end up the newest. Each chunk becomes one
   * batch: its rows grouped by table (a counting sort), in plan order within a table. */
  for (uint64_t hi = p->n_rows; hi > 0 && st == EMC_OK;) {
    uint64_t lo = hi > chunk_rows ? hi - chunk_rows : 0;
    memset(offsets, 0, (T + 1) * sizeof *offsets);
    for (uint64_t i = lo; i < hi; i++) offsets[p->table[i] + 1]++;
    for (uint32_t t = 0; t < T; t++) offsets[t + 1] += offsets[t];
    memcpy(fill, offsets, (T + 1) * sizeof *fill);
    for (uint64_t i = lo; i < hi; i++) ids[fill[p->table[i]]++] = p->id[i];
    st = emc_lookup(c, ids, offsets, out, stream);
    hi = lo;
  }
  /* CUDA: admissions run on the cache's writer stream after their lookups; the flush runs
   * there after all of them and waits for it. Host: inside the lookup, or on the cache's
   * admission thread, whose queue the flush drains first. */
  if (st == EMC_OK) st = emc_flush(c, stream);
  if (st == EMC_OK) st = emc_get_stats(c, &s1);
  if (st == EMC_OK) {
    res.looked_up = p->n_rows;
    res.rows = (s1.admissions - s0.admissions) + (s1.hits - s0.hits);
    res.bytes = s1.bytes_in_use > s0.bytes_in_use ? s1.bytes_in_use - s0.bytes_in_use : 0;
    res.absent = s1.absent - s0.absent;
    res.skipped = s1.admit_skipped - s0.admit_skipped;
    res.evictions = s1.evictions - s0.evictions;
  }
done:
  res.seconds = now_s() - t0;
  if (r && st == EMC_OK) *r = res;
  free(ids);
  free(offsets);
  free(fill);
  free(out);
  return st;
}

/* ------------------------------------------------------------------ run */
static const uint64_t *lookup_ids(const emcb_warm_setup *s, size_t i) {
  return (s->lookup_ids ? s->lookup_ids : s->host_ids)(s->ctx, i);
}

/* The measured batches through cache c: hits / lookups from the stats after an emc_flush (on
 * the CUDA backend the hit counters are the device's, final once the flush has waited for
 * the stream). check_first: run check on the first measured batch. */
static int measure(const emcb_warm_setup *s, emc_cache *c, int check_first, double *ratio,
                   uint64_t *lookups, int *rows_ok) {
  emc_stats s0, s1;
  int st = emc_get_stats(c, &s0);
  for (size_t i = 0; i < s->measure_batches && st == EMC_OK; i++) {
    size_t b = s->sample_batches + i;
    st = emc_lookup(c, lookup_ids(s, b), s->offsets, s->out, s->stream);
    if (st == EMC_OK && i == 0 && check_first && s->check) {
      if (s->sync) s->sync(s->ctx);
      if (s->check(s->ctx, b, s->out) != 0) *rows_ok = 0;
    }
  }
  if (st == EMC_OK) st = emc_flush(c, s->stream);
  if (st == EMC_OK) st = emc_get_stats(c, &s1);
  if (st == EMC_OK) {
    *lookups = s1.lookups - s0.lookups;
    *ratio = *lookups ? (double)(s1.hits - s0.hits) / (double)*lookups : NAN;
  }
  return st;
}

/* Destroy c, keeping the first failure. */
static int destroy(emc_cache *c, int st) {
  int d = emc_cache_destroy(c);
  return st != EMC_OK ? st : d;
}

int emcb_warm_run(const emcb_warm_setup *s, emcb_warm_report *r) {
  if (!r) return EMC_EINVAL;
  memset(r, 0, sizeof *r);
  r->hit_ratio_cold = r->hit_ratio_warm = r->hit_ratio_replay = NAN;
  r->rows_ok = 1;
  if (!s || !s->store || !s->cfg || !s->offsets || !s->host_ids || !s->out ||
      s->measure_batches == 0)
    return EMC_EINVAL;
  const uint32_t T = emc_store_n_tables(s->store);
  emcb_warm_count w;
  emcb_warm_plan p;
  emcb_warm_applied a;
  emc_cache *c = NULL;
  uint64_t n = 0;
  int st;
  memset(&p, 0, sizeof p);
  r->sample_batches = s->sample_batches;
  r->measure_batches = s->measure_batches;
  r->budget_bytes = s->budget ? s->budget : emcb_warm_default_budget(s->cfg);

  /* cold: an empty cache */
  if ((st = emc_cache_create(s->store, s->cfg, &c)) != EMC_OK) return st;
  st = destroy(c, measure(s, c, 0, &r->hit_ratio_cold, &r->measure_lookups, &r->rows_ok));
  if (st != EMC_OK) return st;

  /* warm: count the sample, plan, apply */
  double t0 = now_s();
  if ((st = emcb_warm_count_init(&w, T)) != 0) return st;
  for (size_t i = 0; i < s->sample_batches && st == 0; i++)
    st = emcb_warm_count_batch(&w, s->host_ids(s->ctx, i), s->offsets);
  if (st == 0) st = emcb_warm_plan_make(&w, s->store, r->budget_bytes, &p);
  emcb_warm_count_free(&w);
  r->plan_s = now_s() - t0;
  if (st != 0) return st;
  r->sample_keys = p.sample_keys;
  r->plan_rows = p.n_rows;
  if ((st = emc_cache_create(s->store, s->cfg, &c)) != EMC_OK) {
    emcb_warm_plan_free(&p);
    return st;
  }
  st = emcb_warm_apply(c, &p, 0, s->stream, &a);
  emcb_warm_plan_free(&p);
  if (st == EMC_OK) {
    r->apply_s = a.seconds;
    r->rows = a.rows;
    r->bytes = a.bytes;
    r->warm_skipped = a.skipped;
    r->warm_evictions = a.evictions;
    st = measure(s, c, 1, &r->hit_ratio_warm, &n, &r->rows_ok);
  }
  if ((st = destroy(c, st)) != EMC_OK) return st;

  /* replay: the sample batches looked up, the plain way to warm a cache */
  if ((st = emc_cache_create(s->store, s->cfg, &c)) != EMC_OK) return st;
  t0 = now_s();
  for (size_t i = 0; i < s->sample_batches && st == EMC_OK; i++)
    st = emc_lookup(c, lookup_ids(s, i), s->offsets, s->out, s->stream);
  if (st == EMC_OK) st = emc_flush(c, s->stream);
  r->replay_s = now_s() - t0;
  if (st == EMC_OK) st = measure(s, c, 0, &r->hit_ratio_replay, &n, &r->rows_ok);
  return destroy(c, st);
}

/* Appends printf output at buf + *at; output cut off by len (NUL-terminated still) sets *at
 * to len, which ends the appending. */
static void json_put(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void json_put(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  va_list ap;
  if (*at >= len) return;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, len - *at, fmt, ap);
  va_end(ap);
  *at = n >= 0 && (size_t)n < len - *at ? *at + (size_t)n : len;
}

int emcb_warm_json(const emcb_warm_report *r, char *buf, size_t len) {
  /* counts as exact integers (bytes are compared with budget_bytes), ratios and times as
   * jline writes numbers */
  const struct { const char *k; uint64_t v; } u[] = {
      {"sample_batches", r->sample_batches}, {"measure_batches", r->measure_batches},
      {"sample_keys", r->sample_keys}, {"budget_bytes", r->budget_bytes},
      {"plan_rows", r->plan_rows}, {"rows", r->rows}, {"bytes", r->bytes},
      {"warm_admit_skipped", r->warm_skipped}, {"warm_evictions", r->warm_evictions},
      {"measure_lookups", r->measure_lookups}};
  const struct { const char *k; double v; } d[] = {
      {"hit_ratio_cold", r->hit_ratio_cold}, {"hit_ratio_warm", r->hit_ratio_warm},
      {"hit_ratio_replay", r->hit_ratio_replay}, {"plan_s", r->plan_s},
      {"apply_s", r->apply_s}, {"replay_s", r->replay_s}};
  size_t at = 0;
  if (len == 0) return -1;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
    json_put(buf, len, &at, "%s\"%s\":%" PRIu64, i ? "," : "{", u[i].k, u[i].v);
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
    if (isfinite(d[i].v)) json_put(buf, len, &at, ",\"%s\":%.6g", d[i].k, d[i].v);
    else json_put(buf, len, &at, ",\"%s\":null", d[i].k);
  }
  json_put(buf, len, &at, ",\"rows_ok\":%s}", r->rows_ok ? "true" : "false");
  return at < len ? (int)at : -1;
}
