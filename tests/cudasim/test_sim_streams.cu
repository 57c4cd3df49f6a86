/*
 * test_sim_streams.cu: the model's streams, events and graphs in serial mode (cuda/sim/README.md,
 * "Streams, events, graphs"): work runs only when the host waits for it, and then only what that
 * wait depends on; so a host read before its synchronization sees poison or stale bytes, a
 * missing event wait lets the consumer run first, and an event query never reports work done
 * that has not run. Graph capture records launches with their argument values and runs nothing;
 * replays work; the runtime's refusals during capture are the model's.
 *
 * Serial mode only (the ctest entry leaves EMC_CUDASIM_MODE unset); every outcome here is
 * deterministic whatever EMC_CUDASIM_SEED is (the suite also runs under another seed).
 */
#include "cudasim_test.h"

__global__ void k_store(int *p, int v) { *p = v; }
__global__ void k_add(int *p, int v) { atomicAdd(p, v); }
/* y = x + 1, from one device word to another */
__global__ void k_next(const int *x, int *y) { *y = *x + 1; }

static int *pinned_ints(size_t n) {
  int *p = NULL;
  CU_OK(cudaHostAlloc(&p, n * sizeof(int), 0));
  return p;
}

/* ================================================================ host reads */

START_TEST(host_read_before_sync_sees_poison_then_stale_then_result) {
  cudaStream_t s;
  int *h = pinned_ints(2), *d = dev_alloc<int>(1);
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, h, 7));
  ck_assert_msg((unsigned)h[0] == SIM_POISON_PINNED, "before the synchronize the host read 0x%08x", (unsigned)h[0]);
  CU_OK(cudaStreamSynchronize(s));
  ck_assert_int_eq(h[0], 7);
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, h, 8));
  ck_assert_int_eq(h[0], 7); /* stale */
  CU_OK(cudaStreamSynchronize(s));
  ck_assert_int_eq(h[0], 8);
  /* an asynchronous copy into pinned memory: the same */
  CU_OK(cudaMemcpyAsync(d, &h[0], sizeof(int), cudaMemcpyHostToDevice, s));
  CU_OK(cudaMemcpyAsync(&h[1], d, sizeof(int), cudaMemcpyDeviceToHost, s));
  ck_assert_msg((unsigned)h[1] == SIM_POISON_PINNED, "before the synchronize the copy's target held 0x%08x",
                (unsigned)h[1]);
  CU_OK(cudaStreamSynchronize(s));
  ck_assert_int_eq(h[1], 8);
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFreeHost(h));
  CU_OK(cudaFree(d));
}
END_TEST

/* ================================================================ event waits between streams */

START_TEST(missing_event_wait_lets_the_consumer_run_first) {
  cudaStream_t prod, cons;
  cudaEvent_t e;
  int *d = dev_alloc<int>(1), *h = pinned_ints(1);
  CU_OK(cudaStreamCreateWithFlags(&prod, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&cons, cudaStreamNonBlocking));
  CU_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  /* break: the consumer copies without waiting; the host waits for the consumer only */
  CU_OK(sim_launch("k_store", 1, 1, prod, k_store, d, 5));
  CU_OK(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDeviceToHost, cons));
  CU_OK(cudaStreamSynchronize(cons));
  ck_assert_msg((unsigned)*h == SIM_POISON_DEVICE, "without the wait the consumer read 0x%08x (the producer ran first)",
                (unsigned)*h);
  CU_OK(cudaStreamSynchronize(prod));
  /* keep: the consumer waits on the producer's event */
  CU_OK(sim_launch("k_store", 1, 1, prod, k_store, d, 6));
  CU_OK(cudaEventRecord(e, prod));
  CU_OK(cudaStreamWaitEvent(cons, e, 0));
  CU_OK(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDeviceToHost, cons));
  CU_OK(cudaStreamSynchronize(cons));
  ck_assert_int_eq(*h, 6);
  CU_OK(cudaEventDestroy(e));
  CU_OK(cudaStreamDestroy(prod));
  CU_OK(cudaStreamDestroy(cons));
  CU_OK(cudaFree(d));
  CU_OK(cudaFreeHost(h));
}
END_TEST

/* The legacy stream synchronizes with blocking streams, not with non-blocking ones. */
START_TEST(legacy_stream_orders_blocking_streams_only) {
  cudaStream_t blocking, nonblocking;
  int *d = dev_alloc<int>(1), *h = pinned_ints(1);
  CU_OK(cudaStreamCreate(&blocking));
  CU_OK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  CU_OK(sim_launch("k_store", 1, 1, 0, k_store, d, 9));
  CU_OK(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDeviceToHost, blocking));
  CU_OK(cudaStreamSynchronize(blocking));
  ck_assert_int_eq(*h, 9); /* waited for the legacy stream's kernel */
  CU_OK(sim_launch("k_store", 1, 1, 0, k_store, d, 10));
  CU_OK(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDeviceToHost, nonblocking));
  CU_OK(cudaStreamSynchronize(nonblocking));
  ck_assert_int_eq(*h, 9); /* did not wait: the legacy kernel has not run */
  CU_OK(cudaDeviceSynchronize());
  /* and the other way: legacy-stream work waits for a blocking stream's */
  CU_OK(sim_launch("k_store", 1, 1, blocking, k_store, d, 11));
  CU_OK(cudaMemcpy(h, d, sizeof(int), cudaMemcpyDeviceToHost));
  ck_assert_int_eq(*h, 11);
  CU_OK(cudaStreamDestroy(blocking));
  CU_OK(cudaStreamDestroy(nonblocking));
  CU_OK(cudaFree(d));
  CU_OK(cudaFreeHost(h));
}
END_TEST

/* ================================================================ queries */

/* The model answers a query either way (by seed), but "done" only for work that has run. */
START_TEST(queries_never_report_work_that_has_not_run) {
  enum { N = 64 };
  cudaStream_t s;
  cudaEvent_t ev[N];
  int *h = pinned_ints(2 * N), done = 0, not_ready = 0;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < N; i++) {
    CU_OK(cudaEventCreate(&ev[i]));
    CU_OK(sim_launch("k_store", 1, 1, s, k_store, &h[i], i + 1));
    CU_OK(cudaEventRecord(ev[i], s));
    cudaError_t e = cudaEventQuery(ev[i]);
    if (e == cudaSuccess) {
      done++;
      ck_assert_msg(h[i] == i + 1, "cudaEventQuery said done, but the kernel before it has not run (0x%08x)", (unsigned)h[i]);
    } else {
      ck_assert_msg(e == cudaErrorNotReady, "cudaEventQuery returned %s", cudaGetErrorName(e));
      not_ready++;
      ck_assert_msg((unsigned)h[i] == SIM_POISON_PINNED, "cudaEventQuery said not ready, and the kernel has run");
    }
  }
  ck_assert_msg(done > 0 && not_ready > 0, "cudaEventQuery answered done %d times, not ready %d times: the model "
                "should answer either way", done, not_ready);
  (void)cudaGetLastError(); /* cudaErrorNotReady is not sticky */
  /* cudaStreamQuery: the same */
  done = not_ready = 0;
  for (int i = 0; i < N; i++) {
    CU_OK(sim_launch("k_store", 1, 1, s, k_store, &h[N + i], i + 1));
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) {
      done++;
      ck_assert_msg(h[N + i] == i + 1, "cudaStreamQuery said done, but the kernel has not run");
    } else {
      ck_assert_int_eq(e, cudaErrorNotReady);
      not_ready++;
      ck_assert_msg((unsigned)h[N + i] == SIM_POISON_PINNED, "cudaStreamQuery said not ready, and the kernel has run");
    }
  }
  ck_assert_msg(done > 0 && not_ready > 0, "cudaStreamQuery answered done %d, not ready %d times", done, not_ready);
  (void)cudaGetLastError();
  /* an event never recorded is complete; synchronized events are complete and timed */
  cudaEvent_t fresh;
  float ms = -1;
  CU_OK(cudaEventCreate(&fresh));
  CU_OK(cudaEventQuery(fresh));
  CU_OK(cudaEventSynchronize(ev[N - 1]));
  CU_OK(cudaEventQuery(ev[N - 1]));
  CU_OK(cudaEventElapsedTime(&ms, ev[0], ev[N - 1]));
  ck_assert(ms >= 0);
  /* an event whose work has not run has no time yet */
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, &h[0], 0));
  CU_OK(cudaEventRecord(fresh, s));
  cudaError_t e = cudaEventElapsedTime(&ms, ev[0], fresh);
  if (cudaEventQuery(fresh) == cudaErrorNotReady) ck_assert_int_eq(e, cudaErrorNotReady);
  CU_OK(cudaStreamSynchronize(s));
  (void)cudaGetLastError();
  for (int i = 0; i < N; i++) CU_OK(cudaEventDestroy(ev[i]));
  CU_OK(cudaEventDestroy(fresh));
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFreeHost(h));
}
END_TEST

/* ================================================================ graphs */

START_TEST(capture_runs_nothing_and_keeps_argument_values) {
  cudaStream_t s;
  cudaGraph_t g;
  cudaGraphExec_t x;
  cudaStreamCaptureStatus st;
  int *h = pinned_ints(1), *d = dev_alloc<int>(1), v = 5;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU_OK(cudaMemset(d, 0, sizeof(int)));
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_OK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
  /* the typed cudaLaunchKernel with a void ** argument array: the values are read at capture */
  void *args[] = {&d, &v};
  CU_OK(cudaLaunchKernel(k_add, dim3(1), dim3(1), args, 0, s));
  v = 1000; /* too late: the graph keeps 5 */
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, h, 77));
  ck_assert_msg((unsigned)*h == SIM_POISON_PINNED, "a captured kernel ran during the capture");
  CU_OK(cudaStreamEndCapture(s, &g));
  CU_OK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
  ck_assert_msg((unsigned)*h == SIM_POISON_PINNED, "a captured kernel ran at the end of the capture");
  size_t count = 0;
  CU_OK(cudaGraphGetNodes(g, NULL, &count));
  ck_assert_uint_eq(count, 2);
  cudaGraphNode_t nodes[2];
  cudaGraphNodeType type;
  CU_OK(cudaGraphGetNodes(g, nodes, &count));
  CU_OK(cudaGraphNodeGetType(nodes[0], &type));
  ck_assert_int_eq(type, cudaGraphNodeTypeKernel);
  CU_OK(cudaGraphInstantiate(&x, g, 0));
  /* replays: each adds 5 */
  for (int i = 1; i <= 4; i++) {
    CU_OK(cudaGraphLaunch(x, s));
    CU_OK(cudaStreamSynchronize(s));
    int r;
    to_host(&r, d, 1);
    ck_assert_int_eq(r, 5 * i);
    ck_assert_int_eq(*h, 77);
  }
  CU_OK(cudaGraphExecDestroy(x));
  CU_OK(cudaGraphDestroy(g));
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaFree(d));
  CU_OK(cudaFreeHost(h));
}
END_TEST

/* Fork and join with events: A on s1; B on s2 after A; C on s1 after B. Replayed with the
 * words cleared each time; the model runs a graph's ready nodes in a seeded order, so a missing
 * edge would show. Copies and memsets are captured as nodes too. */
START_TEST(capture_fork_join_replays) {
  cudaStream_t s1, s2;
  cudaEvent_t fork, join;
  cudaGraph_t g;
  cudaGraphExec_t x;
  int *w = dev_alloc<int>(3), *h = pinned_ints(3), one = 1;
  int *src = dev_alloc<int>(1);
  to_dev(src, &one, 1);
  CU_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CU_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CU_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CU_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CU_OK(cudaMemsetAsync(w, 0, 3 * sizeof(int), s1));
  CU_OK(cudaMemcpyAsync(&w[0], src, sizeof(int), cudaMemcpyDeviceToDevice, s1)); /* A: x = 1 */
  CU_OK(cudaEventRecord(fork, s1));
  CU_OK(cudaStreamWaitEvent(s2, fork, 0));
  cudaStreamCaptureStatus st;
  CU_OK(cudaStreamIsCapturing(s2, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusActive); /* s2 joined the capture */
  CU_OK(sim_launch("k_next", 1, 1, s2, k_next, (const int *)&w[0], &w[1])); /* B: y = x + 1 */
  CU_OK(cudaEventRecord(join, s2));
  CU_OK(cudaStreamWaitEvent(s1, join, 0));
  CU_OK(sim_launch("k_next", 1, 1, s1, k_next, (const int *)&w[1], &w[2])); /* C: z = y + 1 */
  CU_OK(cudaMemcpyAsync(h, w, 3 * sizeof(int), cudaMemcpyDeviceToHost, s1));
  CU_OK(cudaStreamEndCapture(s1, &g));
  CU_OK(cudaGraphInstantiate(&x, g, 0));
  for (int i = 0; i < 8; i++) {
    memset(h, 0, 3 * sizeof(int));
    CU_OK(cudaGraphLaunch(x, s1));
    CU_OK(cudaStreamSynchronize(s1));
    ck_assert_msg(h[0] == 1 && h[1] == 2 && h[2] == 3, "replay %d: x %d y %d z %d", i, h[0], h[1], h[2]);
  }
  CU_OK(cudaGraphExecDestroy(x));
  CU_OK(cudaGraphDestroy(g));
  CU_OK(cudaEventDestroy(fork));
  CU_OK(cudaEventDestroy(join));
  CU_OK(cudaStreamDestroy(s1));
  CU_OK(cudaStreamDestroy(s2));
  CU_OK(cudaFree(w));
  CU_OK(cudaFree(src));
  CU_OK(cudaFreeHost(h));
}
END_TEST

START_TEST(capture_unjoined_fork_fails) {
  cudaStream_t s1, s2;
  cudaEvent_t fork;
  cudaGraph_t g = (cudaGraph_t)0x1;
  cudaStreamCaptureStatus st;
  int *d = dev_alloc<int>(2);
  CU_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CU_OK(cudaEventCreate(&fork));
  CU_OK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  CU_OK(sim_launch("k_store", 1, 1, s1, k_store, d, 1));
  CU_OK(cudaEventRecord(fork, s1));
  CU_OK(cudaStreamWaitEvent(s2, fork, 0));
  CU_OK(sim_launch("k_store", 1, 1, s2, k_store, d + 1, 2));
  CU_ERR(cudaErrorStreamCaptureUnjoined, cudaStreamEndCapture(s1, &g));
  ck_assert_ptr_null(g);
  /* both streams are out of the capture and work again */
  CU_OK(cudaStreamIsCapturing(s2, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
  CU_OK(sim_launch("k_store", 1, 1, s2, k_store, d + 1, 3));
  CU_OK(cudaStreamSynchronize(s2));
  int r;
  to_host(&r, d + 1, 1);
  ck_assert_int_eq(r, 3);
  (void)cudaGetLastError();
  CU_OK(cudaEventDestroy(fork));
  CU_OK(cudaStreamDestroy(s1));
  CU_OK(cudaStreamDestroy(s2));
  CU_OK(cudaFree(d));
}
END_TEST

START_TEST(capture_refusals_invalidate_it) {
  cudaStream_t s, other;
  cudaGraph_t g;
  cudaEvent_t outside, inside;
  cudaStreamCaptureStatus st;
  void *p = NULL;
  int *d = dev_alloc<int>(1), host_word = 0;
  CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU_OK(cudaStreamCreate(&other)); /* blocking */
  CU_OK(cudaEventCreate(&outside));
  CU_OK(cudaEventCreate(&inside));

  /* synchronizing the capturing stream */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, d, 1));
  CU_ERR(cudaErrorStreamCaptureUnsupported, cudaStreamSynchronize(s));
  CU_OK(cudaStreamIsCapturing(s, &st));
  ck_assert_int_eq(st, cudaStreamCaptureStatusInvalidated);
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &g));

  /* a potentially unsafe call in global mode: refused, and the capture is invalidated */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_ERR(cudaErrorStreamCaptureUnsupported, cudaMalloc(&p, 64));
  CU_ERR(cudaErrorStreamCaptureUnsupported, cudaMemcpy(d, &host_word, sizeof(int), cudaMemcpyHostToDevice));
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &g));

  /* relaxed mode allows it */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CU_OK(cudaMalloc(&p, 64));
  CU_OK(sim_launch("k_store", 1, 1, s, k_store, (int *)p, 4));
  CU_OK(cudaStreamEndCapture(s, &g));
  CU_OK(cudaGraphDestroy(g));
  CU_OK(cudaFree(p));

  /* so does a thread that exchanged its mode to relaxed during a global capture */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CU_OK(cudaThreadExchangeStreamCaptureMode(&mode));
  ck_assert_int_eq(mode, cudaStreamCaptureModeGlobal);
  CU_OK(cudaMalloc(&p, 64));
  CU_OK(cudaThreadExchangeStreamCaptureMode(&mode));
  CU_OK(cudaStreamEndCapture(s, &g));
  CU_OK(cudaGraphDestroy(g));
  CU_OK(cudaFree(p));

  /* a copy from pageable memory cannot be captured */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_ERR(cudaErrorStreamCaptureUnsupported, cudaMemcpyAsync(d, &host_word, sizeof(int), cudaMemcpyHostToDevice, s));
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &g));

  /* waiting on an event recorded outside the capture */
  CU_OK(cudaEventRecord(outside, other));
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_ERR(cudaErrorStreamCaptureIsolation, cudaStreamWaitEvent(s, outside, 0));
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &g));

  /* querying an event recorded in the capture */
  CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CU_OK(cudaEventRecord(inside, s));
  CU_ERR(cudaErrorCapturedEvent, cudaEventQuery(inside));
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(s, &g));

  /* the legacy stream while a blocking stream captures */
  CU_OK(cudaStreamBeginCapture(other, cudaStreamCaptureModeRelaxed));
  CU_ERR(cudaErrorStreamCaptureImplicit, sim_launch("k_store", 1, 1, 0, k_store, d, 5));
  CU_ERR(cudaErrorStreamCaptureInvalidated, cudaStreamEndCapture(other, &g));

  /* none of this is sticky */
  (void)cudaGetLastError();
  CU_OK(cudaDeviceSynchronize());
  CU_OK(cudaEventDestroy(outside));
  CU_OK(cudaEventDestroy(inside));
  CU_OK(cudaStreamDestroy(s));
  CU_OK(cudaStreamDestroy(other));
  CU_OK(cudaFree(d));
}
END_TEST

int main(void) {
  if (strcmp(emcsim_mode(), "serial") != 0) {
    fprintf(stderr, "test_sim_streams: the model runs in %s mode; these tests need serial\n", emcsim_mode());
    return 1;
  }
  Suite *s = suite_create("cudasim_streams");
  TCase *tc = sim_tcase(s, "order");
  tcase_add_test(tc, host_read_before_sync_sees_poison_then_stale_then_result);
  tcase_add_test(tc, missing_event_wait_lets_the_consumer_run_first);
  tcase_add_test(tc, legacy_stream_orders_blocking_streams_only);
  tcase_add_test(tc, queries_never_report_work_that_has_not_run);
  tc = sim_tcase(s, "graphs");
  tcase_add_test(tc, capture_runs_nothing_and_keeps_argument_values);
  tcase_add_test(tc, capture_fork_join_replays);
  tcase_add_test(tc, capture_unjoined_fork_fails);
  tcase_add_test(tc, capture_refusals_invalidate_it);
  return sim_run(s);
}
