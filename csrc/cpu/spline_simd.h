// Internal to the spline kernels (spline.cpp, spline_normal.cpp): the grid's interval and weight
// helpers, the vector-path dispatch and the vector types they share.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kronpe/avx512.h"
#include "kronpe/simd.h"
#include "kronpe/spline.h"

// The hot loops are inlined into one function per vector path (generic, AVX2, AVX-512, picked by
// kronpe::simd_level()), each compiled without floating-point contraction: no path fuses a
// multiply and an add, so every path gives the same bits.
#define KRONPE_SPLINE_INLINE inline __attribute__((always_inline))
#define KRONPE_SPLINE_INLINE_LAMBDA __attribute__((always_inline))
#if defined(__clang__)
#pragma clang fp contract(off)
#define KRONPE_SPLINE_NO_CONTRACT
#else
#define KRONPE_SPLINE_NO_CONTRACT __attribute__((optimize("fp-contract=off", "no-trapping-math")))
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace kronpe {

namespace {

// x along axis a in units of its intervals, from the grid's start.
inline double in_intervals(const SplineGrid& g, int a, double x) { return (x - g.lo[a]) / g.h[a]; }

// The interval of u = in_intervals(x), as a double.
inline double interval_of(const SplineGrid& g, int a, double u) {
  double f = std::floor(u);
  if (!(f >= 0)) f = 0;  // (NaN too: callers check the points, this keeps an index in range regardless)
  if (f > double(g.nint[a] - 1)) f = double(g.nint[a] - 1);
  return f;
}

// The four weights of a point at t (0 <= t <= 1) in its interval.
KRONPE_SPLINE_INLINE void cubic_weights(double t, double& w0, double& w1, double& w2, double& w3) {
  const double s = 1.0 - t, t2 = t * t, t3 = t2 * t;
  w0 = s * s * s / 6.0;
  w1 = (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0;
  w2 = (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0;
  w3 = t3 / 6.0;
}

// The interval of u = in_intervals(x) along axis a and its four weights.
inline index_t interval_weights(const SplineGrid& g, int a, double u, double w[4]) {
  const double f = interval_of(g, a, u);
  cubic_weights(u - f, w[0], w[1], w[2], w[3]);
  return index_t(f);
}

// The interval of x along axis a and its four weights.
inline index_t cell_weights(const SplineGrid& g, int a, double x, double w[4]) {
  return interval_weights(g, a, in_intervals(g, a, x), w);
}

// A point's 4^D weights and the flat indices of their coefficients.
template <int D>
struct Corners {
  static constexpr int K = D == 1 ? 4 : D == 2 ? 16 : 64;
  double w[K];
  index_t idx[K];
  int off[K];  // each corner's offset code: sum_a local_a 7^(D-1-a) (local 0..3)
};

template <int D>
inline void corners(const SplineGrid& g, const index_t* stride, const double* x, Corners<D>& c) {
  double w[D][4];
  index_t base = 0;
  for (int a = 0; a < D; ++a) base += cell_weights(g, a, x[a], w[a]) * stride[a];
  int k = 0;
  if constexpr (D == 1) {
    for (int i = 0; i < 4; ++i, ++k) c.w[k] = w[0][i], c.idx[k] = base + i, c.off[k] = i;
  } else if constexpr (D == 2) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j, ++k)
        c.w[k] = w[0][i] * w[1][j], c.idx[k] = base + i * stride[0] + j, c.off[k] = i * 7 + j;
  } else {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 4; ++l, ++k)
          c.w[k] = w[0][i] * w[1][j] * w[2][l], c.idx[k] = base + i * stride[0] + j * stride[1] + l,
          c.off[k] = i * 49 + j * 7 + l;
  }
}

template <int D>
void strides_of(const SplineGrid& g, index_t* stride) {
  index_t s = 1;
  for (int a = D - 1; a >= 0; --a) stride[a] = s, s *= g.coefficients(a);
}

// Runs body(level) (a lambda marked KRONPE_SPLINE_INLINE_LAMBDA) inlined into a function compiled
// for the vector path in force: AVX-512, AVX2 or generic; level, a std::integral_constant (2, 1, 0),
// tells the body which, for sizes that depend on the registers (32 of 64 bytes, 16 of 32, 16 of 16).
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_generic(const F& body) {
  body(std::integral_constant<int, 0>());
}
#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx2")
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_avx2(const F& body) {
  body(std::integral_constant<int, 1>());
}
KRONPE_AVX512_END
KRONPE_AVX512_BEGIN("avx512f,avx512vl,avx512dq,avx512bw")
template <typename F>
KRONPE_SPLINE_NO_CONTRACT void simd_avx512(const F& body) {
  body(std::integral_constant<int, 2>());
}
KRONPE_AVX512_END
#endif
template <typename F>
void with_simd(const F& body) {
#if KRONPE_AVX512
  if (simd_level() >= 2) return simd_avx512(body);
  if (simd_level() >= 1) return simd_avx2(body);
#endif
  simd_generic(body);
}

// Vectors of W = 2, 4 or 8 doubles (GCC's and Clang's vector extensions: a register of SSE2, AVX2 or
// AVX-512, or several), loaded from and stored to any address. Written as such where a plain loop
// would leave the compiler unsure that rows N apart do not overlap, or where entries move between
// lanes. (Every function taking or returning one is inlined: no vector crosses a call, whatever
// GCC's warning about the ABI of such calls says; it is off in this file.)
template <int W>
struct VecOf;
template <>
struct VecOf<2> {
  typedef double type __attribute__((vector_size(16)));
};
template <>
struct VecOf<4> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct VecOf<8> {
  typedef double type __attribute__((vector_size(64)));
};
template <int W>
using vec = typename VecOf<W>::type;
using v8 = vec<8>;

template <int W>
KRONPE_SPLINE_INLINE vec<W> loadv(const double* p) {
  vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
KRONPE_SPLINE_INLINE void storev(double* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename V>
KRONPE_SPLINE_INLINE void addv(double* p, const V& v) {
  storev(p, loadv<int(sizeof(V) / 8)>(p) + v);
}
// 8 entries of a stencil of either type, as doubles
KRONPE_SPLINE_INLINE v8 load8(const double* p) { return loadv<8>(p); }
KRONPE_SPLINE_INLINE v8 load8(const float* p) {
  typedef float v8f __attribute__((vector_size(32)));
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, v8);
}

// Lanes of a, each repeated C times, the part u (of C) of those 8 C lanes: the stencil's entries of 8
// rows spread over x's C channels.
template <int... I>
KRONPE_SPLINE_INLINE v8 lanes(const v8& a) {
#if defined(__clang__)
  return __builtin_shufflevector(a, a, I...);
#else
  typedef long long v8i __attribute__((vector_size(64)));
  return __builtin_shuffle(a, v8i{I...});
#endif
}
template <int C>
KRONPE_SPLINE_INLINE v8 spread(const v8& a, int u) {
  if constexpr (C == 2) return u == 0 ? lanes<0, 0, 1, 1, 2, 2, 3, 3>(a) : lanes<4, 4, 5, 5, 6, 6, 7, 7>(a);
  if constexpr (C == 3)
    return u == 0 ? lanes<0, 0, 0, 1, 1, 1, 2, 2>(a) : u == 1 ? lanes<2, 3, 3, 3, 4, 4, 4, 5>(a)
                                                            : lanes<5, 5, 6, 6, 6, 7, 7, 7>(a);
  if constexpr (C == 4)
    return u == 0 ? lanes<0, 0, 0, 0, 1, 1, 1, 1>(a) : u == 1 ? lanes<2, 2, 2, 2, 3, 3, 3, 3>(a)
                   : u == 2 ? lanes<4, 4, 4, 4, 5, 5, 5, 5>(a) : lanes<6, 6, 6, 6, 7, 7, 7, 7>(a);
  return a;
}

// The grid's checks, shared by every kernel's entry point.
inline void check_grid(const SplineGrid& g) {
  require(g.ndim >= 1 && g.ndim <= 3, "spline grid: 1 to 3 axes");
  for (int a = 0; a < g.ndim; ++a)
    require(g.nint[a] >= 1 && g.h[a] > 0 && std::isfinite(g.h[a]) && std::isfinite(g.lo[a]),
            "spline grid: each axis needs at least one interval of finite positive width");
}

}  // namespace

}  // namespace kronpe
