// Bindings of the masked and lattice kernels (kronpe/masked.h): the masked copy of a fill's
// samples, and scattered points on a lattice (its spacing, their nodes, the nodes' sums).
#include <optional>
#include <string>
#include <vector>

#include "grid_args.h"
#include "kronpe/masked.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::p;

void register_masked(py::module_& m) {
  m.def(
      "masked_fill",
      [](const Array& s, const Array& mask, const Array& out, bool planar) {
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&s, "s"}, {&out, "out"}, {&mask, "mask"}})
          bindings::require_host(*a, name);
        require(s.ndim() == 2, "masked_fill: s must be 2-D (n, C)");
        const index_t n = s.shape[0], C = s.shape[1];
        const std::vector<index_t> want = planar ? std::vector<index_t>{C, n} : std::vector<index_t>{n, C};
        require(std::vector<index_t>(out.shape.begin(), out.shape.end()) == want && out.dtype == s.dtype,
                planar ? "masked_fill: out must have shape (C, n) and s's dtype" : "masked_fill: out must have s's shape and dtype");
        require(mask.ndim() == 1 && mask.shape[0] == n, "masked_fill: mask must be 1-D of s's length");
        require(n <= 1 || C == 0 || ((C <= 1 || s.strides[1] == 1) && s.strides[0] == C), "masked_fill: s must be C-contiguous");
        const index_t inner = out.shape.size() == 2 ? out.shape[1] : 0;
        require(out.ndim() != 2 || out.shape[0] <= 1 || inner == 0 || ((inner <= 1 || out.strides[1] == 1) && out.strides[0] == inner),
                "masked_fill: out must be C-contiguous");
        require(n <= 1 || mask.strides[0] == 1, "masked_fill: mask must be contiguous");
        const unsigned char* mp = bindings::data<const unsigned char>(mask, "mask");
        py::tuple result;
        bindings::dispatch1(s.dtype, [&](auto t) {
          using T = decltype(t);
          const T* sp = p<const T>(s, "s");
          T* op = p<T>(out, "out");
          require(n * C == 0 || (op + n * C <= sp || sp + n * C <= op), "masked_fill: out must not overlap s");
          std::vector<T> lo(static_cast<std::size_t>(C)), hi(lo.size());
          index_t bad = 0;
          {
            py::gil_scoped_release release;
            bad = masked_fill<T>(n, C, sp, mp, op, lo.data(), hi.data(), planar);
          }
          result = py::make_tuple(std::vector<double>(lo.begin(), lo.end()),
                                  std::vector<double>(hi.begin(), hi.end()), bad);
        });
        return result;
      },
      py::arg("s"), py::arg("mask"), py::arg("out"), py::arg("planar") = false,
      "out = s where mask (uint8 (n,)) else 0, s (n, C), out (n, C) or (C, n) with planar; returns (per-channel min, max over the observed "
      "values, how many of them are NaN or Inf) (internal).");
  m.def(
      "lattice_count",
      [](const Array& x, index_t probe, double rtol, double tol) {
        bindings::require_host(x, "x");
        require(x.ndim() == 1, "lattice_count: x must be 1-D (P,)");
        index_t n = 0;
        bindings::dispatch1(x.dtype, [&](auto t) {
          using T = decltype(t);
          const T* xp = p<const T>(x, "x");
          const index_t P = x.shape[0], sx = x.strides[0];
          py::gil_scoped_release release;
          n = lattice_count<T>(P, xp, sx, probe, rtol, tol);
        });
        return n;
      },
      py::arg("x"), py::arg("probe"), py::arg("rtol"), py::arg("tol"),
      "n when every coordinate of x (float32 or float64 (P,), any stride) is a multiple k h of h = 1 / n, the smallest gap "
      "between distinct ones, 0 <= k <= n; else 0 (kronpe/masked.h; kronpe.reference.lattice_count) (internal).");
  m.def(
      "lattice_index",
      [](const Array& points, const std::vector<index_t>& n, const std::vector<double>& origin,
         const std::vector<double>& scale, const std::optional<std::vector<Array>>& nodes, const Array& out) {
        bindings::require_host(points, "points");
        bindings::require_host(out, "out");
        require(points.ndim() == 2, "lattice_index: points must be 2-D (P, D)");
        const index_t P = points.shape[0];
        const int D = int(points.shape[1]);
        require(D >= 1, "lattice_index: points must have at least one coordinate (D >= 1)");
        require(index_t(n.size()) == D && index_t(origin.size()) == D && index_t(scale.size()) == D,
                "lattice_index: n, origin and scale must hold one value per coordinate (D = " + std::to_string(D) + ")");
        index_t* fp = bindings::data<index_t>(out, "out", 1);
        require(out.shape[0] == P && (P <= 1 || out.strides[0] == 1), "lattice_index: out must be contiguous int64 (P,)");
        std::vector<const double*> node_ptrs;
        if (nodes) {
          require(index_t(nodes->size()) == D, "lattice_index: nodes must hold one array per coordinate");
          for (int a = 0; a < D; ++a) {
            const Array& g = (*nodes)[std::size_t(a)];
            bindings::require_host(g, "nodes");
            const double* gp = bindings::data<const double>(g, "nodes", 1);
            require(g.shape[0] == n[std::size_t(a)] && (g.shape[0] <= 1 || g.strides[0] == 1),
                    "lattice_index: nodes[" + std::to_string(a) + "] must be contiguous float64 of n[" +
                        std::to_string(a) + "] values");
            node_ptrs.push_back(gp);
          }
        }
        index_t first = 0;
        bindings::dispatch1(points.dtype, [&](auto t) {
          using T = decltype(t);
          const T* pp = p<const T>(points, "points");
          py::gil_scoped_release release;
          first = lattice_index<T>(P, D, pp, points.strides[0], points.strides[1], n.data(), origin.data(),
                                   scale.data(), nodes ? node_ptrs.data() : nullptr, fp);
        });
        return first;
      },
      py::arg("points"), py::arg("n"), py::arg("origin"), py::arg("scale"), py::arg("nodes"), py::arg("out"),
      "out[p] = the C-order flat index of point p's nearest lattice node (kronpe/masked.h: node k of "
      "axis a at origin[a] + k / scale[a], n[a] nodes, clamped); with nodes, the first p whose "
      "coordinates are not exactly its nodes' values is returned (else P) (internal).");
  m.def(
      "lattice_sums",
      [](const Array& flat, const Array& values, const Array& counts, const Array& sums) {
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&flat, "flat"}, {&values, "values"},
                                      {&counts, "counts"}, {&sums, "sums"}})
          bindings::require_host(*a, name);
        const index_t* fp = bindings::data<const index_t>(flat, "flat", 1);
        require(values.ndim() == 2 && values.shape[0] == flat.shape[0],
                "lattice_sums: values must be (P, C) with flat's P");
        require(flat.shape[0] <= 1 || flat.strides[0] == 1, "lattice_sums: flat must be contiguous");
        const index_t P = values.shape[0], C = values.shape[1];
        require(counts.ndim() == 1 && counts.dtype == values.dtype && (counts.shape[0] <= 1 || counts.strides[0] == 1),
                "lattice_sums: counts must be contiguous 1-D of values' dtype");
        const index_t G = counts.shape[0];
        require(sums.ndim() == 2 && sums.shape[0] == C && sums.shape[1] == G && sums.dtype == values.dtype &&
                    (C * G <= 1 || ((G <= 1 || sums.strides[1] == 1) && (C <= 1 || sums.strides[0] == G))),
                "lattice_sums: sums must be C-contiguous (C, G) of values' dtype");
        bindings::dispatch1(values.dtype, [&](auto t) {
          using T = decltype(t);
          const T* vp = p<const T>(values, "values");
          T* cp = p<T>(counts, "counts");
          T* sp = p<T>(sums, "sums");
          py::gil_scoped_release release;
          lattice_sums<T>(P, C, fp, vp, values.strides[0], values.strides[1], G, cp, sp);
        });
      },
      py::arg("flat"), py::arg("values"), py::arg("counts"), py::arg("sums"),
      "counts[g] = how many points have flat index g, sums[c, g] = the sum of their values[:, c] "
      "(kronpe/masked.h) (internal).");
}
