/*
 * test_sim_threads.cu: the model's rules for the threads of a block (cuda/sim/README.md,
 * "Threads"): __syncthreads, the warp collectives with the device's results, their faults, and
 * __shared__ memory (per block, poisoned at every block start).
 *
 * For every rule a kernel that keeps it (the device's result) and one that breaks it (the
 * documented outcome: a fault with its one-line report, or the poison a racy read sees).
 */
#include "cudasim_test.h"

#define FULL 0xffffffffu

/* ================================================================ __syncthreads */

/* Every thread writes its slot, waits, reads its neighbour's (keep: after the barrier). */
__global__ void k_rotate_sync(unsigned *out) {
  __shared__ unsigned s[256];
  unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = blockIdx.x * 1000u + t * 3u + 1u;
  __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 1) % n];
}

/* The same without the barrier (break): a thread whose neighbour has not run yet reads the
 * neighbour's slot as the block started: poisoned. */
__global__ void k_rotate_nosync(unsigned *out) {
  __shared__ unsigned s[256];
  unsigned t = threadIdx.x, n = blockDim.x;
  s[t] = blockIdx.x * 1000u + t * 3u + 1u;
  out[blockIdx.x * n + t] = s[(t + 1) % n];
}

START_TEST(syncthreads_orders_shared_memory) {
  const unsigned blocks = 4, n = 96;
  unsigned *d = dev_alloc<unsigned>(blocks * n), h[4 * 96];
  CU_OK(sim_launch("k_rotate_sync", blocks, n, 0, k_rotate_sync, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, blocks * n);
  for (unsigned b = 0; b < blocks; b++)
    for (unsigned t = 0; t < n; t++)
      ck_assert_msg(h[b * n + t] == b * 1000u + ((t + 1) % n) * 3u + 1u,
                    "block %u thread %u read 0x%08x after __syncthreads", b, t, h[b * n + t]);
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(missing_syncthreads_reads_poison) {
  const unsigned blocks = 4, n = 96;
  unsigned *d = dev_alloc<unsigned>(blocks * n), h[4 * 96];
  CU_OK(sim_launch("k_rotate_nosync", blocks, n, 0, k_rotate_nosync, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, blocks * n);
  /* the neighbour relation is a cycle: in any order some thread runs before its neighbour, so
   * every block has at least one thread that read the poison; no other value can appear */
  for (unsigned b = 0; b < blocks; b++) {
    unsigned poisoned = 0;
    for (unsigned t = 0; t < n; t++) {
      unsigned v = h[b * n + t], good = b * 1000u + ((t + 1) % n) * 3u + 1u;
      ck_assert_msg(v == good || v == SIM_POISON_SHARED, "block %u thread %u read 0x%08x", b, t, v);
      poisoned += v == SIM_POISON_SHARED;
    }
    ck_assert_msg(poisoned > 0, "block %u: no thread read the 0xA5 poison without the barrier", b);
  }
  CU_OK(cudaFree(d));
}
END_TEST

/* Threads that have exited do not hold a __syncthreads back (README: "every live thread"). */
__global__ void k_sync_after_exit(unsigned *out) {
  __shared__ unsigned s[32];
  unsigned t = threadIdx.x;
  if (t >= 16) return;
  s[t] = t + 100u;
  __syncthreads();
  out[t] = s[(t + 1) % 16];
}

START_TEST(syncthreads_counts_live_threads) {
  unsigned *d = dev_alloc<unsigned>(16), h[16];
  CU_OK(sim_launch("k_sync_after_exit", 1, 64, 0, k_sync_after_exit, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 16);
  for (unsigned t = 0; t < 16; t++) ck_assert_uint_eq(h[t], (t + 1) % 16 + 100u);
  CU_OK(cudaFree(d));
}
END_TEST

/* A live thread never reaches the __syncthreads the rest of the block waits at: lane 0 of warp
 * 1 waits at a __syncwarp that names lane 1, which waits at __syncthreads (break). */
__global__ void k_sync_not_reached(unsigned *out) {
  if (threadIdx.x == 32) __syncwarp(0x3u);
  else __syncthreads();
  out[threadIdx.x] = 1;
}

START_TEST(syncthreads_not_reached_faults) {
  unsigned *d = dev_alloc<unsigned>(64);
  CU_OK(sim_launch("k_sync_not_reached", 1, 64, 0, k_sync_not_reached, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "divergent collective", "k_sync_not_reached",
               "waits at __syncthreads");
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ warp collectives: results */

struct VoteOut {
  unsigned ballot3, any17, any0, all_live, all_but5, ballot_lo, ballot_hi;
};

/* Votes over the full warp, and two disjoint masks in one warp at once. */
__global__ void k_votes(VoteOut *out) {
  unsigned lane = threadIdx.x & 31u;
  VoteOut *o = &out[threadIdx.x];
  o->ballot3 = __ballot_sync(FULL, lane % 3u == 0);
  o->any17 = (unsigned)__any_sync(FULL, lane == 17);
  o->any0 = (unsigned)__any_sync(FULL, 0);
  o->all_live = (unsigned)__all_sync(FULL, 1);
  o->all_but5 = (unsigned)__all_sync(FULL, lane != 5);
  if (lane < 8) {
    o->ballot_lo = __ballot_sync(0x000000ffu, lane & 1u);
    o->ballot_hi = 0;
  } else {
    o->ballot_hi = __ballot_sync(0xffffff00u, 1);
    o->ballot_lo = 0;
  }
}

START_TEST(votes_give_the_device_results) {
  VoteOut *d = dev_alloc<VoteOut>(64), h[64];
  CU_OK(sim_launch("k_votes", 1, 64, 0, k_votes, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 64);
  for (unsigned t = 0; t < 64; t++) {
    unsigned lane = t & 31u;
    ck_assert_uint_eq(h[t].ballot3, 0x49249249u);
    ck_assert_uint_eq(h[t].any17, 1);
    ck_assert_uint_eq(h[t].any0, 0);
    ck_assert_uint_eq(h[t].all_live, 1);
    ck_assert_uint_eq(h[t].all_but5, 0);
    /* a ballot sets only the bits of its mask's lanes */
    ck_assert_uint_eq(h[t].ballot_lo, lane < 8 ? 0xaau : 0u);
    ck_assert_uint_eq(h[t].ballot_hi, lane < 8 ? 0u : 0xffffff00u);
  }
  CU_OK(cudaFree(d));
}
END_TEST

enum {
  SH_IDX7,      /* __shfl_sync(v, 7) */
  SH_IDX35,     /* srcLane 35: 35 mod 32 */
  SH_IDX_W8,    /* srcLane 3, width 8: lane 3 of the caller's 8-lane segment */
  SH_IDX_W8_11, /* srcLane 11, width 8: 11 mod 8 */
  SH_IDX_W8_NEG,/* srcLane -1, width 8: lane 7 of the segment */
  SH_UP3,       /* delta 3: own value below lane 3 */
  SH_UP3_W8,    /* delta 3, width 8: own value in the segment's first 3 lanes */
  SH_DOWN5_W16, /* delta 5, width 16: own value in the segment's last 5 lanes */
  SH_XOR1,      /* laneMask 1 */
  SH_XOR16_W16, /* laneMask 16, width 16: a later segment gives the own value, an earlier one
                   is read (CUDA C++ Programming Guide, __shfl_xor_sync; PTX shfl.bfly) */
  SH_XOR5_W4,   /* laneMask 5, width 4 */
  SH_COUNT
};

/* Every shuffle mode, width and out-of-range source; values identify their lane. */
__global__ void k_shuffles(int *out, unsigned long long *wide) {
  unsigned lane = threadIdx.x & 31u;
  int v = (int)(threadIdx.x * 10u + 1u);
  int *o = &out[threadIdx.x * SH_COUNT];
  o[SH_IDX7] = __shfl_sync(FULL, v, 7);
  o[SH_IDX35] = __shfl_sync(FULL, v, 35);
  o[SH_IDX_W8] = __shfl_sync(FULL, v, 3, 8);
  o[SH_IDX_W8_11] = __shfl_sync(FULL, v, 11, 8);
  o[SH_IDX_W8_NEG] = __shfl_sync(FULL, v, -1, 8);
  o[SH_UP3] = __shfl_up_sync(FULL, v, 3);
  o[SH_UP3_W8] = __shfl_up_sync(FULL, v, 3, 8);
  o[SH_DOWN5_W16] = __shfl_down_sync(FULL, v, 5, 16);
  o[SH_XOR1] = __shfl_xor_sync(FULL, v, 1);
  o[SH_XOR16_W16] = __shfl_xor_sync(FULL, v, 16, 16);
  o[SH_XOR5_W4] = __shfl_xor_sync(FULL, v, 5, 4);
  /* 8-byte values move whole */
  unsigned long long w = ((unsigned long long)(lane + 1u) << 40) | (threadIdx.x * 7u);
  wide[threadIdx.x] = __shfl_sync(FULL, w, 9);
}

START_TEST(shuffles_give_the_device_results) {
  const unsigned n = 64;
  int *d = dev_alloc<int>(n * SH_COUNT), h[64 * SH_COUNT];
  unsigned long long *dw = dev_alloc<unsigned long long>(n), hw[64];
  CU_OK(sim_launch("k_shuffles", 1, n, 0, k_shuffles, d, dw));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, n * SH_COUNT);
  to_host(hw, dw, n);
  for (unsigned t = 0; t < n; t++) {
    unsigned lane = t & 31u, base = t - lane;
    const int *o = &h[t * SH_COUNT];
#define VAL(l) ((int)(((base) + (l)) * 10u + 1u))
    unsigned s8 = lane & ~7u, s16 = lane & ~15u, s4 = lane & ~3u;
    ck_assert_int_eq(o[SH_IDX7], VAL(7));
    ck_assert_int_eq(o[SH_IDX35], VAL(3));
    ck_assert_int_eq(o[SH_IDX_W8], VAL(s8 + 3));
    ck_assert_int_eq(o[SH_IDX_W8_11], VAL(s8 + 3));
    ck_assert_int_eq(o[SH_IDX_W8_NEG], VAL(s8 + 7));
    ck_assert_int_eq(o[SH_UP3], lane >= 3 ? VAL(lane - 3) : VAL(lane));
    ck_assert_int_eq(o[SH_UP3_W8], lane - s8 >= 3 ? VAL(lane - 3) : VAL(lane));
    ck_assert_int_eq(o[SH_DOWN5_W16], lane - s16 + 5 < 16 ? VAL(lane + 5) : VAL(lane));
    ck_assert_int_eq(o[SH_XOR1], VAL(lane ^ 1u));
    /* PTX bfly: j = lane ^ 16 is read when j <= the segment's last lane */
    ck_assert_msg(o[SH_XOR16_W16] == ((lane ^ 16u) <= s16 + 15 ? VAL(lane ^ 16u) : VAL(lane)),
                  "lane %u: __shfl_xor_sync(v, 16, 16) gave %d (lane %u's value is %d, its own %d)", lane,
                  o[SH_XOR16_W16], lane ^ 16u, VAL(lane ^ 16u), VAL(lane));
    ck_assert_int_eq(o[SH_XOR5_W4], (lane ^ 5u) <= s4 + 3 ? VAL(lane ^ 5u) : VAL(lane));
#undef VAL
    ck_assert_msg(hw[t] == (((unsigned long long)10 << 40) | ((base + 9u) * 7u)),
                  "thread %u: 8-byte shuffle gave 0x%llx", t, hw[t]);
  }
  CU_OK(cudaFree(d));
  CU_OK(cudaFree(dw));
}
END_TEST

__global__ void k_match_any(unsigned *out) {
  unsigned lane = threadIdx.x & 31u;
  out[threadIdx.x] = __match_any_sync(FULL, lane % 4u);
  /* 8-byte values compare whole: equal low words, different high words */
  unsigned long long w = ((unsigned long long)(lane & 1u) << 32) | 5u;
  out[64 + threadIdx.x] = __match_any_sync(FULL, w);
}

START_TEST(match_any_groups_equal_values) {
  unsigned *d = dev_alloc<unsigned>(128), h[128];
  CU_OK(sim_launch("k_match_any", 1, 64, 0, k_match_any, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, 128);
  for (unsigned t = 0; t < 64; t++) {
    ck_assert_uint_eq(h[t], 0x11111111u << (t % 4u));
    ck_assert_uint_eq(h[64 + t], (t & 1u) ? 0xaaaaaaaau : 0x55555555u);
  }
  CU_OK(cudaFree(d));
}
END_TEST

/* __syncwarp orders a warp's shared memory (keep); without it a lane can read its partner's
 * slot before the partner wrote it (break: poison). */
__global__ void k_warp_exchange(unsigned *out, int with_syncwarp) {
  __shared__ unsigned s[64];
  unsigned t = threadIdx.x, lane = t & 31u, base = t - lane;
  s[t] = t + 7u;
  if (with_syncwarp) __syncwarp();
  out[t] = s[base + (31u - lane)];
}

START_TEST(syncwarp_orders_a_warp) {
  unsigned *d = dev_alloc<unsigned>(64), h[64];
  for (int with = 1; with >= 0; with--) {
    CU_OK(sim_launch(with ? "k_warp_exchange" : "k_warp_exchange_nosync", 1, 64, 0, k_warp_exchange, d, with));
    CU_OK(cudaDeviceSynchronize());
    to_host(h, d, 64);
    for (unsigned w = 0; w < 2; w++) {
      unsigned poisoned = 0;
      for (unsigned l = 0; l < 32; l++) {
        unsigned t = w * 32 + l, good = w * 32 + (31u - l) + 7u;
        if (with) ck_assert_msg(h[t] == good, "thread %u read 0x%08x after __syncwarp", t, h[t]);
        else ck_assert_msg(h[t] == good || h[t] == SIM_POISON_SHARED, "thread %u read 0x%08x", t, h[t]);
        poisoned += h[t] == SIM_POISON_SHARED;
      }
      /* each pair (l, 31 - l) runs in some order: the first of each reads the poison */
      if (!with) ck_assert_msg(poisoned >= 16, "warp %u: %u lanes read the poison without __syncwarp", w, poisoned);
    }
  }
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ warp collectives: faults */

/* Lanes of one mask at different collectives. */
__global__ void k_divergent_votes(unsigned *out) {
  unsigned lane = threadIdx.x & 31u;
  if (lane < 16) out[lane] = __ballot_sync(FULL, 1);
  else out[lane] = (unsigned)__any_sync(FULL, 1);
}

/* A mask naming lanes that have exited. */
__global__ void k_exited_lane(unsigned *out) {
  unsigned lane = threadIdx.x & 31u;
  if (lane >= 16) return;
  out[lane] = __ballot_sync(FULL, 1);
}

/* The same, with the order forced: lanes 0..15 count themselves and wait at the ballot; lanes
 * 16..31 exit only once all 16 have counted, so they exit while the others wait. */
__global__ void k_lane_exits_while_waited_for(unsigned *out) {
  __shared__ unsigned arrived;
  unsigned lane = threadIdx.x & 31u;
  if (threadIdx.x == 0) arrived = 0;
  __syncthreads();
  if (lane >= 16) {
    while (atomicAdd(&arrived, 0u) < 16u) __nanosleep(10);
    return;
  }
  atomicAdd(&arrived, 1u);
  out[lane] = __ballot_sync(FULL, 1);
}

/* A full mask in a block of 48 threads: warp 1 has lanes 0..15 only. */
__global__ void k_partial_warp(unsigned *out) {
  out[threadIdx.x] = __ballot_sync(FULL, 1);
}

/* Lane 15 shuffles down from lane 16, which its mask does not name. */
__global__ void k_shfl_outside_mask(int *out) {
  unsigned lane = threadIdx.x & 31u;
  if (lane >= 16) return;
  out[lane] = __shfl_down_sync(0x0000ffffu, (int)lane, 1);
}

/* __shfl_sync from a source lane outside the mask (src 20 of a 16-lane mask). */
__global__ void k_shfl_idx_outside_mask(int *out) {
  unsigned lane = threadIdx.x & 31u;
  if (lane >= 16) return;
  out[lane] = __shfl_sync(0x0000ffffu, (int)lane, 20);
}

/* Lane 3 calls a ballot over lane 0 only. */
__global__ void k_caller_outside_mask(unsigned *out) {
  unsigned lane = threadIdx.x & 31u;
  if (lane == 0) out[0] = __ballot_sync(0x9u, 1);
  else if (lane == 3) out[3] = __ballot_sync(0x1u, 1);
}

/* A width that is not a power of two. */
__global__ void k_bad_width(int *out) { out[threadIdx.x] = __shfl_sync(FULL, (int)threadIdx.x, 0, 12); }

/* Lanes of one shuffle with different widths: the model requires one width per collective. */
__global__ void k_mixed_width(int *out) {
  unsigned lane = threadIdx.x & 31u;
  out[lane] = __shfl_sync(FULL, (int)lane, 0, lane < 16 ? 16 : 32);
}

START_TEST(divergent_collective_faults) {
  unsigned *d = dev_alloc<unsigned>(64);
  CU_OK(sim_launch("k_divergent_votes", 1, 32, 0, k_divergent_votes, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "divergent collective", "k_divergent_votes",
               "__ballot_sync");
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(mask_with_exited_lane_faults) {
  unsigned *d = dev_alloc<unsigned>(64);
  CU_OK(sim_launch("k_exited_lane", 1, 32, 0, k_exited_lane, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "collective over an exited lane", "k_exited_lane",
               "has exited");
  CU_OK(sim_launch("k_lane_exits_while_waited_for", 1, 32, 0, k_lane_exits_while_waited_for, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "collective over an exited lane",
               "k_lane_exits_while_waited_for", "has exited");
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(full_mask_in_partial_warp_faults) {
  unsigned *d = dev_alloc<unsigned>(64);
  CU_OK(sim_launch("k_partial_warp", 1, 48, 0, k_partial_warp, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "collective over an exited lane", "k_partial_warp",
               "does not exist (the block's last warp is partial)");
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(shuffle_outside_mask_faults) {
  int *d = dev_alloc<int>(64);
  CU_OK(sim_launch("k_shfl_outside_mask", 1, 32, 0, k_shfl_outside_mask, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "shuffle from a lane outside the mask",
               "k_shfl_outside_mask", "reads lane 16");
  CU_OK(sim_launch("k_shfl_idx_outside_mask", 1, 32, 0, k_shfl_idx_outside_mask, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "shuffle from a lane outside the mask",
               "k_shfl_idx_outside_mask", "reads lane 20");
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(caller_outside_mask_faults) {
  unsigned *d = dev_alloc<unsigned>(64);
  CU_OK(sim_launch("k_caller_outside_mask", 1, 32, 0, k_caller_outside_mask, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "collective with the caller outside its mask",
               "k_caller_outside_mask", "lane 3");
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(bad_shuffle_width_faults) {
  int *d = dev_alloc<int>(64);
  CU_OK(sim_launch("k_bad_width", 1, 32, 0, k_bad_width, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "bad shuffle width", "k_bad_width", "width 12");
  CU_OK(sim_launch("k_mixed_width", 1, 32, 0, k_mixed_width, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorLaunchFailure, "divergent collective", "k_mixed_width", "width");
  CU_OK(cudaFree(d));
}
END_TEST

/* __trap(): a fault of its own (cudaErrorIllegalInstruction). */
__global__ void k_trap(int *out) {
  if (threadIdx.x == 5) __trap();
  out[threadIdx.x] = 1;
}

START_TEST(trap_faults) {
  int *d = dev_alloc<int>(32);
  CU_OK(sim_launch("k_trap", 1, 32, 0, k_trap, d));
  EXPECT_FAULT(cudaDeviceSynchronize(), cudaErrorIllegalInstruction, "__trap", "k_trap", "thread (5,0,0)");
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ __shared__ */

/* Thread 0 reads the block's __shared__ variable before anyone wrote it (the poison), then
 * writes its block's value; every thread reads that after the barrier. */
__global__ void k_shared_per_block(unsigned *out) {
  __shared__ unsigned s;
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = s;
    s = blockIdx.x + 100u;
  }
  __syncthreads();
  if (threadIdx.x == blockDim.x - 1) out[blockIdx.x * 2 + 1] = s;
}

/* __shared__ in a __device__ function (a block-scope static). */
__device__ unsigned *block_word() {
  __shared__ unsigned w;
  return &w;
}
__global__ void k_shared_in_function(unsigned *out) {
  unsigned *w = block_word();
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = *w;
    *w = blockIdx.x + 200u;
  }
  __syncthreads();
  if (threadIdx.x == 1) out[blockIdx.x * 2 + 1] = *block_word();
}

/* __shared__ in a kernel template (clang puts it in the poisoned section; README: g++ does not). */
template <int N> __global__ void k_shared_template(unsigned *out) {
  __shared__ unsigned s[N];
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = s[N - 1];
    s[N - 1] = blockIdx.x + 300u;
  }
  __syncthreads();
  if (threadIdx.x == 1) out[blockIdx.x * 2 + 1] = s[N - 1];
}

static void check_shared(unsigned *d, unsigned blocks, unsigned base, const char *what) {
  unsigned h[16];
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, blocks * 2);
  for (unsigned b = 0; b < blocks; b++) {
    ck_assert_msg(h[b * 2] == SIM_POISON_SHARED, "%s: block %u saw 0x%08x before writing (not the poison)", what, b,
                  h[b * 2]);
    ck_assert_msg(h[b * 2 + 1] == base + b, "%s: block %u read %u after its own write", what, b, h[b * 2 + 1]);
  }
}

START_TEST(shared_is_per_block_and_poisoned) {
  const unsigned blocks = 8;
  unsigned *d = dev_alloc<unsigned>(blocks * 2);
  CU_OK(sim_launch("k_shared_per_block", blocks, 64, 0, k_shared_per_block, d));
  check_shared(d, blocks, 100, "kernel __shared__");
  CU_OK(sim_launch("k_shared_in_function", blocks, 64, 0, k_shared_in_function, d));
  check_shared(d, blocks, 200, "__device__ function __shared__");
#if defined(__clang__)
  CU_OK(sim_launch("k_shared_template", blocks, 64, 0, k_shared_template<5>, d));
  check_shared(d, blocks, 300, "template __shared__");
#endif
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ built-in variables */

__global__ void k_builtins(unsigned *out) {
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  atomicAdd(&out[b * nt + t], b * 100000u + t + 1u);
}

START_TEST(builtins_cover_a_3d_launch) {
  dim3 g(2, 3, 2), bl(4, 2, 3);
  const unsigned nb = 12, nt = 24;
  unsigned *d = dev_alloc<unsigned>(nb * nt), h[12 * 24];
  CU_OK(cudaMemset(d, 0, nb * nt * sizeof(unsigned)));
  CU_OK(sim_launch("k_builtins", g, bl, 0, k_builtins, d));
  CU_OK(cudaDeviceSynchronize());
  to_host(h, d, nb * nt);
  for (unsigned b = 0; b < nb; b++)
    for (unsigned t = 0; t < nt; t++) ck_assert_uint_eq(h[b * nt + t], b * 100000u + t + 1u);
  CU_OK(cudaFree(d));
}
END_TEST

int main(void) {
  Suite *s = suite_create("cudasim_threads");
  TCase *tc = sim_tcase(s, "syncthreads");
  tcase_add_test(tc, syncthreads_orders_shared_memory);
  tcase_add_test(tc, missing_syncthreads_reads_poison);
  tcase_add_test(tc, syncthreads_counts_live_threads);
  tcase_add_test(tc, syncthreads_not_reached_faults);
  tc = sim_tcase(s, "warp");
  tcase_add_test(tc, votes_give_the_device_results);
  tcase_add_test(tc, shuffles_give_the_device_results);
  tcase_add_test(tc, match_any_groups_equal_values);
  tcase_add_test(tc, syncwarp_orders_a_warp);
  tcase_add_test(tc, divergent_collective_faults);
  tcase_add_test(tc, mask_with_exited_lane_faults);
  tcase_add_test(tc, full_mask_in_partial_warp_faults);
  tcase_add_test(tc, shuffle_outside_mask_faults);
  tcase_add_test(tc, caller_outside_mask_faults);
  tcase_add_test(tc, bad_shuffle_width_faults);
  tcase_add_test(tc, trap_faults);
  tc = sim_tcase(s, "shared");
  tcase_add_test(tc, shared_is_per_block_and_poisoned);
  tcase_add_test(tc, builtins_cover_a_3d_launch);
  return sim_run(s);
}
