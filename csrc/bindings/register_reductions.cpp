// Bindings of the inner products and GCV scores on the host (kronpe/reductions.h, kronpe/gcv.h):
// sums in double over fixed blocks, the same for any thread count.
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/gcv.h"
#include "kronpe/reductions.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::flat_planes;
using bindings::p;
using bindings::plane_pointers;

void register_reductions(py::module_& m) {
  m.def(
      "dot",
      [](const Array& a, const Array& b) {
        bindings::require_host(a, "a");
        bindings::require_host(b, "b");
        require(a.shape == b.shape, "dot: b must have a's shape");
        require(a.dtype == b.dtype, "dot: b must have a's dtype " + a.dtype);
        index_t n = 1, stride = 1;
        for (int d = a.ndim() - 1; d >= 0; --d) {
          n *= a.shape[d];
        }
        for (int d = a.ndim() - 1; d >= 0; --d) {
          require(n == 0 || a.shape[d] <= 1 || (a.strides[d] == stride && b.strides[d] == stride),
                  "dot: a and b must be C-contiguous");
          stride *= a.shape[d];
        }
        double out = 0.0;
        bindings::dispatch1(a.dtype, [&](auto t) {
          using T = decltype(t);
          const T* ap = p<const T>(a, "a");
          const T* bp = p<const T>(b, "b");
          py::gil_scoped_release release;
          out = smooth::dot<T>(n, ap, bp);
        });
        return out;
      },
      py::arg("a"), py::arg("b"),
      "sum(a * b) over C-contiguous arrays of one shape and dtype, accumulated in double "
      "(internal).");
  m.def(
      "gcv_scores",
      [](const Array& mm, const Array& count, const Array& w, const Array& ridges, double rss0, double n,
         double total) {
        const index_t r = flat_planes({mm, count, w}, "m, count and w");
        require(mm.dtype == "float64", "gcv_scores: m, count and w must be float64, got " + mm.dtype);
        require(ridges.dtype == "float64", "gcv_scores: ridges must be float64, got " + ridges.dtype);
        const index_t L = flat_planes({ridges}, "ridges");
        std::vector<double> scores(static_cast<std::size_t>(L));
        const double* mp = p<const double>(mm, "m");
        const double* cp = p<const double>(count, "count");
        const double* wp = p<const double>(w, "w");
        const double* rp = p<const double>(ridges, "ridges");
        {
          py::gil_scoped_release release;
          smooth::gcv_scores(r, mp, cp, wp, L, rp, rss0, n, total, scores.data());
        }
        return scores;
      },
      py::arg("m"), py::arg("count"), py::arg("w"), py::arg("ridges"), py::arg("rss0"), py::arg("n"),
      py::arg("total"),
      "GCV scores at the ridges of a curve given by C-contiguous float64 m, count and w of one size "
      "(internal, kronpe.solvers.gcv; kronpe.reference.gcv_scores).");
  m.def(
      "dots",
      [](const std::vector<Array>& arrays) {
        require(!arrays.empty(), "dots: no arrays");
        const index_t n = flat_planes(arrays, "arrays");
        const int c = int(arrays.size());
        std::vector<double> S(std::size_t(c) * std::size_t(c));
        bindings::dispatch1(arrays[0].dtype, [&](auto t) {
          using T = decltype(t);
          const std::vector<const T*> ap = plane_pointers<const T>(arrays, "arrays");
          py::gil_scoped_release release;
          smooth::dots<T>(n, c, ap.data(), S.data());
        });
        return S;
      },
      py::arg("arrays"),
      "every inner product of C-contiguous arrays of one size and dtype, [a_i . a_j] flat (c, c), as dot "
      "computes each (internal).");
}
