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
  uint64_t reserved_[2];
  pthread_mutex_t lock;             /* the writers' lock: process-shared, robust */
};

#endif /* EMC_STORE_SEG_H */
