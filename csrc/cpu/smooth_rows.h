// kronpe C++ core: (R v) and diag(R) of the thin-plate penalty row by row on the CPU
// (kronpe/smooth.h), the penalty's bands, and the stencil rings of the factored and
// Laplacian-power forms. Included by csrc/cpu/smooth.cpp alone, in an unnamed namespace (internal
// linkage, as if written there), so that its kernels inline these rows.
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kronpe/avx512.h"
#include "kronpe/smooth.h"

namespace kronpe::smooth {
namespace {

void check_grid(const Grid& g) {
  for (int a = 0; a < 3; ++a) require(g.n[a] >= 0, "smooth: negative grid size");
  checked_mul(checked_mul(g.n[0], g.n[1], "smooth: grid"), g.n[2], "smooth: grid");
  require(g.order == 2 || g.order == 3, "smooth: the penalty's order must be 2 or 3");
  require(!g.power() || g.reflect, "smooth: order 3 and axis weights need the mirrored boundary (reflect)");
  for (int a = 0; a < 3; ++a)
    require(std::isfinite(g.w[a]) && g.w[a] > 0, "smooth: the axis weights must be finite and > 0");
  require(std::isfinite(g.top) && g.top > 0 && std::isfinite(g.tail) && g.tail >= 0,
          "smooth: the power form's coefficients must be finite, top > 0 and tail >= 0");
}

// diag(L^p), L the Neumann Laplacian of n nodes (p >= 0): L^p e_k stays within k +- p, so nodes
// further than p from both ends all have the interior value (node p's), computed once.
std::vector<double> neumann_power_diag(index_t n, int p) {
  std::vector<double> out(static_cast<std::size_t>(n), 1.0), v, t;
  if (p == 0) return out;
  for (index_t k = 0; k < n; ++k) {
    if (k > p && k < n - 1 - p) {  // interior: node p's value (k = p is computed before)
      out[std::size_t(k)] = out[std::size_t(p)];
      continue;
    }
    const index_t lo = std::max<index_t>(0, k - p), hi = std::min<index_t>(n - 1, k + p), m = hi - lo + 1;
    v.assign(static_cast<std::size_t>(m), 0.0);
    t.resize(v.size());
    v[std::size_t(k - lo)] = 1.0;
    for (int s = 0; s < p; ++s) {
      for (index_t i = 0; i < m; ++i) {
        const index_t gi = lo + i;
        double acc = 0.0;
        for (index_t nb : {gi - 1, gi + 1})
          if (nb >= 0 && nb < n) acc += v[std::size_t(i)] - (nb >= lo && nb <= hi ? v[std::size_t(nb - lo)] : 0.0);
        t[std::size_t(i)] = acc;
      }
      std::swap(v, t);
    }
    out[std::size_t(k)] = v[std::size_t(k - lo)];
  }
  return out;
}

// The bands of D2^T D2 (five: offsets -2..2) and D1^T D1 (three: -1..1) along an axis of n
// nodes, stored offset-major: band[(a + w) * n + k] = (D^T D)[k][k + a] (0 out of range).
template <typename T>
std::vector<T> gram_band(index_t n, int q) {
  const int w = q;  // half bandwidth
  std::vector<double> band(std::size_t((2 * w + 1) * n), 0.0);
  const double c2[3] = {1.0, -2.0, 1.0}, c1[2] = {-1.0, 1.0};
  const double* c = q == 2 ? c2 : c1;
  for (index_t r = 0; r + q < n; ++r)  // row r of D touches nodes r..r+q
    for (int u = 0; u <= q; ++u)
      for (int v = 0; v <= q; ++v) band[std::size_t((v - u + w) * n + r + u)] += c[u] * c[v];
  return std::vector<T>(band.begin(), band.end());
}

// The five bands of L^2, L = D1^T D1 (the Neumann Laplacian): the mirrored boundary's D2^T D2.
template <typename T>
std::vector<T> neumann_square_band(index_t n) {
  const std::vector<double> l = gram_band<double>(n, 1);  // offsets -1..1
  auto L = [&](index_t k, int a) { return (k >= 0 && k < n && k + a >= 0 && k + a < n) ? l[std::size_t((a + 1) * n + k)] : 0.0; };
  std::vector<T> band(std::size_t(5 * n), T(0));
  for (index_t k = 0; k < n; ++k)
    for (int a = -2; a <= 2; ++a) {
      double v = 0.0;  // (L^2)[k][k + a] = sum_b L[k][k + b] L[k + b][k + a]
      for (int b = -1; b <= 1; ++b)
        if (a - b >= -1 && a - b <= 1) v += L(k, b) * L(k + b, a - b);
      band[std::size_t((a + 2) * n + k)] = T(v);
    }
  return band;
}

template <typename T>
struct Bands {
  Grid g;
  std::vector<T> p[3], t[3];  // D2^T D2 (or L^2) and D1^T D1 along each axis
  // the Laplacian-power form: w_a^k diag(L_a^k) along axis a, k = 0..order (power_diag_row)
  std::vector<double> pd[3][4];
  explicit Bands(const Grid& grid) : g(grid) {
    check_grid(g);
    if (g.power()) {
      for (int a = 0; a < 3; ++a)
        for (int k = 0; k <= g.order; ++k) {
          pd[a][k] = neumann_power_diag(g.n[a], k);
          const double f = std::pow(g.w[a], k);
          for (double& v : pd[a][k]) v *= f;
        }
      return;
    }
    for (int a = 0; a < 3; ++a) {
      p[a] = g.reflect ? neumann_square_band<T>(g.n[a]) : gram_band<T>(g.n[a], 2);
      t[a] = gram_band<T>(g.n[a], 1);
    }
  }
  T P(int axis, int off, index_t k) const { return p[axis][std::size_t((off + 2) * g.n[axis] + k)]; }
  T Tm(int axis, int off, index_t k) const { return t[axis][std::size_t((off + 1) * g.n[axis] + k)]; }
  const T* P2(int off) const { return p[2].data() + (off + 2) * g.n[2]; }
  const T* T2(int off) const { return t[2].data() + (off + 1) * g.n[2]; }
};

// acc[0..n2) = (R x)[0, i1, :] on a grid of at most two axes (n[0] == 1) with n2 >= 5: one pass
// over the row, the axis-2 coefficients constant in its interior (offsets 2 .. n2 - 3), the four
// end nodes from the bands. The same sums as r_row, in another order.
template <typename T>
KRONPE_CLONES void r_row_2d(const Bands<T>& B, const T* __restrict x, index_t i1, T* __restrict acc) {
  const index_t n2 = B.g.n[2];
  const T* xr = x + i1 * n2;
  const T* r[5];  // rows i1 - 2 .. i1 + 2 (the row itself where the coefficient is 0)
  T c[5], s[3];   // D2^T D2 along axis 1; 2 x D1^T D1 along axis 1 (the 1-2 mixed term)
  for (int a = -2; a <= 2; ++a) {
    c[a + 2] = B.P(1, a, i1);
    const bool in = i1 + a >= 0 && i1 + a < B.g.n[1];
    r[a + 2] = in ? x + (i1 + a) * n2 : xr;
    if (!in) c[a + 2] = T(0);
  }
  for (int a = -1; a <= 1; ++a) s[a + 1] = r[a + 2] == xr && a != 0 ? T(0) : T(2) * B.Tm(1, a, i1);
  const T* __restrict r0 = r[0];
  const T* __restrict r1 = r[1];
  const T* __restrict r3 = r[3];
  const T* __restrict r4 = r[4];
  for (index_t i = 2; i < n2 - 2; ++i) {
    const T along = xr[i - 2] + xr[i + 2] - T(4) * (xr[i - 1] + xr[i + 1]) + T(6) * xr[i];
    const T across = c[0] * r0[i] + c[1] * r1[i] + c[2] * xr[i] + c[3] * r3[i] + c[4] * r4[i];
    const T mixed = s[0] * (T(2) * r1[i] - r1[i - 1] - r1[i + 1]) +
                    s[1] * (T(2) * xr[i] - xr[i - 1] - xr[i + 1]) +
                    s[2] * (T(2) * r3[i] - r3[i - 1] - r3[i + 1]);
    acc[i] = along + across + mixed;
  }
  for (index_t i : {index_t(0), index_t(1), n2 - 2, n2 - 1}) {
    T v = c[0] * r0[i] + c[1] * r1[i] + c[2] * xr[i] + c[3] * r3[i] + c[4] * r4[i];
    for (int a = -2; a <= 2; ++a)
      if (i + a >= 0 && i + a < n2) v += B.P2(a)[i] * xr[i + a];
    const T* m[3] = {r1, xr, r3};
    for (int a = 0; a < 3; ++a)
      for (int b = -1; b <= 1; ++b)
        if (i + b >= 0 && i + b < n2) v += s[a] * B.T2(b)[i] * m[a][i + b];
    acc[i] = v;
  }
}

// acc[0..n2) = (R x)[i0, i1, :].
template <typename T>
KRONPE_CLONES void r_row(const Bands<T>& B, const T* __restrict x, index_t i0, index_t i1,
                         T* __restrict acc) {
  const index_t n1 = B.g.n[1], n2 = B.g.n[2];
  if (B.g.n[0] == 1 && n2 >= 5) return r_row_2d(B, x, i1, acc);
  auto row = [&](index_t j0, index_t j1) { return x + (j0 * n1 + j1) * n2; };
  for (index_t i = 0; i < n2; ++i) acc[i] = T(0);
  auto axpy = [&](T c, const T* __restrict src) {
    for (index_t i = 0; i < n2; ++i) acc[i] += c * src[i];
  };
  // terms whose coefficient does not vary along axis 2: D2^T D2 along axes 0 and 1, the 0-1
  // mixed term (a zero band entry is exactly an out-of-range neighbour: skipped)
  for (int a = -2; a <= 2; ++a) {
    const T c0 = B.P(0, a, i0), c1 = B.P(1, a, i1);
    if (c0 != T(0)) axpy(c0, row(i0 + a, i1));
    if (c1 != T(0)) axpy(c1, row(i0, i1 + a));
  }
  for (int a = -1; a <= 1; ++a) {
    const T ta = B.Tm(0, a, i0);
    if (ta == T(0)) continue;
    for (int b = -1; b <= 1; ++b) {
      const T c = T(2) * ta * B.Tm(1, b, i1);
      if (c != T(0)) axpy(c, row(i0 + a, i1 + b));
    }
  }
  if (n2 <= 1) return;
  // terms along axis 2: D2^T D2 and the 0-2, 1-2 mixed terms, coefficients per node
  const T* xr = row(i0, i1);
  for (int a = -2; a <= 2; ++a) {
    const T* __restrict c = B.P2(a);
    const index_t lo = std::max<index_t>(0, -a), hi = std::min<index_t>(n2, n2 - a);
    for (index_t i = lo; i < hi; ++i) acc[i] += c[i] * xr[i + a];
  }
  for (int axis = 0; axis < 2; ++axis)
    for (int a = -1; a <= 1; ++a) {
      const T s = T(2) * B.Tm(axis, a, axis == 0 ? i0 : i1);
      if (s == T(0)) continue;
      const T* src = axis == 0 ? row(i0 + a, i1) : row(i0, i1 + a);
      for (int b = -1; b <= 1; ++b) {
        const T* __restrict c = B.T2(b);
        const index_t lo = std::max<index_t>(0, -b), hi = std::min<index_t>(n2, n2 - b);
        for (index_t i = lo; i < hi; ++i) acc[i] += s * c[i] * src[i + b];
      }
    }
}

// out = (c - up) + (c - dn) + the 1-D Neumann Laplacian of c along the row (n >= 2).
template <typename T>
KRONPE_CLONES void laplacian_row_generic(index_t n, const T* __restrict up, const T* __restrict c,
                                         const T* __restrict dn, T* __restrict out) {
  out[0] = (c[0] - up[0]) + (c[0] - dn[0]) + (c[0] - c[1]);
  for (index_t i = 1; i < n - 1; ++i)
    out[i] = (c[i] - up[i]) + (c[i] - dn[i]) + ((c[i] - c[i - 1]) + (c[i] - c[i + 1]));
  out[n - 1] = (c[n - 1] - up[n - 1]) + (c[n - 1] - dn[n - 1]) + (c[n - 1] - c[n - 2]);
}

#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx512f")
// The lanes [0, k) of 16 (0 <= k <= 16).
inline __mmask16 lanes(index_t k) { return static_cast<__mmask16>((1u << static_cast<unsigned>(k)) - 1u); }

// (x - u) + (x - d) + ((x - l) + (x - r)): the generic loop's sums in its order
inline __m512 laplacian_sum(__m512 x, __m512 u, __m512 d, __m512 l, __m512 r) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_sub_ps(x, u), _mm512_sub_ps(x, d)),
                       _mm512_add_ps(_mm512_sub_ps(x, l), _mm512_sub_ps(x, r)));
}

// [lo[S..15], hi[0..S-1]]: S = 15 with (hi, lo) = (cur, prev), [prev[15], cur[0..14]] (the left
// neighbours of cur); S = 1 with (next, cur), [cur[1..15], next[0]] (its right neighbours)
template <int S>
inline __m512 joined(__m512 hi, __m512 lo) {
  return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), S));
}

// laplacian_row for float with AVX-512: the row's left and right neighbours come from the
// vectors already loaded (valignd) instead of two more unaligned loads per vector (the loop was
// bound by its five loads), the ends mirrored (c[-1] = c[0], c[n] = c[n - 1]: (c - c) + x is x
// exactly, so every value is the generic loop's, bit for bit) and the last partial vector masked
// (no scalar tail).
void laplacian_row_avx512(index_t n, const float* up, const float* c, const float* dn, float* out) {
  __m512 prev = _mm512_set1_ps(c[0]);
  __m512 cur = n >= 16 ? _mm512_loadu_ps(c) : _mm512_maskz_loadu_ps(lanes(n), c);
  index_t i = 0;
  for (; i + 16 < n; i += 16) {
    const index_t rest = n - i - 16;
    const __m512 next = rest >= 16 ? _mm512_loadu_ps(c + i + 16) : _mm512_maskz_loadu_ps(lanes(rest), c + i + 16);
    _mm512_storeu_ps(out + i, laplacian_sum(cur, _mm512_loadu_ps(up + i), _mm512_loadu_ps(dn + i),
                                            joined<15>(cur, prev), joined<1>(next, cur)));
    prev = cur;
    cur = next;
  }
  const __mmask16 k = lanes(n - i);  // the last 1 to 16 values
  const __m512 right = _mm512_mask_loadu_ps(_mm512_set1_ps(c[n - 1]), lanes(n - i - 1), c + i + 1);
  _mm512_mask_storeu_ps(out + i, k,
                        laplacian_sum(cur, _mm512_maskz_loadu_ps(k, up + i), _mm512_maskz_loadu_ps(k, dn + i),
                                      joined<15>(cur, prev), right));
}

// Two laplacian_rows in one pass: lv = L v on a row (from v's rows up, c, dn) and out = L (L v)
// on the row before it (from L v's rows lup, lc and the lv just computed, in its register): the
// factored operator's steady state (FactoredRows::row), with one load and one call fewer per
// vector than the two calls; the same operations, so the same bits.
void laplacian_pair_avx512(index_t n, const float* up, const float* c, const float* dn, float* lv,
                           const float* lup, const float* lc, float* out) {
  __m512 prev = _mm512_set1_ps(c[0]), lprev = _mm512_set1_ps(lc[0]);
  __m512 cur = n >= 16 ? _mm512_loadu_ps(c) : _mm512_maskz_loadu_ps(lanes(n), c);
  __m512 lcur = n >= 16 ? _mm512_loadu_ps(lc) : _mm512_maskz_loadu_ps(lanes(n), lc);
  index_t i = 0;
  for (; i + 16 < n; i += 16) {
    const index_t rest = n - i - 16;
    const __mmask16 kn = rest >= 16 ? __mmask16(0xFFFF) : lanes(rest);
    const __m512 next = _mm512_maskz_loadu_ps(kn, c + i + 16);
    const __m512 lnext = _mm512_maskz_loadu_ps(kn, lc + i + 16);
    const __m512 l = laplacian_sum(cur, _mm512_loadu_ps(up + i), _mm512_loadu_ps(dn + i), joined<15>(cur, prev),
                                   joined<1>(next, cur));
    _mm512_storeu_ps(lv + i, l);
    _mm512_storeu_ps(out + i, laplacian_sum(lcur, _mm512_loadu_ps(lup + i), l, joined<15>(lcur, lprev),
                                            joined<1>(lnext, lcur)));
    prev = cur;
    cur = next;
    lprev = lcur;
    lcur = lnext;
  }
  const __mmask16 k = lanes(n - i), kr = lanes(n - i - 1);  // the last 1 to 16 values
  const __m512 right = _mm512_mask_loadu_ps(_mm512_set1_ps(c[n - 1]), kr, c + i + 1);
  const __m512 l = laplacian_sum(cur, _mm512_maskz_loadu_ps(k, up + i), _mm512_maskz_loadu_ps(k, dn + i),
                                 joined<15>(cur, prev), right);
  _mm512_mask_storeu_ps(lv + i, k, l);
  // lc[n - 1] is read after lv is written: lv and lc are rows of one ring, never the same row
  const __m512 lright = _mm512_mask_loadu_ps(_mm512_set1_ps(lc[n - 1]), kr, lc + i + 1);
  _mm512_mask_storeu_ps(out + i, k,
                        laplacian_sum(lcur, _mm512_maskz_loadu_ps(k, lup + i), l, joined<15>(lcur, lprev), lright));
}
KRONPE_AVX512_END
#endif

#if KRONPE_AVX512
// read once at load: the check per row (a call and a guard) was 1.5% of a 128^2 V-cycle
const bool kRowsAvx512 = cpu_has_avx512(false);
#endif

template <typename T>
inline void laplacian_row(index_t n, const T* up, const T* c, const T* dn, T* out) {
#if KRONPE_AVX512
  if constexpr (std::is_same_v<T, float>) {
    if (kRowsAvx512) {
      laplacian_row_avx512(n, up, c, dn, out);
      return;
    }
  }
#endif
  laplacian_row_generic(n, up, c, dn, out);
}

// lv = L v on row q + 1 (v's rows up, c, dn) and out = L (L v) on row q (L v's rows lup, lc, lv).
template <typename T>
inline void laplacian_pair(index_t n, const T* up, const T* c, const T* dn, T* lv, const T* lup, const T* lc,
                           T* out) {
#if KRONPE_AVX512
  if constexpr (std::is_same_v<T, float>) {
    if (kRowsAvx512) {
      laplacian_pair_avx512(n, up, c, dn, lv, lup, lc, out);
      return;
    }
  }
#endif
  laplacian_row_generic(n, up, c, dn, lv);
  laplacian_row_generic(n, lup, lc, lv, out);
}

template <typename T>
KRONPE_CLONES void axpy_diff(index_t n, T sign, const T* __restrict a, const T* __restrict b,
                             T* __restrict acc) {
  for (index_t i = 0; i < n; ++i) acc[i] += sign * (a[i] - b[i]);
}

// R v row by row on a plane (n[0] == 1, n[1] >= 4, n[2] >= 5) in factored form:
//
//     R = L^2 + [natural boundary] sum_i E_i,   L = sum_i L_i (the Neumann Laplacian, L_i = D1^T D1
//     along axis i), E_i = D2_i^T D2_i - L_i^2 = -(e_0 - e_1)(e_0 - e_1)^T - (e_{n-2} - e_{n-1})(...)^T
//
// (the mixed terms 2 L_i L_j are in L^2; the mirrored boundary's D2^T D2 is L_i^2 itself, so it
// has no E). L v costs a 5-point pass and L (L v) another over three rows of L v kept in a ring:
// about half the loads and flops of the 13-point stencil. Rows must come in increasing order
// within a run (a new run starts when they do not); every row gets the same operations however
// the rows are split, so results do not depend on the thread count.
template <typename T>
class FactoredRows {
 public:
  static bool applies(const Grid& g) { return g.n[0] == 1 && g.n[1] >= 4 && g.n[2] >= 5; }
  explicit FactoredRows(const Grid& g)
      : n1_(g.n[1]), n2_(g.n[2]), natural_(!g.reflect), ring_(static_cast<std::size_t>(3 * g.n[2])) {}

  void reset() { v_ = nullptr; }  // the next row starts a new run

  // acc[0..n2) = (R v)[row q]
  void row(const T* v, index_t q, T* __restrict acc) {
    if (v != v_ || q != next_) {  // a new run: L v of the rows before
      v_ = v;
      if (q > 0) laplacian(v, q - 1, slot(q - 1));
      laplacian(v, q, slot(q));
    }
    next_ = q + 1;
    if (q + 1 < n1_) {  // L v of the next row and L (L v) of this one, in one pass
      const T* c = v + (q + 1) * n2_;
      laplacian_pair(n2_, c - n2_, c, q + 2 < n1_ ? c + n2_ : c, slot(q + 1), slot(q - 1 + (q == 0)), slot(q), acc);
    } else {
      laplacian_row(n2_, slot(q - 1 + (q == 0)), slot(q), slot(q), acc);
    }
    if (!natural_) return;
    const T* r = v + q * n2_;
    // E along the rows' axis: rows 0, 1 and n1 - 2, n1 - 1
    const index_t pair = q < 2 ? 0 : (q >= n1_ - 2 ? n1_ - 2 : -1);
    if (pair >= 0) {
      const T* a = v + pair * n2_;
      const T* b = a + n2_;
      const T sign = q == pair ? T(-1) : T(1);
      axpy_diff(n2_, sign, a, b, acc);
    }
    // E along the row
    acc[0] -= r[0] - r[1];
    acc[1] += r[0] - r[1];
    acc[n2_ - 2] -= r[n2_ - 2] - r[n2_ - 1];
    acc[n2_ - 1] += r[n2_ - 2] - r[n2_ - 1];
  }

 private:
  T* slot(index_t q) { return ring_.data() + (q % 3) * n2_; }

  // out = (L v)[row q]
  void laplacian(const T* v, index_t q, T* out) {
    const T* c = v + q * n2_;
    laplacian_row(n2_, q > 0 ? c - n2_ : c, c, q + 1 < n1_ ? c + n2_ : c, out);
  }

  index_t n1_, n2_;
  bool natural_;
  std::vector<T> ring_;
  const T* v_ = nullptr;
  index_t next_ = -1;
};

// out = w0 ((c - p) + (c - nx)) + w1 ((c - u) + (c - d)) + w2 (the 1-D Neumann Laplacian of c
// along the row): the weighted Laplacian of a row from its four neighbour rows across (a
// neighbour outside the grid is c itself: no term).
template <typename T>
KRONPE_CLONES void weighted_laplacian_row(index_t n, T w0, T w1, T w2, const T* __restrict p,
                                          const T* __restrict u, const T* __restrict c,
                                          const T* __restrict d, const T* __restrict nx,
                                          T* __restrict out) {
  auto across = [&](index_t i) { return w0 * ((c[i] - p[i]) + (c[i] - nx[i])) + w1 * ((c[i] - u[i]) + (c[i] - d[i])); };
  if (n == 1) {
    out[0] = across(0);
    return;
  }
  out[0] = across(0) + w2 * (c[0] - c[1]);
  for (index_t i = 1; i < n - 1; ++i) out[i] = across(i) + w2 * ((c[i] - c[i - 1]) + (c[i] - c[i + 1]));
  out[n - 1] = across(n - 1) + w2 * (c[n - 1] - c[n - 2]);
}

// acc = top acc + tail low: the polynomial's two powers of a row.
template <typename T>
KRONPE_CLONES void combine_row(index_t n, T top, T tail, const T* __restrict low, T* __restrict acc) {
  for (index_t i = 0; i < n; ++i) acc[i] = top * acc[i] + tail * low[i];
}

// R v row by row in the Laplacian-power form (Grid::power): R = L_w^q, L_w = sum_i w_i L_i, as q
// weighted 7-point passes (5-point on an unweighted plane); a polynomial top L_w^q + tail L_w^(q-1)
// adds the ring's row of level q - 1 at the end (combine_row). Level k (1 <= k < q) holds L_w^k v in a ring of 2 (q - k) S + 1 rows,
// S the row distance of a neighbour across (n1 in 3-D, 1 on a plane): when row r is asked for,
// level k runs (q - k) S rows ahead, so each row of each level is computed once per run. Rows
// must come in increasing order within a run (a new run starts when they do not); every row
// gets the same operations however the rows are split, so results do not depend on the thread
// count.
template <typename T>
class PowerRows {
 public:
  explicit PowerRows(const Grid& g)
      : n0_(g.n[0]), n1_(g.n[1]), n2_(g.n[2]), q_(g.order), reach_(reach(g)), rows_(g.n[0] * g.n[1]),
        top_(T(g.top)), tail_(T(g.tail)), polynomial_(g.polynomial()),
        plane_(g.n[0] == 1 && g.n[2] >= 2 && g.w[1] == 1.0 && g.w[2] == 1.0) {
    for (int a = 0; a < 3; ++a) w_[a] = T(g.w[a]);
    for (int k = 1; k < q_; ++k) {
      cap_[k] = 2 * (q_ - k) * reach_ + 1;
      ring_[k].resize(static_cast<std::size_t>(cap_[k] * n2_));
    }
  }
  // the rows between a row and the farthest row its R v reads
  static index_t lag(const Grid& g) { return std::max<index_t>(1, g.order * reach(g)); }

  void reset() { v_ = nullptr; }

  // acc[0..n2) = (R v)[row r]
  void row(const T* v, index_t r, T* __restrict acc) {
    if (v != v_ || r != next_) {  // a new run: every level's rows up to its lead
      v_ = v;
      for (int k = 1; k < q_; ++k) {
        const index_t lead = (q_ - k) * reach_;
        for (index_t j = std::max<index_t>(0, r - lead); j <= std::min(rows_ - 1, r + lead); ++j) level_row(k, j);
      }
    } else {
      for (int k = 1; k < q_; ++k) {
        const index_t j = r + (q_ - k) * reach_;
        if (j < rows_) level_row(k, j);
      }
    }
    next_ = r + 1;
    apply(q_ - 1, r, acc);
    if (polynomial_) combine_row(n2_, top_, tail_, at(q_ - 1, r), acc);  // row r of level q - 1 is in its ring
  }

 private:
  static index_t reach(const Grid& g) { return g.n[0] > 1 ? g.n[1] : (g.n[1] > 1 ? 1 : 0); }
  const T* at(int k, index_t j) const {
    return k == 0 ? v_ + j * n2_ : ring_[k].data() + (j % cap_[k]) * n2_;
  }
  // out = (L_w level k)[row j]
  void apply(int k, index_t j, T* out) const {
    const index_t i0 = j / n1_, i1 = j % n1_;
    const T* c = at(k, j);
    if (plane_) {  // unweighted on a plane: the 5-point pass of FactoredRows (the same sums)
      laplacian_row(n2_, i1 > 0 ? at(k, j - 1) : c, c, i1 + 1 < n1_ ? at(k, j + 1) : c, out);
      return;
    }
    weighted_laplacian_row(n2_, w_[0], w_[1], w_[2], i0 > 0 ? at(k, j - n1_) : c, i1 > 0 ? at(k, j - 1) : c, c,
                           i1 + 1 < n1_ ? at(k, j + 1) : c, i0 + 1 < n0_ ? at(k, j + n1_) : c, out);
  }
  void level_row(int k, index_t j) { apply(k - 1, j, ring_[k].data() + (j % cap_[k]) * n2_); }

  index_t n0_, n1_, n2_;
  int q_;
  index_t reach_, rows_;
  T top_, tail_;
  bool polynomial_;
  bool plane_ = false;  // n0 == 1, n2 >= 2 and the in-plane weights 1: laplacian_row
  T w_[3];
  index_t cap_[3] = {0, 0, 0};
  std::vector<T> ring_[3];
  const T* v_ = nullptr;
  index_t next_ = -1;
};

// (R v) of a row: PowerRows for the Laplacian-power form, FactoredRows where it applies, else
// r_row. One per thread and pass.
template <typename T>
class RowsOf {
 public:
  explicit RowsOf(const Grid& g)
      : power_(g.power()), factored_(!power_ && FactoredRows<T>::applies(g)), f_(factored_ ? g : Grid{}),
        p_(power_ ? g : Grid{}) {}
  void reset() {  // the next row starts a new run
    f_.reset();
    p_.reset();
  }
  void row(const Bands<T>& B, const T* v, index_t i0, index_t i1, T* acc) {
    if (power_) p_.row(v, i0 * B.g.n[1] + i1, acc);
    else if (factored_) f_.row(v, i1, acc);
    else r_row(B, v, i0, i1, acc);
  }

 private:
  bool power_, factored_;
  FactoredRows<T> f_;
  PowerRows<T> p_;
};

// out[i] = sum_{a <= q} g[a] pd[a][i] (in double; the powers' loop outside, so that the nodes' vectorises).
template <typename T>
KRONPE_CLONES void power_diag_sum(index_t n, int q, const double* g, const std::vector<double>* pd,
                                  T* __restrict out) {
  const double* __restrict p0 = pd[0].data();
  const double* __restrict p1 = pd[1].data();
  const double* __restrict p2 = q >= 2 ? pd[2].data() : p1;
  const double* __restrict p3 = q >= 3 ? pd[3].data() : p1;
  const double g0 = g[0], g1 = g[1], g2 = q >= 2 ? g[2] : 0.0, g3 = q >= 3 ? g[3] : 0.0;
  for (index_t i = 0; i < n; ++i) out[i] = T(((g0 * p0[i] + g1 * p1[i]) + g2 * p2[i]) + g3 * p3[i]);
}

// diag(R) along the row (i0, i1, :) in the Laplacian-power form: diag((sum_a w_a L_a)^q) =
// sum over a0 + a1 + a2 = q of q! / (a0! a1! a2!) prod_a w_a^(a_a) diag(L_a^(a_a)) (the axes'
// factors commute and act on separate indices).
template <typename T>
void power_diag_row(const Bands<T>& B, index_t i0, index_t i1, T* __restrict out) {
  const double fact[4] = {1, 1, 2, 6};
  // g[a2]: the factor of w_2^a2 diag(L_2^a2), over the polynomial's powers q (top) and q - 1 (tail)
  double g[4] = {0, 0, 0, 0};
  for (int q = B.g.order; q >= B.g.order - 1; --q) {
    const double c = q == B.g.order ? B.g.top : B.g.tail;
    if (c == 0.0) continue;
    for (int a0 = 0; a0 <= q; ++a0)
      for (int a1 = 0; a0 + a1 <= q; ++a1) {
        const int a2 = q - a0 - a1;
        g[a2] += c * fact[q] / (fact[a0] * fact[a1] * fact[a2]) * B.pd[0][a0][std::size_t(i0)] *
                 B.pd[1][a1][std::size_t(i1)];
      }
  }
  power_diag_sum(B.g.n[2], B.g.order, g, B.pd[2], out);
}

// diag(R) along the row (i0, i1, :).
template <typename T>
void r_diag_row(const Bands<T>& B, index_t i0, index_t i1, T* __restrict out) {
  if (B.g.power()) return power_diag_row(B, i0, i1, out);
  const index_t n2 = B.g.n[2];
  const T p01 = B.P(0, 0, i0) + B.P(1, 0, i1);
  const T t0 = B.Tm(0, 0, i0), t1 = B.Tm(1, 0, i1);
  const T* p2 = B.P2(0);
  const T* t2 = B.T2(0);
  for (index_t i = 0; i < n2; ++i) out[i] = p01 + p2[i] + T(2) * (t0 * t1 + (t0 + t1) * t2[i]);
}

}  // namespace
}  // namespace kronpe::smooth
