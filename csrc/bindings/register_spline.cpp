// Bindings of the cubic B-spline kernels (kronpe/spline.h), CPU only. Every array is a C-contiguous
// float64 host array; kronpe.solvers.spline validates the user's input first, these checks keep a
// wrong internal call from reading or writing beyond an array.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "kronpe/spline.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;

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

// A C-contiguous host array of T and the given shape (-1: any extent); its address.
template <typename T>
const T* contiguous_as(const Array& a, const char* name, const std::vector<index_t>& shape) {
  bindings::require_host(a, name);
  const T* p = bindings::data<const T>(a, name, int(shape.size()));
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
  return contiguous_as<double>(a, name, shape);
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
        double* sp = const_cast<double*>(contiguous(stencil, "stencil", {stencil_width(g.ndim), g.size()}));
        double* rp = const_cast<double*>(contiguous(rhs, "rhs", {g.size(), C}));
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
        double* op = const_cast<double*>(contiguous(out, "out", {P, C}));
        py::gil_scoped_release release;
        spline_values(g, P, pp, cp, C, op);
      },
      py::arg("grid"), py::arg("points"), py::arg("coef"), py::arg("out"),
      "out (P, C) = the spline with coefficients coef (coefs, C) at the points (internal).");
  m.def(
      "stencil_apply",
      [](const std::vector<index_t>& shape, const Array& stencil, const Array& x, const Array& y) {
        require(!shape.empty() && shape.size() <= 3, "shape: 1 to 3 axes");
        index_t N = 1;
        for (index_t n : shape) {
          require(n >= 0, "shape: extents must be >= 0");
          N = checked_mul(N, n, "shape");
        }
        const int D = int(shape.size());
        const bool single = stencil.dtype == "float32";
        const index_t C = x.ndim() == 2 ? x.shape[1] : 0;
        const double* xp = contiguous(x, "x", {N, -1});
        double* yp = const_cast<double*>(contiguous(y, "y", {N, C}));
        // (y is written while x is read: the kernel takes them for separate arrays)
        const auto xa = reinterpret_cast<std::uintptr_t>(xp), ya = reinterpret_cast<std::uintptr_t>(yp);
        const std::uintptr_t bytes = std::uintptr_t(N * C) * sizeof(double);
        require(N == 0 || C == 0 || ya + bytes <= xa || xa + bytes <= ya, "y must not be x, nor overlap it");
        if (single) {
          const float* sp = contiguous_as<float>(stencil, "stencil", {stencil_width(D), N});
          py::gil_scoped_release release;
          stencil_apply(D, shape.data(), sp, xp, C, yp);
        } else {
          const double* sp = contiguous(stencil, "stencil", {stencil_width(D), N});
          py::gil_scoped_release release;
          stencil_apply(D, shape.data(), sp, xp, C, yp);
        }
      },
      py::arg("shape"), py::arg("stencil"), py::arg("x"), py::arg("y"),
      "y (N, C) = A x for the 7^D-point stencil A (7^D, N; float64, or float32 for half the traffic) on a grid of `shape` (internal).");
}
