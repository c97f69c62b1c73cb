// kronpe C++ core: regions of AVX-512 code. KRONPE_AVX512 is 1 where the compiler can build it
// (x86-64 GCC or Clang, not nvcc, not -DKRONPE_NO_AVX512: then the generic code alone). Such code
// sits between KRONPE_AVX512_BEGIN("target list") and KRONPE_AVX512_END and runs only after
// cpu_has_avx512() said yes. (GCC 12's shuffle and align intrinsics read _mm512_undefined_*():
// its -Wuninitialized warnings are off inside the regions.)
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    !defined(KRONPE_NO_AVX512)
#define KRONPE_AVX512 1
#include <immintrin.h>

#define KRONPE_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define KRONPE_AVX512_BEGIN(targets) \
  KRONPE_PRAGMA(clang attribute push(__attribute__((target(targets))), apply_to = function))
#define KRONPE_AVX512_END KRONPE_PRAGMA(clang attribute pop)
#else
#define KRONPE_AVX512_BEGIN(targets)                                             \
  KRONPE_PRAGMA(GCC push_options) KRONPE_PRAGMA(GCC target(targets))             \
  KRONPE_PRAGMA(GCC diagnostic push) KRONPE_PRAGMA(GCC diagnostic ignored "-Wuninitialized") \
  KRONPE_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define KRONPE_AVX512_END KRONPE_PRAGMA(GCC diagnostic pop) KRONPE_PRAGMA(GCC pop_options)
#endif

namespace kronpe {
// Whether this CPU runs AVX-512 F, and with `full` DQ, BW and VL too (asked once, then kept).
bool cpu_has_avx512(bool full);
}  // namespace kronpe
#else
#define KRONPE_AVX512 0
#endif
