// kronpe C++ core: the per-element math of the one-dimensional embedders (docs/math/embedders.rst),
// written once for the CPU kernels (csrc/cpu/embed.cpp) and the CUDA kernels
// (csrc/cuda/embed.cu). Parameters are plain structs; every function is KRONPE_HD, computes in
// double, allocates nothing and throws nothing.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kronpe/common.h"

namespace kronpe {

// Families evaluated by embed_basis. Shifted bases use centres t_k = (k + first_index) / K_base.
enum class Basis : int {
  gaussian = 0,   // exp(-u^2 / (2 param^2)),          param = sigma
  triangle = 1,   // max(1 - |u| / param, 0),          param = half-width
  rectangle = 2,  // 1 if |u| < param / 2 else 0,      param = width
  impulse = 3,    // one-hot at the nearest centre (clipped to the centres that exist)
  sine = 4,       // sin(param (t_k - x)),             param = angular frequency
  square = 5,     // sign(sin(param (t_k - x)))
  bspline = 6,    // B_degree(u / param),              param = width
  random = 7,     // i.i.d. uniform noise in [-1, 1) per (x, k), keyed by (seed, bits of x, k)
};

constexpr int kMaxBsplineDegree = 7;

struct BasisParams {
  Basis kind = Basis::gaussian;
  index_t K = 0;            // output features (columns)
  index_t first_index = 0;  // column k has centre (k + first_index) / K_base (= -margin)
  double K_base = 1.0;      // the centre divisor (1 / spacing)
  double param = 1.0;       // see Basis
  int degree = 3;           // bspline degree
  std::uint64_t seed = 0;   // random
};

enum class FourierLayout : int {
  blocks = 0,       // [cos(w_0 x) .. cos(w_{F-1} x), sin(w_0 x) .. sin(w_{F-1} x)]
  interleaved = 1,  // [sin(w_0 x), cos(w_0 x), sin(w_1 x), cos(w_1 x), ...]
};

// Psi(x) = [x]? + amplitude * features(omega x); omega in radians per unit of x.
struct FourierParams {
  const double* omega = nullptr;  // F angular frequencies (contiguous)
  index_t F = 0;
  FourierLayout layout = FourierLayout::blocks;
  bool include_input = false;  // the raw coordinate first (not scaled by amplitude)
  double amplitude = 1.0;
};

inline index_t fourier_width(const FourierParams& p) { return 2 * p.F + (p.include_input ? 1 : 0); }

namespace embed_math {

// The centred cardinal B-spline of degree p (support [-(p+1)/2, (p+1)/2]) by the Cox-de Boor
// recursion on uniform knots: every term is non-negative, so it is stable for any degree.
KRONPE_HD double bspline(int degree, double u) {
  const double s = u + 0.5 * (degree + 1);  // the knots are 0, 1, ..., degree + 1
  if (!(s > 0.0) || !(s < degree + 1.0)) return 0.0;
  const double cell = std::floor(s);
  const double t = s - cell;
  const int i = static_cast<int>(cell);
  double v[kMaxBsplineDegree + 2] = {1.0};  // v[j] = N_d(t + j), j = 0..d
  for (int d = 1; d <= degree; ++d) {
    double previous = 0.0;  // v_{d-1}[j - 1]
    for (int j = 0; j <= d; ++j) {
      const double current = j < d ? v[j] : 0.0;
      v[j] = ((t + j) * current + (d + 1 - t - j) * previous) / d;
      previous = current;
    }
  }
  return v[i];
}

KRONPE_HD std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1): a function of (seed, the float64 bits of x, k) only, so the same x gives
// the same row in float32 and float64 and in any batch.
KRONPE_HD double random_value(std::uint64_t seed, double x, index_t k) {
  x += 0.0;  // -0.0 -> +0.0
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint64_t row = splitmix64(bits ^ splitmix64(seed));
  const std::uint64_t h = splitmix64(row + static_cast<std::uint64_t>(k));
  return 2.0 * (static_cast<double>(h >> 11) * 0x1.0p-53) - 1.0;
}

// v stored as T, 0 where its magnitude falls below T's smallest normal number: a subnormal
// entry carries nothing at the scale of a basis (at most 1.2e-38 in float32), and as a GEMM
// operand it costs a microcode assist per instruction on many x86 cores (a Gaussian fit's
// float32 factors ran 25 times slower with 8% of them subnormal).
template <typename T>
KRONPE_HD T stored(double v) {
  const T x = static_cast<T>(v);
  const T smallest = sizeof(T) == sizeof(float) ? T(FLT_MIN) : T(DBL_MIN);
  return (x < smallest && x > -smallest) ? T(0) : x;
}

KRONPE_HD double sign(double v) { return static_cast<double>((v > 0.0) - (v < 0.0)); }

// psi(x - t) of the shifted families (not impulse, not random).
KRONPE_HD double shifted_value(Basis kind, double param, int degree, double x, double t) {
  const double u = x - t;
  switch (kind) {
    case Basis::gaussian:
      return std::exp(-(u * u) / (2.0 * (param * param)));
    case Basis::triangle: {
      const double v = 1.0 - std::fabs(u) / param;
      return v > 0.0 ? v : 0.0;
    }
    case Basis::rectangle:
      return std::fabs(u) < 0.5 * param ? 1.0 : 0.0;
    case Basis::sine:
      return std::sin(param * (t - x));
    case Basis::square:
      return sign(std::sin(param * (t - x)));
    case Basis::bspline:
      return bspline(degree, u / param);
    default:
      return 0.0;
  }
}

// Half-width R of the support of psi: psi(u) == 0.0 exactly (in double) for |u| >= R.
// Infinite for the periodic families. For the Gaussian, exp(-z) is exactly 0 for z > 745.2.
KRONPE_HD double support_radius(Basis kind, double param, int degree) {
  switch (kind) {
    case Basis::gaussian:
      return param * 38.8;  // z = R^2 / (2 sigma^2) = 752.7 > 745.2
    case Basis::triangle:
      return param;
    case Basis::rectangle:
      return 0.5 * param;
    case Basis::bspline:
      return 0.5 * (degree + 1) * param;
    default:
      return INFINITY;
  }
}

// Column of the centre nearest to x (ties go up), clipped to the columns that exist.
KRONPE_HD index_t impulse_column(const BasisParams& p, double x) {
  const double nearest = std::floor(x * p.K_base + 0.5) - static_cast<double>(p.first_index);
  if (!(nearest > 0.0)) return 0;
  if (nearest > static_cast<double>(p.K - 1)) return p.K - 1;
  return static_cast<index_t>(nearest);
}


// Psi(x)_k of any basis family (the CPU kernel skips columns outside the support instead).
KRONPE_HD double basis_value(const BasisParams& p, double x, index_t k) {
  if (p.kind == Basis::impulse) return impulse_column(p, x) == k ? 1.0 : 0.0;
  if (p.kind == Basis::random) return random_value(p.seed, x, k);
  const double t = static_cast<double>(k + p.first_index) / p.K_base;
  return shifted_value(p.kind, p.param, p.degree, x, t);
}

// Which frequency j feeds feature column f (0 <= f < 2F, after any raw-input column) and whether
// it is the cosine (I: the kernel's index type).
template <typename I>
KRONPE_HD void fourier_column(FourierLayout layout, I F, I f, I& j, bool& cosine) {
  if (layout == FourierLayout::blocks) {  // [cos(w_0 x) .. cos(w_{F-1} x), sin(w_0 x) ..]
    cosine = f < F;
    j = cosine ? f : f - F;
  } else {  // [sin(w_0 x), cos(w_0 x), sin(w_1 x), ...]
    j = f / 2;
    cosine = (f - 2 * j) == 1;
  }
}

// The column of cos(w_j x) (cosine) or sin(w_j x), after any raw-input column.
KRONPE_HD index_t fourier_slot(FourierLayout layout, index_t F, index_t j, bool cosine) {
  if (layout == FourierLayout::blocks) return cosine ? j : F + j;
  return cosine ? 2 * j + 1 : 2 * j;
}

}  // namespace embed_math

}  // namespace kronpe
