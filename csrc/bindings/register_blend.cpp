// Bindings of the blending-matrix kernels (kronpe/blend.h), CPU (`blend_*`, with a thread count)
// and CUDA (`cuda_blend_*`, on the arrays' device and stream, with optional scratch) side by
// side. Matrices are 2-D descriptors; an axis of the virtual grid is (nodes, kind, param).
// kronpe.solvers.blending validates the arrays and owns them.
#include <string>
#include <type_traits>
#include <vector>

#include "args.h"
#include "kronpe/blend.h"
#include "kronpe/cuda.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::Axes;
using bindings::dispatch1;
using bindings::dispatch2;
using bindings::index_ptr;
using bindings::OptArray;
using bindings::view;
using bindings::weight_function;

namespace {

// Every array of a call lives where the first one does.
void same_place(std::initializer_list<std::pair<const Array*, const char*>> arrays) {
  const int device = arrays.begin()->first->device;
  for (const auto& [a, name] : arrays) bindings::require_on(device, *a, name);
}
void same_place(std::initializer_list<std::pair<const Array*, const char*>> arrays,
                const OptArray& perm, const OptArray& offsets) {
  same_place(arrays);
  const int device = arrays.begin()->first->device;
  if (perm) bindings::require_on(device, *perm, "perm");
  if (offsets) bindings::require_on(device, *offsets, "offsets");
}

// The output rows of a gather (a plan's perm) list every row of `rows` (the points or the stored
// indices) once. (A transpose's perm is the place's own plan: P entries on the CPU, P * 2^D on
// a GPU.)
void require_order(const OptArray& perm, const Array& rows, const char* name) {
  if (perm && rows.ndim() >= 1)
    require(perm->ndim() == 1 && perm->shape[0] == rows.shape[0],
            std::string("rows must have one entry per row of ") + name);
}

// The kernels of one place: the CPU's with a thread count, CUDA's on a context. The products
// below are bound once for each (blend_* and cuda_blend_*).
struct Cpu {
  int threads;
  void place(const Array& first, const char* name) const { bindings::require_host(first, name); }
  template <typename Q>
  void weights(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
               blend::MatrixView<index_t> i, blend::MatrixView<double> w) const {
    blend::compute_weights<Q>(wf, p, i, w, threads);
  }
  template <typename T, typename Q>
  void fly(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
           blend::MatrixView<const T> g, blend::MatrixView<T> o, const index_t* perm) const {
    blend::blend_fly<T, Q>(wf, p, g, o, threads, perm);
  }
  template <typename T, typename Q>
  void transpose_fly(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
                     blend::MatrixView<const T> v, blend::MatrixView<T> o, const index_t* perm,
                     const index_t* ptr, bool sorted) const {
    blend::blend_transpose_fly<T, Q>(wf, p, v, o, threads, perm, ptr, sorted);
  }
  template <typename T>
  void stored(blend::MatrixView<const index_t> i, blend::MatrixView<const double> w,
              blend::MatrixView<const T> g, blend::MatrixView<T> o, const index_t* perm) const {
    blend::blend_stored<T>(i, w, g, o, threads, perm);
  }
  template <typename T>
  void transpose_stored(blend::MatrixView<const index_t> i, blend::MatrixView<const double> w,
                        blend::MatrixView<const T> v, blend::MatrixView<T> o, index_t span,
                        const index_t* perm, const index_t* ptr, bool sorted) const {
    blend::blend_transpose_stored<T>(i, w, v, o, span, threads, perm, ptr, sorted);
  }
};

struct Gpu {
  cuda::Context ctx;
  void place(const Array&, const char*) const {}  // context() checked it
  template <typename Q>
  void weights(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
               blend::MatrixView<index_t> i, blend::MatrixView<double> w) const {
    cuda::blend_weights<Q>(ctx, wf, p, i, w);
  }
  template <typename T, typename Q>
  void fly(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
           blend::MatrixView<const T> g, blend::MatrixView<T> o, const index_t*) const {
    cuda::blend_fly<T, Q>(ctx, wf, p, g, o);
  }
  template <typename T, typename Q>
  void transpose_fly(const blend::WeightFunction& wf, blend::MatrixView<const Q> p,
                     blend::MatrixView<const T> v, blend::MatrixView<T> o, const index_t* perm,
                     const index_t* offsets, bool) const {
    cuda::blend_transpose_fly<T, Q>(ctx, wf, p, v, o, perm, offsets);
  }
  template <typename T>
  void stored(blend::MatrixView<const index_t> i, blend::MatrixView<const double> w,
              blend::MatrixView<const T> g, blend::MatrixView<T> o, const index_t*) const {
    cuda::blend_stored<T>(ctx, i, w, g, o);
  }
  template <typename T>
  void transpose_stored(blend::MatrixView<const index_t> i, blend::MatrixView<const double> w,
                        blend::MatrixView<const T> v, blend::MatrixView<T> o, index_t,
                        const index_t* perm, const index_t* offsets, bool) const {
    cuda::blend_transpose_stored<T>(ctx, i, w, v, o, perm, offsets);
  }
};

// A CPU transpose's plan (perm, slab offsets) of the rows of `rows` on a grid of G nodes with
// rows spanning `span`: an entry per row and slabs + 1 offsets (a CUDA plan has its own layout).
template <typename B>
void require_plan(const B&, const OptArray& perm, const OptArray& offsets, const Array& rows,
                  index_t G, index_t span) {
  if constexpr (std::is_same_v<B, Cpu>) {
    const index_t P = rows.ndim() >= 1 ? rows.shape[0] : 0;
    if (perm) require(perm->shape[0] == P, "perm must have one entry per point");
    if (offsets)
      require(offsets->shape[0] == blend::transpose_layout(G, span).slabs + 1,
              "slab_ptr must have one entry per slab of the grid, plus one");
  }
}

// A per-point description of B from the points: run(Q{}, wf, points, rows, a, w) fills the int64
// array `a` and the float64 array `w` ((indices, weights), or factors (base, pairs)) without the
// GIL; rows (optional) orders the output rows.
template <typename B, typename Run>
void points_call(const B& b, const Axes& axes, bool normalize, const Array& points,
                 const char* a_name, const Array& a, const char* w_name, const Array& w,
                 const OptArray& rows, Run run) {
  b.place(points, "points");
  same_place({{&points, "points"}, {&a, a_name}, {&w, w_name}}, rows, {});
  const auto wf = weight_function(axes, normalize);
  const index_t* rp = index_ptr(rows, "rows");
  require_order(rows, points, "points");
  dispatch1(points.dtype, [&](auto q) {
    using Q = decltype(q);
    const auto pv = view<const Q>(points, "points");
    const auto av = view<index_t>(a, a_name);
    const auto wv = view<double>(w, w_name);
    py::gil_scoped_release release;
    run(q, wf, pv, rp, av, wv);
  });
}

template <typename B>
void weights_call(const B& b, const Axes& axes, bool normalize, const Array& points,
                  const Array& indices, const Array& weights) {
  points_call(b, axes, normalize, points, "indices", indices, "weights", weights, {},
              [&](auto q, const auto& wf, auto pv, const index_t*, auto iv, auto wv) {
                b.template weights<decltype(q)>(wf, pv, iv, wv);
              });
}

// out = B x (transpose: B^T x) with weights on the fly; x is the grid (values). perm: the
// transpose's plan, or the gather's output rows; sorted: points in the plan's order.
template <typename B>
void fly_call(const B& b, bool transpose, const Axes& axes, bool normalize, const Array& points,
              const Array& x, const Array& out, const OptArray& perm, const OptArray& offsets,
              bool sorted = false) {
  b.place(points, "points");
  const char* xname = transpose ? "values" : "grid";
  same_place({{&points, "points"}, {&x, xname}, {&out, "out"}}, perm, offsets);
  const auto wf = weight_function(axes, normalize);
  const index_t* pp = index_ptr(perm, transpose ? "perm" : "rows");
  const index_t* op = index_ptr(offsets, "offsets");
  if (!transpose) require_order(perm, points, "points");
  else require_plan(b, perm, offsets, points, wf.grid_size(), wf.span());
  dispatch2(x.dtype, points.dtype, [&](auto t, auto q) {
    using T = decltype(t);
    using Q = decltype(q);
    const auto pv = view<const Q>(points, "points");
    const auto xv = view<const T>(x, xname);
    const auto ov = view<T>(out, "out");
    py::gil_scoped_release release;
    if (transpose) b.template transpose_fly<T, Q>(wf, pv, xv, ov, pp, op, sorted);
    else b.template fly<T, Q>(wf, pv, xv, ov, pp);
  });
}

// out = B x (transpose: B^T x) from two arrays that describe the rows, int64 `a` and float64 `w`:
// stored (indices, weights) or factors (base, pairs). place(x, name) checks where x lives;
// run(T{}, a, w, x, out, perm, offsets) runs the kernel without the GIL.
template <typename Place, typename Run>
void rows_call(Place place, bool transpose, const char* a_name, const Array& a, const char* w_name,
               const Array& w, const Array& x, const Array& out, const OptArray& perm,
               const OptArray& offsets, Run run) {
  const char* xname = transpose ? "values" : "grid";
  place(x, xname);
  same_place({{&x, xname}, {&a, a_name}, {&w, w_name}, {&out, "out"}}, perm, offsets);
  const index_t* pp = index_ptr(perm, transpose ? "perm" : "rows");
  const index_t* op = index_ptr(offsets, "offsets");
  if (!transpose) require_order(perm, a, a_name);
  dispatch1(x.dtype, [&](auto t) {
    using T = decltype(t);
    const auto av = view<const index_t>(a, a_name);
    const auto wv = view<const double>(w, w_name);
    const auto xv = view<const T>(x, xname);
    const auto ov = view<T>(out, "out");
    py::gil_scoped_release release;
    run(t, av, wv, xv, ov, pp, op);
  });
}

// The same from stored (indices, weights).
template <typename B>
void stored_call(const B& b, bool transpose, const Array& indices, const Array& weights,
                 const Array& x, const Array& out, index_t span, const OptArray& perm,
                 const OptArray& offsets, bool sorted = false) {
  if (transpose) require_plan(b, perm, offsets, indices, out.ndim() >= 1 ? out.shape[0] : 0, span);
  rows_call([&](const Array& a, const char* name) { b.place(a, name); }, transpose, "indices",
            indices, "weights", weights, x, out, perm, offsets,
            [&](auto t, auto iv, auto wv, auto xv, auto ov, const index_t* pp, const index_t* op) {
              using T = decltype(t);
              if (transpose) b.template transpose_stored<T>(iv, wv, xv, ov, span, pp, op, sorted);
              else b.template stored<T>(iv, wv, xv, ov, pp);
            });
}

// The same from factors (base (P, 1), pairs (P, 2D)), CPU.
void factored_call(int threads, bool transpose, const Axes& axes, bool normalize,
                   const Array& base, const Array& pairs, const Array& x, const Array& out,
                   const OptArray& perm, const OptArray& offsets, bool sorted = false) {
  const auto wf = weight_function(axes, normalize);
  if (transpose) require_plan(Cpu{threads}, perm, offsets, base, wf.grid_size(), wf.span());
  rows_call(bindings::require_host, transpose, "base", base, "pairs", pairs, x, out, perm, offsets,
            [&](auto t, auto bv, auto fv, auto xv, auto ov, const index_t* pp, const index_t* op) {
              using T = decltype(t);
              if (transpose)
                blend::blend_transpose_factored<T>(wf, bv, fv, xv, ov, threads, pp, op, sorted);
              else blend::blend_factored<T>(wf, bv, fv, xv, ov, threads, pp);
            });
}

Gpu gpu(const Array& ref, const OptArray& workspace) { return Gpu{bindings::context(ref, workspace)}; }

}  // namespace

void register_blend(py::module_& m, py::module_& tuning) {
  tuning.def("blend_set_simd", &blend::set_simd, py::arg("level"),
        "The blend kernels' vector paths: 2 AVX-512, 1 AVX2, 0 portable, at most the CPU's (the "
        "default); returns the previous level (tests compare the bits of every level).");
  // ---- the grid (host) ----
  m.def(
      "blend_info",
      [](const Axes& axes) {
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
      py::arg("axes"),
      "Grid size, strides, row span and transpose layout of a virtual grid (internal).");
  m.def(
      "blend_layout",
      [](index_t grid_size, index_t span) {
        const auto lay = blend::transpose_layout(grid_size, span);
        return std::make_tuple(lay.slab, lay.slabs);
      },
      py::arg("grid_size"), py::arg("span"),
      "(nodes per slab, slabs) of the deterministic transpose (internal).");
  m.def(
      "blend_axis_weights",
      [](const Axes& axes, bool normalize, int axis, const Array& q, const Array& cell,
         const Array& w0, const Array& w1) {
        const auto wf = weight_function(axes, normalize);
        require(axis >= 0 && axis < wf.dims(), "blend: axis out of range");
        same_place({{&q, "q"}, {&cell, "cell"}, {&w0, "w0"}, {&w1, "w1"}});
        bindings::require_host(q, "q");
        const index_t n = q.ndim() == 1 ? q.shape[0] : -1;
        for (const Array* a : {&q, &cell, &w0, &w1})
          require(a->ndim() == 1 && a->shape[0] == n && a->strides[0] == 1,
                  "blend_axis_weights: q, cell, w0 and w1 must be contiguous, of one length");
        const double* qq = bindings::data<const double>(q, "q");
        index_t* jj = bindings::data<index_t>(cell, "cell");
        double* a0 = bindings::data<double>(w0, "w0");
        double* a1 = bindings::data<double>(w1, "w1");
        py::gil_scoped_release release;
        wf.axis(axis, qq, n, jj, a0, a1);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("axis"), py::arg("q"), py::arg("cell"),
      py::arg("w0"), py::arg("w1"),
      "Per-axis cells and weight pairs of contiguous float64 coordinates (internal).");

  // ---- stored weights ----
  m.def(
      "blend_weights",
      [](const Axes& axes, bool normalize, const Array& points, const Array& indices,
         const Array& weights, int threads) {
        weights_call(Cpu{threads}, axes, normalize, points, indices, weights);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("indices"),
      py::arg("weights"), py::arg("threads") = 0, "Stored (indices, weights) of the points (internal).");
  m.def(
      "cuda_blend_weights",
      [](const Axes& axes, bool normalize, const Array& points, const Array& indices,
         const Array& weights, const OptArray& workspace) {
        weights_call(gpu(points, workspace), axes, normalize, points, indices, weights);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("indices"),
      py::arg("weights"), py::arg("workspace") = py::none(),
      "Stored (indices, weights) of device points (internal).");

  m.def(
      "blend_factors",
      [](const Axes& axes, bool normalize, const Array& points, const Array& base,
         const Array& pairs, int threads, const OptArray& rows) {
        points_call(Cpu{threads}, axes, normalize, points, "base", base, "pairs", pairs, rows,
                    [&](auto q, const auto& wf, auto pv, const index_t* rp, auto bv, auto fv) {
                      blend::compute_factors<decltype(q)>(wf, pv, rp, bv, fv, threads);
                    });
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("base"), py::arg("pairs"),
      py::arg("threads") = 0, py::arg("rows") = py::none(),
      "Factors of the points: base (P, 1) flat index of each cell's first corner, pairs (P, 2D) "
      "the per-axis weight pairs; row e is point rows[e] when rows is given (internal).");

  // ---- plans of the deterministic transpose ----
  m.def(
      "blend_plan_fly",
      [](const Axes& axes, const Array& points, const Array& perm, const Array& slab_ptr,
         int threads) {
        bindings::require_host(points, "points");
        same_place({{&points, "points"}, {&perm, "perm"}, {&slab_ptr, "slab_ptr"}});
        const auto wf = weight_function(axes, true);
        const auto lay = blend::transpose_layout(wf.grid_size(), wf.span());
        index_t* pp = bindings::data<index_t>(perm, "perm", 1);
        index_t* sp = bindings::data<index_t>(slab_ptr, "slab_ptr", 1);
        require(perm.shape[0] == points.shape[0] && slab_ptr.shape[0] == lay.slabs + 1,
                "blend_plan_fly: perm must have P entries and slab_ptr slabs + 1");
        dispatch1(points.dtype, [&](auto q) {
          using Q = decltype(q);
          const auto pv = view<const Q>(points, "points");
          py::gil_scoped_release release;
          blend::plan_fly<Q>(wf, pv, lay, pp, sp, threads);
        });
      },
      py::arg("axes"), py::arg("points"), py::arg("perm"), py::arg("slab_ptr"),
      py::arg("threads") = 0, "The plan: the points sorted by grid cell (perm) and the transpose's slab offsets "
      "(internal).");
  m.def(
      "blend_plan_stored",
      [](const Array& indices, index_t grid_size, index_t span, const Array& perm,
         const Array& slab_ptr, int threads) {
        bindings::require_host(indices, "indices");
        same_place({{&indices, "indices"}, {&perm, "perm"}, {&slab_ptr, "slab_ptr"}});
        const auto lay = blend::transpose_layout(grid_size, span);
        const auto iv = view<const index_t>(indices, "indices");
        index_t* pp = bindings::data<index_t>(perm, "perm", 1);
        index_t* sp = bindings::data<index_t>(slab_ptr, "slab_ptr", 1);
        require(perm.shape[0] == iv.rows && slab_ptr.shape[0] == lay.slabs + 1,
                "blend_plan_stored: perm must have P entries and slab_ptr slabs + 1");
        py::gil_scoped_release release;
        blend::plan_stored(iv, lay, pp, sp, threads);
      },
      py::arg("indices"), py::arg("grid_size"), py::arg("span"), py::arg("perm"),
      py::arg("slab_ptr"), py::arg("threads") = 0,
      "The plan of stored rows: sorted by their smallest index (perm) and the transpose's "
      "slab offsets (internal).");
  m.def("cuda_blend_fly_workspace",
        [](const Axes& axes) { return cuda::blend_fly_workspace(weight_function(axes, true)); },
        py::arg("axes"), "Bytes of device workspace of an on-the-fly CUDA kernel (internal).");
  m.def("cuda_blend_plan_workspace", &cuda::blend_plan_workspace, py::arg("points"),
        py::arg("nnz"), py::arg("grid_size"),
        "Bytes of device workspace of a CUDA transpose plan (internal).");
  m.def(
      "cuda_blend_plan_fly",
      [](const Axes& axes, const Array& points, const Array& perm, const Array& offsets,
         const OptArray& workspace) {
        const cuda::Context ctx = bindings::context(points, workspace);
        same_place({{&points, "points"}, {&perm, "perm"}, {&offsets, "offsets"}});
        const auto wf = weight_function(axes, true);
        index_t* pp = bindings::data<index_t>(perm, "perm", 1);
        index_t* op = bindings::data<index_t>(offsets, "offsets", 1);
        require(perm.shape[0] == points.shape[0] * wf.corners() &&
                    offsets.shape[0] == wf.grid_size() + 1,
                "cuda_blend_plan_fly: perm must have P * 2^D entries and offsets G + 1");
        dispatch1(points.dtype, [&](auto q) {
          using Q = decltype(q);
          const auto pv = view<const Q>(points, "points");
          py::gil_scoped_release release;
          cuda::blend_plan_fly<Q>(ctx, wf, pv, pp, op);
        });
      },
      py::arg("axes"), py::arg("points"), py::arg("perm"), py::arg("offsets"),
      py::arg("workspace") = py::none(),
      "Plan of the deterministic transpose from device points (internal).");
  m.def(
      "cuda_blend_plan_stored",
      [](const Array& indices, index_t grid_size, const Array& perm, const Array& offsets,
         const OptArray& workspace) {
        const cuda::Context ctx = bindings::context(indices, workspace);
        same_place({{&indices, "indices"}, {&perm, "perm"}, {&offsets, "offsets"}});
        const auto iv = view<const index_t>(indices, "indices");
        index_t* pp = bindings::data<index_t>(perm, "perm", 1);
        index_t* op = bindings::data<index_t>(offsets, "offsets", 1);
        require(perm.shape[0] == iv.rows * iv.cols && offsets.shape[0] == grid_size + 1,
                "cuda_blend_plan_stored: perm must have P * nnz entries and offsets G + 1");
        py::gil_scoped_release release;
        cuda::blend_plan_stored(ctx, iv, grid_size, pp, op);
      },
      py::arg("indices"), py::arg("grid_size"), py::arg("perm"), py::arg("offsets"),
      py::arg("workspace") = py::none(),
      "Plan of the deterministic transpose from stored device indices (internal).");

  // ---- products on the fly ----
  m.def(
      "blend_fly",
      [](const Axes& axes, bool normalize, const Array& points, const Array& grid,
         const Array& out, int threads, const OptArray& rows) {
        fly_call(Cpu{threads}, false, axes, normalize, points, grid, out, rows, {});
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("grid"), py::arg("out"),
      py::arg("threads") = 0, py::arg("rows") = py::none(),
      "out (P, C) = B grid (G, C), weights on the fly; point p gives row rows[p] of out when "
      "rows is given (points in a plan's order, rows its perm) (internal).");
  m.def(
      "cuda_blend_fly",
      [](const Axes& axes, bool normalize, const Array& points, const Array& grid,
         const Array& out, const OptArray& workspace) {
        fly_call(gpu(points, workspace), false, axes, normalize, points, grid, out, {}, {});
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("grid"), py::arg("out"),
      py::arg("workspace") = py::none(),
      "out (P, C) = B grid (G, C) on the device, weights on the fly (internal).");
  m.def(
      "blend_transpose_fly",
      [](const Axes& axes, bool normalize, const Array& points, const Array& values,
         const Array& out, int threads, const OptArray& perm, const OptArray& slab_ptr,
         bool sorted) {
        fly_call(Cpu{threads}, true, axes, normalize, points, values, out, perm, slab_ptr, sorted);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("values"),
      py::arg("out"), py::arg("threads") = 0, py::arg("perm") = py::none(),
      py::arg("slab_ptr") = py::none(), py::arg("sorted") = false,
      "out (G, C) = B^T values (P, C), weights on the fly, deterministic; sorted: the points "
      "are in the plan's order (internal).");
  m.def(
      "cuda_blend_transpose_fly",
      [](const Axes& axes, bool normalize, const Array& points, const Array& values,
         const Array& out, const OptArray& perm, const OptArray& offsets,
         const OptArray& workspace) {
        fly_call(gpu(points, workspace), true, axes, normalize, points, values, out, perm, offsets);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("points"), py::arg("values"),
      py::arg("out"), py::arg("perm") = py::none(), py::arg("offsets") = py::none(),
      py::arg("workspace") = py::none(),
      "out (G, C) = B^T values (P, C) on the device; with a plan (perm, offsets) deterministic, "
      "else atomic (internal).");

  // ---- products from factors ----
  m.def(
      "blend_factored",
      [](const Axes& axes, bool normalize, const Array& base, const Array& pairs,
         const Array& grid, const Array& out, int threads, const OptArray& rows) {
        factored_call(threads, false, axes, normalize, base, pairs, grid, out, rows, {});
      },
      py::arg("axes"), py::arg("normalize"), py::arg("base"), py::arg("pairs"), py::arg("grid"),
      py::arg("out"), py::arg("threads") = 0, py::arg("rows") = py::none(),
      "out (P, C) = B grid (G, C) from factors (blend_factors): the bits of blend_fly; factor "
      "row p gives row rows[p] of out when rows is given (internal).");
  m.def(
      "blend_transpose_factored",
      [](const Axes& axes, bool normalize, const Array& base, const Array& pairs,
         const Array& values, const Array& out, int threads, const OptArray& perm,
         const OptArray& slab_ptr, bool sorted) {
        factored_call(threads, true, axes, normalize, base, pairs, values, out, perm, slab_ptr,
                      sorted);
      },
      py::arg("axes"), py::arg("normalize"), py::arg("base"), py::arg("pairs"), py::arg("values"),
      py::arg("out"), py::arg("threads") = 0, py::arg("perm") = py::none(),
      py::arg("slab_ptr") = py::none(), py::arg("sorted") = false,
      "out (G, C) = B^T values (P, C) from factors, deterministic: the bits of "
      "blend_transpose_fly; sorted: the factors are in the plan's order (internal).");

  // ---- products from stored (indices, weights) ----
  m.def(
      "blend_stored",
      [](const Array& indices, const Array& weights, const Array& grid, const Array& out,
         int threads, const OptArray& rows) {
        stored_call(Cpu{threads}, false, indices, weights, grid, out, 0, rows, {});
      },
      py::arg("indices"), py::arg("weights"), py::arg("grid"), py::arg("out"),
      py::arg("threads") = 0, py::arg("rows") = py::none(),
      "out (P, C) = B grid (G, C) from stored (indices, weights); row p gives row rows[p] of "
      "out when rows is given (internal).");
  m.def(
      "cuda_blend_stored",
      [](const Array& indices, const Array& weights, const Array& grid, const Array& out,
         const OptArray& workspace) {
        stored_call(gpu(grid, workspace), false, indices, weights, grid, out, 0, {}, {});
      },
      py::arg("indices"), py::arg("weights"), py::arg("grid"), py::arg("out"),
      py::arg("workspace") = py::none(),
      "out (P, C) = B grid (G, C) from stored (indices, weights) on the device (internal).");
  m.def(
      "blend_transpose_stored",
      [](const Array& indices, const Array& weights, const Array& values, const Array& out,
         index_t span, int threads, const OptArray& perm, const OptArray& slab_ptr,
         bool sorted) {
        stored_call(Cpu{threads}, true, indices, weights, values, out, span, perm, slab_ptr,
                    sorted);
      },
      py::arg("indices"), py::arg("weights"), py::arg("values"), py::arg("out"), py::arg("span"),
      py::arg("threads") = 0, py::arg("perm") = py::none(), py::arg("slab_ptr") = py::none(),
      py::arg("sorted") = false,
      "out (G, C) = B^T values (P, C) from stored (indices, weights), deterministic; sorted: "
      "the rows are in the plan's order (internal).");
  m.def(
      "blend_normal_add",
      [](const Array& indices, const Array& weights, const Array& v, const Array& out, const OptArray& keep) {
        for (const auto& [a, name] : {std::pair<const Array*, const char*>{&indices, "indices"},
                                      {&weights, "weights"}, {&v, "v"}, {&out, "out"}})
          bindings::require_host(*a, name);
        require(v.dtype == out.dtype, "blend_normal_add: v and out must have one dtype");
        const index_t G = v.ndim() >= 1 ? v.shape[0] : 0;
        require(v.ndim() == 1 && out.ndim() == 1 && out.shape[0] == G && (G <= 1 || (v.strides[0] == 1 && out.strides[0] == 1)),
                "blend_normal_add: v and out must be contiguous 1-D arrays of the grid's size");
        require(v.address != out.address, "blend_normal_add: out must not be v");
        const auto iv = view<const index_t>(indices, "indices");
        const auto wv = view<const double>(weights, "weights");
        if (keep) {
          bindings::require_host(*keep, "keep");
          require(keep->ndim() == 1 && keep->shape[0] == indices.shape[0] && keep->dtype == v.dtype &&
                      (keep->shape[0] <= 1 || keep->strides[0] == 1),
                  "blend_normal_add: keep must be contiguous 1-D, one entry per row, of v's dtype");
        }
        dispatch1(v.dtype, [&](auto t) {
          using T = decltype(t);
          const T* vp = bindings::data<const T>(v, "v", 1);
          T* op = bindings::data<T>(out, "out", 1);
          const T* kp = keep ? bindings::data<const T>(*keep, "keep", 1) : nullptr;
          py::gil_scoped_release release;
          blend::blend_normal_add<T>(iv, wv, vp, op, G, kp);
        });
      },
      py::arg("indices"), py::arg("weights"), py::arg("v"), py::arg("out"), py::arg("keep") = py::none(),
      "out (G,) += B^T diag(keep) B v (G,) from stored (indices, weights) in any row order, one pass on one "
      "thread (internal).");
  m.def(
      "cuda_blend_transpose_stored",
      [](const Array& indices, const Array& weights, const Array& values, const Array& out,
         const OptArray& perm, const OptArray& offsets, const OptArray& workspace) {
        stored_call(gpu(values, workspace), true, indices, weights, values, out, 0, perm, offsets);
      },
      py::arg("indices"), py::arg("weights"), py::arg("values"), py::arg("out"),
      py::arg("perm") = py::none(), py::arg("offsets") = py::none(),
      py::arg("workspace") = py::none(),
      "out (G, C) = B^T values (P, C) from stored (indices, weights) on the device (internal).");
}
