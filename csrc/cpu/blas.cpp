#include "kronpe/blas.h"

#include <algorithm>
#include <climits>

namespace kronpe {
namespace {
sgemm_fn g_sgemm = nullptr;
dgemm_fn g_dgemm = nullptr;

constexpr index_t kMaxBlas = INT_MAX;

inline void call(const char* ta, const char* tb, int m, int n, int k, const float* alpha,
                 const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                 int ldc) {
  g_sgemm(ta, tb, &m, &n, &k, alpha, a, &lda, b, &ldb, beta, c, &ldc);
}
inline void call(const char* ta, const char* tb, int m, int n, int k, const double* alpha,
                 const double* a, int lda, const double* b, int ldb, const double* beta,
                 double* c, int ldc) {
  g_dgemm(ta, tb, &m, &n, &k, alpha, a, &lda, b, &ldb, beta, c, &ldc);
}
}  // namespace

void set_blas(sgemm_fn s, dgemm_fn d) {
  g_sgemm = s;
  g_dgemm = d;
}

bool blas_ready() { return g_sgemm != nullptr && g_dgemm != nullptr; }

template <typename T>
void gemm(bool trans_a, bool trans_b, index_t m, index_t n, index_t k, T alpha, const T* a,
          index_t lda, const T* b, index_t ldb, T beta, T* c, index_t ldc) {
  if (!blas_ready()) throw BackendError("kronpe: the BLAS was not initialised");
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta * C
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  if (lda > kMaxBlas || ldb > kMaxBlas || ldc > kMaxBlas)
    throw ArgumentError("gemm: a leading dimension exceeds the 32-bit BLAS interface");
  // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T.
  const char* tb = trans_b ? "T" : "N";
  const char* ta = trans_a ? "T" : "N";
  // Block over m and n so every count fits in an int (k blocks accumulate through beta).
  for (index_t i0 = 0; i0 < m; i0 += kMaxBlas) {
    const index_t mb = std::min(kMaxBlas, m - i0);
    for (index_t j0 = 0; j0 < n; j0 += kMaxBlas) {
      const index_t nb = std::min(kMaxBlas, n - j0);
      for (index_t p0 = 0; p0 < k; p0 += kMaxBlas) {
        const index_t kb = std::min(kMaxBlas, k - p0);
        const T be = p0 == 0 ? beta : T(1);
        const T* ab = trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0;
        const T* bb = trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0;
        call(tb, ta, int(nb), int(mb), int(kb), &alpha, bb, int(ldb), ab, int(lda), &be,
             c + i0 * ldc + j0, int(ldc));
      }
    }
  }
}

template void gemm<float>(bool, bool, index_t, index_t, index_t, float, const float*, index_t,
                          const float*, index_t, float, float*, index_t);
template void gemm<double>(bool, bool, index_t, index_t, index_t, double, const double*, index_t,
                           const double*, index_t, double, double*, index_t);

}  // namespace kronpe
