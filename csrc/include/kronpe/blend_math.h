// kronpe C++ core: the per-axis math of the blending weights (docs/math/scattered.rst), written once for the
// CPU weight function (csrc/cpu/blend_search.cpp) and the CUDA kernels (csrc/cuda/blend.cu). No
// allocation, no exceptions: every function is KRONPE_HD.
//
// Along one axis, a coordinate q in the cell [g0, g1] (spacing h, q = g0 + beta h) gets the weight
// pair alpha = [[D(0), D(h)], [D(h), D(0)]]^-1 [D(beta h), D((1 - beta) h)], optionally divided by
// its sum; degenerate cells fall back to linear interpolation (1 - beta, beta).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kronpe/common.h"

namespace kronpe::blend {

// Closed-form distance functions known to the kernels (the scale of D does not matter: alpha is
// homogeneous of degree 0 in D). `param` is given per kind.
enum class Kernel : int {
  linear = 0,    // no distance: alpha = (1 - beta, beta), plain multilinear interpolation
  gaussian = 1,  // exp(-param d^2): Gaussian (param = 1 / (4 sigma^2)), RFF (2 pi^2 sigma^2)
  bspline3 = 2,  // B3(|d| param), cubic B-spline kernel: exact Triangle (param = 1 / half-width)
  tri = 3,       // max(1 - |d| param, 0): Rectangle (param = 1 / width)
  tri_sq = 4,    // max(1 - |d| param, 0)^2: the papers' Triangle (param = 1 / full width)
};

// A cell whose 2x2 system has det <= kSingularRcond * D(0)^2 is singular: its weights fall back
// to linear interpolation (the limit of alpha when D is flat over the cell).
constexpr double kSingularRcond = 1e-8;
// With normalisation, a pair of weights whose sum has |sum| <= kTinySum falls back to linear.
constexpr double kTinySum = 1e-12;
// Largest D accepted (2^D corners per point).
constexpr int kMaxDims = 20;

namespace math {

// exp(x) for x <= 0 to about 1 ulp, branch-free so that the CPU weight loop vectorises:
// x = n ln2 + r with |r| <= ln2 / 2, a degree-12 Taylor polynomial in r, and 2^n assembled in the
// exponent bits. Arguments below -708 give 0 (the distances are then negligible anyway).
KRONPE_HD double exp_nonpositive(double x) {
  const double xc = x < -708.0 ? -708.0 : x;
  const double magic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const double t = xc * 1.4426950408889634 + magic;
  const double n = t - magic;
  const double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  double p = 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  std::uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits + 1023u) << 52;  // the low bits of t hold n; the constant's bits shift out
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -708.0 ? 0.0 : p * scale;
}

// D(d) of kind K (up to scale).
template <Kernel K>
KRONPE_HD double dist(double param, double d) {
  if constexpr (K == Kernel::gaussian) {
    return exp_nonpositive(-param * d * d);
  } else if constexpr (K == Kernel::bspline3) {
    const double u = std::fabs(d) * param;
    const double t = 2.0 - u > 0.0 ? 2.0 - u : 0.0;
    return u <= 1.0 ? 2.0 / 3.0 - u * u + 0.5 * u * u * u : t * t * t * (1.0 / 6.0);
  } else if constexpr (K == Kernel::tri) {
    const double u = 1.0 - std::fabs(d) * param;
    return u > 0.0 ? u : 0.0;
  } else if constexpr (K == Kernel::tri_sq) {
    double u = 1.0 - std::fabs(d) * param;
    u = u > 0.0 ? u : 0.0;
    return u * u;
  } else {
    return 0.0;
  }
}

KRONPE_HD double dist(Kernel kind, double param, double d) {
  switch (kind) {
    case Kernel::gaussian: return dist<Kernel::gaussian>(param, d);
    case Kernel::bspline3: return dist<Kernel::bspline3>(param, d);
    case Kernel::tri: return dist<Kernel::tri>(param, d);
    case Kernel::tri_sq: return dist<Kernel::tri_sq>(param, d);
    case Kernel::linear:
    default: return 0.0;
  }
}

// Cell j in [0, M - 2] with nodes[j] <= q < nodes[j + 1] (the last cell includes its right
// node); q below the first node or NaN gives 0, q at or above the last node gives M - 2. With
// `uniform` (the nodes deviate from an even spacing by at most one spacing) the cell is guessed
// from inv_h and corrected by a short walk; otherwise it is found by bisection.
KRONPE_HD index_t cell(const double* nodes, index_t M, double lo, double hi, double inv_h,
                       bool uniform, double q) {
  const index_t last = M - 2;
  if (!(q > lo)) return 0;
  if (q >= hi) return last;
  index_t j;
  if (uniform) {
    j = static_cast<index_t>((q - lo) * inv_h);
    j = j < 0 ? 0 : (j > last ? last : j);
    while (j > 0 && q < nodes[j]) --j;
    while (j < last && q >= nodes[j + 1]) ++j;
  } else {
    index_t a = 0, b = M;  // first index with nodes[index] > q lies in [a, b]
    while (a < b) {
      const index_t mid = a + (b - a) / 2;
      if (nodes[mid] <= q) a = mid + 1;
      else b = mid;
    }
    j = a - 1;
    j = j < 0 ? 0 : (j > last ? last : j);
  }
  return j;
}

// Clamp x onto [lo, hi] (NaN goes to lo), then its cell j, the cell length h and the fraction
// beta of the cell at which x lies.
KRONPE_HD void locate(const double* nodes, index_t M, double lo, double hi, double inv_h,
                      bool uniform, double x, index_t& j, double& beta, double& h) {
  if (!(x >= lo)) x = lo;
  if (x > hi) x = hi;
  j = cell(nodes, M, lo, hi, inv_h, uniform, x);
  const double g0 = nodes[j];
  h = nodes[j + 1] - g0;
  beta = (x - g0) / h;
}

// The weight pair of a point at fraction beta of a cell of length h. D0 = D(0), dh = D(h) of the
// cell, dt = D0^2 - dh^2 of the cell or 0 for a singular cell. Branch-free.
template <Kernel K, bool Normalize>
KRONPE_HD void pair(double param, double D0, double dh, double dt, double beta, double h,
                    double& w0, double& w1) {
  if constexpr (K == Kernel::linear) {
    w0 = 1.0 - beta;
    w1 = beta;
  } else {
    const double r0 = dist<K>(param, beta * h);
    const double r1 = dist<K>(param, (1.0 - beta) * h);
    // numerators first: a point on a node gets exactly (1, 0) or (0, 1)
    const double n0 = D0 * r0 - dh * r1;
    const double n1 = D0 * r1 - dh * r0;
    double a0, a1;
    bool linear = dt == 0.0;
    if constexpr (Normalize) {  // det cancels: alpha / sum(alpha) = n / sum(n)
      const double sum = n0 + n1;
      linear = linear | !(std::fabs(sum) > kTinySum * dt);
      a0 = n0 / sum;
      a1 = n1 / sum;
    } else {
      a0 = n0 / dt;
      a1 = n1 / dt;
    }
    w0 = linear ? 1.0 - beta : a0;
    w1 = linear ? beta : a1;
  }
}

// The same with the kind and the normalisation chosen at run time.
KRONPE_HD void pair(Kernel kind, bool normalize, double param, double D0, double dh, double dt,
                    double beta, double h, double& w0, double& w1) {
#define KRONPE_PAIR_CASE(K)                                                    \
  case K:                                                                      \
    if (normalize) pair<K, true>(param, D0, dh, dt, beta, h, w0, w1);          \
    else pair<K, false>(param, D0, dh, dt, beta, h, w0, w1);                   \
    return;
  switch (kind) {
    KRONPE_PAIR_CASE(Kernel::gaussian)
    KRONPE_PAIR_CASE(Kernel::bspline3)
    KRONPE_PAIR_CASE(Kernel::tri)
    KRONPE_PAIR_CASE(Kernel::tri_sq)
    case Kernel::linear:
    default:
      pair<Kernel::linear, false>(param, D0, dh, dt, beta, h, w0, w1);
      return;
  }
#undef KRONPE_PAIR_CASE
}

}  // namespace math
}  // namespace kronpe::blend
