// Bindings of the cubic B-spline kernels (kronpe/spline.h), CPU only. Every array is a C-contiguous
// float64 host array; kronpe.solvers.spline validates the user's input first, these checks keep a
// wrong internal call from reading or writing beyond an array.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "kronpe/spline.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::overlap;

namespace {

using GridArgs = std::tuple<std::vector<index_t>, std::vector<double>, std::vector<double>>;  // nint, lo, h

SplineGrid grid_of(const GridArgs& args) {
  const auto& [nint, lo, h] = args;
  require(!nint.empty() && nint.size() <= 3 && lo.size() == nint.size() && h.size() == nint.size(),
          "grid: (nint, lo, h) of 1 to 3 axes each");
  SplineGrid g;
  g.ndim = int(nint.size());
  for (int a = 0; a < g.ndim; ++a) g.nint[a] = nint[std::size_t(a)], g.lo[a] = lo[std::size_t(a)], g.h[a] = h[std::size_t(a)];
  for (int a = 0; a < g.ndim; ++a)
    require(g.nint[a] >= 1 && g.h[a] > 0, "grid: every axis needs nint >= 1 and h > 0");
  (void)g.size();
  return g;
}

// A C-contiguous host array of T and the given shape (-1: any extent); its address (T non-const:
// an array the kernel writes, refused where read-only).
template <typename T>
T* contiguous_as(const Array& a, const char* name, const std::vector<index_t>& shape) {
  bindings::require_host(a, name);
  T* p = bindings::data<T>(a, name, int(shape.size()));
  bool empty = false;
  for (index_t n : a.shape) empty = empty || n == 0;
  index_t stride = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    const index_t n = a.shape[std::size_t(i)];
    require(shape[std::size_t(i)] < 0 || n == shape[std::size_t(i)],
            std::string(name) + ": axis " + std::to_string(i) + " must have " +
                std::to_string(shape[std::size_t(i)]) + " entries, got " + std::to_string(n));
    require(empty || n <= 1 || a.strides[std::size_t(i)] == stride, std::string(name) + " must be C-contiguous");
    stride *= n;
  }
  return p;
}

const double* contiguous(const Array& a, const char* name, const std::vector<index_t>& shape) {
  return contiguous_as<const double>(a, name, shape);
}

double* writable(const Array& a, const char* name, const std::vector<index_t>& shape) {
  return contiguous_as<double>(a, name, shape);
}

// The grid's extents (1 to 3 axes, each >= 0) and their product.
index_t grid_size(const std::vector<index_t>& shape) {
  require(!shape.empty() && shape.size() <= 3, "shape: 1 to 3 axes");
  index_t N = 1;
  for (index_t n : shape) {
    require(n >= 0, "shape: extents must be >= 0");
    N = checked_mul(N, n, "shape");
  }
  return N;
}

// spline_subdivide (coarse -> fine) or spline_restrict (fine -> coarse) of (outer, n, inner) and
// (outer, 2 n - 3, inner) arrays, checked.
void transfer(const Array& coarse, const Array& fine, bool to_fine) {
  require(coarse.ndim() == 3 && fine.ndim() == 3, "coarse and fine: (outer, n, inner) arrays");
  const index_t outer = coarse.shape[0], n = coarse.shape[1], inner = coarse.shape[2];
  require(n >= 2, "coarse: at least 2 coefficients along the axis");
  const std::vector<index_t> cs{outer, n, inner}, fs{outer, 2 * n - 3, inner};
  const double* cp = to_fine ? contiguous(coarse, "coarse", cs) : writable(coarse, "coarse", cs);
  const double* fp = to_fine ? writable(fine, "fine", fs) : contiguous(fine, "fine", fs);
  require(!overlap(cp, fp, outer * n * inner * index_t(sizeof(double)),
                   outer * (2 * n - 3) * inner * index_t(sizeof(double))),
          "coarse and fine must not overlap");
  py::gil_scoped_release release;
  if (to_fine) spline_subdivide(outer, n, inner, cp, const_cast<double*>(fp));  // (checked writable)
  else spline_restrict(outer, n, inner, fp, const_cast<double*>(cp));
}

}  // namespace

void register_spline(py::module_& m) {
  m.def(
      "spline_normal",
      [](const GridArgs& grid, const Array& points, const Array& values, const std::optional<Array>& weights,
         const Array& stencil, const Array& rhs) {
        const SplineGrid g = grid_of(grid);
        const index_t P = points.shape.empty() ? 0 : points.shape[0];
        const double* pp = contiguous(points, "points", {-1, g.ndim});
        const index_t C = values.ndim() == 2 ? values.shape[1] : 0;
        const double* vp = contiguous(values, "values", {P, -1});
        const double* wp = weights ? contiguous(*weights, "weights", {P}) : nullptr;
        double* sp = writable(stencil, "stencil", {stencil_width(g.ndim), g.size()});
        double* rp = writable(rhs, "rhs", {g.size(), C});
        py::gil_scoped_release release;
        spline_normal(g, P, pp, vp, C, wp, sp, rp);
      },
      py::arg("grid"), py::arg("points"), py::arg("values"), py::arg("weights"), py::arg("stencil"),
      py::arg("rhs"),
      "stencil (7^D, coefs) += B^T W B and rhs (coefs, C) += B^T W values of the points on the cubic "
      "B-spline grid (nint, lo, h) (internal).");
  m.def(
      "spline_values",
      [](const GridArgs& grid, const Array& points, const Array& coef, const Array& out) {
        const SplineGrid g = grid_of(grid);
        const index_t P = points.shape.empty() ? 0 : points.shape[0];
        const double* pp = contiguous(points, "points", {-1, g.ndim});
        const index_t C = coef.ndim() == 2 ? coef.shape[1] : 0;
        const double* cp = contiguous(coef, "coef", {g.size(), -1});
        double* op = writable(out, "out", {P, C});
        py::gil_scoped_release release;
        spline_values(g, P, pp, cp, C, op);
      },
      py::arg("grid"), py::arg("points"), py::arg("coef"), py::arg("out"),
      "out (P, C) = the spline with coefficients coef (coefs, C) at the points (internal).");
  m.def(
      "stencil_apply",
      [](const std::vector<index_t>& shape, const Array& stencil, const Array& x, const Array& y,
         const std::optional<Array>& b) {
        const index_t N = grid_size(shape);
        const int D = int(shape.size());
        const bool single = stencil.dtype == "float32";
        const index_t C = x.ndim() == 2 ? x.shape[1] : 0;
        const double* xp = contiguous(x, "x", {N, -1});
        double* yp = writable(y, "y", {N, C});
        const double* bp = b ? contiguous(*b, "b", {N, C}) : nullptr;
        // (y is written while x is read: the kernel takes them for separate arrays; b may be y)
        const index_t bytes = N * C * index_t(sizeof(double));
        require(N == 0 || C == 0 || !overlap(xp, yp, bytes), "y must not be x, nor overlap it");
        require(!bp || N == 0 || C == 0 || bp == yp || !overlap(bp, yp, bytes), "b must be y or lie apart from it");
        if (single) {
          const float* sp = contiguous_as<const float>(stencil, "stencil", {stencil_width(D), N});
          py::gil_scoped_release release;
          if (bp) stencil_residual(D, shape.data(), sp, bp, xp, C, yp);
          else stencil_apply(D, shape.data(), sp, xp, C, yp);
        } else {
          const double* sp = contiguous(stencil, "stencil", {stencil_width(D), N});
          py::gil_scoped_release release;
          if (bp) stencil_residual(D, shape.data(), sp, bp, xp, C, yp);
          else stencil_apply(D, shape.data(), sp, xp, C, yp);
        }
      },
      py::arg("shape"), py::arg("stencil"), py::arg("x"), py::arg("y"), py::arg("b") = py::none(),
      "y (N, C) = A x, or b - A x where b is given (b may be y), for the 7^D-point stencil A (7^D, N; "
      "float64, or float32 for half the traffic) on a grid of `shape` (internal).");
  m.def(
      "spline_chebyshev",
      [](const std::vector<index_t>& shape, const Array& stencil, const Array& dinv, const Array& b, int degree,
         double theta, double delta, bool zero_start, bool residual, const Array& x, const Array& res,
         const Array& work) {
        const index_t N = grid_size(shape);
        const int D = int(shape.size());
        require(degree >= 1, "degree must be >= 1");
        require(std::isfinite(theta) && std::isfinite(delta) && delta > 0 && theta > delta,
                "theta > delta > 0 (finite): the spectrum's interval lies above 0");
        const float* sp = contiguous_as<const float>(stencil, "stencil (float32)", {stencil_width(D), N});
        const double* dp = contiguous(dinv, "dinv", {N});
        const index_t C = b.ndim() == 2 ? b.shape[1] : 0;
        const double* bp = contiguous(b, "b", {N, -1});
        double* xp = writable(x, "x", {N, C});
        double* rp = writable(res, "res", {N, C});
        double* wp = writable(work, "work", {2, N, C});
        const index_t bytes = N * C * index_t(sizeof(double));
        const double* all[4] = {bp, xp, rp, wp};
        for (int i = 0; i < 4; ++i)
          for (int j = i + 1; j < 4; ++j)
            require(!overlap(all[i], all[j], i == 3 ? 2 * bytes : bytes, j == 3 ? 2 * bytes : bytes),
                    "b, x, res and work must be separate arrays");
        py::gil_scoped_release release;
        spline_chebyshev(D, shape.data(), sp, dp, bp, C, degree, theta, delta, zero_start, residual, xp, rp, wp);
      },
      py::arg("shape"), py::arg("stencil"), py::arg("dinv"), py::arg("b"), py::arg("degree"), py::arg("theta"),
      py::arg("delta"), py::arg("zero_start"), py::arg("residual"), py::arg("x"), py::arg("res"), py::arg("work"),
      "x (N, C) after `degree` Chebyshev steps for A x = b on D^-1 A over [theta - delta, theta + delta] "
      "(A a float32 stencil, dinv (N,) its inverse diagonal), from x or from zero (zero_start); res = b - A x "
      "where residual, else scratch; work (2, N, C) scratch (internal).");
  m.def(
      "spline_subdivide", [](const Array& coarse, const Array& fine) { transfer(coarse, fine, true); },
      py::arg("coarse"), py::arg("fine"),
      "fine (outer, 2 n - 3, inner) = the cubic B-spline coarse (outer, n, inner) on twice the intervals "
      "along the middle axis (internal).");
  m.def(
      "spline_restrict", [](const Array& fine, const Array& coarse) { transfer(coarse, fine, false); },
      py::arg("fine"), py::arg("coarse"),
      "coarse (outer, n, inner) = the transpose of spline_subdivide applied to fine (outer, 2 n - 3, inner) "
      "(internal).");
}
