/*
 * fiber.cpp: context switches for the model's fibers (fiber.h).
 *
 * x86-64: a hand-written switch that saves what the SysV ABI makes callee-saved (rbx, rbp,
 * r12-r15, the x87 control word and MXCSR) and swaps stack pointers: a few nanoseconds, which
 * matters because every thread of every block of every kernel is a fiber. Elsewhere (or with
 * EMCSIM_FORCE_UCONTEXT): makecontext / swapcontext.
 */
#include "fiber.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(EMCSIM_FORCE_UCONTEXT) && defined(EMCSIM_ASM_SWITCH)
#undef EMCSIM_ASM_SWITCH
#include <ucontext.h>
#endif
#if defined(EMCSIM_ASM_SWITCH) && !defined(__x86_64__)
#undef EMCSIM_ASM_SWITCH /* aarch64: ucontext (no hand-written switch is tested there) */
#include <ucontext.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMCSIM_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define EMCSIM_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMCSIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define EMCSIM_TSAN 1
#endif

#ifdef EMCSIM_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
}
#endif
#ifdef EMCSIM_TSAN
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
}
#endif

#ifdef EMCSIM_ASM_SWITCH
extern "C" void emcsim_ctx_switch(void **save_sp, void *new_sp);
extern "C" void emcsim_ctx_start(void);
__asm__(
    ".text\n"
    ".globl emcsim_ctx_switch\n"
    ".hidden emcsim_ctx_switch\n"
    ".type emcsim_ctx_switch,@function\n"
    "emcsim_ctx_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size emcsim_ctx_switch, .-emcsim_ctx_switch\n"
    ".globl emcsim_ctx_start\n"
    ".hidden emcsim_ctx_start\n"
    ".type emcsim_ctx_start,@function\n"
    "emcsim_ctx_start:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size emcsim_ctx_start, .-emcsim_ctx_start\n");
#endif

namespace emcsim {

int fiber_alloc(Fiber *f, size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size = (size + page - 1) & ~(page - 1);
  void *m = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) return 0;
  mprotect(m, page, PROT_NONE); /* a stack overflow faults instead of corrupting */
  f->stack = (unsigned char *)m + page;
  f->stack_size = size;
#ifdef EMCSIM_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  return 1;
}

void fiber_free(Fiber *f) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (!f->stack) return;
#ifdef EMCSIM_TSAN
  if (f->tsan) __tsan_destroy_fiber(f->tsan);
  f->tsan = nullptr;
#endif
  munmap(f->stack - page, f->stack_size + page);
  f->stack = nullptr;
}

#ifndef EMCSIM_ASM_SWITCH
static void uc_trampoline(unsigned hi_e, unsigned lo_e, unsigned hi_a, unsigned lo_a) {
  void (*entry)(void *) = (void (*)(void *))(((uintptr_t)hi_e << 32) | lo_e);
  void *arg = (void *)(((uintptr_t)hi_a << 32) | lo_a);
  entry(arg);
  abort(); /* entry never returns */
}
#endif

void fiber_init(Fiber *f, void (*entry)(void *), void *arg) {
#ifdef EMCSIM_ASAN
  /* frames of a fiber that never returned (abandoned mid-kernel by a fault, or a runner that
   * ended by switching away for good) may have left their redzones and scopes poisoned */
  __asan_unpoison_memory_region(f->stack, f->stack_size);
#endif
  f->abandoned = 0;
#ifdef EMCSIM_ASM_SWITCH
  uint64_t *top = (uint64_t *)(((uintptr_t)(f->stack + f->stack_size) - 16) & ~(uintptr_t)15);
  uint64_t *sp = top - 8; /* mxcsr/fcw, r15, r14, r13, r12, rbx, rbp, return address */
  uint32_t mxcsr;
  uint16_t fcw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fcw));
  memset(sp, 0, 8 * sizeof *sp);
  memcpy((unsigned char *)sp, &mxcsr, 4);
  memcpy((unsigned char *)sp + 4, &fcw, 2);
  sp[1] = 0;                          /* r15 */
  sp[2] = 0;                          /* r14 */
  sp[3] = (uint64_t)(uintptr_t)entry; /* r13 */
  sp[4] = (uint64_t)(uintptr_t)arg;   /* r12 */
  sp[5] = 0;                          /* rbx */
  sp[6] = 0;                          /* rbp */
  sp[7] = (uint64_t)(uintptr_t)&emcsim_ctx_start;
  f->sp = sp;
#else
  uintptr_t e = (uintptr_t)entry, a = (uintptr_t)arg;
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, (void (*)())uc_trampoline, 4, (unsigned)(e >> 32), (unsigned)e,
              (unsigned)(a >> 32), (unsigned)a);
#endif
}

static void raw_switch(Fiber *from, Fiber *to) {
#ifdef EMCSIM_ASM_SWITCH
  emcsim_ctx_switch(&from->sp, to->sp);
#else
  swapcontext(&from->uc, &to->uc);
#endif
}

void fiber_switch(Host *h, Fiber *from, Fiber *to, int to_host, int from_dead) {
  if (from == to) return; /* a fiber resuming itself (the switch would read its old sp) */
#ifdef EMCSIM_ASAN
  const void *bottom = to_host ? h->stack_bottom : to->stack;
  size_t size = to_host ? h->stack_size : to->stack_size;
  __sanitizer_start_switch_fiber(from_dead ? nullptr : &from->asan_fake, bottom, size);
#else
  (void)h;
  (void)to_host;
  (void)from_dead;
#endif
#ifdef EMCSIM_TSAN
  if (to_host && !h->self.tsan) h->self.tsan = __tsan_get_current_fiber();
  if (!to_host && !h->self.tsan) h->self.tsan = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(to_host ? h->self.tsan : to->tsan, 0);
#endif
  raw_switch(from, to);
  /* running as `from` again */
#ifdef EMCSIM_ASAN
  {
    const void *ob;
    size_t os;
    __sanitizer_finish_switch_fiber(from->asan_fake, &ob, &os);
  }
#endif
}

void fiber_arrived(Host *h, Fiber *self, int from_host) {
#ifdef EMCSIM_ASAN
  const void *ob = nullptr;
  size_t os = 0;
  __sanitizer_finish_switch_fiber(nullptr, &ob, &os);
  if (from_host && !h->stack_bottom) {
    h->stack_bottom = ob;
    h->stack_size = os;
  }
#else
  (void)h;
  (void)from_host;
#endif
  (void)self;
}

}  // namespace emcsim
