// kronpe C++ core: the steps of the thin-plate multigrid solver (kronpe/multigrid.h) apart from
// where its arrays live: the host's ThinPlateHierarchy (csrc/cpu/multigrid.cpp) and the CUDA
// backend's device hierarchy (csrc/cuda/multigrid.cu) run the same hierarchy, V-cycles, full
// multigrid, stationary cycles and PCG through these templates, each with its own kernels.
//
// A hierarchy H (T its float type) gives the steps, through MultigridSteps (a friend):
//   int levels();  const Grid& grid(l);  const bool* halve(l);
//   T* x_of(l), r_of(l), b_of(l), fx_of(l), d_of(l), d2_of(l)      each level's arrays
//   void smooth_at(l, x, b, zero, res, save, from, omega, start)    the smoother (thin_plate_smooth)
//   void restrict_axis_pass(outer, n, inner, f, c);  void prolong_axis_pass(outer, n, inner, c, f, add)
//   void coarsest_solve(b, x);  void top_vcycle(b, out, zero, old, omega, start): vcycle_at(0, ...)
//   T* z_vector();  void copy_n(from, to);  void relax_n(omega, old, x)   (the finest grid's size)
// and for pcg an Ops object (below).
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kronpe/multigrid.h"

namespace kronpe::smooth {

// pcg's predicted stop (multigrid.h): the rate assumed for the first iteration, and the least
// rate assumed after it (else the larger of the last two ratios of estimates). Measured on the
// twelve photograph fills (estimates of the final solves' components, every iteration): the first
// ratio 0.19-0.57, the later ones 0.31-0.68, rising slowly as CG goes on; with these the predicted
// stops came after the same iterations as the measured ones on every component there. On one
// axis the ratios jump (0.1 to 1.7 in a run on 200 nodes; a stop predicted there came with 3.3x
// tol measured): no predicted stop on grids of one axis.
constexpr double kPcgFirstRate = 0.6;
constexpr double kPcgMinRate = 0.5;
constexpr index_t kMinHalvedNodes = 3;  // an axis of fewer nodes is not halved

// The grids of a hierarchy (multigrid.h): each coarser one halves every axis of >= 3 nodes until at
// most `coarsest` nodes remain or no axis can be halved; halve[a]: axis a of this level is halved
// into the next (none on the last).
struct LevelShape {
  Grid g;
  bool halve[3] = {false, false, false};
};

inline std::vector<LevelShape> level_shapes(const Grid& g, index_t coarsest) {
  std::vector<LevelShape> out(1);
  out[0].g = g;
  for (;;) {
    LevelShape& L = out.back();
    bool any = false;
    for (int a = 0; a < 3; ++a) {
      L.halve[a] = L.g.n[a] >= kMinHalvedNodes;
      any = any || L.halve[a];
    }
    if (L.g.size() <= coarsest || !any) {
      for (bool& h : L.halve) h = false;
      return out;
    }
    LevelShape C;
    C.g = L.g;
    for (int a = 0; a < 3; ++a) C.g.n[a] = L.halve[a] ? coarse_length(L.g.n[a]) : L.g.n[a];
    out.push_back(C);
  }
}

// The smoother's coefficients over [lmax / alpha, lmax]: theta, then (c1, c2) of each later step.
template <typename T>
void chebyshev_coefficients(double lmax, double alpha, int degree, double& theta, std::vector<T>& c1,
                            std::vector<T>& c2) {
  const double lo = lmax / alpha, hi = lmax;
  theta = (hi + lo) / 2;
  const double delta = (hi - lo) / 2, sigma = theta / delta;
  double rho = 1.0 / sigma;
  c1.clear();
  c2.clear();
  for (int k = 1; k < degree; ++k) {
    const double rho_n = 1.0 / (2.0 * sigma - rho);
    c1.push_back(T(rho_n * rho));
    c2.push_back(T(2.0 * rho_n / delta));
    rho = rho_n;
  }
}

// Each level's lambda for lam on the finest: f(level, lam_level). The power form's weights carry
// the spacing (coarse weights / 4); the thin-plate stencil's fourth differences shrink 16-fold
// when every spacing doubles.
template <typename T, typename Levels, typename F>
void level_lambdas(const Levels& levels, double lam, F&& f) {
  double scale = 1.0;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const auto& L = levels[l];
    f(l, T(lam * scale));
    const int c = int(L.halve[0]) + int(L.halve[1]) + int(L.halve[2]);
    scale *= std::ldexp(1.0, c) / (L.g.power() ? 1.0 : 16.0);
  }
}

// The pcg steps' operations on the finest grid (the host's fused passes, the device's kernels):
//   void start_fmg();                 x = fmg(b)
//   void residual();                  r = b - A x
//   void precondition(bool first);    first: p = M r, else z = M r
//   void dots_first(double s[2]);     (r, p), (p, p);   void dots(double s[2]): (r, z), (z, z)
//   double dot_rp(); double dot_rz(); double dot_xx();
//   double apply_p();                 ap = A p, returns (p, ap)
//   double update(T a, bool norm);    x += a p, r -= a ap; returns (x, x) when norm (else unused)
//   void direction(T beta);           p = z + beta p
//   bool stopped();                   another thread asked the solve to stop
// predict: the predicted stop (multigrid.h) on.
template <typename T, class Ops>
PcgResult pcg_steps(Ops& ops, bool from_x, double tol, index_t maxiter, double scale, bool predict) {
  require(maxiter >= 0, "multigrid: maxiter must be >= 0");
  const bool estimate = tol > 0;
  double xx = 0.0;  // ||x||^2 (when no scale is given)
  auto error = [&](double zz) {
    const double xn = scale > 0 ? scale : std::sqrt(std::max(xx, 0.0)), zn = std::sqrt(std::max(zz, 0.0));
    return xn > 0 ? zn / xn : (zn == 0 ? 0.0 : std::numeric_limits<double>::infinity());
  };
  if (!from_x) ops.start_fmg();
  ops.residual();
  ops.precondition(true);  // z = M r, the first direction
  PcgResult out;
  out.error = std::numeric_limits<double>::quiet_NaN();
  double sums[2];
  double rz;
  // the estimate the next iteration is expected to reach (predicted stop); inf: none
  double next = std::numeric_limits<double>::infinity();
  double last_rate = 0.0;  // the ratio of the two estimates before the last
  if (estimate) {
    ops.dots_first(sums);
    rz = sums[0];
    if (scale <= 0) xx = ops.dot_xx();
    out.error = error(sums[1]);
    if (out.error <= tol) return out;
    next = out.error * kPcgFirstRate;
  } else {
    rz = ops.dot_rp();
  }
  for (index_t it = 1; it <= maxiter; ++it) {
    if (ops.stopped()) break;
    out.iterations = it;
    const double pap = ops.apply_p();
    if (!(pap > 0)) break;
    const T a = T(rz / pap);
    const bool norm = estimate && scale <= 0;
    const double updated = ops.update(a, norm);
    if (norm) xx = updated;
    if (it == maxiter && !estimate) break;  // a fixed number of iterations (sweeps)
    if (ops.stopped()) break;               // (x and r updated: a whole step)
    if (next <= tol && predict) {           // this step was expected to reach tol: no V-cycle to check it
      out.error = next;
      break;
    }
    ops.precondition(false);
    double rz_new;
    if (estimate) {
      ops.dots(sums);
      rz_new = sums[0];
      const double e = error(sums[1]);
      const double rate = e / out.error;
      next = e * std::max({rate, last_rate, kPcgMinRate});
      last_rate = rate;
      out.error = e;
      if (out.error <= tol) break;
    } else {
      rz_new = ops.dot_rz();
    }
    ops.direction(T(rz_new / rz));
    rz = rz_new;
  }
  return out;
}

// The hierarchy's steps (module comment), for both hierarchies.
struct MultigridSteps {
  // The (outer, n, inner) view of axis a of a three-axis shape.
  static void axis_view(const index_t s[3], int a, index_t& outer, index_t& inner) {
    outer = 1;
    inner = 1;
    for (int k = 0; k < a; ++k) outer *= s[k];
    for (int k = a + 1; k < 3; ++k) inner *= s[k];
  }

  // f (level's grid) -> c (the next coarser grid), axis by axis through the level's d, d2
  template <class H, typename T>
  static void restrict_down(H& h, int level, const T* f, T* c) {
    const Grid& g = h.grid(level);
    const bool* halve = h.halve(level);
    index_t s[3] = {g.n[0], g.n[1], g.n[2]};
    int left = int(halve[0]) + int(halve[1]) + int(halve[2]);
    T* bufs[2] = {h.d_of(level), h.d2_of(level)};
    int k = 0;
    const T* src = f;
    for (int a = 0; a < 3; ++a) {
      if (!halve[a]) continue;
      T* dst = --left == 0 ? c : bufs[k++ % 2];
      index_t outer, inner;
      axis_view(s, a, outer, inner);
      h.restrict_axis_pass(outer, s[a], inner, src, dst);
      s[a] = coarse_length(s[a]);
      src = dst;
    }
  }

  // c (the next coarser grid) -> f (level's grid), or f += P c
  template <class H, typename T>
  static void prolong_up(H& h, int level, const T* c, T* f, bool add) {
    const Grid& g = h.grid(level);
    const bool* halve = h.halve(level);
    index_t s[3];
    for (int a = 0; a < 3; ++a) s[a] = halve[a] ? coarse_length(g.n[a]) : g.n[a];
    int left = int(halve[0]) + int(halve[1]) + int(halve[2]);
    T* bufs[2] = {h.d_of(level), h.d2_of(level)};
    int k = 0;
    const T* src = c;
    for (int a = 2; a >= 0; --a) {
      if (!halve[a]) continue;
      const bool last = --left == 0;
      T* dst = last ? f : bufs[k++ % 2];
      s[a] = g.n[a];
      index_t outer, inner;
      axis_view(s, a, outer, inner);
      h.prolong_axis_pass(outer, s[a], inner, src, dst, last && add);
      src = dst;
    }
  }

  // result in out (null: the level's x); from zero, or (zero false) from out itself; with `old`
  // (not from zero, a level with a coarser one below) the result over-relaxed by omega from the
  // start, which old receives; `start` (the finest level, old null): the start read from there,
  // not from out, and over-relaxed from there
  template <class H, typename T>
  static void vcycle_at(H& h, int level, const T* b, T* out, bool zero, T* old, T omega, const T* start) {
    T* x = out ? out : h.x_of(level);
    if (level == h.levels() - 1) {
      require(!old && !start, "multigrid: an over-relaxed V-cycle needs a coarser level");
      h.coarsest_solve(b, x);
      return;
    }
    // the smoother, then the residual into r (the start into old)
    if (start) h.smooth_at(level, x, b, false, h.r_of(level), nullptr, nullptr, T(1), start);
    else h.smooth_at(level, x, b, zero, h.r_of(level), old, nullptr, T(1), nullptr);
    restrict_down(h, level, static_cast<const T*>(h.r_of(level)), h.b_of(level + 1));
    vcycle_at(h, level + 1, static_cast<const T*>(h.b_of(level + 1)), static_cast<T*>(nullptr), true,
              static_cast<T*>(nullptr), T(1), static_cast<const T*>(nullptr));
    prolong_up(h, level, static_cast<const T*>(h.x_of(level + 1)), x, true);
    // over-relaxed from the start: `start` itself, or the copy the first smoother saved in old
    const T* relax_from = start ? (omega != T(1) ? start : nullptr) : old;
    h.smooth_at(level, x, b, false, nullptr, nullptr, relax_from, omega, nullptr);
  }

  // full multigrid from zero: b restricted to every level, the coarsest solved, then on every finer
  // level the prolonged solution corrected by `cycles` V-cycles smoothing from it
  template <class H, typename T>
  static void fmg(H& h, const T* b, T* x, int cycles) {
    require(cycles >= 0, "multigrid: cycles must be >= 0");
    const int top = h.levels() - 1;
    // the right-hand sides of the coarse grids live in each level's b: a V-cycle on a level
    // writes only the b's below it
    std::vector<const T*> bs(static_cast<std::size_t>(top + 1));
    bs[0] = b;
    for (int l = 0; l < top; ++l) {
      restrict_down(h, l, bs[l], h.b_of(l + 1));
      bs[l + 1] = h.b_of(l + 1);
    }
    T* xc = top == 0 ? x : h.fx_of(top);
    h.coarsest_solve(bs[top], xc);
    for (int l = top - 1; l >= 0; --l) {
      T* xf = l == 0 ? x : h.fx_of(l);
      prolong_up(h, l, static_cast<const T*>(xc), xf, false);
      // V-cycles smoothing from the prolonged iterate itself: x + V (b - A x) without a residual
      // pass and a correction pass of their own (a V-cycle is affine in its start)
      for (int c = 0; c < cycles; ++c)
        vcycle_at(h, l, bs[l], xf, false, static_cast<T*>(nullptr), T(1), static_cast<const T*>(nullptr));
      xc = xf;
    }
  }

  // `count` V-cycles as a stationary iteration from x (from_x) or from fmg(b) (multigrid.h)
  template <class H, typename T>
  static void cycles(H& h, const T* b, T* x, bool from_x, int count, double omega) {
    require(count >= 0, "multigrid: the number of cycles must be >= 0");
    require(std::isfinite(omega) && omega > 0 && omega < 2, "multigrid: omega must be in (0, 2)");
    if (!from_x) h.fmg(b, x, 1);
    T* old = omega != 1.0 ? h.z_vector() : nullptr;
    // over-relaxed: fused into the finest level's smoothers (the start saved by the first, the
    // relaxed result written by the last: no vector passes of their own), but on a single grid
    const bool fused = omega != 1.0 && h.levels() > 1;
    for (int c = 0; c < count; ++c) {
      if (fused) {
        h.top_vcycle(b, x, false, old, T(omega), static_cast<const T*>(nullptr));
        continue;
      }
      if (omega != 1.0) h.copy_n(x, old);
      h.top_vcycle(b, x, false, static_cast<T*>(nullptr), T(1), static_cast<const T*>(nullptr));
      if (omega != 1.0) h.relax_n(T(omega), old, x);
    }
  }

  // cycles from `from` into x (multigrid.h)
  template <class H, typename T>
  static void cycles_from(H& h, const T* b, const T* from, T* x, int count, double omega) {
    require(count >= 1, "multigrid: cycles_from needs a cycle or more");
    require(std::isfinite(omega) && omega > 0 && omega < 2, "multigrid: omega must be in (0, 2)");
    if (h.levels() == 1) {  // (a single grid: cycles' own path)
      h.copy_n(from, x);
      cycles(h, b, x, true, count, omega);
      return;
    }
    // the first cycle smooths from `from` (cycles' fused over-relaxation, from `from` itself)
    h.top_vcycle(b, x, false, static_cast<T*>(nullptr), T(omega), from);
    if (count > 1) cycles(h, b, x, true, count - 1, omega);
  }
};

}  // namespace kronpe::smooth
