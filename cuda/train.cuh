/*
 * train.cuh: the training stages' arguments and launchers (train.cu), used by the calls in
 * train_calls.cu.
 */
#ifndef EMC_TRAIN_CUH
#define EMC_TRAIN_CUH

#include "dev.cuh"

enum { TR_INSERT = 0, TR_APPLY = 1, TR_PREFETCH = 2, TR_DEDUP = 3 };
/* Why a call was refused (with its two figures). */
enum {
  TR_WHY_DENSE = 1,   /* a dense id out of range: position, id */
  TR_WHY_HASHED = 2,  /* a hashed table over capacity: new ids, free rows */
  TR_WHY_BATCH = 3    /* the batch's distinct rows above t1: bytes, t1 bytes */
};

typedef struct tr_args {
  dview V;
  dcall C;
  const uint64_t *ids;          /* the batch's ids (device) */
  const unsigned char *rows;    /* insert: the caller's rows, packed like emc_lookup's out */
  const float *grads;           /* apply: the gradients, (n_t, dim) floats per table */
  float *gm;                    /* apply: merged gradients (scratch, laid out like grads) */
  uint64_t *uids, *uoffs;       /* dedup: outputs (device) */
  uint32_t *inv;
  uint64_t n;                   /* positions */
  float lr, eps, init;          /* the optimizer */
  uint32_t kind, merge;         /* emc_optimizer_kind, emc_grad_merge */
  uint32_t op;                  /* TR_* */
  uint32_t report;              /* 1: a refusal is recorded for emc_flush (asynchronous call) */
} tr_args;

/* CUB's temporary bytes for m positions over T tables. */
size_t emc__cu_train_tmp_bytes(uint64_t m, uint32_t T);
/* Caller's stream: status cleared, dense ids checked, the batch sorted into runs. */
cudaError_t emc__cu_train_runs(const tr_args *A, cudaStream_t st);
/* Caller's stream, after train_runs: emc_dedup's outputs (untouched when refused). */
cudaError_t emc__cu_dedup_out(const tr_args *A, cudaStream_t st);
/* Writer call, after lock: resolve, check, new hashed rows, the update (insert / apply). */
cudaError_t emc__cu_train_update(const tr_args *A, cudaStream_t st);
/* Writer call, after lock: the old pin list released, the batch's cached rows pinned, the
 * missing ones recorded for admission (mode EMC_MODE_PREFETCH). */
cudaError_t emc__cu_prefetch_pin(const tr_args *A, cudaStream_t st);
/* Writer call, before end: the new list's length, the ring advanced, the shortfall mirrored. */

/* Cache create: the claim bits of a hashed map's used slots (cap slots, rowp1: device alias). */
cudaError_t emc__cu_claim_init(uint32_t *bits, const uint64_t *rowp1, uint64_t cap, cudaStream_t st);

#endif /* EMC_TRAIN_CUH */
