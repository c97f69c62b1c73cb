#include <vector>

#include "args.h"
#include "kronpe/mode_product.h"

namespace py = pybind11;
using namespace kronpe;
using kronpe::bindings::ptr;

namespace {

template <typename T>
void run_chain(std::uintptr_t src, const std::vector<index_t>& shape,
               const std::vector<index_t>& strides, const std::vector<int>& modes,
               const std::vector<std::uintptr_t>& mats, const std::vector<index_t>& mat_shapes,
               const std::vector<index_t>& mat_strides, std::uintptr_t dst, bool any_layout,
               std::vector<int>& order) {
  const size_t k = modes.size();
  if (strides.size() != shape.size())
    throw ArgumentError("multi_mode_product: shape and strides differ in length");
  const std::vector<MatrixRef<T>> refs = bindings::matrix_refs<T>(k, mats, mat_shapes, mat_strides);
  order.assign(shape.size(), 0);
  py::gil_scoped_release release;
  multi_mode_product<T>(int(shape.size()), shape.data(), ptr<const T>(src), strides.data(), int(k),
                        modes.data(), refs.data(), ptr<T>(dst),
                        any_layout ? order.data() : nullptr);
}

}  // namespace

void register_mode_product(py::module_& m) {
  // The data address of any object with the buffer protocol (NumPy arrays, any strides): a
  // cheaper route than arr.ctypes.data or arr.__array_interface__ on small calls.
  m.def(
      "address",
      [](py::handle obj) {
        Py_buffer view;
        if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_STRIDES) != 0) throw py::error_already_set();
        const auto address = reinterpret_cast<std::uintptr_t>(view.buf);
        PyBuffer_Release(&view);
        return address;
      },
      py::arg("array"), "Address of an array's first element (internal).");
  m.def(
      "multi_mode_product",
      [](const std::string& dtype, std::uintptr_t src, const std::vector<index_t>& shape,
         const std::vector<index_t>& strides, const std::vector<int>& modes,
         const std::vector<std::uintptr_t>& mats, const std::vector<index_t>& mat_shapes,
         const std::vector<index_t>& mat_strides, std::uintptr_t dst, bool any_layout) {
        std::vector<int> order;
        if (bindings::parse_dtype(dtype) == DType::f32)
          run_chain<float>(src, shape, strides, modes, mats, mat_shapes, mat_strides, dst,
                           any_layout, order);
        else
          run_chain<double>(src, shape, strides, modes, mats, mat_shapes, mat_strides, dst,
                            any_layout, order);
        if (!any_layout)
          for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
        return order;
      },
      py::arg("dtype"), py::arg("src"), py::arg("shape"), py::arg("strides"), py::arg("modes"),
      py::arg("mats"), py::arg("mat_shapes"), py::arg("mat_strides"), py::arg("dst"),
      py::arg("any_layout") = false,
      "dst = src x_modes[0] mats[0] ... on raw addresses; strides in elements. Returns the axis "
      "order in which dst was written (C order unless any_layout) (internal, see "
      "kronpe.ops.multi_mode_product).");
  m.def(
      "strided_copy",
      [](const std::string& dtype, std::uintptr_t src, const std::vector<index_t>& shape,
         const std::vector<index_t>& src_strides, std::uintptr_t dst,
         const std::vector<index_t>& dst_strides) {
        if (src_strides.size() != shape.size() || dst_strides.size() != shape.size())
          throw ArgumentError("strided_copy: shape and strides differ in length");
        const DType dt = bindings::parse_dtype(dtype);
        py::gil_scoped_release release;
        if (dt == DType::f32)
          strided_copy<float>(int(shape.size()), shape.data(), ptr<const float>(src),
                              src_strides.data(), ptr<float>(dst), dst_strides.data());
        else
          strided_copy<double>(int(shape.size()), shape.data(), ptr<const double>(src),
                               src_strides.data(), ptr<double>(dst), dst_strides.data());
      },
      py::arg("dtype"), py::arg("src"), py::arg("shape"), py::arg("src_strides"), py::arg("dst"),
      py::arg("dst_strides"), "dst[i] = src[i] over a strided box, strides in elements (internal).");
  m.def(
      "set_mode_cost_model",
      [](double rate_f32, double half, double call, double copy_f32) {
        set_mode_cost_model(rate_f32, half, call, copy_f32);
      },
      py::arg("rate_f32"), py::arg("half"), py::arg("call"), py::arg("copy_f32"),
      "Replace the planner's cost model (internal, for tuning).");
  m.def(
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
      py::arg("elem_size") = 4, py::arg("any_layout") = false, "The planned steps of a mode-product chain, as text (internal).");
}
