// kronpe C++ core: the Krylov solvers' vector kernels on the CPU (kronpe/reductions.h): inner
// products in double summed in fixed blocks (the same bits for any thread count), CG's fused
// update and norm, and the split of elementwise updates among threads.
#include "kronpe/reductions.h"

#include "kronpe/threads.h"
#include "smooth_teams.h"

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::smooth {

using detail::blocked_sums;
using detail::pick_threads;

namespace {

// Eight partial sums in double, so that the loop vectorises (float: converted four at a time).
template <typename T>
KRONPE_CLONES double dot_block(index_t n, const T* __restrict a, const T* __restrict b) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += double(a[i + k]) * double(b[i + k]);
  double t = 0.0;
  for (; i < n; ++i) t += double(a[i]) * double(b[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

}  // namespace

namespace {

// x += a p, r -= a q over one block, and x . x after it, summed as dot_block sums
template <typename T>
KRONPE_CLONES double update_norm_block(index_t n, T a, const T* __restrict p, const T* __restrict q,
                                       T* __restrict x, T* __restrict r) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      x[i + k] += a * p[i + k];
      r[i + k] -= a * q[i + k];
      s[k] += double(x[i + k]) * double(x[i + k]);
    }
  double t = 0.0;
  for (; i < n; ++i) {
    x[i] += a * p[i];
    r[i] -= a * q[i];
    t += double(x[i]) * double(x[i]);
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

}  // namespace

template <typename T>
double dot(index_t n, const T* a, const T* b, int threads) {
  require(n >= 0, "dot: negative length");
  double s;
  blocked_sums<1>(n, threads, &s, [&](index_t lo, index_t len, double* part) {
    part[0] = dot_block(len, a + lo, b + lo);
  });
  return s;
}

namespace {

// dots for c(c + 1) / 2 == K pairs: K sums per block, each a dot_block
template <int K, typename T>
void pair_dots(index_t n, int c, const T* const* a, double* S, int threads) {
  double sums[K];
  blocked_sums<K>(n, threads, sums, [&](index_t lo, index_t len, double* part) {
    int k = 0;
    for (int i = 0; i < c; ++i)
      for (int j = 0; j <= i; ++j) part[k++] = dot_block(len, a[i] + lo, a[j] + lo);
  });
  int k = 0;
  for (int i = 0; i < c; ++i)
    for (int j = 0; j <= i; ++j) S[i * c + j] = S[j * c + i] = sums[k++];
}

}  // namespace

template <typename T>
void dots(index_t n, int c, const T* const* a, double* S, int threads) {
  require(n >= 0 && c >= 1, "dots: negative length or no arrays");
  switch (c) {
    case 1: return pair_dots<1>(n, c, a, S, threads);
    case 2: return pair_dots<3>(n, c, a, S, threads);
    case 3: return pair_dots<6>(n, c, a, S, threads);
    case 4: return pair_dots<10>(n, c, a, S, threads);
    default:
      for (int i = 0; i < c; ++i)
        for (int j = 0; j <= i; ++j) S[i * c + j] = S[j * c + i] = dot(n, a[i], a[j], threads);
  }
}

template <typename T>
void dot2(index_t n, const T* a, const T* b, const T* c, const T* d, double out[2], int threads) {
  require(n >= 0, "dot2: negative length");
  // one block of the four arrays (128 kB of float32 each) stays in cache between the two sums
  blocked_sums<2>(n, threads, out, [&](index_t lo, index_t len, double* part) {
    part[0] = dot_block(len, a + lo, b + lo);
    part[1] = dot_block(len, c + lo, d + lo);
  });
}

template <typename T>
double cg_update_norm(index_t n, T alpha, const T* p, const T* q, T* x, T* r, int threads) {
  require(n >= 0, "cg_update_norm: negative length");
  double s;
  blocked_sums<1>(n, threads, &s, [&](index_t lo, index_t len, double* part) {
    part[0] = update_norm_block(len, alpha, p + lo, q + lo, x + lo, r + lo);
  });
  return s;
}

void for_range(index_t n, int threads, const std::function<void(index_t, index_t)>& f) {
  run_team(pick_threads(threads, n), [&](int t, int count) {
    f(n * index_t(t) / count, n * index_t(t + 1) / count);
  });
}

#define KRONPE_REDUCTIONS_INSTANTIATE(T)                                                        \
  template double dot<T>(index_t, const T*, const T*, int);                                     \
  template void dots<T>(index_t, int, const T* const*, double*, int);                          \
  template void dot2<T>(index_t, const T*, const T*, const T*, const T*, double[2], int);       \
  template double cg_update_norm<T>(index_t, T, const T*, const T*, T*, T*, int);

KRONPE_REDUCTIONS_INSTANTIATE(float)
KRONPE_REDUCTIONS_INSTANTIATE(double)

}  // namespace kronpe::smooth
