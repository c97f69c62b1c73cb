// Bindings of the embedders (kronpe/embed.h). Arrays arrive as (address, strides in elements);
// python/kronpe/embedders.py validates them and keeps them alive during the call.
#include "common.h"
#include "kronpe/embed.h"

namespace py = pybind11;
using namespace kronpe;
using kronpe::bindings::ptr;

namespace {

Basis parse_basis(const std::string& name) {
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

FourierLayout parse_layout(const std::string& name) {
  if (name == "blocks") return FourierLayout::blocks;
  if (name == "interleaved") return FourierLayout::interleaved;
  throw ArgumentError("embed_fourier: layout must be 'blocks' or 'interleaved', got " + name);
}

}  // namespace

void register_embed(py::module_& m) {
  m.def(
      "embed_basis",
      [](const std::string& dtype, const std::string& kind, index_t n, std::uintptr_t x,
         index_t x_stride, std::uintptr_t out, index_t out_row_stride, index_t out_col_stride,
         index_t K, index_t first_index, double K_base, double param, int degree,
         std::uint64_t seed) {
        const DType dt = bindings::parse_dtype(dtype);
        BasisParams p;
        p.kind = parse_basis(kind);
        p.K = K;
        p.first_index = first_index;
        p.K_base = K_base;
        p.param = param;
        p.degree = degree;
        p.seed = seed;
        check_basis_params(p);
        py::gil_scoped_release release;
        if (dt == DType::f32)
          embed_basis<float>(p, n, ptr<const float>(x), x_stride, ptr<float>(out),
                             out_row_stride, out_col_stride);
        else
          embed_basis<double>(p, n, ptr<const double>(x), x_stride, ptr<double>(out),
                              out_row_stride, out_col_stride);
      },
      py::arg("dtype"), py::arg("kind"), py::arg("n"), py::arg("x"), py::arg("x_stride"),
      py::arg("out"), py::arg("out_row_stride"), py::arg("out_col_stride"), py::arg("K"),
      py::arg("first_index"), py::arg("K_base"), py::arg("param"), py::arg("degree"),
      py::arg("seed"),
      "Shifted-basis / impulse / random embedder on raw addresses (internal).");
  m.def(
      "embed_fourier",
      [](const std::string& dtype, index_t n, std::uintptr_t x, index_t x_stride,
         std::uintptr_t out, index_t out_row_stride, index_t out_col_stride, std::uintptr_t omega,
         index_t F, const std::string& layout, bool include_input, double amplitude) {
        const DType dt = bindings::parse_dtype(dtype);
        FourierParams p;
        p.omega = ptr<const double>(omega);
        p.F = F;
        p.layout = parse_layout(layout);
        p.include_input = include_input;
        p.amplitude = amplitude;
        check_fourier_params(p);
        py::gil_scoped_release release;
        if (dt == DType::f32)
          embed_fourier<float>(p, n, ptr<const float>(x), x_stride, ptr<float>(out),
                               out_row_stride, out_col_stride);
        else
          embed_fourier<double>(p, n, ptr<const double>(x), x_stride, ptr<double>(out),
                                out_row_stride, out_col_stride);
      },
      py::arg("dtype"), py::arg("n"), py::arg("x"), py::arg("x_stride"), py::arg("out"),
      py::arg("out_row_stride"), py::arg("out_col_stride"), py::arg("omega"), py::arg("F"),
      py::arg("layout"), py::arg("include_input"), py::arg("amplitude"),
      "Fourier-feature embedder on raw addresses; omega is a contiguous float64 array (internal).");
}
