// kronpe C++ core: masked_fill (kronpe/masked.h). Branch-free per node: a random mask (half the
// pixels of an image) would mispredict every other branch.
#include "kronpe/masked.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kronpe {
namespace {

template <typename T, int C>
KRONPE_CLONES index_t fill_fixed(index_t n, const T* __restrict s, const unsigned char* __restrict mask,
                                 T* out, T* lo, T* hi) {
  const T inf = std::numeric_limits<T>::infinity();
  T l[C], h[C];
  for (int c = 0; c < C; ++c) {
    l[c] = inf;
    h[c] = -inf;
  }
  index_t bad = 0;
  for (index_t i = 0; i < n; ++i) {
    const bool on = mask[i] != 0;
    for (int c = 0; c < C; ++c) {
      const T v = s[i * C + c];
      bad += index_t(on && !(v - v == T(0)));
      l[c] = std::min(l[c], on ? v : inf);
      h[c] = std::max(h[c], on ? v : -inf);
      out[i * C + c] = on ? v : T(0);
    }
  }
  for (int c = 0; c < C; ++c) {
    lo[c] = l[c];
    hi[c] = h[c];
  }
  return bad;
}

template <typename T>
index_t fill_any(index_t n, index_t C, const T* s, const unsigned char* mask, T* out, T* lo, T* hi) {
  const T inf = std::numeric_limits<T>::infinity();
  std::fill(lo, lo + C, inf);
  std::fill(hi, hi + C, -inf);
  index_t bad = 0;
  for (index_t i = 0; i < n; ++i) {
    const bool on = mask[i] != 0;
    for (index_t c = 0; c < C; ++c) {
      const T v = s[i * C + c];
      bad += index_t(on && !(v - v == T(0)));
      lo[c] = std::min(lo[c], on ? v : inf);
      hi[c] = std::max(hi[c], on ? v : -inf);
      out[i * C + c] = on ? v : T(0);
    }
  }
  return bad;
}

}  // namespace

template <typename T>
index_t masked_fill(index_t n, index_t C, const T* s, const unsigned char* mask, T* out, T* lo,
                    T* hi) {
  require(n >= 0 && C >= 0, "masked_fill: negative size");
  checked_mul(n, C, "masked_fill");
  switch (C) {
    case 1: return fill_fixed<T, 1>(n, s, mask, out, lo, hi);
    case 3: return fill_fixed<T, 3>(n, s, mask, out, lo, hi);
    default: return fill_any<T>(n, C, s, mask, out, lo, hi);
  }
}

template index_t masked_fill<float>(index_t, index_t, const float*, const unsigned char*, float*,
                                    float*, float*);
template index_t masked_fill<double>(index_t, index_t, const double*, const unsigned char*,
                                     double*, double*, double*);

}  // namespace kronpe
