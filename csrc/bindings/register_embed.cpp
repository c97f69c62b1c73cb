// Bindings of the embedders (kronpe/embed.h). Arrays arrive as (address, strides in elements);
// python/kronpe/embedders.py validates them and keeps them alive during the call.
#include "args.h"
#include "kronpe/embed.h"

namespace py = pybind11;
using namespace kronpe;
using kronpe::bindings::ptr;

void register_embed(py::module_& m) {
  m.def(
      "embed_basis",
      [](const std::string& dtype, const std::string& kind, index_t n, std::uintptr_t x,
         index_t x_stride, std::uintptr_t out, index_t out_row_stride, index_t out_col_stride,
         index_t K, index_t first_index, double K_base, double param, int degree,
         std::uint64_t seed) {
        const DType dt = bindings::parse_dtype(dtype);
        const BasisParams p = bindings::basis_params(kind, K, first_index, K_base, param, degree, seed);
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
        const FourierParams p = bindings::fourier_params(omega, F, layout, include_input, amplitude);
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
