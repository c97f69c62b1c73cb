#include <pybind11/numpy.h>

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

// Strides of a NumPy array in elements (refusing strides that are not multiples of the item).
std::vector<index_t> element_strides(const py::array& a, const std::string& name) {
  const index_t item = a.itemsize();
  std::vector<index_t> out(a.ndim());
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (a.strides(i) % item != 0)
      throw ArgumentError(name + " has strides that are not multiples of its item size");
    out[i] = a.strides(i) / item;
  }
  return out;
}

// The NumPy fast path: arrays in, a new array out (C order, or any dense order as a view).
template <typename T>
py::array chain_arrays(const py::array& t, const std::vector<py::array>& mats,
                       const std::vector<int>& modes, bool any_layout) {
  const int nd = int(t.ndim());
  const size_t k = modes.size();
  if (mats.size() != k) throw ArgumentError("multi_mode_product: one matrix per mode");
  std::vector<index_t> shape(t.shape(), t.shape() + nd);
  const std::vector<index_t> strides = element_strides(t, "T");
  std::vector<MatrixRef<T>> refs(k);
  std::vector<index_t> rows(k), cols(k);
  std::vector<std::vector<index_t>> keep(k);
  for (size_t j = 0; j < k; ++j) {
    const std::string name = "matrices[" + std::to_string(j) + "]";
    if (mats[j].ndim() != 2) throw ArgumentError(name + " must be 2-D (m, n)");
    if (!mats[j].dtype().is(t.dtype())) throw ArgumentError(name + " must have T's dtype");
    keep[j] = element_strides(mats[j], name);
    rows[j] = mats[j].shape(0);
    cols[j] = mats[j].shape(1);
    refs[j] = {static_cast<const T*>(mats[j].data()), rows[j], cols[j], keep[j][0], keep[j][1]};
  }
  const std::vector<index_t> out_shape =
      mode_chain_shape(nd, shape.data(), int(k), modes.data(), rows.data(), cols.data());
  py::array_t<T> out(std::vector<py::ssize_t>(out_shape.begin(), out_shape.end()));
  std::vector<int> order(nd);
  {
    py::gil_scoped_release release;
    multi_mode_product<T>(nd, shape.data(), static_cast<const T*>(t.data()), strides.data(), int(k),
                          modes.data(), refs.data(), out.mutable_data(),
                          any_layout ? order.data() : nullptr);
  }
  bool identity = true;
  for (int i = 0; i < nd && any_layout; ++i) identity = identity && order[i] == i;
  if (!any_layout || identity) return std::move(out);
  // the buffer holds the axes in `order` (outermost first): view it with the logical axes
  std::vector<py::ssize_t> view_strides(nd);
  py::ssize_t s = sizeof(T);
  for (int i = nd - 1; i >= 0; --i) {
    view_strides[order[i]] = s;
    s *= py::ssize_t(out_shape[order[i]]);
  }
  return py::array(out.dtype(), std::vector<py::ssize_t>(out_shape.begin(), out_shape.end()),
                   view_strides, out.data(), out);
}

}  // namespace

void register_mode_product(py::module_& m) {
  m.def(
      "multi_mode_product_arrays",
      [](const py::array& t, const std::vector<py::array>& mats, const std::vector<int>& modes,
         bool any_layout) -> py::array {
        const char c = t.dtype().char_();
        if (c == 'f') return chain_arrays<float>(t, mats, modes, any_layout);
        if (c == 'd') return chain_arrays<double>(t, mats, modes, any_layout);
        throw ArgumentError("T must be float32 or float64");
      },
      py::arg("T"), py::arg("matrices"), py::arg("modes"), py::arg("any_layout") = true,
      "NumPy fast path of kronpe.ops.multi_mode_product: float32/float64 arrays of one dtype, "
      "modes already checked (internal).");
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
