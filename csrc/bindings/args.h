// Argument conversions shared by the CPU and CUDA bindings of each kernel family: a matrix view
// of a 2-D descriptor, a grid axis as (nodes, kind, param), embedder parameters, the matrices of
// a mode-product chain, and the CUDA context of a call.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common.h"
#include "kronpe/blend.h"
#include "kronpe/cuda.h"
#include "kronpe/embed.h"
#include "kronpe/mode_product.h"

namespace kronpe::bindings {

// A grid axis: (nodes, kind, param), nodes a 1-D float64 host array (blend::Kernel kinds).
using Axis = std::tuple<Array, int, double>;
using Axes = std::vector<Axis>;
using OptArray = std::optional<Array>;

// A (rows, cols) view of a 2-D array of T.
template <typename T>
blend::MatrixView<T> view(const Array& a, const char* name) {
  blend::MatrixView<T> v;
  v.data = data<T>(a, name, 2);
  v.rows = a.shape[0];
  v.cols = a.shape[1];
  v.stride_r = a.strides[0];
  v.stride_c = a.strides[1];
  require(v.rows >= 0 && v.cols >= 0, std::string(name) + ": negative size");
  require(v.data != nullptr || v.rows == 0 || v.cols == 0, std::string(name) + ": null address");
  return v;
}

// The address of an optional contiguous 1-D int64 array (perm, offsets), or null.
inline const index_t* index_ptr(const OptArray& a, const char* name) {
  if (!a) return nullptr;
  const index_t* p = data<const index_t>(*a, name, 1);
  require(a->shape[0] <= 1 || a->strides[0] == 1, std::string(name) + " must be contiguous");
  return p;
}

// The host-side weight function of a virtual grid (validates the axes).
inline blend::WeightFunction weight_function(const Axes& axes, bool normalize) {
  std::vector<blend::AxisSpec> specs;
  for (const auto& [nodes, kind, param] : axes) {
    require_host(nodes, "blend: axis nodes");
    blend::AxisSpec s;
    s.nodes = data<const double>(nodes, "blend: axis nodes", 1);
    s.M = nodes.shape[0];
    require(nodes.strides[0] == 1 || s.M <= 1, "blend: axis nodes must be contiguous");
    require(kind >= 0 && kind <= 4, "blend: unknown weight kind");
    s.kind = static_cast<blend::Kernel>(kind);
    s.param = param;
    require(s.nodes != nullptr, "blend: null node array");
    specs.push_back(s);
  }
  return blend::WeightFunction(specs, normalize);
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

// Validated parameters of a shifted-basis / impulse / random embedder with K columns.
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

// Validated parameters of a Fourier embedder; omega: a contiguous 1-D float64 HOST array.
inline FourierParams fourier_params(const Array& omega, const std::string& layout,
                                    bool include_input, double amplitude) {
  require_host(omega, "omega");
  FourierParams p;
  p.omega = data<const double>(omega, "omega", 1);
  p.F = omega.shape[0];
  require(omega.strides[0] == 1 || p.F <= 1, "omega must be contiguous");
  p.layout = parse_layout(layout);
  p.include_input = include_input;
  p.amplitude = amplitude;
  check_fourier_params(p);
  return p;
}

// The (x, out) pair of an embedder: x 1-D, out (n, width) of x's dtype. Returns width.
inline index_t embed_width(const Array& x, const Array& out) {
  require(x.ndim() == 1 && x.strides.size() == 1, "x must be 1-D");
  require(out.dtype == x.dtype, "out must have x's dtype " + x.dtype + ", got " + out.dtype);
  require(out.ndim() == 2 && out.strides.size() == 2 && out.shape[0] == x.shape[0],
          "out must have shape (" + std::to_string(x.shape[0]) + ", K)");
  return out.shape[1];
}

// The matrices of a mode-product chain, of src's dtype.
template <typename T>
std::vector<MatrixRef<T>> matrix_refs(const std::vector<Array>& mats) {
  std::vector<MatrixRef<T>> refs(mats.size());
  for (size_t j = 0; j < mats.size(); ++j) {
    const std::string name = "matrices[" + std::to_string(j) + "]";
    const Array& a = mats[j];
    refs[j] = {data<const T>(a, name.c_str(), 2), a.shape[0], a.shape[1], a.strides[0],
               a.strides[1]};
  }
  return refs;
}

// The CUDA context of a call: the device and stream of `ref` (a device array), scratch memory
// from `workspace` (a uint8 device array, its address aligned by the adapters) when given.
inline cuda::Context context(const Array& ref, const OptArray& workspace) {
  require(ref.device >= 0, "this CUDA kernel takes device arrays, got host memory");
  cuda::Context ctx;
  ctx.device = ref.device;
  ctx.stream = ref.stream;
  if (workspace) {
    require_device(*workspace, ref.device, "workspace");
    ctx.workspace = data<unsigned char>(*workspace, "workspace", 1);
    ctx.workspace_bytes = std::size_t(workspace->shape[0]);
  }
  return ctx;
}

}  // namespace kronpe::bindings
