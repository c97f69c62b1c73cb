// Cubic B-spline values, stencil products, the Chebyshev smoother and the grid transfers
// (kronpe/spline.h); the normal equations are in spline_normal.cpp.
#include "kronpe/spline.h"

#include <vector>

#include "kronpe/threads.h"
#include "spline_simd.h"

namespace kronpe {

index_t SplineGrid::size() const {
  index_t s = 1;
  for (int a = 0; a < ndim; ++a) s = checked_mul(s, coefficients(a), "spline grid size");
  return s;
}

index_t stencil_width(int ndim) { return ndim == 1 ? 7 : ndim == 2 ? 49 : 343; }

namespace {

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
//
// A product walks blocks of rows; in a block it adds the offsets a run of 7 at a time (the 7
// offsets along the last axis: shifts sh0 .. sh0 + 6), each row's sum in registers, so that y is
// read and written once per run, not per offset, and each pass streams 7 stencil rows. Those
// streams are prefetched kApplyAhead entries ahead: the hardware prefetchers lose track of 49 or
// 343 streams (without, a product read its stencil at a quarter of the memory's bandwidth). Every
// row's sum is added in the offsets' order, as one offset at a time would.
constexpr index_t kApplyBlock = 16384;  // rows of y (at C = 1: 128 KiB, L2-resident with x's part)
constexpr index_t kApplyAhead = 128;

// y[i - y0] += sum over the run's 7 offsets k (in order) of st_k[i] x[i + sh0 + k] for i in [lo, hi)
// (rows of C entries; y holds the rows from y0 on), where every offset's neighbour lies in [0, N).
// CC: C when 1 to 4 (then 8 rows at a time: x and y as C vectors of 8, the stencil's 8 entries
// spread over them), 0 for any C.
template <typename S, int CC>
KRONPE_SPLINE_INLINE void run7(const S* const* so, index_t sh0, const double* __restrict x, index_t C,
                               double* __restrict yb, index_t y0, index_t lo, index_t hi) {
  const S* __restrict s0 = so[0];
  const S* __restrict s1 = so[1];
  const S* __restrict s2 = so[2];
  const S* __restrict s3 = so[3];
  const S* __restrict s4 = so[4];
  const S* __restrict s5 = so[5];
  const S* __restrict s6 = so[6];
  if constexpr (CC == 1) {
    const double* __restrict xs = x + sh0;
    auto row = [&](index_t i) KRONPE_SPLINE_INLINE_LAMBDA {
      double acc = yb[i - y0];
      acc += double(s0[i]) * xs[i];
      acc += double(s1[i]) * xs[i + 1];
      acc += double(s2[i]) * xs[i + 2];
      acc += double(s3[i]) * xs[i + 3];
      acc += double(s4[i]) * xs[i + 4];
      acc += double(s5[i]) * xs[i + 5];
      acc += double(s6[i]) * xs[i + 6];
      yb[i - y0] = acc;
    };
    constexpr index_t L = 64 / sizeof(S);  // a cache line of each stencil row per step
    index_t j = lo;
    for (; j + L <= hi; j += L) {
      for (int k = 0; k < 7; ++k) __builtin_prefetch(so[k] + j + kApplyAhead, 0, 3);
#pragma omp simd
      for (index_t i = j; i < j + L; ++i) row(i);
    }
    for (index_t i = j; i < hi; ++i) row(i);
    return;
  }
  if constexpr (CC >= 2) {
    for (; lo + 8 <= hi; lo += 8) {
      for (int k = 0; k < 7; ++k) __builtin_prefetch(so[k] + lo + kApplyAhead, 0, 3);
      v8 acc[CC];
      for (int u = 0; u < CC; ++u) acc[u] = load8(yb + (lo - y0) * CC + 8 * u);
      for (int k = 0; k < 7; ++k) {
        const v8 a = load8(so[k] + lo);
        const double* v = x + (lo + sh0 + k) * CC;
        for (int u = 0; u < CC; ++u) acc[u] += spread<CC>(a, u) * load8(v + 8 * u);
      }
      for (int u = 0; u < CC; ++u) storev(yb + (lo - y0) * CC + 8 * u, acc[u]);
    }
    C = CC;
  }
  for (index_t i = lo; i < hi; ++i) {  // (CC >= 2: the last rows)
    const double* v = x + (i + sh0) * C;
    double* out = yb + (i - y0) * C;
    const double a[7] = {double(s0[i]), double(s1[i]), double(s2[i]), double(s3[i]),
                         double(s4[i]), double(s5[i]), double(s6[i])};
    for (index_t c = 0; c < C; ++c) {
      double acc = out[c];
      for (int k = 0; k < 7; ++k) acc += a[k] * v[k * C + c];
      out[c] = acc;
    }
  }
}

// yb (rows j - j0) = the product's rows j0 .. j1 - 1.
template <typename S, int CC>
KRONPE_SPLINE_INLINE void apply_block(const S* st, index_t N, int W, const index_t* shift, const double* x,
                                      index_t C, double* yb, index_t j0, index_t j1) {
  for (index_t k = 0; k < (j1 - j0) * C; ++k) yb[k] = 0.0;
  for (int o0 = 0; o0 < W; o0 += 7) {
    const index_t sh0 = shift[o0];
    const S* so[7];
    for (int k = 0; k < 7; ++k) so[k] = st + index_t(o0 + k) * N;
    // rows [ulo, uhi) have a neighbour in [0, N) at some offset of the run, [ilo, ihi) at all of them
    const index_t ulo = j0 > -sh0 - 6 ? j0 : -sh0 - 6, uhi = j1 < N - sh0 ? j1 : N - sh0;
    index_t ilo = j0 > -sh0 ? j0 : -sh0, ihi = j1 < N - sh0 - 6 ? j1 : N - sh0 - 6;
    if (ilo > uhi) ilo = uhi;
    if (ihi < ilo) ihi = ilo;
    for (int side = 0; side < 2; ++side) {  // the rows with some neighbours outside, one by one
      const index_t a = side == 0 ? ulo : (ihi > ulo ? ihi : ulo), e = side == 0 ? ilo : uhi;
      for (index_t j = a; j < e; ++j)
        for (int k = 0; k < 7; ++k) {
          const index_t i = j + sh0 + k;
          if (i < 0 || i >= N) continue;
          const double s = double(so[k][j]);
          for (index_t ch = 0; ch < C; ++ch) yb[(j - j0) * C + ch] += s * x[i * C + ch];
        }
    }
    run7<S, CC>(so, sh0, x, C, yb, j0, ilo, ihi);
  }
}

// The product's rows straight into y (y = A x).
struct Store {};

// A thread's block of product rows for a finish other than Store, kept between products (a
// product allocates nothing once its threads have met its block size).
thread_local std::vector<double> t_part;

double* part_buffer(index_t size) {
  if (t_part.size() < static_cast<std::size_t>(size)) t_part.resize(static_cast<std::size_t>(size));
  return t_part.data();
}

// y = A x, or with a finish other than Store: each block of rows' product made apart (yb, rows
// j0 .. j1 - 1) and handed to finish(j0, j1, yb), which may write any array's rows of that block
// (not x's: other blocks read it).
template <int D, typename S, int CC, typename F>
void apply_impl_c(const index_t* n, const S* st, const double* x, index_t C, double* y, const F& finish,
                  int threads) {
  constexpr bool store = std::is_same_v<F, Store>;
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
  const int nt = threads > 0 ? threads : kernel_threads();
  const bool team = nt > 1 && N * W * C > (1 << 18);
  index_t block = std::max<index_t>(1024, kApplyBlock / C);
  if (team) block = std::min(block, std::max<index_t>(1024, (N + 4 * nt - 1) / (4 * nt)));  // 4 per thread
  const index_t blocks = (N + block - 1) / block;
  run_team(team ? int(std::min<index_t>(nt, blocks)) : 1, [&](int, int) {
    double* const part = store ? nullptr : part_buffer(std::min(block, N) * C);
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t b = 0; b < blocks; ++b) {
      const index_t j0 = b * block, j1 = std::min(N, j0 + block);
      double* yb = store ? y + j0 * C : part;
      with_simd([&](auto) KRONPE_SPLINE_INLINE_LAMBDA { apply_block<S, CC>(st, N, W, shift, x, C, yb, j0, j1); });
      if constexpr (!store) finish(j0, j1, static_cast<const double*>(yb));
    }
  });
}

template <int D, typename S, typename F>
void apply_impl(const index_t* n, const S* st, const double* x, index_t C, double* y, const F& finish,
                int threads) {
  switch (C) {
    case 1: return apply_impl_c<D, S, 1>(n, st, x, C, y, finish, threads);
    case 2: return apply_impl_c<D, S, 2>(n, st, x, C, y, finish, threads);
    case 3: return apply_impl_c<D, S, 3>(n, st, x, C, y, finish, threads);
    case 4: return apply_impl_c<D, S, 4>(n, st, x, C, y, finish, threads);
    default: return apply_impl_c<D, S, 0>(n, st, x, C, y, finish, threads);
  }
}


}  // namespace


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

template <typename S, typename F = Store>
void stencil_apply_any(int ndim, const index_t* n, const S* stencil, const double* x, index_t C, double* y,
                       const F& finish, int threads) {
  require(ndim >= 1 && ndim <= 3, "stencil_apply: 1 to 3 axes");
  for (int a = 0; a < ndim; ++a)
    if (n[a] <= 0) return;
  switch (ndim) {
    case 1: return apply_impl<1>(n, stencil, x, C, y, finish, threads);
    case 2: return apply_impl<2>(n, stencil, x, C, y, finish, threads);
    default: return apply_impl<3>(n, stencil, x, C, y, finish, threads);
  }
}

void stencil_apply(int ndim, const index_t* n, const double* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, Store(), threads);
}

void stencil_apply(int ndim, const index_t* n, const float* stencil, const double* x, index_t C, double* y,
                   int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y, Store(), threads);
}

namespace {

// y = b - A x, a block at a time (b may be y).
template <typename S>
void residual_any(int ndim, const index_t* n, const S* stencil, const double* b, const double* x, index_t C,
                  double* y, int threads) {
  stencil_apply_any(ndim, n, stencil, x, C, y,
                    [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                      for (index_t k = 0; k < (j1 - j0) * C; ++k) y[j0 * C + k] = b[j0 * C + k] - part[k];
                    },
                    threads);
}

}  // namespace

void stencil_residual(int ndim, const index_t* n, const double* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads) {
  residual_any(ndim, n, stencil, b, x, C, y, threads);
}

void stencil_residual(int ndim, const index_t* n, const float* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads) {
  residual_any(ndim, n, stencil, b, x, C, y, threads);
}

void spline_chebyshev(int ndim, const index_t* n, const float* stencil, const double* dinv, const double* b,
                      index_t C, int degree, double theta, double delta, bool zero_start, bool residual, double* x,
                      double* res, double* work, int threads) {
  require(ndim >= 1 && ndim <= 3, "spline_chebyshev: 1 to 3 axes");
  require(degree >= 1, "spline_chebyshev: degree >= 1");
  index_t N = 1;
  for (int a = 0; a < ndim; ++a) N *= n[a] > 0 ? n[a] : 0;
  const index_t M = N * C;
  if (M == 0) return;
  // Each step's elementwise updates ride on its product's pass, a block of rows at a time: the
  // direction d is read by the product (its neighbours' rows too), so the next one goes to the
  // other half of work.
  double* d = work;
  double* next = work + M;
  // res = b - A x (or b), d = D^-1 res / theta
  if (zero_start) {
    for (index_t i = 0; i < N; ++i)
      for (index_t c = 0; c < C; ++c) {
        res[i * C + c] = b[i * C + c];
        d[i * C + c] = dinv[i] * res[i * C + c] / theta;
        x[i * C + c] = 0.0;
      }
  } else {
    stencil_apply_any(ndim, n, stencil, x, C, res,
                      [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                        for (index_t i = j0; i < j1; ++i)
                          for (index_t c = 0; c < C; ++c) {
                            const index_t k = i * C + c;
                            res[k] = b[k] - part[k - j0 * C];
                            d[k] = dinv[i] * res[k] / theta;
                          }
                      },
                      threads);
  }
  const double sigma = theta / delta;
  double rho = 1.0 / sigma;
  for (int k = 0; k < degree; ++k) {
    const bool last = k == degree - 1;
    if (last && !residual) {  // x += d
      for (index_t i = 0; i < M; ++i) x[i] = x[i] + d[i];
      break;
    }
    const double rho_new = 1.0 / (2 * sigma - rho), keep = rho_new * rho, step = 2 * rho_new / delta;
    // x += d; res -= A d; and but for the last step, the next direction keep d + step D^-1 res
    stencil_apply_any(ndim, n, stencil, d, C, res,
                      [&](index_t j0, index_t j1, const double* part) KRONPE_SPLINE_NO_CONTRACT {
                        double* __restrict xs = x + j0 * C;
                        double* __restrict rs = res + j0 * C;
                        double* __restrict ns = next + j0 * C;
                        const double* __restrict ds = d + j0 * C;
                        const double* __restrict ps = part;
                        const index_t m = (j1 - j0) * C;
                        for (index_t q = 0; q < m; ++q) {
                          xs[q] = xs[q] + ds[q];
                          rs[q] = rs[q] - ps[q];
                        }
                        if (last) return;
                        if (C == 1) {
                          const double* __restrict di = dinv + j0;
                          for (index_t q = 0; q < m; ++q) ns[q] = keep * ds[q] + step * (di[q] * rs[q]);
                        } else {
                          for (index_t i = 0; i < j1 - j0; ++i)
                            for (index_t c = 0; c < C; ++c)
                              ns[i * C + c] = keep * ds[i * C + c] + step * (dinv[j0 + i] * rs[i * C + c]);
                        }
                      },
                      threads);
    if (last) break;
    std::swap(d, next);
    rho = rho_new;
  }
}

namespace {

// The cubic B-spline's subdivision along the middle axis of (outer, n, inner) arrays: fine row 2k
// = (c_k + c_(k+1)) / 2 with weights 4/8, 4/8 (from c_(k+1) first), row 2k + 1 = (c_(k+2) + 6 c_(k+1)
// + c_k) / 8 (that order: the taps 1 4 6 4 1 / 8 added coarse row by coarse row, as the reference).
KRONPE_SPLINE_NO_CONTRACT void subdivide_impl(index_t outer, index_t n, index_t inner, const double* coarse,
                                              double* fine) {
  constexpr double w0 = 1.0 / 8, w1 = 4.0 / 8, w2 = 6.0 / 8;
  const index_t nf = 2 * n - 3;
  for (index_t o = 0; o < outer; ++o) {
    const double* c = coarse + o * n * inner;
    double* f = fine + o * nf * inner;
    for (index_t i = 0; i < nf; ++i) {
      const index_t k = i / 2;
      double* out = f + i * inner;
      if (i % 2 == 0) {
        const double *a = c + (k + 1) * inner, *b = c + k * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = w1 * a[j] + w1 * b[j];
      } else {
        const double *a = c + (k + 2) * inner, *b = c + (k + 1) * inner, *e = c + k * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = w0 * a[j] + w2 * b[j] + w0 * e[j];
      }
    }
  }
}

// Its transpose: coarse row J = the sum over the taps m = 0..4 (in that order) of w_m f_(2J + m - 3),
// the fine rows in [0, 2 n - 3) only.
KRONPE_SPLINE_NO_CONTRACT void restrict_impl(index_t outer, index_t n, index_t inner, const double* fine,
                                             double* coarse) {
  constexpr double w[5] = {1.0 / 8, 4.0 / 8, 6.0 / 8, 4.0 / 8, 1.0 / 8};
  const index_t nf = 2 * n - 3;
  for (index_t o = 0; o < outer; ++o) {
    const double* f = fine + o * nf * inner;
    double* c = coarse + o * n * inner;
    for (index_t J = 0; J < n; ++J) {
      double* out = c + J * inner;
      const index_t m0 = std::max<index_t>(0, 3 - 2 * J), m1 = std::min<index_t>(4, nf + 2 - 2 * J);
      if (m0 > m1) {
        for (index_t j = 0; j < inner; ++j) out[j] = 0.0;
        continue;
      }
      const double* r = f + (2 * J + m0 - 3) * inner;
      for (index_t j = 0; j < inner; ++j) out[j] = w[m0] * r[j];
      for (index_t m = m0 + 1; m <= m1; ++m) {
        const double* q = f + (2 * J + m - 3) * inner;
        for (index_t j = 0; j < inner; ++j) out[j] = out[j] + w[m] * q[j];
      }
    }
  }
}

}  // namespace

void spline_subdivide(index_t outer, index_t n, index_t inner, const double* coarse, double* fine) {
  require(n >= 2 && outer >= 0 && inner >= 0, "spline_subdivide: at least 2 coefficients along the axis");
  subdivide_impl(outer, n, inner, coarse, fine);
}

void spline_restrict(index_t outer, index_t n, index_t inner, const double* fine, double* coarse) {
  require(n >= 2 && outer >= 0 && inner >= 0, "spline_restrict: at least 2 coefficients along the axis");
  restrict_impl(outer, n, inner, fine, coarse);
}

}  // namespace kronpe
