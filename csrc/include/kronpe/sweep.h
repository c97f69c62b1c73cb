// kronpe C++ core: the decisions of the held-out sweep over lambda (kronpe/multigrid.h,
// held_out_sweep), apart from where its fits live: the host's ThinPlateHierarchy
// (csrc/cpu/multigrid.cpp) and the CUDA backend's device hierarchy (csrc/cuda/multigrid.cu) run
// the same steps through an `Ops` object that keeps the fits in numbered slots:
//
//   int slots();  void add_slot();                  the slots made so far; one more
//   void set_lambda(double);  void set_reflect(bool);
//   void fmg(int k);                                 slot k = full multigrid of the training system
//   void cycles_from(int from, int k);               slot k = the settings' cycles from slot `from`
//   void copy(int from, int k);
//   double error(int k);                             the held-out mean squared error of slot k
//   double higher_error(int from, double lam);       that of the higher-order step from slot `from`
//   void keep(int k);                                slot k is the best fit (the caller's x_best)
#pragma once
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "kronpe/multigrid.h"

namespace kronpe::smooth {

template <class Ops>
SweepOutcome sweep_decisions(Ops& ops, const SweepSettings& s) {
  require(!s.lams.empty(), "held_out_sweep: no lambda to try");
  require(s.count >= 0 && std::isfinite(s.omega) && s.omega > 0 && s.omega < 2, "held_out_sweep: bad cycles");
  int x = -1, x_b = -1, x_f = -1;
  // a new fit takes a slot no name holds
  auto take = [&](std::initializer_list<int> held) {
    for (int k = 0; k < ops.slots(); ++k)
      if (std::find(held.begin(), held.end(), k) == held.end()) return k;
    ops.add_slot();
    return ops.slots() - 1;
  };
  // the fit at lam from the fit `from` (count cycles), or (-1) full multigrid alone, into a free slot
  auto run = [&](double lam, int from, std::initializer_list<int> held) {
    ops.set_lambda(lam);
    const int k = take(held);
    if (from < 0) ops.fmg(k);
    else if (s.count == 0) ops.copy(from, k);
    else ops.cycles_from(from, k);
    return k;
  };
  SweepOutcome out;
  std::vector<double>& errs = out.errs;
  for (const double lam : s.lams) {
    const int prev = x;
    x = run(lam, x, {x, x_b, x_f});
    out.tried.push_back(lam);
    errs.push_back(ops.error(x));
    const std::size_t m = errs.size();
    if (m == 1 || errs[m - 1] < *std::min_element(errs.begin(), errs.end() - 1)) {
      x_b = x;
      x_f = prev;
    }
    if (m >= 3 && errs[m - 1] > errs[m - 2] && errs[m - 2] > errs[m - 3]) break;  // risen twice
    if (s.flat > 0 && m >= 3 && errs[m - 3] - errs[m - 2] < s.flat * errs[m - 3] &&
        errs[m - 2] - errs[m - 1] < s.flat * errs[m - 2])
      break;  // flat twice
  }
  const std::size_t k = std::size_t(std::min_element(errs.begin(), errs.end()) - errs.begin());
  double best = out.tried[k];
  if (k > 0 && k + 1 < out.tried.size()) {  // one parabolic step in log lambda through the three best
    const double y0 = errs[k - 1], y1 = errs[k], y2 = errs[k + 1];
    const double denom = y0 - 2 * y1 + y2;
    if (denom > 0) {
      const double step = std::min(std::max(0.5 * (y0 - y2) / denom, -0.5), 0.5);
      const double cand = out.tried[k] * std::pow(s.ratio, -step);
      const int x2 = run(cand, x_b, {x_b, x_f});
      out.tried.push_back(cand);
      errs.push_back(ops.error(x2));
      if (errs.back() < errs[k]) {
        best = cand;
        x_f = x_b;
        x_b = x2;
      }
    }
  }
  const double lam_fit = best;
  out.interpolating = best == *std::min_element(out.tried.begin(), out.tried.end());
  out.best = best;
  // the boundary: the best fit's step mirrored, from where it started, at its lambda
  ops.set_reflect(true);
  const int x_m = run(lam_fit, x_f, {x_b, x_f});
  out.boundary_errs[0] = *std::min_element(errs.begin(), errs.end());
  out.boundary_errs[1] = ops.error(x_m);
  out.reflect = out.boundary_errs[1] < out.boundary_errs[0] * (1.0 + s.boundary_margin);
  ops.set_reflect(out.reflect);
  if (out.reflect) x_b = x_m;
  if (s.higher > 0 && out.interpolating && out.reflect && x_f >= 0) {
    // x + omega V (b - (diag(m) + lam R_h) x) from x = the fit the best started from
    out.higher_tested = true;
    out.higher_errs[0] = out.boundary_errs[1];
    out.higher_errs[1] = ops.higher_error(x_f, lam_fit);
    out.higher = out.higher_errs[1] < out.higher_errs[0] * (1.0 - s.higher_margin);
  }
  ops.keep(x_b);
  return out;
}

// The grid of R + higher L^3 (the power form: order 3, top higher, tail 1, mirrored) on g's nodes:
// the higher-order penalty of the sweep's test and of LeadSolve's stage 2.
inline Grid higher_grid(const Grid& g, double higher) {
  Grid gh = g;
  gh.reflect = true;
  gh.order = 3;
  gh.weighted = false;
  gh.top = higher;
  gh.tail = 1.0;
  return gh;
}

}  // namespace kronpe::smooth
