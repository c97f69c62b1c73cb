#include "kronpe/blas.h"

#include <algorithm>
#include <climits>

namespace kronpe {
namespace {
// One library at a time: LP64 (32-bit counts) or ILP64 (64-bit counts).
sgemm_fn g_sgemm = nullptr;
dgemm_fn g_dgemm = nullptr;
sgemm64_fn g_sgemm64 = nullptr;
dgemm64_fn g_dgemm64 = nullptr;

constexpr index_t kMaxBlas = INT_MAX;

template <typename T, typename F32, typename F64>
inline auto pick(F32 f32, F64 f64) {
  if constexpr (sizeof(T) == 4) return f32;
  else return f64;
}

// One ?gemm call; counts fit the library's integer (LP64 ones are blocked below).
template <typename T>
inline void call(const char* ta, const char* tb, index_t m, index_t n, index_t k, const T* alpha,
                 const T* a, index_t lda, const T* b, index_t ldb, const T* beta, T* c,
                 index_t ldc) {
  if (g_sgemm64 != nullptr) {
    const long long M = m, N = n, K = k, la = lda, lb = ldb, lc = ldc;
    pick<T>(g_sgemm64, g_dgemm64)(ta, tb, &M, &N, &K, alpha, a, &la, b, &lb, beta, c, &lc);
  } else {
    const int M = int(m), N = int(n), K = int(k), la = int(lda), lb = int(ldb), lc = int(ldc);
    pick<T>(g_sgemm, g_dgemm)(ta, tb, &M, &N, &K, alpha, a, &la, b, &lb, beta, c, &lc);
  }
}
}  // namespace

void set_blas(sgemm_fn s, dgemm_fn d) {
  g_sgemm64 = nullptr;
  g_dgemm64 = nullptr;
  g_sgemm = s;
  g_dgemm = d;
}

void set_blas64(sgemm64_fn s, dgemm64_fn d) {
  g_sgemm = nullptr;
  g_dgemm = nullptr;
  g_sgemm64 = s;
  g_dgemm64 = d;
}

bool blas_ready() {
  return (g_sgemm != nullptr && g_dgemm != nullptr) ||
         (g_sgemm64 != nullptr && g_dgemm64 != nullptr);
}

int blas_int_bits() {
  if (g_sgemm64 != nullptr && g_dgemm64 != nullptr) return 64;
  return g_sgemm != nullptr && g_dgemm != nullptr ? 32 : 0;
}

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
  // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T.
  const char* tb = trans_b ? "T" : "N";
  const char* ta = trans_a ? "T" : "N";
  if (blas_int_bits() == 64) {
    call<T>(tb, ta, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc);
    return;
  }
  if (lda > kMaxBlas || ldb > kMaxBlas || ldc > kMaxBlas)
    throw ArgumentError("gemm: a leading dimension exceeds the 32-bit BLAS interface");
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
        call<T>(tb, ta, nb, mb, kb, &alpha, bb, ldb, ab, lda, &be, c + i0 * ldc + j0, ldc);
      }
    }
  }
}

template void gemm<float>(bool, bool, index_t, index_t, index_t, float, const float*, index_t,
                          const float*, index_t, float, float*, index_t);
template void gemm<double>(bool, bool, index_t, index_t, index_t, double, const double*, index_t,
                           const double*, index_t, double, double*, index_t);

}  // namespace kronpe
