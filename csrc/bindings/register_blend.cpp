// Bindings of the blending-matrix kernels (internal: kronpe/blending.py validates and owns the
// arrays). A matrix crosses as (address, rows, cols, row stride, col stride), strides in elements;
// an axis as (nodes address, M, kind, param).
#include <vector>

#include "args.h"
#include "kronpe/blend.h"

namespace py = pybind11;
using namespace kronpe;
using kronpe::bindings::ptr;

using bindings::AxisTuple;
using bindings::dispatch1;
using bindings::dispatch2;
using bindings::Mat;
using bindings::view;
using bindings::weight_function;

void register_blend(py::module_& m) {
  m.def(
      "blend_info",
      [](const std::vector<AxisTuple>& axes) {
        const auto wf = weight_function(axes, true);
        const auto lay = blend::transpose_layout(wf.grid_size(), wf.span());
        py::dict d;
        d["grid_size"] = wf.grid_size();
        d["strides"] = wf.strides();
        d["span"] = wf.span();
        d["slab"] = lay.slab;
        d["slabs"] = lay.slabs;
        return d;
      },
      "Grid size, strides, row span and transpose layout of a virtual grid (internal).");
  m.def(
      "blend_layout",
      [](index_t grid_size, index_t span) {
        const auto lay = blend::transpose_layout(grid_size, span);
        return std::make_tuple(lay.slab, lay.slabs);
      },
      "(nodes per slab, slabs) of the deterministic transpose (internal).");
  m.def(
      "blend_axis_weights",
      [](const std::vector<AxisTuple>& axes, bool normalize, int axis, std::uintptr_t q,
         index_t n, std::uintptr_t cell, std::uintptr_t w0, std::uintptr_t w1) {
        const auto wf = weight_function(axes, normalize);
        require(axis >= 0 && axis < wf.dims(), "blend: axis out of range");
        py::gil_scoped_release release;
        const double* qq = ptr<const double>(q);
        index_t* jj = ptr<index_t>(cell);
        double* a0 = ptr<double>(w0);
        double* a1 = ptr<double>(w1);
        wf.axis(axis, qq, n, jj, a0, a1);
      },
      "Per-axis cells and weight pairs of contiguous float64 coordinates (internal).");
  m.def(
      "blend_weights",
      [](const std::vector<AxisTuple>& axes, bool normalize, const std::string& qdtype,
         const Mat& points, const Mat& indices, const Mat& weights, int threads) {
        const auto wf = weight_function(axes, normalize);
        dispatch2("float64", qdtype, [&](auto, auto q) {
          using Q = decltype(q);
          py::gil_scoped_release release;
          blend::compute_weights<Q>(wf, view<const Q>(points), view<index_t>(indices),
                                    view<double>(weights), threads);
        });
      },
      "Stored (indices, weights) of the points (internal).");
  m.def(
      "blend_plan_fly",
      [](const std::vector<AxisTuple>& axes, const std::string& qdtype, const Mat& points,
         std::uintptr_t perm, std::uintptr_t slab_ptr, int threads) {
        const auto wf = weight_function(axes, true);
        const auto lay = blend::transpose_layout(wf.grid_size(), wf.span());
        dispatch2("float64", qdtype, [&](auto, auto q) {
          using Q = decltype(q);
          py::gil_scoped_release release;
          blend::plan_transpose_fly<Q>(wf, view<const Q>(points), lay, ptr<index_t>(perm),
                                       ptr<index_t>(slab_ptr), threads);
        });
      },
      "Bucket the points by output slab for blend_transpose_fly (internal).");
  m.def(
      "blend_plan_stored",
      [](const Mat& indices, index_t grid_size, index_t span, std::uintptr_t perm,
         std::uintptr_t slab_ptr, int threads) {
        const auto lay = blend::transpose_layout(grid_size, span);
        py::gil_scoped_release release;
        blend::plan_transpose_stored(view<const index_t>(indices), lay, ptr<index_t>(perm),
                                     ptr<index_t>(slab_ptr), threads);
      },
      "Bucket stored rows by output slab for blend_transpose_stored (internal).");
  m.def(
      "blend_fly",
      [](const std::vector<AxisTuple>& axes, bool normalize, const std::string& dtype,
         const std::string& qdtype, const Mat& points, const Mat& grid, const Mat& out,
         int threads) {
        const auto wf = weight_function(axes, normalize);
        dispatch2(dtype, qdtype, [&](auto t, auto q) {
          using T = decltype(t);
          using Q = decltype(q);
          py::gil_scoped_release release;
          blend::blend_fly<T, Q>(wf, view<const Q>(points), view<const T>(grid), view<T>(out),
                                 threads);
        });
      },
      "out (P, C) = B grid (G, C), weights on the fly (internal).");
  m.def(
      "blend_transpose_fly",
      [](const std::vector<AxisTuple>& axes, bool normalize, const std::string& dtype,
         const std::string& qdtype, const Mat& points, const Mat& values, const Mat& out,
         int threads, std::uintptr_t perm, std::uintptr_t slab_ptr) {
        const auto wf = weight_function(axes, normalize);
        dispatch2(dtype, qdtype, [&](auto t, auto q) {
          using T = decltype(t);
          using Q = decltype(q);
          py::gil_scoped_release release;
          blend::blend_transpose_fly<T, Q>(wf, view<const Q>(points), view<const T>(values),
                                           view<T>(out), threads, ptr<const index_t>(perm),
                                           ptr<const index_t>(slab_ptr));
        });
      },
      "out (G, C) = B^T values (P, C), weights on the fly, deterministic (internal).");
  m.def(
      "blend_stored",
      [](const std::string& dtype, const Mat& indices, const Mat& weights, const Mat& grid,
         const Mat& out, int threads) {
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          blend::blend_stored<T>(view<const index_t>(indices), view<const double>(weights),
                                 view<const T>(grid), view<T>(out), threads);
        });
      },
      "out (P, C) = B grid (G, C) from stored (indices, weights) (internal).");
  m.def(
      "blend_transpose_stored",
      [](const std::string& dtype, const Mat& indices, const Mat& weights, const Mat& values,
         const Mat& out, index_t span, int threads, std::uintptr_t perm,
         std::uintptr_t slab_ptr) {
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          blend::blend_transpose_stored<T>(view<const index_t>(indices),
                                           view<const double>(weights), view<const T>(values),
                                           view<T>(out), span, threads, ptr<const index_t>(perm),
                                           ptr<const index_t>(slab_ptr));
        });
      },
      "out (G, C) = B^T values (P, C) from stored (indices, weights), deterministic (internal).");
}
