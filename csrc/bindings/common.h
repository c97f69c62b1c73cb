// Helpers shared by the binding files. Every array crosses the binding as one descriptor,
// kronpe._adapters.arrays.Array: a tuple (address, shape, strides, dtype, device, stream), strides
// in elements, dtype a NumPy name, device -1 for host memory or the CUDA ordinal, stream the
// cudaStream_t as an integer (0 on the host). The Python adapters own the arrays and keep them
// alive during the call. A value of the wrong Python type is refused by pybind11 (TypeError); a
// descriptor of the wrong dtype, rank or device is an ArgumentError (ValueError), as is a
// read-only NumPy array where a kernel writes. A host NumPy array may stand for its own
// descriptor: the caster reads its buffer (address, shape, strides, dtype, writable flag)
// directly, which is what the adapters pass for NumPy arrays (no per-call Python work).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kronpe/common.h"

namespace kronpe::bindings {
namespace py = pybind11;

struct Array {
  std::uintptr_t address = 0;
  std::vector<index_t> shape, strides;
  std::string dtype;
  int device = -1;  // -1: host memory
  std::uintptr_t stream = 0;
  bool writable = true;  // false: a read-only NumPy array (a descriptor tuple is always writable)
  int ndim() const { return int(shape.size()); }
};

inline DType parse_dtype(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  throw ArgumentError("dtype must be float32 or float64, got " + name);
}

template <typename T>
T* ptr(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

template <typename T> constexpr const char* dtype_of = "";
template <> constexpr const char* dtype_of<float> = "float32";
template <> constexpr const char* dtype_of<double> = "float64";
template <> constexpr const char* dtype_of<index_t> = "int64";
template <> constexpr const char* dtype_of<unsigned char> = "uint8";

// The array's address as T* after checking its dtype and rank (ndim < 0: any rank); a non-const
// T is an array the kernel writes, refused where it is read-only.
template <typename T>
T* data(const Array& a, const char* name, int ndim = -1) {
  using U = std::remove_const_t<T>;
  if constexpr (!std::is_const_v<T>)
    if (!a.writable) throw ArgumentError(std::string(name) + " is read-only; the kernel writes into it");
  if (a.dtype != dtype_of<U>)
    throw ArgumentError(std::string(name) + " must be " + dtype_of<U> + ", got " + a.dtype);
  if (ndim >= 0 && a.ndim() != ndim)
    throw ArgumentError(std::string(name) + " must be " + std::to_string(ndim) + "-D, got " +
                        std::to_string(a.ndim()) + "-D");
  if (a.strides.size() != a.shape.size())
    throw ArgumentError(std::string(name) + ": shape and strides differ in length");
  return ptr<T>(a.address);
}

// Whether arrays of a_bytes at a and b_bytes at b overlap (b_bytes: a_bytes where not given).
inline bool overlap(const void* a, const void* b, index_t a_bytes, index_t b_bytes = -1) {
  if (b_bytes < 0) b_bytes = a_bytes;
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + std::uintptr_t(b_bytes) && y < x + std::uintptr_t(a_bytes);
}

// The array must be in host memory (for a CPU kernel) / on `device` (for a CUDA kernel).
inline void require_host(const Array& a, const char* name) {
  if (a.device != -1)
    throw ArgumentError(std::string(name) + " is on cuda:" + std::to_string(a.device) +
                        "; this kernel runs on the CPU");
}
inline void require_device(const Array& a, int device, const char* name) {
  if (a.device != device)
    throw ArgumentError(std::string(name) + " must be on cuda:" + std::to_string(device) +
                        ", got " + (a.device < 0 ? std::string("host memory")
                                                 : "cuda:" + std::to_string(a.device)));
}

// The array must live where the kernel runs: host memory (device < 0) or CUDA device `device`.
inline void require_on(int device, const Array& a, const char* name) {
  if (device < 0) require_host(a, name);
  else require_device(a, device, name);
}

// Calls f(T{}) with the value type named by the dtype string.
template <typename F>
void dispatch1(const std::string& dtype, F&& f) {
  if (parse_dtype(dtype) == DType::f32) f(float{});
  else f(double{});
}

// Calls f(T{}, Q{}) with the value type T and the point type Q named by the dtype strings.
template <typename F>
void dispatch2(const std::string& dtype, const std::string& qdtype, F&& f) {
  dispatch1(dtype, [&](auto t) { dispatch1(qdtype, [&](auto q) { f(t, q); }); });
}

// The kernel call of an input and an output array of one dtype: `out` where `in` lives, the
// typed pointers run(const T* in, T* out) with the GIL released.
template <typename Run>
void in_out_call(const Array& in, const char* in_name, const Array& out, const char* out_name,
                 Run&& run) {
  require_on(in.device, out, out_name);
  dispatch1(in.dtype, [&](auto t) {
    using T = decltype(t);
    const T* ip = data<const T>(in, in_name);
    T* op = data<T>(out, out_name);
    py::gil_scoped_release release;
    run(ip, op);
  });
}

}  // namespace kronpe::bindings

// An Array from any Python tuple of six (kronpe._adapters.arrays.Array is a NamedTuple), or from
// a NumPy array in host memory (its own descriptor).
namespace pybind11::detail {
template <>
struct type_caster<kronpe::bindings::Array> {
  PYBIND11_TYPE_CASTER(kronpe::bindings::Array, const_name("kronpe._adapters.arrays.Array"));
  bool load_numpy(const array& a) {
    const char* names[] = {"float32", "float64", "int64", "uint8"};
    const dtype kinds[] = {dtype::of<float>(), dtype::of<double>(), dtype::of<std::int64_t>(),
                           dtype::of<std::uint8_t>()};
    const auto item = static_cast<kronpe::index_t>(a.itemsize());
    value.dtype = "";
    for (int i = 0; i < 4; ++i)
      if (a.dtype().is(kinds[i]) || a.dtype().equal(kinds[i])) value.dtype = names[i];
    if (value.dtype.empty())
      throw kronpe::ArgumentError("array must be float32 or float64, got " +
                                  std::string(str(a.dtype())));
    value.address = reinterpret_cast<std::uintptr_t>(a.data());
    value.shape.assign(a.shape(), a.shape() + a.ndim());
    value.strides.resize(static_cast<size_t>(a.ndim()));
    for (ssize_t k = 0; k < a.ndim(); ++k) {
      if (a.strides(k) % item != 0)
        throw kronpe::ArgumentError("array has strides that are not a multiple of its item size");
      value.strides[static_cast<size_t>(k)] = a.strides(k) / item;
    }
    value.device = -1;
    value.stream = 0;
    value.writable = a.writeable();
    return true;
  }
  bool load(handle src, bool convert) {
    if (isinstance<array>(src)) return load_numpy(reinterpret_borrow<array>(src));
    if (!isinstance<tuple>(src)) return false;
    const auto t = reinterpret_borrow<tuple>(src);
    if (t.size() != 6) return false;
    make_caster<std::uintptr_t> address, stream;
    make_caster<std::vector<kronpe::index_t>> shape, strides;
    make_caster<std::string> dtype;
    make_caster<int> device;
    if (!address.load(t[0], convert) || !shape.load(t[1], convert) ||
        !strides.load(t[2], convert) || !dtype.load(t[3], convert) ||
        !device.load(t[4], convert) || !stream.load(t[5], convert))
      return false;
    value.address = cast_op<std::uintptr_t>(address);
    value.shape = cast_op<std::vector<kronpe::index_t>&&>(std::move(shape));
    value.strides = cast_op<std::vector<kronpe::index_t>&&>(std::move(strides));
    value.dtype = cast_op<std::string&&>(std::move(dtype));
    value.device = cast_op<int>(device);
    value.stream = cast_op<std::uintptr_t>(stream);
    value.writable = true;
    return true;
  }
  static handle cast(const kronpe::bindings::Array&, return_value_policy, handle) {
    return none().release();  // arrays only ever come in
  }
};
}  // namespace pybind11::detail

// `tuning`: the submodule kronpe._core._tuning, where a family's tuning hooks go (module.cpp).
void register_blas(pybind11::module_& m, pybind11::module_& tuning);
void register_embed(pybind11::module_& m);
void register_mode_product(pybind11::module_& m, pybind11::module_& tuning);
void register_blend(pybind11::module_& m, pybind11::module_& tuning);
void register_smooth(pybind11::module_& m, pybind11::module_& tuning);
void register_multigrid(pybind11::module_& m, pybind11::module_& tuning);
void register_multigrid_cuda(pybind11::module_& m);
void register_masked(pybind11::module_& m);
void register_reductions(pybind11::module_& m);
void register_channels(pybind11::module_& m);
void register_spline(pybind11::module_& m);
void register_cuda(pybind11::module_& m);
