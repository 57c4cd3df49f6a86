/*
 * mrc.c: see mrc.h. libc only.
 */
#include "mrc.h"

#include <stdlib.h>
#include <string.h>

#define NO_NEXT UINT64_MAX /* "never used again" as a next-use time */

int emct_mrc_init(emct_mrc *m, uint64_t n_keys, uint64_t max_accesses) {
  memset(m, 0, sizeof *m);
  /* Fenwick counts are 32-bit: a node counts at most max_accesses marks */
  if (n_keys == 0 || max_accesses == 0 || max_accesses >= UINT32_MAX) return -1;
  if (n_keys > SIZE_MAX / sizeof(uint64_t) || max_accesses > SIZE_MAX / sizeof(uint64_t))
    return -1;
  m->n_keys = n_keys;
  m->max_accesses = max_accesses;
  m->count_from = UINT64_MAX; /* nothing counts before emct_mrc_count_from_now */
  m->seq = malloc((size_t)max_accesses * sizeof *m->seq);
  m->last = calloc((size_t)n_keys, sizeof *m->last);
  m->fen = calloc((size_t)max_accesses + 1, sizeof *m->fen);
  m->hist_cap = 1024;
  m->hist = calloc((size_t)m->hist_cap, sizeof *m->hist);
  if (!m->seq || !m->last || !m->fen || !m->hist) {
    emct_mrc_free(m);
    return -1;
  }
  return 0;
}

void emct_mrc_free(emct_mrc *m) {
  if (m == NULL) return;
  free(m->seq);
  free(m->last);
  free(m->fen);
  free(m->hist);
  free(m->opt);
  memset(m, 0, sizeof *m);
}

void emct_mrc_count_from_now(emct_mrc *m) { m->count_from = m->n; }

/* Fenwick tree over times 1 .. max_accesses. */
static void fen_add(emct_mrc *m, uint64_t t, int delta) {
  for (; t <= m->max_accesses; t += t & (~t + 1)) m->fen[t] += (uint32_t)delta;
}
static uint64_t fen_prefix(const emct_mrc *m, uint64_t t) { /* marks at times 1 .. t */
  uint64_t s = 0;
  for (; t > 0; t -= t & (~t + 1)) s += m->fen[t];
  return s;
}

int emct_mrc_access(emct_mrc *m, uint64_t key) {
  if (m->finished || m->n == m->max_accesses || key >= m->n_keys) return -1;
  const uint64_t t = ++m->n; /* this access's time, 1-based */
  const uint64_t prev = m->last[key];
  const int counted = t > m->count_from;
  m->seq[t - 1] = key;
  if (prev == 0) {
    m->distinct++;
    m->cold += (uint64_t)counted;
  } else {
    /* One mark per distinct key, at its latest access, so the keys used since prev are the
     * marks after prev: all (distinct) minus those up to prev. */
    const uint64_t d = m->distinct - fen_prefix(m, prev);
    if (counted) {
      if (d >= m->hist_cap) {
        uint64_t cap = m->hist_cap;
        while (cap <= d) cap *= 2;
        uint64_t *h = realloc(m->hist, (size_t)cap * sizeof *h);
        if (!h) return -1;
        memset(h + m->hist_cap, 0, (size_t)(cap - m->hist_cap) * sizeof *h);
        m->hist = h;
        m->hist_cap = cap;
      }
      m->hist[d]++;
      if (d + 1 > m->hist_len) m->hist_len = d + 1;
    }
    fen_add(m, prev, -1);
  }
  fen_add(m, t, +1);
  m->last[key] = t;
  return 0;
}

int emct_mrc_batch(emct_mrc *m, emct_dedup *d, size_t *first, const uint64_t *ids,
                   const uint64_t *offsets, uint32_t n_tables, const uint64_t *base,
                   uint64_t *distinct) {
  uint64_t total = 0;
  for (uint32_t t = 0; t < n_tables; t++) {
    const uint64_t *seg = ids + offsets[t];
    size_t k = 0;
    if (emct_dedup_first(d, seg, (size_t)(offsets[t + 1] - offsets[t]), first, &k) != 0)
      return -1;
    for (size_t i = 0; i < k; i++)
      if (emct_mrc_access(m, base[t] + seg[first[i]]) != 0) return -1;
    total += k;
  }
  if (distinct) *distinct += total;
  return 0;
}

void emct_mrc_finish(emct_mrc *m) {
  if (m->finished) return;
  for (uint64_t i = 1; i < m->hist_len; i++) m->hist[i] += m->hist[i - 1];
  free(m->fen);
  m->fen = NULL;
  m->finished = 1;
}

uint64_t emct_mrc_counted(const emct_mrc *m) {
  return m->n > m->count_from ? m->n - m->count_from : 0;
}

uint64_t emct_mrc_lru_hits(const emct_mrc *m, uint64_t keys) {
  /* hits(C) = accesses with distance < C = prefix sum at C - 1 */
  if (keys == 0 || m->hist_len == 0) return 0;
  return m->hist[(keys < m->hist_len ? keys : m->hist_len) - 1];
}

uint64_t emct_mrc_saturation(const emct_mrc *m) { return m->hist_len; }

/* ------------------------------------------------------------------ OPT */
typedef struct heap_ent {
  uint64_t next; /* next-use time of key at the time the entry was pushed */
  uint64_t key;
} heap_ent;

static void heap_up(heap_ent *h, size_t i) {
  heap_ent x = h[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].next >= x.next) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static void heap_down(heap_ent *h, size_t n, size_t i) {
  heap_ent x = h[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1].next > h[c].next) c++;
    if (h[c].next <= x.next) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

static int opt_sim(emct_mrc *m, uint64_t keys, uint64_t *hits_out) {
  const uint64_t n = m->n;
  uint64_t hits = 0;
  /* next[i]: the next time seq[i] is used after i (NO_NEXT: never); `last` is free after
   * finish and serves as the per-key "next seen" array of the backward pass, then as the
   * per-key state of the simulation (0: not resident, else 1 + its current next use). */
  uint64_t *next = malloc((size_t)(n ? n : 1) * sizeof *next);
  heap_ent *heap = NULL;
  size_t heap_len = 0, heap_cap = 0;
  if (!next) return -1;
  for (uint64_t k = 0; k < m->n_keys; k++) m->last[k] = NO_NEXT;
  for (uint64_t i = n; i-- > 0;) {
    next[i] = m->last[m->seq[i]];
    m->last[m->seq[i]] = i;
  }
  memset(m->last, 0, (size_t)m->n_keys * sizeof *m->last);

  uint64_t resident = 0;
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t key = m->seq[i];
    const uint64_t nx = next[i];
    if (m->last[key] != 0) {
      hits += (uint64_t)(i >= m->count_from);
    } else {
      if (resident == keys) { /* evict the resident key used farthest in the future */
        for (;;) {
          heap_ent top = heap[0];
          heap[0] = heap[--heap_len];
          if (heap_len) heap_down(heap, heap_len, 0);
          if (m->last[top.key] == top.next + 1) { /* not stale */
            m->last[top.key] = 0;
            resident--;
            break;
          }
        }
      }
      resident++;
    }
    if (nx == NO_NEXT) {
      /* Never used again: MIN evicts it at the next eviction (no next use is farther), and
       * until then it serves no hit, so it may as well leave now. (It was admitted: a miss
       * with the cache full evicted a victim above, as demand paging must.) */
      m->last[key] = 0;
      resident--;
      continue;
    }
    m->last[key] = nx + 1;
    if (heap_len == heap_cap) {
      /* drop stale entries before growing: the heap never holds more than a few times the
       * resident keys */
      size_t w = 0;
      for (size_t r = 0; r < heap_len; r++)
        if (m->last[heap[r].key] == heap[r].next + 1) heap[w++] = heap[r];
      heap_len = w;
      for (size_t r = heap_len / 2; r-- > 0;) heap_down(heap, heap_len, r);
      if (heap_cap == 0 || heap_len * 2 > heap_cap) {
        size_t cap = heap_cap ? heap_cap * 2 : 1024;
        heap_ent *h = realloc(heap, cap * sizeof *h);
        if (!h) {
          free(heap);
          free(next);
          return -1;
        }
        heap = h;
        heap_cap = cap;
      }
    }
    heap[heap_len] = (heap_ent){nx, key};
    heap_up(heap, heap_len++);
  }
  free(heap);
  free(next);
  *hits_out = hits;
  return 0;
}

int emct_mrc_opt_hits(emct_mrc *m, uint64_t keys, uint64_t *hits) {
  if (!m->finished) return -1;
  for (size_t i = 0; i < m->n_opt; i++)
    if (m->opt[i].keys == keys) {
      *hits = m->opt[i].hits;
      return 0;
    }
  uint64_t h = 0;
  if (keys == 0) {
    h = 0;
  } else if (keys >= m->distinct) {
    h = emct_mrc_counted(m) - m->cold; /* nothing is ever evicted */
  } else if (opt_sim(m, keys, &h) != 0) {
    return -1;
  }
  if (m->n_opt == m->opt_cap) {
    size_t cap = m->opt_cap ? m->opt_cap * 2 : 16;
    emct_mrc_opt *o = realloc(m->opt, cap * sizeof *o);
    if (!o) return -1;
    m->opt = o;
    m->opt_cap = cap;
  }
  m->opt[m->n_opt++] = (emct_mrc_opt){keys, h};
  *hits = h;
  return 0;
}
