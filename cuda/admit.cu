/*
 * admit.cu: the admission stage of a writer call, the writer call's lock / demand / end
 * kernels, and their launchers.
 *
 * Writer calls (admission of a lookup's misses, insert, flush) run on the cache's writer
 * stream one after another (or inside a caller's captured graph, ordered with the writer
 * stream by events: streams.cu), beside any number of lookups. No kernel waits for another.
 * The sequence for a lookup's misses:
 *   begin    (1 thread) tick the clock, reset the call's state
 *   demand   (1 block) the call's demand (misses per table times their stride); decide on the
 *            device whether an eviction pass runs (bytes in use + demand > t1, or the stamps
 *            are due for aging), or else its page stage alone, to collect the free slots
 *            earlier calls were granted and left (g->stranded: granted by plan, less what
 *            publish took) once they add up to a page, or when the free page stack cannot
 *            hold the demand; and whether pages are taken back (an earlier plan ran out)
 *   evict    the pass, when decided, and the reclaim (evict.cu); their kernels return at once
 *            otherwise
 *   plan     (1 block) room below t1 shared between tables in table order by one block-wide
 *            scan (emc__plan_allow); per table, one thread grants slots from its pages with free
 *            slots, its current page and new pages from the free stack (grants: page, count,
 *            ranks)
 *   (repack) (1 block, maint.cu, 'pre') a sweep of the whole index, only when the entries the
 *            plan allows could leave EMPTY slots short
 *   pages    new pages get their table's free bitmap
 *   fill     a warp per miss granted a slot: skip it if its key is in the index now (cached by
 *            an earlier writer call, or another id's key; the slot stays free: stranded), else
 *            take the j-th free slot of its grant's page (a warp-wide bitmap search; the bitmap
 *            is not changed until publish, so the grant's misses take distinct slots) and copy
 *            the row into it: from the staging copy, or from the store when a write-back may
 *            have changed the row since the copy was read (its write-back cell). Inserts write
 *            the rows they cannot cache through to the store.
 *   publish  a thread per filled slot: claim an index slot (CAS on the key) and write the entry
 *            word, or turn the id's unified-index entry into a slot entry; then the slot leaves
 *            the page's bitmap and the counters move
 *   repack   (1 block, maint.cu) decides for itself whether a re-pack step of the index runs,
 *            or a sweep of the whole index (EMPTY slots short)
 *   end      (1 block) the scratch's per-table counters go back to zero, the miss-set epoch
 *            moves on
 * The rows being admitted are in slots no entry names until publish: no pass can evict them.
 */
#include "dev_cub.cuh"

/* ---------------------------------------------------------------- begin */
/* A writer call starts: the clock ticks, the call's state is reset (here, not by the previous
 * call's end: a call that failed half-enqueued leaves nothing behind). No lock: writer calls
 * are ordered by stream order and events (streams.cu, "Streams and ordering"); a device
 * lock spun on across streams, and could be left held by an error path (defects 3 and 4). */
__global__ void k_wr_begin(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  dglob *g = V.g;
  /* an ordering defect is counted (emc_flush reports it), not waited out */
  if (atomicExch(&g->writer_in, 1u) != 0u) atomicAdd(&g->overlaps, 1ull);
  g->clock++;
  g->n_grants = 0;
  g->n_new_pages = 0;
  g->pages_inited = 0;
  g->pass_active = 0;
  g->collect = 0;
  g->reclaim = 0;
  g->aging = 0;
  g->pf_new_n = 0;
  g->batch_bytes = 0;
}

__global__ void __launch_bounds__(EMC_WR_THREADS) k_wr_demand(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  dglob *g = V.g;
  __shared__ typename emc_block_reduce::TempStorage red;
  ull demand = 0, pages = 0;
  for (uint32_t t = threadIdx.x; t < V.n_tables; t += blockDim.x) {
    uint32_t need = C.need ? C.need[t] : 0, per = V.tabs[t].L.n_slots;
    V.ts[t].need = need;
    V.ts[t].allow = 0;
    V.ts[t].g_n = 0;
    demand += (ull)need * V.tabs[t].stride;
    pages += (need + per - 1u) / per;
  }
  demand = emc_block_reduce(red).Sum(demand);
  __syncthreads(); /* (the reduction's storage, used again) */
  pages = emc_block_reduce(red).Sum(pages);
  if (threadIdx.x == 0) {
    ull total = g->bytes_in_use + demand;
    g->pass_active = total > V.high;
    /* slots granted by earlier calls and left free (stranded), in pages a grant may never
     * offer again: collected by the pass's page stage alone (evict.cu) once they add up to a
     * page, so that they never spread over every page (a page's free slots serve its own
     * table only), and whenever the free stack could not hold the demand in new pages (the
     * misses would be skipped under t1 for good) */
    g->collect = !g->pass_active && g->stranded > 0 &&
                 (g->stranded >= V.page_bytes || g->free_top < pages);
    g->aging = g->clock - g->aged_at >= EMC__AGE_CLAMP / 2;
    g->need = g->pass_active ? min(total - V.low, g->bytes_in_use) : 0;
    g->cut_taken = 0;
    if (g->pass_active) g->passes++;
    /* an earlier plan ran out of pages: take some back (evict.cu, reclaim), unless this call
     * collects (the stranded slots may be all it lacked: a plan still short after it says
     * so again), or the last reclaim found none and neither a pass nor EMC_RECLAIM_RETRY
     * ticks went by since */
    if (g->page_short) {
      g->page_short = 0;
      g->reclaim = !g->collect && !(g->rc_failed_at != 0 && g->rc_failed_passes == g->passes &&
                                    g->clock - (g->rc_failed_at - 1u) < EMC_RECLAIM_RETRY);
    }
    /* (the re-pack sweep decides for itself, after this call's evictions and admissions:
     * maint.cu, k_repack) */
  }
}

/* ---------------------------------------------------------------- plan */
/* Thread t's grants for table t: its pages with free slots, its current page, new pages. */
__device__ void grant_table(const dview &V, const dcall &C, uint32_t t) {
  tstate *ts = &V.ts[t];
  const emc__page_layout *L = &V.tabs[t].L;
  uint32_t allow = ts->allow, r = 0, gi = 0;
  dgrant *out = C.grants + C.offsets[t] + 2u * t;
  while (r < allow && ts->pl_start + ts->pl_cursor < ts->pl_end) {
    uint32_t p = V.plist[ts->pl_start + ts->pl_cursor];
    emc__page_hdr *h = hdr_of(V, p);
    uint32_t freen = h->table == t ? L->n_slots - h->live : 0, take = min(freen, allow - r);
    if (take > 0) {
      out[gi].page = p;
      out[gi].count = take;
      out[gi].table = t;
      out[gi].rank = r;
      gi++;
      r += take;
    }
    if (take == freen) ts->pl_cursor++; /* used up (or no longer this table's) */
  }
  /* the current page's free slots, once granted, are gone for this call: its header's live
   * count only moves at publish, so it would offer the same slots again (defect 1 of the GPU
   * pre-flight review: several misses given one slot) */
  int cur_used = 0;
  while (r < allow) {
    uint32_t p = ts->cur_page, freen, take;
    if (p == EMC_NONE32 || cur_used || hdr_of(V, p)->live == L->n_slots) {
      uint32_t top = atomicSub(&V.g->free_top, 1u);
      emc__page_hdr *h;
      if (top == 0 || top > V.n_pages) { /* no free page left: the next call reclaims */
        atomicAdd(&V.g->free_top, 1u);
        V.g->page_short = 1u;
        break;
      }
      p = V.free_pages[top - 1u];
      h = hdr_of(V, p);
      h->table = t;
      h->n_slots = L->n_slots;
      h->live = 0;
      h->gen++;
      V.new_pages[atomicAdd(&V.g->n_new_pages, 1u)] = p;
      atomicAdd(&V.g->pages_held, 1ull);
      ts->cur_page = p;
      freen = L->n_slots;
    } else {
      freen = L->n_slots - hdr_of(V, p)->live;
    }
    take = min(freen, allow - r);
    out[gi].page = p;
    out[gi].count = take;
    out[gi].table = t;
    out[gi].rank = r;
    gi++;
    r += take;
    if (take < freen) break; /* enough */
    cur_used = 1;
  }
  ts->allow = r; /* fewer when the pages ran out */
  ts->g_first = C.offsets[t] + 2u * t;
  ts->g_n = gi;
}

__global__ void __launch_bounds__(EMC_WR_THREADS) k_plan(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  dglob *g = V.g;
  __shared__ typename emc_block_reduce::TempStorage red;
  const ull room = g->bytes_in_use < V.high ? V.high - g->bytes_in_use : 0;
  ull skipped = 0, granted = 0;
  /* allow_t = min(need_t, (room - prefix_t) / stride_t), prefix_t over the tables before t:
   * one block-wide scan */
  table_scan(V.n_tables, [&](uint32_t t) { return (ull)V.ts[t].need * V.tabs[t].stride; },
             [&](uint32_t t, ull prefix, ull) {
               V.ts[t].allow = emc__plan_allow(room, prefix, V.ts[t].need, V.tabs[t].stride);
             });
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < V.n_tables; t += blockDim.x) {
    if (V.ts[t].allow > 0) grant_table(V, C, t);
    skipped += V.ts[t].need - V.ts[t].allow;
    granted += (ull)V.ts[t].allow * V.tabs[t].stride;
  }
  skipped = emc_block_reduce(red).Sum(skipped);
  __syncthreads(); /* (the reduction's storage, used again) */
  granted = emc_block_reduce(red).Sum(granted);
  if (threadIdx.x == 0 && C.mode == EMC_MODE_LOOKUP && skipped) g->admit_skipped += skipped;
  if (threadIdx.x == 0 && C.mode == EMC_MODE_PREFETCH && skipped) g->pin_shortfall += skipped;
  /* stranded until publish takes them (a slot whose id was cached meanwhile stays free, and
   * so do all of a call that fails to enqueue its later kernels) */
  if (threadIdx.x == 0 && granted) g->stranded += granted;
}

/* New pages: every slot free. A block per page. A section whose k_page_init failed to
 * enqueue has its new pages initialized by its k_wr_end (they are the tables' current pages:
 * a later call would grant slots from a stale bitmap). */
__device__ void page_init(const dview &V, uint32_t p, uint32_t tid, uint32_t nthreads) {
  emc__page_hdr *h = hdr_of(V, p);
  const emc__page_layout *L = &V.tabs[h->table].L;
  uint64_t *bm = emc__page_bitmap(h, L);
  for (uint32_t w = tid; w < L->n_words; w += nthreads) {
    uint32_t lo = w * 64;
    bm[w] = L->n_slots >= lo + 64 ? ~0ull : (L->n_slots > lo ? (1ull << (L->n_slots - lo)) - 1u : 0ull);
  }
}

__global__ void __launch_bounds__(256) k_page_init(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  uint32_t np = V.g->n_new_pages;
  for (uint32_t i = blockIdx.x; i < np; i += gridDim.x) page_init(V, V.new_pages[i], threadIdx.x, blockDim.x);
  if (blockIdx.x == 0 && threadIdx.x == 0) V.g->pages_inited = 1u; /* read by k_wr_end, after */
}

/* ---------------------------------------------------------------- fill */
/* Write a row through to the store (inserts that get no slot), inside its write-back cell. */
__device__ void write_through(const dview &V, const dtab *tb, uint64_t key, uint64_t row,
                              const unsigned char *src, unsigned lane) {
  if (lane == 0) wb_begin(V, key);
  __syncwarp();
  warp_copy(tb->base + row * tb->stride, src, tb->full_bytes, lane); /* row and state */
  __threadfence_system();
  __syncwarp();
  if (lane == 0) wb_end(V, key);
}

/* The store row of (t, id): dense by address, hashed through the map; -1 when absent. */
__device__ __forceinline__ int64_t store_row(const dtab *tb, uint64_t id) {
  int64_t r;
  if (tb->kind == EMC_TABLE_DENSE) return (int64_t)id;
  r = emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id);
  return r >= 0 && (uint64_t)r < tb->code.rows ? r : -1; /* (a map written over: absent) */
}

__global__ void __launch_bounds__(256) k_admit_fill(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t n = C.offsets[V.n_tables];
  uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  for (uint64_t m = w; m < n; m += nw) {
    uint32_t t = table_of(C.offsets, V.n_tables, m), r = (uint32_t)(m - C.offsets[t]);
    const tstate *ts = &V.ts[t];
    const dtab *tb = &V.tabs[t];
    dmiss ms;
    uint64_t key;
    const unsigned char *src;
    int64_t pos, srow;
    int taken = 0;
    if (r >= ts->need) continue;
    ms = C.misses[m];
    key = emc__global_key(&tb->code, ms.id, V.hash_seed);
    /* lookups stage rows (row_bytes a position), update calls full rows (full_bytes a
     * position), prefetches nothing (the store row) */
    src = C.src + C.outoff[t] + (ms.pos - C.offsets[t]) * (C.mode == EMC_MODE_UPDATE ? tb->full_bytes : tb->row_bytes);
    if (lane == 0) C.slot_of[m] = EMC_NONE32;
    /* is the key in the index now? (writers are serialized: the answer holds) */
    pos = emc__index_find(&V.ix, key);
    if (pos >= 0) {
      uint64_t lm = V.ix.lm[pos];
      uint32_t loc = emc__lm_loc(lm);
      int mine;
      if (loc & EMC__LOC_HOST) {
        uint64_t row = loc & EMC__LOC_MAX;
        mine = row < tb->code.rows && tb->row_ids[row] == ms.id;
      } else if (tb->L.off_owner) {
        uint32_t pg = loc / V.max_slots, sl = loc % V.max_slots;
        mine = *emc__slot_owner(page_of(V, pg), &tb->L, sl) == ms.id;
      } else {
        mine = 1;
      }
      taken = !(mine && (loc & EMC__LOC_HOST)); /* cached already, or another id's key */
      if (taken && mine && C.mode == EMC_MODE_UPDATE) continue; /* (cannot happen, see below) */
    }
    if (!taken && r < ts->allow) {
      /* the grant holding rank r, and the slot: the (r - grant.rank)-th free bit of its page */
      uint32_t lo = 0, hi = ts->g_n, p, s;
      const dgrant *gr = C.grants + ts->g_first;
      int64_t sl;
      while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (gr[mid].rank <= r) lo = mid; else hi = mid;
      }
      p = gr[lo].page;
      sl = warp_bitmap_nth(emc__page_bitmap(page_of(V, p), &tb->L), tb->L.n_words, r - gr[lo].rank);
      if (sl >= 0) {
        unsigned char *pg = page_of(V, p), *dst;
        uint32_t bytes = tb->row_bytes;
        s = (uint32_t)sl;
        dst = emc__slot_row(pg, &tb->L, s);
        /* the row: the call's copy, unless a write-back may have changed it since a lookup
         * read it (or there is none): then the store row, with its state */
        if (C.mode == EMC_MODE_UPDATE) {
          bytes = tb->full_bytes;
        } else if (ms.wb == EMC_FROM_STORE || (ms.wb != EMC_NONE32 && ld_rlx(&V.wb_cells[wb_cell(key)]) != ms.wb)) {
          srow = store_row(tb, ms.id);
          if (srow >= 0) {
            src = tb->base + (uint64_t)srow * tb->stride;
            bytes = tb->full_bytes;
          }
        }
        warp_copy(dst, src, bytes, lane);
        if (bytes < tb->full_bytes && lane == 0) { /* a lookup's copy: the state from the store */
          srow = store_row(tb, ms.id);
          if (srow >= 0)
            *(uint32_t *)(dst + tb->state_off) =
                *(const volatile uint32_t *)(tb->base + (uint64_t)srow * tb->stride + tb->state_off);
        }
        if (lane == 0) {
          if (tb->L.off_owner) *emc__slot_owner(pg, &tb->L, s) = ms.id;
          C.slot_of[m] = p * V.max_slots + s;
        }
        continue;
      }
    }
    if (C.mode == EMC_MODE_PREFETCH && !taken && r < ts->allow && lane == 0)
      atomicAdd(&V.g->pin_shortfall, 1ull); /* granted, but the page had no free slot */
    /* not cached by this call: an insert's row goes through to the store (unless the index
     * holds this id's own slot, which cannot happen: inserts update those in place first) */
    if (C.mode == EMC_MODE_UPDATE) {
      srow = (int64_t)C.srows[ms.pos];
      if (srow >= 0) write_through(V, tb, key, (uint64_t)srow, src, lane);
    }
  }
}

/* ---------------------------------------------------------------- publish */
__global__ void __launch_bounds__(256) k_admit_publish(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const uint64_t n = C.offsets[V.n_tables];
  const uint32_t now = V.g->clock;
  const uint64_t empty = emc__key_empty(V.key_bits), tomb = emc__key_tomb(V.key_bits);
  ull admitted = 0, bytes = 0, dirty = 0, live = 0, tombs = 0, unified = 0, shortfall = 0;
  GRID_STRIDE(m, n) {
    uint32_t t = table_of(C.offsets, V.n_tables, m), r = (uint32_t)(m - C.offsets[t]), loc;
    const dtab *tb = &V.tabs[t];
    dmiss ms;
    uint64_t key, lm, b;
    int64_t pos;
    if (r >= V.ts[t].need || (loc = C.slot_of[m]) == EMC_NONE32) continue;
    ms = C.misses[m];
    key = emc__global_key(&tb->code, ms.id, V.hash_seed);
    /* a fresh meta for this write: the counter moves once per entry written, so it repeats
     * only after 2^26 writes, as the protocol says (it used to move by the batch's size
     * every call: defect 13 of the pre-flight review) */
    lm = emc__lm_make(loc, ((atomicAdd(&V.g->meta_seq, EMC__META_STEP) + EMC__META_STEP) & ~EMC__META_FLAGS) |
                               (C.mode == EMC_MODE_UPDATE ? EMC__META_DIRTY : 0u));
    if (C.mode == EMC_MODE_PREFETCH) { /* pinned while the budget lasts */
      ull b = atomicAdd(&V.g->pinned_bytes, (ull)tb->stride);
      if (b + tb->stride > V.low) {
        atomicAdd(&V.g->pinned_bytes, (ull)0 - tb->stride);
        shortfall++;
      } else {
        atomicAdd(&V.g->pinned_rows, 1ull);
        lm |= EMC__LM_PIN_ONE;
        V.ring_keys[(uint64_t)V.g->pin_next * V.ring_cap + atomicAdd(&V.g->pf_new_n, 1ull)] = key;
      }
    }
    pos = emc__index_find(&V.ix, key);
    __threadfence(); /* the row (filled by the previous kernel) before the entry word */
    if (pos >= 0) { /* the id's unified-index entry now points at the slot */
      V.ix.stamps[pos] = (uint16_t)now;
      atomicExch((ull *)&V.ix.lm[pos], (ull)lm);
      unified++;
    } else {
      /* claim the first free slot of the key's path: CAS on the key, then the entry word
       * (a free slot's lm is BUSY, so a reader that sees the key early rejects it) */
      b = emc__home_bucket(key, V.ix.n_buckets);
      for (uint64_t steps = 0; steps < V.ix.n_buckets && pos < 0; steps++) {
        for (unsigned s = 0; s < EMC__BUCKET && pos < 0; s++) {
          uint64_t i = b * EMC__BUCKET + s, v = ix_key(V.ix, i), old;
          if (v != empty && v != tomb) continue;
          if (V.key_bits == 32)
            old = atomicCAS((uint32_t *)V.ix.keys + i, (uint32_t)v, (uint32_t)key);
          else
            old = atomicCAS((ull *)V.ix.keys + i, (ull)v, (ull)key);
          if (old == v) {
            pos = (int64_t)i;
            tombs += v == tomb;
          }
        }
        if (++b == V.ix.n_buckets) b = 0;
      }
      if (pos < 0) continue; /* cannot happen: the index is sized for every live entry */
      V.ix.stamps[pos] = (uint16_t)now;
      __threadfence();
      atomicExch((ull *)&V.ix.lm[pos], (ull)lm);
      live++;
    }
    {
      uint32_t p = loc / V.max_slots, s = loc % V.max_slots;
      emc__page_hdr *h = hdr_of(V, p);
      atomicAnd((ull *)&emc__page_bitmap(h, &tb->L)[s / 64], ~(1ull << (s % 64)));
      atomicAdd(&h->live, 1u);
      atomicAdd(&V.ts[t].rows_cached, 1ull);
    }
    admitted++;
    bytes += tb->stride;
    dirty += C.mode == EMC_MODE_UPDATE;
  }
  if (shortfall) atomicAdd(&V.g->pin_shortfall, shortfall);
  if (admitted) {
    if (C.mode != EMC_MODE_UPDATE) atomicAdd(&V.g->admissions, admitted);
    atomicAdd(&V.g->bytes_in_use, bytes);
    atomicAdd(&V.g->stranded, (ull)0 - bytes); /* granted by k_plan */
    if (dirty) atomicAdd(&V.g->dirty_rows, dirty);
    if (live) atomicAdd(&V.g->ix_live, live);
    if (tombs) atomicAdd(&V.g->ix_tomb, (ull)0 - tombs);
    if (unified) atomicAdd(&V.g->host_entries, (ull)0 - unified);
  }
}

/* ---------------------------------------------------------------- end */
__global__ void __launch_bounds__(256) k_wr_end(const __grid_constant__ wr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  dglob *g = V.g;
  const uint32_t np = g->pages_inited ? 0u : g->n_new_pages;
  for (uint32_t i = 0; i < np; i++) page_init(V, V.new_pages[i], threadIdx.x, blockDim.x);
  /* a reclaim's marks (or its ages, when a kernel after it failed to enqueue) go: every page
   * back to UINT32_MAX for the next reclaim (evict.cu) */
  if (g->reclaim)
    for (uint32_t p = threadIdx.x; p < V.n_pages; p += blockDim.x) V.page_young[p] = 0xffffffffu;
  for (uint32_t t = threadIdx.x; t < V.n_tables; t += blockDim.x) {
    if (C.need) C.need[t] = 0;
    V.ts[t].need = 0;
    V.ts[t].allow = 0;
    V.ts[t].store_count += V.ts[t].new_rank; /* hashed rows the call added to the store */
    V.ts[t].new_rank = 0;
    V.ts[t].fresh = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    /* the next miss-set epoch */
    if (C.epoch) {
      uint32_t e = *C.epoch + 1u;
      *C.epoch = e ? e : 1u;
    }
    if (g->aging || g->pass_active) g->aged_at = g->clock;
    if (g->pf_open) { /* a prefetch's new ring list: the next prefetch releases the one after */
      V.ring_n[g->pin_next] = (uint32_t)g->pf_new_n;
      g->prefetched += g->pf_new_n;
      g->pin_next = (g->pin_next + 1u) % V.n_lists;
      g->pf_open = 0u;
      __threadfence_system();
      ((volatile ull *)V.bad_mirror)[2] = g->pin_shortfall;
    }
    atomicExch(&g->writer_in, 0u);
  }
}

/* ---------------------------------------------------------------- launchers */
static wr_args args_of(const emc__cuda_cache *k, const dcall *C) {
  wr_args A;
  A.V = *emc__cuda_view(k);
  A.C = *C;
  return A;
}

cudaError_t emc__cu_wr_begin(const emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  EMC_LAUNCH_OR_RETURN(k_wr_begin, 1, 1, st, args_of(k, C));
  return cudaSuccess;
}

cudaError_t emc__cu_wr_demand(const emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  EMC_LAUNCH_OR_RETURN(k_wr_demand, 1, EMC_WR_THREADS, st, args_of(k, C));
  return cudaSuccess;
}

cudaError_t emc__cu_admit(const emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  wr_args A = args_of(k, C);
  cudaError_t e;
  EMC_LAUNCH_OR_RETURN(k_plan, 1, EMC_WR_THREADS, st, A);
  if ((e = emc__cu_repack(k, 1, st)) != cudaSuccess) return e;
  EMC_LAUNCH_OR_RETURN(k_page_init, 64, 256, st, A);
  EMC_LAUNCH_OR_RETURN(k_admit_fill, grid_for(C->n * 32, 256), 256, st, A);
  EMC_LAUNCH_OR_RETURN(k_admit_publish, grid_for(C->n, 256), 256, st, A);
  return cudaSuccess;
}

cudaError_t emc__cu_wr_end(const emc__cuda_cache *k, const dcall *C, cudaStream_t st) {
  EMC_LAUNCH_OR_RETURN(k_wr_end, 1, 256, st, args_of(k, C));
  return cudaSuccess;
}
