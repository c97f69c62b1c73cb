// Helpers shared by the binding files. Arrays cross the binding as (address, shape, strides):
// the Python adapters (kronpe/_arrays.py) own the arrays and keep them alive during the call.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "kronpe/common.h"

namespace kronpe::bindings {
namespace py = pybind11;

inline DType parse_dtype(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  throw ArgumentError("dtype must be float32 or float64, got " + name);
}

template <typename T>
T* ptr(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

}  // namespace kronpe::bindings

void register_blas(pybind11::module_& m);
void register_embed(pybind11::module_& m);
void register_mode_product(pybind11::module_& m);
void register_blend(pybind11::module_& m);
void register_cuda(pybind11::module_& m);
