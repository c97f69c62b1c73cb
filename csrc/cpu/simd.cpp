// The vector paths in force (kronpe/simd.h).
#include "kronpe/simd.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kronpe/avx512.h"

namespace kronpe {

int simd_cap() {
  static const int cap = [] {
    const char* v = std::getenv("KRONPE_SIMD");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "avx512") == 0) return 2;
    if (std::strcmp(v, "avx2") == 0) return 1;
    if (std::strcmp(v, "generic") == 0) return 0;
    std::fprintf(stderr, "kronpe: KRONPE_SIMD=%s is not one of avx512, avx2, generic; ignored\n", v);
    return 2;
  }();
  return cap;
}

int simd_level() {
  static const int level = [] {
    int cpu = 0;  // a build without the x86 kernels (kronpe/avx512.h) has the generic path alone
#if KRONPE_AVX512
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      cpu = 2;
    else if (__builtin_cpu_supports("avx2"))
      cpu = 1;
#endif
    return cpu < simd_cap() ? cpu : simd_cap();
  }();
  return level;
}

}  // namespace kronpe
