/*
 * model.h: what the two halves of the CPU model share: device.cpp (blocks, fibers, collectives,
 * the forward-progress watchdog) and runtime.cpp (memory, streams, events, graphs, errors).
 */
#ifndef EMCSIM_MODEL_H
#define EMCSIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <string>

#include "cuda_runtime.h"

namespace emcsim {

/* The model's settings, read once from the environment (README: "Settings"). */
struct Config {
  int serial;              /* EMC_CUDASIM_MODE: serial (1, the default) or concurrent (0) */
  uint64_t seed;           /* EMC_CUDASIM_SEED */
  int devices;             /* EMC_CUDASIM_DEVICES (1) */
  uint64_t watchdog_ops;   /* EMC_CUDASIM_WATCHDOG: instrumented operations one thread may
                              wait through in one launch (see README) */
  double watchdog_s;       /* EMC_CUDASIM_WATCHDOG_S: wall-clock bound of one launch */
  size_t stack_bytes;      /* EMC_CUDASIM_STACK_KB: stack of each fiber */
  size_t mem_bytes;        /* EMC_CUDASIM_MEM_MB: each device's memory */
  int verbose;             /* EMC_CUDASIM_VERBOSE */
};
const Config &config();

/* A seeded random number (thread-safe): the orders of streams, blocks and threads. */
uint64_t random_u64();

/* One launch being run. */
struct KernelRun {
  const char *name;        /* the kernel's name (EMC_LAUNCH / emcsim_set_kernel_name), or its
                              address when unnamed */
  const Closure *closure;  /* the kernel and its arguments */
  dim3 grid, block;
  size_t smem;
  int device;
};

/* Run every block of a launch on the calling OS thread (fibers). cudaSuccess, or the fault's
 * error, which the runtime has already made sticky and reported (one line on stderr). */
cudaError_t run_kernel(const KernelRun &k);

/* Can a kernel of `device` reach [p, p + bytes)? 0 when it can (and [*lo, *hi) is a range it
 * may reach, which stays so until memory_generation() changes), else the CUDA error to raise
 * and, in why, what the address is. */
int check_access(int device, const volatile void *p, size_t bytes, std::string *why, uintptr_t *lo,
                 uintptr_t *hi);
/* Moves on whenever memory is freed or unregistered, or peer access changes. */
uint64_t memory_generation();

/* A fault (sticky): the runtime records it for `device`, prints `line` once on stderr, and
 * every later call on the device returns e. */
void raise_fault(int device, cudaError_t e, const std::string &line);

/* Counters (atomic) */
void count_kernel(uint64_t blocks, uint64_t threads);
void count_switches(uint64_t n);
void count_ops(uint64_t n);
void count_violation();

}  // namespace emcsim

#endif /* EMCSIM_MODEL_H */
