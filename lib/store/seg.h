/*
 * seg.h: the layout of a shared store's segment (lib/store/shared.c builds and checks it,
 * lib/store/seg_log.c keeps its update log). Not installed. Every field a process reads from
 * another process's writes is accessed atomically (EMC_LD_* / EMC_ST_*).
 */
#ifndef EMC_STORE_SEG_H
#define EMC_STORE_SEG_H

#include "../internal.h"

#define EMC__SEG_MAGIC "EMCSHM\x01\x00" /* 8 bytes */
#define EMC__SEG_VERSION 2u               /* 2: the update log */
#define EMC__SEG_NAME_BYTES 256u          /* a table name and its NUL */
#define EMC__SEG_READY_WAIT_MS 2000u      /* attach waits this long for a creator to finish */
/* Update-log entries kept: the tables' rows rounded up to a power of two, within these
 * bounds (a cache further behind drops whole tables: cheap for a small store) */
#define EMC__SEG_LOG_MIN 1024u
#define EMC__SEG_LOG_MAX 32768u

typedef struct emc__seg_table {
  char name[EMC__SEG_NAME_BYTES];
  uint32_t kind, dtype, dim, state;
  uint64_t rows;
  uint64_t off_base, off_map_ids, off_map_rowp1, off_row_ids; /* 0: none (dense maps) */
  uint64_t count;                   /* hashed: rows used (the emc__table's count points here) */
  uint64_t last_seq;                /* >= the sequence number of every log entry of the table */
  uint64_t reserved_[2];
} emc__seg_table;

/* One update-log entry: (table, id) was written by the write whose entries end at or after
 * `seq`. The slot of entry q is q % log_cap; `seq` is 0 while a writer rewrites the slot. */
typedef struct emc__seg_log_ent {
  uint64_t seq, id;
  uint32_t table, pad_;
} emc__seg_log_ent;

/* The training group of a shared store (lib/group.c), in the segment at off_group. Fields
 * marked (lock) change under the store's lock; the others are atomics. */
#define EMC__GROUP_MAX_RANKS 256u
typedef struct emc__grp_rank {
  uint32_t pid;           /* the rank's process, 0: free (lock) */
  uint32_t epoch;         /* the group's epoch it joined (lock) */
  uint64_t arrived;       /* the last step its contribution is staged for (release) */
  uint64_t contrib_bytes; /* its contribution: bytes of its staging segment, after the header */
  uint32_t refused;       /* a status: the rank refused its own batch of step `arrived` */
  uint32_t pad_;
  uint64_t start;         /* the process's start time (/proc/<pid>/stat): a reused pid is
                             another process (lock) */
  uint64_t reserved_[3];
} emc__grp_rank;          /* 64 bytes */

typedef struct emc__grp {
  uint32_t n_ranks;       /* the group's size, 0: no group (lock) */
  uint32_t epoch;         /* advances each time a group forms (lock) */
  uint32_t joined;        /* ranks joined (lock) */
  uint32_t broken;        /* == epoch: a rank left, died or was late; every step now fails */
  uint64_t claimed;       /* step << 9 | tag: tag 1 + r, rank r claimed the step; 0x1ff, the
                             group broke at it; 0, nobody yet (compare-and-swap only) */
  uint64_t done;          /* the last step finished, applied or refused (release) */
  uint32_t done_status;   /* its status (written before done) */
  uint32_t pad2_;
  uint64_t apply_step;    /* the step whose new rows are staged (the commit point, release) */
  uint64_t apply_off, apply_rows, apply_bytes; /* where, in rank apply_rank's staging segment */
  uint32_t apply_rank, pad_;
  char detail[200];       /* done_status's detail */
  uint64_t reserved_[4];
  emc__grp_rank ranks[EMC__GROUP_MAX_RANKS];
} emc__grp;

/* stage.c: a staged step (lib/group.c stages it). Records: a table, an id, then f32
 * gradients (a rank's contribution) or a whole row with its state (the new rows). */
typedef struct emc__rec_hdr {
  uint32_t table, pad_;
  uint64_t id;
} emc__rec_hdr;
static inline size_t emc__rec_bytes(uint32_t payload) {
  return sizeof(emc__rec_hdr) + ((payload + 7u) & ~(size_t)7u);
}
/* Rank r's staging segment name, "<store name>.g<r>". */
EMC_INTERNAL void emc__stage_name(const emc_store *s, uint32_t rank, char *buf, size_t cap);
/* Map rank r's staging segment read-only (unmap with munmap(*p, *bytes)); EMC_ECORRUPT when it
 * is missing or shorter than `need`. */
EMC_INTERNAL emc_status emc__stage_peer(const emc_store *s, uint32_t r, size_t need,
                                        const unsigned char **p, size_t *bytes);
/* Write n staged new rows at p[0 .. bytes) to the store, the lock held: announced, written,
 * published. Records that do not fit `bytes` or name no table end it (EMC_ECORRUPT). */
EMC_INTERNAL emc_status emc__stage_apply(emc_store *s, const unsigned char *p, size_t bytes,
                                         uint64_t n);
/* Step k finished with st: its detail, status, then done = k (release). */
EMC_INTERNAL void emc__grp_finish(struct emc__grp *G, uint64_t k, emc_status st);
/* The lock held: a step committed (apply_step > done) whose applier is gone, applied now. */
EMC_INTERNAL void emc__grp_complete_pending(emc_store *s);

struct emc__seg_hdr {
  char magic[8];
  uint32_t version, n_tables;
  uint64_t total_bytes;             /* the segment's size */
  uint32_t ready;                   /* 1 once the creator laid everything out (release) */
  uint32_t lock_bytes;              /* sizeof(pthread_mutex_t) of the creator */
  uint64_t hdr_bytes, off_stripes, off_undo, undo_cap;
  uint32_t undo_valid, undo_table;  /* the undo slot holds table's row undo_row */
  uint64_t undo_row;
  uint32_t undo_bytes, pad_;
  uint64_t off_log, log_cap;        /* the update log's ring: log_cap entries (seg_layout) */
  uint64_t log_seq;                 /* entries 1..log_seq are published (release / acquire) */
  uint64_t log_pending;             /* the running writer's last entry (>= log_seq) */
  uint64_t off_group;               /* the training group's block (emc__grp) */
  uint64_t reserved_[1];
  pthread_mutex_t lock;             /* the writers' lock: process-shared, robust */
};

#endif /* EMC_STORE_SEG_H */
