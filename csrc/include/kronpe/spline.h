// kronpe C++ core: tensor-product cubic B-splines on a uniform node grid (the scattered-data fit
// of kronpe.solvers.spline). No Python here.
//
// A grid of `ndim` (1-3) axes; axis a has nint[a] intervals of width h[a] starting at lo[a], and
// nint[a] + 3 coefficients: coefficient j's basis function is the cubic B-spline centred at
// lo + (j - 1) h, so a point in interval i (clamped to [0, nint - 1]) has the weights
//   (1-t)^3/6, (3t^3 - 6t^2 + 4)/6, (-3t^3 + 3t^2 + 3t + 1)/6, t^3/6   (t = u - i, u = (x - lo)/h)
// on coefficients i .. i+3. Coefficients are stored C-order (the last axis fastest) with C
// channels innermost: coef[(j_0, ..., j_{D-1}), c].
//
// A symmetric operator on the coefficients that couples only coefficients within 3 of each other
// along every axis (B^T B of the points, the smoothness penalty) is kept as a stencil, offset-major:
// a (7^D, N) array whose row o holds every coefficient's coupling to its neighbour at offset o,
// o = sum_a (o_a + 3) 7^(D-1-a) for o_a in -3..3; couplings to coefficients outside the grid are
// zero. Row by row, a product is D-free and vectorises along the coefficients.
#pragma once
#include "kronpe/common.h"

namespace kronpe {

struct SplineGrid {
  int ndim = 0;
  index_t nint[3] = {0, 0, 0};
  double lo[3] = {0, 0, 0};
  double h[3] = {1, 1, 1};
  index_t coefficients(int a) const { return nint[a] + 3; }
  index_t size() const;  // product of the coefficients per axis
};

// 7^ndim: the stencil's entries per coefficient.
index_t stencil_width(int ndim);

// stencil += B^T B and rhs += B^T y over the P points (row-major P x ndim) with values y (row-major
// P x C), each point weighted by weights[p] when weights is not null. stencil: 7^ndim x size();
// rhs: size() x C. Deterministic: the same bits for any thread count and on every vector path
// (KRONPE_SIMD); what it adds to the stencil exactly symmetric (entry o of j, entry -o of j + o).
void spline_normal(const SplineGrid& g, index_t P, const double* points, const double* values, index_t C,
                   const double* weights, double* stencil, double* rhs, int threads = 0);

// out (P x C) = the spline with coefficients coef (size() x C) at the points.
void spline_values(const SplineGrid& g, index_t P, const double* points, const double* coef, index_t C,
                   double* out, int threads = 0);

// y = A x for the (7^ndim, prod n) stencil A on the grid of `ndim` axes with n[a] coefficients per axis; x and y
// (prod n) x C, separate arrays. Each entry of y is the sum of its products in the offsets' order (the
// same bits as adding A's rows one at a time), for any thread count and on every vector path.
void stencil_apply(int ndim, const index_t* n, const double* stencil, const double* x, index_t C, double* y,
                   int threads = 0);
// The same with a float32 stencil (half the memory traffic: the multigrid smoother's operators);
// x and y stay float64.
void stencil_apply(int ndim, const index_t* n, const float* stencil, const double* x, index_t C, double* y,
                   int threads = 0);

// y = b - A x (the float64 or float32 stencil A as in stencil_apply); y may be b itself (not x).
void stencil_residual(int ndim, const index_t* n, const double* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads = 0);
void stencil_residual(int ndim, const index_t* n, const float* stencil, const double* b, const double* x,
                      index_t C, double* y, int threads = 0);

// `degree` Chebyshev steps for A x = b (the multigrid smoother of the spline fit) on D^-1 A, dinv
// its inverse diagonal (prod n), over the spectrum [theta - delta, theta + delta]; A a float32
// stencil. x (prod n x C): the start (zero where zero_start), the result on return; res: b - A x on
// return where residual (one product more), else scratch; work: scratch of 2 x (prod n) x C. Each
// step's elementwise updates are made in its product's pass; the operations of
// kronpe.reference.spline_chebyshev in their order: the same bits on every machine.
void spline_chebyshev(int ndim, const index_t* n, const float* stencil, const double* dinv, const double* b,
                      index_t C, int degree, double theta, double delta, bool zero_start, bool residual, double* x,
                      double* res, double* work, int threads = 0);

// The nested grids' transfers along the middle axis of C-order (outer, n, inner) arrays: fine
// (outer, 2 n - 3, inner) = the same spline on twice the intervals (the taps 1 4 6 4 1 / 8), and
// the transpose, coarse (outer, n, inner) from fine. n >= 2.
void spline_subdivide(index_t outer, index_t n, index_t inner, const double* coarse, double* fine);
void spline_restrict(index_t outer, index_t n, index_t inner, const double* fine, double* coarse);

}  // namespace kronpe
