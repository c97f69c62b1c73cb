// The default thread count of kronpe's CPU kernels (kronpe/threads.h).
#include "kronpe/threads.h"

#include <atomic>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe {
namespace {
std::atomic<int> g_threads{0};
}  // namespace

void set_default_threads(int n) { g_threads.store(n > 0 ? n : 0); }

int default_threads() {
  const int n = g_threads.load();
  if (n > 0) return n;
#ifdef KRONPE_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace kronpe
