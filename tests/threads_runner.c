/*
 * threads_runner.c: a run of test_threads (threads_common.h): the cache and its world, the
 * threads started and joined, the checks after the traffic; several seeds or a time.
 */
#define _POSIX_C_SOURCE 200809L
#include "threads_common.h"

/* --------------------------------------------------------------- the runner */
/* The white-box check of the backend under test, and the invariants emct_check_cache adds
 * for the host backend. */
static void check_cache(emc_cache *c, const emct_world *w, int no_inserts, const char *what) {
#ifdef EMCT_GPU
  emc_stats s;
  emc_status st = emc__cuda_check(c);
  (void)w;
  (void)no_inserts;
  ck_assert_msg(st == EMC_OK, "%s: emc__cuda_check: %s (%s)", what, emc_status_name(st),
                emc_last_error_detail());
  EMCT_OK(emc_get_stats(c, &s));
  ck_assert_msg(s.hits + s.misses + s.absent == s.lookups, "%s: counters do not add up", what);
#else
  emct_check_cache(c, w, no_inserts, what);
#endif
}

typedef struct run_totals {
  uint64_t positions, nowhere, cache, store, absent, inserted, range_errors;
  uint64_t retries, evictions, writebacks, unified; /* the cache's counters */
} run_totals;

static void start_all(worker *wk, uint32_t n, shared *sh, uint64_t seed, void *(*fn)(void *)) {
  uint32_t i;
  for (i = 0; i < n; i++) {
    memset(&wk[i], 0, sizeof wk[i]);
    wk[i].sh = sh;
    wk[i].index = i;
    emct_rng_seed(&wk[i].rng, seed * 1000003u + i);
    ck_assert_int_eq(pthread_create(&wk[i].th, NULL, fn, &wk[i]), 0);
  }
}

static void join_all(worker *wk, uint32_t n) {
  uint32_t i;
  for (i = 0; i < n; i++) ck_assert_int_eq(pthread_join(wk[i].th, NULL), 0);
}

static void assert_workers(const worker *wk, uint32_t n, const char *role, const char *what) {
  uint32_t i;
  for (i = 0; i < n; i++)
    ck_assert_msg(!wk[i].failed, "%s: %s %u: %s", what, role, i, wk[i].err);
}

/* Read every rank of every table from the store and check it holds generation done[t][r]. */
static void check_store_final(const shared *sh, const char *what) {
  uint32_t t;
  unsigned char *buf = malloc((size_t)EMC_MAX_DIM * 4), *scratch = malloc((size_t)EMC_MAX_DIM * 4);
  ck_assert(buf && scratch);
  for (t = 0; t < sh->n; t++) {
    const tinfo *ti = &sh->tb[t];
    uint64_t r, count = 0, have = 0;
    for (r = 0; r < ti->universe; r++) {
      uint64_t id = emct_id_of(sh->w, t, r);
      uint32_t g = sh->done[t][r];
      ck_assert_msg(g == sh->started[t][r], "%s: table %u rank %llu: started %u != done %u", what,
                    t, (unsigned long long)r, sh->started[t][r], g);
      EMCT_OK(emc_store_read(sh->store, t, &id, 1, buf));
      if (g == 0) {
        ck_assert_msg(emct_is_zero(buf, ti->row_bytes),
                      "%s: store table %u id %llu (rank %llu) never written but not zero", what,
                      t, (unsigned long long)id, (unsigned long long)r);
      } else {
        int64_t got = emct_gen_decode(t, r, ti->dim, ti->dtype, buf, scratch);
        ck_assert_msg(got == (int64_t)g,
                      "%s: store table %u (%s %s) id %llu (rank %llu) holds generation %lld, the "
                      "last inserted is %u", what, t, kind_name(ti->kind), dtype_name(ti->dtype),
                      (unsigned long long)id, (unsigned long long)r, (long long)got, g);
        count++;
      }
    }
    if (ti->kind == EMC_TABLE_HASHED) {
      EMCT_OK(emc_store_table_count(sh->store, t, &have));
      ck_assert_msg(have == count, "%s: hashed table %u holds %llu ids, %llu were written", what, t,
                    (unsigned long long)have, (unsigned long long)count);
    }
  }
  free(buf);
  free(scratch);
}

/* Quiescent lookup of every rank of every table: exactly the last generation. */
static void check_lookup_final(const shared *sh, const char *what) {
  uint64_t offsets[MAX_TABLES + 1], total = 0, k = 0, r, i;
  uint64_t *ids, *ranks;
  uint8_t *where;
  unsigned char *out, *row, *scratch = malloc((size_t)EMC_MAX_DIM * 4);
  size_t bytes = 0;
  uint32_t t;
  for (t = 0; t < sh->n; t++) {
    total += sh->tb[t].universe;
    bytes += sh->tb[t].universe * sh->tb[t].row_bytes;
  }
  ids = malloc(total * sizeof *ids);
  ranks = malloc(total * sizeof *ranks);
  where = malloc(total);
  out = malloc(bytes);
  ck_assert(ids && ranks && where && out && scratch);
  offsets[0] = 0;
  for (t = 0; t < sh->n; t++) {
    for (r = 0; r < sh->tb[t].universe; r++, k++) {
      ranks[k] = r;
      ids[k] = emct_id_of(sh->w, t, r);
    }
    offsets[t + 1] = k;
  }
  EMCT_OK(emc_lookup_ex(sh->c, ids, offsets, out, where, NULL));
  row = out;
  for (t = 0; t < sh->n; t++) {
    const tinfo *ti = &sh->tb[t];
    for (i = offsets[t]; i < offsets[t + 1]; i++, row += ti->row_bytes) {
      uint32_t g = sh->done[t][ranks[i]];
      if (g == 0) {
        ck_assert_msg(emct_is_zero(row, ti->row_bytes) && where[i] == EMC_WHERE_ABSENT,
                      "%s: table %u rank %llu never written: where %u, zero %d", what, t,
                      (unsigned long long)ranks[i], where[i], emct_is_zero(row, ti->row_bytes));
      } else {
        int64_t got = emct_gen_decode(t, ranks[i], ti->dim, ti->dtype, row, scratch);
        ck_assert_msg(got == (int64_t)g && where[i] != EMC_WHERE_ABSENT,
                      "%s: table %u (%s %s) rank %llu: quiescent lookup gave generation %lld "
                      "(where %u), the last inserted is %u", what, t, kind_name(ti->kind),
                      dtype_name(ti->dtype), (unsigned long long)ranks[i], (long long)got,
                      where[i], g);
      }
    }
  }
  free(ids); free(ranks); free(where); free(out); free(scratch);
}

/* Quiescent: a lookup whose ids miss admits them (nothing holds the writer lock, nothing is
 * pinned), and every miss is counted as admitted or skipped. */
static void check_admission(const shared *sh, const char *what) {
  const tinfo *ti = &sh->tb[0];
  uint64_t offsets[MAX_TABLES + 1], ids[64], n = ti->universe < 64 ? ti->universe : 64, i, misses = 0;
  uint8_t where[64];
  unsigned char *out = malloc(64 * (size_t)ti->row_bytes);
  emc_stats a, b;
  uint32_t t;
  ck_assert(out);
  offsets[0] = 0;
  for (t = 1; t <= sh->n; t++) offsets[t] = n;
  for (i = 0; i < n; i++) ids[i] = emct_id_of(sh->w, 0, i);
  EMCT_OK(emc_get_stats(sh->c, &a));
  EMCT_OK(emc_lookup_ex(sh->c, ids, offsets, out, where, NULL));
#ifdef EMCT_GPU
  EMCT_OK(emc_flush(sh->c, NULL)); /* the misses are admitted by the writer call after it */
#endif
  EMCT_OK(emc_get_stats(sh->c, &b));
  for (i = 0; i < n; i++) misses += where[i] == EMC_WHERE_STORE;
  ck_assert_msg(b.admissions - a.admissions + b.admit_skipped - a.admit_skipped == misses,
                "%s: a quiescent lookup missed %llu rows, admitted %llu and skipped %llu", what,
                (unsigned long long)misses, (unsigned long long)(b.admissions - a.admissions),
                (unsigned long long)(b.admit_skipped - a.admit_skipped));
  ck_assert_msg(misses == 0 || b.admissions > a.admissions,
                "%s: a quiescent lookup admitted none of its %llu misses (%llu skipped)", what,
                (unsigned long long)misses, (unsigned long long)(b.admit_skipped - a.admit_skipped));
  free(out);
}

/* One run of rc's configuration under `seed`, its readers and writers doing `iter_pct` % of
 * rc's iterations; adds what it did to *sum. */
static void run_traffic(const run_config *rc, uint64_t seed, uint32_t iter_pct, run_totals *sum) {
  emct_world w;
  shared sh;
  emc_cache_config cfg;
  emc__cache_debug dbg;
  emc_stats s0, s;
  worker *rd, *wr, *fl, *stt;
  run_totals tot;
  uint32_t t, i;
  int static_mode = rc->writers == 0;
  char what[128];

  emct_world_init(&w, rc->spec, rc->n, 1.0, seed);
  memset(&sh, 0, sizeof sh);
  memset(&tot, 0, sizeof tot);
  sh.w = &w;
  sh.store = w.store;
  sh.n = rc->n;
  sh.static_mode = static_mode;
  sh.n_writers = rc->writers ? rc->writers : 1;
  sh.reader_iters = emct_gpu_scale(emct_scale(rc->reader_iters * iter_pct / 100 + 1, 3), 16);
  sh.writer_iters = emct_gpu_scale(emct_scale(rc->writer_iters * iter_pct / 100 + 1, 3), 16);
  sh.reader_ids = rc->reader_ids;
  sh.writer_ids = rc->writer_ids;
  sh.big_ids = rc->big_ids;
  sh.big_iters = emct_scale(rc->big_iters * iter_pct / 100 + 1, 3);
  ck_assert(rc->n <= MAX_TABLES);
  for (t = 0; t < rc->n; t++) {
    tinfo *ti = &sh.tb[t];
    uint64_t r;
    ti->kind = w.spec[t].kind;
    ti->dtype = w.spec[t].dtype;
    ti->dim = w.spec[t].dim;
    ti->row_bytes = w.row_bytes[t];
    ti->universe = w.spec[t].universe;
    ti->present = w.spec[t].present;
    ck_assert_msg((static_mode || ti->universe <= EMCT_GEN_MAX_UNIVERSE) && ti->universe >= HOT,
                  "test sizes: universe");
    ck_assert_msg(ti->kind == EMC_TABLE_DENSE || ti->universe <= w.spec[t].rows,
                  "test sizes: hashed capacity below the universe");
    sh.started[t] = calloc(ti->universe, sizeof(uint32_t));
    sh.done[t] = calloc(ti->universe, sizeof(uint32_t));
    ck_assert(sh.started[t] && sh.done[t]);
    if (static_mode) continue;
    /* generation 1 of every present rank, written to the store before the cache exists */
    {
      unsigned char *rows = malloc(ti->present * ti->row_bytes + 1);
      uint64_t *ids = malloc((ti->present + 1) * sizeof *ids);
      ck_assert(rows && ids);
      for (r = 0; r < ti->present; r++) {
        ids[r] = emct_id_of(&w, t, r);
        emct_gen_row(t, r, 1, ti->dim, ti->dtype, rows + r * ti->row_bytes);
        sh.started[t][r] = sh.done[t][r] = 1;
      }
      EMCT_OK(emc_store_write(w.store, t, ids, ti->present, rows));
      free(rows);
      free(ids);
    }
  }

  emct_cache_config_init(&cfg);
  cfg.backend = EMCT_GPU_ON ? EMC_BACKEND_CUDA : EMC_BACKEND_HOST;
  cfg.capacity_bytes = rc->capacity;
  if (rc->t1 > 0) cfg.evict_high = rc->t1;
  if (rc->t2 > 0) cfg.evict_low = rc->t2;
  if (rc->key_bits) cfg.key_bits = rc->key_bits;
  cfg.unified_index_rows = rc->unified_rows;
  cfg.hash_seed = seed;
  EMCT_OK(emc_cache_create(w.store, &cfg, &sh.c));
  EMCT_OK(emc_get_stats(sh.c, &s0));
#ifdef EMCT_GPU
  (void)dbg; /* host-backend counters; t1 as the pool geometry computes it */
  sh.high_bytes = (uint64_t)((double)cfg.capacity_bytes * cfg.evict_high);
#else
  EMCT_OK(emc__cache_get_debug(sh.c, &dbg));
  sh.high_bytes = dbg.high_bytes;
#endif
  sh.capacity = s0.capacity_bytes;
  sh.index_bytes = s0.index_bytes;

  rd = calloc(rc->readers + 1, sizeof *rd);
  wr = calloc(rc->writers + 1, sizeof *wr);
  fl = calloc(rc->flushers + 1, sizeof *fl);
  stt = calloc(rc->statters + 1, sizeof *stt);
  ck_assert(rd && wr && fl && stt);
  start_all(stt, rc->statters, &sh, seed + 4, stats_main);
  start_all(fl, rc->flushers, &sh, seed + 3, flusher_main);
  start_all(wr, rc->writers, &sh, seed + 2, writer_main);
  start_all(rd, rc->readers, &sh, seed + 1, reader_main);
  join_all(rd, rc->readers);
  join_all(wr, rc->writers);
  ST_REL(&sh.stop, 1);
  join_all(fl, rc->flushers);
  join_all(stt, rc->statters);

  snprintf(what, sizeof what, "%s (seed %llu)", rc->name, (unsigned long long)seed);
  assert_workers(rd, rc->readers, "reader", what);
  assert_workers(wr, rc->writers, "writer", what);
  assert_workers(fl, rc->flushers, "flusher", what);
  assert_workers(stt, rc->statters, "stats thread", what);
  for (i = 0; i < rc->readers; i++) {
    uint64_t want = i == 0 && sh.big_ids ? sh.big_iters : sh.reader_iters;
    ck_assert_msg(rd[i].iters == want, "%s: reader %u ran %llu of %llu iterations", what, i,
                  (unsigned long long)rd[i].iters, (unsigned long long)want);
    tot.positions += rd[i].positions;
    tot.nowhere += rd[i].nowhere_positions;
    tot.cache += rd[i].n_cache;
    tot.store += rd[i].n_store;
    tot.absent += rd[i].n_absent;
    tot.range_errors += rd[i].range_errors;
  }
  for (i = 0; i < rc->writers; i++) {
    ck_assert_msg(wr[i].iters == sh.writer_iters, "%s: writer %u ran %llu of %llu iterations", what,
                  i, (unsigned long long)wr[i].iters, (unsigned long long)sh.writer_iters);
    tot.inserted += wr[i].positions;
  }
  for (i = 0; i < rc->flushers; i++)
    ck_assert_msg(fl[i].iters > 0, "%s: flusher %u never ran", what, i);

  /* counters after the traffic: exact where the test knows the numbers */
  EMCT_OK(emc_get_stats(sh.c, &s));
  for (i = 0; i < rc->statters; i++) {
    ck_assert_msg(stt[i].iters > 0, "%s: stats thread %u never ran", what, i);
#define NOT_AHEAD(f)                                                                       \
    ck_assert_msg(stt[i].last.f <= s.f, "%s: stats thread %u saw " #f " %llu > final %llu", \
                  what, i, (unsigned long long)stt[i].last.f, (unsigned long long)s.f);
    STAT_COUNTERS(NOT_AHEAD)
#undef NOT_AHEAD
  }
  ck_assert_msg(s.lookups == tot.positions, "%s: lookups %llu, the readers looked up %llu", what,
                (unsigned long long)s.lookups, (unsigned long long)tot.positions);
  ck_assert_msg(s.hits + s.misses + s.absent == s.lookups,
                "%s: hits %llu + misses %llu + absent %llu != lookups %llu", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent, (unsigned long long)s.lookups);
  ck_assert_msg(s.hits >= tot.cache && s.misses >= tot.store && s.absent >= tot.absent &&
                    s.hits - tot.cache + s.misses - tot.store + s.absent - tot.absent == tot.nowhere,
                "%s: stats (hits %llu, misses %llu, absent %llu) disagree with where[] (cache "
                "%llu, store %llu, absent %llu, plus %llu positions without where)", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses,
                (unsigned long long)s.absent, (unsigned long long)tot.cache,
                (unsigned long long)tot.store, (unsigned long long)tot.absent,
                (unsigned long long)tot.nowhere);
  if (tot.nowhere == 0)
    ck_assert_msg(s.hits == tot.cache && s.misses == tot.store && s.absent == tot.absent,
                  "%s: stats and where[] disagree", what);
  ck_assert_msg(s.inserts == tot.inserted, "%s: inserts %llu, the writers inserted %llu rows",
                what, (unsigned long long)s.inserts, (unsigned long long)tot.inserted);
  ck_assert_msg(s.hits > 0 && s.misses > 0, "%s: no hits (%llu) or no misses (%llu)", what,
                (unsigned long long)s.hits, (unsigned long long)s.misses);
  ck_assert_msg(s.evictions > 0 && s.evict_passes > 0,
                "%s: the cache never evicted (evictions %llu, passes %llu): too large for the test",
                what, (unsigned long long)s.evictions, (unsigned long long)s.evict_passes);
  /* a lookup admits only when it wins the writer lock's trylock: under load every try may lose,
   * so the traffic only proves the admission path ran; check_admission proves it admits */
  ck_assert_msg(s.admissions + s.admit_skipped > 0, "%s: no admission was tried", what);
  if (!static_mode) ck_assert_msg(s.writebacks > 0, "%s: no write-backs", what);
  sum->positions += tot.positions;
  sum->cache += tot.cache;
  sum->store += tot.store;
  sum->absent += tot.absent;
  sum->nowhere += tot.nowhere;
  sum->inserted += tot.inserted;
  sum->range_errors += tot.range_errors;
  sum->retries += s.retries;
  sum->evictions += s.evictions;
  sum->writebacks += s.writebacks;
  sum->unified += s.unified_hits;
  check_cache(sh.c, &w, static_mode, what);
  check_admission(&sh, what);

  if (static_mode) {
    emct_world_check_store(&w, what); /* lookups never change the store */
  } else {
    EMCT_OK(emc_flush(sh.c, NULL));
    EMCT_OK(emc_get_stats(sh.c, &s));
    ck_assert_msg(s.dirty_rows == 0, "%s: %llu dirty rows after emc_flush", what,
                  (unsigned long long)s.dirty_rows);
    check_store_final(&sh, what);
    check_lookup_final(&sh, what);
    check_cache(sh.c, &w, 0, what);
  }
  EMCT_OK(emc_cache_destroy(sh.c));
  if (static_mode) emct_world_check_store(&w, what);
  else check_store_final(&sh, what);

  if (getenv("EMCT_VERBOSE"))
    fprintf(stderr,
            "%s: %llu lookups (hits %llu, misses %llu, absent %llu, unified %llu, retries %llu"
            "), %llu inserts, %llu admissions (%llu skipped), %llu evictions "
            "in %llu passes, %llu write-backs, %llu refused lookups\n",
            what, (unsigned long long)s.lookups, (unsigned long long)s.hits,
            (unsigned long long)s.misses, (unsigned long long)s.absent,
            (unsigned long long)s.unified_hits, (unsigned long long)s.retries,
            (unsigned long long)s.inserts,
            (unsigned long long)s.admissions, (unsigned long long)s.admit_skipped,
            (unsigned long long)s.evictions, (unsigned long long)s.evict_passes,
            (unsigned long long)s.writebacks, (unsigned long long)tot.range_errors);

  for (t = 0; t < rc->n; t++) {
    free(sh.started[t]);
    free(sh.done[t]);
  }
  free(rd); free(wr); free(fl); free(stt);
  emct_world_free(&w);
}

/* ------------------------------------------------------------------ seeds and time
 * Each test case runs its configuration under several seeds (each seed gives other hashed
 * ids, another key codec seed, other thread schedules): EMCT_SEEDS of them (default 4, 2 under
 * sanitizers), each doing 100 / seeds % of the case's iterations (at least a quarter). With
 * EMCT_THREADS_SECONDS=S the suite hunts for S seconds instead: each case draws new seeds at
 * full iterations until its share of S has passed. Every case prints what it checked. */
uint32_t n_cases = 1; /* test cases of the suite, set by main (shares of the time) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  char *end;
  unsigned long long x;
  if (!v || !*v) return dflt;
  x = strtoull(v, &end, 10);
  ck_assert_msg(*end == '\0', "%s=%s is not a number", name, v);
  return x;
}

void run_seeds(const run_config *rc, uint64_t base) {
  uint64_t hunt_s = env_u64("EMCT_THREADS_SECONDS", 0);
  uint64_t seeds = env_u64("EMCT_SEEDS", EMCT_SANITIZED || emct_gpu_quick() ? 2 : 4), k;
  uint32_t pct = seeds >= 4 ? 25u : (uint32_t)(100 / (seeds ? seeds : 1));
  double t0 = now_s(), share = hunt_s ? (double)hunt_s / n_cases : 0.0;
  run_totals sum;
  memset(&sum, 0, sizeof sum);
  if (pct > 100) pct = 100;
  if (hunt_s) pct = 100;
  for (k = 0; hunt_s ? (k == 0 || now_s() - t0 < share) : k < seeds; k++)
    run_traffic(rc, base + 1000u * k, pct, &sum);
  fprintf(stderr,
          "test_threads: %s: %llu seeds (%llu, %llu, ...) in %.1f s: %llu rows looked up and "
          "checked (cache %llu, store %llu, absent %llu, %llu without where), %llu inserted; "
          "%llu retries, %llu evictions, %llu write-backs, %llu unified-entry reads\n",
          rc->name, (unsigned long long)k, (unsigned long long)base,
          (unsigned long long)(base + 1000u), now_s() - t0, (unsigned long long)sum.positions,
          (unsigned long long)sum.cache, (unsigned long long)sum.store,
          (unsigned long long)sum.absent, (unsigned long long)sum.nowhere,
          (unsigned long long)sum.inserted, (unsigned long long)sum.retries,
          (unsigned long long)sum.evictions, (unsigned long long)sum.writebacks,
          (unsigned long long)sum.unified);
}
