// Cubic B-spline normal equations, values and stencil products (kronpe/spline.h).
#include "kronpe/spline.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kronpe/threads.h"

namespace kronpe {

index_t SplineGrid::size() const {
  index_t s = 1;
  for (int a = 0; a < ndim; ++a) s = checked_mul(s, coefficients(a), "spline grid size");
  return s;
}

index_t stencil_width(int ndim) { return ndim == 1 ? 7 : ndim == 2 ? 49 : 343; }

namespace {

// The interval of x along axis a and its four weights.
inline index_t cell_weights(const SplineGrid& g, int a, double x, double w[4]) {
  const double u = (x - g.lo[a]) / g.h[a];
  double f = std::floor(u);
  if (!(f >= 0)) f = 0;  // (NaN too: callers check the points, this keeps an index in range regardless)
  if (f > double(g.nint[a] - 1)) f = double(g.nint[a] - 1);
  const double t = u - f, s = 1.0 - t, t2 = t * t, t3 = t2 * t;
  w[0] = s * s * s / 6.0;
  w[1] = (3.0 * t3 - 6.0 * t2 + 4.0) / 6.0;
  w[2] = (-3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0) / 6.0;
  w[3] = t3 / 6.0;
  return index_t(f);
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

// The points whose first-axis interval lies in each stripe of kStripe intervals, in their order.
constexpr index_t kStripe = 4;  // >= 4: a point touches 4 coefficient rows, so stripes two apart share none

template <int D>
void normal_impl(const SplineGrid& g, index_t P, const double* pts, const double* vals, index_t C,
                 const double* weights, double* st, double* rhs, int threads) {
  index_t stride[3];
  strides_of<D>(g, stride);
  const index_t W = stencil_width(D), N = g.size();
  const int centre = int((W - 1) / 2);
  const index_t stripes = (g.nint[0] + kStripe - 1) / kStripe;
  // bucket the points by stripe (counting sort: the order within a stripe is the input's)
  std::vector<index_t> start(static_cast<std::size_t>(stripes + 1), 0), order(static_cast<std::size_t>(P));
  std::vector<index_t> stripe_of(static_cast<std::size_t>(P));
  for (index_t p = 0; p < P; ++p) {
    double w[4];
    const index_t s = cell_weights(g, 0, pts[p * D], w) / kStripe;
    stripe_of[std::size_t(p)] = s;
    ++start[std::size_t(s + 1)];
  }
  for (index_t s = 0; s < stripes; ++s) start[std::size_t(s + 1)] += start[std::size_t(s)];
  {
    std::vector<index_t> fill(start.begin(), start.end() - 1);
    for (index_t p = 0; p < P; ++p) order[std::size_t(fill[std::size_t(stripe_of[std::size_t(p)])]++)] = p;
  }
  // the couplings are summed node-major (a point's 4^D x 4^D products land in 4^D runs of W), then
  // added to the offset-major stencil
  std::vector<double> scratch(static_cast<std::size_t>(checked_mul(N, W, "spline stencil")), 0.0);
  double* rows = scratch.data();
  auto stripe = [&](index_t s) {
    Corners<D> c;
    for (index_t q = start[std::size_t(s)]; q < start[std::size_t(s + 1)]; ++q) {
      const index_t p = order[std::size_t(q)];
      corners<D>(g, stride, pts + p * D, c);
      const double pw = weights ? weights[p] : 1.0;
      for (int k = 0; k < Corners<D>::K; ++k) {
        const double wk = pw * c.w[k];
        double* row = rows + c.idx[k] * W + centre - c.off[k];  // node-major: one node's couplings together
        // the corners' offsets are runs of 4 along the last axis (off = ... + 7 i + j): 4-wide updates
        for (int l = 0; l < Corners<D>::K; l += 4) {
          double* run = row + c.off[l];
          const double* wl = c.w + l;
          run[0] += wk * wl[0];
          run[1] += wk * wl[1];
          run[2] += wk * wl[2];
          run[3] += wk * wl[3];
        }
        double* r = rhs + c.idx[k] * C;
        const double* v = vals + p * C;
        for (index_t ch = 0; ch < C; ++ch) r[ch] += wk * v[ch];
      }
    }
  };
  // stripes two apart touch disjoint coefficient rows: even ones, then odd ones, in parallel
  const int nt = threads > 0 ? threads : kernel_threads();
  for (int parity = 0; parity < 2; ++parity) {
    const index_t count = (stripes - parity + 1) / 2;
    run_team(count > 1 ? std::min<index_t>(nt, count) : 1, [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (index_t i = 0; i < count; ++i) stripe(2 * i + parity);
    });
  }
  constexpr index_t kTile = 256;
  const index_t tiles = (N + kTile - 1) / kTile;
  run_team(N * W > (1 << 18) ? int(std::min<index_t>(nt, tiles)) : 1, [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t t = 0; t < tiles; ++t) {
      const index_t j0 = t * kTile, j1 = std::min(N, j0 + kTile);
      for (index_t o = 0; o < W; ++o) {
        double* out = st + o * N;
        for (index_t j = j0; j < j1; ++j) out[j] += rows[j * W + o];
      }
    }
  });
}

template <int D>
void values_impl(const SplineGrid& g, index_t P, const double* pts, const double* coef, index_t C, double* out,
                 int threads) {
  index_t stride[3];
  strides_of<D>(g, stride);
  const int nt = threads > 0 ? threads : kernel_threads();
  run_team(P > 4096 ? nt : 1, [&](int, int) {
    Corners<D> c;
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t p = 0; p < P; ++p) {
      corners<D>(g, stride, pts + p * D, c);
      double* o = out + p * C;
      for (index_t ch = 0; ch < C; ++ch) o[ch] = 0.0;
      for (int k = 0; k < Corners<D>::K; ++k) {
        const double* v = coef + c.idx[k] * C;
        for (index_t ch = 0; ch < C; ++ch) o[ch] += c.w[k] * v[ch];
      }
    }
  });
}

// Offset-major stencils: entry o of coefficient j at st[o * N + j]. Coefficient j's neighbour at
// offset o is j + shift[o] in the flat (C-order) numbering; where that neighbour lies outside the
// grid the entry is zero, so a flat index that wraps into the next row adds nothing, and only
// the flat range [0, N) has to be respected.
template <int D, typename S>
void apply_impl(const index_t* n, const S* st, const double* x, index_t C, double* y, int threads) {
  index_t N = 1, stride[3];
  for (int a = D - 1; a >= 0; --a) stride[a] = N, N *= n[a];
  const int W = int(stencil_width(D));
  index_t shift[343];
  for (int o = 0; o < W; ++o) {
    int rest = o;
    index_t s = 0;
    for (int a = D - 1; a >= 0; --a) s += index_t(rest % 7 - 3) * stride[a], rest /= 7;
    shift[o] = s;
  }
  constexpr index_t kBlock = 2048;
  const index_t blocks = (N + kBlock - 1) / kBlock;
  const int nt = threads > 0 ? threads : kernel_threads();
  run_team(N * W * C > (1 << 18) ? int(std::min<index_t>(nt, blocks)) : 1, [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t b = 0; b < blocks; ++b) {
      const index_t j0 = b * kBlock, j1 = std::min(N, j0 + kBlock);
      double* yb = y + j0 * C;
      for (index_t k = 0; k < (j1 - j0) * C; ++k) yb[k] = 0.0;
      for (int o = 0; o < W; ++o) {
        const index_t sh = shift[o];
        const index_t lo = std::max(j0, -sh), hi = std::min(j1, N - sh);
        const S* so = st + index_t(o) * N;
        if (C == 1) {
#pragma omp simd
          for (index_t j = lo; j < hi; ++j) y[j] += double(so[j]) * x[j + sh];
        } else {
          for (index_t j = lo; j < hi; ++j) {
            const double a = double(so[j]);
            const double* v = x + (j + sh) * C;
            double* out = y + j * C;
            for (index_t ch = 0; ch < C; ++ch) out[ch] += a * v[ch];
          }
        }
      }
    }
  });
}

void check_grid(const SplineGrid& g) {
  require(g.ndim >= 1 && g.ndim <= 3, "spline grid: 1 to 3 axes");
  for (int a = 0; a < g.ndim; ++a)
    require(g.nint[a] >= 1 && g.h[a] > 0 && std::isfinite(g.h[a]) && std::isfinite(g.lo[a]),
            "spline grid: each axis needs at least one interval of finite positive width");
}

}  // namespace

void spline_normal(const SplineGrid& g, index_t P, const double* points, const double* values, index_t C,
                   const double* weights, double* stencil, double* rhs, int threads) {
  check_grid(g);
  if (P == 0) return;
  switch (g.ndim) {
    case 1: return normal_impl<1>(g, P, points, values, C, weights, stencil, rhs, threads);
    case 2: return normal_impl<2>(g, P, points, values, C, weights, stencil, rhs, threads);
    default: return normal_impl<3>(g, P, points, values, C, weights, stencil, rhs, threads);
  }
}

void spline_values(const SplineGrid& g, index_t P, const double* points, const double* coef, index_t C,
                   double* out, int threads) {
  check_grid(g);
  if (P == 0) return;
  switch (g.ndim) {
    case 1: return values_impl<1>(g, P, points, coef, C, out, threads);
    case 2: return values_impl<2>(g, P, points, coef, C, out, threads);
    default: return values_impl<3>(g, P, points, coef, C, out, threads);
  }
}

template <typename S>
void stencil_apply_any(int ndim, const index_t* n, const S* stencil, const double* x, index_t C, double* y,
                       int threads) {
  require(ndim >= 1 && ndim <= 3, "stencil_apply: 1 to 3 axes");
  for (int a = 0; a < ndim; ++a)
    if (n[a] <= 0) return;
  switch (ndim) {
    case 1: return apply_impl<1>(n, stencil, x, C, y, threads);
    case 2: return apply_impl<2>(n, stencil, x, C, y, threads);
    default: return apply_impl<3>(n, stencil, x, C, y, threads);
  }
}

void stencil_apply(int ndim, const index_t* n, const double* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, threads);
}

void stencil_apply(int ndim, const index_t* n, const float* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, threads);
}

}  // namespace kronpe
