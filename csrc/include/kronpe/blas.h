// kronpe C++ core: the CPU BLAS. The library is not linked: the Python layer hands over the
// addresses of sgemm/dgemm of the BLAS that SciPy already loaded (scipy.linalg.cython_blas),
// so kronpe multiplies matrices with the very library NumPy and SciPy use.
#pragma once
#include "kronpe/common.h"

namespace kronpe {

// Fortran BLAS ?gemm (LP64: 32-bit integers, column-major, arguments by pointer).
using sgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*,
                          const float*, const float*, const int*, const float*, const int*,
                          const float*, float*, const int*);
using dgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*,
                          const double*, const double*, const int*, const double*, const int*,
                          const double*, double*, const int*);

void set_blas(sgemm_fn s, dgemm_fn d);
bool blas_ready();

// Row-major GEMM: C (m x n) = alpha * op(A) (m x k) @ op(B) (k x n) + beta * C.
// lda/ldb/ldc are row strides in elements of the row-major matrices as stored (before op).
// Sizes past 2^31 are split into blocks that fit the 32-bit BLAS interface.
template <typename T>
void gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a,
          index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc);

}  // namespace kronpe
