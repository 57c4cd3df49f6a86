/*
 * emcsim/vector_types.h: CUDA's vector types (size and alignment as the toolkit's) and their
 * make_* functions, for the CPU model of the device.
 */
#ifndef EMCSIM_VECTOR_TYPES_H
#define EMCSIM_VECTOR_TYPES_H

#include "cuda_runtime_api.h"

#define EMCSIM_VEC2(T, name, al)                        \
  struct __attribute__((aligned(al))) name { T x, y; };  \
  static inline name make_##name(T x, T y) {             \
    name v = {x, y};                                     \
    return v;                                            \
  }
#define EMCSIM_VEC3(T, name)                            \
  struct name { T x, y, z; };                            \
  static inline name make_##name(T x, T y, T z) {        \
    name v = {x, y, z};                                  \
    return v;                                            \
  }
#define EMCSIM_VEC4(T, name, al)                            \
  struct __attribute__((aligned(al))) name { T x, y, z, w; }; \
  static inline name make_##name(T x, T y, T z, T w) {       \
    name v = {x, y, z, w};                                   \
    return v;                                                \
  }

EMCSIM_VEC2(int, int2, 8)
EMCSIM_VEC2(unsigned int, uint2, 8)
EMCSIM_VEC2(float, float2, 8)
EMCSIM_VEC2(long long, longlong2, 16)
EMCSIM_VEC2(unsigned long long, ulonglong2, 16)
EMCSIM_VEC2(double, double2, 16)
EMCSIM_VEC2(unsigned short, ushort2, 4)
EMCSIM_VEC3(int, int3)
EMCSIM_VEC3(unsigned int, uint3)
EMCSIM_VEC3(float, float3)
EMCSIM_VEC4(int, int4, 16)
EMCSIM_VEC4(unsigned int, uint4, 16)
EMCSIM_VEC4(float, float4, 16)
EMCSIM_VEC4(unsigned char, uchar4, 4)
EMCSIM_VEC4(unsigned short, ushort4, 8)

#undef EMCSIM_VEC2
#undef EMCSIM_VEC3
#undef EMCSIM_VEC4

#endif /* EMCSIM_VECTOR_TYPES_H */
