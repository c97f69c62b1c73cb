// kronpe C++ core, private to the CPU blend files (blend_search.cpp: the weight function,
// blend_plan.cpp: the plans, blend.cpp: the products): their team rule, index checks, the vector
// path in force and the plan of factors (see kronpe/blend.h for the conventions).
#pragma once
#include <algorithm>
#include <cstdint>

#include "kronpe/blend.h"
#include "kronpe/threads.h"

namespace kronpe::blend::detail {

// a + b modulo 2^64: factors' corner indices are formed before they are checked, and a base near
// the int64 limits must not overflow (signed overflow is undefined).
inline index_t wrapping_add(index_t a, index_t b) {
  return static_cast<index_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

inline int resolve_threads(int threads) {
#ifdef KRONPE_OPENMP
  return threads > 0 ? threads : kernel_threads();
#else
  (void)threads;
  return 1;
#endif
}

// Threads for a kernel of `work` multiply-adds: the caller's count when given (> 0), else at
// most -threads (< 0: a cap, kronpe.torch passes torch.get_num_threads() so) or kronpe's default
// (0, kronpe/threads.h), reduced so that each thread gets at least kMinWorkPerThread (small
// products run serially: on a busy machine fork/join and barriers cost more than they save).
// The results never depend on the count. 2^18 (was 2^20): the blend suite's 2d-512-25pct products
// (65536 points, 4 corners, 3 channels: 786k) ran on one thread; caches cold, one thread / two,
// stored gather 0.87 / 0.52 ms, stored scatter 1.50 / 0.78, on the fly 2.2 / 1.23 and 2.7 / 1.44.
constexpr index_t kMinWorkPerThread = index_t(1) << 18;
inline int pick_threads(int threads, index_t work) {
  const int cap = threads < 0 ? -checked_threads(-threads) : checked_threads(threads);
  if (cap > 0) return cap;
  const index_t by_work = std::max<index_t>(1, work / kMinWorkPerThread);
  return int(std::min<index_t>(cap < 0 ? -cap : resolve_threads(0), by_work));
}

inline bool bad_index(index_t idx, index_t size) {
  return static_cast<std::uint64_t>(idx) >= static_cast<std::uint64_t>(size);
}

// The vector path the kernels take now: 2 AVX-512, 1 AVX2, 0 the portable loops (set_simd, at
// most the CPU's; blend_search.cpp).
int simd_path();

// The transpose's plan of factors (compute_factors): their points sorted stably by base (the
// cell's first corner), as plan_fly sorts the points (blend_plan.cpp).
void plan_bases(MatrixView<const index_t> base, TransposeLayout lay, index_t* perm, index_t* ptr,
                int threads);

}  // namespace kronpe::blend::detail
