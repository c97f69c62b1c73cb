// Bindings of the embedders (kronpe/embed.h), CPU and CUDA side by side. x (n,) and out (n, K)
// are descriptors of one dtype and place; kronpe.embedders validates them first.
#include "args.h"
#include "kronpe/cuda.h"
#include "kronpe/embed.h"

namespace py = pybind11;
using namespace kronpe;
using bindings::Array;
using bindings::OptArray;

void register_embed(py::module_& m) {
  m.def(
      "embed_basis",
      [](const Array& x, const Array& out, const std::string& kind, index_t first_index,
         double K_base, double param, int degree, std::uint64_t seed) {
        bindings::require_host(x, "x");
        const BasisParams p = bindings::basis_params(kind, bindings::embed_width(x, out),
                                                     first_index, K_base, param, degree, seed);
        bindings::in_out_call(x, "x", out, "out", [&](const auto* xp, auto* op) {
          embed_basis(p, x.shape[0], xp, x.strides[0], op, out.strides[0], out.strides[1]);
        });
      },
      py::arg("x"), py::arg("out"), py::arg("kind"), py::arg("first_index"), py::arg("K_base"),
      py::arg("param"), py::arg("degree"), py::arg("seed"),
      "out (n, K) = Psi(x) of a shifted-basis / impulse / random embedder (internal).");
  m.def(
      "cuda_embed_basis",
      [](const Array& x, const Array& out, const std::string& kind, index_t first_index,
         double K_base, double param, int degree, std::uint64_t seed) {
        const cuda::Context ctx = bindings::context(x, std::nullopt);
        const BasisParams p = bindings::basis_params(kind, bindings::embed_width(x, out),
                                                     first_index, K_base, param, degree, seed);
        bindings::in_out_call(x, "x", out, "out", [&](const auto* xp, auto* op) {
          cuda::embed_basis(ctx, p, x.shape[0], xp, x.strides[0], op, out.strides[0],
                            out.strides[1]);
        });
      },
      py::arg("x"), py::arg("out"), py::arg("kind"), py::arg("first_index"), py::arg("K_base"),
      py::arg("param"), py::arg("degree"), py::arg("seed"),
      "The same on the device, on x's stream (internal).");
  m.def(
      "embed_fourier",
      [](const Array& x, const Array& out, const Array& omega, const std::string& layout,
         bool include_input, double amplitude) {
        bindings::require_host(x, "x");
        const FourierParams p = bindings::fourier_params(omega, layout, include_input, amplitude);
        require(bindings::embed_width(x, out) == fourier_width(p),
                "out must have " + std::to_string(fourier_width(p)) + " columns");
        bindings::in_out_call(x, "x", out, "out", [&](const auto* xp, auto* op) {
          embed_fourier(p, x.shape[0], xp, x.strides[0], op, out.strides[0], out.strides[1]);
        });
      },
      py::arg("x"), py::arg("out"), py::arg("omega"), py::arg("layout"), py::arg("include_input"),
      py::arg("amplitude"),
      "out (n, 2F [+1]) = Fourier features of x; omega: F float64 host values (internal).");
  m.def(
      "cuda_embed_fourier_workspace",
      [](index_t F) {
        FourierParams p;
        p.F = F;
        return cuda::embed_fourier_workspace(p);
      },
      py::arg("F"), "Bytes of device workspace cuda_embed_fourier needs (internal).");
  m.def(
      "cuda_embed_fourier",
      [](const Array& x, const Array& out, const Array& omega, const std::string& layout,
         bool include_input, double amplitude, const OptArray& workspace) {
        const cuda::Context ctx = bindings::context(x, workspace);
        const FourierParams p = bindings::fourier_params(omega, layout, include_input, amplitude);
        require(bindings::embed_width(x, out) == fourier_width(p),
                "out must have " + std::to_string(fourier_width(p)) + " columns");
        bindings::in_out_call(x, "x", out, "out", [&](const auto* xp, auto* op) {
          cuda::embed_fourier(ctx, p, x.shape[0], xp, x.strides[0], op, out.strides[0],
                              out.strides[1]);
        });
      },
      py::arg("x"), py::arg("out"), py::arg("omega"), py::arg("layout"), py::arg("include_input"),
      py::arg("amplitude"), py::arg("workspace") = py::none(),
      "The same on the device; omega stays a HOST array (uploaded on x's stream) (internal).");
}
