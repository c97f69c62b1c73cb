// kronpe C++ core: the CPU BLAS. The library is not linked: the Python layer hands over the
// addresses of sgemm/dgemm of a BLAS the process already loaded (NumPy's OpenBLAS when it can be
// identified, so that NumPy users keep one BLAS thread pool, else SciPy's through
// scipy.linalg.cython_blas), so kronpe multiplies matrices with the very library they use.
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

// The same with 64-bit integers (ILP64, e.g. NumPy's OpenBLAS, symbols with the suffix 64_).
using sgemm64_fn = void (*)(const char*, const char*, const long long*, const long long*,
                            const long long*, const float*, const float*, const long long*,
                            const float*, const long long*, const float*, float*,
                            const long long*);
using dgemm64_fn = void (*)(const char*, const char*, const long long*, const long long*,
                            const long long*, const double*, const double*, const long long*,
                            const double*, const long long*, const double*, double*,
                            const long long*);

void set_blas(sgemm_fn s, dgemm_fn d);
void set_blas64(sgemm64_fn s, dgemm64_fn d);
bool blas_ready();
// 64 for an ILP64 library, 32 for LP64, 0 before set_blas / set_blas64.
int blas_int_bits();

// Row-major GEMM: C (m x n) = alpha * op(A) (m x k) @ op(B) (k x n) + beta * C.
// lda/ldb/ldc are row strides in elements of the row-major matrices as stored (before op).
// Sizes past 2^31 are split into blocks that fit the 32-bit BLAS interface.
template <typename T>
void gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a,
          index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc);

// A (n x n, row-major, row stride lda) replaced by its inverse: Gauss-Jordan elimination with
// partial (row) pivoting, blocked: each panel of kInvertBlock columns is eliminated on its own,
// then one rank-kInvertBlock GEMM (chain_gemm, kronpe/packed_gemm.h) updates the other columns.
// The same flops as LAPACK's getrf + getri (2 n^3), nearly all of them in one GEMM per panel:
// a 256^2 float32 inverse in about 0.6 of their time on one thread. False (A left partly
// eliminated) when a pivot is exactly zero.
template <typename T>
bool invert_in_place(index_t n, T* a, index_t lda);

}  // namespace kronpe
