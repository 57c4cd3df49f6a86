/*
 * maint.cu: the maintenance stages of writer calls and their launchers:
 *   init     a new cache's index (every slot EMPTY with a free, BUSY entry word), pages and
 *            free page stack
 *   flush    a thread per index slot: dirty rows written back, DIRTY cleared (readers ignore
 *            the bit, so no fresh meta)
 *   repack   the in-place tombstone sweep (lib/emc_item.h, emc__index_repack): a bounded
 *            step per writer call, the whole index when EMPTY slots run short; one kernel of
 *            one block whose re-pack epoch is odd while entries move (lookups that probed
 *            meanwhile retry their misses); see k_repack
 * A write to the store (write-back, write-through) holds the key's write-back cell (dev.cuh,
 * wb_begin), so a lookup that copied the row meanwhile sees the cell move and copies again.
 */
#include "dev.cuh"

#define RP_THREADS 1024 /* threads of the re-pack block (one SM holds them: 55 registers each on sm_90) */

/* ---------------------------------------------------------------- init */
__global__ void k_init(const __grid_constant__ dview V) {
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    if (V.key_bits == 32) ((uint32_t *)V.ix.keys)[i] = 0xffffffffu;
    else ((uint64_t *)V.ix.keys)[i] = ~0ull;
    V.ix.lm[i] = EMC__LM_FREE;
    V.ix.stamps[i] = 0;
  }
  GRID_STRIDE(p, V.n_pages) {
    emc__page_hdr *h = hdr_of(V, p);
    V.page_young[p] = 0xffffffffu; /* (evict.cu, reclaim) */
    memset(h, 0, sizeof *h);
    h->table = EMC__PAGE_NONE;
    V.free_pages[p] = V.n_pages - 1u - (uint32_t)p; /* page 0 on top */
  }
  GRID_STRIDE(t, V.n_tables) {
    tstate *ts = &V.ts[t];
    memset(ts, 0, sizeof *ts);
    ts->cur_page = EMC_NONE32;
  }
  GRID_STRIDE(c, EMC_WB_CELLS) V.wb_cells[c] = 0;
  GRID_STRIDE(h, EMC_HIST) V.hist[h] = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) V.g->free_top = V.n_pages;
}

cudaError_t emc__cu_init(const emc__cuda_cache *k, cudaStream_t st) {
  const dview &V = *emc__cuda_view(k);
  EMC_LAUNCH_OR_RETURN(k_init, grid_for(V.ix.n_buckets * EMC__BUCKET, 256), 256, st, V);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- store writes */
/* A dirty slot's row and state back to its store row, inside its write-back cell. */
__device__ void store_write(const dview &V, const dtab *tb, uint64_t key, uint64_t row,
                            const unsigned char *src) {
  wb_begin(V, key);
  emc__row_store(tb->base + row * tb->stride, src, tb->full_bytes);
  wb_end(V, key);
}

/* ---------------------------------------------------------------- flush */
__global__ void __launch_bounds__(256) k_flush(const __grid_constant__ dview V) {
  ull wb = 0;
  GRID_STRIDE(i, V.ix.n_buckets * EMC__BUCKET) {
    uint64_t k = ix_key(V.ix, i), lm;
    uint32_t loc, p, s;
    const dtab *tb;
    unsigned char *pg;
    uint64_t id;
    int64_t r;
    if (k == emc__key_empty(V.key_bits) || k == emc__key_tomb(V.key_bits)) continue;
    lm = V.ix.lm[i];
    loc = emc__lm_loc(lm);
    if (!(lm & EMC__LM_DIRTY) || (loc & EMC__LOC_HOST)) continue;
    p = loc / V.max_slots;
    s = loc % V.max_slots;
    tb = &V.tabs[hdr_of(V, p)->table];
    pg = page_of(V, p);
    id = tb->L.off_owner ? *emc__slot_owner(pg, &tb->L, s) : emc__unmix(k & tb->code.fmask, tb->code.fbits);
    r = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id);
    if (r >= 0) store_write(V, tb, k, (uint64_t)r, emc__slot_row(pg, &tb->L, s));
    atomicAnd((ull *)&V.ix.lm[i], ~(ull)EMC__LM_DIRTY);
    wb++;
  }
  if (wb) {
    atomicAdd(&V.g->writebacks, wb);
    atomicAdd(&V.g->dirty_rows, (ull)0 - wb);
  }
}

cudaError_t emc__cu_flush(const emc__cuda_cache *k, cudaStream_t st) {
  const dview &V = *emc__cuda_view(k);
  EMC_LAUNCH_OR_RETURN(k_flush, grid_for(V.ix.n_buckets * EMC__BUCKET, 256), 256, st, V);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- repack
 * One kernel, one block, run twice in a writer call that admits: after its plan ('pre') and as
 * its last stage. It decides first, from the counters as the stages before it left them, on
 * the host backend's thresholds (lib/index.c, emc__hix_maintain, which checks them before
 * every insert and grows its step with the inserts; here a step is EMC_REPACK_STEP buckets):
 *   start   a sweep of the whole index starts when tombstones pass 1/32 of its slots;
 *   urgent  when EMPTY slots are under 1/64 of the slots (tombstones and live entries took the
 *           rest), this call sweeps the whole index, not one step: a probe for an absent key
 *           walks its cluster up to the first bucket with an EMPTY slot, so an index short of
 *           them makes every miss walk far (the first GPU run: every lookup with misses slowed
 *           to milliseconds, bench/GPU_RESULTS.md);
 *   pre     before the admissions only the urgent sweep runs, counting the entries the plan
 *           allows as taken: an index without any EMPTY slot has no cluster start, and no
 *           re-pack could mend it.
 * Then, EMC_REPACK_STEP buckets at a time: the step's epoch goes odd, the cluster starts among
 * the buckets are marked before anything moves, each thread re-packs the clusters that start
 * at its marks (emc_item.h, emc__index_repack), each in a span of the block's scratch sized
 * to it (EMC_REPACK_LONG buckets in all, claimed in rounds until every cluster had one;
 * longer clusters stay as they are), and the epoch goes even, all inside the block. Clusters
 * never overlap (each ends at the first bucket with an EMPTY slot, which keeps one after a
 * re-pack), and marks are taken afresh after each chunk's moves. A lookup that probes
 * meanwhile and misses waits for this block, a running kernel that finishes without waiting:
 * the forward-progress rule. (The step used to open the epoch in one kernel and close it three
 * kernels later: a lookup could spin on it for good, since CUDA guarantees no progress between
 * kernels: defect 2.) */
#define RP_SPAN ((uint64_t)EMC_REPACK_LONG * EMC__BUCKET) /* scratch entries */
__global__ void __launch_bounds__(RP_THREADS) k_repack(const __grid_constant__ dview V, uint8_t *start,
                                                       uint64_t *scratch, int pre) {
  __shared__ ull dropped_all, s_step, s_used;
  __shared__ int s_more;
  const uint64_t nb = V.ix.n_buckets, slots = nb * EMC__BUCKET;
  const uint64_t at = V.g->repack_at;
  const uint64_t empty = emc__key_empty(V.key_bits);
  ull dropped = 0, step, done;
  if (threadIdx.x == 0) {
    dglob *g = V.g;
    const ull tomb = g->ix_tomb, live = g->ix_live, n_empty = slots - live - tomb;
    ull admits = 0;
    int urgent;
    if (pre) /* before the admissions: the entries they may add could take the EMPTY slots */
      for (uint32_t t = 0; t < V.n_tables; t++) admits += V.ts[t].allow;
    urgent = tomb > 0 && n_empty < slots / 64 + admits;
    if (g->repack_left == 0 && (urgent || (!pre && tomb > slots / 32))) g->repack_left = nb;
    s_step = g->repack_left == 0 || (pre && !urgent) ? 0
             : urgent                                ? nb
             : EMC_REPACK_STEP < nb                  ? EMC_REPACK_STEP
                                                     : nb;
    dropped_all = 0;
    if (s_step) {
      g->repack_epoch++; /* odd: misses probed from now on are retried */
      __threadfence();
    }
  }
  __syncthreads();
  step = s_step;
  if (step == 0) return;
  for (done = 0; done < step; done += EMC_REPACK_STEP) {
    const uint64_t chunk = step - done < EMC_REPACK_STEP ? step - done : EMC_REPACK_STEP;
    for (uint64_t j = threadIdx.x; j < chunk; j += blockDim.x) {
      uint64_t b = (at + done + j) % nb, prev = (b + nb - 1) % nb;
      int e = 0;
      for (unsigned s = 0; s < EMC__BUCKET; s++) e |= ix_key(V.ix, prev * EMC__BUCKET + s) == empty;
      start[j] = (uint8_t)e;
    }
    /* rounds: each cluster takes a span of the scratch sized to it; one that does not fit
     * waits for the next round (a round's first span always fits: a cluster is at most
     * EMC_REPACK_LONG buckets; a longer one stays as it is) */
    for (;;) {
      __syncthreads(); /* the marks are in; every thread has read s_more */
      if (threadIdx.x == 0) {
        s_used = 0;
        s_more = 0;
      }
      __syncthreads();
      for (uint64_t j = threadIdx.x; j < chunk; j += blockDim.x) {
        uint64_t b = (at + done + j) % nb, len, n, off;
        if (!start[j]) continue;
        len = emc__index_cluster_len(&V.ix, b, EMC_REPACK_LONG);
        if (len == 0) { /* longer than the whole scratch */
          start[j] = 0;
          continue;
        }
        n = len * EMC__BUCKET;
        off = atomicAdd(&s_used, (ull)n);
        if (off + n > RP_SPAN) {
          s_more = 1;
          continue;
        }
        start[j] = 0;
        dropped += emc__index_repack(&V.ix, b, len, scratch + off, scratch + RP_SPAN + off,
                                     (uint16_t *)(scratch + 2 * RP_SPAN) + off);
      }
      __syncthreads();
      if (!s_more) break; /* (uniform: read after the barrier, written before it) */
    }
  }
  if (dropped) atomicAdd(&dropped_all, dropped);
  __syncthreads();
  if (threadIdx.x == 0) {
    dglob *g = V.g;
    if (dropped_all) g->ix_tomb -= dropped_all;
    __threadfence();
    g->repack_epoch++; /* even again */
    g->repack_at = (at + step) % nb;
    g->repack_left = g->repack_left > step ? g->repack_left - step : 0;
    if (g->repack_left == 0) g->repacks++;
  }
}

cudaError_t emc__cu_repack(const emc__cuda_cache *k, int pre, cudaStream_t st) {
  const dview &V = *emc__cuda_view(k);
  EMC_LAUNCH_OR_RETURN(k_repack, 1, RP_THREADS, st, V, emc__cuda_repack_marks(k), emc__cuda_repack_scratch(k), pre);
  return cudaSuccess;
}
