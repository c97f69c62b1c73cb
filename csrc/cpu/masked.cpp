// kronpe C++ core: masked_fill (kronpe/masked.h). Branch-free per node: a random mask (half the
// pixels of an image) would mispredict every other branch.
#include "kronpe/masked.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kronpe {
namespace {

// Fixed > 0: C == Fixed known at compile time (unrolled channel loop); 0: any C. Planar: out is
// (C, n), else (n, C).
template <typename T, int Fixed, bool Planar>
KRONPE_CLONES index_t fill(index_t n, index_t C, const T* __restrict s, const unsigned char* __restrict mask,
                           T* __restrict out, T* lo, T* hi) {
  if (Fixed > 0) C = Fixed;
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> l(static_cast<std::size_t>(C), inf), h(l.size(), -inf);
  index_t bad = 0;
  for (index_t i = 0; i < n; ++i) {
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

}  // namespace

template <typename T>
index_t masked_fill(index_t n, index_t C, const T* s, const unsigned char* mask, T* out, T* lo,
                    T* hi, bool planar) {
  require(n >= 0 && C >= 0, "masked_fill: negative size");
  checked_mul(n, C, "masked_fill");
  if (planar) {
    switch (C) {
      case 1: return fill<T, 1, true>(n, C, s, mask, out, lo, hi);
      case 3: return fill<T, 3, true>(n, C, s, mask, out, lo, hi);
      default: return fill<T, 0, true>(n, C, s, mask, out, lo, hi);
    }
  }
  switch (C) {
    case 1: return fill<T, 1, false>(n, C, s, mask, out, lo, hi);
    case 3: return fill<T, 3, false>(n, C, s, mask, out, lo, hi);
    default: return fill<T, 0, false>(n, C, s, mask, out, lo, hi);
  }
}

template index_t masked_fill<float>(index_t, index_t, const float*, const unsigned char*, float*,
                                    float*, float*, bool);
template index_t masked_fill<double>(index_t, index_t, const double*, const unsigned char*,
                                     double*, double*, double*, bool);

}  // namespace kronpe
