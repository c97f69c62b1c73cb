// Bindings of the CUDA backend (kronpe/cuda.h). Internal: python/kronpe/_cuda.py owns the device
// arrays, validates them and keeps them alive. Device arrays cross as addresses like host ones;
// every kernel call takes a context (device, stream, workspace address, workspace bytes). In a
// module built without CUDA the same functions exist and raise RuntimeError (BackendError).
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "kronpe/cuda.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::AxisTuple;
using bindings::dispatch1;
using bindings::dispatch2;
using bindings::Mat;
using bindings::ptr;
using bindings::view;
using bindings::weight_function;

namespace {

using Ctx = std::tuple<int, std::uintptr_t, std::uintptr_t, std::size_t>;

cuda::Context context(const Ctx& c) {
  cuda::Context ctx;
  ctx.device = std::get<0>(c);
  ctx.stream = std::get<1>(c);
  ctx.workspace = reinterpret_cast<void*>(std::get<2>(c));
  ctx.workspace_bytes = std::get<3>(c);
  return ctx;
}

}  // namespace

void register_cuda(py::module_& m) {
  m.def("cuda_built", &cuda::built, "True when the CUDA kernels were compiled in.");
  m.def(
      "cuda_info",
      [](bool load_cublas) {
        const cuda::Info i = cuda::info(load_cublas);
        py::dict d;
        d["runtime_version"] = i.runtime_version;
        d["driver_version"] = i.driver_version;
        d["cublas_header_version"] = i.cublas_header_version;
        d["cublas_loaded"] = i.cublas_loaded;
        d["cublas_version"] = i.cublas_version;
        d["cublas_path"] = i.cublas_path;
        d["cublas_error"] = i.cublas_error;
        return d;
      },
      py::arg("load_cublas") = false, "CUDA runtime, driver and cuBLAS versions (internal).");
  m.def("cuda_set_cublas_paths", &cuda::set_cublas_search_paths, py::arg("paths"),
        "Candidate libcublas files, tried before the soname (internal).");
  m.def("cuda_set_allow_tf32", &cuda::set_allow_tf32, py::arg("allow"));
  m.def("cuda_allow_tf32", &cuda::allow_tf32);

  // ---- embedders ----
  m.def(
      "cuda_embed_basis",
      [](const Ctx& c, const std::string& dtype, const std::string& kind, index_t n,
         std::uintptr_t x, index_t x_stride, std::uintptr_t out, index_t out_row_stride,
         index_t out_col_stride, index_t K, index_t first_index, double K_base, double param,
         int degree, std::uint64_t seed) {
        const BasisParams p = bindings::basis_params(kind, K, first_index, K_base, param, degree, seed);
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          cuda::embed_basis<T>(context(c), p, n, ptr<const T>(x), x_stride, ptr<T>(out),
                               out_row_stride, out_col_stride);
        });
      },
      "Shifted-basis / impulse / random embedder on device addresses (internal).");
  m.def(
      "cuda_embed_fourier_workspace",
      [](index_t F) {
        FourierParams p;
        p.F = F;
        return cuda::embed_fourier_workspace(p);
      },
      py::arg("F"));
  m.def(
      "cuda_embed_fourier",
      [](const Ctx& c, const std::string& dtype, index_t n, std::uintptr_t x, index_t x_stride,
         std::uintptr_t out, index_t out_row_stride, index_t out_col_stride, std::uintptr_t omega,
         index_t F, const std::string& layout, bool include_input, double amplitude) {
        const FourierParams p = bindings::fourier_params(omega, F, layout, include_input, amplitude);
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          cuda::embed_fourier<T>(context(c), p, n, ptr<const T>(x), x_stride, ptr<T>(out),
                                 out_row_stride, out_col_stride);
        });
      },
      "Fourier embedder on device addresses; omega is a HOST float64 array (internal).");

  // ---- mode-n products ----
  m.def(
      "cuda_multi_mode_workspace",
      [](const std::string& dtype, const std::vector<index_t>& shape,
         const std::vector<index_t>& strides, const std::vector<int>& modes,
         const std::vector<index_t>& mat_shapes, const std::vector<index_t>& mat_strides,
         bool any_layout) {
        const size_t k = modes.size();
        require(strides.size() == shape.size() && mat_shapes.size() == 2 * k &&
                    mat_strides.size() == 2 * k,
                "cuda_multi_mode_workspace: inconsistent lengths");
        std::vector<index_t> rows(k);
        for (size_t j = 0; j < k; ++j) rows[j] = mat_shapes[2 * j];
        const int elem = bindings::parse_dtype(dtype) == DType::f32 ? 4 : 8;
        return cuda::multi_mode_workspace(int(shape.size()), shape.data(), strides.data(), int(k),
                                          modes.data(), rows.data(), mat_strides.data(), elem,
                                          any_layout);
      },
      "Bytes of device workspace cuda_multi_mode_product needs (internal).");
  m.def(
      "cuda_multi_mode_product",
      [](const Ctx& c, const std::string& dtype, std::uintptr_t src,
         const std::vector<index_t>& shape, const std::vector<index_t>& strides,
         const std::vector<int>& modes, const std::vector<std::uintptr_t>& mats,
         const std::vector<index_t>& mat_shapes, const std::vector<index_t>& mat_strides,
         std::uintptr_t dst, bool any_layout) {
        require(strides.size() == shape.size(),
                "multi_mode_product: shape and strides differ in length");
        std::vector<int> order(shape.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          const auto refs = bindings::matrix_refs<T>(modes.size(), mats, mat_shapes, mat_strides);
          py::gil_scoped_release release;
          cuda::multi_mode_product<T>(context(c), int(shape.size()), shape.data(), ptr<const T>(src),
                                      strides.data(), int(modes.size()), modes.data(), refs.data(),
                                      ptr<T>(dst), any_layout ? order.data() : nullptr);
        });
        return order;
      },
      "dst = src x_modes[0] mats[0] ... on device addresses; returns the axis order written "
      "(internal).");
  m.def(
      "cuda_strided_copy",
      [](const Ctx& c, const std::string& dtype, std::uintptr_t src,
         const std::vector<index_t>& shape, const std::vector<index_t>& src_strides,
         std::uintptr_t dst, const std::vector<index_t>& dst_strides) {
        require(src_strides.size() == shape.size() && dst_strides.size() == shape.size(),
                "strided_copy: shape and strides differ in length");
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          cuda::strided_copy<T>(context(c), int(shape.size()), shape.data(), ptr<const T>(src),
                                src_strides.data(), ptr<T>(dst), dst_strides.data());
        });
      },
      "dst[i] = src[i] over a strided box on the device (internal).");

  // ---- blending matrix ----
  m.def(
      "cuda_blend_fly_workspace",
      [](const std::vector<AxisTuple>& axes) {
        return cuda::blend_fly_workspace(weight_function(axes, true));
      },
      py::arg("axes"));
  m.def("cuda_blend_plan_workspace", &cuda::blend_plan_workspace, py::arg("points"),
        py::arg("nnz"), py::arg("grid_size"));
  m.def(
      "cuda_blend_weights",
      [](const Ctx& c, const std::vector<AxisTuple>& axes, bool normalize,
         const std::string& qdtype, const Mat& points, const Mat& indices, const Mat& weights) {
        const auto wf = weight_function(axes, normalize);
        dispatch1(qdtype, [&](auto q) {
          using Q = decltype(q);
          py::gil_scoped_release release;
          cuda::blend_weights<Q>(context(c), wf, view<const Q>(points), view<index_t>(indices),
                                 view<double>(weights));
        });
      },
      "Stored (indices, weights) of device points (internal).");
  m.def(
      "cuda_blend_fly",
      [](const Ctx& c, const std::vector<AxisTuple>& axes, bool normalize,
         const std::string& dtype, const std::string& qdtype, const Mat& points, const Mat& grid,
         const Mat& out) {
        const auto wf = weight_function(axes, normalize);
        dispatch2(dtype, qdtype, [&](auto t, auto q) {
          using T = decltype(t);
          using Q = decltype(q);
          py::gil_scoped_release release;
          cuda::blend_fly<T, Q>(context(c), wf, view<const Q>(points), view<const T>(grid),
                                view<T>(out));
        });
      },
      "out (P, C) = B grid (G, C) on the device, weights on the fly (internal).");
  m.def(
      "cuda_blend_transpose_fly",
      [](const Ctx& c, const std::vector<AxisTuple>& axes, bool normalize,
         const std::string& dtype, const std::string& qdtype, const Mat& points,
         const Mat& values, const Mat& out, std::uintptr_t perm, std::uintptr_t offsets) {
        const auto wf = weight_function(axes, normalize);
        dispatch2(dtype, qdtype, [&](auto t, auto q) {
          using T = decltype(t);
          using Q = decltype(q);
          py::gil_scoped_release release;
          cuda::blend_transpose_fly<T, Q>(context(c), wf, view<const Q>(points),
                                          view<const T>(values), view<T>(out),
                                          ptr<const index_t>(perm), ptr<const index_t>(offsets));
        });
      },
      "out (G, C) = B^T values (P, C) on the device; with a plan (perm, offsets) deterministic, "
      "else atomic (both 0) (internal).");
  m.def(
      "cuda_blend_stored",
      [](const Ctx& c, const std::string& dtype, const Mat& indices, const Mat& weights,
         const Mat& grid, const Mat& out) {
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          cuda::blend_stored<T>(context(c), view<const index_t>(indices),
                                view<const double>(weights), view<const T>(grid), view<T>(out));
        });
      },
      "out (P, C) = B grid (G, C) from stored (indices, weights) on the device (internal).");
  m.def(
      "cuda_blend_transpose_stored",
      [](const Ctx& c, const std::string& dtype, const Mat& indices, const Mat& weights,
         const Mat& values, const Mat& out, std::uintptr_t perm, std::uintptr_t offsets) {
        dispatch1(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          cuda::blend_transpose_stored<T>(context(c), view<const index_t>(indices),
                                          view<const double>(weights), view<const T>(values),
                                          view<T>(out), ptr<const index_t>(perm),
                                          ptr<const index_t>(offsets));
        });
      },
      "out (G, C) = B^T values (P, C) from stored (indices, weights) on the device (internal).");
  m.def(
      "cuda_blend_plan_fly",
      [](const Ctx& c, const std::vector<AxisTuple>& axes, const std::string& qdtype,
         const Mat& points, std::uintptr_t perm, std::uintptr_t offsets) {
        const auto wf = weight_function(axes, true);
        dispatch1(qdtype, [&](auto q) {
          using Q = decltype(q);
          py::gil_scoped_release release;
          cuda::blend_plan_fly<Q>(context(c), wf, view<const Q>(points), ptr<index_t>(perm),
                                  ptr<index_t>(offsets));
        });
      },
      "Plan of the deterministic transpose from device points (internal).");
  m.def(
      "cuda_blend_plan_stored",
      [](const Ctx& c, const Mat& indices, index_t grid_size, std::uintptr_t perm,
         std::uintptr_t offsets) {
        py::gil_scoped_release release;
        cuda::blend_plan_stored(context(c), view<const index_t>(indices), grid_size,
                                ptr<index_t>(perm), ptr<index_t>(offsets));
      },
      "Plan of the deterministic transpose from stored device indices (internal).");
}
