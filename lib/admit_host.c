/*
 * admit_host.c: admission of a lookup's misses into the host cache (writer side).
 *
 * A lookup (lookup_host.c) reads every position without a lock and marks the store rows it
 * served that may be cached (EMC__R_ADMIT). Admitting them takes the writer lock, an eviction
 * pass when the pool would pass t1 (evict.c), and a fresh read of each store row under that
 * lock (a private store's rows change only under it, so the admitted value is current; a
 * shared store's are read by their versions, and a write of another process published
 * meanwhile is dropped by the next sync, lib/sync_host.c; a row that was cached meanwhile,
 * dirty or not, is left as it is). Where that runs is the cache's
 * `admission` setting (include/embcache.h):
 *   INLINE      in the lookup, after its rows are served; trylock: when another thread holds
 *               the lock the misses are skipped (admit_skipped).
 *   BACKGROUND  the lookup copies its misses (table, id, key) into a batch, pushes it onto a
 *               lock-free list (one CAS) and returns; the cache's admission thread takes the
 *               whole list, restores the lookups' order and admits batch after batch under
 *               the writer lock (a blocking lock: the thread may wait for writers, lookups
 *               never do). At most EMC_ADMISSION_QUEUE_ROWS rows (or as many as the cache
 *               holds, if fewer, but 65536 at least) wait at once; a lookup whose
 *               misses would pass that, or whose batch cannot be allocated, skips them
 *               (admit_skipped). emc_flush waits until the batches of the lookups that
 *               returned before it are admitted (emc__admission_drain: a barrier in the
 *               list), not for later ones.
 *               The thread is named "emc-admit"; emc_cache_destroy joins it. A child of
 *               fork() has no such thread: there the cache admits inline (here_bg).
 *   AUTO        resolved at creation (cache.c): BACKGROUND, or INLINE where the thread cannot
 *               start.
 * Either way every guarantee of a lookup holds: the rows it returned were read before any of
 * this, `where` and the hit/miss counts describe those reads, and admissions and skips are
 * counted when they happen.
 */
#define _GNU_SOURCE 1 /* pthread_setname_np; clock_gettime, sem_* */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "host_cache.h"

/* ================================================================= one admission */
int emc__admit_row(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, int64_t pos,
                   const unsigned char *row, int dirty, uint64_t now) {
  emc__host_cache *h = c->host;
  const emc__page_layout *L = &h->layout[t];
  int64_t loc = emc__pool_alloc(h, t);
  unsigned char *pg;
  uint32_t p, slot;
  uint64_t lm;
  /* no page with a free slot for table t, none free: take one back (evict.c) */
  if (loc < 0 && emc__reclaim_page(c, now)) loc = emc__pool_alloc(h, t);
  if (loc < 0) return 0;
  emc__slot_split(h, (uint32_t)loc, &p, &slot);
  pg = emc__page_at(h, p);
  emc__row_store(emc__slot_row(pg, L, slot), row, c->store->tables[t].full_bytes);
  if (L->off_owner) EMC_ST_RELAXED(emc__slot_owner(pg, L, slot), id);
  lm = emc__lm_make((uint32_t)loc, emc__next_meta(h, dirty ? EMC__META_DIRTY : 0));
  EMC__TP(EMC__TP_WRITE, "admit: row in slot");
  if (pos >= 0) { /* unified entry -> slot */
    EMC_FENCE_RELEASE();
    EMC_ST_RELAXED(&h->ix.stamps[pos], emc__stamp_of(now));
    EMC_ST_RELAXED(&h->ix.lm[pos], lm);
    EMC__TP(EMC__TP_WRITE, "admit: unified entry to slot");
    h->host_entries--;
  } else {
    emc__hix_insert(c, key, lm, emc__stamp_of(now));
  }
  EMC__WR_ADD(h->bytes_in_use, L->stride);
  EMC__WR_ADD(h->rows_cached[t], 1);
  if (dirty) EMC__WR_ADD(h->dirty_rows, 1);
  return 1;
}

int64_t emc__admit_pos(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, int *collision) {
  emc__host_cache *h = c->host;
  int64_t pos = emc__hix_find(&h->ix, key);
  uint64_t lm;
  *collision = 0;
  if (pos < 0) return -1;
  lm = emc__ix_lm(&h->ix, (uint64_t)pos);
  *collision = !emc__hix_entry_is(c, t, lm, id);
  if (!*collision && (emc__lm_loc(lm) & EMC__LOC_HOST)) return pos;
  return -2;
}

/* Admit one miss (table t, id, key) seen by a lookup at `now`, the writer lock held; counts
 * into *admitted or *skipped (a row cached meanwhile by its own id is neither). */
static void admit_one(emc_cache *c, uint32_t t, uint64_t id, uint64_t key, uint64_t now,
                      unsigned char *row, uint64_t *admitted, uint64_t *skipped) {
  const emc__table *tb = &c->store->tables[t];
  /* a pass ages entries against the newest clock (later lookups may have stamped rows since
   * this one's `now`); the admitted row keeps its own access time, `now`, but no older than
   * the clamp (a miss queued long ago: its age must not wrap) */
  uint64_t newest = __atomic_load_n(&c->host->clock, __ATOMIC_RELAXED);
  uint64_t at = newest > EMC__AGE_CLAMP && now < newest - EMC__AGE_CLAMP ? newest - EMC__AGE_CLAMP : now;
  int64_t pos, srow;
  int collision;
  if (!emc__make_room(c, tb->stride, newest > now ? newest : now)) {
    (*skipped)++;
    return;
  }
  pos = emc__admit_pos(c, t, id, key, &collision);
  if (pos == -2) { /* cached meanwhile (a duplicate of this batch, or another thread) */
    *skipped += (uint64_t)collision;
    return;
  }
  srow = tb->kind == EMC_TABLE_DENSE ? (int64_t)id : emc__store_find(tb, id);
  if (srow < 0) return;
  if (c->host->shared) {
    /* other processes write the rows: a versioned read. A write published after it is
     * dropped by the next sync, which needs the lock this admission holds (sync_host.c) */
    emc__store_full_read(c->store, t, (uint64_t)srow, row);
  } else { /* the current store row and its state: store rows change only under this lock */
    emc__row_load(row, emc__store_row(tb, (uint64_t)srow), tb->full_bytes);
  }
  if (emc__admit_row(c, t, id, key, pos, row, 0, at)) (*admitted)++;
  else (*skipped)++;
}

/* Admit a batch's records in order, the writer lock held. Each admission is a chain of
 * misses to memory (the key's index bucket, the store row, for a hashed id its map slot first),
 * so record i + ADMIT_AHEAD's are prefetched while record i is admitted: every line of a dense
 * store row, a hashed id's home map slot, the key's home bucket.
 * always_inline: a function whose only effects are prefetches looks pure to GCC (12.2 -O1
 * and up: "Function found to be pure", -fdump-ipa-all), and a pure call whose result is
 * unused is deleted. As a plain static function this one never reached the binary (no
 * prefetch instruction in admit_records until it was inlined). */
#define ADMIT_AHEAD 8u
static inline __attribute__((always_inline)) void admit_prefetch(const emc_cache *c,
                                                                 const emc__admit_batch *b,
                                                                 uint64_t i) {
  const emc__host_cache *h = c->host;
  const emc__table *ta = &c->store->tables[b->table[i]];
  uint64_t bk = emc__home_bucket(b->key[i], h->ix.n_buckets);
  __builtin_prefetch(h->ix.key_bits == 32 ? (const void *)((const uint32_t *)h->ix.keys + bk * EMC__BUCKET)
                                          : (const void *)((const uint64_t *)h->ix.keys + bk * EMC__BUCKET));
  if (ta->kind == EMC_TABLE_DENSE) {
    const char *p = (const char *)emc__store_row(ta, b->id[i]), *end = p + ta->full_bytes;
    for (p = (const char *)((uintptr_t)p & ~(uintptr_t)63); p < end; p += 64) __builtin_prefetch(p);
  } else {
    __builtin_prefetch(&ta->map_rowp1[emc__map_home(b->id[i], ta->map_cap)]);
  }
}

static void admit_records(emc_cache *c, const emc__admit_batch *b, unsigned char *row,
                          uint64_t *admitted, uint64_t *skipped) {
  uint64_t i;
  for (i = 0; i < b->n && i < ADMIT_AHEAD; i++) admit_prefetch(c, b, i);
  for (i = 0; i < b->n; i++) {
    if (i + ADMIT_AHEAD < b->n) admit_prefetch(c, b, i + ADMIT_AHEAD);
    admit_one(c, b->table[i], b->id[i], b->key[i], b->now, row, admitted, skipped);
  }
}

/* A batch of the positions of kind[] that carry EMC__R_ADMIT (NULL: out of memory). */
static emc__admit_batch *batch_of(const emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                                  const uint64_t *keys, const uint8_t *kind, uint64_t n,
                                  uint64_t now) {
  emc__admit_batch *b;
  uint64_t i, k = 0;
  uint32_t t;
  size_t bytes;
  if (n > (SIZE_MAX - sizeof *b) / 20u) return NULL;
  bytes = sizeof *b + (size_t)n * 20u; /* id, key, table */
  if (!(b = emc__malloc(bytes))) return NULL;
  b->next = NULL;
  b->barrier = 0;
  b->n = n;
  b->now = now;
  b->id = (uint64_t *)(b + 1);
  b->key = b->id + n;
  b->table = (uint32_t *)(b->key + n);
  for (t = 0; t < c->store->n_tables; t++)
    for (i = offsets[t]; i < offsets[t + 1]; i++)
      if (kind[i] & EMC__R_ADMIT) {
        b->id[k] = ids[i];
        b->key[k] = keys[i];
        b->table[k] = t;
        k++;
      }
  return b;
}

/* ================================================================= inline */
static void admit_inline(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                         const uint64_t *keys, const uint8_t *kind, uint64_t to_admit,
                         uint64_t now) {
  emc__host_cache *h = c->host;
  uint64_t admitted = 0, skipped = 0;
  unsigned char *row;
  emc__admit_batch *b;
  /* the misses packed (a batch, as the admission thread takes them; before the lock, which
   * other lookups only try), then admitted in the lookup's order with their memory
   * prefetched ahead (admit_records) */
  row = emc__malloc(h->max_stride); /* one row (and state) of the widest table */
  b = row ? batch_of(c, ids, offsets, keys, kind, to_admit, now) : NULL;
  if (!b || pthread_mutex_trylock(&h->lock) != 0) {
    free(row);
    free(b);
    EMC__CNT_ADD(h->n_admit_skipped, to_admit);
    return;
  }
  admit_records(c, b, row, &admitted, &skipped);
  free(b);
  free(row);
  emc__hix_maintain(c, 0);
  if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
  pthread_mutex_unlock(&h->lock);
  EMC__CNT_ADD(h->n_admissions, admitted);
  EMC__CNT_ADD(h->n_admit_skipped, skipped);
}

/* ================================================================= background */
#define EMC__ADMISSION_QUEUE_MIN 65536u
/* The writer-side work of a round: the batches of `fifo`, in order, under the writer lock.
 * A drain's barrier (n == 0, `barrier` set; on the drain's stack) ends a stretch: the lock is
 * let go, the counts so far published, the barrier marked done (the drain may return and its
 * node vanish, so its `next` was read first) and the lock taken again. Batches are freed as
 * they are done. */
static void admit_round(emc_cache *c, emc__admit_batch *fifo, unsigned char *row) {
  emc__host_cache *h = c->host;
  uint64_t done = 0, admitted = 0, skipped = 0, newest;
  pthread_mutex_lock(&h->lock);
  /* lookups age stamps only when the lock is free (trylock), and this thread may hold it
   * most of the time: age here too (item/policy.h, "LRU stamps") */
  newest = __atomic_load_n(&h->clock, __ATOMIC_RELAXED);
  if ((int64_t)(newest - h->aged_at) >= (int64_t)(EMC__AGE_CLAMP / 2)) emc__age_stamps(c, newest);
  while (fifo) {
    emc__admit_batch *b = fifo;
    int barrier = b->barrier;
    fifo = b->next;
    if (!barrier) {
      if (row) admit_records(c, b, row, &admitted, &skipped);
      else skipped += b->n; /* no row buffer: out of memory */
      done += b->n;
      free(b);
      if (fifo) continue;
    }
    /* a barrier, or the end of the round: publish */
    emc__hix_maintain(c, 0);
    if (__atomic_load_n(&h->bytes_in_use, __ATOMIC_RELAXED) > h->high_bytes) h->calls_above_high++;
    pthread_mutex_unlock(&h->lock);
    EMC__CNT_ADD(h->n_admissions, admitted);
    EMC__CNT_ADD(h->n_admit_skipped, skipped);
    __atomic_fetch_sub(&h->adm_pending, done, __ATOMIC_RELEASE);
    admitted = skipped = done = 0;
    if (barrier) {
      pthread_mutex_lock(&h->adm_mu);
      b->barrier = 2; /* done: the drain owns the node again (and may free its frame) */
      pthread_cond_broadcast(&h->adm_cv);
      pthread_mutex_unlock(&h->adm_mu);
    }
    if (fifo) pthread_mutex_lock(&h->lock);
  }
}

/* The thread allocates nothing itself: its row buffer comes from emc__admission_start, and it
 * only frees what lookups allocated. With jemalloc as the process's malloc, a thread's first
 * allocation binds it to an arena, and creating that arena when address space runs out
 * (RLIMIT_AS) crashed inside jemalloc (a NULL arena's mutex) instead of failing: the whole
 * process ended, from a thread of this library (emc-bench under ulimit -v, 27 caches'
 * threads starting at once). A free() does no such binding. */
static void *admission_main(void *arg) {
  emc_cache *c = arg;
  emc__host_cache *h = c->host;
  unsigned char *row = h->adm_row;
  for (;;) {
    emc__admit_batch *list, *fifo = NULL;
    int stop;
    while (sem_wait(&h->adm_sem) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&h->adm_mu);
    stop = h->adm_stop;
    pthread_mutex_unlock(&h->adm_mu);
    if (stop) break;
    list = __atomic_exchange_n(&h->adm_head, NULL, __ATOMIC_ACQUIRE);
    while (list) { /* the list is newest first: restore the lookups' order */
      emc__admit_batch *next = list->next;
      list->next = fifo;
      fifo = list;
      list = next;
    }
    if (fifo) admit_round(c, fifo, row);
  }
  return NULL;
}

/* fork(): the child gets a copy of every cache but none of their admission threads. Each
 * fork in a child bumps the generation; a cache whose thread was started in another
 * generation admits inline (and its destroy joins nothing). */
static unsigned fork_gen;
static int fork_handler_ok; /* registered: without it no thread is started */
static void on_fork_child(void) { __atomic_add_fetch(&fork_gen, 1, __ATOMIC_RELAXED); }
static void register_fork_handler(void) {
  fork_handler_ok = pthread_atfork(NULL, NULL, on_fork_child) == 0;
}
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The cache's admission thread runs in this process. */
static int here_bg(const emc__host_cache *h) {
  return h->adm_bg && h->adm_gen == __atomic_load_n(&fork_gen, __ATOMIC_RELAXED);
}

int emc__admission_threaded(const emc_cache *c) { return here_bg(c->host); }

/* The thread's mutex, condition and semaphore, once set up (adm_sync_ok), go. */
static void adm_sync_free(emc__host_cache *h) {
  if (!h->adm_sync_ok) return;
  sem_destroy(&h->adm_sem);
  pthread_cond_destroy(&h->adm_cv);
  pthread_mutex_destroy(&h->adm_mu);
  h->adm_sync_ok = 0;
}

emc_status emc__admission_start(emc_cache *c) {
  emc__host_cache *h = c->host;
  const char *what = NULL;
  int err = 0;
  if (c->cfg.admission != EMC_ADMISSION_BACKGROUND) return EMC_OK;
  (void)pthread_once(&fork_once, register_fork_handler);
  if (!fork_handler_ok) {
    what = "cannot register the admission thread's fork handler";
  } else if (pthread_mutex_init(&h->adm_mu, NULL) != 0) {
    what = "admission lock";
  } else if (pthread_cond_init(&h->adm_cv, NULL) != 0) {
    pthread_mutex_destroy(&h->adm_mu);
    what = "admission condition";
  } else if (sem_init(&h->adm_sem, 0, 0) != 0) {
    pthread_cond_destroy(&h->adm_cv);
    pthread_mutex_destroy(&h->adm_mu);
    what = "admission semaphore";
  } else if (!(h->adm_row = emc__malloc(h->max_stride))) {
    sem_destroy(&h->adm_sem);
    pthread_cond_destroy(&h->adm_cv);
    pthread_mutex_destroy(&h->adm_mu);
    what = "admission row buffer";
  } else {
    h->adm_sync_ok = 1;
    h->adm_gen = __atomic_load_n(&fork_gen, __ATOMIC_RELAXED);
#ifdef EMC_TEST_HOOKS
    if (__atomic_load_n(&emc__fail_thread_start, __ATOMIC_RELAXED)) err = EAGAIN;
    else
#endif
      err = pthread_create(&h->adm_thread, NULL, admission_main, c);
    if (err != 0)
      what = "cannot start the admission thread";
  }
  if (what) {
    free(h->adm_row); /* (allocated when the thread alone failed) */
    h->adm_row = NULL;
  }
  if (what && c->admission_auto) { /* AUTO: admit inside the lookups instead (documented) */
    c->cfg.admission = EMC_ADMISSION_INLINE;
    adm_sync_free(h); /* set up when the thread alone failed */
    return EMC_OK;
  }
  if (what) return EMC_FAIL(EMC_ENOMEM, "%s%s%s", what, err ? ": " : "", err ? strerror(err) : "");
  (void)pthread_setname_np(h->adm_thread, "emc-admit"); /* for top -H, gdb, tests */
  h->adm_bg = 1;
  return EMC_OK;
}

void emc__admission_stop(emc__host_cache *h) {
  emc__admit_batch *list;
  if (h->adm_bg && !here_bg(h)) { /* a fork's child: no thread to stop; the parent's may have
                                   * held these at the fork, so they are left as they are */
    h->adm_bg = 0;
    h->adm_sync_ok = 0;
  }
  if (h->adm_bg) {
    pthread_mutex_lock(&h->adm_mu);
    h->adm_stop = 1;
    pthread_mutex_unlock(&h->adm_mu);
    sem_post(&h->adm_sem);
    pthread_join(h->adm_thread, NULL);
    h->adm_bg = 0;
  }
  free(h->adm_row); /* (a fork's child frees its copy: the parent's thread has its own) */
  h->adm_row = NULL;
  list = __atomic_exchange_n(&h->adm_head, NULL, __ATOMIC_ACQUIRE);
  while (list) { /* queued clean rows: dropping them loses nothing */
    emc__admit_batch *next = list->next;
    if (!list->barrier) free(list); /* a barrier is a drain's (a flush racing destroy) */
    list = next;
  }
  adm_sync_free(h);
}

/* A drain pushes a barrier onto the list like a lookup's batch: every batch of a lookup that
 * returned before the drain lies before it, and the thread marks it done once those are
 * admitted (admit_round). Lookups that keep running meanwhile push after it, so they cannot
 * hold the drain back. */
static void push(emc__host_cache *h, emc__admit_batch *b) {
  emc__admit_batch *old = __atomic_load_n(&h->adm_head, __ATOMIC_RELAXED);
  do b->next = old;
  while (!__atomic_compare_exchange_n(&h->adm_head, &old, b, 1, __ATOMIC_RELEASE,
                                      __ATOMIC_RELAXED));
  if (!old) sem_post(&h->adm_sem); /* the list was empty: the thread may be asleep */
}

void emc__admission_drain(emc_cache *c) {
  emc__host_cache *h = c->host;
  emc__admit_batch barrier;
  if (!here_bg(h)) return;
  memset(&barrier, 0, sizeof barrier);
  barrier.barrier = 1;
  push(h, &barrier);
  pthread_mutex_lock(&h->adm_mu);
  while (barrier.barrier != 2)
    pthread_cond_wait(&h->adm_cv, &h->adm_mu);
  pthread_mutex_unlock(&h->adm_mu);
}

static void admit_background(emc_cache *c, const uint64_t *ids, const uint64_t *offsets,
                             const uint64_t *keys, const uint8_t *kind, uint64_t to_admit,
                             uint64_t now) {
  emc__host_cache *h = c->host;
  emc__admit_batch *b;
  /* far more waiting misses than the cache holds would only evict one another */
  uint64_t limit = h->max_rows < EMC__ADMISSION_QUEUE_MIN ? EMC__ADMISSION_QUEUE_MIN
                   : h->max_rows < EMC_ADMISSION_QUEUE_ROWS ? h->max_rows : EMC_ADMISSION_QUEUE_ROWS;
  uint64_t was = __atomic_load_n(&h->adm_pending, __ATOMIC_RELAXED);
  do { /* reserve room in the queue, or skip: no lock, and a refused lookup takes nothing */
    if (to_admit > limit - was) {
      EMC__CNT_ADD(h->n_admit_skipped, to_admit);
      return;
    }
  } while (!__atomic_compare_exchange_n(&h->adm_pending, &was, was + to_admit, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  if (!(b = batch_of(c, ids, offsets, keys, kind, to_admit, now))) {
    EMC__CNT_ADD(h->n_admit_skipped, to_admit);
    __atomic_fetch_sub(&h->adm_pending, to_admit, __ATOMIC_RELAXED); /* undo the reservation */
    return;
  }
  push(h, b);
}

void emc__host_admit(emc_cache *c, const uint64_t *ids, const uint64_t *offsets, uint64_t *keys,
                     uint8_t *kind, uint64_t to_admit, uint64_t now) {
  if (here_bg(c->host)) admit_background(c, ids, offsets, keys, kind, to_admit, now);
  else admit_inline(c, ids, offsets, keys, kind, to_admit, now);
  free(keys);
  free(kind);
}
