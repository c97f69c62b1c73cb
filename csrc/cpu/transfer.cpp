// kronpe C++ core: the multigrid transfers along one axis on the CPU, restriction P^T and
// prolongation P (or f += P c) of linear interpolation (kronpe/smooth.h).
#include "kronpe/smooth.h"

#include "kronpe/threads.h"
#include "smooth_teams.h"

#include <string>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

namespace kronpe::smooth {

using detail::pick_threads;

namespace {

void check_transfer(const char* what, index_t outer, index_t n, index_t inner) {
  require(outer >= 0 && n >= 1 && inner >= 0, std::string(what) + ": bad shape");
  checked_mul(checked_mul(outer, n, what), inner, what);
}

template <bool Add, typename T>
inline void put(T& dst, T v) {
  if constexpr (Add) dst += v; else dst = v;
}

// One line (inner == 1) of P^T: c[j] = f[2j] + (f[2j - 1] + f[2j + 1]) / 2, terms in range.
template <typename T>
KRONPE_CLONES void restrict_line(index_t n, const T* __restrict f, T* __restrict c) {
  const index_t nc = coarse_length(n);
  c[0] = f[0] + (n > 1 ? T(0.5) * f[1] : T(0));
  index_t j = 1;
  for (; 2 * j + 1 < n; ++j) c[j] = f[2 * j] + T(0.5) * (f[2 * j - 1] + f[2 * j + 1]);
  for (; j < nc; ++j) c[j] = (2 * j < n ? f[2 * j] : T(0)) + T(0.5) * f[2 * j - 1];
}

// One line (inner == 1) of P: f[2j] = c[j], f[2j + 1] = (c[j] + c[j + 1]) / 2 (Add: f +=).
template <bool Add, typename T>
KRONPE_CLONES void prolong_line(index_t n, const T* __restrict c, T* __restrict f) {
  index_t j = 0;
  for (; 2 * j + 1 < n; ++j) {
    put<Add>(f[2 * j], c[j]);
    put<Add>(f[2 * j + 1], T(0.5) * (c[j] + c[j + 1]));
  }
  if (2 * j < n) put<Add>(f[2 * j], c[j]);
}

// Fine node k of a plane (inner > 1): rows of `inner` values, vectorised along the row.
template <typename T>
KRONPE_CLONES void restrict_row(index_t n, index_t inner, const T* __restrict f, index_t j,
                                T* __restrict dst) {
  const index_t k = 2 * j;
  const T* a = f + k * inner;
  const bool lo = k - 1 >= 0, hi = k + 1 < n, mid = k < n;
  for (index_t i = 0; i < inner; ++i) {
    T v = mid ? a[i] : T(0);
    if (lo) v += T(0.5) * a[i - inner];
    if (hi) v += T(0.5) * a[i + inner];
    dst[i] = v;
  }
}

template <bool Add, typename T>
KRONPE_CLONES void prolong_row(index_t inner, const T* __restrict c, index_t k,
                               T* __restrict dst) {
  const T* a = c + (k / 2) * inner;
  if (k % 2 == 0) {
    for (index_t i = 0; i < inner; ++i) put<Add>(dst[i], a[i]);
  } else {
    for (index_t i = 0; i < inner; ++i) put<Add>(dst[i], T(0.5) * (a[i] + a[i + inner]));
  }
}

// Runs line(o) over the outer index (inner == 1) or row(o, k) over (outer, k < out_n), split
// among threads.
template <typename Line, typename Row>
void for_transfer(index_t outer, index_t n, index_t inner, index_t out_n, int threads,
                  Line&& line, Row&& row) {
  run_team(pick_threads(threads, outer * n * inner), [&](int, int) {
    if (inner == 1) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
      for (index_t o = 0; o < outer; ++o) line(o);
    } else {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) collapse(2) nowait
#endif
      for (index_t o = 0; o < outer; ++o)
        for (index_t k = 0; k < out_n; ++k) row(o, k);
    }
  });
}

template <bool Add, typename T>
void prolong_impl(index_t outer, index_t n, index_t inner, const T* c, T* f, int threads) {
  const index_t nc = coarse_length(n);
  for_transfer(
      outer, n, inner, n, threads, [&](index_t o) { prolong_line<Add>(n, c + o * nc, f + o * n); },
      [&](index_t o, index_t k) { prolong_row<Add>(inner, c + o * nc * inner, k, f + (o * n + k) * inner); });
}

}  // namespace

template <typename T>
void restrict_axis(index_t outer, index_t n, index_t inner, const T* f, T* c, int threads) {
  check_transfer("restrict_axis", outer, n, inner);
  const index_t nc = coarse_length(n);
  for_transfer(
      outer, n, inner, nc, threads, [&](index_t o) { restrict_line(n, f + o * n, c + o * nc); },
      [&](index_t o, index_t j) { restrict_row(n, inner, f + o * n * inner, j, c + (o * nc + j) * inner); });
}

template <typename T>
void prolong_axis(index_t outer, index_t n, index_t inner, const T* c, T* f, bool add, int threads) {
  check_transfer("prolong_axis", outer, n, inner);
  if (add) prolong_impl<true>(outer, n, inner, c, f, threads);
  else prolong_impl<false>(outer, n, inner, c, f, threads);
}

#define KRONPE_TRANSFER_INSTANTIATE(T)                                                          \
  template void restrict_axis<T>(index_t, index_t, index_t, const T*, T*, int);                \
  template void prolong_axis<T>(index_t, index_t, index_t, const T*, T*, bool, int);

KRONPE_TRANSFER_INSTANTIATE(float)
KRONPE_TRANSFER_INSTANTIATE(double)

}  // namespace kronpe::smooth
