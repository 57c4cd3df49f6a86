/*
 * runtime.cpp: the CUDA runtime of the CPU model: devices, memory, streams, events, graphs and
 * errors (cuda/sim/README.md says what each call does and checks).
 *
 * Work and time. Every asynchronous call enqueues an operation on its stream. In serial mode
 * (the default) nothing runs until a host call must wait for it (a synchronize, a blocking
 * copy, an event query that answers, cudaFree), and then only what that call waits for: the
 * operations it depends on through stream order, event waits and the legacy stream's implicit
 * synchronization, one at a time, the next one a seeded random choice among the streams whose
 * next operation is ready. So a host read before its synchronization reads poison or stale
 * bytes, and a missing event wait between two streams lets the second run first. In
 * concurrent mode each stream has a thread that runs its operations as soon as they are ready,
 * so kernels of different streams really run at the same time.
 *
 * Faults are sticky per device, as on the device: a kernel that breaks a rule (device.cpp)
 * makes every later call on that device return its error; the one-line report is printed
 * once. emcsim_reset() forgets them (the model's own tests).
 */
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "emcsim/library.h"
#include "model.h"

namespace emcsim {

/* ================================================================= settings */
static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  char *end;
  if (!v || !*v) return dflt;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 0);
  if (errno || *end) {
    fprintf(stderr, "emc-cudasim: %s=%s is not a number\n", name, v);
    abort();
  }
  return x;
}

const Config &config() {
  static Config c = [] {
    Config k;
    const char *m = getenv("EMC_CUDASIM_MODE");
    k.serial = !(m && strcmp(m, "concurrent") == 0);
    if (m && *m && strcmp(m, "serial") != 0 && strcmp(m, "concurrent") != 0) {
      fprintf(stderr, "emc-cudasim: EMC_CUDASIM_MODE=%s is neither serial nor concurrent\n", m);
      abort();
    }
    k.seed = env_u64("EMC_CUDASIM_SEED", 1);
    k.devices = (int)env_u64("EMC_CUDASIM_DEVICES", 1);
    k.watchdog_ops = env_u64("EMC_CUDASIM_WATCHDOG", 1ull << 24);
    k.watchdog_s = (double)env_u64("EMC_CUDASIM_WATCHDOG_S", 300);
    k.stack_bytes = (size_t)env_u64("EMC_CUDASIM_STACK_KB", 256) << 10;
    k.mem_bytes = (size_t)env_u64("EMC_CUDASIM_MEM_MB", 81559) << 20;
    k.verbose = (int)env_u64("EMC_CUDASIM_VERBOSE", 0);
    return k;
  }();
  return c;
}

static std::mutex g_rng_mu;
static uint64_t g_rng = 0;
static bool g_rng_init = false;

uint64_t random_u64() {
  std::lock_guard<std::mutex> g(g_rng_mu);
  if (!g_rng_init) {
    g_rng = config().seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    g_rng_init = true;
  }
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ================================================================= counters */
static std::atomic<uint64_t> c_kernels{0}, c_blocks{0}, c_threads{0}, c_switches{0}, c_ops{0},
    c_violations{0};
void count_kernel(uint64_t blocks, uint64_t threads) {
  c_kernels++;
  c_blocks += blocks;
  c_threads += threads;
}
void count_switches(uint64_t n) { c_switches += n; }
void count_ops(uint64_t n) { c_ops += n; }
void count_violation() { c_violations++; }

/* ================================================================= state */
struct Stream;
struct Event;
struct Graph;
struct GraphExec;
struct Capture;

enum OpKind { OP_KERNEL, OP_COPY, OP_SET, OP_RECORD, OP_NOP, OP_GRAPH, OP_FREE, OP_FN };

/* An operation on a stream, or a node of a graph. */
struct Work {
  int kind = OP_NOP;
  std::unique_ptr<Closure> closure;  /* kernel */
  std::string name;
  dim3 grid, block;
  size_t smem = 0;
  int device = 0;
  void *dst = nullptr;               /* copy, set, free */
  const void *src = nullptr;
  size_t bytes = 0;
  int value = 0;
  std::vector<unsigned char> staged; /* a pageable source, copied at the call */
  bool use_staged = false;
  std::function<void()> fn;          /* library work (CUB) */
  Event *ev = nullptr;               /* record */
};

/* A user object (cudaUserObjectCreate): its destructor runs when the last reference goes. */
struct UserObj {
  void *ptr = nullptr;
  cudaHostFn_t fn = nullptr;
  unsigned refs = 0; /* under g_mu */
};

struct Op {
  Work w;
  Stream *s = nullptr;
  uint64_t seq = 0;                   /* position in its stream */
  std::vector<std::shared_ptr<Op>> deps;
  std::shared_ptr<GraphExec> gx;      /* OP_GRAPH */
  std::vector<std::pair<UserObj *, unsigned>> held; /* OP_GRAPH: user objects, until done */
  double t = -1;                      /* OP_RECORD: when it ran (ms) */
  bool done = false;
};
typedef std::shared_ptr<Op> OpP;

struct Node {
  Work w;
  int type = cudaGraphNodeTypeEmpty;
  std::vector<Node *> deps;
};

struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
  int device = 0;
  std::map<UserObj *, unsigned> uobjs; /* references this graph holds */
};

struct GraphExec {
  Graph g; /* a copy (closures cloned) */
};

struct Capture {
  Graph *g = nullptr;
  unsigned long long id = 0;       /* cudaStreamGetCaptureInfo's */
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  Stream *origin = nullptr;
  std::thread::id thread;
  bool invalid = false;
  std::string why;
  std::set<Stream *> streams;
};

struct Stream {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;
  std::deque<OpP> q;          /* not yet run */
  OpP tail;                   /* the last operation enqueued */
  uint64_t next_seq = 0;
  Capture *cap = nullptr;     /* capturing into */
  std::vector<Node *> cap_tail;
  bool destroyed = false;
  bool worker = false;        /* concurrent mode: its thread runs */
};

struct Event {
  unsigned flags = 0;
  int device = 0;
  OpP last;                   /* the latest record outside a capture */
  Capture *cap = nullptr;     /* recorded in this capture (its nodes) */
  std::vector<Node *> cap_nodes;
  bool captured = false;      /* the latest record was inside a capture */
};

enum AllocKind { A_DEVICE = 1, A_PINNED, A_REGISTERED };
struct Alloc {
  uintptr_t lo, hi;
  int kind;
  int device;
  unsigned flags;
};

struct Device {
  size_t used = 0;                  /* device bytes allocated */
  std::atomic<int> sticky{0};       /* a fault's error */
  std::string fault;                /* its report */
  std::set<int> peers;              /* peer access enabled to these devices */
  Stream *legacy = nullptr;
};

struct Registered {
  std::string name;
  Closure *(*from_args)(const void *, void **);
  int max_dyn_smem = 0;             /* cudaFuncAttributeMaxDynamicSharedMemorySize */
};

static std::mutex g_mu;                 /* every structure below */
/* an operation finished. Never destroyed (fix, tests/cudasim cudasim_progress_concurrent): in
 * concurrent mode the streams' worker threads wait on it for good, and destroying a condition
 * variable with waiters at exit (pthread_cond_destroy) blocks: the process hung at its end. */
static std::condition_variable &g_cv = *new std::condition_variable;
static std::recursive_mutex g_exec_mu;  /* serial mode: one executor at a time */
static std::shared_mutex g_mem_mu;      /* g_allocs (read by every instrumented access) */
static std::map<uintptr_t, Alloc> *g_allocs = new std::map<uintptr_t, Alloc>;
static std::vector<Device> *g_devs = nullptr;
static std::set<Stream *> *g_streams = new std::set<Stream *>;
static std::set<Event *> *g_events = new std::set<Event *>;
static std::set<Graph *> *g_graphs = new std::set<Graph *>;
static std::set<GraphExec *> *g_execs = new std::set<GraphExec *>;
static std::set<Capture *> *g_captures = new std::set<Capture *>;
static std::unordered_map<const void *, Registered> *g_kernels = new std::unordered_map<const void *, Registered>;
static std::vector<std::pair<uintptr_t, uintptr_t>> *g_globals = nullptr; /* writable segments */

static thread_local int tl_device = 0;
static thread_local cudaError_t tl_last = cudaSuccess;
static thread_local cudaStreamCaptureMode tl_cap_mode = cudaStreamCaptureModeGlobal;
static thread_local const char *tl_next_name = nullptr;
static thread_local std::string tl_msg;

static std::vector<Device> &devs() {
  if (!g_devs) {
    int n = config().devices;
    g_devs = new std::vector<Device>(n < 0 ? 0 : (size_t)n);
    for (int d = 0; d < n; d++) {
      Stream *s = new Stream;
      s->device = d;
      s->legacy = true;
      (*g_devs)[(size_t)d].legacy = s;
      g_streams->insert(s);
    }
  }
  return *g_devs;
}

/* User objects: references dropped under g_mu; the destructors of the objects that reach
 * zero run once g_mu is released (they may call the runtime, which CUDA forbids; the model
 * tolerates it). */
static std::set<UserObj *> *g_uobjs = new std::set<UserObj *>;
static thread_local std::vector<UserObj *> tl_uobj_dead;
static void uobj_release_locked(UserObj *o, unsigned n) {
  if (!g_uobjs->count(o)) return;
  o->refs = n >= o->refs ? 0 : o->refs - n;
  if (o->refs == 0) {
    g_uobjs->erase(o);
    tl_uobj_dead.push_back(o);
  }
}
static void uobj_run_dead() { /* g_mu not held */
  std::vector<UserObj *> dead;
  dead.swap(tl_uobj_dead);
  for (UserObj *o : dead) {
    if (o->fn) o->fn(o->ptr);
    delete o;
  }
}
static void graph_release_locked(Graph *g) {
  for (auto &u : g->uobjs) uobj_release_locked(u.first, u.second);
  g->uobjs.clear();
}

/* ================================================================= errors */
static cudaError_t set_err(cudaError_t e) {
  if (e != cudaSuccess) tl_last = e;
  return e;
}

/* A failed call that explains itself (EMC_CUDASIM_VERBOSE=1 prints why). */
static cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t fail(cudaError_t e, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tl_msg = buf;
  if (config().verbose) fprintf(stderr, "emc-cudasim: %s: %s\n", cudaGetErrorName(e), buf);
  return set_err(e);
}

void raise_fault(int device, cudaError_t e, const std::string &line) {
  std::lock_guard<std::mutex> g(g_mu);
  Device &d = devs()[(size_t)device];
  int expected = 0;
  if (d.sticky.compare_exchange_strong(expected, (int)e)) {
    d.fault = line;
    fprintf(stderr, "%s\n", line.c_str());
    fflush(stderr);
  }
}

static cudaError_t sticky(int device) {
  std::vector<Device> &v = devs();
  if (device < 0 || (size_t)device >= v.size()) return cudaSuccess;
  int s = v[(size_t)device].sticky.load();
  return (cudaError_t)s;
}

/* Entry of most calls: the current device, and its sticky fault if any. */
#define ENTER()                                                          \
  do {                                                                   \
    if (devs().empty()) return set_err(cudaErrorNoDevice);               \
    cudaError_t st_ = sticky(tl_device);                                 \
    if (st_ != cudaSuccess) return set_err(st_);                         \
  } while (0)

/* ================================================================= memory map */
static const Alloc *find_alloc_locked(uintptr_t a) {
  auto it = g_allocs->upper_bound(a);
  if (it == g_allocs->begin()) return nullptr;
  --it;
  return a < it->second.hi ? &it->second : nullptr;
}

static bool find_alloc(const void *p, Alloc *out) {
  std::shared_lock<std::shared_mutex> g(g_mem_mu);
  const Alloc *a = find_alloc_locked((uintptr_t)p);
  if (a) *out = *a;
  return a != nullptr;
}

static void add_alloc(const Alloc &a) {
  std::unique_lock<std::shared_mutex> g(g_mem_mu);
  (*g_allocs)[a.lo] = a;
}

static void bump_generation();
static void remove_alloc(uintptr_t lo) {
  std::unique_lock<std::shared_mutex> g(g_mem_mu);
  g_allocs->erase(lo);
  bump_generation();
}

/* Writable segments of loaded modules: a kernel may use the program's globals (the model's
 * __device__ variables). */
static bool in_globals(uintptr_t a, size_t bytes) {
  static std::once_flag once;
  std::call_once(once, [] {
    g_globals = new std::vector<std::pair<uintptr_t, uintptr_t>>;
    dl_iterate_phdr(
        [](struct dl_phdr_info *i, size_t, void *) -> int {
          for (int k = 0; k < i->dlpi_phnum; k++) {
            const ElfW(Phdr) &ph = i->dlpi_phdr[k];
            if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W))
              g_globals->push_back({i->dlpi_addr + ph.p_vaddr, i->dlpi_addr + ph.p_vaddr + ph.p_memsz});
          }
          return 0;
        },
        nullptr);
  });
  for (auto &r : *g_globals)
    if (a >= r.first && a + bytes <= r.second) return true;
  return false;
}

static std::atomic<uint64_t> g_mem_gen{1};
uint64_t memory_generation() { return g_mem_gen.load(std::memory_order_acquire); }
static void bump_generation() { g_mem_gen.fetch_add(1, std::memory_order_acq_rel); }

int check_access(int device, const volatile void *p, size_t bytes, std::string *why, uintptr_t *lo,
                 uintptr_t *hi) {
  uintptr_t a = (uintptr_t)p;
  Alloc al;
  *lo = *hi = 0;
  if (!find_alloc((const void *)p, &al)) {
    if (in_globals(a, bytes)) return 0;
    *why = "no allocation holds it (pageable host memory, or memory already freed)";
    return cudaErrorIllegalAddress;
  }
  if (a + bytes > al.hi) {
    char b[128];
    snprintf(b, sizeof b, "it runs %zu bytes past the end of its allocation", (size_t)(a + bytes - al.hi));
    *why = b;
    return cudaErrorIllegalAddress;
  }
  if (al.kind == A_DEVICE && al.device != device) {
    std::lock_guard<std::mutex> g(g_mu);
    if (!devs()[(size_t)device].peers.count(al.device)) {
      char b[128];
      snprintf(b, sizeof b, "memory of device %d, and peer access to it is not enabled", al.device);
      *why = b;
      return cudaErrorIllegalAddress;
    }
  }
  if (al.kind != A_DEVICE && al.device != device && !(al.flags & cudaHostAllocPortable)) {
    char b[160];
    snprintf(b, sizeof b, "host memory pinned for device %d without the portable flag", al.device);
    *why = b;
    return cudaErrorIllegalAddress;
  }
  *lo = al.lo;
  *hi = al.hi;
  return 0;
}

/* ================================================================= capture rules */
/* Is this thread barred from a potentially unsafe call (CUDA's capture interaction modes)?
 * The captures that bar it are invalidated. */
static bool capture_forbids_locked() {
  if (tl_cap_mode == cudaStreamCaptureModeRelaxed) return false;
  bool barred = false;
  for (Capture *c : *g_captures) {
    bool mine = c->thread == std::this_thread::get_id();
    if ((mine && c->mode != cudaStreamCaptureModeRelaxed) ||
        (!mine && tl_cap_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal)) {
      barred = true;
      if (!c->invalid) {
        c->invalid = true;
        c->why = "a potentially unsafe call (synchronous copy, allocation, device synchronize) was made during the capture";
      }
    }
  }
  return barred;
}

#define UNSAFE_CALL(what)                                                                      \
  do {                                                                                         \
    bool barred_;                                                                              \
    {                                                                                          \
      std::lock_guard<std::mutex> g_(g_mu);                                                    \
      barred_ = capture_forbids_locked();                                                      \
    }                                                                                          \
    if (barred_)                                                                               \
      return fail(cudaErrorStreamCaptureUnsupported, "%s during a stream capture (capture mode %d)", \
                  what, (int)tl_cap_mode);                                                     \
  } while (0)

/* ================================================================= streams */
static Stream *resolve_stream_locked(cudaStream_t h, cudaError_t *err) {
  *err = cudaSuccess;
  if (h == nullptr || h == cudaStreamLegacy) return devs()[(size_t)tl_device].legacy;
  if (h == cudaStreamPerThread) { /* a per-thread blocking stream of the current device */
    thread_local std::vector<Stream *> per;
    if (per.size() < devs().size()) per.resize(devs().size(), nullptr);
    Stream *&s = per[(size_t)tl_device];
    if (!s) {
      s = new Stream;
      s->device = tl_device;
      g_streams->insert(s);
    }
    return s;
  }
  Stream *s = reinterpret_cast<Stream *>(h);
  if (!g_streams->count(s) || s->destroyed) {
    *err = cudaErrorInvalidResourceHandle;
    return nullptr;
  }
  return s;
}

static void worker_main(Stream *s);
static void execute(Op *op);

/* Put op on s (not capturing): its stream predecessor is implicit; the legacy stream's
 * implicit synchronization with blocking streams becomes explicit dependencies. */
static void enqueue_locked(Stream *s, OpP op) {
  Device &d = devs()[(size_t)s->device];
  op->s = s;
  op->seq = s->next_seq++;
  if (s->legacy) {
    for (Stream *o : *g_streams)
      if (o != s && o->device == s->device && !o->legacy && !(o->flags & cudaStreamNonBlocking) && o->tail &&
          !o->tail->done)
        op->deps.push_back(o->tail);
  } else if (!(s->flags & cudaStreamNonBlocking) && d.legacy->tail && !d.legacy->tail->done) {
    op->deps.push_back(d.legacy->tail);
  }
  s->q.push_back(op);
  s->tail = op;
  if (!config().serial) {
    if (!s->worker) {
      s->worker = true;
      std::thread(worker_main, s).detach();
    }
    g_cv.notify_all();
  }
}

static bool deps_done(const Op *op) {
  for (const OpP &d : op->deps)
    if (!d->done) return false;
  return true;
}

/* Serial mode: run what `target` depends on, then target, one operation at a time. */
static void run_until(const OpP &target) {
  if (!target) return;
  if (!config().serial) {
    std::unique_lock<std::mutex> g(g_mu);
    g_cv.wait(g, [&] { return target->done; });
    return;
  }
  std::lock_guard<std::recursive_mutex> ex(g_exec_mu);
  for (;;) {
    std::unique_lock<std::mutex> g(g_mu);
    if (target->done) return;
    /* how far each stream must run: the target's position, and every dependency's */
    std::map<Stream *, uint64_t> need;
    std::vector<Op *> stack{target.get()};
    while (!stack.empty()) {
      Op *x = stack.back();
      stack.pop_back();
      if (x->done) continue;
      auto it = need.find(x->s);
      if (it != need.end() && it->second >= x->seq) continue;
      uint64_t from = it == need.end() ? 0 : it->second + 1;
      need[x->s] = x->seq;
      for (const OpP &o : x->s->q) /* the stream's operations up to x, and their deps */
        if (o->seq >= from && o->seq <= x->seq)
          for (const OpP &d : o->deps)
            if (!d->done) stack.push_back(d.get());
    }
    std::vector<Op *> ready;
    for (auto &n : need) {
      Stream *s = n.first;
      if (s->q.empty() || s->q.front()->seq > n.second) continue;
      if (deps_done(s->q.front().get())) ready.push_back(s->q.front().get());
    }
    if (ready.empty()) {
      fprintf(stderr, "emc-cudasim: model error: nothing can run, yet an operation waits\n");
      abort();
    }
    std::sort(ready.begin(), ready.end(), [](const Op *a, const Op *b) {
      return a->s == b->s ? a->seq < b->seq : (uintptr_t)a->s < (uintptr_t)b->s;
    });
    Op *op = ready.size() == 1 ? ready[0] : ready[random_u64() % ready.size()];
    OpP keep = op->s->q.front();
    g.unlock();
    execute(op);
    g.lock();
    op->done = true;
    for (auto &u : op->held) uobj_release_locked(u.first, u.second);
    op->held.clear();
    op->s->q.pop_front();
    g_cv.notify_all();
    g.unlock();
    uobj_run_dead();
  }
}

static void worker_main(Stream *s) {
  std::unique_lock<std::mutex> g(g_mu);
  for (;;) {
    g_cv.wait(g, [&] { return !s->q.empty() || s->destroyed; });
    if (s->q.empty()) break; /* destroyed and drained */
    OpP op = s->q.front();
    g_cv.wait(g, [&] { return deps_done(op.get()); });
    g.unlock();
    execute(op.get());
    g.lock();
    op->done = true;
    for (auto &u : op->held) uobj_release_locked(u.first, u.second);
    op->held.clear();
    s->q.pop_front();
    g_cv.notify_all();
    g.unlock();
    uobj_run_dead();
    g.lock();
  }
  s->worker = false;
}

/* Wait for everything enqueued so far on device d (or every device: -1). */
static void sync_device(int d) {
  std::vector<OpP> tails;
  {
    std::lock_guard<std::mutex> g(g_mu);
    for (Stream *s : *g_streams)
      if ((d < 0 || s->device == d) && s->tail && !s->tail->done) tails.push_back(s->tail);
  }
  for (OpP &t : tails) run_until(t);
}

/* ================================================================= executing work */
static cudaError_t check_launch(const char *name, dim3 grid, dim3 block, size_t smem, const Registered *r);

struct Limits {
  const char *name;
  unsigned maxntid, regs, smem;
};
const Limits *find_limits(const char *name);

static void run_work(Work &w, double *t) {
  switch (w.kind) {
  case OP_KERNEL: {
    if (sticky(w.device)) return; /* a faulted device runs nothing more */
    KernelRun k;
    k.name = w.name.c_str();
    k.closure = w.closure.get();
    k.grid = w.grid;
    k.block = w.block;
    k.smem = w.smem;
    k.device = w.device;
    run_kernel(k);
    return;
  }
  case OP_COPY:
    if (sticky(w.device)) return;
    memmove(w.dst, w.use_staged ? (const void *)w.staged.data() : w.src, w.bytes);
    return;
  case OP_SET:
    if (sticky(w.device)) return;
    memset(w.dst, w.value, w.bytes);
    return;
  case OP_RECORD:
    if (t) *t = now_ms();
    return;
  case OP_FREE: {
    Alloc a;
    if (find_alloc(w.dst, &a)) {
      memset(w.dst, 0xDF, a.hi - a.lo); /* freed memory is poisoned again */
      {
        std::lock_guard<std::mutex> g(g_mu);
        devs()[(size_t)a.device].used -= a.hi - a.lo;
      }
      remove_alloc(a.lo);
      free(w.dst);
    }
    return;
  }
  case OP_FN:
    if (sticky(w.device)) return;
    w.fn();
    return;
  default:
    return;
  }
}

static void run_graph(GraphExec *gx) {
  Graph &g = gx->g;
  std::vector<Node *> ready;
  std::map<Node *, size_t> left;
  std::map<Node *, std::vector<Node *>> users;
  for (auto &n : g.nodes) {
    left[n.get()] = n->deps.size();
    for (Node *d : n->deps) users[d].push_back(n.get());
    if (n->deps.empty()) ready.push_back(n.get());
  }
  while (!ready.empty()) { /* a seeded topological order */
    size_t i = config().serial ? (size_t)(random_u64() % ready.size()) : 0;
    Node *n = ready[i];
    ready.erase(ready.begin() + (long)i);
    double t = -1;
    run_work(n->w, &t);
    for (Node *u : users[n])
      if (--left[u] == 0) ready.push_back(u);
  }
}

static void execute(Op *op) {
  if (op->w.kind == OP_GRAPH) run_graph(op->gx.get());
  else run_work(op->w, &op->t);
}

/* ================================================================= capture: graph nodes */
/* Add work to the capture of s as a node after s's capture tail. */
static cudaError_t capture_locked(Stream *s, Work &&w, int type) {
  Capture *c = s->cap;
  if (c->invalid) return fail(cudaErrorStreamCaptureInvalidated, "the capture was invalidated: %s", c->why.c_str());
  std::unique_ptr<Node> n(new Node);
  n->w = std::move(w);
  n->type = type;
  n->deps = s->cap_tail;
  s->cap_tail.assign(1, n.get());
  c->g->nodes.push_back(std::move(n));
  return cudaSuccess;
}

/* Submit work on stream h: captured when h captures, else enqueued. */
static cudaError_t submit(cudaStream_t h, Work &&w, int node_type, OpP *out = nullptr) {
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s) return fail(e, "stream %p is not a live stream", (void *)h);
  w.device = s->device;
  if (s->cap) return set_err(capture_locked(s, std::move(w), node_type));
  if (s->legacy) { /* the legacy stream would wait for a capturing blocking stream */
    for (Capture *c : *g_captures)
      for (Stream *o : c->streams)
        if (o->device == s->device && !(o->flags & cudaStreamNonBlocking)) {
          c->invalid = true;
          c->why = "the legacy stream was used while a blocking stream captured";
          return fail(cudaErrorStreamCaptureImplicit,
                      "work on the legacy stream would wait for a stream being captured");
        }
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    /* fine: a blocking stream waits for the legacy stream */
  }
  OpP op = std::make_shared<Op>();
  op->w = std::move(w);
  enqueue_locked(s, op);
  if (out) *out = op;
  return cudaSuccess;
}

/* ================================================================= launches */
static cudaError_t check_launch(const char *name, dim3 grid, dim3 block, size_t smem, const Registered *r) {
  uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    return fail(cudaErrorInvalidConfiguration, "%s: a zero grid or block dimension", name);
  if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    return fail(cudaErrorInvalidConfiguration, "%s: grid (%u,%u,%u) beyond sm_90's (2^31-1, 65535, 65535)",
                name, grid.x, grid.y, grid.z);
  if (block.x > 1024u || block.y > 1024u || block.z > 64u || threads > 1024u)
    return fail(cudaErrorInvalidConfiguration, "%s: block (%u,%u,%u) beyond sm_90's 1024 threads", name,
                block.x, block.y, block.z);
  const Limits *l = find_limits(name);
  size_t smax = r && r->max_dyn_smem ? (size_t)r->max_dyn_smem : 48u << 10;
  size_t stat = l ? l->smem : 0;
  if (smem > smax || stat + smem > (227u << 10) || (stat + smem > (48u << 10) && !(r && r->max_dyn_smem)))
    return fail(cudaErrorInvalidValue, "%s: %zu bytes of dynamic shared memory (+%zu static) exceed %zu", name,
                smem, stat, smax);
  if (l) {
    uint64_t warps = (threads + 31) / 32, per_warp = ((uint64_t)l->regs * 32 + 255) / 256 * 256;
    if (l->maxntid && threads > l->maxntid)
      return fail(cudaErrorLaunchOutOfResources,
                  "too many resources requested for launch: %s has __launch_bounds__(%u), launched "
                  "with %llu threads per block", name, l->maxntid, (unsigned long long)threads);
    if (warps * per_warp > 65536u)
      return fail(cudaErrorLaunchOutOfResources,
                  "too many resources requested for launch: %s uses %u registers a thread on sm_90; "
                  "%llu threads per block need %llu of the 65536 registers", name, l->regs,
                  (unsigned long long)threads, (unsigned long long)(warps * per_warp));
  }
  return cudaSuccess;
}

cudaError_t launch(const void *key, Closure *c, Closure *(*from_args)(const void *, void **), dim3 grid,
                   dim3 block, size_t smem, cudaStream_t stream) {
  std::unique_ptr<Closure> cl(c);
  const char *hint = tl_next_name;
  tl_next_name = nullptr;
  ENTER();
  std::string name;
  Registered reg;
  {
    std::lock_guard<std::mutex> g(g_mu);
    Registered &r = (*g_kernels)[key];
    if (r.name.empty()) {
      if (hint) r.name = hint;
      else {
        char b[48];
        snprintf(b, sizeof b, "kernel@%p", key);
        r.name = b;
      }
    }
    if (!r.from_args) r.from_args = from_args;
    name = hint ? hint : r.name;
    reg = r;
  }
  cudaError_t e = check_launch(name.c_str(), grid, block, smem, &reg);
  if (e != cudaSuccess) return e;
  Work w;
  w.kind = OP_KERNEL;
  w.closure = std::move(cl);
  w.name = name;
  w.grid = grid;
  w.block = block;
  w.smem = smem;
  return submit(stream, std::move(w), cudaGraphNodeTypeKernel);
}

}  // namespace emcsim

using namespace emcsim;

/* ================================================================= the C API */
extern "C" {

void emcsim_set_kernel_name(const char *name) { tl_next_name = name; }

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                             cudaStream_t stream) {
  Closure *(*fa)(const void *, void **) = nullptr;
  {
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_kernels->find(func);
    if (it != g_kernels->end()) fa = it->second.from_args;
  }
  if (!fa)
    return fail(cudaErrorInvalidDeviceFunction,
                "the C form of cudaLaunchKernel needs a kernel this process launched before through a "
                "typed form (the model needs its parameter types)");
  return launch(func, fa(func, args), fa, grid, block, smem, stream);
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > (227 << 10))
      return fail(cudaErrorInvalidValue, "max dynamic shared memory %d beyond sm_90's 227 KB", value);
    (*g_kernels)[func].max_dyn_smem = value;
  }
  return cudaSuccess;
}

/* ---------------------------------------------------------------- devices, errors */
cudaError_t cudaGetDeviceCount(int *count) {
  if (!count) return set_err(cudaErrorInvalidValue);
  *count = (int)devs().size();
  if (*count == 0) return set_err(cudaErrorNoDevice);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || (size_t)device >= devs().size())
    return fail(cudaErrorInvalidDevice, "device %d of %zu", device, devs().size());
  tl_device = device;
  return set_err(sticky(device));
}

cudaError_t cudaGetDevice(int *device) {
  if (!device) return set_err(cudaErrorInvalidValue);
  ENTER();
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
  if (!p) return set_err(cudaErrorInvalidValue);
  if (device < 0 || (size_t)device >= devs().size()) return set_err(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "embcache CPU model of an NVIDIA H100 (sm_90, %s mode)",
           config().serial ? "serial" : "concurrent");
  p->totalGlobalMem = config().mem_bytes;
  p->sharedMemPerBlock = 48u << 10;
  p->sharedMemPerBlockOptin = 227u << 10;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->unifiedAddressing = 1;
  p->canMapHostMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (!value) return set_err(cudaErrorInvalidValue);
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
  case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
  case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
  case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
  case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
  case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
  case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
  case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
  case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
  default: return fail(cudaErrorInvalidValue, "attribute %d is not modelled", (int)attr);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  ENTER();
  UNSAFE_CALL("cudaDeviceSynchronize");
  sync_device(tl_device);
  return set_err(sticky(tl_device));
}

cudaError_t cudaDeviceReset(void) {
  sync_device(tl_device);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
  if (!can) return set_err(cudaErrorInvalidValue);
  int n = (int)devs().size();
  if (device < 0 || device >= n || peer < 0 || peer >= n) return set_err(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  ENTER();
  if (flags != 0) return set_err(cudaErrorInvalidValue);
  if (peer < 0 || (size_t)peer >= devs().size() || peer == tl_device) return set_err(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> g(g_mu);
  if (!devs()[(size_t)tl_device].peers.insert(peer).second) return set_err(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  if (!devs()[(size_t)tl_device].peers.erase(peer)) return set_err(cudaErrorPeerAccessNotEnabled);
  bump_generation();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  ENTER();
  if (!free_b || !total_b) return set_err(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(g_mu);
  size_t used = devs()[(size_t)tl_device].used;
  *total_b = config().mem_bytes;
  *free_b = used < *total_b ? *total_b - used : 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t s = devs().empty() ? cudaSuccess : sticky(tl_device);
  cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return s != cudaSuccess ? s : e;
}

cudaError_t cudaPeekAtLastError(void) {
  cudaError_t s = devs().empty() ? cudaSuccess : sticky(tl_device);
  return s != cudaSuccess ? s : tl_last;
}

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define N(x) \
  case x:    \
    return #x;
    N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
    N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidPitchValue) N(cudaErrorInvalidDevicePointer)
    N(cudaErrorInvalidMemcpyDirection) N(cudaErrorInsufficientDriver) N(cudaErrorInvalidDeviceFunction)
    N(cudaErrorNoDevice) N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorIllegalState)
    N(cudaErrorNotReady) N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchTimeout)
    N(cudaErrorPeerAccessAlreadyEnabled) N(cudaErrorPeerAccessNotEnabled) N(cudaErrorAssert)
    N(cudaErrorHostMemoryAlreadyRegistered) N(cudaErrorHostMemoryNotRegistered) N(cudaErrorIllegalInstruction)
    N(cudaErrorMisalignedAddress) N(cudaErrorLaunchFailure) N(cudaErrorNotPermitted) N(cudaErrorNotSupported)
    N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureMerge)
    N(cudaErrorStreamCaptureUnmatched) N(cudaErrorStreamCaptureUnjoined) N(cudaErrorStreamCaptureIsolation)
    N(cudaErrorStreamCaptureImplicit) N(cudaErrorCapturedEvent) N(cudaErrorStreamCaptureWrongThread)
    N(cudaErrorUnknown)
#undef N
  }
  return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
  case cudaErrorInvalidDeviceFunction: return "invalid device function";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
  case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
  case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
  case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorNotSupported: return "operation not supported";
  case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
  case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
  case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
  case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
  default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  if (!v) return set_err(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  if (!v) return set_err(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

/* ---------------------------------------------------------------- memory */
static void *poisoned(size_t bytes, size_t align, int byte) {
  size_t rounded = (bytes + align - 1) / align * align;
  void *p = aligned_alloc(align, rounded ? rounded : align);
  if (p) memset(p, byte, rounded);
  return p;
}

static cudaError_t device_alloc(void **out, size_t bytes, const char *what) {
  if (!out) return set_err(cudaErrorInvalidValue);
  if (bytes == 0) {
    *out = nullptr;
    return cudaSuccess;
  }
  {
    std::lock_guard<std::mutex> g(g_mu);
    Device &d = devs()[(size_t)tl_device];
    if (bytes > config().mem_bytes - d.used)
      return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: %zu of %zu in use on device %d", what, bytes,
                  d.used, config().mem_bytes, tl_device);
    d.used += (bytes + 255) / 256 * 256;
  }
  void *p = poisoned(bytes, 256, 0xCB);
  if (!p) {
    std::lock_guard<std::mutex> g(g_mu);
    devs()[(size_t)tl_device].used -= (bytes + 255) / 256 * 256;
    return fail(cudaErrorMemoryAllocation, "%s of %zu bytes: the host is out of memory", what, bytes);
  }
  add_alloc(Alloc{(uintptr_t)p, (uintptr_t)p + (bytes + 255) / 256 * 256, A_DEVICE, tl_device, 0});
  *out = p;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  ENTER();
  UNSAFE_CALL("cudaMalloc");
  return device_alloc(p, bytes, "cudaMalloc");
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t stream) {
  ENTER();
  {
    std::lock_guard<std::mutex> g(g_mu);
    cudaError_t e;
    if (!resolve_stream_locked(stream, &e)) return set_err(e);
  }
  return device_alloc(p, bytes, "cudaMallocAsync");
}

static cudaError_t free_now(void *p, int kind, const char *what) {
  Alloc a;
  if (!find_alloc(p, &a) || a.lo != (uintptr_t)p || a.kind != kind)
    return fail(cudaErrorInvalidValue, "%s(%p): not the start of a live allocation of that kind", what, p);
  sync_device(-1); /* the call waits for the device, as CUDA's does */
  memset(p, 0xDF, a.hi - a.lo);
  remove_alloc(a.lo);
  if (kind == A_DEVICE) {
    std::lock_guard<std::mutex> g(g_mu);
    devs()[(size_t)a.device].used -= a.hi - a.lo;
  }
  free(p);
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  ENTER();
  if (!p) return cudaSuccess;
  UNSAFE_CALL("cudaFree");
  return free_now(p, A_DEVICE, "cudaFree");
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t stream) {
  ENTER();
  if (!p) return cudaSuccess;
  Alloc a;
  if (!find_alloc(p, &a) || a.lo != (uintptr_t)p || a.kind != A_DEVICE)
    return fail(cudaErrorInvalidValue, "cudaFreeAsync(%p): not the start of a device allocation", p);
  {
    std::lock_guard<std::mutex> g(g_mu);
    cudaError_t e;
    Stream *s = resolve_stream_locked(stream, &e);
    if (!s) return set_err(e);
    if (s->cap) return fail(cudaErrorNotSupported, "cudaFreeAsync into a captured graph is not modelled");
  }
  Work w;
  w.kind = OP_FREE;
  w.dst = p;
  return submit(stream, std::move(w), cudaGraphNodeTypeMemFree);
}

static cudaError_t host_alloc(void **out, size_t bytes, unsigned flags) {
  if (!out) return set_err(cudaErrorInvalidValue);
  if (bytes == 0) {
    *out = nullptr;
    return cudaSuccess;
  }
  void *p = poisoned(bytes, 4096, 0xCD);
  if (!p) return fail(cudaErrorMemoryAllocation, "pinned allocation of %zu bytes", bytes);
  add_alloc(Alloc{(uintptr_t)p, (uintptr_t)p + bytes, A_PINNED, tl_device, flags});
  *out = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
  ENTER();
  UNSAFE_CALL("cudaMallocHost");
  return host_alloc(p, bytes, 0);
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) {
  ENTER();
  UNSAFE_CALL("cudaHostAlloc");
  if (flags & ~0x7u) return fail(cudaErrorInvalidValue, "cudaHostAlloc flags 0x%x", flags);
  return host_alloc(p, bytes, flags);
}

cudaError_t cudaFreeHost(void *p) {
  ENTER();
  if (!p) return cudaSuccess;
  UNSAFE_CALL("cudaFreeHost");
  return free_now(p, A_PINNED, "cudaFreeHost");
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags) {
  ENTER();
  UNSAFE_CALL("cudaHostRegister");
  if (!p || bytes == 0 || (flags & ~0xfu)) return fail(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu, 0x%x)", p, bytes, flags);
  /* the device pins whole pages: a range that shares a page with a registered (or pinned)
   * range is refused, as the driver refuses it */
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + bytes + 4095) & ~(uintptr_t)4095;
  {
    std::unique_lock<std::shared_mutex> g(g_mem_mu);
    for (auto &kv : *g_allocs) {
      const Alloc &a = kv.second;
      if (a.kind == A_DEVICE) continue;
      uintptr_t alo = a.lo & ~(uintptr_t)4095, ahi = (a.hi + 4095) & ~(uintptr_t)4095;
      if (alo < hi && lo < ahi) {
        g.unlock();
        return fail(cudaErrorHostMemoryAlreadyRegistered,
                    "[%p, +%zu) shares a page with the %s range [%p, +%zu)", p, bytes,
                    a.kind == A_PINNED ? "pinned" : "registered", (void *)a.lo, (size_t)(a.hi - a.lo));
      }
    }
    (*g_allocs)[(uintptr_t)p] = Alloc{(uintptr_t)p, (uintptr_t)p + bytes, A_REGISTERED, tl_device, flags};
  }
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p) {
  ENTER();
  UNSAFE_CALL("cudaHostUnregister");
  Alloc a;
  if (!p || !find_alloc(p, &a) || a.lo != (uintptr_t)p || a.kind != A_REGISTERED)
    return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister(%p): not the start of a registered range", p);
  sync_device(-1);
  remove_alloc(a.lo);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags) {
  ENTER();
  Alloc a;
  if (!dev || flags != 0) return set_err(cudaErrorInvalidValue);
  if (!host || !find_alloc(host, &a) || a.kind == A_DEVICE)
    return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer(%p): not pinned or registered host memory", host);
  *dev = host; /* unified addressing: the same address */
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p) {
  ENTER();
  Alloc a;
  if (!attr || !p) return set_err(cudaErrorInvalidValue);
  memset(attr, 0, sizeof *attr);
  if (!find_alloc(p, &a)) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
    attr->hostPointer = const_cast<void *>(p);
    return cudaSuccess;
  }
  attr->device = a.device;
  if (a.kind == A_DEVICE) {
    attr->type = cudaMemoryTypeDevice;
    attr->devicePointer = const_cast<void *>(p);
  } else {
    attr->type = cudaMemoryTypeHost;
    attr->devicePointer = const_cast<void *>(p);
    attr->hostPointer = const_cast<void *>(p);
  }
  return cudaSuccess;
}

/* ---------------------------------------------------------------- copies */
/* What a pointer is: 0 pageable host, A_DEVICE, A_PINNED, A_REGISTERED. */
static int space_of(const void *p, Alloc *a) {
  if (!find_alloc(p, a)) return 0;
  return a->kind;
}

static cudaError_t copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream,
                        int sync) {
  ENTER();
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue, "memcpy with a NULL pointer");
  Alloc ad, as;
  int sd = space_of(dst, &ad), ss = space_of(src, &as);
  if (sd == A_DEVICE && (uintptr_t)dst + bytes > ad.hi)
    return fail(cudaErrorInvalidValue, "memcpy of %zu bytes runs past the device allocation at %p", bytes, dst);
  if (ss == A_DEVICE && (uintptr_t)src + bytes > as.hi)
    return fail(cudaErrorInvalidValue, "memcpy of %zu bytes runs past the device allocation at %p", bytes, src);
  if (sd == A_DEVICE && ad.device != tl_device && ss == A_DEVICE && as.device != tl_device)
    return fail(cudaErrorInvalidValue, "memcpy between memory of devices other than the current one");
  bool dd = sd == A_DEVICE, sdv = ss == A_DEVICE;
  switch (kind) {
  case cudaMemcpyHostToDevice: if (!dd || sdv) goto dir; break;
  case cudaMemcpyDeviceToHost: if (dd || !sdv) goto dir; break;
  case cudaMemcpyDeviceToDevice: if (!dd || !sdv) goto dir; break;
  case cudaMemcpyHostToHost: if (dd || sdv) goto dir; break;
  case cudaMemcpyDefault: break;
  default: return fail(cudaErrorInvalidMemcpyDirection, "memcpy kind %d", (int)kind);
  }
  {
    bool capturing;
    {
      std::lock_guard<std::mutex> g(g_mu);
      cudaError_t e;
      Stream *s = resolve_stream_locked(stream, &e);
      if (!s) return set_err(e);
      capturing = s->cap != nullptr;
    }
    /* pageable host memory: the source is staged at the call; a pageable destination makes the
     * call wait for the copy (as CUDA's cudaMemcpyAsync does) */
    if (capturing && (sd == 0 || ss == 0)) {
      std::lock_guard<std::mutex> g(g_mu);
      Stream *s;
      cudaError_t e;
      s = resolve_stream_locked(stream, &e);
      if (s && s->cap && !s->cap->invalid) {
        s->cap->invalid = true;
        s->cap->why = "a copy from or to pageable host memory was captured";
      }
      return fail(cudaErrorStreamCaptureUnsupported,
                  "a copy from or to pageable host memory cannot be captured (it would run at the call)");
    }
    Work w;
    w.kind = OP_COPY;
    w.dst = dst;
    w.src = src;
    w.bytes = bytes;
    if (ss == 0) {
      w.staged.assign((const unsigned char *)src, (const unsigned char *)src + bytes);
      w.use_staged = true;
    }
    OpP op;
    cudaError_t e = submit(stream, std::move(w), cudaGraphNodeTypeMemcpy, &op);
    if (e != cudaSuccess) return e;
    if (op && (sync || sd == 0)) {
      run_until(op);
      return set_err(sticky(tl_device));
    }
    return cudaSuccess;
  }
dir:
  return fail(cudaErrorInvalidMemcpyDirection, "memcpy kind %d does not match the pointers (dst %s, src %s)",
              (int)kind, dd ? "device" : "host", sdv ? "device" : "host");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  ENTER();
  UNSAFE_CALL("cudaMemcpy");
  return copy(dst, src, bytes, kind, nullptr, 1);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, 0);
}

/* Row by row, each row a copy of its own (same checks); sync: the call waits for the last. */
static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t height, enum cudaMemcpyKind kind, cudaStream_t stream, int sync) {
  ENTER();
  if (dpitch < width || spitch < width) return fail(cudaErrorInvalidPitchValue, "pitches below the width");
  if (sync) UNSAFE_CALL("cudaMemcpy2D");
  for (size_t r = 0; r < height; r++) {
    cudaError_t e = copy((unsigned char *)dst + r * dpitch, (const unsigned char *)src + r * spitch, width, kind,
                         stream, sync && r + 1 == height);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
  return copy2d(dst, dpitch, src, spitch, width, height, kind, nullptr, 1);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy2d(dst, dpitch, src, spitch, width, height, kind, stream, 0);
}

static cudaError_t set(void *p, int value, size_t bytes, cudaStream_t stream, int sync) {
  ENTER();
  if (bytes == 0) return cudaSuccess;
  Alloc a;
  if (!p || space_of(p, &a) != A_DEVICE || (uintptr_t)p + bytes > a.hi)
    return fail(cudaErrorInvalidValue, "memset of %zu bytes at %p: not inside a device allocation", bytes, p);
  Work w;
  w.kind = OP_SET;
  w.dst = p;
  w.value = value & 0xff;
  w.bytes = bytes;
  OpP op;
  cudaError_t e = submit(stream, std::move(w), cudaGraphNodeTypeMemset, &op);
  if (e != cudaSuccess) return e;
  if (sync && op) {
    run_until(op);
    return set_err(sticky(tl_device));
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  ENTER();
  UNSAFE_CALL("cudaMemset");
  return set(p, value, bytes, nullptr, 1);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream) {
  return set(p, value, bytes, stream, 0);
}

/* ---------------------------------------------------------------- streams */
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
  ENTER();
  if (!out || (flags & ~1u)) return set_err(cudaErrorInvalidValue);
  Stream *s = new Stream;
  s->device = tl_device;
  s->flags = flags;
  std::lock_guard<std::mutex> g(g_mu);
  g_streams->insert(s);
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t h) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s || s->legacy || h == cudaStreamPerThread) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p)", (void *)h);
  if (s->cap) return fail(cudaErrorIllegalState, "cudaStreamDestroy of a capturing stream");
  /* its work still runs (when waited for, or by its thread); the handle dies now */
  s->destroyed = true;
  g_cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  ENTER();
  OpP tail;
  {
    std::lock_guard<std::mutex> g(g_mu);
    cudaError_t e;
    Stream *s = resolve_stream_locked(h, &e);
    if (!s) return fail(e, "cudaStreamSynchronize(%p)", (void *)h);
    if (s->cap) {
      if (!s->cap->invalid) {
        s->cap->invalid = true;
        s->cap->why = "the capturing stream was synchronized";
      }
      return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream");
    }
    if (s->legacy && capture_forbids_locked())
      return fail(cudaErrorStreamCaptureUnsupported, "synchronizing the legacy stream during a capture");
    tail = s->tail;
  }
  run_until(tail);
  return set_err(sticky(tl_device));
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  ENTER();
  OpP tail;
  {
    std::lock_guard<std::mutex> g(g_mu);
    cudaError_t e;
    Stream *s = resolve_stream_locked(h, &e);
    if (!s) return set_err(e);
    if (s->cap) return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a capturing stream");
    tail = s->tail;
    if (!tail || tail->done) return cudaSuccess;
  }
  if (config().serial && random_u64() % 2 == 0) { /* the device may have got there: it did */
    run_until(tail);
    return set_err(sticky(tl_device));
  }
  std::lock_guard<std::mutex> g(g_mu);
  return tail->done ? cudaSuccess : set_err(cudaErrorNotReady);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t eh, unsigned int flags) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  Event *ev = reinterpret_cast<Event *>(eh);
  if (!s) return fail(e, "cudaStreamWaitEvent on stream %p", (void *)h);
  if (!ev || !g_events->count(ev)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on event %p", (void *)eh);
  if (flags & ~(unsigned)cudaEventWaitExternal) return set_err(cudaErrorInvalidValue);
  if (s->cap && (flags & cudaEventWaitExternal)) { /* an external wait node of the graph */
    Work w;
    w.ev = ev;
    return set_err(capture_locked(s, std::move(w), cudaGraphNodeTypeWaitEvent));
  }
  if (ev->captured && ev->cap && g_captures->count(ev->cap)) { /* a fork or join of a capture */
    Capture *c = ev->cap;
    if (s->cap && s->cap != c) return fail(cudaErrorStreamCaptureMerge, "waiting on an event of another capture");
    if (!s->cap) {
      s->cap = c;
      c->streams.insert(s);
      s->cap_tail = ev->cap_nodes;
    } else {
      for (Node *n : ev->cap_nodes)
        if (std::find(s->cap_tail.begin(), s->cap_tail.end(), n) == s->cap_tail.end()) s->cap_tail.push_back(n);
    }
    return cudaSuccess;
  }
  if (ev->captured) return fail(cudaErrorCapturedEvent, "the event was last recorded in a capture that has ended");
  if (s->cap) {
    if (!ev->last) return cudaSuccess;
    s->cap->invalid = true;
    s->cap->why = "a captured stream waited on an event recorded outside the capture";
    return fail(cudaErrorStreamCaptureIsolation, "a capturing stream waits on an event recorded outside the capture");
  }
  if (!ev->last || ev->last->done) return cudaSuccess;
  OpP op = std::make_shared<Op>();
  op->w.kind = OP_NOP;
  op->deps.push_back(ev->last);
  enqueue_locked(s, op);
  return cudaSuccess;
}

/* ---------------------------------------------------------------- events */
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags) {
  ENTER();
  if (!out || (flags & ~0x7u)) return set_err(cudaErrorInvalidValue);
  Event *ev = new Event;
  ev->flags = flags;
  ev->device = tl_device;
  std::lock_guard<std::mutex> g(g_mu);
  g_events->insert(ev);
  *out = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t eh) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  Event *ev = reinterpret_cast<Event *>(eh);
  if (!ev || !g_events->erase(ev)) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p)", (void *)eh);
  delete ev; /* a pending record keeps its own state (the op) */
  return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t eh, cudaStream_t h, unsigned int flags) {
  if (flags & ~(unsigned)cudaEventRecordExternal) return set_err(cudaErrorInvalidValue);
  if (flags & cudaEventRecordExternal) {
    ENTER();
    std::lock_guard<std::mutex> g(g_mu);
    cudaError_t e;
    Event *ev = reinterpret_cast<Event *>(eh);
    if (!ev || !g_events->count(ev)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecordWithFlags(%p)", (void *)eh);
    Stream *s = resolve_stream_locked(h, &e);
    if (!s) return set_err(e);
    if (s->cap) { /* an external record node: each launch of the graph records the event */
      Work w;
      w.ev = ev;
      return set_err(capture_locked(s, std::move(w), cudaGraphNodeTypeEventRecord));
    }
  }
  return cudaEventRecord(eh, h);
}

cudaError_t cudaEventRecord(cudaEvent_t eh, cudaStream_t h) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Event *ev = reinterpret_cast<Event *>(eh);
  if (!ev || !g_events->count(ev)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p)", (void *)eh);
  Stream *s = resolve_stream_locked(h, &e);
  if (!s) return fail(e, "cudaEventRecord on stream %p", (void *)h);
  if (s->cap) { /* a capture event: the stream's current capture tail */
    if (s->cap->invalid) return fail(cudaErrorStreamCaptureInvalidated, "the capture was invalidated: %s", s->cap->why.c_str());
    ev->captured = true;
    ev->cap = s->cap;
    ev->cap_nodes = s->cap_tail;
    return cudaSuccess;
  }
  OpP op = std::make_shared<Op>();
  op->w.kind = OP_RECORD;
  op->w.ev = ev;
  enqueue_locked(s, op);
  ev->last = op;
  ev->captured = false;
  ev->cap = nullptr;
  return cudaSuccess;
}

static cudaError_t event_target(cudaEvent_t eh, OpP *out, const char *what) {
  std::lock_guard<std::mutex> g(g_mu);
  Event *ev = reinterpret_cast<Event *>(eh);
  if (!ev || !g_events->count(ev)) return fail(cudaErrorInvalidResourceHandle, "%s(%p)", what, (void *)eh);
  if (ev->captured) {
    if (ev->cap && g_captures->count(ev->cap) && !ev->cap->invalid) {
      ev->cap->invalid = true;
      ev->cap->why = "an event of the capture was synchronized or queried";
    }
    return fail(cudaErrorCapturedEvent, "%s of an event recorded in a capture", what);
  }
  *out = ev->last;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t eh) {
  ENTER();
  OpP t;
  cudaError_t e = event_target(eh, &t, "cudaEventSynchronize");
  if (e != cudaSuccess) return e;
  run_until(t);
  return set_err(sticky(tl_device));
}

cudaError_t cudaEventQuery(cudaEvent_t eh) {
  ENTER();
  OpP t;
  cudaError_t e = event_target(eh, &t, "cudaEventQuery");
  if (e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!t || t->done) return cudaSuccess;
  }
  if (config().serial && random_u64() % 2 == 0) { /* the device got there: it ran */
    run_until(t);
    return set_err(sticky(tl_device));
  }
  std::lock_guard<std::mutex> g(g_mu);
  return t->done ? cudaSuccess : set_err(cudaErrorNotReady);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  ENTER();
  if (!ms) return set_err(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> g(g_mu);
  Event *x = reinterpret_cast<Event *>(a), *y = reinterpret_cast<Event *>(b);
  if (!x || !y || !g_events->count(x) || !g_events->count(y)) return set_err(cudaErrorInvalidResourceHandle);
  if ((x->flags | y->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event without timing");
  if (!x->last || !y->last || !x->last->done || !y->last->done)
    return fail(cudaErrorNotReady, "cudaEventElapsedTime of an event that has not completed");
  *ms = (float)(y->last->t - x->last->t); /* the model's time, not a GPU's */
  return cudaSuccess;
}

/* ---------------------------------------------------------------- capture and graphs */
cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (!mode || *mode < cudaStreamCaptureModeGlobal || *mode > cudaStreamCaptureModeRelaxed)
    return set_err(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = tl_cap_mode;
  tl_cap_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s) return set_err(e);
  if (s->legacy) return fail(cudaErrorStreamCaptureUnsupported, "the legacy stream cannot be captured");
  if (s->cap) return fail(cudaErrorIllegalState, "the stream is already capturing");
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed) return set_err(cudaErrorInvalidValue);
  static unsigned long long next_capture_id = 0;
  Capture *c = new Capture;
  c->id = ++next_capture_id;
  c->g = new Graph;
  c->g->device = s->device;
  c->mode = mode;
  c->origin = s;
  c->thread = std::this_thread::get_id();
  c->streams.insert(s);
  g_captures->insert(c);
  s->cap = c;
  s->cap_tail.clear();
  return cudaSuccess;
}

/* Is n an ancestor of (or one of) the nodes in `of`? */
static bool reaches(Node *n, const std::vector<Node *> &of) {
  std::vector<Node *> st(of.begin(), of.end());
  std::set<Node *> seen;
  while (!st.empty()) {
    Node *x = st.back();
    st.pop_back();
    if (x == n) return true;
    if (!seen.insert(x).second) continue;
    for (Node *d : x->deps) st.push_back(d);
  }
  return false;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *graph) {
  ENTER();
  std::unique_lock<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s || !graph) return set_err(s ? cudaErrorInvalidValue : e);
  Capture *c = s->cap;
  if (!c) return fail(cudaErrorIllegalState, "cudaStreamEndCapture of a stream that does not capture");
  if (c->origin != s) return fail(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture on a stream that joined the capture, not its origin");
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread, "cudaStreamEndCapture from another thread");
  bool unjoined = false;
  for (Stream *o : c->streams) {
    if (o == s) continue;
    for (Node *n : o->cap_tail)
      if (!reaches(n, s->cap_tail)) unjoined = true;
  }
  for (Stream *o : c->streams) {
    o->cap = nullptr;
    o->cap_tail.clear();
  }
  g_captures->erase(c);
  *graph = nullptr;
  cudaError_t r = cudaSuccess;
  if (c->invalid) r = fail(cudaErrorStreamCaptureInvalidated, "the capture was invalidated: %s", c->why.c_str());
  else if (unjoined) r = fail(cudaErrorStreamCaptureUnjoined, "a stream forked into the capture was not joined back");
  if (r == cudaSuccess) {
    g_graphs->insert(c->g);
    *graph = reinterpret_cast<cudaGraph_t>(c->g);
  } else {
    graph_release_locked(c->g);
    delete c->g;
  }
  delete c;
  g.unlock();
  uobj_run_dead();
  return r;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t h, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                     cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *ndeps) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s || !status) return set_err(s ? cudaErrorInvalidValue : e);
  Capture *c = s->cap;
  *status = !c ? cudaStreamCaptureStatusNone : c->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id) *id = c ? c->id : 0;
  if (graph) *graph = c ? reinterpret_cast<cudaGraph_t>(c->g) : nullptr;
  if (deps) *deps = c && !s->cap_tail.empty() ? reinterpret_cast<const cudaGraphNode_t *>(s->cap_tail.data()) : nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = c ? s->cap_tail.size() : 0;
  return cudaSuccess;
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t *out, void *ptr, cudaHostFn_t destroy, unsigned int refs,
                                 unsigned int flags) {
  if (!out || !destroy || refs == 0 || flags != cudaUserObjectNoDestructorSync) return set_err(cudaErrorInvalidValue);
  UserObj *o = new UserObj;
  o->ptr = ptr;
  o->fn = destroy;
  o->refs = refs;
  std::lock_guard<std::mutex> g(g_mu);
  g_uobjs->insert(o);
  *out = reinterpret_cast<cudaUserObject_t>(o);
  return cudaSuccess;
}

cudaError_t cudaUserObjectRetain(cudaUserObject_t oh, unsigned int count) {
  std::lock_guard<std::mutex> g(g_mu);
  UserObj *o = reinterpret_cast<UserObj *>(oh);
  if (!o || !g_uobjs->count(o) || count == 0) return set_err(cudaErrorInvalidValue);
  o->refs += count;
  return cudaSuccess;
}

cudaError_t cudaUserObjectRelease(cudaUserObject_t oh, unsigned int count) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    UserObj *o = reinterpret_cast<UserObj *>(oh);
    if (!o || !g_uobjs->count(o) || count == 0 || count > o->refs) return set_err(cudaErrorInvalidValue);
    uobj_release_locked(o, count);
  }
  uobj_run_dead();
  return cudaSuccess;
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t gh, cudaUserObject_t oh, unsigned int count, unsigned int flags) {
  std::lock_guard<std::mutex> g(g_mu);
  Graph *gr = reinterpret_cast<Graph *>(gh);
  UserObj *o = reinterpret_cast<UserObj *>(oh);
  bool building = false;
  for (Capture *c : *g_captures) building |= c->g == gr;
  if (!gr || (!g_graphs->count(gr) && !building) || !o || !g_uobjs->count(o) || count == 0 ||
      (flags & ~(unsigned)cudaGraphUserObjectMove))
    return set_err(cudaErrorInvalidValue);
  if (!(flags & cudaGraphUserObjectMove)) o->refs += count; /* else the caller's references move */
  gr->uobjs[o] += count;
  return cudaSuccess;
}

cudaError_t cudaGraphReleaseUserObject(cudaGraph_t gh, cudaUserObject_t oh, unsigned int count) {
  {
    std::lock_guard<std::mutex> g(g_mu);
    Graph *gr = reinterpret_cast<Graph *>(gh);
    UserObj *o = reinterpret_cast<UserObj *>(oh);
    if (!gr || !o || count == 0 || !gr->uobjs.count(o) || gr->uobjs[o] < count) return set_err(cudaErrorInvalidValue);
    if ((gr->uobjs[o] -= count) == 0) gr->uobjs.erase(o);
    uobj_release_locked(o, count);
  }
  uobj_run_dead();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s || !status) return set_err(s ? cudaErrorInvalidValue : e);
  *status = !s->cap ? cudaStreamCaptureStatusNone
                    : s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

/* A copy of graph src into dst: closures cloned, dependencies remapped, the user-object
 * references taken again (each graph holds its own). */
static void clone_graph_locked(const Graph &src, Graph &dst) {
  std::map<const Node *, Node *> map;
  dst.device = src.device;
  for (auto &n : src.nodes) {
    std::unique_ptr<Node> m(new Node);
    m->type = n->type;
    m->w.kind = n->w.kind;
    if (n->w.closure) m->w.closure.reset(n->w.closure->clone());
    m->w.name = n->w.name;
    m->w.grid = n->w.grid;
    m->w.block = n->w.block;
    m->w.smem = n->w.smem;
    m->w.device = n->w.device;
    m->w.dst = n->w.dst;
    m->w.src = n->w.src;
    m->w.bytes = n->w.bytes;
    m->w.value = n->w.value;
    m->w.staged = n->w.staged;
    m->w.use_staged = n->w.use_staged;
    m->w.fn = n->w.fn;
    m->w.ev = n->w.ev;
    map[n.get()] = m.get();
    dst.nodes.push_back(std::move(m));
  }
  for (size_t i = 0; i < src.nodes.size(); i++)
    for (Node *d : src.nodes[i]->deps) dst.nodes[i]->deps.push_back(map[d]);
  for (auto &u : src.uobjs)
    if (g_uobjs->count(u.first)) {
      u.first->refs += u.second;
      dst.uobjs[u.first] += u.second;
    }
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t gh, unsigned long long flags) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  Graph *gr = reinterpret_cast<Graph *>(gh);
  if (!exec || !gr || !g_graphs->count(gr) || flags) return set_err(cudaErrorInvalidValue);
  GraphExec *x = new GraphExec;
  clone_graph_locked(*gr, x->g);
  g_execs->insert(x);
  *exec = reinterpret_cast<cudaGraphExec_t>(x);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t xh, cudaStream_t h) {
  ENTER();
  std::lock_guard<std::mutex> g(g_mu);
  GraphExec *x = reinterpret_cast<GraphExec *>(xh);
  if (!x || !g_execs->count(x)) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch(%p)", (void *)xh);
  cudaError_t e;
  Stream *s = resolve_stream_locked(h, &e);
  if (!s) return set_err(e);
  if (s->cap) return fail(cudaErrorNotSupported, "launching a graph into a capture (a child graph) is not modelled");
  OpP op = std::make_shared<Op>();
  op->w.kind = OP_GRAPH;
  /* the launch holds its own copy (the exec may be destroyed while the launch is pending),
   * and its user objects until it is done */
  op->gx = std::make_shared<GraphExec>();
  clone_graph_locked(x->g, op->gx->g);
  for (auto &u : op->gx->g.uobjs) op->held.push_back(u);
  op->gx->g.uobjs.clear();
  /* external event nodes: a wait node waits for the event's latest record at the launch; a
   * record node makes this launch the event's latest record (the model waits for, and records
   * at, the whole launch: coarser than a node, never looser) */
  for (auto &n : op->gx->g.nodes)
    if (n->type == cudaGraphNodeTypeWaitEvent && g_events->count(n->w.ev) && n->w.ev->last && !n->w.ev->last->done)
      op->deps.push_back(n->w.ev->last);
  enqueue_locked(s, op);
  for (auto &n : op->gx->g.nodes)
    if (n->type == cudaGraphNodeTypeEventRecord && g_events->count(n->w.ev)) {
      n->w.ev->last = op;
      n->w.ev->captured = false;
      n->w.ev->cap = nullptr;
    }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t xh) {
  std::unique_lock<std::mutex> g(g_mu);
  GraphExec *x = reinterpret_cast<GraphExec *>(xh);
  if (!x || !g_execs->erase(x)) return set_err(cudaErrorInvalidResourceHandle);
  graph_release_locked(&x->g);
  delete x;
  g.unlock();
  uobj_run_dead();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t gh) {
  std::unique_lock<std::mutex> g(g_mu);
  Graph *gr = reinterpret_cast<Graph *>(gh);
  if (!gr || !g_graphs->erase(gr)) return set_err(cudaErrorInvalidResourceHandle);
  graph_release_locked(gr);
  delete gr;
  g.unlock();
  uobj_run_dead();
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t gh, cudaGraphNode_t *nodes, size_t *count) {
  std::lock_guard<std::mutex> g(g_mu);
  Graph *gr = reinterpret_cast<Graph *>(gh);
  if (!gr || !g_graphs->count(gr) || !count) return set_err(cudaErrorInvalidValue);
  if (nodes) {
    size_t n = std::min(*count, gr->nodes.size());
    for (size_t i = 0; i < n; i++) nodes[i] = reinterpret_cast<cudaGraphNode_t>(gr->nodes[i].get());
  }
  *count = gr->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t nh, enum cudaGraphNodeType *type) {
  if (!nh || !type) return set_err(cudaErrorInvalidValue);
  *type = (cudaGraphNodeType)reinterpret_cast<Node *>(nh)->type;
  return cudaSuccess;
}

/* ---------------------------------------------------------------- the model's own */
void emcsim_reset(void) {
  sync_device(-1);
  std::lock_guard<std::mutex> g(g_mu);
  for (Device &d : devs()) {
    d.sticky = 0;
    d.fault.clear();
  }
  tl_last = cudaSuccess;
}

const char *emcsim_mode(void) { return config().serial ? "serial" : "concurrent"; }
uint64_t emcsim_seed(void) { return config().seed; }

const char *emcsim_last_fault(void) {
  std::lock_guard<std::mutex> g(g_mu);
  for (Device &d : devs())
    if (d.sticky) return d.fault.c_str();
  return "";
}

void emcsim_get_counters(emcsim_counters *o) {
  o->kernels = c_kernels;
  o->blocks = c_blocks;
  o->threads = c_threads;
  o->switches = c_switches;
  o->ops = c_ops;
  o->violations = c_violations;
}

}  // extern "C"

namespace emcsim {
/* Library work (CUB's device-wide algorithms) run in stream order. */
cudaError_t submit_fn(cudaStream_t stream, const char *name, std::function<void()> fn) {
  ENTER();
  Work w;
  w.kind = OP_FN;
  w.name = name;
  w.fn = std::move(fn);
  return submit(stream, std::move(w), cudaGraphNodeTypeKernel);
}
}  // namespace emcsim

namespace emcsim {
cudaError_t check_device_range(const void *p, size_t bytes, const char *what) {
  Alloc a;
  if (!p || !find_alloc(p, &a) || a.kind != A_DEVICE || (uintptr_t)p + bytes > a.hi)
    return fail(cudaErrorInvalidValue, "%s: [%p, +%zu) is not inside a device allocation", what, p, bytes);
  if (a.device != tl_device)
    return fail(cudaErrorInvalidValue, "%s: %p is memory of device %d, not of the current device %d", what, p,
                a.device, tl_device);
  return cudaSuccess;
}

void poison_scratch(void *p, size_t bytes) { memset(p, 0xCB, bytes); }
}  // namespace emcsim
