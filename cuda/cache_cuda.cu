/*
 * cache_cuda.cu: the CUDA backend of the global cache table.
 *
 * Same contract as the host backend (include/embcache.h), same key codec, index layout, page
 * layout, slot version protocol and row-copy rules (lib/emc_item.h), kept in device memory:
 *   index   one bucketed open-addressing index for all tables (keys / ids / locs), probed by
 *           emc__index_find; entries point at a pool slot or, for hashed tables, straight at a
 *           host row (the unified index).
 *   pool    an arena of equal pages; a page belongs to one table at a time (its layout), pages
 *           go to tables on demand inside capacity_bytes and come back when empty.
 *   store   the store's row memory (and hashed tables' id maps) is registered with CUDA and
 *           mapped, so kernels read host rows directly (zero copy) and write dirty rows back.
 *
 * Ordering
 *   Every call is enqueued on the caller's stream after the previous call of this cache (an
 *   event chain), so calls on several streams or threads run one after another on the device
 *   without any host wait. Kernels still validate slot versions when they copy rows.
 *
 * Lookup = keys, dedup, resolve, copy, admit (launch count independent of the table count)
 *   keys     global key of every position (dense ids out of range are flagged, see emc_flush)
 *   dedup    CUB radix sort (key, position), head flags, CUB inclusive scan: unique keys and
 *            the inverse map position -> unique
 *   resolve  one thread per unique key: slot (hit, stamped now), host row (dense by
 *            computation, hashed by a unified-index entry or the store's map), or absent
 *   copy     one fused kernel, a warp per position: 16-byte vector copies when aligned, slot
 *            versions re-checked after the copy (a changed slot is served from its host row)
 *   admit    per-table ranks of the misses (taken in resolve), a one-thread planner handing out free slots, bump
 *            slots of the table's current page and new pages (capped at capacity_bytes), then
 *            a warp per miss fills its slot from the row just written to `out`.
 * Eviction (approximate LRU between t1 and t2)
 *   The planner publishes the bytes in use and the call's admission demand to mapped host
 *   memory. A call whose predicted use (bytes + last demand) crosses t1 enqueues a pass between
 *   copy and admission; on the device the pass measures this call's real demand and, when
 *   bytes + demand > t1, evicts down to t2 - demand: min stamp, a 4096-bucket stamp histogram
 *   weighted by bytes, the cut-off, an evict kernel (dirty rows written back to the store
 *   through the mapping; rows stamped by this call are never taken), an index rebuild
 *   (evicted hashed rows become unified entries), page release, and the free slots gathered
 *   with CUB select + radix sort into per-table segments. Admissions stop at t1.
 */
#include <cuda_runtime.h>
#include <cub/cub.cuh>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "internal.h"
#include "emc_cuda.h"
}

typedef unsigned long long ull;

#define HIST_BUCKETS 4096u
#define INDEX_LOAD 0.70
#define NONE32 0xffffffffu

enum { K_HIT = 0, K_STORE = 1, K_ABSENT = 2, K_INVALID = 3 };
enum { UF_ADMIT = 1, UF_UNIFIED = 2 };
enum { MODE_LOOKUP = 0, MODE_INSERT = 1 };

/* Per-table constants on the device. */
typedef struct dtab {
  unsigned char *base;           /* device alias of the store's rows (mapped host memory) */
  const uint64_t *map_ids;       /* hashed: device alias of the store's id map */
  const uint64_t *map_rowp1;
  uint64_t map_cap, rows;
  uint32_t row_bytes, stride, kind, n_slots;
} dtab;

/* Per-table allocator state on the device. */
typedef struct tstate {
  uint32_t cur_page, bump;              /* page being filled by bump allocation */
  uint32_t seg_start, seg_end, cursor;  /* free-slot segment (from the last pass) */
  uint32_t need, allow;                 /* this call: misses to admit, slots granted */
  uint32_t f_base, f_n, b_page, b_start, b_n, new_first, new_n; /* this call's plan */
  uint32_t pad_;
  ull rows_cached;
} tstate;

/* Global device counters and pass state. */
typedef struct dglob {
  ull bytes_in_use, pages_held, dirty_rows, host_entries;
  ull lookups, hits, misses, absent, admissions, admit_skipped, evictions, writebacks, passes,
      retries, unified;
  ull min_stamp, need, cut, cut_need, cut_taken, width, active;
  ull bad_count, bad_pos, bad_id, bad_table;
  unsigned int free_top, nunique, plan_used, n_free, n_act;
} dglob;

/* Everything a kernel needs, passed by value. */
typedef struct dev {
  uint64_t *ix_keys, *ix_ids, *ix_locs;
  uint64_t *ix2_keys, *ix2_ids, *ix2_locs; /* rebuild source */
  uint64_t ix_buckets, ix_slots, empty;
  unsigned char *arena;
  uint64_t page_bytes;
  uint32_t n_pages, max_slots, n_tables, key_bits;
  const emc__page_layout *layout;
  uint64_t *stamps;
  const emc__table_code *codes;
  const dtab *tabs;
  uint64_t hash_seed;
  tstate *ts;
  dglob *g;
  uint32_t *free_pages, *free_slots, *plan_pages;
  ull *hist;
  ull *mirror;            /* device alias of mapped host words: [0] bytes in use, [1] bad ids,
                             [2] the last call's admission demand in bytes */
  uint64_t low, high, cap, unified_max;
  /* pass scratch */
  uint8_t *freeflag;      /* n_pages * max_slots */
  uint32_t *handles;      /* 0 .. n_pages * max_slots - 1 */
  uint32_t *sel;          /* selected free handles */
  uint32_t *tkey, *tkey2; /* table of each selected handle, sorted */
} dev;

/* One call's arrays (scratch, sized for n positions). */
typedef struct callp {
  uint64_t n;
  uint64_t now;
  int mode;
  int dirty;
  const uint64_t *ids;
  const uint64_t *offsets;   /* device copy, n_tables + 1 */
  const uint64_t *outoff;    /* device copy, n_tables: byte offset of table t's segment */
  unsigned char *out;        /* lookup: rows out */
  const unsigned char *src;  /* admission source rows: out (lookup) or rows (insert) */
  uint8_t *where;
  const uint64_t *srows;     /* insert: store row of every position (host-resolved) */
  ull *keys, *skeys;
  uint32_t *vals, *svals, *ptab, *flags, *uidx, *inv, *urep, *rank, *act;
  ull *ukey;
  uint64_t *uloc;
  uint8_t *ukind, *uflags;
} callp;

/* ================================================================= device helpers */
__device__ __forceinline__ emc__index_view ixv(const dev &D) {
  emc__index_view v;
  v.keys = D.ix_keys;
  v.ids = D.ix_ids;
  v.locs = D.ix_locs;
  v.n_buckets = D.ix_buckets;
  return v;
}
__device__ __forceinline__ unsigned char *page_of(const dev &D, uint64_t p) {
  return D.arena + p * D.page_bytes;
}
__device__ __forceinline__ uint32_t page_table(const dev &D, uint64_t p) {
  return (uint32_t)*(volatile uint64_t *)&((emc__page_hdr *)page_of(D, p))->tag;
}

/* Copy `bytes` (even) bytes with nl cooperating lanes (this one is `lane` of them), the widest
 * access the alignment allows: 16-byte vectors for aligned rows. */
__device__ __forceinline__ void group_copy(unsigned char *dst, const unsigned char *src,
                                           uint32_t bytes, unsigned lane, unsigned nl) {
  uintptr_t a = (uintptr_t)dst | (uintptr_t)src | bytes;
  uint32_t i;
  if ((a & 15u) == 0) {
    for (i = lane; i < bytes / 16; i += nl) ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
  } else if ((a & 7u) == 0) {
    for (i = lane; i < bytes / 8; i += nl) ((uint2 *)dst)[i] = ((const uint2 *)src)[i];
  } else if ((a & 3u) == 0) {
    for (i = lane; i < bytes / 4; i += nl) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
  } else {
    for (i = lane; i < bytes / 2; i += nl) ((uint16_t *)dst)[i] = ((const uint16_t *)src)[i];
  }
}
__device__ __forceinline__ void warp_copy(unsigned char *dst, const unsigned char *src,
                                          uint32_t bytes, unsigned lane) {
  group_copy(dst, src, bytes, lane, 32);
}
__device__ __forceinline__ void group_zero(unsigned char *dst, uint32_t bytes, unsigned lane,
                                           unsigned nl) {
  uint32_t i;
  if ((((uintptr_t)dst | bytes) & 3u) == 0) {
    for (i = lane; i < bytes / 4; i += nl) ((uint32_t *)dst)[i] = 0;
  } else {
    for (i = lane; i < bytes / 2; i += nl) ((uint16_t *)dst)[i] = 0;
  }
}

/* Store row of a (table, id): dense by computation, hashed through the store's map. */
__device__ __forceinline__ int64_t store_row_of(const dtab *tb, uint64_t id) {
  if (tb->kind == EMC_TABLE_DENSE) return (int64_t)id;
  return emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id);
}

/* Insert (key, id, loc) into the index. 1: inserted; 0: the key is already there. */
__device__ int ix_insert(const dev &D, uint64_t key, uint64_t id, uint64_t loc) {
  uint64_t b = emc__home_bucket(key, D.ix_buckets), n;
  for (n = 0; n < D.ix_buckets; n++) {
    ull *k = (ull *)D.ix_keys + b * EMC__BUCKET;
    unsigned s;
    for (s = 0; s < EMC__BUCKET; s++) {
      ull v = *(volatile ull *)&k[s];
      if (v == key) return 0;
      if (v == D.empty) {
        ull old = atomicCAS(&k[s], (ull)D.empty, (ull)key);
        if (old == D.empty) {
          D.ix_ids[b * EMC__BUCKET + s] = id;
          D.ix_locs[b * EMC__BUCKET + s] = loc;
          return 1;
        }
        if (old == key) return 0;
      }
    }
    if (++b == D.ix_buckets) b = 0;
  }
  return 0; /* full: cannot happen at the index's load factor */
}

__device__ __forceinline__ uint32_t table_of_pos(const uint64_t *offsets, uint32_t n_tables,
                                                 uint64_t i) {
  uint32_t lo = 0, hi = n_tables; /* largest t with offsets[t] <= i, skipping empty tables */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (offsets[mid] <= i) lo = mid; else hi = mid;
  }
  return lo;
}

#define GRID_STRIDE(i, n) \
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (uint64_t)gridDim.x * blockDim.x)

/* ================================================================= lookup kernels */
__global__ void k_keys(dev D, callp P) {
  GRID_STRIDE(i, P.n) {
    uint32_t t = table_of_pos(P.offsets, D.n_tables, i);
    uint64_t id = P.ids[i], key;
    const emc__table_code *tc = &D.codes[t];
    if (tc->kind == EMC_TABLE_DENSE && id >= tc->rows) {
      key = D.empty; /* never a table's key: marks the position invalid */
      if (atomicAdd(&D.g->bad_count, 1ull) == 0) {
        D.g->bad_pos = i;
        D.g->bad_id = id;
        D.g->bad_table = t;
      }
      *(volatile ull *)&D.mirror[1] = 1;
    } else {
      key = emc__global_key(tc, id, D.hash_seed);
    }
    P.keys[i] = key;
    P.vals[i] = (uint32_t)i;
    P.ptab[i] = t;
    P.flags[i] = (uint32_t)(emc__fmix64(key) >> 32); /* lookups sort by this hash */
  }
}

/* Inserts: after sorting by id, the keys in that order (so the stable sort by key that follows
 * keeps equal ids together and in position order: "last wins" holds under key collisions). */
__global__ void k_gather(dev D, callp P) {
  GRID_STRIDE(j, P.n) {
    uint32_t pos = P.svals[j];
    P.rank[j] = pos;
    ((ull *)P.uloc)[j] = P.keys[pos];
  }
}

__global__ void k_heads(dev D, callp P) {
  GRID_STRIDE(i, P.n) {
    uint32_t a = P.svals[i], b = i ? P.svals[i - 1] : 0;
    uint32_t head = i == 0 || P.keys[a] != P.keys[b] || P.ids[a] != P.ids[b];
    P.flags[i] = head;
  }
}

__global__ void k_scatter(dev D, callp P) {
  GRID_STRIDE(i, P.n) {
    uint32_t u = P.uidx[i] - 1u, pos = P.svals[i]; /* inclusive count of heads, 0-based */
    int last = i + 1 == P.n || P.flags[i + 1];
    P.inv[pos] = u;
    if (P.flags[i]) P.ukey[u] = P.keys[pos];
    /* lookups: any position of the run; inserts: the last one (radix sort is stable) */
    if (P.mode == MODE_INSERT ? last : P.flags[i]) P.urep[u] = pos;
    if (i + 1 == P.n) {
      D.g->nunique = u + 1;
      D.g->n_act = 0;
    }
  }
}

/* Resolve unique u: its kind (hit / store / absent / invalid), admission flags and location
 * (pool loc for a hit, store row otherwise). A hit's slot is stamped now. */
__device__ __forceinline__ void resolve_one(const dev &D, const callp &P, const emc__index_view &ix,
                                            uint32_t u, uint8_t *kind_out, uint8_t *uf_out,
                                            uint64_t *loc_out) {
  uint32_t rep = P.urep[u], t = P.ptab[rep];
  uint64_t id = P.ids[rep], key = P.ukey[u], loc = 0;
  const dtab *tb = &D.tabs[t];
  uint8_t kind = K_ABSENT, uf;
  int64_t pos, row;
  int store_path = 1;
  if (key == D.empty) {
    *kind_out = K_INVALID;
    *uf_out = 0;
    *loc_out = 0;
    return;
  }
  uf = UF_ADMIT;
  pos = emc__index_find(&ix, key, D.empty);
  if (pos >= 0) {
    uint64_t eid = D.ix_ids[pos], l = D.ix_locs[pos];
    if (eid == id && !(l & EMC__LOC_HOST)) {
      uint64_t p = emc__loc_page(l);
      uint32_t s = emc__loc_slot(l);
      const emc__page_layout *L = &D.layout[t];
      if (p < D.n_pages && page_table(D, p) == t && s < L->n_slots) {
        unsigned char *pg = page_of(D, p);
        if ((*emc__slot_flags(pg, L, s) & EMC__SLOT_LIVE) && *emc__slot_owner(pg, L, s) == id) {
          D.stamps[p * D.max_slots + s] = P.now;
          store_path = 0;
          kind = K_HIT;
          loc = l;
        }
      }
      if (store_path) uf = 0; /* an entry that does not match its slot: never admit over it */
    } else if (eid == id) {
      kind = K_STORE;
      loc = l & EMC__LOC_HOST_ROW_MASK;
      uf = UF_ADMIT | UF_UNIFIED;
      store_path = 0;
    } else {
      uf = 0; /* hashed collision: served from the store, never admitted */
    }
  }
  if (store_path) {
    row = P.srows ? (int64_t)P.srows[rep] : store_row_of(tb, id);
    if (row < 0) {
      kind = K_ABSENT;
      uf = 0;
    } else {
      kind = K_STORE;
      loc = (uint64_t)row;
    }
  }
  *kind_out = kind;
  *uf_out = uf;
  *loc_out = loc;
}

/* One thread per unique key: resolve it, rank the misses to admit per table, and append the
 * uniques k_admit works on (lookups: the misses to admit; inserts: every valid unique) to the
 * action list, warp by warp. */
__global__ void k_resolve(dev D, callp P) {
  uint32_t nu = *(volatile unsigned *)&D.g->nunique;
  unsigned lane = threadIdx.x & 31u;
  emc__index_view ix = ixv(D);
  GRID_STRIDE(u, nu) {
    uint8_t kind, uf;
    uint64_t loc;
    uint32_t r = NONE32, mask = __activemask(), b, base = 0;
    int want;
    resolve_one(D, P, ix, (uint32_t)u, &kind, &uf, &loc);
    P.ukind[u] = kind;
    P.uflags[u] = uf;
    P.uloc[u] = loc;
    if (kind == K_STORE && (uf & UF_ADMIT)) r = atomicAdd(&D.ts[P.ptab[P.urep[u]]].need, 1u);
    P.rank[u] = r;
    want = P.mode == MODE_INSERT ? kind != K_INVALID : r != NONE32;
    b = __ballot_sync(mask, want);
    if (b) {
      int leader = __ffs(b) - 1;
      if ((int)lane == leader) base = atomicAdd(&D.g->n_act, (unsigned)__popc(b));
      base = __shfl_sync(mask, base, leader);
      if (want) P.act[base + __popc(b & ((1u << lane) - 1u))] = (uint32_t)u;
    }
  }
}

/* The fused copy: a group of CG lanes per position (four rows in flight per warp). */
#define CG 8u
__global__ void k_copy(dev D, callp P) {
  unsigned lane = threadIdx.x % CG, gw = (threadIdx.x & 31u) / CG;
  unsigned gmask = ((1u << CG) - 1u) << (gw * CG);
  uint64_t grp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / CG;
  uint64_t ng = ((uint64_t)gridDim.x * blockDim.x) / CG;
  ull hits = 0, misses = 0, absent = 0, unified = 0, retries = 0;
  for (uint64_t pos = grp; pos < P.n; pos += ng) {
    uint32_t u = P.inv[pos], t = P.ptab[pos];
    const dtab *tb = &D.tabs[t];
    uint32_t rb = tb->row_bytes;
    unsigned char *dst = P.out + P.outoff[t] + (pos - P.offsets[t]) * rb;
    uint8_t kind = P.ukind[u];
    uint64_t loc = P.uloc[u];
    if (kind == K_HIT) {
      const emc__page_layout *L = &D.layout[t];
      uint64_t p = emc__loc_page(loc);
      uint32_t s = emc__loc_slot(loc), v1 = 0, ok = 0;
      unsigned char *pg = page_of(D, p);
      if (lane == 0) v1 = EMC_LD_ACQUIRE(emc__slot_seq(pg, L, s));
      v1 = __shfl_sync(gmask, v1, 0, CG);
      group_copy(dst, emc__slot_row(pg, L, s), rb, lane, CG);
      __syncwarp(gmask);
      if (lane == 0) { /* the version after the copy: the row is the slot's at one instant */
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        ok = !(v1 & 1u) && *(volatile uint32_t *)emc__slot_seq(pg, L, s) == v1 &&
             page_table(D, p) == t && *(volatile uint64_t *)emc__slot_owner(pg, L, s) == P.ids[pos];
      }
      ok = __shfl_sync(gmask, ok, 0, CG);
      if (!ok) { /* the slot changed under the copy: serve the host row */
        int64_t row = store_row_of(tb, P.ids[pos]);
        retries += lane == 0;
        if (row < 0) {
          kind = K_ABSENT;
        } else {
          kind = K_STORE;
          loc = (uint64_t)row;
        }
      }
    }
    if (kind == K_STORE) {
      group_copy(dst, tb->base + loc * tb->stride, rb, lane, CG);
    } else if (kind != K_HIT) {
      group_zero(dst, rb, lane, CG);
    }
    if (lane == 0) {
      if (P.where) P.where[pos] = kind == K_HIT ? EMC_WHERE_CACHE : kind == K_STORE ? EMC_WHERE_STORE : EMC_WHERE_ABSENT;
      hits += kind == K_HIT;
      misses += kind == K_STORE;
      absent += kind == K_ABSENT || kind == K_INVALID;
      unified += kind == K_STORE && (P.uflags[u] & UF_UNIFIED);
    }
  }
  if (lane == 0) {
    if (hits) atomicAdd(&D.g->hits, hits);
    if (misses) atomicAdd(&D.g->misses, misses);
    if (absent) atomicAdd(&D.g->absent, absent);
    if (unified) atomicAdd(&D.g->unified, unified);
    if (retries) atomicAdd(&D.g->retries, retries);
  }
}

/* One block. Thread 0 grants each table's misses slots from its free segment, its current page
 * and new pages, within t1; then the block gives the new pages their table's layout. */
__device__ void plan_tables(const dev &D, const callp &P);
__global__ void k_plan(dev D, callp P) {
  if (threadIdx.x == 0) plan_tables(D, P);
  __syncthreads();
  /* pages handed out take their new table's layout: every slot's version, owner and flags are
   * zeroed (the bytes under the new layout held the page's previous life) */
  for (uint32_t i = 0; i < D.g->plan_used; i++) {
    uint32_t p = D.plan_pages[i], t = page_table(D, p), s;
    unsigned char *pg = page_of(D, p);
    const emc__page_layout *L = &D.layout[t];
    for (s = threadIdx.x; s < L->n_slots; s += blockDim.x) {
      *emc__slot_seq(pg, L, s) = 0;
      *emc__slot_owner(pg, L, s) = 0;
      *emc__slot_flags(pg, L, s) = 0;
    }
  }
}

__device__ void plan_tables(const dev &D, const callp &P) {
  dglob *g = D.g;
  ull room = g->bytes_in_use < D.high ? D.high - g->bytes_in_use : 0, granted = 0, skipped = 0;
  ull demand = 0;
  uint32_t t;
  g->plan_used = 0;
  for (t = 0; t < D.n_tables; t++) {
    tstate *ts = &D.ts[t];
    const emc__page_layout *L = &D.layout[t];
    uint32_t need = ts->need, allow, f, r, b = 0;
    ts->f_n = ts->b_n = ts->new_n = 0;
    ts->allow = 0;
    if (need == 0) continue;
    ts->need = 0;
    demand += (ull)need * L->stride;
    allow = (uint32_t)min((ull)need, room / L->stride);
    f = min(allow, ts->seg_end - ts->seg_start - ts->cursor);
    ts->f_base = ts->seg_start + ts->cursor;
    ts->f_n = f;
    ts->cursor += f;
    r = allow - f;
    if (r > 0 && ts->cur_page != NONE32) {
      b = min(r, L->n_slots - ts->bump);
      ts->b_page = ts->cur_page;
      ts->b_start = ts->bump;
      ts->b_n = b;
      ts->bump += b;
      r -= b;
    }
    ts->new_first = g->plan_used;
    while (r > 0) {
      uint32_t p, take;
      emc__page_hdr *h;
      if (g->free_top == 0) break;
      p = D.free_pages[--g->free_top];
      h = (emc__page_hdr *)page_of(D, p);
      h->n_slots = L->n_slots;
      h->tag = (((h->tag >> 32) + 1u) << 32) | t;
      D.plan_pages[g->plan_used++] = p;
      g->pages_held++;
      take = min(r, L->n_slots);
      ts->new_n++;
      ts->cur_page = p;
      ts->bump = take;
      r -= take;
    }
    allow -= r; /* pages ran out */
    ts->allow = allow;
    room -= (ull)allow * L->stride;
    granted += (ull)allow * L->stride;
    skipped += need - allow;
  }
  if (P.mode == MODE_LOOKUP) g->admit_skipped += skipped;
  *(volatile ull *)&D.mirror[0] = g->bytes_in_use + granted;
  *(volatile ull *)&D.mirror[2] = demand; /* the next call expects about as much */
}

/* Writer side of a slot, by a warp (lane 0 owns the version): the version goes odd and the row
 * is copied in; lane 0 then sets the metadata and calls slot_end. Calls of a cache are ordered
 * on the device, so no other writer touches the slot meanwhile. */
__device__ __forceinline__ void warp_slot_write(unsigned char *pg, const emc__page_layout *L,
                                                uint32_t s, const unsigned char *src,
                                                uint32_t bytes, unsigned lane) {
  if (lane == 0) {
    uint32_t *q = emc__slot_seq(pg, L, s);
    *(volatile uint32_t *)q = *q + 1u;
    __threadfence();
  }
  __syncwarp();
  warp_copy(emc__slot_row(pg, L, s), src, bytes, lane);
  __syncwarp();
}
__device__ __forceinline__ void slot_end(unsigned char *pg, const emc__page_layout *L, uint32_t s) {
  uint32_t *q = emc__slot_seq(pg, L, s);
  __threadfence();
  *(volatile uint32_t *)q = *q + 1u;
}

/* Admission (and, for inserts, in-place updates and write-through): a warp per unique key. */
__global__ void k_admit(dev D, callp P) {
  unsigned lane = threadIdx.x & 31u;
  uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  uint32_t na = *(volatile unsigned *)&D.g->n_act;
  ull admitted = 0, dirty_new = 0, bytes = 0;
  for (uint64_t a = w; a < na; a += nw) {
    uint32_t u = P.act[a], rep = P.urep[u], t = P.ptab[rep], r = P.rank[u];
    const dtab *tb = &D.tabs[t];
    const emc__page_layout *L = &D.layout[t];
    const tstate *ts = &D.ts[t];
    const unsigned char *src = P.src + P.outoff[t] + (rep - P.offsets[t]) * tb->row_bytes;
    uint64_t id = P.ids[rep];
    uint8_t kind = P.ukind[u];
    uint32_t p, s;
    unsigned char *pg;
    if (P.mode == MODE_INSERT && kind == K_HIT) { /* update in place, dirty */
      uint64_t loc = P.uloc[u];
      uint8_t fl;
      p = (uint32_t)emc__loc_page(loc);
      s = emc__loc_slot(loc);
      pg = page_of(D, p);
      warp_slot_write(pg, L, s, src, tb->row_bytes, lane);
      if (lane == 0) {
        fl = *emc__slot_flags(pg, L, s);
        *emc__slot_flags(pg, L, s) = (uint8_t)(fl | EMC__SLOT_DIRTY);
        D.stamps[(uint64_t)p * D.max_slots + s] = P.now;
        dirty_new += !(fl & EMC__SLOT_DIRTY);
        slot_end(pg, L, s);
      }
      continue;
    }
    if (r == NONE32 || r >= ts->allow) {
      if (P.mode == MODE_INSERT && kind == K_STORE) /* no slot: write through to the store */
        warp_copy(tb->base + P.uloc[u] * tb->stride, src, tb->row_bytes, lane);
      continue;
    }
    if (r < ts->f_n) {
      uint32_t hdl = D.free_slots[ts->f_base + r];
      p = hdl / D.max_slots;
      s = hdl % D.max_slots;
    } else if (r - ts->f_n < ts->b_n) {
      p = ts->b_page;
      s = ts->b_start + (r - ts->f_n);
    } else {
      uint32_t q = r - ts->f_n - ts->b_n;
      p = D.plan_pages[ts->new_first + q / L->n_slots];
      s = q % L->n_slots;
    }
    pg = page_of(D, p);
    warp_slot_write(pg, L, s, src, tb->row_bytes, lane);
    if (lane == 0) {
      uint64_t loc = emc__loc_pool(p, s);
      int ok;
      *emc__slot_owner(pg, L, s) = id;
      D.stamps[(uint64_t)p * D.max_slots + s] = P.now;
      {
        /* probe again: an eviction pass in this call may have rebuilt the index */
        emc__index_view ix = ixv(D);
        int64_t pos = emc__index_find(&ix, P.ukey[u], D.empty);
        if (pos < 0) {
          ok = ix_insert(D, P.ukey[u], id, loc);
        } else {
          ull old = D.ix_locs[pos];
          /* this id's unified entry now points at the slot (once, if the id came twice) */
          ok = D.ix_ids[pos] == id && (old & EMC__LOC_HOST) &&
               atomicCAS((ull *)&D.ix_locs[pos], old, (ull)loc) == old;
          if (ok) atomicAdd(&D.g->host_entries, ~0ull);
        }
      }
      /* a key admitted twice in one call (hashed collision): the loser's slot stays free and
       * the next pass takes it back; its row goes through to the store */
      *emc__slot_flags(pg, L, s) = ok ? (uint8_t)(EMC__SLOT_LIVE | (P.dirty ? EMC__SLOT_DIRTY : 0)) : 0;
      slot_end(pg, L, s);
      if (ok) {
        admitted++;
        bytes += L->stride;
        dirty_new += P.dirty != 0;
        atomicAdd(&D.ts[t].rows_cached, 1ull);
      }
      s = ok; /* reuse: broadcast below */
    }
    s = __shfl_sync(0xffffffffu, s, 0);
    if (!s && P.mode == MODE_INSERT) warp_copy(tb->base + P.uloc[u] * tb->stride, src, tb->row_bytes, lane);
  }
  if (lane == 0) {
    if (admitted && P.mode == MODE_LOOKUP) atomicAdd(&D.g->admissions, admitted);
    if (bytes) atomicAdd(&D.g->bytes_in_use, bytes);
    if (dirty_new) atomicAdd(&D.g->dirty_rows, dirty_new);
  }
}

/* ================================================================= eviction pass kernels */
__global__ void k_pass_begin(dev D, uint64_t now) {
  dglob *g = D.g;
  uint32_t t;
  ull demand = 0, total;
  for (t = 0; t < D.n_tables; t++) demand += (ull)D.ts[t].need * D.layout[t].stride;
  /* evict to t2 before admitting this call's misses when they would cross t1 */
  total = g->bytes_in_use + demand;
  g->active = total > D.high;
  g->need = g->active ? min(total - D.low, (ull)g->bytes_in_use) : 0;
  g->min_stamp = now;
  g->cut_taken = 0;
  if (g->active) g->passes++;
  for (t = 0; t < D.n_tables; t++) D.ts[t].cur_page = NONE32; /* bump tails join the free lists */
}

/* Live slot g of the arena: its table (NONE32 when not a live slot). */
__device__ __forceinline__ uint32_t live_slot(const dev &D, uint64_t gi, uint32_t *sp) {
  uint64_t p = gi / D.max_slots;
  uint32_t s = (uint32_t)(gi % D.max_slots), t = page_table(D, p);
  if (t == EMC__PAGE_NONE || s >= D.layout[t].n_slots) return NONE32;
  if (!(*emc__slot_flags(page_of(D, p), &D.layout[t], s) & EMC__SLOT_LIVE)) return NONE32;
  *sp = s;
  return t;
}

__global__ void k_pass_min(dev D) {
  uint64_t n = (uint64_t)D.n_pages * D.max_slots;
  if (!D.g->active) return;
  GRID_STRIDE(gi, n) {
    uint32_t s;
    if (live_slot(D, gi, &s) != NONE32) atomicMin(&D.g->min_stamp, (ull)D.stamps[gi]);
  }
}

__global__ void k_pass_hist(dev D, uint64_t now) {
  uint64_t n = (uint64_t)D.n_pages * D.max_slots;
  ull mn = D.g->min_stamp, width = (now - mn + 1 + HIST_BUCKETS - 1) / HIST_BUCKETS;
  if (!D.g->active) return;
  GRID_STRIDE(gi, n) {
    uint32_t s, t = live_slot(D, gi, &s);
    ull st;
    if (t == NONE32) continue;
    st = D.stamps[gi];
    if (st >= now) continue; /* the call being served: never evicted */
    if (st < mn) st = mn;
    atomicAdd(&D.hist[(st - mn) / width], (ull)D.layout[t].stride);
  }
}

__global__ void k_pass_cut(dev D, uint64_t now) {
  dglob *g = D.g;
  ull acc = 0;
  uint32_t b;
  if (!g->active) return;
  g->width = (now - g->min_stamp + 1 + HIST_BUCKETS - 1) / HIST_BUCKETS;
  for (b = 0; b < HIST_BUCKETS; b++) {
    if (acc + D.hist[b] >= g->need) break;
    acc += D.hist[b];
  }
  g->cut = b;               /* buckets < cut go whole; bucket cut until need is met */
  g->cut_need = g->need - acc;
}

__global__ void k_pass_evict(dev D, uint64_t now) {
  dglob *g = D.g;
  uint64_t n = (uint64_t)D.n_pages * D.max_slots;
  ull mn = g->min_stamp, width = g->width, cut = g->cut, cut_need = g->cut_need;
  ull freed = 0, wb = 0, ev = 0, dirty_gone = 0;
  if (!g->active) return;
  GRID_STRIDE(gi, n) {
    uint32_t s, t = live_slot(D, gi, &s);
    uint64_t p = gi / D.max_slots;
    ull st, bkt;
    const emc__page_layout *L;
    unsigned char *pg;
    uint8_t fl;
    if (t == NONE32) continue;
    L = &D.layout[t];
    st = D.stamps[gi];
    if (st >= now) continue; /* rows of the call being served stay */
    if (st < mn) st = mn;
    bkt = (st - mn) / width;
    if (bkt > cut) continue;
    if (bkt == cut && atomicAdd(&g->cut_taken, (ull)L->stride) >= cut_need) continue;
    pg = page_of(D, p);
    fl = *emc__slot_flags(pg, L, s);
    if (fl & EMC__SLOT_DIRTY) { /* the store gets the row first */
      const dtab *tb = &D.tabs[t];
      int64_t row = store_row_of(tb, *emc__slot_owner(pg, L, s));
      if (row >= 0) emc__row_store(tb->base + (uint64_t)row * tb->stride, emc__slot_row(pg, L, s), tb->row_bytes);
      wb++;
      dirty_gone++;
    }
    {
      uint32_t *q = emc__slot_seq(pg, L, s);
      *(volatile uint32_t *)q = *q + 1u;
      __threadfence();
      *emc__slot_flags(pg, L, s) = 0;
      __threadfence();
      *(volatile uint32_t *)q = *q + 1u;
    }
    freed += L->stride;
    ev++;
    atomicAdd(&D.ts[t].rows_cached, ~0ull);
  }
  if (freed) atomicAdd(&g->bytes_in_use, (ull)0 - freed);
  if (ev) atomicAdd(&g->evictions, ev);
  if (wb) atomicAdd(&g->writebacks, wb);
  if (dirty_gone) atomicAdd(&g->dirty_rows, (ull)0 - dirty_gone);
}

__global__ void k_fill_u64(uint64_t *p, uint64_t n, uint64_t v) {
  GRID_STRIDE(i, n) p[i] = v;
}

/* Index rebuild from the copy in ix2: phase 0 live slots, 1 rows evicted by this pass (hashed:
 * unified entries), 2 older unified entries, while the unified budget lasts. */
__global__ void k_rebuild(dev D, int phase, uint64_t now) {
  GRID_STRIDE(i, D.ix_slots) {
    uint64_t key = D.ix2_keys[i], id, loc;
    if (key == D.empty) continue;
    id = D.ix2_ids[i];
    loc = D.ix2_locs[i];
    if (loc & EMC__LOC_HOST) {
      if (phase != 2) continue;
      if (atomicAdd(&D.g->host_entries, 1ull) >= D.unified_max) { atomicAdd(&D.g->host_entries, ~0ull); continue; }
      if (!ix_insert(D, key, id, loc)) atomicAdd(&D.g->host_entries, ~0ull);
    } else {
      uint64_t p = emc__loc_page(loc);
      uint32_t s = emc__loc_slot(loc), t = page_table(D, p);
      const emc__page_layout *L;
      int live;
      if (t == EMC__PAGE_NONE) continue;
      L = &D.layout[t];
      live = s < L->n_slots && (*emc__slot_flags(page_of(D, p), L, s) & EMC__SLOT_LIVE) &&
             *emc__slot_owner(page_of(D, p), L, s) == id;
      if (phase == 0 && live) {
        ix_insert(D, key, id, loc);
      } else if (phase == 1 && !live && D.tabs[t].kind == EMC_TABLE_HASHED && D.unified_max > 0) {
        int64_t row = store_row_of(&D.tabs[t], id);
        uint64_t st = D.stamps[p * D.max_slots + s];
        if (row < 0) continue;
        if (atomicAdd(&D.g->host_entries, 1ull) >= D.unified_max) { atomicAdd(&D.g->host_entries, ~0ull); continue; }
        if (!ix_insert(D, key, id, EMC__LOC_HOST | ((st & EMC__LOC_HOST_STAMP_MASK) << EMC__LOC_HOST_STAMP_SHIFT) | (uint64_t)row))
          atomicAdd(&D.g->host_entries, ~0ull);
      }
    }
  }
}

/* A block per page: empty pages go back to the free stack; free slots of held pages are
 * flagged for the per-table free lists. */
__global__ void k_pages(dev D) {
  __shared__ unsigned live;
  for (uint64_t p = blockIdx.x; p < D.n_pages; p += gridDim.x) {
    uint32_t t = page_table(D, p), s;
    unsigned char *pg = page_of(D, p);
    const emc__page_layout *L = t == EMC__PAGE_NONE ? NULL : &D.layout[t];
    if (threadIdx.x == 0) live = 0;
    __syncthreads();
    if (L)
      for (s = threadIdx.x; s < L->n_slots; s += blockDim.x)
        if (*emc__slot_flags(pg, L, s) & EMC__SLOT_LIVE) atomicAdd(&live, 1u);
    __syncthreads();
    for (s = threadIdx.x; s < D.max_slots; s += blockDim.x)
      D.freeflag[p * D.max_slots + s] =
          L && live > 0 && s < L->n_slots && !(*emc__slot_flags(pg, L, s) & EMC__SLOT_LIVE);
    if (threadIdx.x == 0 && L && live == 0) {
      emc__page_hdr *h = (emc__page_hdr *)pg;
      h->tag = (((h->tag >> 32) + 1u) << 32) | EMC__PAGE_NONE;
      D.free_pages[atomicAdd(&D.g->free_top, 1u)] = (uint32_t)p;
      atomicAdd(&D.g->pages_held, ~0ull);
    }
    __syncthreads();
  }
}

__global__ void k_tkeys(dev D) {
  uint64_t n = (uint64_t)D.n_pages * D.max_slots;
  uint32_t nf = D.g->n_free;
  GRID_STRIDE(i, n) D.tkey[i] = i < nf ? page_table(D, D.sel[i] / D.max_slots) : D.n_tables;
}

__global__ void k_segs(dev D) {
  uint32_t nf = D.g->n_free;
  GRID_STRIDE(i, nf) {
    uint32_t t = D.tkey2[i];
    if (i == 0 || D.tkey2[i - 1] != t) D.ts[t].seg_start = (uint32_t)i;
    if (i + 1 == nf || D.tkey2[i + 1] != t) D.ts[t].seg_end = (uint32_t)i + 1;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile ull *)&D.mirror[0] = D.g->bytes_in_use;
}

__global__ void k_seg_reset(dev D) {
  GRID_STRIDE(t, D.n_tables) {
    D.ts[t].seg_start = D.ts[t].seg_end = D.ts[t].cursor = 0;
  }
}

__global__ void k_flush(dev D) {
  uint64_t n = (uint64_t)D.n_pages * D.max_slots;
  ull wb = 0;
  GRID_STRIDE(gi, n) {
    uint32_t s, t = live_slot(D, gi, &s);
    const emc__page_layout *L;
    unsigned char *pg;
    uint8_t fl;
    if (t == NONE32) continue;
    L = &D.layout[t];
    pg = page_of(D, gi / D.max_slots);
    fl = *emc__slot_flags(pg, L, s);
    if (!(fl & EMC__SLOT_DIRTY)) continue;
    {
      const dtab *tb = &D.tabs[t];
      int64_t row = store_row_of(tb, *emc__slot_owner(pg, L, s));
      if (row >= 0) emc__row_store(tb->base + (uint64_t)row * tb->stride, emc__slot_row(pg, L, s), tb->row_bytes);
    }
    *emc__slot_flags(pg, L, s) = (uint8_t)(fl & ~EMC__SLOT_DIRTY); /* readers check LIVE only */
    wb++;
  }
  if (wb) {
    atomicAdd(&D.g->writebacks, wb);
    atomicAdd(&D.g->dirty_rows, (ull)0 - wb);
  }
}

__global__ void k_init_pages(dev D) {
  GRID_STRIDE(p, D.n_pages) {
    emc__page_hdr *h = (emc__page_hdr *)page_of(D, p);
    h->tag = EMC__PAGE_NONE;
    D.free_pages[p] = D.n_pages - 1u - (uint32_t)p; /* page 0 on top */
  }
  GRID_STRIDE(i, (uint64_t)D.n_pages * D.max_slots) D.handles[i] = (uint32_t)i;
}

/* ================================================================= host side */
typedef struct reg_range {
  uintptr_t lo, hi;
} reg_range;

struct emc__cuda_cache {
  dev D;                       /* device pointers (owned) */
  dtab *tabs_host;
  uint32_t n_tables;
  int device;
  cudaStream_t priv;           /* private non-blocking stream: setup, stats */
  cudaEvent_t chain;           /* end of the last enqueued call */
  pthread_mutex_t lock;        /* serializes enqueueing and host-side store changes */
  uint64_t clock;              /* one tick per call */
  ull *mirror_host;            /* mapped: see dev.mirror */
  reg_range *regs;
  uint32_t n_regs;
  size_t cub_pass_bytes;
  void *cub_pass;
  /* per-call scratch, grown on demand (stream-ordered) */
  uint64_t cap_n;
  size_t cap_out, cub_bytes;
  void *scratch, *cub_tmp;
  unsigned char *stage_out;    /* staging for host `out` / `rows` */
  uint64_t *stage_ids, *d_params, *d_srows;
  uint8_t *stage_where;
  uint64_t n_lookups, n_inserts;
  int capturing;               /* the current call's stream is being captured into a graph */
  uint64_t *params_pinned;     /* call parameters under capture (2 * n_tables + 1 words) */
  /* EMC_CUDA_PROFILE=1: per-stage device time of lookups, printed at destroy */
  int prof;
  cudaEvent_t pev[16];
  const char *pname[16];
  double pacc[16], phost, t_entry;
  uint64_t pcalls;
  size_t index_bytes, arena_bytes;
  int ok;                      /* all device resources made */
};

static emc_status cuda_fail(cudaError_t e, const char *what) {
  emc_status st = e == cudaErrorMemoryAllocation ? EMC_EDEVMEM : EMC_ECUDA;
  (void)cudaGetLastError();
  return EMC_FAIL(st, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}
#define CU(call)                                        \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call); \
  } while (0)
#define CUG(call)                                       \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) {                            \
      st = cuda_fail(e_, #call);                        \
      goto out;                                         \
    }                                                   \
  } while (0)

static unsigned grid_for(uint64_t n, unsigned threads) {
  uint64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return (unsigned)(b > 4096u ? 4096u : b); /* grid-stride loops do the rest */
}

extern "C" int emc__cuda_available(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return device >= 0 && device < n;
}

/* Register the store's row memory and hashed maps (page-rounded, merged ranges). */
static emc_status register_store(emc__cuda_cache *k, const emc_store *s) {
  uint32_t t, n = 0, i, j;
  reg_range *r = (reg_range *)calloc((size_t)s->n_tables * 3 + 1, sizeof *r);
  const uintptr_t pg = 4096;
  if (!r) return EMC_FAIL(EMC_ENOMEM, "registration ranges");
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    const void *a[3] = {tb->base, tb->map_ids, tb->map_rowp1};
    size_t b[3] = {tb->base_bytes, (size_t)tb->map_cap * 8, (size_t)tb->map_cap * 8};
    for (i = 0; i < 3; i++) {
      if (!a[i] || !b[i]) continue;
      r[n].lo = (uintptr_t)a[i] & ~(pg - 1);
      r[n].hi = ((uintptr_t)a[i] + b[i] + pg - 1) & ~(pg - 1);
      n++;
    }
  }
  /* sort by start, merge overlapping or touching ranges */
  for (i = 1; i < n; i++)
    for (j = i; j > 0 && r[j - 1].lo > r[j].lo; j--) {
      reg_range x = r[j];
      r[j] = r[j - 1];
      r[j - 1] = x;
    }
  for (i = 0, j = 0; i < n; i++) {
    if (j > 0 && r[i].lo <= r[j - 1].hi) {
      if (r[i].hi > r[j - 1].hi) r[j - 1].hi = r[i].hi;
    } else {
      r[j++] = r[i];
    }
  }
  k->regs = r;
  for (i = 0; i < j; i++) {
    cudaError_t e = cudaHostRegister((void *)r[i].lo, r[i].hi - r[i].lo,
                                     cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      k->n_regs = i;
      return cuda_fail(e, "cudaHostRegister(store rows)");
    }
  }
  k->n_regs = j;
  return EMC_OK;
}

static emc_status dev_ptr(const void *host, void **out) {
  if (!host) {
    *out = NULL;
    return EMC_OK;
  }
  CU(cudaHostGetDevicePointer(out, (void *)host, 0));
  return EMC_OK;
}

extern "C" void emc__cuda_destroy(emc_cache *c);

extern "C" emc_status emc__cuda_create(emc_cache *c) {
  emc__cuda_cache *k;
  const emc_store *s = c->store;
  emc__pool_geom geo;
  emc__page_layout *layout = NULL;
  emc_status st = EMC_OK;
  uint32_t t, n = s->n_tables;
  uint64_t S, max_live;
  size_t free_b = 0, total_b = 0, need_b, tmp1 = 0, tmp2 = 0;
  dglob g0;
  if (!(k = (emc__cuda_cache *)calloc(1, sizeof *k))) return EMC_FAIL(EMC_ENOMEM, "cuda cache");
  c->cuda = k;
  k->n_tables = n;
  k->device = c->cfg.device;
  if (pthread_mutex_init(&k->lock, NULL) != 0) {
    free(k);
    c->cuda = NULL;
    return EMC_FAIL(EMC_ENOMEM, "mutex");
  }
  layout = (emc__page_layout *)calloc(n, sizeof *layout);
  k->tabs_host = (dtab *)calloc(n, sizeof *k->tabs_host);
  if (!layout || !k->tabs_host) {
    st = EMC_FAIL(EMC_ENOMEM, "cuda cache tables");
    goto out;
  }
  CUG(cudaSetDevice(c->cfg.device));
  CUG(cudaMemGetInfo(&free_b, &total_b));
  if (c->cfg.capacity_bytes > free_b) {
    st = EMC_FAIL(EMC_EDEVMEM, "capacity_bytes %zu exceeds the %zu bytes free on device %d (of %zu)",
                  c->cfg.capacity_bytes, free_b, c->cfg.device, total_b);
    goto out;
  }
  if ((st = emc__pool_geometry(c, &geo, layout)) != EMC_OK) goto out;
  CUG(cudaStreamCreateWithFlags(&k->priv, cudaStreamNonBlocking));
  CUG(cudaEventCreateWithFlags(&k->chain, cudaEventDisableTiming));

  k->D.n_tables = n;
  k->D.key_bits = c->codec.key_bits;
  k->D.empty = emc__key_empty(c->codec.key_bits);
  k->D.hash_seed = c->codec.hash_seed;
  k->D.page_bytes = geo.page_bytes;
  k->D.n_pages = geo.n_pages;
  k->D.max_slots = geo.max_slots;
  k->D.low = geo.low_bytes;
  k->D.high = geo.high_bytes;
  k->D.cap = c->cfg.capacity_bytes;
  k->D.unified_max = c->cfg.unified_index_rows;
  S = (uint64_t)geo.n_pages * geo.max_slots;
  max_live = S + c->cfg.unified_index_rows;
  k->D.ix_slots = (uint64_t)((double)max_live / INDEX_LOAD) + EMC__BUCKET;
  k->D.ix_slots = (k->D.ix_slots + EMC__BUCKET - 1) / EMC__BUCKET * EMC__BUCKET;
  k->D.ix_buckets = k->D.ix_slots / EMC__BUCKET;
  /* refuse a budget the device cannot hold (arena, two index copies, stamps, pass scratch) */
  if (!emc__size_mul64(k->D.ix_slots, 24, &k->index_bytes) ||
      !emc__size_mul64(geo.n_pages, geo.page_bytes, &k->arena_bytes) ||
      !emc__size_mul64(S, 8 + 1 + 4 * 5, &need_b) ||
      !emc__size_muladd(k->index_bytes, 2, need_b, &need_b) ||
      !emc__size_add(need_b, k->arena_bytes, &need_b)) {
    st = EMC_FAIL(EMC_EDEVMEM, "capacity_bytes %zu: the device structures' size overflows size_t",
                  c->cfg.capacity_bytes);
    goto out;
  }
  CUG(cudaMemGetInfo(&free_b, &total_b));
  if (need_b > free_b) {
    st = EMC_FAIL(EMC_EDEVMEM,
                  "capacity_bytes %zu needs %zu bytes of device memory (pool, index, stamps); "
                  "device %d has %zu free of %zu",
                  c->cfg.capacity_bytes, need_b, c->cfg.device, free_b, total_b);
    goto out;
  }
  if ((st = register_store(k, s)) != EMC_OK) goto out;
  for (t = 0; t < n; t++) {
    const emc__table *tb = &s->tables[t];
    dtab *d = &k->tabs_host[t];
    void *p;
    if ((st = dev_ptr(tb->base, &p)) != EMC_OK) goto out;
    d->base = (unsigned char *)p;
    if ((st = dev_ptr(tb->map_ids, &p)) != EMC_OK) goto out;
    d->map_ids = (const uint64_t *)p;
    if ((st = dev_ptr(tb->map_rowp1, &p)) != EMC_OK) goto out;
    d->map_rowp1 = (const uint64_t *)p;
    d->map_cap = tb->map_cap;
    d->rows = tb->rows;
    d->row_bytes = tb->row_bytes;
    d->stride = tb->stride;
    d->kind = (uint32_t)tb->kind;
    d->n_slots = layout[t].n_slots;
  }
  CUG(cudaHostAlloc((void **)&k->params_pinned, ((size_t)n * 2 + 1) * sizeof(uint64_t), cudaHostAllocDefault));
  CUG(cudaHostAlloc((void **)&k->mirror_host, 3 * sizeof(ull), cudaHostAllocMapped | cudaHostAllocPortable));
  k->mirror_host[0] = k->mirror_host[1] = k->mirror_host[2] = 0;
  {
    void *p;
    CUG(cudaHostGetDevicePointer(&p, k->mirror_host, 0));
    k->D.mirror = (ull *)p;
  }
  CUG(cudaMalloc((void **)&k->D.ix_keys, k->index_bytes));
  k->D.ix_ids = k->D.ix_keys + k->D.ix_slots;
  k->D.ix_locs = k->D.ix_ids + k->D.ix_slots;
  CUG(cudaMalloc((void **)&k->D.ix2_keys, k->index_bytes));
  k->D.ix2_ids = k->D.ix2_keys + k->D.ix_slots;
  k->D.ix2_locs = k->D.ix2_ids + k->D.ix_slots;
  CUG(cudaMalloc((void **)&k->D.arena, k->arena_bytes));
  CUG(cudaMalloc((void **)&k->D.stamps, S * sizeof(uint64_t)));
  CUG(cudaMalloc((void **)&k->D.layout, n * sizeof(emc__page_layout)));
  CUG(cudaMalloc((void **)&k->D.codes, n * sizeof(emc__table_code)));
  CUG(cudaMalloc((void **)&k->D.tabs, n * sizeof(dtab)));
  CUG(cudaMalloc((void **)&k->D.ts, n * sizeof(tstate)));
  CUG(cudaMalloc((void **)&k->D.g, sizeof(dglob)));
  CUG(cudaMalloc((void **)&k->D.free_pages, (size_t)geo.n_pages * 4));
  CUG(cudaMalloc((void **)&k->D.plan_pages, (size_t)geo.n_pages * 4));
  CUG(cudaMalloc((void **)&k->D.free_slots, S * 4));
  CUG(cudaMalloc((void **)&k->D.hist, HIST_BUCKETS * sizeof(ull)));
  CUG(cudaMalloc((void **)&k->D.freeflag, S));
  CUG(cudaMalloc((void **)&k->D.handles, S * 4));
  CUG(cudaMalloc((void **)&k->D.sel, S * 4));
  CUG(cudaMalloc((void **)&k->D.tkey, S * 4));
  CUG(cudaMalloc((void **)&k->D.tkey2, S * 4));
  /* pass scratch for CUB: select over S handles, sort S (table, handle) pairs */
  CUG(cub::DeviceSelect::Flagged(NULL, tmp1, k->D.handles, k->D.freeflag, k->D.sel,
                                 &k->D.g->n_free, (int64_t)S, k->priv));
  CUG(cub::DeviceRadixSort::SortPairs(NULL, tmp2, k->D.tkey, k->D.tkey2, k->D.sel, k->D.free_slots,
                                      (int64_t)S, 0, 32, k->priv));
  k->cub_pass_bytes = tmp1 > tmp2 ? tmp1 : tmp2;
  CUG(cudaMalloc(&k->cub_pass, k->cub_pass_bytes));

  CUG(cudaMemcpyAsync((void *)k->D.layout, layout, n * sizeof(emc__page_layout), cudaMemcpyHostToDevice, k->priv));
  CUG(cudaMemcpyAsync((void *)k->D.codes, c->codec.tables, n * sizeof(emc__table_code), cudaMemcpyHostToDevice, k->priv));
  CUG(cudaMemcpyAsync((void *)k->D.tabs, k->tabs_host, n * sizeof(dtab), cudaMemcpyHostToDevice, k->priv));
  CUG(cudaMemsetAsync(k->D.ts, 0, n * sizeof(tstate), k->priv));
  CUG(cudaMemsetAsync(k->D.arena, 0, k->arena_bytes, k->priv));
  CUG(cudaMemsetAsync(k->D.stamps, 0, S * sizeof(uint64_t), k->priv));
  memset(&g0, 0, sizeof g0);
  g0.free_top = geo.n_pages;
  CUG(cudaMemcpyAsync(k->D.g, &g0, sizeof g0, cudaMemcpyHostToDevice, k->priv));
  k_fill_u64<<<grid_for(k->D.ix_slots, 256), 256, 0, k->priv>>>(k->D.ix_keys, k->D.ix_slots, k->D.empty);
  k_init_pages<<<grid_for(S, 256), 256, 0, k->priv>>>(k->D);
  {
    /* every table: no current page, empty segment */
    tstate *tsh = (tstate *)calloc(n, sizeof *tsh);
    if (!tsh) {
      st = EMC_FAIL(EMC_ENOMEM, "table state");
      goto out;
    }
    for (t = 0; t < n; t++) tsh[t].cur_page = NONE32;
    st = EMC_OK;
    {
      cudaError_t e = cudaMemcpyAsync(k->D.ts, tsh, n * sizeof(tstate), cudaMemcpyHostToDevice, k->priv);
      if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv); /* tsh lives until the copy is done */
      free(tsh);
      if (e != cudaSuccess) {
        st = cuda_fail(e, "table state upload");
        goto out;
      }
    }
  }
  CUG(cudaGetLastError());
  CUG(cudaEventRecord(k->chain, k->priv));
  CUG(cudaStreamSynchronize(k->priv));
  k->ok = 1;
  k->prof = getenv("EMC_CUDA_PROFILE") && getenv("EMC_CUDA_PROFILE")[0] == '1';
out:
  free(layout);
  if (st != EMC_OK) emc__cuda_destroy(c);
  return st;
}

extern "C" void emc__cuda_destroy(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  uint32_t i;
  if (!k) return;
  if (k->priv) cudaStreamSynchronize(k->priv);
  cudaDeviceSynchronize(); /* every stream this cache used has finished with its memory */
  if (k->prof && k->pcalls) {
    fprintf(stderr, "emc profile: %llu calls, host enqueue %.1f us/call; device us/call:",
            (unsigned long long)k->pcalls, k->phost / (double)k->pcalls);
    for (i = 1; i < 10; i++)
      fprintf(stderr, " %s %.1f", k->pname[i] ? k->pname[i] : "?", 1000.0 * k->pacc[i] / (double)k->pcalls);
    fprintf(stderr, "\n");
  }
  for (i = 0; i < 16; i++)
    if (k->pev[i]) cudaEventDestroy(k->pev[i]);
  cudaFree(k->D.ix_keys);
  cudaFree(k->D.ix2_keys);
  cudaFree(k->D.arena);
  cudaFree(k->D.stamps);
  cudaFree((void *)k->D.layout);
  cudaFree((void *)k->D.codes);
  cudaFree((void *)k->D.tabs);
  cudaFree(k->D.ts);
  cudaFree(k->D.g);
  cudaFree(k->D.free_pages);
  cudaFree(k->D.plan_pages);
  cudaFree(k->D.free_slots);
  cudaFree(k->D.hist);
  cudaFree(k->D.freeflag);
  cudaFree(k->D.handles);
  cudaFree(k->D.sel);
  cudaFree(k->D.tkey);
  cudaFree(k->D.tkey2);
  cudaFree(k->cub_pass);
  cudaFree(k->scratch);
  cudaFree(k->cub_tmp);
  cudaFree(k->stage_out);
  cudaFree(k->stage_where);
  if (k->mirror_host) cudaFreeHost(k->mirror_host);
  if (k->params_pinned) cudaFreeHost(k->params_pinned);
  for (i = 0; i < k->n_regs; i++) cudaHostUnregister((void *)k->regs[i].lo);
  free(k->regs);
  if (k->chain) cudaEventDestroy(k->chain);
  if (k->priv) cudaStreamDestroy(k->priv);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&k->lock);
  free(k->tabs_host);
  free(k);
  c->cuda = NULL;
}

/* ----------------------------------------------------------------- per-call scratch */
static size_t al(size_t x) { return (x + 255) & ~(size_t)255; }

/* *acc += copies * al(n * elem); 0 when that overflows size_t. */
static int add_al(size_t *acc, uint64_t n, size_t elem, size_t copies) {
  size_t b;
  if (!emc__size_mul64(n, elem, &b) || !emc__size_add(b, 255, &b)) return 0;
  return emc__size_muladd(b & ~(size_t)255, copies, *acc, acc);
}

/* Bytes of the per-call scratch for n ids; 0 when that overflows size_t. */
static size_t scratch_bytes(uint64_t n, uint32_t n_tables) {
  size_t b = 0;
  if (add_al(&b, n, 8, 2) &&                      /* keys, skeys */
      add_al(&b, n, 4, 9) &&                      /* vals, svals, ptab, flags, uidx, inv, urep, rank, spare */
      add_al(&b, n, 8, 3) &&                      /* ukey, uloc, spare */
      add_al(&b, n, 1, 2) &&                      /* ukind, uflags */
      add_al(&b, n, 8, 2) &&                      /* staged ids, srows */
      add_al(&b, (uint64_t)n_tables + 1, 8, 2))   /* offsets, outoff */
    return b;
  return 0;
}

static emc_status ensure_scratch(emc__cuda_cache *k, uint64_t n, size_t out_bytes, cudaStream_t st) {
  if (n > k->cap_n) {
    uint64_t m = emc__u64_pow2_at_least(n, k->cap_n ? k->cap_n : 4096);
    size_t t1 = 0, t2 = 0, t3 = 0, sb = m ? scratch_bytes(m, k->n_tables) : 0;
    if (sb == 0) /* checked before anything is freed: the cache keeps its scratch */
      return EMC_FAIL(EMC_EDEVMEM, "scratch for %llu ids overflows size_t", (unsigned long long)n);
    if (k->scratch) CU(cudaFreeAsync(k->scratch, st));
    if (k->cub_tmp) CU(cudaFreeAsync(k->cub_tmp, st));
    k->scratch = k->cub_tmp = NULL;
    k->cap_n = 0;
    CU(cub::DeviceRadixSort::SortPairs(NULL, t1, (ull *)NULL, (ull *)NULL, (uint32_t *)NULL,
                                       (uint32_t *)NULL, (int64_t)m, 0, 64, st));
    CU(cub::DeviceScan::InclusiveSum(NULL, t2, (uint32_t *)NULL, (uint32_t *)NULL, (int64_t)m, st));
    t3 = t1 > t2 ? t1 : t2;
    if (k->stage_where) CU(cudaFreeAsync(k->stage_where, st));
    k->stage_where = NULL;
    CU(cudaMallocAsync(&k->scratch, sb, st));
    CU(cudaMallocAsync((void **)&k->stage_where, m, st));
    CU(cudaMallocAsync(&k->cub_tmp, t3, st));
    k->cub_bytes = t3;
    k->cap_n = m;
  }
  if (out_bytes > k->cap_out) {
    uint64_t m = emc__u64_pow2_at_least(out_bytes, k->cap_out ? k->cap_out : 1 << 20);
    if (m == 0) return EMC_FAIL(EMC_EDEVMEM, "a %zu-byte staging buffer overflows", out_bytes);
    if (k->stage_out) CU(cudaFreeAsync(k->stage_out, st));
    k->stage_out = NULL;
    k->cap_out = 0;
    CU(cudaMallocAsync((void **)&k->stage_out, m, st));
    k->cap_out = m;
  }
  return EMC_OK;
}

static void carve(emc__cuda_cache *k, callp *P) {
  unsigned char *q = (unsigned char *)k->scratch;
  uint64_t n = k->cap_n;
#define TAKE(field, type, bytes) (P->field = (type)q, q += al(bytes))
  TAKE(keys, ull *, n * 8);
  TAKE(skeys, ull *, n * 8);
  TAKE(vals, uint32_t *, n * 4);
  TAKE(svals, uint32_t *, n * 4);
  TAKE(ptab, uint32_t *, n * 4);
  TAKE(flags, uint32_t *, n * 4);
  TAKE(uidx, uint32_t *, n * 4);
  TAKE(inv, uint32_t *, n * 4);
  TAKE(urep, uint32_t *, n * 4);
  TAKE(rank, uint32_t *, n * 4);
  TAKE(act, uint32_t *, n * 4);
  TAKE(ukey, ull *, n * 8);
  TAKE(uloc, uint64_t *, n * 8);
  q += al(n * 8);
  TAKE(ukind, uint8_t *, n);
  TAKE(uflags, uint8_t *, n);
#undef TAKE
  k->stage_ids = (uint64_t *)q;
  q += al(n * 8);
  k->d_srows = (uint64_t *)q;
  q += al(n * 8);
  k->d_params = (uint64_t *)q;
}

/* Is p memory a kernel can use (device, managed or mapped pinned host memory)? */
static int device_accessible(const void *p) {
  cudaPointerAttributes a;
  if (!p) return 0;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
         (a.type == cudaMemoryTypeHost && a.devicePointer == p);
}

/* offsets in host memory (copied from the device if needed), validated. */
static emc_status host_offsets(emc_cache *c, const uint64_t *offsets, cudaStream_t stream,
                               uint64_t *buf, uint64_t *total, size_t *bytes) {
  uint32_t n = c->store->n_tables;
  if (!offsets) return EMC_FAIL(EMC_EINVAL, "offsets is NULL");
  if (device_accessible(offsets)) {
    CU(cudaMemcpyAsync(buf, offsets, (n + 1) * sizeof(uint64_t), cudaMemcpyDefault, stream));
    CU(cudaStreamSynchronize(stream));
    offsets = buf;
  } else {
    memcpy(buf, offsets, (n + 1) * sizeof(uint64_t));
  }
  return emc__check_offsets(c->store, buf, total, bytes);
}

/* The host-visible checks shared by lookup and insert: offsets (copied to offs), the batch
 * size, NULL pointers. */
static emc_status batch_args(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                             const void *buf, const char *buf_name, cudaStream_t st,
                             uint64_t *offs, uint64_t *n, size_t *bytes) {
  EMC_TRY(host_offsets(c, offsets, st, offs, n, bytes));
  if (*n > 0xfffffff0ull)
    return EMC_FAIL(EMC_EINVAL, "%llu ids in one call; at most 2^32 - 16", (unsigned long long)*n);
  if (*n > 0 && !ids) return EMC_FAIL(EMC_EINVAL, "ids is NULL with %llu ids", (unsigned long long)*n);
  if (*bytes > 0 && !buf) return EMC_FAIL(EMC_EINVAL, "%s is NULL with %zu bytes", buf_name, *bytes);
  return EMC_OK;
}

/* Enqueue an eviction pass when the published bytes in use exceed t1. */
static emc_status maybe_pass(emc__cuda_cache *k, cudaStream_t st, uint64_t now) {
  const dev &D = k->D;
  uint64_t S = (uint64_t)D.n_pages * D.max_slots;
  size_t tb = k->cub_pass_bytes;
  uint32_t endbit = 1;
  /* published by the previous call: bytes in use after it, and its demand */
  if (*(volatile ull *)&k->mirror_host[0] + *(volatile ull *)&k->mirror_host[2] <= D.high) return EMC_OK;
  *(volatile ull *)&k->mirror_host[0] = 0; /* the pass publishes the new figure */
  while ((1ull << endbit) <= D.n_tables) endbit++;
  k_pass_begin<<<1, 1, 0, st>>>(D, now);
  CU(cudaMemsetAsync(D.hist, 0, HIST_BUCKETS * sizeof(ull), st));
  k_pass_min<<<grid_for(S, 256), 256, 0, st>>>(D);
  k_pass_hist<<<grid_for(S, 256), 256, 0, st>>>(D, now);
  k_pass_cut<<<1, 1, 0, st>>>(D, now);
  k_pass_evict<<<grid_for(S, 256), 256, 0, st>>>(D, now);
  /* index rebuild: copy, clear, reinsert */
  CU(cudaMemcpyAsync(D.ix2_keys, D.ix_keys, k->index_bytes, cudaMemcpyDeviceToDevice, st));
  k_fill_u64<<<grid_for(D.ix_slots, 256), 256, 0, st>>>(D.ix_keys, D.ix_slots, D.empty);
  CU(cudaMemsetAsync(&D.g->host_entries, 0, sizeof(ull), st));
  k_rebuild<<<grid_for(D.ix_slots, 256), 256, 0, st>>>(D, 0, now);
  k_rebuild<<<grid_for(D.ix_slots, 256), 256, 0, st>>>(D, 1, now);
  k_rebuild<<<grid_for(D.ix_slots, 256), 256, 0, st>>>(D, 2, now);
  /* pages and free lists */
  k_pages<<<D.n_pages < 4096 ? D.n_pages : 4096, 256, 0, st>>>(D);
  CU(cub::DeviceSelect::Flagged(k->cub_pass, tb, D.handles, D.freeflag, D.sel, &D.g->n_free,
                                (int64_t)S, st));
  k_tkeys<<<grid_for(S, 256), 256, 0, st>>>(D);
  tb = k->cub_pass_bytes;
  CU(cub::DeviceRadixSort::SortPairs(k->cub_pass, tb, D.tkey, D.tkey2, D.sel, D.free_slots,
                                     (int64_t)S, 0, (int)endbit, st));
  k_seg_reset<<<grid_for(D.n_tables, 256), 256, 0, st>>>(D);
  k_segs<<<grid_for(S, 256), 256, 0, st>>>(D);
  CU(cudaGetLastError());
  return EMC_OK;
}

/* The common pipeline of lookup and insert, enqueued on st. */
/* Stage marks for EMC_CUDA_PROFILE. */
static void stage(emc__cuda_cache *k, cudaStream_t st, int i, const char *name) {
  if (!k->prof || k->capturing || i >= 16) return;
  if (!k->pev[i]) cudaEventCreate(&k->pev[i]);
  k->pname[i] = name;
  cudaEventRecord(k->pev[i], st);
}
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}
static void stage_end(emc__cuda_cache *k, int n) {
  int i;
  if (!k->prof || k->capturing) return;
  k->phost += now_us() - k->t_entry; /* entry to here: host work and launches, no waits */
  cudaEventSynchronize(k->pev[n - 1]);
  for (i = 1; i < n; i++) {
    float ms = 0;
    cudaEventElapsedTime(&ms, k->pev[i - 1], k->pev[i]);
    k->pacc[i] += ms;
  }
  k->pcalls++;
}

static emc_status run_batch(emc_cache *c, int mode, const uint64_t *ids_d, const uint64_t *offs_h,
                            uint64_t n, unsigned char *out_d, const unsigned char *rows_d,
                            uint8_t *where_d, const uint64_t *srows_h, cudaStream_t st) {
  emc__cuda_cache *k = c->cuda;
  const dev &D = k->D;
  uint32_t nt = k->n_tables, t;
  callp P;
  size_t tb;
  uint64_t *params_h = (uint64_t *)malloc(((size_t)nt * 2 + 1) * sizeof(uint64_t));
  uint64_t acc = 0;
  if (!params_h) return EMC_FAIL(EMC_ENOMEM, "call parameters");
  memset(&P, 0, sizeof P);
  carve(k, &P);
  for (t = 0; t <= nt; t++) params_h[t] = offs_h[t];
  for (t = 0; t < nt; t++) {
    params_h[nt + 1 + t] = acc;
    acc += (offs_h[t + 1] - offs_h[t]) * c->store->tables[t].row_bytes;
  }
  P.n = n;
  P.now = ++k->clock;
  P.mode = mode;
  P.dirty = mode == MODE_INSERT;
  P.ids = ids_d;
  P.offsets = k->d_params;
  P.outoff = k->d_params + nt + 1;
  P.out = out_d;
  P.src = mode == MODE_INSERT ? rows_d : out_d;
  P.where = where_d;
  /* pageable -> device async copies return once the source is staged: params_h can go.
   * Under capture a graph node may not read pageable memory: the parameters go through a
   * pinned buffer (the graph replays the offsets of the captured call). */
  {
    const uint64_t *src = params_h;
    cudaError_t e = cudaSuccess;
    if (k->capturing) {
      memcpy(k->params_pinned, params_h, ((size_t)nt * 2 + 1) * sizeof(uint64_t));
      src = k->params_pinned;
    }
    e = cudaMemcpyAsync(k->d_params, src, ((size_t)nt * 2 + 1) * sizeof(uint64_t),
                        cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess && srows_h)
      e = cudaMemcpyAsync(k->d_srows, srows_h, n * sizeof(uint64_t), cudaMemcpyHostToDevice, st);
    free(params_h);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyAsync(call parameters)");
  }
  P.srows = srows_h ? k->d_srows : NULL;
  stage(k, st, 0, "start");
  k_keys<<<grid_for(n, 256), 256, 0, st>>>(D, P);
  stage(k, st, 1, "keys");
  tb = k->cub_bytes;
  if (mode == MODE_INSERT) { /* by id, then (stable) by key; uloc and rank serve as buffers */
    CU(cub::DeviceRadixSort::SortPairs(k->cub_tmp, tb, (const ull *)ids_d, P.skeys, P.vals, P.svals,
                                       (int64_t)n, 0, 64, st));
    k_gather<<<grid_for(n, 256), 256, 0, st>>>(D, P);
    tb = k->cub_bytes;
    CU(cub::DeviceRadixSort::SortPairs(k->cub_tmp, tb, (const ull *)P.uloc, P.skeys, P.rank, P.svals,
                                       (int64_t)n, 0, (int)D.key_bits, st));
  } else {
    /* lookups: equal keys only need to be adjacent; sorting a 32-bit hash of the key on
     * log2(n) + 8 bits takes fewer passes than the key (different keys that share those bits
     * and interleave give a few duplicate uniques: harmless for a lookup) */
    int bits = 8;
    while (bits < 32 && (1ull << (bits - 8)) < n) bits++;
    CU(cub::DeviceRadixSort::SortPairs(k->cub_tmp, tb, P.flags, P.uidx, P.vals, P.svals, (int64_t)n,
                                       32 - bits, 32, st));
  }
  stage(k, st, 2, "sort");
  k_heads<<<grid_for(n, 256), 256, 0, st>>>(D, P);
  tb = k->cub_bytes;
  CU(cub::DeviceScan::InclusiveSum(k->cub_tmp, tb, P.flags, P.uidx, (int64_t)n, st));
  k_scatter<<<grid_for(n, 256), 256, 0, st>>>(D, P);
  stage(k, st, 3, "heads+scan+scatter");
  k_resolve<<<grid_for(n, 256), 256, 0, st>>>(D, P);
  stage(k, st, 4, "resolve+rank");
  if (mode == MODE_LOOKUP) k_copy<<<grid_for(n * CG, 256), 256, 0, st>>>(D, P);
  stage(k, st, 5, "copy");
  stage(k, st, 6, "-");
  {
    emc_status ps = maybe_pass(k, st, P.now);
    if (ps != EMC_OK) return ps;
  }
  stage(k, st, 7, "pass");
  k_plan<<<1, 1024, 0, st>>>(D, P);
  stage(k, st, 8, "plan+page_init");
  k_admit<<<grid_for(n * 32, 256), 256, 0, st>>>(D, P);
  stage(k, st, 9, "admit");
  CU(cudaGetLastError());
  stage_end(k, 10);
  return EMC_OK;
}

/* EMC_CUDA_DEBUG=1: after a lookup, check the dedup and resolve results on the host and print
 * the first inconsistencies to stderr (a development aid; synchronizes). */
static void debug_check(emc__cuda_cache *k, const uint64_t *ids_d, uint64_t n, cudaStream_t st) {
  callp P;
  uint64_t *ids = (uint64_t *)malloc(n * 8), *uloc = (uint64_t *)malloc(n * 8), i;
  uint32_t *inv = (uint32_t *)malloc(n * 4), *urep = (uint32_t *)malloc(n * 4), nu = 0;
  uint8_t *ukind = (uint8_t *)malloc(n);
  int bad = 0;
  dglob g;
  carve(k, &P);
  cudaStreamSynchronize(st);
  cudaMemcpy(ids, ids_d, n * 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(uloc, P.uloc, n * 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(inv, P.inv, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(urep, P.urep, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(ukind, P.ukind, n, cudaMemcpyDeviceToHost);
  cudaMemcpy(&g, k->D.g, sizeof g, cudaMemcpyDeviceToHost);
  nu = g.nunique;
  fprintf(stderr, "emc debug: n %llu unique %u\n", (unsigned long long)n, nu);
  for (i = 0; i < n && bad < 8; i++) {
    uint32_t u = inv[i];
    if (u >= nu || ids[urep[u]] != ids[i]) {
      fprintf(stderr, "emc debug: pos %llu id %llu -> unique %u (rep %u id %llu)\n",
              (unsigned long long)i, (unsigned long long)ids[i], u, u < nu ? urep[u] : 0,
              u < nu ? (unsigned long long)ids[urep[u]] : 0ull);
      bad++;
      continue;
    }
    if (ukind[u] == K_HIT) {
      uint64_t p = emc__loc_page(uloc[u]), tag, owner;
      uint32_t s = emc__loc_slot(uloc[u]), seq;
      emc__page_layout L;
      unsigned char *pg = k->D.arena + p * k->D.page_bytes;
      uint8_t fl;
      cudaMemcpy(&tag, pg, 8, cudaMemcpyDeviceToHost);
      cudaMemcpy(&L, &k->D.layout[(uint32_t)tag], sizeof L, cudaMemcpyDeviceToHost);
      cudaMemcpy(&seq, emc__slot_seq(pg, &L, s), 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(&owner, emc__slot_owner(pg, &L, s), 8, cudaMemcpyDeviceToHost);
      cudaMemcpy(&fl, emc__slot_flags(pg, &L, s), 1, cudaMemcpyDeviceToHost);
      if ((seq & 1u) || owner != ids[i] || !(fl & EMC__SLOT_LIVE)) {
        fprintf(stderr, "emc debug: pos %llu id %llu hit page %llu slot %u: tag %llx seq %u owner %llu flags %u\n",
                (unsigned long long)i, (unsigned long long)ids[i], (unsigned long long)p, s,
                (unsigned long long)tag, seq, (unsigned long long)owner, fl);
        bad++;
      }
    }
  }
  fprintf(stderr, "emc debug: hits %llu misses %llu retries %llu admissions %llu skipped %llu\n",
          g.hits, g.misses, g.retries, g.admissions, g.admit_skipped);
  free(ids); free(uloc); free(inv); free(urep); free(ukind);
}

/* Begin/end of every enqueueing call: the chain orders this cache's calls on the device. */
static emc_status begin_call(emc__cuda_cache *k, cudaStream_t st) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  pthread_mutex_lock(&k->lock);
  cudaError_t e = cudaSetDevice(k->device);
  /* under stream capture the chain is an external event (the graph then orders itself after
   * the calls enqueued before its launch) */
  if (e == cudaSuccess) e = cudaStreamIsCapturing(st, &cs);
  k->capturing = cs == cudaStreamCaptureStatusActive;
  if (e == cudaSuccess) e = cudaStreamWaitEvent(st, k->chain, k->capturing ? cudaEventWaitExternal : 0);
  if (e != cudaSuccess) {
    pthread_mutex_unlock(&k->lock);
    return cuda_fail(e, "cudaStreamWaitEvent(previous call)");
  }
  return EMC_OK;
}
static emc_status end_call(emc__cuda_cache *k, cudaStream_t st, emc_status status) {
  cudaError_t e = k->capturing ? cudaEventRecordWithFlags(k->chain, st, cudaEventRecordExternal)
                               : cudaEventRecord(k->chain, st);
  k->capturing = 0;
  pthread_mutex_unlock(&k->lock);
  if (status == EMC_OK && e != cudaSuccess) return cuda_fail(e, "cudaEventRecord(chain)");
  return status;
}

extern "C" emc_status emc__cuda_lookup(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                       void *out, uint8_t *where, void *stream) {
  emc__cuda_cache *k = c->cuda;
  cudaStream_t st = (cudaStream_t)stream;
  uint64_t *offs = (uint64_t *)malloc(((size_t)k->n_tables + 1) * sizeof(uint64_t));
  uint64_t n;
  size_t bytes;
  emc_status status;
  int ids_dev, out_dev, where_dev;
  const uint64_t *ids_d;
  unsigned char *out_d;
  uint8_t *where_d = NULL;
  if (!offs) return EMC_FAIL(EMC_ENOMEM, "offsets copy");
  if (k->prof) k->t_entry = now_us();
  if ((status = batch_args(c, ids, offsets, out, "out", st, offs, &n, &bytes)) != EMC_OK) goto done;
  if (n == 0) goto done;
  ids_dev = device_accessible(ids);
  out_dev = device_accessible(out);
  where_dev = where && device_accessible(where);
  if (!ids_dev && (status = emc__check_dense_ids(c->store, ids, offs)) != EMC_OK) goto done;
  if ((status = begin_call(k, st)) != EMC_OK) goto done;
  status = ensure_scratch(k, n, out_dev ? 0 : bytes, st);
  if (status == EMC_OK) {
    callp tmp;
    carve(k, &tmp);
    ids_d = ids;
    if (!ids_dev) {
      cudaError_t e = cudaMemcpyAsync(k->stage_ids, ids, n * 8, cudaMemcpyHostToDevice, st);
      if (e != cudaSuccess) status = cuda_fail(e, "cudaMemcpyAsync(ids)");
      ids_d = k->stage_ids;
    }
    out_d = out_dev ? (unsigned char *)out : k->stage_out;
    if (where) where_d = where_dev ? where : k->stage_where;
    if (status == EMC_OK)
      status = run_batch(c, MODE_LOOKUP, ids_d, offs, n, out_d, NULL, where_d, NULL, st);
    if (status == EMC_OK && getenv("EMC_CUDA_DEBUG")) debug_check(k, ids_d, n, st);
    if (status == EMC_OK && !out_dev) {
      cudaError_t e = cudaMemcpyAsync(out, out_d, bytes, cudaMemcpyDeviceToHost, st);
      if (e != cudaSuccess) status = cuda_fail(e, "cudaMemcpyAsync(out)");
    }
    if (status == EMC_OK && where && !where_dev) {
      cudaError_t e = cudaMemcpyAsync(where, where_d, n, cudaMemcpyDeviceToHost, st);
      if (e != cudaSuccess) status = cuda_fail(e, "cudaMemcpyAsync(where)");
    }
  }
  status = end_call(k, st, status);
  if (status == EMC_OK && (!out_dev || (where && !where_dev))) {
    cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) status = cuda_fail(e, "cudaStreamSynchronize(lookup)");
  }
  if (status == EMC_OK) __atomic_fetch_add(&k->n_lookups, n, __ATOMIC_RELAXED);
done:
  free(offs);
  return status;
}

extern "C" emc_status emc__cuda_insert(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                       const void *rows, void *stream) {
  emc__cuda_cache *k = c->cuda;
  emc_store *s = c->store;
  cudaStream_t st = (cudaStream_t)stream;
  uint64_t *offs = (uint64_t *)malloc(((size_t)k->n_tables + 1) * sizeof(uint64_t));
  uint64_t n = 0, i, *ids_h = NULL, *srows = NULL;
  size_t bytes;
  emc_status status;
  int ids_dev, rows_dev, locked = 0;
  uint32_t t;
  const unsigned char *rows_d;
  if (!offs) return EMC_FAIL(EMC_ENOMEM, "offsets copy");
  if (k->prof) k->t_entry = now_us();
  if ((status = batch_args(c, ids, offsets, rows, "rows", st, offs, &n, &bytes)) != EMC_OK) goto done;
  if (n == 0) goto done;
  ids_dev = device_accessible(ids);
  rows_dev = device_accessible(rows);
  /* ids on the host: validated and hashed rows reserved before anything changes */
  ids_h = (uint64_t *)malloc(n * 8);
  srows = (uint64_t *)malloc(n * 8);
  if (!ids_h || !srows) { status = EMC_FAIL(EMC_ENOMEM, "insert scratch for %llu ids", (unsigned long long)n); goto done; }
  if (ids_dev) {
    cudaError_t e = cudaMemcpyAsync(ids_h, ids, n * 8, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) { status = cuda_fail(e, "copying ids to the host"); goto done; }
  } else {
    memcpy(ids_h, ids, n * 8);
  }
  if ((status = emc__check_dense_ids(c->store, ids_h, offs)) != EMC_OK) goto done;
  if ((status = begin_call(k, st)) != EMC_OK) goto done;
  locked = 1;
  for (t = 0; t < s->n_tables; t++) {
    const emc__table *tb = &s->tables[t];
    uint64_t fresh, m = offs[t + 1] - offs[t];
    if (tb->kind != EMC_TABLE_HASHED || m == 0) continue;
    fresh = emc__count_new_ids(tb, ids_h + offs[t], (size_t)m);
    if (fresh == (uint64_t)-1) { status = EMC_FAIL(EMC_ENOMEM, "scratch set of %llu ids", (unsigned long long)m); goto done; }
    if (fresh > tb->rows - tb->count) {
      status = EMC_FAIL(EMC_ERANGE, "table %u ('%s'): %llu new ids exceed the free capacity %llu", t,
                        tb->name, (unsigned long long)fresh, (unsigned long long)(tb->rows - tb->count));
      goto done;
    }
  }
  for (t = 0; t < s->n_tables; t++)
    for (i = offs[t]; i < offs[t + 1]; i++)
      srows[i] = s->tables[t].kind == EMC_TABLE_DENSE ? ids_h[i]
                                                       : (uint64_t)emc__store_find_or_add(s, t, ids_h[i], NULL);
  status = ensure_scratch(k, n, rows_dev ? 0 : bytes, st);
  if (status == EMC_OK) {
    callp tmp;
    cudaError_t e = cudaSuccess;
    carve(k, &tmp);
    if (!ids_dev) e = cudaMemcpyAsync(k->stage_ids, ids_h, n * 8, cudaMemcpyHostToDevice, st);
    rows_d = (const unsigned char *)rows;
    if (e == cudaSuccess && !rows_dev) {
      e = cudaMemcpyAsync(k->stage_out, rows, bytes, cudaMemcpyHostToDevice, st);
      rows_d = k->stage_out;
    }
    if (e != cudaSuccess) status = cuda_fail(e, "cudaMemcpyAsync(insert inputs)");
    if (status == EMC_OK)
      status = run_batch(c, MODE_INSERT, ids_dev ? ids : k->stage_ids, offs, n, NULL, rows_d, NULL,
                         srows, st);
  }
  status = end_call(k, st, status);
  locked = 0;
  if (status == EMC_OK) {
    /* srows must stay alive until its pageable copy is staged (done when the call returned);
     * the hashed rows reserved above are zero until the cache writes them back */
    cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) status = cuda_fail(e, "cudaStreamSynchronize(insert)");
    else __atomic_fetch_add(&k->n_inserts, n, __ATOMIC_RELAXED);
  }
done:
  if (locked) end_call(k, st, status);
  free(offs);
  free(ids_h);
  free(srows);
  return status;
}

extern "C" emc_status emc__cuda_flush(emc_cache *c, void *stream) {
  emc__cuda_cache *k = c->cuda;
  cudaStream_t st = (cudaStream_t)stream;
  uint64_t S = (uint64_t)k->D.n_pages * k->D.max_slots;
  emc_status status;
  cudaError_t e;
  if ((status = begin_call(k, st)) != EMC_OK) return status;
  k_flush<<<grid_for(S, 256), 256, 0, st>>>(k->D);
  e = cudaGetLastError();
  status = end_call(k, st, e == cudaSuccess ? EMC_OK : cuda_fail(e, "k_flush"));
  if (status != EMC_OK) return status;
  if ((e = cudaStreamSynchronize(st)) != cudaSuccess) return cuda_fail(e, "cudaStreamSynchronize(flush)");
  if (*(volatile ull *)&k->mirror_host[1]) {
    dglob g;
    if ((e = cudaMemcpy(&g, k->D.g, sizeof g, cudaMemcpyDeviceToHost)) != cudaSuccess)
      return cuda_fail(e, "reading counters");
    k->mirror_host[1] = 0;
    cudaMemset(&k->D.g->bad_count, 0, sizeof(ull));
    return EMC_FAIL(EMC_ERANGE,
                    "%llu dense ids out of range in lookups since the last flush (first: table %llu, "
                    "position %llu, id %llu); they read as zero rows",
                    g.bad_count, g.bad_table, g.bad_pos, g.bad_id);
  }
  return EMC_OK;
}

extern "C" emc_status emc__cuda_stats(const emc_cache *c, emc_stats *o) {
  emc__cuda_cache *k = c->cuda;
  dglob g;
  cudaError_t e;
  memset(o, 0, sizeof *o);
  /* a private non-blocking stream: the lookup streams are not stalled */
  e = cudaMemcpyAsync(&g, k->D.g, sizeof g, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv);
  if (e != cudaSuccess) return cuda_fail(e, "reading device counters");
  o->lookups = __atomic_load_n(&k->n_lookups, __ATOMIC_RELAXED);
  o->hits = g.hits;
  o->misses = g.misses;
  o->absent = g.absent;
  o->admissions = g.admissions;
  o->admit_skipped = g.admit_skipped;
  o->inserts = __atomic_load_n(&k->n_inserts, __ATOMIC_RELAXED);
  o->evictions = g.evictions;
  o->writebacks = g.writebacks;
  o->evict_passes = g.passes;
  o->retries = g.retries;
  o->unified_hits = g.unified;
  o->bytes_in_use = g.bytes_in_use;
  o->bytes_reserved = g.pages_held * k->D.page_bytes;
  o->capacity_bytes = c->cfg.capacity_bytes;
  o->index_bytes = 2 * k->index_bytes + (size_t)k->D.n_pages * k->D.max_slots * 8;
  o->dirty_rows = g.dirty_rows;
  {
    uint64_t rc = 0;
    uint32_t t;
    tstate *ts = (tstate *)malloc(k->n_tables * sizeof *ts);
    if (!ts) return EMC_FAIL(EMC_ENOMEM, "stats scratch");
    e = cudaMemcpyAsync(ts, k->D.ts, k->n_tables * sizeof *ts, cudaMemcpyDeviceToHost, k->priv);
    if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv);
    if (e != cudaSuccess) {
      free(ts);
      return cuda_fail(e, "reading table counters");
    }
    for (t = 0; t < k->n_tables; t++) rc += ts[t].rows_cached;
    free(ts);
    o->rows_cached = rc;
  }
  return EMC_OK;
}

/* ================================================================= white-box check */
#define CHK(cond, ...)                                  \
  do {                                                  \
    if (!(cond)) {                                      \
      st = EMC_FAIL(EMC_ECORRUPT, __VA_ARGS__);         \
      goto done;                                        \
    }                                                   \
  } while (0)

/* Copy the device structures to the host and verify them (tests; waits for the device):
 * pages held + free = all, every live slot has exactly one index entry pointing at it and
 * vice versa, every entry's key is the global key of its (table, id) and found where it is,
 * unified entries point at their id's store row, byte / row / dirty counts agree, use stays
 * at or below t1, and every slot on a free list or bump range is free and of its table. */
extern "C" emc_status emc__cuda_check(emc_cache *c) {
  emc__cuda_cache *k = c->cuda;
  const dev &D = k->D;
  uint32_t nt = k->n_tables, t, p, s;
  uint64_t S = (uint64_t)D.n_pages * D.max_slots, i;
  uint64_t empty = D.empty, bytes = 0, dirty = 0, live = 0, host_entries = 0, entries = 0;
  unsigned char *arena = NULL;
  uint64_t *ix = NULL, *rows = NULL;
  uint32_t *free_pages = NULL, *free_slots = NULL;
  uint8_t *seen = NULL;
  emc__page_layout *L = NULL;
  tstate *ts = NULL;
  dglob g;
  emc_status st = EMC_OK;
  cudaError_t e;
  if (!k) return EMC_FAIL(EMC_EUNSUPPORTED, "not a CUDA cache");
  if ((st = begin_call(k, k->priv)) != EMC_OK) return st;
  e = cudaStreamSynchronize(k->priv);
  arena = (unsigned char *)malloc(k->arena_bytes);
  ix = (uint64_t *)malloc(k->index_bytes);
  free_pages = (uint32_t *)malloc((size_t)D.n_pages * 4);
  free_slots = (uint32_t *)malloc(S * 4);
  seen = (uint8_t *)calloc(S + D.n_pages, 1);
  L = (emc__page_layout *)malloc(nt * sizeof *L);
  ts = (tstate *)malloc(nt * sizeof *ts);
  rows = (uint64_t *)calloc(nt, 8);
  if (!arena || !ix || !free_pages || !free_slots || !seen || !L || !ts || !rows) {
    st = EMC_FAIL(EMC_ENOMEM, "check scratch");
    goto done;
  }
  if (e == cudaSuccess) e = cudaMemcpy(arena, D.arena, k->arena_bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(ix, D.ix_keys, k->index_bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(free_pages, D.free_pages, (size_t)D.n_pages * 4, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(free_slots, D.free_slots, S * 4, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(L, D.layout, nt * sizeof *L, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(ts, D.ts, nt * sizeof *ts, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) e = cudaMemcpy(&g, D.g, sizeof g, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    st = cuda_fail(e, "copying the cache to the host");
    goto done;
  }
  {
    emc__index_view v;
    uint64_t *keys = ix, *ids = ix + D.ix_slots, *locs = ix + 2 * D.ix_slots, held = 0;
    v.keys = keys;
    v.ids = ids;
    v.locs = locs;
    v.n_buckets = D.ix_buckets;
    /* free page stack */
    CHK(g.free_top <= D.n_pages, "free_top %u > %u pages", g.free_top, D.n_pages);
    for (i = 0; i < g.free_top; i++) {
      p = free_pages[i];
      CHK(p < D.n_pages && !seen[S + p], "free page stack entry %llu: page %u bad or twice",
          (unsigned long long)i, p);
      seen[S + p] = 1;
      CHK((uint32_t)((emc__page_hdr *)(arena + (uint64_t)p * D.page_bytes))->tag == EMC__PAGE_NONE,
          "page %u is on the free stack but held", p);
    }
    /* pages and slots */
    for (p = 0; p < D.n_pages; p++) {
      unsigned char *pg = arena + (uint64_t)p * D.page_bytes;
      t = (uint32_t)((emc__page_hdr *)pg)->tag;
      if (t == EMC__PAGE_NONE) {
        CHK(seen[S + p], "free page %u is not on the free stack", p);
        continue;
      }
      held++;
      CHK(t < nt, "page %u: table %u", p, t);
      for (s = 0; s < L[t].n_slots; s++) {
        uint8_t fl = *emc__slot_flags(pg, &L[t], s);
        uint64_t id, key;
        int64_t pos;
        CHK(!(*emc__slot_seq(pg, &L[t], s) & 1u), "page %u slot %u: odd version", p, s);
        if (!(fl & EMC__SLOT_LIVE)) continue;
        id = *emc__slot_owner(pg, &L[t], s);
        key = emc__global_key(&c->codec.tables[t], id, c->codec.hash_seed);
        pos = emc__index_find(&v, key, empty);
        CHK(pos >= 0 && ids[pos] == id && locs[pos] == emc__loc_pool(p, s),
            "table %u id %llu in page %u slot %u: no index entry points at it", t,
            (unsigned long long)id, p, s);
        live++;
        bytes += L[t].stride;
        dirty += (fl & EMC__SLOT_DIRTY) != 0;
        rows[t]++;
      }
    }
    CHK(held == g.pages_held && held + g.free_top == D.n_pages,
        "pages: %llu held (counter %llu) + %u free != %u", (unsigned long long)held,
        (unsigned long long)g.pages_held, g.free_top, D.n_pages);
    /* index */
    for (i = 0; i < D.ix_slots; i++) {
      int64_t tt;
      if (keys[i] == empty) continue;
      entries++;
      tt = emc__codec_table_of(&c->codec, keys[i]);
      CHK(tt >= 0 && keys[i] == emc__global_key(&c->codec.tables[tt], ids[i], c->codec.hash_seed),
          "index slot %llu: key is not the global key of its id", (unsigned long long)i);
      CHK(emc__index_find(&v, keys[i], empty) == (int64_t)i, "index slot %llu: key found elsewhere",
          (unsigned long long)i);
      if (locs[i] & EMC__LOC_HOST) {
        const emc__table *tb = &c->store->tables[tt];
        uint64_t r = locs[i] & EMC__LOC_HOST_ROW_MASK;
        host_entries++;
        CHK(tb->kind == EMC_TABLE_HASHED && r < tb->count && tb->row_ids[r] == ids[i],
            "unified entry of table %lld id %llu points at a wrong row", (long long)tt,
            (unsigned long long)ids[i]);
      } else {
        uint64_t pp = emc__loc_page(locs[i]);
        uint32_t ss = emc__loc_slot(locs[i]);
        unsigned char *pg = arena + pp * D.page_bytes;
        CHK(pp < D.n_pages && (uint32_t)((emc__page_hdr *)pg)->tag == (uint32_t)tt &&
                ss < L[tt].n_slots && (*emc__slot_flags(pg, &L[tt], ss) & EMC__SLOT_LIVE) &&
                *emc__slot_owner(pg, &L[tt], ss) == ids[i],
            "entry of table %lld id %llu points at a slot that is not its row", (long long)tt,
            (unsigned long long)ids[i]);
      }
    }
    CHK(entries == live + host_entries, "%llu entries != %llu live slots + %llu unified",
        (unsigned long long)entries, (unsigned long long)live, (unsigned long long)host_entries);
    CHK(host_entries == g.host_entries && host_entries <= D.unified_max,
        "unified entries %llu, counter %llu, limit %llu", (unsigned long long)host_entries,
        (unsigned long long)g.host_entries, (unsigned long long)D.unified_max);
    CHK(bytes == g.bytes_in_use, "bytes in use %llu, slots add up to %llu",
        (unsigned long long)g.bytes_in_use, (unsigned long long)bytes);
    CHK(bytes <= D.high, "bytes in use %llu above t1 (%llu)", (unsigned long long)bytes,
        (unsigned long long)D.high);
    CHK(dirty == g.dirty_rows, "dirty rows %llu, counter %llu", (unsigned long long)dirty,
        (unsigned long long)g.dirty_rows);
    for (t = 0; t < nt; t++) {
      uint32_t j;
      CHK(rows[t] == ts[t].rows_cached, "table %u: %llu rows cached, counter %llu", t,
          (unsigned long long)rows[t], (unsigned long long)ts[t].rows_cached);
      CHK(ts[t].need == 0, "table %u: need %u left over", t, ts[t].need);
      /* the free segment not yet handed out: free slots of this table's pages, once each */
      CHK(ts[t].seg_start <= ts[t].seg_end && ts[t].seg_end <= S &&
              ts[t].cursor <= ts[t].seg_end - ts[t].seg_start,
          "table %u: free segment [%u, %u) cursor %u", t, ts[t].seg_start, ts[t].seg_end, ts[t].cursor);
      for (j = ts[t].seg_start + ts[t].cursor; j < ts[t].seg_end; j++) {
        uint32_t h = free_slots[j], pp = h / D.max_slots, ss = h % D.max_slots;
        unsigned char *pg = arena + (uint64_t)pp * D.page_bytes;
        CHK(pp < D.n_pages && (uint32_t)((emc__page_hdr *)pg)->tag == t && ss < L[t].n_slots &&
                !(*emc__slot_flags(pg, &L[t], ss) & EMC__SLOT_LIVE) && !seen[h],
            "table %u: free-list slot %u (page %u slot %u) is live, foreign or listed twice", t, h, pp, ss);
        seen[h] = 1;
      }
      if (ts[t].cur_page != NONE32) {
        unsigned char *pg = arena + (uint64_t)ts[t].cur_page * D.page_bytes;
        CHK(ts[t].cur_page < D.n_pages && (uint32_t)((emc__page_hdr *)pg)->tag == t &&
                ts[t].bump <= L[t].n_slots,
            "table %u: current page %u / bump %u", t, ts[t].cur_page, ts[t].bump);
        for (s = ts[t].bump; s < L[t].n_slots; s++) {
          uint32_t h = ts[t].cur_page * D.max_slots + s;
          CHK(!(*emc__slot_flags(pg, &L[t], s) & EMC__SLOT_LIVE) && !seen[h],
              "table %u: bump slot %u of page %u is live or also on a free list", t, s, ts[t].cur_page);
        }
      }
    }
  }
done:
  end_call(k, k->priv, EMC_OK);
  free(arena);
  free(ix);
  free(free_pages);
  free(free_slots);
  free(seen);
  free(L);
  free(ts);
  free(rows);
  return st;
}
#undef CHK

extern "C" emc_status emc__cuda_table_rows(const emc_cache *c, uint32_t table, uint64_t *out) {
  emc__cuda_cache *k = c->cuda;
  tstate ts;
  cudaError_t e = cudaMemcpyAsync(&ts, &k->D.ts[table], sizeof ts, cudaMemcpyDeviceToHost, k->priv);
  if (e == cudaSuccess) e = cudaStreamSynchronize(k->priv);
  if (e != cudaSuccess) return cuda_fail(e, "reading table counters");
  *out = ts.rows_cached;
  return EMC_OK;
}
