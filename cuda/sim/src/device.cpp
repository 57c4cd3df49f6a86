/*
 * device.cpp: the execution of kernels in the CPU model: blocks one after another (in a seeded
 * order), each block's threads as fibers on the calling OS thread, warp collectives and
 * __syncthreads as barriers over their participants, and the checks that make a kernel that
 * breaks the device's rules fail with a one-line report instead of passing or hanging.
 *
 * Scheduling inside a block: threads start in a seeded order on runners (fibers that run one
 * thread after another: a thread that never waits costs a call, not a context switch); a thread
 * that waits (a collective, __syncthreads), yields (__nanosleep, or every EMCSIM_PREEMPT
 * instrumented operations: sm_70+ schedules the threads of a warp independently, so a thread
 * spinning on another thread of its block must let it run) keeps its runner, and the next
 * thread starts on another. A round resumes the runnable waiting threads in the seeded order,
 * then starts the threads not yet started. A collective completes when the last of its lanes arrives; a block in which no
 * thread can run and some wait is stuck: the report names the collective no lane can
 * complete and why (a lane that exited, a lane at another collective or at __syncthreads).
 *
 * Forward progress: a thread that goes through more than config().watchdog_ops instrumented
 * operations (relaxed / acquire loads, atomics, fences, __nanosleep) in one launch is reported
 * as waiting for something no thread of its kernel will do: in serial mode no other kernel
 * runs meanwhile, and the device promises no progress between kernels either. A launch that
 * runs longer than config().watchdog_s seconds of wall time (a wait the model cannot see: a
 * spin on plain loads) ends the process with the same report.
 */
#include <errno.h>
#include <unistd.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fiber.h"
#include "model.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMCSIM_DEVICE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(EMCSIM_DEVICE_ASAN)
#define EMCSIM_DEVICE_ASAN 1
#endif
#ifdef EMCSIM_DEVICE_ASAN
extern "C" {
void *__asan_get_current_fake_stack(void);
void *__asan_addr_is_in_fake_stack(void *fake_stack, void *addr, void **beg, void **end);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
}
#endif

extern "C" {
extern char __start_emcsim_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_emcsim_shared[] __attribute__((weak, visibility("hidden")));
}

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace emcsim {

/* A thread's built-in variables (the globals above hold the running fiber's). */
struct Builtins {
  uint3 tid, bid;
  dim3 bdim, gdim;
};

#define EMCSIM_PREEMPT 256u /* instrumented operations between preemption points */

/* ---------------------------------------------------------------- block state */
struct Block;
enum { ST_RUN = 0, ST_WAITW, ST_WAITB, ST_DONE };

struct Thr {
  Builtins bi;
  unsigned linear = 0, lane = 0, warp = 0;
  Block *b = nullptr;
  Fiber *f = nullptr;    /* the runner it runs on, once started */
  int started = 0;
  int st = ST_RUN;
  /* the collective this thread waits at (ST_WAITW) */
  int kind = 0, arg = 0, width = 32;
  unsigned mask = 0, bytes = 0;
  uint64_t val = 0, result = 0;
  const char *site = "";
  /* watchdog */
  uint64_t ops = 0;
  unsigned since_yield = 0;
};

/* A warp's lanes: waiting at a warp collective, exited (or absent: a partial last warp). */
struct WarpSt {
  unsigned waiting = 0, exited = 0;
};

struct Runner;

struct Block {
  const KernelRun *k = nullptr;
  uint3 bid = {0, 0, 0};
  Host host;
  Thr *th = nullptr;     /* nthreads */
  WarpSt *warps = nullptr;
  unsigned n = 0, live = 0, at_bar = 0;
  uint64_t perm_a = 1, perm_c = 0;  /* threads start in the seeded order (i * a + c) mod n */
  unsigned next_start = 0;         /* the next thread to start, in that order */
  std::vector<unsigned> *runq = nullptr; /* started threads that may go on (resumed in a
                                            seeded order each round) */
  std::vector<Runner *> *idle = nullptr; /* runners free to start threads */
  Runner *zombie = nullptr;        /* a runner that ended and may still be on its stack: idle
                                      again once another fiber runs */
  const char *bar_site = "";
  bool fault = false;
  uint64_t switches = 0;
};

/* A fiber that starts threads of a block one after another until one waits (then the thread
 * keeps it) or none is left to start (then it goes back to the block's idle list). */
struct Runner {
  Fiber f;
  Block *b = nullptr;
  int from_host = 1; /* the first switch into it came from the host's stack */
};

thread_local Thr *tl_thr = nullptr;

/* Runners of this OS thread, reused by every block it runs. */
struct Pool {
  std::vector<Runner *> r;
  ~Pool() {
    for (Runner *x : r) {
      fiber_free(&x->f);
      delete x;
    }
  }
};
thread_local Pool tl_pool;

/* ---------------------------------------------------------------- shared memory poison */
/* This OS thread's copy of the section emcsim_shared (every __shared__ variable). */
static thread_local unsigned char *tl_shared_base = nullptr;
static thread_local size_t tl_shared_size = 0;

static void poison_shared() {
  unsigned char *&base = tl_shared_base;
  size_t &size = tl_shared_size;
  thread_local bool known = false;
  if (!known) {
    known = true;
    if (__start_emcsim_shared && __stop_emcsim_shared > __start_emcsim_shared) {
      struct Find {
        uintptr_t start;
        unsigned char *block;
        uintptr_t vaddr;
      } fd = {(uintptr_t)__start_emcsim_shared, nullptr, 0};
      dl_iterate_phdr(
          [](struct dl_phdr_info *i, size_t, void *d) -> int {
            Find *x = (Find *)d;
            for (int k = 0; k < i->dlpi_phnum; k++) {
              const ElfW(Phdr) &ph = i->dlpi_phdr[k];
              if (ph.p_type != PT_TLS) continue;
              uintptr_t lo = i->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
              if (x->start >= lo && x->start < hi) {
                x->block = (unsigned char *)i->dlpi_tls_data;
                x->vaddr = lo;
                return 1;
              }
            }
            return 0;
          },
          &fd);
      if (fd.block) {
        base = fd.block + (fd.start - fd.vaddr);
        size = (size_t)(__stop_emcsim_shared - __start_emcsim_shared);
      }
    }
  }
  if (!base) return;
#ifdef EMCSIM_DEVICE_ASAN
  /* the thread's TLS block: glibc reuses an exited thread's stack mapping for a new thread,
   * and where the new thread's TLS lies, ASan's shadow may still hold the old thread's stack
   * redzones (seen once in 6 ASan runs of test_gpu_threads: "stack-buffer-underflow") */
  __asan_unpoison_memory_region(base, size);
#endif
  memset(base, 0xA5, size);
}

/* ---------------------------------------------------------------- reports */
static std::string block_name(const Block *b) {
  char s[96];
  snprintf(s, sizeof s, "block (%u,%u,%u)", b->th[0].bi.bid.x, b->th[0].bi.bid.y,
           b->th[0].bi.bid.z);
  return s;
}

static std::string thread_name(const Thr *t) {
  char s[96];
  snprintf(s, sizeof s, "thread (%u,%u,%u) (warp %u lane %u)", t->bi.tid.x, t->bi.tid.y,
           t->bi.tid.z, t->warp, t->lane);
  return s;
}

static const char *coll_name(int kind) {
  switch (kind) {
  case COLL_SYNCWARP: return "__syncwarp";
  case COLL_BALLOT: return "__ballot_sync";
  case COLL_ANY: return "__any_sync";
  case COLL_ALL: return "__all_sync";
  case COLL_SHFL: return "__shfl_sync";
  case COLL_SHFL_UP: return "__shfl_up_sync";
  case COLL_SHFL_DOWN: return "__shfl_down_sync";
  case COLL_SHFL_XOR: return "__shfl_xor_sync";
  case COLL_MATCH_ANY: return "__match_any_sync";
  default: return "a warp collective";
  }
}

static std::string where_waits(const Thr *u) {
  char s[256];
  if (u->st == ST_DONE) return "has exited";
  if (u->st == ST_WAITB) {
    snprintf(s, sizeof s, "waits at __syncthreads (%s)", u->b->bar_site);
    return s;
  }
  if (u->st == ST_WAITW) {
    snprintf(s, sizeof s, "waits at %s(mask 0x%08x) (%s)", coll_name(u->kind), u->mask, u->site);
    return s;
  }
  return "runs";
}

/* End the block: the kernel faults (sticky), the report is one line. Switches to the host for
 * good when called on a fiber, whose frames are then never unwound: nothing in them may own
 * heap memory, or LeakSanitizer reports it at exit (fix: the rule and detail were std::string
 * temporaries of the callers' frames, and mem_op's `why` a local: every fault leaked them).
 * Hence C strings here and in every caller. */
static void block_fault(Block *b, cudaError_t e, const char *rule, const char *detail) {
  {
    std::string line = std::string("emc-cudasim: ") + rule + ": kernel " + b->k->name + ", " + block_name(b) +
                       ": " + detail;
    if (!b->fault) raise_fault(b->k->device, e, line);
  }
  b->fault = true;
  Thr *t = tl_thr;
  if (t && t->b == b) {
    t->st = ST_DONE;
    b->switches++;
    fiber_switch(&b->host, t->f, &b->host.self, 1, 1); /* the host ends the block */
    abort(); /* never resumed */
  }
}

void device_fault(int cuda_error, const char *rule, const char *detail) {
  Thr *t = tl_thr;
  if (!t) {
    fprintf(stderr, "emc-cudasim: %s outside a kernel: %s\n", rule, detail);
    abort();
  }
  char d[768];
  snprintf(d, sizeof d, "%s: %s", thread_name(t).c_str(), detail);
  block_fault(t->b, (cudaError_t)cuda_error, rule, d);
  abort();
}

/* ---------------------------------------------------------------- switching */
/* A launch's own generator, seeded from the model's seeded one (no lock per draw). */
static thread_local uint64_t tl_rng = 0;
static uint64_t local_random() {
  uint64_t z = (tl_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void set_builtins(const Thr *t);

/* The next started thread that may go on, in a seeded order; NULL when none. */
static Thr *next_runnable(Block *b) {
  std::vector<unsigned> &q = *b->runq;
  while (!q.empty()) {
    size_t x = (size_t)(local_random() % q.size());
    unsigned i = q[x];
    q[x] = q.back();
    q.pop_back();
    if (b->th[i].st == ST_RUN && b->th[i].started) return &b->th[i];
  }
  return nullptr;
}

static void runner_entry(void *arg);

/* The running fiber `from` stops (it waits, yields, or has ended: dead). The next thread that
 * may go on runs instead, straight from this fiber (no round trip through the host: half the
 * switches), or a fresh runner for threads not started yet, or, when neither is left, the
 * host's scheduler. Returns when `from` is resumed (never when dead). */
static void leave(Block *b, Fiber *from, int dead) {
  Thr *n;
  b->switches++;
  if (b->zombie && &b->zombie->f != from) { /* its stack is free now */
    b->idle->push_back(b->zombie);
    b->zombie = nullptr;
  }
  n = b->fault ? nullptr : next_runnable(b);
  if (n) {
    tl_thr = n;
    set_builtins(n);
    fiber_switch(&b->host, from, n->f, 0, dead);
  } else if (!b->fault && b->next_start < b->n && !b->idle->empty()) {
    Runner *r = b->idle->back();
    b->idle->pop_back();
    r->b = b;
    r->from_host = 0;
    fiber_init(&r->f, runner_entry, r);
    fiber_switch(&b->host, from, &r->f, 0, dead);
  } else {
    fiber_switch(&b->host, from, &b->host.self, 1, dead);
  }
}

static void yield_to_host(Thr *t) {
  Block *b = t->b;
  if (t->st == ST_RUN) b->runq->push_back(t->linear); /* a back-off or preemption: it goes on */
  leave(b, t->f, 0);
  /* resumed (whoever switched here set the built-in variables) */
  tl_thr = t;
}

/* Every thread at __syncthreads goes on (`self`, running, is not queued). */
static void release_barrier(Block *b, Thr *self) {
  for (unsigned i = 0; i < b->n; i++)
    if (b->th[i].st == ST_WAITB) {
      b->th[i].st = ST_RUN;
      if (&b->th[i] != self) b->runq->push_back(i);
    }
  b->at_bar = 0;
}

/* A thread's end: the block's counts, and the faults its exit makes certain. */
static void thread_exit(Thr *t) {
  Block *b = t->b;
  WarpSt *w = &b->warps[t->warp];
  t->st = ST_DONE;
  b->live--;
  w->exited |= 1u << t->lane;
  /* a collective of its warp that names it can never complete */
  for (unsigned m = w->waiting; m; m &= m - 1) {
    Thr *u = &b->th[t->warp * 32 + (unsigned)__builtin_ctz(m)];
    if (u->mask >> t->lane & 1u) {
      char d[256];
      snprintf(d, sizeof d, "%s: %s(mask 0x%08x) at %s names lane %u, which has exited",
               thread_name(u).c_str(), coll_name(u->kind), u->mask, u->site, t->lane);
      block_fault(b, cudaErrorLaunchFailure, "collective over an exited lane", d);
    }
  }
  if (b->at_bar > 0 && b->at_bar == b->live) release_barrier(b, nullptr); /* the others go on */
}

static void set_builtins(const Thr *t) {
  threadIdx = t->bi.tid;
  blockIdx = t->bi.bid;
  blockDim = t->bi.bdim;
  gridDim = t->bi.gdim;
}

static void runner_entry(void *arg) {
  Runner *r = (Runner *)arg;
  Block *b = r->b;
  fiber_arrived(&b->host, &r->f, r->from_host);
  while (b->next_start < b->n && !b->fault) {
    unsigned i = (unsigned)(((uint64_t)b->next_start++ * b->perm_a + b->perm_c) % b->n);
    const KernelRun &k = *b->k;
    Thr *t = &b->th[i];
    t->bi.tid = {i % k.block.x, i / k.block.x % k.block.y, i / (k.block.x * k.block.y)};
    t->bi.bid = b->bid;
    t->bi.bdim = k.block;
    t->bi.gdim = k.grid;
    t->f = &r->f;
    t->started = 1;
    tl_thr = t;
    set_builtins(t);
    const_cast<Closure *>(b->k->closure)->invoke();
    thread_exit(t);
  }
  /* nothing left to start: the runner ends; its stack is reused once another fiber runs */
  tl_thr = nullptr;
  if (b->zombie) b->idle->push_back(b->zombie); /* an earlier one: its stack is free (we run) */
  b->zombie = r;
  leave(b, &r->f, 1);
  abort(); /* a dead fiber is never resumed */
}

/* Resume a started thread that waited (its runner), until it waits again or its runner ends. */
static void run_fiber(Block *b, Thr *t) {
  tl_thr = t;
  set_builtins(t);
  b->switches++;
  fiber_switch(&b->host, &b->host.self, t->f, 0, 0);
  tl_thr = nullptr;
}

/* Start threads on an idle runner, until one waits or none is left to start. */
static void start_threads(Block *b) {
  Runner *r;
  if (b->zombie) {
    b->idle->push_back(b->zombie);
    b->zombie = nullptr;
  }
  r = b->idle->back();
  b->idle->pop_back();
  r->b = b;
  r->from_host = 1;
  fiber_init(&r->f, runner_entry, r);
  b->switches++;
  fiber_switch(&b->host, &b->host.self, &r->f, 0, 0);
  tl_thr = nullptr;
}

/* ---------------------------------------------------------------- the watchdog */
static void watch(Thr *t, uint64_t cost) {
  t->ops += cost;
  uint64_t bound = config().watchdog_ops * (config().serial ? 1u : 16u);
  if (t->ops > bound) {
    char d[512];
    count_violation();
    snprintf(d, sizeof d,
             "%s went through %llu instrumented operations (loads, atomics, fences, "
             "__nanosleep) without finishing: it waits for a state that no thread of this "
             "kernel will make (%s mode; EMC_CUDASIM_WATCHDOG=%llu). A kernel may only wait for a "
             "write that a resident thread has begun and finishes without waiting itself: the "
             "device guarantees no progress between kernels, streams or the host",
             thread_name(t).c_str(), (unsigned long long)t->ops,
             config().serial ? "serial: no other kernel runs meanwhile" : "concurrent",
             (unsigned long long)config().watchdog_ops);
    block_fault(t->b, cudaErrorLaunchTimeout, "forward-progress violation", d);
  }
  if (++t->since_yield >= EMCSIM_PREEMPT) {
    t->since_yield = 0;
    yield_to_host(t);
  }
}

/* Shared memory and the thread's own stack (local memory) are always reachable. */
static bool local_memory(const Thr *t, uintptr_t a, size_t bytes) {
  uintptr_t sb = (uintptr_t)tl_shared_base, fb = (uintptr_t)t->f->stack;
  if (a >= sb && a + bytes <= sb + tl_shared_size) return true;
#ifdef EMCSIM_DEVICE_ASAN
  /* fix: under AddressSanitizer's detect_stack_use_after_return (make test sets it) a local
   * lives in a heap-allocated fake frame, not on the fiber's stack: an atomic on a local was an
   * "illegal address" */
  void *fs = __asan_get_current_fake_stack();
  if (fs && __asan_addr_is_in_fake_stack(fs, (void *)a, nullptr, nullptr)) return true;
#endif
  return a >= fb && a + bytes <= fb + t->f->stack_size;
}

/* The last range this OS thread found reachable, per device and memory generation. */
static thread_local uintptr_t tl_ok_lo = 0, tl_ok_hi = 0;
static thread_local int tl_ok_dev = -1;
static thread_local uint64_t tl_ok_gen = 0;

void mem_op(const volatile void *p, size_t bytes, int write, const char *what) {
  Thr *t = tl_thr;
  if (!t) return; /* host code calling a device helper */
  uintptr_t a = (uintptr_t)p;
  int dev = t->b->k->device, e = 0;
  std::string why;
  if (!(a >= tl_ok_lo && a + bytes <= tl_ok_hi && dev == tl_ok_dev && tl_ok_gen == memory_generation()) &&
      !local_memory(t, a, bytes)) {
    uintptr_t lo, hi;
    uint64_t gen = memory_generation();
    e = check_access(dev, p, bytes, &why, &lo, &hi);
    if (!e && hi > lo) {
      tl_ok_lo = lo;
      tl_ok_hi = hi;
      tl_ok_dev = dev;
      tl_ok_gen = gen;
    }
  }
  if (e) {
    char d[512];
    snprintf(d, sizeof d, "%s: %s of %zu bytes at %p (%s): %s", thread_name(t).c_str(),
             write ? "store" : "load", bytes, (const void *)p, what, why.c_str());
    std::string().swap(why); /* its buffer goes now: block_fault does not return */
    block_fault(t->b, (cudaError_t)e, "illegal address", d);
  }
  watch(t, 1);
}

void fence_op(int order) {
  __atomic_thread_fence(order);
  Thr *t = tl_thr;
  if (t) watch(t, 1);
}

void nanosleep_ns(unsigned ns) {
  Thr *t = tl_thr;
  (void)ns;
  if (!t) return;
  if (!config().serial) std::this_thread::yield(); /* concurrent: let other streams run */
  t->since_yield = EMCSIM_PREEMPT - 1; /* and let the other threads of this block run */
  watch(t, 64); /* a back-off counts as a wait of 64 operations */
}

uint64_t thread_clock() {
  Thr *t = tl_thr;
  return t ? t->ops : 0;
}

/* ---------------------------------------------------------------- __syncthreads */
void syncthreads(const char *site) {
  Thr *t = tl_thr;
  if (!t) {
    fprintf(stderr, "emc-cudasim: __syncthreads called outside a kernel (%s)\n", site);
    abort();
  }
  Block *b = t->b;
  if (b->at_bar == 0) b->bar_site = site;
  t->st = ST_WAITB;
  t->site = site;
  b->at_bar++;
  if (b->at_bar == b->live) {
    release_barrier(b, t);
    watch(t, 1);
    return;
  }
  yield_to_host(t);
}

/* ---------------------------------------------------------------- warp collectives */
static Thr *lane_thr(Block *b, unsigned warp, unsigned lane) {
  unsigned i = warp * 32 + lane;
  return i < b->n ? &b->th[i] : nullptr;
}

static bool is_shfl(int kind) {
  return kind == COLL_SHFL || kind == COLL_SHFL_UP || kind == COLL_SHFL_DOWN || kind == COLL_SHFL_XOR;
}

/* All lanes of mask wait at t's collective: compute every lane's result and release them. */
static void complete(Block *b, Thr *t) {
  const unsigned mask = t->mask;
  Thr *lanes[32] = {nullptr};
  for (unsigned l = 0; l < 32; l++)
    if (mask >> l & 1u) lanes[l] = lane_thr(b, t->warp, l);
  uint64_t ballot = 0;
  for (unsigned l = 0; l < 32; l++)
    if (lanes[l] && lanes[l]->val) ballot |= 1ull << l;
  for (unsigned l = 0; l < 32; l++) {
    Thr *u = lanes[l];
    if (!u) continue;
    uint64_t r = 0;
    switch (t->kind) {
    case COLL_SYNCWARP: r = 0; break;
    case COLL_BALLOT: r = ballot; break;
    case COLL_ANY: r = ballot != 0; break;
    case COLL_ALL: r = ballot == mask; break;
    case COLL_MATCH_ANY:
      for (unsigned m = 0; m < 32; m++)
        if (lanes[m] && lanes[m]->val == u->val) r |= 1ull << m;
      break;
    default: { /* shuffles: the source lane of lane l, as PTX's shfl.sync computes it: the
                  lane or offset is b[4:0]; a source past the segment's last lane (up: before
                  its first) gives the own value. A butterfly may read an earlier segment
                  (fix: the model gave the own value there; CUDA C++ Programming Guide,
                  __shfl_xor_sync: "able to access elements from earlier groups of threads") */
      unsigned w = (unsigned)u->width, seg = l & ~(w - 1u), last = seg + w - 1u, bv = (unsigned)u->arg & 31u,
               src = l;
      if (t->kind == COLL_SHFL) src = seg + (bv & (w - 1u));
      else if (t->kind == COLL_SHFL_UP) src = l >= seg + bv ? l - bv : l;
      else if (t->kind == COLL_SHFL_DOWN) src = l + bv <= last ? l + bv : l;
      else src = (l ^ bv) <= last ? l ^ bv : l;
      if (src > 31 || !lanes[src]) {
        char d[256];
        snprintf(d, sizeof d,
                 "%s: %s(mask 0x%08x) at %s reads lane %u, which is not in the mask (the value "
                 "is undefined on the device)",
                 thread_name(u).c_str(), coll_name(t->kind), mask, t->site, src);
        block_fault(b, cudaErrorLaunchFailure, "shuffle from a lane outside the mask", d);
        return;
      }
      r = lanes[src]->val;
      break;
    }
    }
    u->result = r;
    u->st = ST_RUN;
    if (u != tl_thr) b->runq->push_back(u->linear);
  }
}

uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int arg, int width, unsigned bytes,
                         const char *site) {
  Thr *t = tl_thr;
  if (!t) {
    fprintf(stderr, "emc-cudasim: %s called outside a kernel (%s)\n", coll_name(kind), site);
    abort();
  }
  Block *b = t->b;
  WarpSt *w = &b->warps[t->warp];
  if (kind == COLL_ACTIVEMASK) return ~w->exited; /* the lanes of the warp that have not exited */
  if (!(mask >> t->lane & 1u)) {
    char d[256];
    snprintf(d, sizeof d, "%s: %s(mask 0x%08x) at %s: the calling lane is not in the mask",
             thread_name(t).c_str(), coll_name(kind), mask, site);
    block_fault(b, cudaErrorLaunchFailure, "collective with the caller outside its mask", d);
  }
  if (width < 1 || width > 32 || (width & (width - 1))) {
    char d[256];
    snprintf(d, sizeof d, "%s: %s at %s: width %d is not a power of two up to 32",
             thread_name(t).c_str(), coll_name(kind), site, width);
    block_fault(b, cudaErrorLaunchFailure, "bad shuffle width", d);
  }
  if (mask & w->exited) {
    unsigned l = (unsigned)__builtin_ctz(mask & w->exited);
    char d[256];
    snprintf(d, sizeof d, "%s: %s(mask 0x%08x) at %s names lane %u, which %s",
             thread_name(t).c_str(), coll_name(kind), mask, site, l,
             t->warp * 32 + l < b->n ? "has exited" : "does not exist (the block's last warp is partial)");
    block_fault(b, cudaErrorLaunchFailure, "collective over an exited lane", d);
  }
  t->kind = kind;
  t->mask = mask;
  t->val = kind == COLL_BALLOT || kind == COLL_ANY || kind == COLL_ALL ? (value != 0) : value;
  t->arg = arg;
  t->width = width;
  t->bytes = bytes;
  t->site = site;
  t->st = ST_WAITW;
  w->waiting |= 1u << t->lane;
  /* complete now if every lane of the mask waits, at the same collective */
  if ((w->waiting & mask) == mask) {
    bool same = true;
    for (unsigned m = mask; m && same; m &= m - 1) {
      const Thr *u = &b->th[t->warp * 32 + (unsigned)__builtin_ctz(m)];
      same = u->kind == kind && u->mask == mask && (!is_shfl(kind) || (u->width == width && u->bytes == bytes));
    }
    if (same) {
      w->waiting &= ~mask;
      complete(b, t);
      watch(t, 1);
      return t->result;
    }
  }
  yield_to_host(t);
  return t->result;
}

/* ---------------------------------------------------------------- a stuck block */
static void diagnose(Block *b) {
  for (unsigned i = 0; i < b->n; i++) {
    Thr *t = &b->th[i];
    if (t->st != ST_WAITW) continue;
    for (unsigned l = 0; l < 32; l++) {
      if (!(t->mask >> l & 1u) || l == t->lane) continue;
      Thr *u = lane_thr(b, t->warp, l);
      if (u->st == ST_WAITW && u->kind == t->kind && u->mask == t->mask &&
          !(is_shfl(t->kind) && (u->width != t->width || u->bytes != t->bytes)))
        continue;
      char d[640];
      if (u->st == ST_WAITW && u->kind == t->kind && u->mask == t->mask) /* fix: was reported as
                                                    "__syncthreads not reached by every live thread" */
        snprintf(d, sizeof d, "warp %u: %s waits at %s(mask 0x%08x) (%s) with width %d and %u-byte "
                 "values, but lane %u with width %d and %u-byte values (the model requires one width "
                 "and one size per shuffle)", t->warp, thread_name(t).c_str(), coll_name(t->kind), t->mask,
                 t->site, t->width, t->bytes, l, u->width, u->bytes);
      else
        snprintf(d, sizeof d, "warp %u: %s waits at %s(mask 0x%08x) (%s), but lane %u %s", t->warp,
                 thread_name(t).c_str(), coll_name(t->kind), t->mask, t->site, l,
                 where_waits(u).c_str());
      block_fault(b, cudaErrorLaunchFailure, "divergent collective", d);
      return;
    }
  }
  for (unsigned i = 0; i < b->n; i++) {
    Thr *t = &b->th[i];
    if (t->st != ST_WAITW) continue;
    char d[512];
    snprintf(d, sizeof d, "%s waits at %s (%s) while the rest of the block waits at __syncthreads (%s)",
             thread_name(t).c_str(), coll_name(t->kind), t->site, b->bar_site);
    block_fault(b, cudaErrorLaunchFailure, "__syncthreads not reached by every live thread", d);
    return;
  }
  block_fault(b, cudaErrorLaunchFailure, "stuck block", "no thread can run (model error)");
}

/* ---------------------------------------------------------------- running a launch */


/* Launches running now and when they started (the wall-clock watchdog). */
static std::mutex g_running_mu;
struct Running {
  const KernelRun *k;
  double t0;
};
static std::vector<Running> g_running;

static double now_s() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void watchdog_thread() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::lock_guard<std::mutex> g(g_running_mu);
    double now = now_s();
    for (const Running &r : g_running)
      if (now - r.t0 > config().watchdog_s) {
        fprintf(stderr,
                "emc-cudasim: forward-progress violation: kernel %s ran %.0f s of wall time "
                "(EMC_CUDASIM_WATCHDOG_S=%.0f) without finishing, spinning where the model cannot "
                "see it (plain loads); the process ends here\n",
                r.k->name, now - r.t0, config().watchdog_s);
        fflush(stderr);
        _exit(124);
      }
  }
}

/* A seeded permutation of [0, n): i -> (i * a + c) mod n, a coprime with n. */
static void pick_perm(uint64_t n, uint64_t *a, uint64_t *c) {
  *c = n ? local_random() % n : 0;
  *a = 1;
  if (n < 3) return;
  for (int tries = 0; tries < 64; tries++) {
    uint64_t x = local_random() % n | 1u, g = x, m = n;
    while (m) { /* gcd(x, n) */
      uint64_t r = g % m;
      g = m;
      m = r;
    }
    if (g == 1) {
      *a = x;
      return;
    }
  }
}

cudaError_t run_kernel(const KernelRun &k) {
  static std::once_flag wd_once;
  std::call_once(wd_once, [] { std::thread(watchdog_thread).detach(); });
  const uint64_t nthreads = (uint64_t)k.block.x * k.block.y * k.block.z;
  const uint64_t nblocks = (uint64_t)k.grid.x * k.grid.y * k.grid.z;
  cudaError_t result = cudaSuccess;
  Block b;
  std::vector<Thr> th(nthreads);
  std::vector<unsigned> runq;
  uint64_t total_ops = 0;
  Thr *saved_thr = tl_thr;
  b.k = &k;
  b.n = (unsigned)nthreads;
  b.th = th.data();
  b.runq = &runq;
  Pool &pool = tl_pool;
  std::vector<Runner *> idle;
  std::vector<WarpSt> warps((nthreads + 31) / 32);
  while (pool.r.size() < nthreads) {
    Runner *r = new Runner;
    if (!fiber_alloc(&r->f, config().stack_bytes)) {
      delete r;
      fprintf(stderr, "emc-cudasim: cannot allocate fiber stacks (%s)\n", strerror(errno));
      abort();
    }
    pool.r.push_back(r);
  }
  b.warps = warps.data();
  b.idle = &idle;
  idle.assign(pool.r.begin(), pool.r.begin() + (long)nthreads);
  {
    std::lock_guard<std::mutex> g(g_running_mu);
    g_running.push_back(Running{&k, now_s()});
  }
  tl_rng = random_u64();
  /* blocks in a seeded order */
  uint64_t ba, bc;
  pick_perm(nblocks, &ba, &bc);
  for (uint64_t bi = 0; bi < nblocks && !b.fault; bi++) {
    uint64_t lin = (bi * ba + bc) % nblocks;
    b.bid = {(unsigned)(lin % k.grid.x), (unsigned)(lin / k.grid.x % k.grid.y),
             (unsigned)(lin / ((uint64_t)k.grid.x * k.grid.y))};
    poison_shared();
    b.live = b.n;
    b.at_bar = 0;
    b.next_start = 0;
    pick_perm(b.n, &b.perm_a, &b.perm_c);
    for (unsigned i = 0; i < b.n; i++) { /* the rest is set when the thread starts */
      Thr &t = th[i];
      total_ops += t.ops; /* the watchdog counts per thread of a block */
      t.ops = 0;
      t.st = ST_RUN;
      t.started = 0;
      t.linear = i;
      t.lane = i % 32;
      t.warp = i / 32;
      t.b = &b;
      t.since_yield = 0;
    }
    for (size_t wi = 0; wi < warps.size(); wi++) {
      warps[wi] = WarpSt();
      unsigned present = b.n - (unsigned)wi * 32 >= 32 ? 32u : b.n - (unsigned)wi * 32;
      warps[wi].exited = present == 32 ? 0u : ~((1u << present) - 1u);
    }
    runq.clear();
    while (b.live > 0 && !b.fault) { /* fibers switch among themselves; back here when stuck */
      Thr *n = next_runnable(&b);
      if (n) run_fiber(&b, n);
      else if (b.next_start < b.n) start_threads(&b);
      else diagnose(&b);
    }
    if (b.zombie) {
      idle.push_back(b.zombie);
      b.zombie = nullptr;
    }
    if (b.fault) { /* its fibers were left mid-kernel; the idle list is whole again */
      for (unsigned i = 0; i < b.n; i++) pool.r[i]->f.abandoned = 1;
      idle.assign(pool.r.begin(), pool.r.begin() + (long)nthreads);
    }
  }
  {
    std::lock_guard<std::mutex> g(g_running_mu);
    for (size_t i = 0; i < g_running.size(); i++)
      if (g_running[i].k == &k) {
        g_running.erase(g_running.begin() + (long)i);
        break;
      }
  }
  for (const Thr &t : th) total_ops += t.ops;
  count_kernel(nblocks, nblocks * nthreads);
  count_switches(b.switches);
  count_ops(total_ops);
  if (b.fault) result = cudaErrorLaunchFailure; /* the runtime holds the precise sticky error */
  tl_thr = saved_thr;
  return result;
}

}  // namespace emcsim
