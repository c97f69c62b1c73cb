// Bindings of the mode-n products (kronpe/mode_product.h), CPU and CUDA side by side: the same
// descriptors in, the kernel of the arrays' place. kronpe.ops allocates the result.
#include <algorithm>
#include <string>
#include <vector>

#include "args.h"
#include "kronpe/cuda.h"
#include "kronpe/mode_product.h"
#include "kronpe/mode_product_plan.h"
#include "kronpe/packed_gemm.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::OptArray;

namespace {

// Checks a chain dst = src x_modes matrices (dtype T everywhere, every array where src lives,
// dst dense in C order with the result's shape), then calls run(pointers...) with the GIL
// released. Returns the axis order in which dst was written (C order unless any_layout).
template <typename T, typename Run>
std::vector<int> chain(const Array& src, const std::vector<Array>& mats,
                       const std::vector<int>& modes, const Array& dst, bool any_layout, Run run) {
  const int nd = src.ndim();
  const T* s = bindings::data<const T>(src, "T");
  T* d = bindings::data<T>(dst, "out", nd);
  require(mats.size() == modes.size(), "multi_mode_product: one matrix per mode");
  const std::vector<MatrixRef<T>> refs = bindings::matrix_refs<T>(mats);
  std::vector<index_t> rows(mats.size()), cols(mats.size());
  for (size_t j = 0; j < mats.size(); ++j) {
    bindings::require_on(src.device, mats[j], ("matrices[" + std::to_string(j) + "]").c_str());
    rows[j] = refs[j].rows;
    cols[j] = refs[j].cols;
  }
  bindings::require_on(src.device, dst, "out");
  const std::vector<index_t> shape = mode_chain_shape(nd, src.shape.data(), int(modes.size()),
                                                      modes.data(), rows.data(), cols.data());
  require(dst.shape == shape, "multi_mode_product: out has the wrong shape");
  index_t expect = 1;  // dense in C order (strides of an empty array do not matter)
  for (int i = nd - 1; i >= 0; --i) {
    require(shape[i] <= 1 || dst.strides[i] == expect || std::count(shape.begin(), shape.end(), 0),
            "multi_mode_product: out must be dense in C order");
    expect = checked_mul(expect, shape[i], "mode product output");
  }
  std::vector<int> order(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) order[size_t(i)] = i;
  {
    py::gil_scoped_release release;
    run(s, refs.data(), d, any_layout ? order.data() : nullptr);
  }
  return order;
}

// Checks a strided copy (one shape and dtype, dst where src lives) and calls
// run(ndim, shape, src pointer, src strides, dst pointer, dst strides) with the GIL released.
template <typename Run>
void copy_call(const Array& src, const Array& dst, Run run) {
  require(src.shape == dst.shape && src.dtype == dst.dtype,
          "strided_copy: src and dst differ in shape or dtype");
  bindings::in_out_call(src, "src", dst, "dst", [&](const auto* s, auto* d) {
    run(src.ndim(), src.shape.data(), s, src.strides.data(), d, dst.strides.data());
  });
}

}  // namespace

void register_mode_product(py::module_& m, py::module_& tuning) {
  m.def(
      "multi_mode_product",
      [](const Array& src, const std::vector<Array>& matrices, const std::vector<int>& modes,
         const Array& out, bool any_layout) {
        bindings::require_host(src, "T");
        std::vector<int> order;
        bindings::dispatch1(src.dtype, [&](auto t) {
          using T = decltype(t);
          order = chain<T>(src, matrices, modes, out, any_layout,
                           [&](const T* s, const MatrixRef<T>* refs, T* d, int* o) {
                             multi_mode_product<T>(src.ndim(), src.shape.data(), s,
                                                   src.strides.data(), int(modes.size()),
                                                   modes.data(), refs, d, o);
                           });
        });
        return order;
      },
      py::arg("src"), py::arg("matrices"), py::arg("modes"), py::arg("out"),
      py::arg("any_layout") = false,
      "out = src x_modes[0] matrices[0] ... on the CPU. Returns the axis order in which out was "
      "written (C order unless any_layout) (internal, see kronpe.ops.multi_mode_product).");
  m.def(
      "cuda_multi_mode_workspace",
      [](const Array& src, const std::vector<Array>& matrices, const std::vector<int>& modes,
         bool any_layout) {
        const size_t k = modes.size();
        require(matrices.size() == k, "multi_mode_product: one matrix per mode");
        require(src.strides.size() == src.shape.size(), "T: shape and strides differ in length");
        std::vector<index_t> rows(k), mat_strides(2 * k);
        for (size_t j = 0; j < k; ++j) {
          require(matrices[j].ndim() == 2 && matrices[j].strides.size() == 2,
                  "multi_mode_product: matrices must be 2-D");
          rows[j] = matrices[j].shape[0];
          mat_strides[2 * j] = matrices[j].strides[0];
          mat_strides[2 * j + 1] = matrices[j].strides[1];
        }
        const int elem = bindings::parse_dtype(src.dtype) == DType::f32 ? 4 : 8;
        return cuda::multi_mode_workspace(src.ndim(), src.shape.data(), src.strides.data(),
                                          int(k), modes.data(), rows.data(), mat_strides.data(),
                                          elem, any_layout);
      },
      py::arg("src"), py::arg("matrices"), py::arg("modes"), py::arg("any_layout") = false,
      "Bytes of device workspace cuda_multi_mode_product needs (internal).");
  m.def(
      "cuda_multi_mode_product",
      [](const Array& src, const std::vector<Array>& matrices, const std::vector<int>& modes,
         const Array& out, bool any_layout, const OptArray& workspace) {
        const cuda::Context ctx = bindings::context(src, workspace);
        std::vector<int> order;
        bindings::dispatch1(src.dtype, [&](auto t) {
          using T = decltype(t);
          order = chain<T>(src, matrices, modes, out, any_layout,
                           [&](const T* s, const MatrixRef<T>* refs, T* d, int* o) {
                             cuda::multi_mode_product<T>(ctx, src.ndim(), src.shape.data(), s,
                                                         src.strides.data(), int(modes.size()),
                                                         modes.data(), refs, d, o);
                           });
        });
        return order;
      },
      py::arg("src"), py::arg("matrices"), py::arg("modes"), py::arg("out"),
      py::arg("any_layout") = false, py::arg("workspace") = py::none(),
      "out = src x_modes[0] matrices[0] ... on the device, enqueued on src's stream; returns "
      "the axis order written (internal).");
  m.def(
      "strided_copy",
      [](const Array& src, const Array& dst) {
        bindings::require_host(src, "src");
        copy_call(src, dst, [](int nd, const index_t* shape, const auto* s, const index_t* ss,
                               auto* d, const index_t* ds) { strided_copy(nd, shape, s, ss, d, ds); });
      },
      py::arg("src"), py::arg("dst"), "dst[...] = src[...] over a strided box (internal).");
  m.def(
      "cuda_strided_copy",
      [](const Array& src, const Array& dst) {
        const cuda::Context ctx = bindings::context(src, std::nullopt);
        copy_call(src, dst, [&](int nd, const index_t* shape, const auto* s, const index_t* ss,
                                auto* d, const index_t* ds) {
          cuda::strided_copy(ctx, nd, shape, s, ss, d, ds);
        });
      },
      py::arg("src"), py::arg("dst"),
      "dst[...] = src[...] over a strided box on the device, on src's stream (internal).");
  tuning.def(
      "set_mode_cost_model",
      [](double rate_f32, double half, double call, double copy_f32) {
        set_mode_cost_model(rate_f32, half, call, copy_f32);
      },
      py::arg("rate_f32"), py::arg("half"), py::arg("call"), py::arg("copy_f32"),
      "Replace the planner's cost model (internal, for tuning).");
  tuning.def(
      "set_mode_layout_penalty",
      [](const std::vector<double>& penalty) {
        require(penalty.size() == 5,
                "set_mode_layout_penalty: 5 penalties (FrontKeep, FrontRotate, BackKeep, "
                "BackRotate, Batched)");
        set_mode_layout_penalty(penalty.data());
      },
      py::arg("penalty"),
      "Replace the CPU planner's layout penalties (internal; kronpe.ops measures them).");
  tuning.def("set_mode_layout_measured", &set_mode_layout_measured, py::arg("on"),
        "Measure the CPU planner's GEMM layouts per shape class (on) or use fixed penalties "
        "(internal; kronpe.ops turns it on).");
  tuning.def("mode_layout_table", &mode_layout_table,
        "The layout measurements: (m, k, rest, elem_size, FrontKeep, FrontRotate, BackKeep, "
        "BackRotate time / fastest) per shape class (internal).");
  tuning.def("clear_mode_layout_table", &clear_mode_layout_table,
        "Forget the layout measurements (internal).");
  tuning.def(
      "mode_cost_model",
      []() {
        const bool packed = chain_uses_packed_gemm();
        const ModeCostModel& cm = chain_cost_model();
        py::dict d;
        d["gemm"] = packed ? "packed" : "blas";
        d["rate_f32"] = cm.rate_f32;
        d["half"] = cm.half;
        d["call"] = cm.call;
        d["copy_f32"] = cm.copy_f32;
        d["layout_penalty"] = std::vector<double>(cm.layout_penalty, cm.layout_penalty + 5);
        d["layout_measured"] = cm.layout_factor != nullptr;
        return d;
      },
      "The CPU planner's cost model in force, for the GEMM the chains run (\"gemm\": "
      "\"packed\" or \"blas\"; internal).");
  m.def(
      "mode_chain_program",
      [](const std::vector<index_t>& shape, const std::vector<index_t>& strides,
         const std::vector<int>& modes, const std::vector<index_t>& out_rows, int elem_size,
         bool any_layout, const std::string& model) {
        require(strides.size() == shape.size() && out_rows.size() == modes.size(),
                "mode_chain_program: inconsistent lengths");
        require(model == "cpu" || model == "packed" || model == "library",
                "mode_chain_program: model must be 'cpu', 'packed' or 'library'");
        const ModeCostModel& cm = model == "cpu"      ? cpu_cost_model()
                                  : model == "packed" ? packed_cpu_cost_model(packed_gemm_isa() == 1)
                                                      : library_cost_model();
        const ChainProgram prog =
            mode_chain_program(int(shape.size()), shape.data(), strides.data(), int(modes.size()),
                               modes.data(), out_rows.data(), elem_size, any_layout, cm);
        py::list ops;
        for (const ChainOp& op : prog.ops) {
          if (op.kind == ChainOp::copy)
            ops.append(py::make_tuple("copy", int(op.src), int(op.dst), op.shape, op.src_strides,
                                      op.dst_strides));
          else
            ops.append(py::make_tuple("gemm", int(op.src), int(op.dst), op.matrix, op.matrix_left,
                                      op.matrix_trans, op.buffer_trans, op.M, op.N, op.K,
                                      op.ld_buffer, op.ldc, op.batch, op.stride_buffer,
                                      op.stride_c));
        }
        return py::make_tuple(ops, prog.workspace, prog.out_order, prog.in_size, prog.out_size);
      },
      py::arg("shape"), py::arg("strides"), py::arg("modes"), py::arg("out_rows"),
      py::arg("elem_size") = 4, py::arg("any_layout") = false, py::arg("model") = "cpu",
      "The lowered program of a mode-product chain for an executor outside the core: (ops, "
      "workspace, out_order, in_size, out_size); buffers 0 input, 1 and 2 work, 3 output; ops "
      "('copy', src, dst, shape, src_strides, dst_strides) or ('gemm', src, dst, matrix, "
      "matrix_left, matrix_trans, buffer_trans, M, N, K, ld_buffer, ldc, batch, stride_buffer, "
      "stride_c), as kronpe::ChainOp (internal).");
  tuning.def(
      "mode_chain_plan",
      [](const std::vector<index_t>& shape, const std::vector<index_t>& strides,
         const std::vector<int>& modes, const std::vector<index_t>& out_rows, int elem_size,
         bool any_layout) {
        require(strides.size() == shape.size() && out_rows.size() == modes.size(),
                "mode_chain_plan: inconsistent lengths");
        return plan_mode_chain(int(shape.size()), shape.data(), strides.data(), int(modes.size()),
                               modes.data(), out_rows.data(), elem_size, any_layout)
            .describe();
      },
      py::arg("shape"), py::arg("strides"), py::arg("modes"), py::arg("out_rows"),
      py::arg("elem_size") = 4, py::arg("any_layout") = false,
      "The planned steps of a mode-product chain, as text (internal).");
}
