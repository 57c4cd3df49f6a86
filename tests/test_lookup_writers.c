/*
 * test_lookup_writers: the pipelined read under concurrent writers (host backend).
 *
 * The host lookup's software-pipelined batched read (emc__cache_set_pipelined = 1, the
 * default; lib/internal.h), checked against the per-row path in test_lookup_paths.c, here
 * with lookups racing inserts, evictions, flushes and the index re-pack:
 *
 *   writers    one pipelined cache; 2 reader threads look up batches (1 position to 6000)
 *              while a writer thread inserts generation-encoded rows (test_threads.c's
 *              encoding) over a small hot set and flushes now and then, the cache small
 *              enough that eviction and the index re-pack run (checked): every row is one
 *              whole version of its key, never older than an insert that returned before the
 *              lookup began, never newer than one started before it returned; where[] is
 *              CACHE or STORE for every id that exists, ABSENT (zero row) for hashed ids that
 *              never did. Then exact counters, the cache's structure, the store after
 *              emc_flush and a quiescent lookup. Twice: misses admitted inline, and by the
 *              cache's admission thread (a second writer, whose re-packs race the readers'
 *              misses). 2.5 s each (0.5 s with EMC_TEST_QUICK=1).
 *
 * EMCT_VERBOSE=1 prints what the case covered.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"
#include "lookup_common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== writers */
/* Rows that encode (table, rank, generation): tests/common.h's generation rows. */
#define WR_TABLES 3u
#define HOT 48u

typedef struct wshared {
  emc_cache *c;
  const emct_world *w;
  uint32_t *started[WR_TABLES]; /* per rank: largest generation a writer published */
  uint32_t *done[WR_TABLES];    /* per rank: last generation whose emc_insert returned */
  double deadline;
} wshared;

typedef struct wworker {
  wshared *sh;
  uint32_t index;
  pthread_t th;
  emct_rng rng;
  int failed;
  char err[1024];
  uint64_t iters, positions, n_cache, n_store, n_absent, big, tiny, inserted, flushes;
} wworker;

static void wfail(wworker *wk, const char *fmt, ...) EMC_PRINTF(2, 3);
static void wfail(wworker *wk, const char *fmt, ...) {
  va_list ap;
  if (wk->failed) return;
  wk->failed = 1;
  va_start(ap, fmt);
  vsnprintf(wk->err, sizeof wk->err, fmt, ap);
  va_end(ap);
}

static const emct_tspec wr_spec[WR_TABLES] = {
    {EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0},
    {EMC_TABLE_HASHED, 1024, 3, EMC_DTYPE_F16, 1000, 400},
    {EMC_TABLE_DENSE, 1024, 2, EMC_DTYPE_F32, 0, 0}};

/* A rank of table t: one of the HOT hot ranks (spread over the ids) with probability
 * hot_in_4 / 4, else any rank of the universe. */
static uint64_t wr_rank(wworker *wk, uint32_t t, unsigned hot_in_4) {
  uint64_t u = wk->sh->w->spec[t].universe;
  if (emct_rng_below(&wk->rng, 4) < hot_in_4) return emct_rng_below(&wk->rng, HOT) * (u / HOT);
  return emct_rng_below(&wk->rng, u);
}

static void *wr_reader(void *arg) {
  wworker *wk = arg;
  wshared *sh = wk->sh;
  const emct_world *w = sh->w;
  enum { CAP = 2100 * WR_TABLES };
  uint64_t *ids = malloc(CAP * sizeof *ids), *ranks = malloc(CAP * sizeof *ranks), offsets[WR_TABLES + 1];
  uint32_t *lo = malloc(CAP * sizeof *lo);
  uint8_t *where = malloc(CAP + 1);
  unsigned char *out = malloc((size_t)CAP * 64 + 1), *scratch = malloc(1024);
  if (!ids || !ranks || !lo || !where || !out || !scratch) {
    wfail(wk, "reader %u: out of memory", wk->index);
    goto done;
  }
  while (!wk->failed && (now_s() < sh->deadline || wk->iters < 20)) {
    uint64_t k = 0, i, kind = emct_rng_below(&wk->rng, 16), per;
    unsigned char *row;
    uint32_t t;
    emc_status st;
    /* tiny (1..3 ids), big (2000 hot ids per table: a full pipeline), or medium */
    per = kind < 5 ? 0 : kind == 5 ? 2000 : 1 + emct_rng_below(&wk->rng, 64);
    offsets[0] = 0;
    if (per == 0) {
      uint64_t m = 1 + emct_rng_below(&wk->rng, 3);
      uint32_t tabs[3];
      for (i = 0; i < m; i++) tabs[i] = (uint32_t)emct_rng_below(&wk->rng, WR_TABLES);
      for (t = 0; t < WR_TABLES; t++) {
        for (i = 0; i < m; i++)
          if (tabs[i] == t) {
            ranks[k] = wr_rank(wk, t, 2);
            ids[k] = emct_id_of(w, t, ranks[k]);
            k++;
          }
        offsets[t + 1] = k;
      }
      wk->tiny++;
    } else {
      for (t = 0; t < WR_TABLES; t++) {
        uint64_t m = per == 2000 ? 2000 : emct_rng_below(&wk->rng, per + 1);
        for (i = 0; i < m; i++, k++) {
          uint64_t r = per == 2000 ? emct_rng_below(&wk->rng, HOT) * (w->spec[t].universe / HOT)
                                   : wr_rank(wk, t, 2);
          if (i > 0 && emct_rng_below(&wk->rng, 8) == 0) r = ranks[k - 1]; /* duplicates */
          if (w->spec[t].kind == EMC_TABLE_HASHED && emct_rng_below(&wk->rng, 16) == 0)
            r = w->spec[t].universe + emct_rng_below(&wk->rng, 100000); /* never present */
          ranks[k] = r;
          ids[k] = emct_id_of(w, t, r);
        }
        offsets[t + 1] = k;
      }
      wk->big += per == 2000;
    }
    for (t = 0; t < WR_TABLES; t++)
      for (i = offsets[t]; i < offsets[t + 1]; i++)
        lo[i] = ranks[i] < w->spec[t].universe ? LD_ACQ(&sh->done[t][ranks[i]]) : 0;
    memset(where, 0xee, k + 1);
    st = emc_lookup_ex(sh->c, ids, offsets, out, where, NULL);
    if (st != EMC_OK) {
      wfail(wk, "reader %u: lookup of %llu ids returned %s (%s)", wk->index,
            (unsigned long long)k, emc_status_name(st), emc_last_error_detail());
      break;
    }
    if (where[k] != 0xee) wfail(wk, "reader %u: where[] written past the batch", wk->index);
    row = out;
    for (t = 0; t < WR_TABLES && !wk->failed; t++) {
      const emct_tspec *sp = &w->spec[t];
      size_t rb = w->row_bytes[t];
      for (i = offsets[t]; i < offsets[t + 1]; i++, row += rb) {
        uint64_t r = ranks[i];
        int wh = where[i];
        char hx[64];
        if (wh != EMC_WHERE_CACHE && wh != EMC_WHERE_STORE && wh != EMC_WHERE_ABSENT) {
          wfail(wk, "reader %u: where[%llu] = %d", wk->index, (unsigned long long)i, wh);
          break;
        }
        wk->n_cache += wh == EMC_WHERE_CACHE;
        wk->n_store += wh == EMC_WHERE_STORE;
        wk->n_absent += wh == EMC_WHERE_ABSENT;
        if (r >= sp->universe) { /* a foreign hashed id: never present */
          if (!emct_is_zero(row, rb) || wh != EMC_WHERE_ABSENT) {
            wfail(wk, "reader %u: table %u: foreign id %llu at position %llu: where %d, row %s", wk->index, t,
                  (unsigned long long)ids[i], (unsigned long long)i, wh,
                  emct_hex(row, rb, hx, sizeof hx));
            break;
          }
          continue;
        }
        if (emct_is_zero(row, rb)) {
          /* the absent value: only while generation 0 may still be current, and ABSENT */
          if (lo[i] != 0 || wh != EMC_WHERE_ABSENT) {
            wfail(wk, "reader %u: table %u rank %llu at position %llu: zero row with where %d "
                  "(generation %u was committed before the lookup; a zero row is only the "
                  "absent value)", wk->index, t, (unsigned long long)r, (unsigned long long)i,
                  wh, lo[i]);
            break;
          }
          continue;
        }
        {
          int64_t g = emct_gen_decode(t, r, sp->dim, sp->dtype, row, scratch);
          uint32_t hi = LD_ACQ(&sh->started[t][r]);
          if (g < 0 || (uint32_t)g < lo[i] || (uint32_t)g > hi || wh == EMC_WHERE_ABSENT) {
            wfail(wk, "reader %u: table %u (%s dim %u) rank %llu at position %llu of %llu, where "
                  "%d: %s (generation %lld, window [%u, %u]); row %s", wk->index, t,
                  sp->dtype == EMC_DTYPE_F32 ? "f32" : "f16", sp->dim, (unsigned long long)r,
                  (unsigned long long)i, (unsigned long long)k, wh,
                  g < 0 ? "not one whole row of this key (torn or foreign)"
                        : wh == EMC_WHERE_ABSENT ? "a row reported absent"
                        : (uint32_t)g < lo[i] ? "stale: older than a committed insert"
                                              : "from the future",
                  (long long)g, lo[i], hi, emct_hex(row, rb, hx, sizeof hx));
            break;
          }
        }
      }
    }
    wk->positions += k;
    wk->iters++;
  }
done:
  free(ids); free(ranks); free(lo); free(where); free(out); free(scratch);
  return NULL;
}

static void *wr_writer(void *arg) {
  wworker *wk = arg;
  wshared *sh = wk->sh;
  const emct_world *w = sh->w;
  enum { CAP = 8 * WR_TABLES };
  uint64_t ids[CAP], ranks[CAP], offsets[WR_TABLES + 1];
  uint32_t gen[CAP];
  unsigned char rows[CAP * 64];
  while (!wk->failed && (now_s() < sh->deadline || wk->iters < 20)) {
    uint64_t k = 0, i;
    unsigned char *row = rows;
    uint32_t t;
    emc_status st;
    offsets[0] = 0;
    for (t = 0; t < WR_TABLES; t++) {
      const emct_tspec *sp = &w->spec[t];
      uint64_t m = emct_rng_below(&wk->rng, 9);
      for (i = 0; i < m; i++) {
        uint64_t r = wr_rank(wk, t, 3);
        uint32_t g = sh->started[t][r] + 1u;
        if (g > emct_gen_max(sp->dtype)) continue; /* this key has had all its generations */
        ST_REL(&sh->started[t][r], g);        /* published before the insert can show it */
        ranks[k] = r;
        ids[k] = emct_id_of(w, t, r);
        gen[k] = g;
        emct_gen_row(t, r, g, sp->dim, sp->dtype, row);
        row += w->row_bytes[t];
        k++;
      }
      offsets[t + 1] = k;
    }
    st = emc_insert(sh->c, ids, offsets, rows, NULL);
    if (st != EMC_OK) {
      wfail(wk, "writer: insert of %llu rows returned %s (%s)", (unsigned long long)k,
            emc_status_name(st), emc_last_error_detail());
      break;
    }
    for (t = 0; t < WR_TABLES; t++)
      for (i = offsets[t]; i < offsets[t + 1]; i++) ST_REL(&sh->done[t][ranks[i]], gen[i]);
    wk->inserted += k;
    wk->iters++;
    if (wk->iters % 64 == 0) {
      st = emc_flush(sh->c, NULL);
      if (st != EMC_OK) {
        wfail(wk, "writer: emc_flush returned %s", emc_status_name(st));
        break;
      }
      wk->flushes++;
    }
    pause_us(20);
  }
  return NULL;
}

START_TEST(pipelined_under_writers) {
  emct_world w;
  wshared sh;
  wworker rd[2], wr;
  emc_stats s;
  emc__cache_debug d0, d;
  uint64_t positions = 0, nc = 0, ns = 0, na = 0, t, r, big = 0, tiny = 0;
  double secs = emct_gpu_quick() ? 0.5 : 2.5, t0;
  unsigned char *scratch = xmalloc(1024), *buf = xmalloc(1024);
  int i;
  emct_world_init(&w, wr_spec, WR_TABLES, 1.0, 4242);
  memset(&sh, 0, sizeof sh);
  sh.w = &w;
  /* generation 1 of every present rank, in the store before the cache exists */
  for (t = 0; t < WR_TABLES; t++) {
    const emct_tspec *sp = &w.spec[t];
    size_t rb = w.row_bytes[t];
    unsigned char *rows = xmalloc(sp->present * rb);
    uint64_t *ids = xmalloc(sp->present * sizeof *ids);
    ck_assert(sp->universe <= EMCT_GEN_MAX_UNIVERSE && sp->universe >= HOT && sp->universe <= sp->rows);
    sh.started[t] = calloc(sp->universe, sizeof(uint32_t));
    sh.done[t] = calloc(sp->universe, sizeof(uint32_t));
    ck_assert(sh.started[t] && sh.done[t]);
    for (r = 0; r < sp->present; r++) {
      ids[r] = emct_id_of(&w, (uint32_t)t, r);
      emct_gen_row((uint32_t)t, r, 1, sp->dim, sp->dtype, rows + r * rb);
      sh.started[t][r] = sh.done[t][r] = 1;
    }
    EMCT_OK(emc_store_write(w.store, (uint32_t)t, ids, sp->present, rows));
    free(rows);
    free(ids);
  }
  /* about a fifth of the rows fit */
  /* _i: the lookups' misses admitted inline (0), or by the cache's admission thread (1), a
   * writer of its own that re-packs the index while the readers miss */
  sh.c = make_cache(&w, 6u << 10, 32, 64, 77, _i ? EMC_ADMISSION_BACKGROUND : EMC_ADMISSION_INLINE);
  EMCT_OK(emc__cache_set_pipelined(sh.c, 1));
  d0 = get_debug(sh.c);
  t0 = now_s();
  sh.deadline = t0 + secs;
  memset(rd, 0, sizeof rd);
  memset(&wr, 0, sizeof wr);
  wr.sh = &sh;
  emct_rng_seed(&wr.rng, 99);
  ck_assert_int_eq(pthread_create(&wr.th, NULL, wr_writer, &wr), 0);
  for (i = 0; i < 2; i++) {
    rd[i].sh = &sh;
    rd[i].index = (uint32_t)i;
    emct_rng_seed(&rd[i].rng, 1000 + (uint64_t)i);
    ck_assert_int_eq(pthread_create(&rd[i].th, NULL, wr_reader, &rd[i]), 0);
  }
  for (i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(rd[i].th, NULL), 0);
  ck_assert_int_eq(pthread_join(wr.th, NULL), 0);
  for (i = 0; i < 2; i++) ck_assert_msg(!rd[i].failed, "%s", rd[i].err);
  ck_assert_msg(!wr.failed, "%s", wr.err);
  if (_i) EMCT_OK(emc_flush(sh.c, NULL)); /* the queued admissions, before the counts */
  for (i = 0; i < 2; i++) {
    positions += rd[i].positions;
    nc += rd[i].n_cache;
    ns += rd[i].n_store;
    na += rd[i].n_absent;
    big += rd[i].big;
    tiny += rd[i].tiny;
  }
  s = get_stats(sh.c);
  d = get_debug(sh.c);
  if (getenv("EMCT_VERBOSE"))
    fprintf(stderr,
            "writers (%s admission): %.2f s, %llu lookups (%llu + %llu calls, %llu big, %llu tiny; cache %llu, "
            "store %llu, absent %llu), %llu rows inserted in %llu calls, %llu flushes, "
            "%llu retries, %llu evictions, %llu write-backs, %llu unified hits, %llu admissions, "
            "%llu skipped, %llu re-pack sweeps\n",
            _i ? "background" : "inline", now_s() - t0, (unsigned long long)positions, (unsigned long long)rd[0].iters,
            (unsigned long long)rd[1].iters, (unsigned long long)big, (unsigned long long)tiny,
            (unsigned long long)nc, (unsigned long long)ns, (unsigned long long)na,
            (unsigned long long)wr.inserted, (unsigned long long)wr.iters,
            (unsigned long long)wr.flushes, (unsigned long long)s.retries,
            (unsigned long long)s.evictions, (unsigned long long)s.writebacks,
            (unsigned long long)s.unified_hits, (unsigned long long)s.admissions,
            (unsigned long long)s.admit_skipped, (unsigned long long)(d.index_rebuilds - d0.index_rebuilds));
  ck_assert_uint_eq(s.lookups, positions);
  ck_assert_msg(s.hits == nc && s.misses == ns && s.absent == na,
                "stats (hits %llu, misses %llu, absent %llu) disagree with where[] (%llu, %llu, %llu)",
                (unsigned long long)s.hits, (unsigned long long)s.misses, (unsigned long long)s.absent,
                (unsigned long long)nc, (unsigned long long)ns, (unsigned long long)na);
  ck_assert_uint_eq(s.inserts, wr.inserted);
  ck_assert_msg(nc > 0 && ns > 0 && na > 0, "no hits (%llu), misses (%llu) or absent ids (%llu)",
                (unsigned long long)nc, (unsigned long long)ns, (unsigned long long)na);
  ck_assert_msg(big > 0 && tiny > 0, "no big (%llu) or tiny (%llu) batch ran", (unsigned long long)big,
                (unsigned long long)tiny);
  ck_assert_msg(s.evictions > 0 && s.writebacks > 0, "evictions %llu write-backs %llu",
                (unsigned long long)s.evictions, (unsigned long long)s.writebacks);
  ck_assert_msg(d.index_rebuilds > d0.index_rebuilds, "no index re-pack sweep ran during the traffic");
  emct_check_cache(sh.c, &w, 0, "after the traffic");
  /* quiescent: the store after a flush, then a lookup of every rank, hold the last generation */
  EMCT_OK(emc_flush(sh.c, NULL));
  ck_assert_uint_eq(get_stats(sh.c).dirty_rows, 0);
  for (t = 0; t < WR_TABLES; t++) {
    const emct_tspec *sp = &w.spec[t];
    size_t rb = w.row_bytes[t];
    uint64_t offs[WR_TABLES + 1], u;
    uint8_t where[1];
    for (u = 0; u <= WR_TABLES; u++) offs[u] = u > t ? 1 : 0;
    for (r = 0; r < sp->universe; r++) {
      uint64_t id = emct_id_of(&w, (uint32_t)t, r);
      uint32_t g = sh.done[t][r];
      ck_assert_uint_eq(g, sh.started[t][r]);
      EMCT_OK(emc_store_read(w.store, (uint32_t)t, &id, 1, buf));
      if (g == 0) ck_assert_msg(emct_is_zero(buf, rb), "store: table %llu rank %llu never written, not zero",
                                (unsigned long long)t, (unsigned long long)r);
      else ck_assert_msg(emct_gen_decode((uint32_t)t, r, sp->dim, sp->dtype, buf, scratch) == (int64_t)g,
                         "store: table %llu rank %llu does not hold generation %u",
                         (unsigned long long)t, (unsigned long long)r, g);
      EMCT_OK(emc_lookup_ex(sh.c, &id, offs, buf, where, NULL));
      if (g == 0) ck_assert_msg(emct_is_zero(buf, rb) && where[0] == EMC_WHERE_ABSENT,
                                "lookup: table %llu rank %llu never written: where %u",
                                (unsigned long long)t, (unsigned long long)r, where[0]);
      else ck_assert_msg(emct_gen_decode((uint32_t)t, r, sp->dim, sp->dtype, buf, scratch) == (int64_t)g &&
                             where[0] != EMC_WHERE_ABSENT,
                         "lookup: table %llu rank %llu: not generation %u (where %u)",
                         (unsigned long long)t, (unsigned long long)r, g, where[0]);
    }
  }
  if (_i) EMCT_OK(emc_flush(sh.c, NULL)); /* their admissions, before the check */
  emct_check_cache(sh.c, &w, 0, "after the quiescent lookups");
  EMCT_OK(emc_cache_destroy(sh.c));
  for (t = 0; t < WR_TABLES; t++) {
    free(sh.started[t]);
    free(sh.done[t]);
  }
  free(scratch);
  free(buf);
  emct_world_free(&w);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lookup_writers");
  TCase *tw = tcase_create("under writers");
  SRunner *sr;
  int failed;
  tcase_add_loop_test(tw, pipelined_under_writers, 0, 2);
  tcase_set_timeout(tw, emct_timeout(30));
  suite_add_tcase(s, tw);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
