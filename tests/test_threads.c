/*
 * test_threads: the concurrency suite (label "threads"; meant to run under ThreadSanitizer
 * too: configure with CC=clang -DEMC_SANITIZE=thread).
 *
 * embcache.h documents emc_lookup, emc_lookup_ex, emc_insert, emc_flush and emc_get_stats as
 * callable concurrently from any number of threads (and emc_store_read concurrently with
 * anything). These tests run exactly those calls at once on a small cache, so evictions,
 * write-backs, index rebuilds and unified-index entries happen all the time, and check:
 *
 *   every row a lookup returns is a value its key legitimately held during the call
 *     Rows are generated from (table, rank, generation g) and can be decoded: a reader
 *     decodes g from the row and requires (1) the row belongs to this table and rank, (2) the
 *     whole row is the row of generation g (not torn, not mixed with another row), and
 *     (3) done_before <= g <= started_after, where done_before is the last generation of the
 *     key whose emc_insert had returned before the lookup began and started_after the
 *     largest generation any writer had published (before calling emc_insert) by the time
 *     the lookup returned. Generation 0 of a hashed key is "absent": a zero row.
 *   after the traffic: the exact counters (lookups, inserts) and the stats invariants, the
 *     cache structure (emc__cache_check), and after emc_flush the store holds the last
 *     generation of every key; a quiescent lookup of every key returns exactly that.
 *   lookups only: every row equals the store's row (uniform values), where[] is exact and
 *     the store is untouched.
 *   emc_get_stats from several threads at once: counters never go backwards, gauges stay
 *     within the budget.
 *
 * The same file, compiled with EMCT_GPU, is the GPU suite test_gpu_threads (label gpu): the
 * cache is a CUDA cache, every reader looks up from device buffers on a stream of its own
 * (four reader streams at once) while writer threads insert generation-encoded rows under
 * constant eviction; the rows are checked as above, the device structures by emc__cuda_check.
 * It exits 77 where no device answers, and runs without fork (CUDA does not survive fork).
 *
 * Seeds and time: each case runs under EMCT_SEEDS seeds (default 4; 2 under sanitizers), the
 * iterations shared between them, and prints the rows it looked up and checked; EMCT_THREADS_SECONDS=S turns the suite into a hunt
 * of S seconds (new seeds until each case's share has passed). History: with the compact
 * index this suite failed about one run in ten ("stale row: older than a committed insert",
 * issue 16: a reader decided on an entry word without re-checking the key it belonged to);
 * tests/test_protocol.c now forces that interleaving, and every other of one reader step
 * against one writer step.
 *
 * Keys are split between writers (rank % n_writers), so the generations of one key are
 * inserted in order by one thread. Worker threads never call ck_assert (Check's failure path
 * is not thread-safe): they record the first failure and stop; the main thread asserts.
 * Work is bounded by iteration counts, scaled down under sanitizers (emct_scale).
 *
 * The suite is one executable built from parts (threads_common.h): this file (the cases and
 * main), threads_workers.c (the threads), threads_runner.c (a run and its checks).
 *
 * History: these tests found a race in an earlier eviction pass (a lookup's stamp older than
 * every stamp the pass's first scan saw sent its histogram index out of bounds); stamps are
 * now ages clamped by the writer (lib/item/policy.h, "LRU stamps"), which no lookup can undercut.
 */
#define _POSIX_C_SOURCE 200809L
#include "threads_common.h"

#ifdef EMCT_GPU
/* Four reader streams (device buffers) and writer threads inserting generation-encoded rows,
 * the cache evicting all along: every row a value its key legitimately held. */
START_TEST(gpu_four_streams_one_writer) {
  run_config rc = {
      .name = "gpu: 4 reader streams, 1 writer, mixed tables, 32-bit keys",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 8, EMC_DTYPE_F16, 900, 300},
               {EMC_TABLE_DENSE, 600, 33, EMC_DTYPE_F16, 0, 0}},
      .capacity = 48u << 10,
      .key_bits = 32,
      .unified_rows = 64,
      .readers = 4, .writers = 1, .flushers = 1, .statters = 1,
      .reader_iters = 4000, .writer_iters = 2000,
      .reader_ids = 48, .writer_ids = 16};
  run_seeds(&rc, 133);
}
END_TEST

START_TEST(gpu_four_streams_two_writers_hashed) {
  run_config rc = {
      .name = "gpu: 4 reader streams, 2 writers, hashed f32, unified entries",
      .n = 1,
      .spec = {{EMC_TABLE_HASHED, 1024, 12, EMC_DTYPE_F32, 1000, 500}},
      .capacity = 16u << 10,
      .t1 = 0.9f, .t2 = 0.6f,
      .unified_rows = 96,
      .readers = 4, .writers = 2, .flushers = 0, .statters = 1,
      .reader_iters = 4000, .writer_iters = 2000,
      .reader_ids = 48, .writer_ids = 12};
  run_seeds(&rc, 122);
}
END_TEST

START_TEST(gpu_four_streams_lookups_only) {
  run_config rc = {
      .name = "gpu: 4 reader streams, lookups only",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 24, EMC_DTYPE_F16, 800, 400},
               {EMC_TABLE_DENSE, 512, 5, EMC_DTYPE_F32, 0, 0}},
      .capacity = 32u << 10,
      .unified_rows = 128,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 4000,
      .reader_ids = 32};
  run_seeds(&rc, 144);
}
END_TEST

int main(void) {
  int failed;
  Suite *s;
  TCase *tc;
  SRunner *sr;
  if (!emct_gpu_present("test_gpu_threads")) return 77;
  s = suite_create("gpu_threads");
  tc = tcase_create("concurrency");
  tcase_add_test(tc, gpu_four_streams_one_writer);
  tcase_add_test(tc, gpu_four_streams_two_writers_hashed);
  tcase_add_test(tc, gpu_four_streams_lookups_only);
  n_cases = 3;
  tcase_set_timeout(tc, 600.0 + 2.0 * (double)env_u64("EMCT_THREADS_SECONDS", 0) / n_cases);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
#else
/* ------------------------------------------------------------------- tests */
/* dense f32 only: 3 readers, 1 writer, 1 flusher, 1 stats thread; about a third of the rows fit */
START_TEST(readers_writer_dense_f32) {
  run_config rc = {
      .name = "dense f32",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0}},
      .capacity = 24u << 10,
      .unified_rows = 0,
      .readers = 3, .writers = 1, .flushers = 1, .statters = 1,
      .reader_iters = 30000, .writer_iters = 30000,
      .reader_ids = 48, .writer_ids = 16};
  run_seeds(&rc, 11);
}
END_TEST

/* hashed f32 only, half the ids present at start, the rest created by inserts; 2 writers;
 * a few unified-index entries, so they are created, dropped and turned back into slots */
START_TEST(readers_writers_hashed_f32) {
  run_config rc = {
      .name = "hashed f32",
      .n = 1,
      .spec = {{EMC_TABLE_HASHED, 1024, 12, EMC_DTYPE_F32, 1000, 500}},
      .capacity = 16u << 10,
      .t1 = 0.9f, .t2 = 0.6f,
      .unified_rows = 96,
      .readers = 3, .writers = 2, .flushers = 1, .statters = 1,
      .reader_iters = 30000, .writer_iters = 20000,
      .reader_ids = 48, .writer_ids = 12};
  run_seeds(&rc, 22);
}
END_TEST

/* three tables in every batch: dense f32, hashed f16, dense f16 with an odd row size (66
 * bytes: rows that end inside a 4-byte word); 32-bit keys; 2 writers, 2 stats threads */
START_TEST(readers_writers_mixed_f16) {
  run_config rc = {
      .name = "mixed dense/hashed f32/f16",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1000, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 8, EMC_DTYPE_F16, 900, 300},
               {EMC_TABLE_DENSE, 600, 33, EMC_DTYPE_F16, 0, 0}},
      .capacity = 48u << 10,
      .key_bits = 32,
      .unified_rows = 64,
      .readers = 3, .writers = 2, .flushers = 1, .statters = 2,
      .reader_iters = 20000, .writer_iters = 10000,
      .reader_ids = 24, .writer_ids = 8};
  run_seeds(&rc, 33);
}
END_TEST

/* no writers: 4 readers and 2 stats threads over uniform rows; every row must equal the
 * store's, where[] is exact, and the store is untouched */
START_TEST(concurrent_lookups_only) {
  run_config rc = {
      .name = "lookups only",
      .n = 3,
      .spec = {{EMC_TABLE_DENSE, 1024, 16, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 1024, 24, EMC_DTYPE_F16, 800, 400},
               {EMC_TABLE_DENSE, 512, 5, EMC_DTYPE_F32, 0, 0}},
      .capacity = 32u << 10,
      .unified_rows = 128,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 2,
      .reader_iters = 30000,
      .reader_ids = 32};
  run_seeds(&rc, 44);
}
END_TEST

/* A slow reader: reader 0 looks up batches of 4096 hot ids, so the clock value it took at the
 * start of a call is old by the time it copies (and stamps) its hits, while three readers with
 * small batches keep the clock moving and eviction passes running. Its stamps can be older
 * than every stamp an eviction pass saw in its first scan. */
START_TEST(slow_reader_old_stamps) {
  run_config rc = {
      .name = "slow reader",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1024, 8, EMC_DTYPE_F32, 0, 0}},
      .capacity = 12u << 10,
      .unified_rows = 0,
      .readers = 4, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 40000, .big_iters = 300,
      .reader_ids = 8, .big_ids = 4096};
  run_seeds(&rc, 66);
}
END_TEST

/* Many small rows (4 bytes) in a larger cache: eviction passes scan tens of thousands of
 * slots while six readers with more threads than cores (so readers are preempted in the
 * middle of a lookup) keep hitting and stamping slots. */
START_TEST(many_readers_long_passes) {
  run_config rc = {
      .name = "long passes",
      .n = 1,
      .spec = {{EMC_TABLE_DENSE, 1u << 17, 1, EMC_DTYPE_F32, 0, 0}},
      .capacity = 48u << 10, /* fills within the sanitizers' third of the iterations */
      .t1 = 0.95f, .t2 = 0.93f,
      .unified_rows = 0,
      .readers = 6, .writers = 0, .flushers = 0, .statters = 1,
      .reader_iters = 10000,
      .reader_ids = 64};
  run_seeds(&rc, 77);
}
END_TEST

/* emc_get_stats from four threads at once, while readers, a writer and a flusher run */
START_TEST(concurrent_stats) {
  run_config rc = {
      .name = "stats",
      .n = 2,
      .spec = {{EMC_TABLE_DENSE, 512, 8, EMC_DTYPE_F32, 0, 0},
               {EMC_TABLE_HASHED, 512, 8, EMC_DTYPE_F32, 512, 256}},
      .capacity = 12u << 10,
      .unified_rows = 32,
      .readers = 2, .writers = 1, .flushers = 1, .statters = 4,
      .reader_iters = 10000, .writer_iters = 10000,
      .reader_ids = 16, .writer_ids = 8};
  run_seeds(&rc, 55);
}
END_TEST

int main(void) {
  Suite *s = suite_create("threads");
  TCase *tc = tcase_create("concurrency");
  SRunner *sr;
  int failed;
  tcase_add_test(tc, readers_writer_dense_f32);
  tcase_add_test(tc, readers_writers_hashed_f32);
  tcase_add_test(tc, readers_writers_mixed_f16);
  tcase_add_test(tc, concurrent_lookups_only);
  tcase_add_test(tc, concurrent_stats);
  tcase_add_test(tc, slow_reader_old_stamps);
  tcase_add_test(tc, many_readers_long_passes);
  n_cases = 7;
  /* a hunt's case runs its share of the time, then finishes the seed under way */
  /* 4 s of work on an idle 2-core machine; the margin is for a machine that runs other suites */
  tcase_set_timeout(tc, emct_timeout(120) + 2.0 * (double)env_u64("EMCT_THREADS_SECONDS", 0) / n_cases);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
#endif
