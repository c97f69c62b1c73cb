// Argument conversions shared by the CPU and CUDA bindings of each kernel family: a matrix as
// (address, rows, cols, row stride, col stride), a grid axis as (nodes address, M, kind, param),
// embedder parameters, the matrices of a mode-product chain, and dtype dispatch.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "kronpe/blend.h"
#include "kronpe/embed.h"
#include "kronpe/mode_product.h"

namespace kronpe::bindings {

using Mat = std::tuple<std::uintptr_t, index_t, index_t, index_t, index_t>;
using AxisTuple = std::tuple<std::uintptr_t, index_t, int, double>;

template <typename T>
blend::MatrixView<T> view(const Mat& m) {
  blend::MatrixView<T> v;
  v.data = ptr<T>(std::get<0>(m));
  v.rows = std::get<1>(m);
  v.cols = std::get<2>(m);
  v.stride_r = std::get<3>(m);
  v.stride_c = std::get<4>(m);
  require(v.rows >= 0 && v.cols >= 0, "blend: negative matrix size");
  require(v.data != nullptr || v.rows == 0 || v.cols == 0, "blend: null array address");
  return v;
}

// The host-side weight function of a virtual grid (validates the axes; node arrays are host
// memory).
inline blend::WeightFunction weight_function(const std::vector<AxisTuple>& axes, bool normalize) {
  std::vector<blend::AxisSpec> specs;
  for (const auto& a : axes) {
    blend::AxisSpec s;
    s.nodes = ptr<const double>(std::get<0>(a));
    s.M = std::get<1>(a);
    require(std::get<2>(a) >= 0 && std::get<2>(a) <= 4, "blend: unknown weight kind");
    s.kind = static_cast<blend::Kernel>(std::get<2>(a));
    s.param = std::get<3>(a);
    require(s.nodes != nullptr, "blend: null node array");
    specs.push_back(s);
  }
  return blend::WeightFunction(specs, normalize);
}

// Calls f(T{}, Q{}) with the value type T and the point type Q named by the dtype strings.
template <typename F>
void dispatch2(const std::string& dtype, const std::string& qdtype, F&& f) {
  const DType dt = parse_dtype(dtype), qt = parse_dtype(qdtype);
  if (dt == DType::f32 && qt == DType::f32) f(float{}, float{});
  else if (dt == DType::f32) f(float{}, double{});
  else if (qt == DType::f32) f(double{}, float{});
  else f(double{}, double{});
}

template <typename F>
void dispatch1(const std::string& dtype, F&& f) {
  if (parse_dtype(dtype) == DType::f32) f(float{});
  else f(double{});
}

inline Basis parse_basis(const std::string& name) {
  if (name == "gaussian") return Basis::gaussian;
  if (name == "triangle") return Basis::triangle;
  if (name == "rectangle") return Basis::rectangle;
  if (name == "impulse") return Basis::impulse;
  if (name == "sine") return Basis::sine;
  if (name == "square") return Basis::square;
  if (name == "bspline") return Basis::bspline;
  if (name == "random") return Basis::random;
  throw ArgumentError("embed_basis: unknown kind " + name);
}

inline FourierLayout parse_layout(const std::string& name) {
  if (name == "blocks") return FourierLayout::blocks;
  if (name == "interleaved") return FourierLayout::interleaved;
  throw ArgumentError("embed_fourier: layout must be 'blocks' or 'interleaved', got " + name);
}

// Validated parameters of a shifted-basis / impulse / random embedder.
inline BasisParams basis_params(const std::string& kind, index_t K, index_t first_index,
                                double K_base, double param, int degree, std::uint64_t seed) {
  BasisParams p;
  p.kind = parse_basis(kind);
  p.K = K;
  p.first_index = first_index;
  p.K_base = K_base;
  p.param = param;
  p.degree = degree;
  p.seed = seed;
  check_basis_params(p);
  return p;
}

// Validated parameters of a Fourier embedder; omega is a HOST address of F float64 values.
inline FourierParams fourier_params(std::uintptr_t omega, index_t F, const std::string& layout,
                                    bool include_input, double amplitude) {
  FourierParams p;
  p.omega = ptr<const double>(omega);
  p.F = F;
  p.layout = parse_layout(layout);
  p.include_input = include_input;
  p.amplitude = amplitude;
  check_fourier_params(p);
  return p;
}

// The matrices of a mode-product chain: k (address, shape, strides) triples, flattened.
template <typename T>
std::vector<MatrixRef<T>> matrix_refs(size_t k, const std::vector<std::uintptr_t>& mats,
                                      const std::vector<index_t>& mat_shapes,
                                      const std::vector<index_t>& mat_strides) {
  if (mats.size() != k || mat_shapes.size() != 2 * k || mat_strides.size() != 2 * k)
    throw ArgumentError("multi_mode_product: one matrix (address, shape, strides) per mode");
  std::vector<MatrixRef<T>> refs(k);
  for (size_t j = 0; j < k; ++j)
    refs[j] = {ptr<const T>(mats[j]), mat_shapes[2 * j], mat_shapes[2 * j + 1], mat_strides[2 * j],
               mat_strides[2 * j + 1]};
  return refs;
}

}  // namespace kronpe::bindings
