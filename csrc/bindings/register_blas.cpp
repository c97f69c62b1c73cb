#include "common.h"
#include "kronpe/blas.h"

namespace py = pybind11;
using namespace kronpe;
using kronpe::bindings::ptr;

void register_blas(py::module_& m) {
  m.def(
      "set_blas",
      [](std::uintptr_t sgemm, std::uintptr_t dgemm) {
        require(sgemm != 0 && dgemm != 0, "set_blas: null BLAS function address");
        set_blas(reinterpret_cast<sgemm_fn>(sgemm), reinterpret_cast<dgemm_fn>(dgemm));
      },
      py::arg("sgemm"), py::arg("dgemm"));
  m.def("blas_ready", &blas_ready);
  m.def(
      "gemm",
      [](const std::string& dtype, bool ta, bool tb, index_t mm, index_t n, index_t k,
         double alpha, std::uintptr_t a, index_t lda, std::uintptr_t b, index_t ldb,
         double beta, std::uintptr_t c, index_t ldc) {
        const DType dt = bindings::parse_dtype(dtype);
        py::gil_scoped_release release;
        if (dt == DType::f32)
          gemm<float>(ta, tb, mm, n, k, float(alpha), ptr<const float>(a), lda,
                      ptr<const float>(b), ldb, float(beta), ptr<float>(c), ldc);
        else
          gemm<double>(ta, tb, mm, n, k, alpha, ptr<const double>(a), lda, ptr<const double>(b),
                       ldb, beta, ptr<double>(c), ldc);
      },
      "Row-major C = alpha op(A) op(B) + beta C on raw addresses (internal).");
}
