/* cub/util_type.cuh (CPU model): the poison value a collective gives the threads CUB leaves
 * undefined, and CUB's operators. */
#ifndef EMCSIM_CUB_UTIL_TYPE_CUH
#define EMCSIM_CUB_UTIL_TYPE_CUH
#include <string.h>

namespace cub {
template <typename T> inline T emcsim_undefined() {
  T v;
  memset((void *)&v, 0xA5, sizeof v);
  return v;
}
struct Sum {
  template <typename T> T operator()(const T &a, const T &b) const { return a + b; }
};
struct Max {
  template <typename T> T operator()(const T &a, const T &b) const { return a < b ? b : a; }
};
struct Min {
  template <typename T> T operator()(const T &a, const T &b) const { return b < a ? b : a; }
};
}  // namespace cub
#endif
