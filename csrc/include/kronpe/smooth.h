// kronpe C++ core: the thin-plate smoothing operator on a grid and the grid transfers of its
// multigrid solver (docs/math/penalties.rst; the solver lives in kronpe.solvers.multigrid).
//
// A grid has up to three axes, row-major and contiguous; fewer axes are padded with leading axes
// of length 1. On it,
//
//     A x = m * x + lam * R x,
//     R = sum_i D2_i^T D2_i + 2 sum_{i<j} (D1_i^T D1_i) (x) (D1_j^T D1_j)
//
// or, in the Laplacian-power form (Grid::power), R = (sum_i w_i L_i)^order (mirrored only)
// (D_q the q-th difference matrix along an axis, with no rows on an axis of length <= q: the
// penalty DifferencePenalty(2, mixed=True), the discrete thin-plate energy; with `reflect`, the
// grid mirrored at its ends, DifferencePenalty(2, mixed=True, boundary="reflect"): D2^T D2
// becomes L^2, L = D1^T D1 the Neumann Laplacian, so R = (sum_i L_i)^2), m >= 0 a diagonal
// (the data term: the mask, or the lumped sampling density). The kernels are fused passes of
// this operator:
//
//   apply     out = A x
//   residual  out = b - A x
//   cheb_start  r = (b - A x) / diag(A),  d = r / theta  (two outputs; x null: x = 0)
//   cheb_step   x += d,  r -= (A d) / diag(A),  d_out = c1 d + c2 r   (d read, d_out written)
//
// (the first and later steps of a Chebyshev smoother on diag(A)^-1 A; a node whose row of A is
// zero has diag(A)^-1 = 0 there). Each output node is
// computed by one thread in a fixed order: results do not depend on the thread count.
//
// Transfers between a grid and the next coarser one along one axis (linear interpolation, coarse
// node j at fine node 2 j, n_coarse = n / 2 + 1), arrays viewed as (outer, n, inner):
//   restrict_axis  c[j] = f[2j] + (f[2j - 1] + f[2j + 1]) / 2   (P^T, terms in range)
//   prolong_axis   f[2j] = c[j],  f[2j + 1] = (c[j] + c[j + 1]) / 2   (P; or f += P c)
#pragma once
#include <memory>

#include "kronpe/common.h"

namespace kronpe::smooth {

// The shape of a grid padded to three axes, n[0] * n[1] * n[2] nodes, and its penalty.
//
// The Laplacian-power form (power(): order 3, or weighted): R = (sum_i w_i L_i)^order, L_i the
// Neumann Laplacian along axis i (mirrored boundary only: reflect must be true), the penalty
// DifferencePenalty(order, mixed=True, boundary="reflect", weights=w). It is applied by `order`
// weighted 7-point Laplacian passes over rings of rows (PowerRows, csrc/cpu/smooth_rows.h).
struct Grid {
  index_t n[3] = {1, 1, 1};
  bool reflect = false;   // the boundary of the penalty: natural (false) or mirrored (true)
  int order = 2;          // 2 or 3
  bool weighted = false;  // the Laplacian-power form with the weights w (also for order 2)
  double w[3] = {1.0, 1.0, 1.0};
  // the power form as a polynomial: R = top (sum_i w_i L_i)^order + tail (sum_i w_i L_i)^(order - 1)
  // (top 1, tail 0: the plain power; e.g. order 3, top h, tail 1: the squared Laplacian plus h
  // times the third power, DifferencePenalty(2, mixed=True, boundary="reflect", higher=h))
  double top = 1.0, tail = 0.0;
  bool polynomial() const { return top != 1.0 || tail != 0.0; }
  index_t size() const { return n[0] * n[1] * n[2]; }
  bool power() const { return order != 2 || weighted || polynomial(); }
};

// n / 2 + 1: the coarse length of an axis of n >= 3 nodes.
inline index_t coarse_length(index_t n) { return n / 2 + 1; }

// What the kernels below build for a grid on every call (the penalty's bands, every thread's
// scratch row and stencil rings), kept between calls on one grid instead (a multigrid hierarchy
// keeps one per level: a V-cycle's small levels were mostly these allocations). Built by
// smooth_scratch for a grid; a kernel given one uses it when the grid is the same, else builds
// its own. One caller at a time.
template <typename T>
class SmoothScratch;
template <typename T>
std::shared_ptr<SmoothScratch<T>> smooth_scratch(const Grid& g);

template <typename T>
void thin_plate_apply(const Grid& g, const T* x, const T* m, T lam, T* out, int threads,
                      SmoothScratch<T>* scratch = nullptr);
template <typename T>
void thin_plate_residual(const Grid& g, const T* x, const T* b, const T* m, T lam, T* out,
                         int threads, SmoothScratch<T>* scratch = nullptr);
template <typename T>
void thin_plate_cheb_start(const Grid& g, const T* x, const T* b, const T* m, T lam, T theta,
                           T* r, T* d, int threads);
template <typename T>
void thin_plate_cheb_step(const Grid& g, const T* d, T* r, T* x, const T* m, T lam, T c1, T c2,
                          T* d_out, int threads);
// The whole smoother in one pass (a wavefront over the rows, see smooth.cpp; on one thread eight
// rows of every stage per step, one epilogue call for them): cheb_start from x
// (zero: from x = 0, x written), nsteps cheb_steps with coefficients (c1[k], c2[k]), then
// x += d_out; res (may be r, or null): b - A x after it. w: diag(A)^-1 (thin_plate_diag with
// inverted); r, d, d2: work arrays of the grid's size. The same values as the separate kernels.
// An over-relaxed stationary step fused in (ThinPlateHierarchy::cycles): save (not with zero)
// receives x as it was before the smoother; with `from` given, the smoother's result x_s is
// written over-relaxed from it, from + omega (x_s - from), and res must be null. With `start`
// (not with zero, save or from), the smoother starts from start instead of x, whose values are
// then only written: the same values as copying start into x first, without that pass.
template <typename T>
void thin_plate_smooth(const Grid& g, T* x, const T* b, const T* m, const T* w, T lam, T theta,
                       bool zero, int nsteps, const T* c1, const T* c2, T* r, T* d, T* d2, T* res,
                       int threads, SmoothScratch<T>* scratch = nullptr, T* save = nullptr,
                       const T* from = nullptr, T omega = T(1), const T* start = nullptr);

// diag(A), for Jacobi-type smoothers and the tests; inverted: diag(A)^-1 (0 where diag(A) is 0),
// the smoother's scaling.
template <typename T>
void thin_plate_diag(const Grid& g, const T* m, T lam, T* out, int threads, bool inverted = false);
// diag(R) alone (no data term, lam = 1), and diag(A)^-1 = 1 / (m + lam rd) from it (0 where that
// is 0; the same values as thin_plate_diag with inverted): a new lam in one streaming pass.
template <typename T>
void penalty_diag(const Grid& g, T* out, int threads, SmoothScratch<T>* scratch = nullptr);
template <typename T>
void inverse_diag(index_t n, const T* m, T lam, const T* rd, T* w, int threads);

// (outer, n, inner) -> (outer, n / 2 + 1, inner), n >= 1 (n <= 2: nodes at 0 [and 2]).
template <typename T>
void restrict_axis(index_t outer, index_t n, index_t inner, const T* f, T* c, int threads);
// (outer, nc, inner) -> (outer, n, inner) with nc == n / 2 + 1; add: f += P c instead of f = P c
// (the coarse-grid correction, without a temporary).
template <typename T>
void prolong_axis(index_t outer, index_t n, index_t inner, const T* c, T* f, bool add,
                  int threads);

// The team rule of these kernels beyond two threads: one thread per `nodes` (default 2^16, at
// least 2^13); returns the previous value. For measuring the rule on many-core hosts.
index_t set_nodes_per_extra_thread(index_t nodes);

}  // namespace kronpe::smooth
