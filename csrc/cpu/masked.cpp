// kronpe C++ core: masked_fill (kronpe/masked.h). Branch-free per node (bit-mask selects): a random
// mask (half the pixels of an image) would mispredict every other branch.
#include "kronpe/masked.h"

#include "kronpe/threads.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
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

template <typename T>
index_t lattice_index(index_t P, int D, const T* points, index_t sp, index_t sa, const index_t* n,
                      const double* origin, const double* scale, const double* const* nodes,
                      index_t* flat) {
  require(P >= 0 && D >= 1, "lattice_index: needs P >= 0 points of D >= 1 coordinates");
  index_t G = 1;
  for (int a = 0; a < D; ++a) {
    require(n[a] >= 1, "lattice_index: every axis needs at least one node");
    G = checked_mul(G, n[a], "lattice_index");
  }
  // one point at a time, its axes in order (P is the long loop; D is 1 to 3)
  for (index_t p = 0; p < P; ++p) {
    index_t f = 0;
    for (int a = 0; a < D; ++a) {
      const double x = double(points[p * sp + a * sa]);
      const double k = std::rint((x - origin[a]) * scale[a]);
      const index_t ki = k > 0 ? (k < double(n[a] - 1) ? index_t(k) : n[a] - 1) : 0;  // NaN: 0
      if (nodes && !(nodes[a][ki] == x)) return p;
      f = f * n[a] + ki;
    }
    flat[p] = f;
  }
  return P;
}

namespace {

// h = the smallest positive gap of the sorted u, when 1 / h is within rtol (1 / h) of an integer;
// else 0.
double lattice_step(const std::vector<double>& u, double rtol) {
  double h = std::numeric_limits<double>::infinity();
  for (std::size_t i = 1; i < u.size(); ++i) {
    const double gap = u[i] - u[i - 1];
    if (gap > 0 && gap < h) h = gap;
  }
  if (!(h < std::numeric_limits<double>::infinity())) return 0.0;
  const double n = 1.0 / h;
  if (!(n <= 4503599627370496.0)) return 0.0;  // beyond 2^52 nodes (or 1 / h infinite): no integer count
  return std::abs(n - std::nearbyint(n)) > rtol * n ? 0.0 : h;
}

}  // namespace

template <typename T>
index_t lattice_count(index_t P, const T* x, index_t sx, index_t probe, double rtol, double tol) {
  require(P >= 0 && probe >= 1, "lattice_count: needs P >= 0 coordinates and probe >= 1");
  require(std::isfinite(rtol) && rtol >= 0 && std::isfinite(tol) && tol >= 0, "lattice_count: bad tolerances");
  for (index_t p = 0; p < P; ++p)
    if (!std::isfinite(double(x[p * sx]))) return 0;
  // every coordinate a multiple k h, 0 <= k <= 1 / h; with `unique`, no two distinct ones on the
  // same multiple
  auto multiples = [&](double h, bool unique) {
    const double top = std::nearbyint(1.0 / h);
    // the first coordinate seen on each multiple: an array over the multiples when they are not
    // many more than the points, else a map (memory of the points' order, whatever h is)
    const bool dense = top < double(std::max<index_t>(4 * P, index_t(1) << 16));
    std::vector<double> seen;
    std::unordered_map<index_t, double> seen_map;
    if (unique && dense) seen.assign(static_cast<std::size_t>(top) + 1, std::numeric_limits<double>::quiet_NaN());
    if (unique && !dense) seen_map.reserve(static_cast<std::size_t>(P));
    for (index_t p = 0; p < P; ++p) {
      const double v = double(x[p * sx]), k = v / h, r = std::nearbyint(k);
      if (!(std::abs(k - r) <= tol) || r < 0 || r > top) return false;
      if (!unique) continue;
      if (dense) {
        double& first = seen[static_cast<std::size_t>(r)];
        if (std::isnan(first)) first = v;
        else if (first != v) return false;
      } else if (seen_map.emplace(index_t(r), v).first->second != v) {
        return false;
      }
    }
    return true;
  };
  std::vector<double> u;
  if (P > 2 * probe) {
    const index_t step = P / probe;
    for (index_t p = 0; p < P; p += step) u.push_back(double(x[p * sx]));
    std::sort(u.begin(), u.end());
    const double h = lattice_step(u, rtol);
    if (h > 0 && multiples(h, true)) return index_t(std::nearbyint(1.0 / h));
  }
  u.resize(static_cast<std::size_t>(P));
  for (index_t p = 0; p < P; ++p) u[std::size_t(p)] = double(x[p * sx]);
  std::sort(u.begin(), u.end());
  const double h = lattice_step(u, rtol);
  return h > 0 && multiples(h, false) ? index_t(std::nearbyint(1.0 / h)) : 0;
}

template index_t lattice_count<float>(index_t, const float*, index_t, index_t, double, double);
template index_t lattice_count<double>(index_t, const double*, index_t, index_t, double, double);

template <typename T>
void lattice_sums(index_t P, index_t C, const index_t* flat, const T* values, index_t vp,
                  index_t vc, index_t G, T* counts, T* sums) {
  require(P >= 0 && C >= 0 && G >= 0, "lattice_sums: negative size");
  checked_mul(C, G, "lattice_sums");
  for (index_t p = 0; p < P; ++p)
    if (flat[p] < 0 || flat[p] >= G)
      require(false, "lattice_sums: flat index " + std::to_string(flat[p]) + " of point " + std::to_string(p) +
                         " outside [0, " + std::to_string(G) + ")");
  std::fill(counts, counts + G, T(0));
  std::fill(sums, sums + C * G, T(0));
  for (index_t p = 0; p < P; ++p) {
    const index_t g = flat[p];
    counts[g] += T(1);
    for (index_t c = 0; c < C; ++c) sums[c * G + g] += values[p * vp + c * vc];
  }
}

template index_t masked_fill<float>(index_t, index_t, const float*, const unsigned char*, float*,
                                    float*, float*, bool);
template index_t masked_fill<double>(index_t, index_t, const double*, const unsigned char*,
                                     double*, double*, double*, bool);
template index_t lattice_index<float>(index_t, int, const float*, index_t, index_t, const index_t*,
                                      const double*, const double*, const double* const*, index_t*);
template index_t lattice_index<double>(index_t, int, const double*, index_t, index_t, const index_t*,
                                       const double*, const double*, const double* const*, index_t*);
template void lattice_sums<float>(index_t, index_t, const index_t*, const float*, index_t, index_t,
                                  index_t, float*, float*);
template void lattice_sums<double>(index_t, index_t, const index_t*, const double*, index_t, index_t,
                                   index_t, double*, double*);

}  // namespace kronpe
