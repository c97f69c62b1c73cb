#include "kronpe/blas.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "kronpe/packed_gemm.h"

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

// ---- inverse ---------------------------------------------------------------------------------
// Blocked Gauss-Jordan (the in-place inversion of Quintana-Orti, Quintana-Orti, Sun and van de
// Geijn, "A note on parallel matrix inversion"): for the panel of columns K = [k0, k0 + b), its
// columns are first eliminated on their own, every row, with row pivoting; the panel then holds
// -A_IK A_KK^-1 in the other rows I and A_KK^-1 in the block rows. The other columns C follow in
// one product: A_IC += P R and A_KC = A_KK^-1 R, R = A_KC (the block rows as they were), i.e.
// A += P' R' with P' the panel less the identity in its block rows and R' the block rows with
// zeros in the panel's columns. The row swaps of the pivoting become column swaps of the
// inverse, undone last in reverse order.
namespace {
constexpr index_t kInvertBlock = 32;

// Eliminates the panel of columns [k0, k0 + b), held in w (n x b, dense: rows of A 1 KiB apart
// share a handful of L1 sets), the rows swapped whole (w's and A's other columns; perm gets the
// pivot rows); false at a zero pivot. Then A gets the panel back and w becomes P' (see above).
template <typename T>
KRONPE_CLONES bool eliminate_panel(index_t n, T* a, index_t lda, index_t k0, index_t b, index_t* perm,
                                   T* __restrict w) {
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < b; ++c) w[i * b + c] = a[i * lda + k0 + c];
  for (index_t k = k0; k < k0 + b; ++k) {
    const index_t j = k - k0;
    index_t p = k;
    T best = std::abs(w[k * b + j]);
    for (index_t i = k + 1; i < n; ++i) {
      const T v = std::abs(w[i * b + j]);
      if (v > best) {
        best = v;
        p = i;
      }
    }
    if (!(best > T(0))) return false;
    perm[k] = p;
    if (p != k) {
      std::swap_ranges(w + k * b, w + k * b + b, w + p * b);
      std::swap_ranges(a + k * lda, a + k * lda + k0, a + p * lda);
      std::swap_ranges(a + k * lda + k0 + b, a + k * lda + n, a + p * lda + k0 + b);
    }
    T* __restrict rk = w + k * b;
    const T inv = T(1) / rk[j];
    rk[j] = T(1);
    for (index_t c = 0; c < b; ++c) rk[c] *= inv;
    for (index_t i = 0; i < n; ++i) {
      T* __restrict ri = w + i * b;
      const T f = ri[j];
      if (i == k || f == T(0)) continue;
      for (index_t c = 0; c < b; ++c) ri[c] -= f * rk[c];
      ri[j] = -f * inv;  // as if it were zeroed first (rk[j] = inv): no scalar store under the vector load
    }
  }
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < b; ++c) a[i * lda + k0 + c] = w[i * b + c];
  for (index_t c = 0; c < b; ++c) w[(k0 + c) * b + c] -= T(1);
  return true;
}

// R' (b x n): the block rows of the panel at k0, zero in its columns.
template <typename T>
KRONPE_CLONES void block_rows(index_t n, const T* a, index_t lda, index_t k0, index_t b, T* __restrict R) {
  for (index_t r = 0; r < b; ++r) {
    const T* src = a + (k0 + r) * lda;
    T* dst = R + r * n;
    for (index_t c = 0; c < n; ++c) dst[c] = src[c];
    for (index_t c = k0; c < k0 + b; ++c) dst[c] = T(0);
  }
}

// a += u (n x n; u dense)
template <typename T>
KRONPE_CLONES void add_update(index_t n, T* a, index_t lda, const T* __restrict u) {
  for (index_t i = 0; i < n; ++i) {
    T* __restrict ri = a + i * lda;
    const T* ui = u + i * n;
    for (index_t c = 0; c < n; ++c) ri[c] += ui[c];
  }
}

// The row swaps of the elimination undone as column swaps, last first, one row at a time.
template <typename T>
KRONPE_CLONES void unswap_columns(index_t n, T* a, index_t lda, const index_t* perm) {
  for (index_t i = 0; i < n; ++i) {
    T* ri = a + i * lda;
    for (index_t k = n - 1; k >= 0; --k)
      if (perm[k] != k) std::swap(ri[k], ri[perm[k]]);
  }
}
}  // namespace

template <typename T>
bool invert_in_place(index_t n, T* a, index_t lda) {
  require(n >= 0 && lda >= std::max<index_t>(1, n), "invert: bad extent or row stride");
  if (n == 0) return true;
  std::vector<index_t> perm(size_t(n), 0);
  const index_t bmax = std::min(kInvertBlock, n);
  std::vector<T> P(size_t(n * bmax)), R(size_t(bmax * n)), U(bmax < n ? size_t(n) * size_t(n) : 0);
  for (index_t k0 = 0; k0 < n; k0 += bmax) {
    const index_t b = std::min(bmax, n - k0);
    if (!eliminate_panel(n, a, lda, k0, b, perm.data(), P.data())) return false;
    if (b == n) break;  // no other columns
    block_rows(n, a, lda, k0, b, R.data());
    // the panel's own columns of U are zero: R' has zeros there
    chain_gemm<T>(false, false, n, n, b, P.data(), b, R.data(), n, U.data(), n);
    add_update(n, a, lda, U.data());
  }
  unswap_columns(n, a, lda, perm.data());
  return true;
}

template bool invert_in_place<float>(index_t, float*, index_t);
template bool invert_in_place<double>(index_t, double*, index_t);

}  // namespace kronpe
