/*
 * fiber.h: the model's fibers: a context switch (a few instructions of assembly on x86-64 and
 * aarch64, ucontext elsewhere), stacks with a guard page, and the sanitizers' fiber annotations
 * (AddressSanitizer and ThreadSanitizer must be told when a thread changes stacks).
 */
#ifndef EMCSIM_FIBER_H
#define EMCSIM_FIBER_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__aarch64__)
#define EMCSIM_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace emcsim {

struct Fiber {
  void *sp = nullptr;          /* saved stack pointer (asm switch) */
#ifndef EMCSIM_ASM_SWITCH
  ucontext_t uc;
#endif
  unsigned char *stack = nullptr; /* lowest usable address (above the guard page) */
  size_t stack_size = 0;
  void *asan_fake = nullptr;   /* ASan's fake stack of this fiber while it is switched out */
  void *tsan = nullptr;        /* ThreadSanitizer's fiber */
  int abandoned = 0;           /* left mid-kernel (a fault): its stack's shadow is stale */
};

/* The thread's own context (the scheduler's), where fibers switch back to. */
struct Host {
  Fiber self;
  const void *stack_bottom = nullptr; /* ASan: the host stack, learnt at the first switch */
  size_t stack_size = 0;
};

/* Allocate `size` bytes of stack (plus a guard page) for f. 0 on failure. */
int fiber_alloc(Fiber *f, size_t size);
void fiber_free(Fiber *f);
/* Prepare f to run entry(arg) on its stack at the next switch into it (entry never returns:
 * it switches away for the last time). */
void fiber_init(Fiber *f, void (*entry)(void *), void *arg);
/* Switch from the running context `from` to `to`. `to_host`: `to` is the host context h;
 * `from_dead`: `from` never runs again (ASan forgets its fake stack). */
void fiber_switch(Host *h, Fiber *from, Fiber *to, int to_host, int from_dead);
/* Called first thing on a fiber's stack after a switch into it (sanitizer bookkeeping). */
void fiber_arrived(Host *h, Fiber *self, int from_host);

}  // namespace emcsim

#endif /* EMCSIM_FIBER_H */
