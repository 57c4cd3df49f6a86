/*
 * limits.cpp: each kernel's sm_90 resources, read at build time from nvcc's output for the real
 * device (cuda/sim/tools/kernel_limits.py writes emcsim_limits.inc: the __launch_bounds__ from
 * the PTX's .maxntid, the registers and static shared memory from ptxas -v). A launch above
 * them fails as on an H100 ("too many resources requested for launch"). Built without nvcc,
 * the table is empty and only the architectural limits are checked (README).
 */
#include <string.h>

#include "model.h"

namespace emcsim {

struct Limits {
  const char *name;
  unsigned maxntid, regs, smem;
};

static const Limits g_limits[] = {
#include "emcsim_limits.inc"
    {nullptr, 0, 0, 0}};

const Limits *find_limits(const char *name) {
  if (!name) return nullptr;
  for (const Limits *l = g_limits; l->name; l++)
    if (strcmp(l->name, name) == 0) return l;
  return nullptr;
}

}  // namespace emcsim
