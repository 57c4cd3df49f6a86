/*
 * train.cu: the training stages (emc_prefetch, emc_apply_gradients, emc_dedup, and emc_insert,
 * which shares the update path) and their launchers. Nothing here waits for the host: every
 * decision (dense ids in range, hashed capacity, the batch against the cache, pins against
 * their budget) is taken on the device, and a refused call changes nothing.
 *
 * On the caller's stream (the batch only, no cache state):
 *   prep     a thread per position: dense ids checked (a bad one refuses the call), the
 *            (id, position) pairs of every table laid out for the sort
 *   sort     CUB's segmented radix sort, one segment per table, by id (stable: a run of equal
 *            ids lists its positions in increasing order)
 *   heads    a thread per sorted index: 1 where a run of equal ids starts; an exclusive scan
 *            (CUB) numbers the runs; starts: each run's first sorted index
 *   dedup    emc_dedup only: 1 at each run's first position, a scan gives the unique index of
 *            every first occurrence (first-occurrence order), then inverse[] and the outputs
 * On the writer stream (a writer call: lock ... end, admit.cu), for update calls:
 *   resolve  a thread per run (distinct row): its store row (dense: the id; hashed: the map),
 *            new hashed ids counted per table, the batch's distinct slot bytes summed
 *   check    (1 block) hashed tables within capacity, the batch within t1 (apply): else the
 *            call is refused (status; the next emc_flush reports it)
 *   newrows  a warp per new hashed id: a store row from the table's free rows (rank by an
 *            atomic), filled (the insert's row, or zeros), its id, then the map slot: claimed
 *            in the device's bitmap of the map, the id written, a system fence, the row
 *            published (the store's map lives in host memory; while a cache is attached only
 *            the device adds to it, and the host's count follows at emc_flush)
 *   update   a warp per run: the merged gradient (positions in increasing order, f32,
 *            emc__grad_add / emc__grad_mean), then the step (emc__opt_step's arithmetic; Adagrad's
 *            sum of squares by one lane in element order, as the host does). A cached row is
 *            updated in place by the writer protocol (BUSY lm, row and state, fresh meta with
 *            DIRTY, pins kept); a missing row's new value (from its store row) is staged as a
 *            miss that admission caches dirty (or writes through); a key held by another id
 *            sends the row straight to the store. Inserts do the same with the caller's row of
 *            the run's last position (last wins), the state kept.
 * and for prefetch:
 *   release  a thread per key of the ring list this call refills (the call prefetch_depth + 1
 *            before): its entry's pin count goes down
 *   pin      a thread per run: a cached row is pinned (its count goes up; a count going from 0
 *            to 1 takes its stride from the budget t2 * capacity, or is given back: shortfall);
 *            a missing row with a store row is recorded as a miss that admission brings in from
 *            the store and pins (publish) while the budget lasts
 *   end      the list's length, the ring moves on, the shortfall mirrored to the host
 * Pins live in the entry word (meta PINS); evict.cu never evicts a pinned entry.
 */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "dev_cub.cuh"
#include "train.cuh"

/* ---------------------------------------------------------------- refusal */
/* Refuse the call (the first reason wins): its status and figures in the scratch (a blocking
 * call reads them back), and for an asynchronous call in the counters emc_flush reports. */
__device__ void tr_refuse(const tr_args &A, uint32_t code, uint32_t why, uint32_t table, ull a, ull b) {
  dglob *g = A.V.g;
  if (atomicCAS(A.C.status, 0u, code) != 0u) return;
  A.C.errinfo[0] = ((uint64_t)why << 32) | table;
  A.C.errinfo[1] = a;
  A.C.errinfo[2] = b;
  if (!A.report) return;
  if (atomicCAS(&g->err_code, 0u, code) == 0u) {
    g->err_table = table;
    g->err_why = why;
    g->err_a = a;
    g->err_b = b;
  }
  {
    ull n = atomicAdd(&g->call_errs, 1ull) + 1ull;
    __threadfence_system();
    ((volatile ull *)A.V.bad_mirror)[1] = n;
  }
}

__device__ __forceinline__ int tr_refused(const tr_args &A) { return *(volatile uint32_t *)A.C.status != 0u; }

/* ---------------------------------------------------------------- caller's stream */
__global__ void __launch_bounds__(256) k_tr_prep(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  GRID_STRIDE(p, A.n) {
    uint32_t t = table_of(C.offsets, V.n_tables, p);
    uint64_t id = A.ids[p];
    if (V.tabs[t].kind == EMC_TABLE_DENSE && id >= V.tabs[t].code.rows)
      tr_refuse(A, EMC_ERANGE, TR_WHY_DENSE, t, p, id);
    C.skeys[p] = id;
    C.svals[p] = (uint32_t)p;
  }
}

__global__ void __launch_bounds__(256) k_tr_heads(const __grid_constant__ tr_args A) {
  const dcall &C = A.C;
  GRID_STRIDE(i, A.n) {
    uint32_t t = table_of(C.offsets, A.V.n_tables, i);
    C.head[i] = i == C.offsets[t] || C.skeys_out[i] != C.skeys_out[i - 1];
  }
}

__global__ void __launch_bounds__(256) k_tr_starts(const __grid_constant__ tr_args A) {
  const dcall &C = A.C;
  GRID_STRIDE(i, A.n) {
    if (C.head[i]) C.run_start[C.runidx[i]] = (uint32_t)i;
    if (i == A.n - 1) {
      uint32_t runs = C.runidx[i] + C.head[i];
      *C.n_runs = runs;
      C.run_start[runs] = (uint32_t)A.n;
    }
  }
}

/* dedup: 1 at each run's first position (head was cleared) */
__global__ void __launch_bounds__(256) k_dd_first(const __grid_constant__ tr_args A) {
  const dcall &C = A.C;
  const uint32_t runs = *C.n_runs;
  GRID_STRIDE(r, (uint64_t)runs) C.head[C.svals_out[C.run_start[r]]] = 1u;
}

/* The run of sorted index i. runidx is the exclusive scan of the run heads: a head's own run,
 * but one more inside a run (that run's head is counted), so a sorted index that does not start
 * its run belongs to the run before (run_start[runs] is n, never i). */
__device__ __forceinline__ uint32_t run_of(const dcall &C, uint64_t i) {
  const uint32_t r = C.runidx[i];
  return C.run_start[r] == i ? r : r - 1u;
}

/* dedup outputs: uidx (in slot_of) is the exclusive scan of the first-position flags */
__global__ void __launch_bounds__(256) k_dd_out(const __grid_constant__ tr_args A) {
  const dcall &C = A.C;
  const uint32_t *uidx = C.slot_of;
  const uint32_t T = A.V.n_tables;
  if (tr_refused(A)) return;
  GRID_STRIDE(i, A.n) {
    uint32_t p = C.svals_out[i], fp = C.svals_out[C.run_start[run_of(C, i)]], u = uidx[fp];
    A.inv[p] = u;
    if (p == fp) A.uids[u] = C.skeys_out[i];
  }
  GRID_STRIDE(t, (uint64_t)T + 1u) {
    uint64_t o = C.offsets[t];
    A.uoffs[t] = A.n == 0 ? 0 : o < A.n ? uidx[o] : uidx[A.n - 1] + C.head[A.n - 1];
  }
}

/* ---------------------------------------------------------------- shared by the writer kernels */
__device__ __forceinline__ uint32_t run_table(const tr_args &A, uint32_t rs) {
  return table_of(A.C.offsets, A.V.n_tables, rs);
}
/* The position a run stands for: its last (insert: last wins) or its first. */
__device__ __forceinline__ uint32_t run_pos(const tr_args &A, uint32_t r) {
  const dcall &C = A.C;
  return A.op == TR_INSERT ? C.svals_out[C.run_start[r + 1] - 1u] : C.svals_out[C.run_start[r]];
}
/* Does the entry (lm) of table tb hold id? (hashed: the slot's owner or the unified entry's
 * store row id; dense: always) */
__device__ __forceinline__ int entry_owns(const dview &V, const dtab *tb, uint64_t lm, uint64_t id) {
  uint32_t loc = emc__lm_loc(lm);
  if (loc & EMC__LOC_HOST) {
    uint64_t row = loc & EMC__LOC_MAX;
    return row < tb->code.rows && tb->row_ids[row] == id;
  }
  return !tb->L.off_owner || *emc__slot_owner(page_of(V, loc / V.max_slots), &tb->L, loc % V.max_slots) == id;
}
/* Warp sum of v into *dst, one atomic per warp (all 32 lanes call it). */
__device__ __forceinline__ void warp_add(ull *dst, ull v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31u) == 0 && v) atomicAdd(dst, v);
}

/* ---------------------------------------------------------------- update: resolve, check */
__global__ void __launch_bounds__(256) k_tr_resolve(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const uint32_t runs = *C.n_runs;
  ull bytes = 0;
  if (tr_refused(A)) return;
  for (uint64_t r0 = (uint64_t)blockIdx.x * blockDim.x; r0 < runs; r0 += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t r = r0 + threadIdx.x;
    if (r < runs) {
      uint32_t rs = C.run_start[r], t = run_table(A, rs), q = run_pos(A, (uint32_t)r);
      const dtab *tb = &V.tabs[t];
      uint64_t id = C.skeys_out[rs];
      int64_t row = tb->kind == EMC_TABLE_DENSE ? (int64_t)id
                                                : emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id);
      C.srows[q] = row >= 0 ? (uint64_t)row : ~0ull;
      if (row < 0) atomicAdd(&V.ts[t].fresh, 1u);
      bytes += tb->stride;
    }
    warp_add(&V.g->batch_bytes, bytes);
    bytes = 0;
  }
}

__global__ void __launch_bounds__(256) k_tr_check(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  if (tr_refused(A)) return;
  for (uint32_t t = threadIdx.x; t < V.n_tables; t += blockDim.x) {
    const tstate *ts = &V.ts[t];
    ull cap = V.tabs[t].code.rows, used = ts->store_count;
    if (V.tabs[t].kind == EMC_TABLE_HASHED && ts->fresh > cap - used)
      tr_refuse(A, EMC_ERANGE, TR_WHY_HASHED, t, ts->fresh, cap - used);
  }
  if (threadIdx.x == 0 && A.op == TR_APPLY && V.g->batch_bytes > V.high)
    tr_refuse(A, EMC_ECAPACITY, TR_WHY_BATCH, 0, V.g->batch_bytes, V.high);
}

/* ---------------------------------------------------------------- update: new hashed rows */
__global__ void __launch_bounds__(256) k_tr_newrows(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const unsigned lane = threadIdx.x & 31u;
  const uint32_t runs = *C.n_runs;
  uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  if (tr_refused(A)) return;
  for (uint64_t r = w; r < runs; r += nw) {
    uint32_t rs = C.run_start[r], t = run_table(A, rs), q = run_pos(A, (uint32_t)r);
    const dtab *tb = &V.tabs[t];
    uint64_t id = C.skeys_out[rs], row = 0, i, mask = tb->map_cap - 1u;
    unsigned char *dst;
    if (C.srows[q] != ~0ull) continue;
    if (lane == 0) row = V.ts[t].store_count + atomicAdd(&V.ts[t].new_rank, 1ull);
    row = __shfl_sync(0xffffffffu, row, 0);
    dst = tb->base + row * tb->stride;
    /* the row: the insert's value (its state zero) or zeros; then its id */
    for (uint32_t b = lane * 4u; b < tb->full_bytes; b += 128u) *(uint32_t *)(dst + b) = 0u;
    __syncwarp();
    if (A.op == TR_INSERT)
      warp_copy(dst, A.rows + C.inoff[t] + (uint64_t)(q - C.offsets[t]) * tb->row_bytes, tb->row_bytes, lane);
    __threadfence_system(); /* every lane's part of the row before the map names it */
    __syncwarp();
    if (lane == 0) {
      ((volatile uint64_t *)tb->row_ids)[row] = id;
      __threadfence_system(); /* the row and its id before the map names them */
      for (i = emc__fmix64(id ^ 0x6a09e667f3bcc909ull) & mask;; i = (i + 1u) & mask) {
        uint32_t bit = 1u << (i % 32u);
        if (atomicOr(&tb->map_claim[i / 32u], bit) & bit) continue; /* taken */
        ((volatile uint64_t *)tb->map_ids)[i] = id;
        __threadfence_system();
        ((volatile uint64_t *)tb->map_rowp1)[i] = row + 1u;
        break;
      }
      C.srows[q] = row;
    }
  }
}

/* ---------------------------------------------------------------- update: the step */
/* The merged gradient of run r into gm (dim floats), lane-parallel over elements. */
__device__ void merge_grad(const tr_args &A, uint32_t r, uint32_t t, uint32_t dim, float *gm,
                           unsigned lane) {
  const dcall &C = A.C;
  const uint32_t rs = C.run_start[r], re = C.run_start[r + 1];
  const float *g0 = A.grads + C.inoff[t];
  for (uint32_t j = lane; j < dim; j += 32u) {
    float acc = g0[(uint64_t)(C.svals_out[rs] - C.offsets[t]) * dim + j];
    for (uint32_t k = rs + 1u; k < re; k++)
      acc = EMC_FADD(acc, g0[(uint64_t)(C.svals_out[k] - C.offsets[t]) * dim + j]);
    if (A.merge == EMC_MERGE_MEAN && re - rs > 1u) acc = EMC_FDIV(acc, (float)(re - rs));
    gm[j] = acc;
  }
  __syncwarp();
}

/* Adagrad's per-row factor: state' = state + sum_j(g_j^2) / dim (one lane, element order, as
 * emc__opt_step); returns (sqrt(init + state') + eps), broadcast; *state updated. */
__device__ float adagrad_denom(const tr_args &A, const float *gm, uint32_t dim, float *state,
                               unsigned lane) {
  float denom = 0.0f;
  if (lane == 0) {
    float sum = 0.0f;
    for (uint32_t j = 0; j < dim; j++) sum = EMC_FADD(sum, EMC_FMUL(gm[j], gm[j]));
    *state = EMC_FADD(*state, EMC_FDIV(sum, (float)dim));
    denom = EMC_FADD(EMC_FSQRT(EMC_FADD(A.init, *state)), A.eps);
  }
  *state = __shfl_sync(0xffffffffu, *state, 0);
  return __shfl_sync(0xffffffffu, denom, 0);
}

/* Element j's new value. */
__device__ __forceinline__ float step_elem(const tr_args &A, float w, float g, float denom) {
  if (A.kind == EMC_OPT_SGD) return EMC_FMAF(-A.lr, g, w);
  return EMC_FSUB(w, EMC_FDIV(EMC_FMUL(A.lr, g), denom));
}

/* Store element j of a row in place with a strong relaxed store (readers may be copying). */
__device__ __forceinline__ void st_elem(unsigned char *row, uint32_t dtype, uint32_t j, float f) {
  if (dtype == EMC_DTYPE_F32) st_rlx((uint32_t *)(row + 4u * j), __float_as_uint(f));
  else st_rlx((uint16_t *)(row + 2u * j), emc__f32_to_f16(f));
}

/* The new full row of a run that is not cached, into dst (full_bytes), from its store row. */
__device__ void new_full_row(const tr_args &A, uint32_t r, uint32_t t, uint32_t q, const dtab *tb,
                             const unsigned char *srow, unsigned char *dst, float *gm, unsigned lane) {
  const uint32_t dim = tb->dim;
  if (A.op == TR_INSERT) {
    warp_copy(dst, A.rows + A.C.inoff[t] + (uint64_t)(q - A.C.offsets[t]) * tb->row_bytes, tb->row_bytes, lane);
    if (tb->state != EMC_STATE_NONE && lane == 0)
      *(uint32_t *)(dst + tb->state_off) = *(const volatile uint32_t *)(srow + tb->state_off);
    __syncwarp();
    return;
  }
  {
    float state = 0.0f, denom = 0.0f;
    merge_grad(A, r, t, dim, gm, lane);
    if (tb->state != EMC_STATE_NONE) state = *(const volatile float *)(srow + tb->state_off);
    if (A.kind != EMC_OPT_SGD) denom = adagrad_denom(A, gm, dim, &state, lane);
    for (uint32_t j = lane; j < dim; j += 32u)
      emc__elem_set(dst, tb->dtype, j, step_elem(A, emc__elem_get(srow, tb->dtype, j), gm[j], denom));
    if (tb->state != EMC_STATE_NONE && lane == 0) *(float *)(dst + tb->state_off) = state;
    __syncwarp();
  }
}

/* A row straight to the store (a key held by another id), inside its write-back cell. */
__device__ void tr_store_write(const dview &V, const dtab *tb, uint64_t key, uint64_t row,
                               const unsigned char *src, uint32_t bytes, unsigned lane) {
  if (lane == 0) wb_begin(V, key);
  __syncwarp();
  warp_copy(tb->base + row * tb->stride, src, bytes, lane);
  __threadfence_system();
  __syncwarp();
  if (lane == 0) wb_end(V, key);
}

__global__ void __launch_bounds__(256) k_tr_update(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const unsigned lane = threadIdx.x & 31u;
  const uint32_t runs = *C.n_runs, set_epoch = *C.epoch;
  const uint16_t now = (uint16_t)V.g->clock;
  uint64_t w = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  ull dirty_new = 0, rows_done = 0;
  if (tr_refused(A)) return;
  for (uint64_t r = w; r < runs; r += nw) {
    uint32_t rs = C.run_start[r], t = run_table(A, rs), q = run_pos(A, (uint32_t)r);
    const dtab *tb = &V.tabs[t];
    const uint32_t dt = tb->dtype, dim = tb->dim;
    uint64_t id = C.skeys_out[rs], key = emc__global_key(&tb->code, id, V.hash_seed), lm = 0;
    uint64_t srow_i = C.srows[q];
    const unsigned char *srow = tb->base + srow_i * tb->stride;
    float *gm = A.op == TR_APPLY ? A.gm + C.inoff[t] + (uint64_t)(C.svals_out[rs] - C.offsets[t]) * dim : NULL;
    unsigned char *stg = C.staging + C.outoff[t] + (uint64_t)(q - C.offsets[t]) * tb->full_bytes;
    int64_t pos = -1;
    int own = 0, cached = 0;
    rows_done++;
    if (lane == 0) {
      pos = emc__index_find(&V.ix, key);
      if (pos >= 0) {
        lm = V.ix.lm[pos];
        own = entry_owns(V, tb, lm, id);
        cached = own && !(emc__lm_loc(lm) & EMC__LOC_HOST);
      }
    }
    pos = (int64_t)__shfl_sync(0xffffffffu, (unsigned long long)pos, 0);
    lm = __shfl_sync(0xffffffffu, lm, 0);
    own = __shfl_sync(0xffffffffu, own, 0);
    cached = __shfl_sync(0xffffffffu, cached, 0);
    if (cached) { /* in place, by the writer protocol */
      uint32_t loc = emc__lm_loc(lm);
      unsigned char *row = emc__slot_row(page_of(V, loc / V.max_slots), &tb->L, loc % V.max_slots);
      float state = 0.0f, denom = 0.0f;
      uint32_t meta = 0;
      if (A.op == TR_APPLY) {
        merge_grad(A, (uint32_t)r, t, dim, gm, lane);
        if (tb->state != EMC_STATE_NONE) state = *(const float *)(row + tb->state_off);
        if (A.kind != EMC_OPT_SGD) denom = adagrad_denom(A, gm, dim, &state, lane);
      }
      if (lane == 0) {
        meta = atomicAdd(&V.g->meta_seq, EMC__META_STEP) + EMC__META_STEP;
        atomicExch((ull *)&V.ix.lm[pos], (ull)(lm | EMC__LM_BUSY));
      }
      /* every lane's stores after the BUSY word and before the fresh one, at GPU scope: a
       * fence in each lane on both sides of the warp barriers (cumulativity carries lane 0's
       * BUSY store to the other lanes' stores) */
      __syncwarp();
      __threadfence();
      if (A.op == TR_APPLY) {
        for (uint32_t j = lane; j < dim; j += 32u)
          st_elem(row, dt, j, step_elem(A, emc__elem_get(row, dt, j), gm[j], denom));
        if (tb->state != EMC_STATE_NONE && lane == 0)
          st_rlx((uint32_t *)(row + tb->state_off), __float_as_uint(state));
      } else {
        const unsigned char *src = A.rows + C.inoff[t] + (uint64_t)(q - C.offsets[t]) * tb->row_bytes;
        for (uint32_t b = lane * 2u; b < tb->row_bytes; b += 64u)
          st_rlx((uint16_t *)(row + b), *(const uint16_t *)(src + b));
      }
      __threadfence();
      __syncwarp();
      if (lane == 0) {
        V.ix.stamps[pos] = now;
        __threadfence();
        atomicExch((ull *)&V.ix.lm[pos],
                   (ull)emc__lm_make(loc, (meta & ~EMC__META_FLAGS) | EMC__META_DIRTY |
                                              (emc__lm_meta(lm) & EMC__META_PINS)));
        dirty_new += !(lm & EMC__LM_DIRTY);
      }
      continue;
    }
    /* not cached: the new value from the store row */
    new_full_row(A, (uint32_t)r, t, q, tb, srow, stg, gm, lane);
    if (pos >= 0 && !own) { /* another id's key: this id is never cached */
      tr_store_write(V, tb, key, srow_i, stg, tb->full_bytes, lane);
      continue;
    }
    {
      int first = 0;
      if (lane == 0) first = emc__missset_insert(C.missset, C.set_mask, set_epoch, key, V.key_bits);
      first = __shfl_sync(0xffffffffu, first, 0);
      if (!first) { /* a key (or fingerprint) another id of the call took: to the store */
        tr_store_write(V, tb, key, srow_i, stg, tb->full_bytes, lane);
        continue;
      }
      if (lane == 0) {
        uint32_t rank = atomicAdd(&C.need[t], 1u);
        dmiss m;
        m.id = id;
        m.pos = q;
        m.wb = EMC_NONE32;
        C.misses[C.offsets[t] + rank] = m;
      }
    }
  }
  if (lane == 0) {
    if (dirty_new) atomicAdd(&V.g->dirty_rows, dirty_new);
    if (A.op == TR_APPLY && rows_done) atomicAdd(&V.g->grad_rows, rows_done);
  }
}

/* ---------------------------------------------------------------- prefetch */
/* Pin the pool entry at pos (a thread): count up; from 0, the stride from the budget. Returns
 * 1 when pinned, 0 when the budget had no room (the count is back). */
__device__ int pin_entry(const dview &V, int64_t pos, uint32_t stride) {
  ull old = atomicAdd((ull *)&V.ix.lm[pos], (ull)EMC__LM_PIN_ONE);
  if (emc__lm_pins(old) == 0) {
    ull b = atomicAdd(&V.g->pinned_bytes, (ull)stride);
    if (b + stride > V.low) {
      atomicAdd(&V.g->pinned_bytes, (ull)0 - stride);
      atomicAdd((ull *)&V.ix.lm[pos], (ull)0 - (ull)EMC__LM_PIN_ONE);
      return 0;
    }
    atomicAdd(&V.g->pinned_rows, 1ull);
  }
  return 1;
}

__device__ __forceinline__ void ring_push(const dview &V, uint64_t key) {
  ull i = atomicAdd(&V.g->pf_new_n, 1ull);
  V.ring_keys[(uint64_t)V.g->pin_next * V.ring_cap + i] = key;
}

__global__ void __launch_bounds__(256) k_pf_release(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const uint32_t list = V.g->pin_next, n = V.ring_n[list];
  if (tr_refused(A)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0) V.g->pf_open = 1u; /* k_wr_end closes the list */
  GRID_STRIDE(i, (uint64_t)n) {
    uint64_t key = V.ring_keys[(uint64_t)list * V.ring_cap + i];
    int64_t pos = emc__index_find(&V.ix, key);
    uint64_t lm;
    if (pos < 0) continue; /* cannot happen: pinned entries stay */
    lm = V.ix.lm[pos];
    if (emc__lm_loc(lm) & EMC__LOC_HOST) continue;
    {
      ull old = atomicAdd((ull *)&V.ix.lm[pos], (ull)0 - (ull)EMC__LM_PIN_ONE);
      if (emc__lm_pins(old) == 1) {
        uint32_t t = hdr_of(V, emc__lm_loc(old) / V.max_slots)->table;
        atomicAdd(&V.g->pinned_bytes, (ull)0 - V.tabs[t].stride);
        atomicAdd(&V.g->pinned_rows, ~0ull);
      }
    }
  }
}

__global__ void __launch_bounds__(256) k_pf_pin(const __grid_constant__ tr_args A) {
  const dview &V = A.V;
  const dcall &C = A.C;
  const uint32_t runs = *C.n_runs, set_epoch = *C.epoch;
  const uint16_t now = (uint16_t)V.g->clock;
  ull shortfall = 0;
  if (tr_refused(A)) return;
  GRID_STRIDE(r, (uint64_t)runs) {
    uint32_t rs = C.run_start[r], t = run_table(A, rs);
    const dtab *tb = &V.tabs[t];
    uint64_t id = C.skeys_out[rs], key = emc__global_key(&tb->code, id, V.hash_seed);
    int64_t pos = emc__index_find(&V.ix, key);
    if (pos >= 0) {
      uint64_t lm = V.ix.lm[pos];
      if (!entry_owns(V, tb, lm, id)) continue; /* another id's key: read from the store */
      if (!(emc__lm_loc(lm) & EMC__LOC_HOST)) {  /* cached: pin it */
        V.ix.stamps[pos] = now;
        if (pin_entry(V, pos, tb->stride)) ring_push(V, key);
        else shortfall++;
        continue;
      }
    } else if (tb->kind == EMC_TABLE_HASHED &&
               emc__map_find(tb->map_ids, tb->map_rowp1, tb->map_cap, id) < 0) {
      continue; /* absent: reads as zeros, nothing to pin */
    }
    if (!emc__missset_insert(C.missset, C.set_mask, set_epoch, key, V.key_bits)) {
      shortfall++; /* a fingerprint another key of the call took: not brought in */
      continue;
    }
    {
      uint32_t rank = atomicAdd(&C.need[t], 1u);
      dmiss m;
      m.id = id;
      m.pos = rs;
      m.wb = EMC_FROM_STORE;
      C.misses[C.offsets[t] + rank] = m;
    }
  }
  if (shortfall) atomicAdd(&V.g->pin_shortfall, shortfall);
}

/* ---------------------------------------------------------------- launchers */
/* CUB's temporary bytes for m positions in T segments (sort, then scans, reuse one buffer). */
size_t emc__cu_train_tmp_bytes(uint64_t m, uint32_t T) {
  size_t a = 0, b = 0;
  cub::DeviceSegmentedRadixSort::SortPairs(NULL, a, (const uint64_t *)NULL, (uint64_t *)NULL,
                                           (const uint32_t *)NULL, (uint32_t *)NULL, (int)m,
                                           (int)T, (const uint64_t *)NULL, (const uint64_t *)NULL);
  cub::DeviceScan::ExclusiveSum(NULL, b, (const uint32_t *)NULL, (uint32_t *)NULL, (int)m);
  return a > b ? a : b;
}

/* The batch sorted into runs (caller's stream). */
cudaError_t emc__cu_train_runs(const tr_args *A, cudaStream_t st) {
  const dcall &C = A->C;
  size_t tmp = C.cub_bytes;
  cudaError_t e;
  if ((e = cudaMemsetAsync(C.status, 0, 4, st)) != cudaSuccess) return e;
  if (A->n == 0) return cudaMemsetAsync(C.n_runs, 0, 4, st);
  EMC_LAUNCH_OR_RETURN(k_tr_prep, grid_for(A->n, 256), 256, st, *A);
  e = cub::DeviceSegmentedRadixSort::SortPairs(C.cub_tmp, tmp, C.skeys, C.skeys_out, C.svals, C.svals_out,
                                               (int)A->n, (int)A->V.n_tables, C.offsets, C.offsets + 1,
                                               0, 64, st);
  if (e != cudaSuccess) return e;
  EMC_LAUNCH_OR_RETURN(k_tr_heads, grid_for(A->n, 256), 256, st, *A);
  tmp = C.cub_bytes;
  e = cub::DeviceScan::ExclusiveSum(C.cub_tmp, tmp, C.head, C.runidx, (int)A->n, st);
  if (e != cudaSuccess) return e;
  EMC_LAUNCH_OR_RETURN(k_tr_starts, grid_for(A->n, 256), 256, st, *A);
  return cudaSuccess;
}

cudaError_t emc__cu_dedup_out(const tr_args *A, cudaStream_t st) {
  const dcall &C = A->C;
  size_t tmp = C.cub_bytes;
  cudaError_t e;
  if (A->n == 0) {
    EMC_LAUNCH_OR_RETURN(k_dd_out, 1, 256, st, *A);
    return cudaSuccess;
  }
  if ((e = cudaMemsetAsync(C.head, 0, A->n * 4, st)) != cudaSuccess) return e;
  EMC_LAUNCH_OR_RETURN(k_dd_first, grid_for(A->n, 256), 256, st, *A);
  e = cub::DeviceScan::ExclusiveSum(C.cub_tmp, tmp, C.head, C.slot_of, (int)A->n, st);
  if (e != cudaSuccess) return e;
  EMC_LAUNCH_OR_RETURN(k_dd_out, grid_for(A->n, 256), 256, st, *A);
  return cudaSuccess;
}

/* The update call's first writer stages (after lock): resolve, check, new rows, update. */
cudaError_t emc__cu_train_update(const tr_args *A, cudaStream_t st) {
  if (A->n == 0) return cudaSuccess;
  EMC_LAUNCH_OR_RETURN(k_tr_resolve, grid_for(A->n, 256), 256, st, *A);
  EMC_LAUNCH_OR_RETURN(k_tr_check, 1, 256, st, *A);
  EMC_LAUNCH_OR_RETURN(k_tr_newrows, grid_for(A->n * 32, 256), 256, st, *A);
  EMC_LAUNCH_OR_RETURN(k_tr_update, grid_for(A->n * 32, 256), 256, st, *A);
  return cudaSuccess;
}

cudaError_t emc__cu_prefetch_pin(const tr_args *A, cudaStream_t st) {
  EMC_LAUNCH_OR_RETURN(k_pf_release, grid_for(A->V.ring_cap ? A->V.ring_cap : 1, 256), 256, st, *A);
  if (A->n > 0) EMC_LAUNCH_OR_RETURN(k_pf_pin, grid_for(A->n, 256), 256, st, *A);
  return cudaSuccess;
}

/* A hashed map's used slots as claim bits (cache create: the host filled the map). */
__global__ void __launch_bounds__(256) k_claim_init(uint32_t *bits, const uint64_t *rowp1, uint64_t cap) {
  GRID_STRIDE(w, cap / 32 + 1) {
    uint32_t v = 0;
    for (uint32_t b = 0; b < 32; b++) {
      uint64_t i = w * 32 + b;
      if (i < cap && ld_rlx(&rowp1[i]) != 0) v |= 1u << b;
    }
    bits[w] = v;
  }
}

cudaError_t emc__cu_claim_init(uint32_t *bits, const uint64_t *rowp1, uint64_t cap, cudaStream_t st) {
  EMC_LAUNCH_OR_RETURN(k_claim_init, grid_for(cap / 32 + 1, 256), 256, st, bits, rowp1, cap);
  return cudaSuccess;
}
