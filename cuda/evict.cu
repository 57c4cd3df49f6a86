/*
 * evict.cu: the eviction stage (approximate LRU between t1 and t2) and its launcher.
 *
 * Decided on the device by the writer call's begin kernel (admit.cu): a pass runs when the
 * bytes in use plus the call's demand would pass t1 (g->pass_active), and a stamp-aging scan
 * when EMC__AGE_CLAMP / 2 clock ticks went by without one (g->aging). Every kernel here
 * returns at once when neither holds.
 *   hist     a thread per index slot: each live, unpinned pool entry's age (clock - stamp,
 *            16 bits, clamped to EMC__AGE_CLAMP, the stamp rewritten when clamped; pinned ones
 *            are clamped too) into a histogram of EMC_HIST buckets of 8 ticks, weighted by the
 *            row's stride (block histograms in shared memory, then one atomic per non-empty
 *            bucket). Rows pinned by emc_prefetch are never evicted (train.cu).
 *   cut      (1 thread) from the oldest bucket down: the bucket where the bytes reach the need
 *   sweep    a thread per index slot: entries older than the cut bucket go, and entries of the
 *            cut bucket while the cut's share lasts; entries stamped at the current tick stay.
 *            A dirty row is written back first (inside its write-back cell, dev.cuh); the entry becomes a unified-index entry (hashed rows, while the
 *            budget lasts) or goes (BUSY lm, then EMPTY or TOMB: EMPTY when its bucket already
 *            holds an EMPTY slot); then the slot's bit is set in its page's bitmap. Readers
 *            copying such a row meanwhile fail their validation and probe again.
 *   pages    a thread per page: empty pages go back to the free stack; pages with free slots
 *            are counted per table
 *   lists    (1 block) each table's segment of the list of pages with free slots
 *   scatter  a thread per page: the pages with free slots into their table's segment
 * Then, when a plan ran out of pages, the reclaim (young, cut, sweep: below). The page stage
 * (pages, lists, scatter) also runs alone, without a pass, after a reclaim, and when the writer call
 * collects (g->collect, decided with the pass by admit.cu's demand kernel): a writer call whose
 * misses an earlier call had admitted meanwhile (lookups run ahead of the writer stream)
 * leaves their granted slots free, in pages a grant may never offer again (no longer the
 * table's current page, or behind the page list's cursor); without a pass to list them, the
 * pool ran out of pages far under t1 and every later miss was skipped (no pass ever ran).
 * Unified entries of earlier passes are dropped, all at once, by the hist kernel when the
 * unified index is three-quarters full.
 */
#include "dev_cub.cuh"

__device__ __forceinline__ int pass_on(const dview &V) { return V.g->pass_active || V.g->aging; }
/* The histogram bucket of an age (the oldest bucket takes every age past it). */
__device__ __forceinline__ uint32_t age_bucket(uint32_t age) {
  uint32_t b = age / (EMC__AGE_CLAMP / EMC_HIST);
  return b < EMC_HIST ? b : EMC_HIST - 1;
}
/* the page stage runs in a pass, and alone when the writer call collects free slots */
__device__ __forceinline__ int pages_on(const dview &V) {
  return V.g->pass_active || V.g->collect || V.g->reclaim;
}

/* The live, unpinned pool entry at index slot i (what a pass may evict): its lm (0 when
 * none). */
__device__ __forceinline__ uint64_t pool_entry(const dview &V, uint64_t i, uint64_t *key) {
  uint64_t k = ix_key(V.ix, i), lm;
  if (k == emc__key_empty(V.key_bits) || k == emc__key_tomb(V.key_bits)) return 0;
  lm = V.ix.lm[i];
  if ((emc__lm_loc(lm) & EMC__LOC_HOST) || (lm & EMC__LM_PINS)) return 0;
  *key = k;
  return lm;
}

/* Remove the entry at index slot i: BUSY lm, then EMPTY (its bucket keeps an EMPTY slot) or
 * TOMB. Returns 1 for a tombstone. */
__device__ __forceinline__ int remove_entry(const dview &V, uint64_t i) {
  uint64_t b = i / EMC__BUCKET, empty = emc__key_empty(V.key_bits);
  int has_empty = 0;
  atomicExch((ull *)&V.ix.lm[i], (ull)EMC__LM_FREE);
  __threadfence();
  for (unsigned s = 0; s < EMC__BUCKET; s++) has_empty |= ix_key(V.ix, b * EMC__BUCKET + s) == empty;
  if (V.key_bits == 32)
    atomicExch((uint32_t *)V.ix.keys + i, (uint32_t)(has_empty ? empty : emc__key_tomb(32)));
  else
    atomicExch((ull *)V.ix.keys + i, (ull)(has_empty ? empty : emc__key_tomb(64)));
  __threadfence(); /* before the slot can be reused */
  return !has_empty;
}

__global__ void __launch_bounds__(256) k_ev_hist(const __grid_constant__ dview V) {
  __shared__ ull h[EMC_HIST];
  dglob *g = V.g;
  const uint32_t now = g->clock;
  const int active = g->pass_active;
  const int drop_unified = active && g->host_entries > 0 &&
                           g->host_entries >= V.unified_max - V.unified_max / 4;
  ull dropped = 0, tombs = 0;
  if (!pass_on(V)) return;
  for (uint32_t i = threadIdx.x; i < EMC_HIST; i += blockDim.x) h[i] = 0;
  __syncthreads();
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    uint64_t k = ix_key(V.ix, i), lm;
    uint32_t age;
    if (k == emc__key_empty(V.key_bits) || k == emc__key_tomb(V.key_bits)) continue;
    lm = V.ix.lm[i];
    if (emc__lm_loc(lm) & EMC__LOC_HOST) {
      if (drop_unified) {
        tombs += remove_entry(V, i);
        dropped++;
      }
      continue;
    }
    age = emc__stamp_age(now, V.ix.stamps[i]);
    if (age > EMC__AGE_CLAMP) {
      age = EMC__AGE_CLAMP;
      V.ix.stamps[i] = emc__stamp_of(now - EMC__AGE_CLAMP);
    }
    if (active && !(lm & EMC__LM_PINS)) { /* pinned rows are clamped, never counted */
      uint32_t t = hdr_of(V, emc__lm_loc(lm) / V.max_slots)->table;
      atomicAdd(&h[age_bucket(age)], (ull)V.tabs[t].stride);
    }
  }
  if (dropped) {
    atomicAdd(&g->host_entries, (ull)0 - dropped);
    atomicAdd(&g->ix_live, (ull)0 - dropped);
    if (tombs) atomicAdd(&g->ix_tomb, tombs);
  }
  __syncthreads();
  if (active)
    for (uint32_t i = threadIdx.x; i < EMC_HIST; i += blockDim.x)
      if (h[i]) atomicAdd(&V.hist[i], h[i]);
}

__global__ void k_ev_cut(const __grid_constant__ dview V) {
  dglob *g = V.g;
  ull acc = 0;
  uint32_t b;
  if (!g->pass_active) return;
  for (b = EMC_HIST; b-- > 0;) {
    if (acc + V.hist[b] >= g->need) break;
    acc += V.hist[b];
  }
  if (b >= EMC_HIST) b = 0;
  g->cut = b;               /* buckets > cut go whole; bucket cut while its share lasts */
  g->cut_need = g->need - acc;
}

/* What a sweep's thread evicted (added to the counters once, at its end). */
typedef struct ev_tally {
  ull freed, ev, wb, dirty_gone, live_gone, tombs;
} ev_tally;

/* Evict the live, unpinned pool entry at index slot i (key, lm), as a pass evicts it. */
__device__ void evict_slot(const dview &V, uint64_t i, uint64_t key, uint64_t lm, ev_tally *n) {
  dglob *g = V.g;
  const uint32_t loc = emc__lm_loc(lm), p = loc / V.max_slots, s = loc % V.max_slots;
  const uint32_t t = hdr_of(V, p)->table;
  const dtab *tb = &V.tabs[t];
  unsigned char *pg = page_of(V, p);
  int64_t row = -1;
  /* 1. a dirty row reaches the store before its entry goes */
  if (lm & EMC__LM_DIRTY) {
    uint64_t id = tb->L.off_owner ? *emc__slot_owner(pg, &tb->L, s) : emc__unmix(key & tb->code.fmask, tb->code.fbits);
    int64_t r = tb->kind == EMC_TABLE_DENSE ? (int64_t)id
                                            : emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id);
    wb_begin(V, key);
    if (r >= 0) emc__row_store(tb->base + (uint64_t)r * tb->stride, emc__slot_row(pg, &tb->L, s), tb->full_bytes);
    wb_end(V, key);
    n->wb++;
    n->dirty_gone++;
  }
  /* 2. the entry: a unified-index entry to the store row (hashed), or gone */
  if (tb->kind == EMC_TABLE_HASHED && V.unified_max > 0) {
    if (atomicAdd(&g->host_entries, 1ull) < V.unified_max) {
      row = emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, *emc__slot_owner(pg, &tb->L, s));
      if (row < 0 || (uint64_t)row > EMC__LOC_MAX || (uint64_t)row >= tb->code.rows) { /* (a
                                          shared segment's map written over: no entry) */
        row = -1;
        atomicAdd(&g->host_entries, ~0ull);
      }
    } else {
      atomicAdd(&g->host_entries, ~0ull);
    }
  }
  if (row >= 0) {
    uint32_t meta = atomicAdd(&g->meta_seq, EMC__META_STEP) + EMC__META_STEP;
    atomicExch((ull *)&V.ix.lm[i], (ull)emc__lm_make(EMC__LOC_HOST | (uint32_t)row, meta & ~EMC__META_FLAGS));
    __threadfence();
  } else {
    n->tombs += remove_entry(V, i);
    n->live_gone++;
  }
  /* 3. the slot is free */
  atomicOr((ull *)&emc__page_bitmap(pg, &tb->L)[s / 64], 1ull << (s % 64));
  atomicSub(&hdr_of(V, p)->live, 1u);
  atomicAdd(&V.ts[t].rows_cached, ~0ull);
  n->freed += tb->stride;
  n->ev++;
}

__device__ void tally_add(const dview &V, const ev_tally &n) {
  dglob *g = V.g;
  if (!n.ev) return;
  atomicAdd(&g->bytes_in_use, (ull)0 - n.freed);
  atomicAdd(&g->evictions, n.ev);
  if (n.wb) atomicAdd(&g->writebacks, n.wb);
  if (n.dirty_gone) atomicAdd(&g->dirty_rows, (ull)0 - n.dirty_gone);
  if (n.live_gone) atomicAdd(&g->ix_live, (ull)0 - n.live_gone);
  if (n.tombs) atomicAdd(&g->ix_tomb, n.tombs);
}

__global__ void __launch_bounds__(256) k_ev_sweep(const __grid_constant__ dview V) {
  dglob *g = V.g;
  const uint32_t now = g->clock, cut = g->cut;
  const ull cut_need = g->cut_need;
  ev_tally n = {0, 0, 0, 0, 0, 0};
  if (!g->pass_active) return;
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    uint64_t key = 0, lm = pool_entry(V, i, &key);
    uint32_t age, b;
    if (!lm) continue;
    age = emc__stamp_age(now, V.ix.stamps[i]);
    if (age == 0) continue; /* touched at this tick: stays */
    if (age > EMC__AGE_CLAMP) age = EMC__AGE_CLAMP;
    b = age_bucket(age);
    if (b < cut) continue;
    if (b == cut && atomicAdd(&g->cut_taken, (ull)V.tabs[hdr_of(V, emc__lm_loc(lm) / V.max_slots)->table].stride) >= cut_need) continue;
    evict_slot(V, i, key, lm, &n);
  }
  tally_add(V, n);
}

/* ---------------------------------------------------------------- reclaim
 * Pages belong to a table until they are empty, and a pass evicts rows in LRU order wherever
 * they lie: after passes under one table's load every page it holds may have free slots that
 * no other table can use, and another table's misses then find no page while the bytes in
 * use stay under t1, so no pass runs. A plan that runs out of pages says so (page_short); the
 * next writer call takes pages back, LRU by page, as the host backend does (lib/evict.c,
 * emc__reclaim_page): the n_pages / 64 pages (at least one) whose newest rows are oldest give
 * up their rows, evicted as a pass evicts them; pages with a pinned row or a row stamped at
 * this tick are not taken. The page stage that follows returns them to the free stack. A
 * reclaim that finds no page is not tried again until a pass ran or EMC_RECLAIM_RETRY ticks
 * went by (admit.cu, demand).
 *   young  a thread per index slot: each page's youngest age (atomicMin; page_young is all
 *          UINT32_MAX between reclaims: k_init, then k_rc_cut when it takes none, or the
 *          section's k_wr_end, which always runs, or closes the section later)
 *   cut    (1 block) a histogram of the pages' youngest ages in shared memory, the cut from the
 *          oldest bucket down, page_young becomes 1 for a page taken, 0 otherwise
 *   sweep  a thread per index slot: the rows of the pages taken */
__global__ void __launch_bounds__(256) k_rc_young(const __grid_constant__ dview V) {
  const uint32_t now = V.g->clock;
  if (!V.g->reclaim) return;
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    uint64_t k = ix_key(V.ix, i), lm;
    uint32_t age;
    if (k == emc__key_empty(V.key_bits) || k == emc__key_tomb(V.key_bits)) continue;
    lm = V.ix.lm[i];
    if (emc__lm_loc(lm) & EMC__LOC_HOST) continue;
    age = (lm & EMC__LM_PINS) ? 0u : emc__stamp_age(now, V.ix.stamps[i]);
    if (age > EMC__AGE_CLAMP) age = EMC__AGE_CLAMP;
    atomicMin(&V.page_young[emc__lm_loc(lm) / V.max_slots], age);
  }
}

__global__ void __launch_bounds__(EMC_WR_THREADS) k_rc_cut(const __grid_constant__ dview V) {
  __shared__ uint32_t h[EMC_HIST];
  __shared__ uint32_t s_cut, s_go;
  __shared__ ull s_from_cut, s_taken;
  dglob *g = V.g;
  if (!g->reclaim) return;
  for (uint32_t b = threadIdx.x; b < EMC_HIST; b += blockDim.x) h[b] = 0;
  __syncthreads();
  for (uint32_t p = threadIdx.x; p < V.n_pages; p += blockDim.x) {
    uint32_t y = V.page_young[p];
    if (y != 0xffffffffu && y != 0) atomicAdd(&h[age_bucket(y)], 1u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const ull want = V.n_pages / 64 ? V.n_pages / 64 : 1;
    ull acc = 0;
    uint32_t cut;
    for (cut = EMC_HIST; cut-- > 0;) {
      acc += h[cut];
      if (acc >= want) break;
    }
    if (cut >= EMC_HIST) cut = 0;
    s_cut = cut;
    s_from_cut = acc < want ? acc : want - (acc - h[cut]); /* what the older buckets leave */
    s_taken = 0;
    s_go = acc > 0;
    g->rc_failed_at = acc > 0 ? 0u : g->clock + 1u;
    g->rc_failed_passes = g->passes;
    if (!s_go) g->reclaim = 0; /* nothing to sweep */
  }
  __syncthreads();
  for (uint32_t p = threadIdx.x; p < V.n_pages; p += blockDim.x) {
    uint32_t y = V.page_young[p], take = 0, b;
    if (s_go && y != 0xffffffffu && y != 0) {
      b = age_bucket(y);
      take = b > s_cut || (b == s_cut && atomicAdd(&s_taken, 1ull) < s_from_cut);
    }
    V.page_young[p] = s_go ? take : 0xffffffffu; /* (none taken: as it was, all UINT32_MAX) */
  }
}

__global__ void __launch_bounds__(256) k_rc_sweep(const __grid_constant__ dview V) {
  ev_tally n = {0, 0, 0, 0, 0, 0};
  if (!V.g->reclaim) return;
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    uint64_t key = 0, lm = pool_entry(V, i, &key);
    if (lm && V.page_young[emc__lm_loc(lm) / V.max_slots]) evict_slot(V, i, key, lm, &n);
  }
  tally_add(V, n);
}

/* Empty pages back to the free stack; pages with free slots counted per table. */
__global__ void __launch_bounds__(256) k_ev_pages(const __grid_constant__ dview V) {
  if (!pages_on(V)) return;
  GRID_STRIDE(p, V.n_pages) {
    emc__page_hdr *h = hdr_of(V, p);
    uint32_t t = h->table;
    if (t == EMC__PAGE_NONE) continue;
    if (h->live == 0) {
      h->table = EMC__PAGE_NONE;
      h->gen++;
      V.free_pages[atomicAdd(&V.g->free_top, 1u)] = (uint32_t)p;
      atomicAdd(&V.g->pages_held, ~0ull);
    } else if (h->live < V.tabs[t].L.n_slots) {
      atomicAdd(&V.ts[t].pl_count, 1u);
    }
  }
}

/* Per-table segments of the page list (an exclusive scan of the counts); current pages go. */
__global__ void __launch_bounds__(EMC_WR_THREADS) k_ev_lists(const __grid_constant__ dview V) {
  if (!pages_on(V)) return;
  if (threadIdx.x == 0) V.g->stranded = 0; /* every page's free slots are on the list now */
  table_scan(V.n_tables, [&](uint32_t t) { return (ull)V.ts[t].pl_count; },
             [&](uint32_t t, ull prefix, ull count) {
               tstate *ts = &V.ts[t];
               ts->pl_start = (uint32_t)prefix;
               ts->pl_end = (uint32_t)(prefix + count);
               ts->pl_cursor = 0;
               ts->pl_fill = 0;
               ts->pl_count = 0;
               ts->cur_page = EMC_NONE32; /* its free slots are on the list now */
             });
  for (uint32_t i = threadIdx.x; i < EMC_HIST; i += blockDim.x) V.hist[i] = 0;
}

__global__ void __launch_bounds__(256) k_ev_scatter(const __grid_constant__ dview V) {
  if (!pages_on(V)) return;
  GRID_STRIDE(p, V.n_pages) {
    emc__page_hdr *h = hdr_of(V, p);
    uint32_t t = h->table;
    if (t == EMC__PAGE_NONE || h->live >= V.tabs[t].L.n_slots) continue;
    V.plist[V.ts[t].pl_start + atomicAdd(&V.ts[t].pl_fill, 1u)] = (uint32_t)p;
  }
}

cudaError_t emc__cu_evict(const emc__cuda_cache *k, cudaStream_t st) {
  const dview &V = *emc__cuda_view(k);
  uint64_t slots = V.ix.n_buckets * EMC__BUCKET;
  EMC_LAUNCH_OR_RETURN(k_ev_hist, grid_for(slots, 256), 256, st, V);
  EMC_LAUNCH_OR_RETURN(k_ev_cut, 1, 1, st, V);
  EMC_LAUNCH_OR_RETURN(k_ev_sweep, grid_for(slots, 256), 256, st, V);
  EMC_LAUNCH_OR_RETURN(k_rc_young, grid_for(slots, 256), 256, st, V);
  EMC_LAUNCH_OR_RETURN(k_rc_cut, 1, EMC_WR_THREADS, st, V);
  EMC_LAUNCH_OR_RETURN(k_rc_sweep, grid_for(slots, 256), 256, st, V);
  EMC_LAUNCH_OR_RETURN(k_ev_pages, grid_for(V.n_pages, 256), 256, st, V);
  EMC_LAUNCH_OR_RETURN(k_ev_lists, 1, EMC_WR_THREADS, st, V);
  EMC_LAUNCH_OR_RETURN(k_ev_scatter, grid_for(V.n_pages, 256), 256, st, V);
  return cudaSuccess;
}
