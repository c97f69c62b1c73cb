// kronpe C++ core: masked_fill (kronpe/masked.h). Branch-free per node (bit-mask selects): a random
// mask (half the pixels of an image) would mispredict every other branch.
#include "kronpe/masked.h"

#include "kronpe/threads.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>


namespace kronpe {
namespace {

// The bits of a float / double.
template <typename T>
struct Bits;
template <>
struct Bits<float> {
  using U = std::uint32_t;
  static constexpr U kExponent = 0x7f800000u, kInf = 0x7f800000u, kNegInf = 0xff800000u;
};
template <>
struct Bits<double> {
  using U = std::uint64_t;
  static constexpr U kExponent = 0x7ff0000000000000ull, kInf = 0x7ff0000000000000ull,
                     kNegInf = 0xfff0000000000000ull;
};

template <typename T, typename U>
inline T from_bits(U u) {
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// Nodes processed together: the lanes of the running minima / maxima / counts, so that the loop
// over them vectorises.
constexpr int kLanes = 16;

// out / lo / hi / the count of non-finite observed values of node i, channel c (mask bits m: all
// ones where observed, else 0); selects by bit masks, so no branch depends on the mask or the data
// (a random mask mispredicted every other branch of the selects written as ?: on floats: 4.2 ns per
// value at 128^2 with a new mask per call, 0.7 with the same one, whose pattern the predictor had
// learned).
template <typename T, bool Planar>
inline void fill_value(index_t i, index_t c, index_t n, index_t C, typename Bits<T>::U m,
                       const T* __restrict s, T* __restrict out, T& l, T& h, typename Bits<T>::U& bad) {
  using B = Bits<T>;
  typename B::U b;
  std::memcpy(&b, &s[i * C + c], sizeof b);
  const typename B::U kept = b & m;
  out[Planar ? c * n + i : i * C + c] = from_bits<T>(kept);
  const T vl = from_bits<T>(kept | (B::kInf & ~m)), vh = from_bits<T>(kept | (B::kNegInf & ~m));
  l = vl < l ? vl : l;
  h = vh > h ? vh : h;
  bad += typename B::U((kept & B::kExponent) == B::kExponent);  // NaN or Inf (unobserved: 0)
}

// Fixed > 0: C == Fixed known at compile time (unrolled channel loop); 0: any C. Planar: out is
// (C, n), else (n, C).
template <typename T, int Fixed, bool Planar>
KRONPE_CLONES index_t fill(index_t begin, index_t end, index_t n, index_t C, const T* __restrict s,
                           const unsigned char* __restrict mask, T* __restrict out, T* lo, T* hi) {
  using U = typename Bits<T>::U;
  if (Fixed > 0) C = Fixed;
  const T inf = std::numeric_limits<T>::infinity();
  constexpr index_t kMaxC = Fixed > 0 ? Fixed : 1;
  index_t bad = 0;
  // Fixed C: every channel's lanes in one pass over the nodes; any C: one pass per channel
  for (index_t c0 = 0; c0 < C; c0 += kMaxC) {
    T l[kMaxC][kLanes], h[kMaxC][kLanes];
    U nb[kMaxC][kLanes];
    for (index_t k = 0; k < kMaxC; ++k)
      for (int j = 0; j < kLanes; ++j) l[k][j] = inf, h[k][j] = -inf, nb[k][j] = 0;
    index_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const U m = U(0) - U(mask[i + j] != 0);
        for (index_t k = 0; k < kMaxC; ++k)
          fill_value<T, Planar>(i + j, c0 + k, n, C, m, s, out, l[k][j], h[k][j], nb[k][j]);
      }
    for (; i < end; ++i) {
      const U m = U(0) - U(mask[i] != 0);
      for (index_t k = 0; k < kMaxC; ++k) fill_value<T, Planar>(i, c0 + k, n, C, m, s, out, l[k][0], h[k][0], nb[k][0]);
    }
    for (index_t k = 0; k < kMaxC; ++k) {
      T lk = inf, hk = -inf;
      for (int j = 0; j < kLanes; ++j) {
        lk = std::min(lk, l[k][j]);
        hk = std::max(hk, h[k][j]);
        bad += index_t(nb[k][j]);
      }
      lo[c0 + k] = lk;
      hi[c0 + k] = hk;
    }
  }
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
