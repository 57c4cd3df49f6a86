/*
 * maint.cu: the maintenance stages of writer calls and their launchers:
 *   init     a new cache's index (every slot EMPTY with a free, BUSY entry word), pages and
 *            free page stack
 *   flush    a thread per index slot: dirty rows written back, DIRTY cleared (readers ignore
 *            the bit, so no fresh meta)
 *   repack   a bounded step of the in-place tombstone sweep (lib/emc_item.h,
 *            emc__index_repack): the re-pack epoch goes odd, the cluster starts of the step's
 *            EMC_REPACK_STEP buckets are marked before any moves, one thread re-packs each
 *            cluster in shared memory (clusters over EMC_REPACK_CLUSTER buckets are skipped),
 *            and the epoch goes even; lookups that probed meanwhile retry their misses
 * A write to the store (write-back, write-through) bumps the key's write-back cell first, so a
 * lookup that copied the row meanwhile sees the cell past its epoch and copies again.
 */
#include "dev.cuh"

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
  k_init<<<grid_for(V.ix.n_buckets * EMC__BUCKET, 256), 256, 0, st>>>(V);
  return cudaGetLastError();
}

/* ---------------------------------------------------------------- store writes */
/* A dirty slot's row and state back to its store row: the write-back cell first. */
__device__ void store_write(const dview &V, const dtab *tb, uint64_t key, uint64_t row,
                            const unsigned char *src) {
  atomicMax(&V.wb_cells[wb_cell(key)], V.g->wb_epoch + 1u);
  V.g->wrote_back = 1;
  __threadfence();
  emc__row_store(tb->base + row * tb->stride, src, tb->full_bytes);
  __threadfence_system();
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
  k_flush<<<grid_for(V.ix.n_buckets * EMC__BUCKET, 256), 256, 0, st>>>(V);
  return cudaGetLastError();
}

/* ---------------------------------------------------------------- repack */
__global__ void k_rp_begin(const __grid_constant__ dview V) {
  dglob *g = V.g;
  if (!g->repack_active) return;
  g->repack_epoch++; /* odd: misses probed from now on are retried */
  __threadfence();
}

/* Marks cluster starts among the step's buckets before anything moves: a bucket whose
 * predecessor holds an EMPTY slot. */
__global__ void __launch_bounds__(256) k_rp_mark(const __grid_constant__ dview V, uint8_t *start) {
  const uint64_t nb = V.ix.n_buckets, at = V.g->repack_at;
  if (!V.g->repack_active) return;
  GRID_STRIDE(j, (uint64_t)EMC_REPACK_STEP) {
    uint64_t b = (at + j) % nb, prev = (b + nb - 1) % nb, empty = emc__key_empty(V.key_bits);
    int e = 0;
    for (unsigned s = 0; s < EMC__BUCKET; s++) e |= ix_key(V.ix, prev * EMC__BUCKET + s) == empty;
    start[j] = (uint8_t)(e && j < nb);
  }
}

#define RP_THREADS 8
__global__ void __launch_bounds__(RP_THREADS) k_rp_do(const __grid_constant__ dview V, const uint8_t *start) {
  __shared__ uint64_t sk[RP_THREADS][EMC_REPACK_CLUSTER * EMC__BUCKET];
  __shared__ uint64_t sl[RP_THREADS][EMC_REPACK_CLUSTER * EMC__BUCKET];
  __shared__ uint16_t ss[RP_THREADS][EMC_REPACK_CLUSTER * EMC__BUCKET];
  const uint64_t nb = V.ix.n_buckets, at = V.g->repack_at;
  ull dropped = 0;
  if (!V.g->repack_active) return;
  GRID_STRIDE(j, (uint64_t)EMC_REPACK_STEP) {
    uint64_t b = (at + j) % nb, len;
    if (!start[j]) continue;
    len = emc__index_cluster_len(&V.ix, b, EMC_REPACK_CLUSTER);
    if (len == 0) continue;
    dropped += emc__index_repack(&V.ix, b, len, sk[threadIdx.x], sl[threadIdx.x], ss[threadIdx.x]);
  }
  if (dropped) atomicAdd(&V.g->ix_tomb, (ull)0 - dropped);
}

__global__ void k_rp_end(const __grid_constant__ dview V) {
  dglob *g = V.g;
  uint64_t step = EMC_REPACK_STEP < V.ix.n_buckets ? EMC_REPACK_STEP : V.ix.n_buckets;
  if (!g->repack_active) return;
  __threadfence();
  g->repack_epoch++; /* even again */
  g->repack_at = (g->repack_at + step) % V.ix.n_buckets;
  g->repack_left = g->repack_left > step ? g->repack_left - step : 0;
  if (g->repack_left == 0) g->repacks++;
  g->repack_active = 0;
}

cudaError_t emc__cu_repack(const emc__cuda_cache *k, cudaStream_t st) {
  const dview &V = *emc__cuda_view(k);
  k_rp_begin<<<1, 1, 0, st>>>(V);
  k_rp_mark<<<grid_for(EMC_REPACK_STEP, 256), 256, 0, st>>>(V, emc__cuda_repack_marks(k));
  k_rp_do<<<EMC_REPACK_STEP / RP_THREADS, RP_THREADS, 0, st>>>(V, emc__cuda_repack_marks(k));
  k_rp_end<<<1, 1, 0, st>>>(V);
  return cudaGetLastError();
}
