// kronpe C++ core, private to csrc/cpu: how the smoothing kernels (smooth.cpp, transfer.cpp,
// reductions.cpp, gcv.cpp) size their teams, and the blocked sums whose order makes their
// reductions independent of the thread count.
#pragma once
#include <algorithm>
#include <vector>

#include "kronpe/common.h"
#include "kronpe/threads.h"

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::smooth::detail {

// Nodes per thread below which a kernel runs serially: these passes take well under a
// millisecond per million nodes, less than a fork/join costs on a busy machine.
constexpr index_t kMinNodesPerThread = index_t(1) << 13;

// The team of a kernel over `nodes` nodes: the caller's count (threads > 0) or kernel_threads(),
// at most one thread per kMinNodesPerThread nodes and, beyond two, one per the team rule's nodes
// (set_nodes_per_extra_thread, kronpe/smooth.h); defined in smooth.cpp.
int pick_threads(int threads, index_t nodes);

// Blocks of a dot product: their partial sums are added in block order, so the result does not
// depend on how many threads computed them.
constexpr index_t kDotBlock = index_t(1) << 15;

// K sums over [0, n) in blocks of kDotBlock values: block(lo, len, part) writes the K partial
// sums of one block; they are added in block order, so the sums do not depend on the thread count.
template <int K, typename F>
void blocked_sums(index_t n, int threads, double out[K], F&& block) {
  for (int k = 0; k < K; ++k) out[k] = 0.0;
  if (n <= kDotBlock) {
    if (n) block(index_t(0), n, out);
    return;
  }
  const index_t blocks = (n + kDotBlock - 1) / kDotBlock;
  std::vector<double> part(static_cast<std::size_t>(blocks * K));
  run_team(pick_threads(threads, n), [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (index_t b = 0; b < blocks; ++b) {
      const index_t lo = b * kDotBlock;
      block(lo, std::min(kDotBlock, n - lo), part.data() + b * K);
    }
  });
  for (index_t b = 0; b < blocks; ++b)
    for (int k = 0; k < K; ++k) out[k] += part[std::size_t(b * K + k)];
}

}  // namespace kronpe::smooth::detail
