// Bindings of the thin-plate operator and the multigrid transfers on the host (kronpe/smooth.h):
// apply, residual, the diagonal, the Chebyshev smoother's steps, a transfer along one axis.
#include <optional>
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/smooth.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::grid_of;
using bindings::p;
using bindings::Penalty;
using bindings::same_grid;

void register_smooth(py::module_& m, py::module_& tuning) {
  tuning.def("set_nodes_per_extra_thread", &smooth::set_nodes_per_extra_thread, py::arg("nodes"),
        "The smoothing kernels' team rule beyond two threads, one thread per `nodes` (default 2^16, "
        "at least 2^13); returns the previous value (internal: for measuring team sizes).");
  m.def(
      "thin_plate",
      [](const Array& x, const Array& mask, double lam, const Array& out, const std::string& mode,
         const std::optional<Array>& b, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        require(mode == "apply" || mode == "residual", "thin_plate: mode must be apply or residual");
        if (mode == "residual") require(b.has_value(), "thin_plate: residual needs b");
        const Array& bb = b ? *b : x;
        same_grid(x, {{&mask, "mask"}, {&out, "out"}, {&bb, "b"}}, Penalty{reflect, order, weights, top, tail}, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* xp = p<const T>(x, "x");
          const T* mp = p<const T>(mask, "mask");
          const T* bp = p<const T>(bb, "b");
          T* op = p<T>(out, "out");
          py::gil_scoped_release release;
          if (mode == "apply") smooth::thin_plate_apply<T>(g, xp, mp, T(lam), op, threads);
          else smooth::thin_plate_residual<T>(g, xp, bp, mp, T(lam), op, threads);
        });
      },
      py::arg("x"), py::arg("mask"), py::arg("lam"), py::arg("out"), py::arg("mode") = "apply",
      py::arg("b") = py::none(), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "out = mask x + lam R x (apply) or b - (mask x + lam R x) (residual); R the thin-plate "
      "penalty (internal).");
  m.def(
      "thin_plate_diag",
      [](const Array& mask, double lam, const Array& out, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        same_grid(mask, {{&out, "out"}}, Penalty{reflect, order, weights, top, tail}, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* mp = p<const T>(mask, "mask");
          T* op = p<T>(out, "out");
          py::gil_scoped_release release;
          smooth::thin_plate_diag<T>(g, mp, T(lam), op, threads);
        });
      },
      py::arg("mask"), py::arg("lam"), py::arg("out"), py::arg("reflect") = false, py::arg("threads") = 0,
      py::arg("order") = 2, py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0, "out = diag(mask + lam R) (internal).");
  m.def(
      "thin_plate_cheb_start",
      [](const std::optional<Array>& x, const Array& b, const Array& mask, double lam, double theta,
         const Array& r, const Array& d, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        const Penalty pen{reflect, order, weights, top, tail};
        if (x) same_grid(b, {{&*x, "x"}}, pen, [](const smooth::Grid&, auto) {});
        same_grid(b, {{&mask, "mask"}, {&r, "r"}, {&d, "d"}}, pen, [&](const smooth::Grid& g, auto t) {
          using T = decltype(t);
          const T* xp = x ? p<const T>(*x, "x") : nullptr;
          const T* bp = p<const T>(b, "b");
          const T* mp = p<const T>(mask, "mask");
          T* rp = p<T>(r, "r");
          T* dp = p<T>(d, "d");
          py::gil_scoped_release release;
          smooth::thin_plate_cheb_start<T>(g, xp, bp, mp, T(lam), T(theta), rp, dp, threads);
        });
      },
      py::arg("x"), py::arg("b"), py::arg("mask"), py::arg("lam"), py::arg("theta"), py::arg("r"),
      py::arg("d"), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "r = (b - A x) / diag(A), d = r / theta: a Chebyshev smoother's start; x None: x = 0 "
      "(internal).");
  m.def(
      "thin_plate_cheb_step",
      [](const Array& d, const Array& r, const Array& x, const Array& mask, double lam, double c1,
         double c2, const Array& d_out, bool reflect, int threads, int order,
         const std::optional<std::vector<double>>& weights, double top,
         double tail) {
        same_grid(d, {{&r, "r"}, {&x, "x"}, {&mask, "mask"}, {&d_out, "d_out"}}, Penalty{reflect, order, weights, top, tail},
                  [&](const smooth::Grid& g, auto t) {
                    using T = decltype(t);
                    require(d.address != d_out.address, "thin_plate_cheb_step: d_out must not be d");
                    const T* dp = p<const T>(d, "d");
                    T* rp = p<T>(r, "r");
                    T* xp = p<T>(x, "x");
                    const T* mp = p<const T>(mask, "mask");
                    T* op = p<T>(d_out, "d_out");
                    py::gil_scoped_release release;
                    smooth::thin_plate_cheb_step<T>(g, dp, rp, xp, mp, T(lam), T(c1), T(c2), op,
                                                    threads);
                  });
      },
      py::arg("d"), py::arg("r"), py::arg("x"), py::arg("mask"), py::arg("lam"), py::arg("c1"),
      py::arg("c2"), py::arg("d_out"), py::arg("reflect") = false, py::arg("threads") = 0, py::arg("order") = 2,
      py::arg("weights") = py::none(), py::arg("top") = 1.0, py::arg("tail") = 0.0,
      "x += d, r -= (A d) / diag(A), d_out = c1 d + c2 r: a Chebyshev smoother's step (internal).");
  m.def(
      "grid_transfer",
      [](const Array& src, const Array& dst, int axis, bool restrict_, bool add, int threads) {
        bindings::require_host(src, "src");
        bindings::require_host(dst, "dst");
        require(src.ndim() == dst.ndim() && axis >= 0 && axis < src.ndim(),
                "grid_transfer: axis out of range or ranks differ");
        require(src.dtype == dst.dtype, "grid_transfer: dst must have src's dtype");
        const index_t n = restrict_ ? src.shape[axis] : dst.shape[axis];
        const index_t nc = restrict_ ? dst.shape[axis] : src.shape[axis];
        require(n >= 1 && nc == smooth::coarse_length(n), "grid_transfer: coarse length must be n // 2 + 1");
        index_t outer = 1, inner = 1;
        for (int a = 0; a < src.ndim(); ++a) {
          if (a == axis) continue;
          require(src.shape[a] == dst.shape[a], "grid_transfer: shapes differ off the axis");
          (a < axis ? outer : inner) *= src.shape[a];
        }
        grid_of(src, "src");  // C-contiguity (rank checked above: 1 to 3 axes)
        grid_of(dst, "dst");
        bindings::dispatch1(src.dtype, [&](auto t) {
          using T = decltype(t);
          const T* sp = p<const T>(src, "src");
          T* dp = p<T>(dst, "dst");
          py::gil_scoped_release release;
          if (restrict_) smooth::restrict_axis<T>(outer, n, inner, sp, dp, threads);
          else smooth::prolong_axis<T>(outer, n, inner, sp, dp, add, threads);
        });
      },
      py::arg("src"), py::arg("dst"), py::arg("axis"), py::arg("restrict"), py::arg("add") = false,
      py::arg("threads") = 0,
      "dst = P^T src (restrict) or P src (dst += P src with add) along one axis, linear interpolation, coarse node j at "
      "fine node 2 j (internal).");
}
