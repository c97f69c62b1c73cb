// The default thread count of kronpe's CPU kernels and the busy-core back-off (kronpe/threads.h).
#include "kronpe/threads.h"

#include <atomic>
#include <chrono>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe {
namespace {
std::atomic<int> g_threads{0};
std::atomic<long long> g_busy_until{0};  // steady-clock microseconds
std::atomic<long long> g_busy_marks{0};

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
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

int kernel_threads() {
  const int n = default_threads();
  return n > 1 && cores_busy() ? 1 : n;
}

TeamClock::TeamClock() : t0_(now_us()) {}

void TeamClock::started() const {
  const long long t = now_us();
  if (t - t0_ > kLateMicroseconds) {
    g_busy_until.store(t + 1000 * kBusyMilliseconds, std::memory_order_relaxed);
    g_busy_marks.fetch_add(1, std::memory_order_relaxed);
  }
}

bool cores_busy() { return now_us() < g_busy_until.load(std::memory_order_relaxed); }

long long busy_marks() { return g_busy_marks.load(std::memory_order_relaxed); }

}  // namespace kronpe
