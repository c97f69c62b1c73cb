// kronpe C++ core: masked_fill (kronpe/masked.h). Branch-free per node: a random mask (half the
// pixels of an image) would mispredict every other branch.
#include "kronpe/masked.h"

#include "kronpe/threads.h"

#include <algorithm>
#include <limits>
#include <vector>


namespace kronpe {
namespace {

// Fixed > 0: C == Fixed known at compile time (unrolled channel loop); 0: any C. Planar: out is
// (C, n), else (n, C).
template <typename T, int Fixed, bool Planar>
KRONPE_CLONES index_t fill(index_t begin, index_t end, index_t n, index_t C, const T* __restrict s,
                           const unsigned char* __restrict mask, T* __restrict out, T* lo, T* hi) {
  if (Fixed > 0) C = Fixed;
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> l(static_cast<std::size_t>(C), inf), h(l.size(), -inf);
  index_t bad = 0;
  for (index_t i = begin; i < end; ++i) {
    const bool on = mask[i] != 0;
    for (index_t c = 0; c < C; ++c) {
      const T v = s[i * C + c];
      bad += index_t(on && !(v - v == T(0)));
      l[c] = std::min(l[c], on ? v : inf);
      h[c] = std::max(h[c], on ? v : -inf);
      out[Planar ? c * n + i : i * C + c] = on ? v : T(0);
    }
  }
  std::copy(l.begin(), l.end(), lo);
  std::copy(h.begin(), h.end(), hi);
  return bad;
}

// Nodes [begin, end) of the fill.
template <typename T>
index_t fill_range(index_t begin, index_t end, index_t n, index_t C, const T* s, const unsigned char* mask, T* out,
                   T* lo, T* hi, bool planar) {
  if (planar) {
    switch (C) {
      case 1: return fill<T, 1, true>(begin, end, n, C, s, mask, out, lo, hi);
      case 3: return fill<T, 3, true>(begin, end, n, C, s, mask, out, lo, hi);
      default: return fill<T, 0, true>(begin, end, n, C, s, mask, out, lo, hi);
    }
  }
  switch (C) {
    case 1: return fill<T, 1, false>(begin, end, n, C, s, mask, out, lo, hi);
    case 3: return fill<T, 3, false>(begin, end, n, C, s, mask, out, lo, hi);
    default: return fill<T, 0, false>(begin, end, n, C, s, mask, out, lo, hi);
  }
}

// Values per thread below which the fill runs on one thread.
constexpr index_t kMinValuesPerThread = index_t(1) << 16;

}  // namespace

// Contiguous blocks of nodes among threads, each with its own range, combined in block order.
template <typename T>
index_t masked_fill(index_t n, index_t C, const T* s, const unsigned char* mask, T* out, T* lo,
                    T* hi, bool planar) {
  require(n >= 0 && C >= 0, "masked_fill: negative size");
  const index_t values = checked_mul(n, C, "masked_fill");
  const int nt = int(std::max<index_t>(1, std::min<index_t>(kernel_threads(), values / kMinValuesPerThread)));
  if (nt == 1) return fill_range(0, n, n, C, s, mask, out, lo, hi, planar);
  std::vector<T> los(static_cast<std::size_t>(nt * C)), his(los.size());
  std::vector<index_t> bad(static_cast<std::size_t>(nt), 0);
  run_team(nt, [&](int t, int count) {
    bad[std::size_t(t)] = fill_range(n * t / count, n * (t + 1) / count, n, C, s, mask, out, &los[std::size_t(t * C)],
                                     &his[std::size_t(t * C)], planar);
  });
  index_t total = 0;
  for (int t = 0; t < nt; ++t) total += bad[std::size_t(t)];
  for (index_t c = 0; c < C; ++c) {
    lo[c] = std::numeric_limits<T>::infinity();
    hi[c] = -std::numeric_limits<T>::infinity();
    for (int t = 0; t < nt; ++t) {
      lo[c] = std::min(lo[c], los[std::size_t(t * C + c)]);
      hi[c] = std::max(hi[c], his[std::size_t(t * C + c)]);
    }
  }
  return total;
}

template index_t masked_fill<float>(index_t, index_t, const float*, const unsigned char*, float*,
                                    float*, float*, bool);
template index_t masked_fill<double>(index_t, index_t, const double*, const unsigned char*,
                                     double*, double*, double*, bool);

}  // namespace kronpe
