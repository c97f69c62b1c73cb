// kronpe C++ core: the thin-plate operator and the multigrid transfers on the CPU (see
// kronpe/smooth.h for the definitions).
#include "kronpe/smooth.h"

#include "kronpe/avx512.h"
#include "kronpe/threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif



namespace kronpe::smooth {
namespace {

// Nodes per thread below which a kernel runs serially: these passes take well under a
// millisecond per million nodes, less than a fork/join costs on a busy machine.
constexpr index_t kMinNodesPerThread = index_t(1) << 13;
// Beyond two threads, a team takes one thread per g_nodes_per_extra_thread nodes at most: the
// wavefront's time steps end in a barrier, which costs more the more threads wait at it, and on
// many-core VMs late threads mark the cores busy (kronpe/threads.h). The scattered fit of 25% of a
// 512^2 photograph on a 16-core H200 machine (Xeon, Firecracker; tools/gpu_host_diag.py rule, medians
// of 7 fits, ms at 4 / 6 / 8 / 16 threads): one thread per 2^15 nodes 43.3 / 42.7 / 45.1 / 75.1 (36
// busy marks at 16), per 2^16 56.3 (noise: the same teams as 2^15 at 4) / 43.0 / 44.1 / 44.9 (7
// marks), per 2^17 53.1 / 47.8 / 52.6 / 53.4. 512^2 takes 4 threads, 256^2 two.
// set_nodes_per_extra_thread changes it (the diagnostics' comparisons).
std::atomic<index_t> g_nodes_per_extra_thread{index_t(1) << 16};
// Rows per time step of the smoother's wavefront on one thread (thin_plate_smooth).
constexpr index_t kBlockRows = 8;

int pick_threads(int threads, index_t nodes) {
  checked_threads(threads);
#ifdef KRONPE_OPENMP
  const index_t cap = threads > 0 ? threads : kernel_threads();  // fewer while the cores are busy
  const index_t extra = g_nodes_per_extra_thread.load(std::memory_order_relaxed);
  const index_t by_work = std::min(nodes / kMinNodesPerThread, std::max<index_t>(2, nodes / extra));
  return int(std::max<index_t>(1, std::min<index_t>(cap, by_work)));
#else
  return 1;
#endif
}

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

template <typename T>
class SmoothScratch {
 public:
  explicit SmoothScratch(const Grid& grid) : g(grid), bands(grid) {}
  bool serves(const Grid& h) const {
    bool same = g.reflect == h.reflect && g.order == h.order && g.weighted == h.weighted && g.top == h.top &&
                g.tail == h.tail;
    for (int a = 0; a < 3; ++a) same = same && g.n[a] == h.n[a] && g.w[a] == h.w[a];
    return same;
  }
  struct Thread {
    std::vector<T> acc, dg;          // scratch rows
    std::vector<RowsOf<T>> stencil;  // one ring per stage (for_rows: the first)
  };
  // thread t's scratch for `stages` stages, reset (made before a team starts: threads is not
  // resized inside one)
  void prepare(int nt, int stages) {
    if (int(threads.size()) < nt) threads.resize(static_cast<std::size_t>(nt));
    for (int t = 0; t < nt; ++t) {
      Thread& th = threads[std::size_t(t)];
      th.acc.resize(static_cast<std::size_t>(g.n[2]));
      th.dg.resize(static_cast<std::size_t>(g.n[2]));
      while (int(th.stencil.size()) < stages) th.stencil.emplace_back(g);
      for (RowsOf<T>& rows : th.stencil) rows.reset();
    }
  }
  Grid g;
  Bands<T> bands;
  std::vector<Thread> threads;
};

template <typename T>
std::shared_ptr<SmoothScratch<T>> smooth_scratch(const Grid& g) {
  check_grid(g);
  return std::make_shared<SmoothScratch<T>>(g);
}

// The scratch of grid g: `given` when it serves g, else a new one held by `own`.
template <typename T>
SmoothScratch<T>* scratch_for(const Grid& g, SmoothScratch<T>* given, std::shared_ptr<SmoothScratch<T>>& own) {
  if (given && given->serves(g)) return given;
  own = std::make_shared<SmoothScratch<T>>(g);
  return own.get();
}

namespace {

// Runs row(i0, i1, acc, dg, offset, stencil) over every row of the grid, rows split among threads
// in contiguous blocks, in increasing order; acc and dg are per-thread scratch rows, stencil the
// thread's RowsOf (R v of a row).
template <typename T, typename Row>
void for_rows(const Grid& g, int threads, Row&& row, SmoothScratch<T>* scratch = nullptr) {
  check_grid(g);
  const index_t rows = g.n[0] * g.n[1], n2 = g.n[2];
  if (g.size() == 0) return;
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const int nt = pick_threads(threads, g.size());
  scratch->prepare(nt, 1);
  run_team(nt, [&](int t, int) {
    auto& th = scratch->threads[std::size_t(t)];
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (index_t r = 0; r < rows; ++r) row(r / g.n[1], r % g.n[1], th.acc.data(), th.dg.data(), r * n2, th.stencil[0]);
  });
}

// 1 / a, or 0 for a node whose row of A is zero (no data, no penalty: it is left as it is).
template <typename T>
inline T inverse(T a) {
  return a > T(0) ? T(1) / a : T(0);
}

// The per-row epilogues, with every pointer restrict-qualified so that they vectorise. acc is
// (R x) of the row, w diag(A)^-1 of the row (0 where the row of A is zero).

// dg = diag(R) of a row -> diag(A)^-1 = inverse(m + lam dg), in place.
template <typename T>
KRONPE_CLONES void invert_row(index_t n, const T* __restrict m, T lam, T* __restrict dg) {
  for (index_t i = 0; i < n; ++i) dg[i] = inverse(m[i] + lam * dg[i]);
}
// w = inverse(m + lam rd): invert_row into another array.
template <typename T>
KRONPE_CLONES void invert_row_from(index_t n, const T* __restrict m, T lam, const T* __restrict rd,
                                   T* __restrict w) {
  for (index_t i = 0; i < n; ++i) w[i] = inverse(m[i] + lam * rd[i]);
}
template <typename T>
KRONPE_CLONES void apply_row(index_t n, const T* __restrict x, const T* __restrict m, T lam,
                             const T* __restrict acc, T* __restrict out) {
  for (index_t i = 0; i < n; ++i) out[i] = m[i] * x[i] + lam * acc[i];
}

template <typename T>
KRONPE_CLONES void residual_row(index_t n, const T* __restrict x, const T* __restrict b,
                                const T* __restrict m, T lam, const T* __restrict acc,
                                T* __restrict out) {
  for (index_t i = 0; i < n; ++i) out[i] = b[i] - (m[i] * x[i] + lam * acc[i]);
}

template <typename T>
KRONPE_CLONES void start_row(index_t n, const T* __restrict x, const T* __restrict b,
                             const T* __restrict m, T lam, T inv_theta, const T* __restrict acc,
                             const T* __restrict w, T* __restrict r, T* __restrict d) {
  if (x) {
    for (index_t i = 0; i < n; ++i) {
      const T res = (b[i] - (m[i] * x[i] + lam * acc[i])) * w[i];
      r[i] = res;
      d[i] = res * inv_theta;
    }
  } else {
    for (index_t i = 0; i < n; ++i) {
      const T res = b[i] * w[i];
      r[i] = res;
      d[i] = res * inv_theta;
    }
  }
}

// Where a smoother step reads the iterate's old values: x itself (in place), `start` (x only
// written: the smoother's start in another array), or zero (x only written, 0 + d: the bits of
// filling x with zeros first, without that pass).
enum class Old { X, Start, Zero };

template <Old S, typename T>
inline T old_value(const T* __restrict x, const T* __restrict start, index_t i) {
  if constexpr (S == Old::X) return x[i];
  else if constexpr (S == Old::Start) return start[i];
  else return T(0);
}

// One Chebyshev step over a row; x = old + d (start: Old::Start's array, else unused).
template <Old S, typename T>
KRONPE_CLONES void step_row(index_t n, const T* __restrict d, T* __restrict r, const T* __restrict start,
                            T* __restrict x, const T* __restrict m, T lam, T c1, T c2, const T* __restrict acc,
                            const T* __restrict w, T* __restrict d_out) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    r[i] = ri;
    x[i] = old_value<S>(x, start, i) + di;
    d_out[i] = c1 * di + c2 * ri;
  }
}

}  // namespace

template <typename T>
void thin_plate_apply(const Grid& g, const T* x, const T* m, T lam, T* out, int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T*, index_t o, RowsOf<T>& rows) {
    rows.row(B, x, i0, i1, acc);
    apply_row(g.n[2], x + o, m + o, lam, acc, out + o);
  }, scratch);
}

template <typename T>
void thin_plate_residual(const Grid& g, const T* x, const T* b, const T* m, T lam, T* out,
                         int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T*, index_t o, RowsOf<T>& rows) {
    rows.row(B, x, i0, i1, acc);
    residual_row(g.n[2], x + o, b + o, m + o, lam, acc, out + o);
  }, scratch);
}

template <typename T>
void thin_plate_cheb_start(const Grid& g, const T* x, const T* b, const T* m, T lam, T theta,
                           T* r, T* d, int threads) {
  const Bands<T> B(g);
  const T inv_theta = T(1) / theta;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T* dg, index_t o, RowsOf<T>& rows) {
    if (x) rows.row(B, x, i0, i1, acc);
    r_diag_row(B, i0, i1, dg);
    invert_row(g.n[2], m + o, lam, dg);
    start_row(g.n[2], x ? x + o : nullptr, b + o, m + o, lam, inv_theta, acc, dg, r + o, d + o);
  });
}

template <typename T>
void thin_plate_cheb_step(const Grid& g, const T* d, T* r, T* x, const T* m, T lam, T c1, T c2,
                          T* d_out, int threads) {
  const Bands<T> B(g);
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T* acc, T* dg, index_t o, RowsOf<T>& rows) {
    rows.row(B, d, i0, i1, acc);
    r_diag_row(B, i0, i1, dg);
    invert_row(g.n[2], m + o, lam, dg);
    step_row<Old::X>(g.n[2], d + o, r + o, static_cast<const T*>(nullptr), x + o, m + o, lam, c1, c2, acc, dg,
                     d_out + o);
  });
}

namespace {

// The last Chebyshev step with the smoother's final x += d_out folded in (d_out not stored):
// the same operations as step_row followed by x += d_out.
template <Old S, typename T>
KRONPE_CLONES void last_step_row(index_t n, const T* __restrict d, const T* __restrict r,
                                 const T* __restrict start, T* __restrict x, const T* __restrict m, T lam, T c1,
                                 T c2, const T* __restrict acc, const T* __restrict w) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    const T xi = old_value<S>(x, start, i) + di;
    x[i] = xi + (c1 * di + c2 * ri);
  }
}

// last_step_row with the result over-relaxed from `from`: x = from + omega (x_s - from).
template <typename T>
KRONPE_CLONES void last_step_relaxed_row(index_t n, const T* __restrict d, const T* __restrict r,
                                         T* __restrict x, const T* __restrict m, T lam, T c1, T c2,
                                         const T* __restrict acc, const T* __restrict w,
                                         const T* __restrict from, T omega) {
  for (index_t i = 0; i < n; ++i) {
    const T di = d[i];
    const T ri = r[i] - (m[i] * di + lam * acc[i]) * w[i];
    const T xi = x[i] + di;
    const T xs = xi + (c1 * di + c2 * ri);
    x[i] = from[i] + omega * (xs - from[i]);
  }
}

// x = from + omega ((x + d) - from) over a row (degree 1, over-relaxed).
template <typename T>
KRONPE_CLONES void add_relaxed_row(index_t n, const T* __restrict d, T* __restrict x, const T* __restrict from,
                                   T omega) {
  for (index_t i = 0; i < n; ++i) x[i] = from[i] + omega * ((x[i] + d[i]) - from[i]);
}

// x = old + d over a row (the smoother of degree 1: its start is its only step).
template <Old S, typename T>
KRONPE_CLONES void add_row(index_t n, const T* __restrict d, const T* __restrict start, T* __restrict x) {
  for (index_t i = 0; i < n; ++i) x[i] = old_value<S>(x, start, i) + d[i];
}

}  // namespace

// The stages (start, steps, residual) run as a wavefront over the rows: stage s works on row
// t - s * lag at time t, lag = the rows a stencil reaches (2 on a plane, two planes in 3-D), so
// every row a stage reads was finished by the stage before it, and a row of d is overwritten (two
// stages later) only once no stage reads it any more. The rows touched at one time lie within
// (stages x lag) rows: the smoother's work arrays stay in cache instead of streaming through
// memory once per stage. Threads take contiguous blocks of rows; each leaves out the rows within
// s * lag of a block boundary in stage s (they need the neighbour's rows), which one thread then
// finishes stage by stage. Every node gets the same operations as from the separate kernels.
template <typename T>
void thin_plate_smooth(const Grid& g, T* x, const T* b, const T* m, const T* w, T lam, T theta,
                       bool zero, int nsteps, const T* c1, const T* c2, T* r, T* d, T* d2, T* res,
                       int threads, SmoothScratch<T>* scratch, T* save, const T* from, T omega,
                       const T* start) {
  check_grid(g);
  require(nsteps >= 0, "thin_plate_smooth: nsteps must be >= 0");
  require(!(save && zero) && !(from && (res || zero)), "thin_plate_smooth: save needs a start x; from, no res");
  require(!(start && (zero || save || from)), "thin_plate_smooth: start excludes zero, save and from");
  if (g.size() == 0) return;
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  const index_t rows = g.n[0] * g.n[1], n2 = g.n[2];
  const index_t lag = g.power() ? PowerRows<T>::lag(g) : (g.n[0] > 1 ? std::max<index_t>(2, 2 * g.n[1]) : 2);
  // degree 1 (no steps): x += d is a stage of its own, a lag behind the start, whose stencil reads
  // x around its row (added in the start's stage, x changed under the next rows' stencils)
  const int adds = nsteps == 0 ? 1 : 0;
  const int stages = 1 + nsteps + adds + (res ? 1 : 0);
  const T inv_theta = T(1) / theta;
  int nt = pick_threads(threads, g.size());
  // each block boundary leaves a gap of 2 lag s rows in stage s, finished by one thread: blocks
  // must be at least the widest gap (a 32 x 64 x 64 volume: lag 128 rows, 19% of the row-stages
  // in the gaps; still 1.7x on two threads)
  if (rows < index_t(nt) * 2 * lag * std::max(1, stages - 1)) nt = 1;
  // stage s on rows [q0, q1): the stencil's R v row by row into acc (one row after another), then
  // the stage's epilogue over the rows at once (contiguous: each node gets the same operations as
  // from a row's call); acc: the calling thread's scratch, (q1 - q0) rows
  const bool plane = g.n[0] == 1;
  auto run = [&](int s, index_t q0, index_t q1, T* acc, std::vector<RowsOf<T>>& stencil) {
    const index_t o = q0 * n2, len = (q1 - q0) * n2;
    auto rows_of = [&](int k, const T* v) {
      for (index_t q = q0; q < q1; ++q)  // (a plane's rows need no division)
        stencil[k].row(B, v, plane ? 0 : q / g.n[1], plane ? q : q % g.n[1], acc + (q - q0) * n2);
    };
    if (s == 0) {
      // (stage 0 reads the start: with `start`, from there; in place, these rows of x still hold it)
      const T* x0 = start ? start : x;
      if (!zero) rows_of(0, x0);
      if (save) std::copy(x + o, x + o + len, save + o);
      start_row(len, zero ? nullptr : x0 + o, b + o, m + o, lam, inv_theta, acc, w + o, r + o, d + o);
    } else if (s <= nsteps + adds) {
      // the first step writes x from the start: x itself (in place), `start`, or zero (0 + d, x
      // not read: no pass filling it with zeros first); later steps update x in place
      const Old old = s > 1 || !(start || zero) ? Old::X : (start ? Old::Start : Old::Zero);
      const T* x0 = start ? start + o : nullptr;
      auto by_old = [&](auto&& f) {
        if (old == Old::Start) f(std::integral_constant<Old, Old::Start>());
        else if (old == Old::Zero) f(std::integral_constant<Old, Old::Zero>());
        else f(std::integral_constant<Old, Old::X>());
      };
      if (adds) {  // degree 1: x = old + d
        if (from) add_relaxed_row(len, d + o, x + o, from + o, omega);
        else by_old([&](auto S) { add_row<decltype(S)::value>(len, d + o, x0, x + o); });
        return;
      }
      const T* din = (s % 2 == 1 ? d : d2);
      T* dout = (s % 2 == 1 ? d2 : d);
      rows_of(s, din);
      const T c1s = c1[s - 1], c2s = c2[s - 1];
      if (s < nsteps) {
        by_old([&](auto S) {
          step_row<decltype(S)::value>(len, din + o, r + o, x0, x + o, m + o, lam, c1s, c2s, acc, w + o, dout + o);
        });
      } else if (from) {
        last_step_relaxed_row(len, din + o, r + o, x + o, m + o, lam, c1s, c2s, acc, w + o, from + o, omega);
      } else {
        by_old([&](auto S) {
          last_step_row<decltype(S)::value>(len, din + o, r + o, x0, x + o, m + o, lam, c1s, c2s, acc, w + o);
        });
      }
    } else {
      rows_of(s, x);
      residual_row(len, x + o, b + o, m + o, lam, acc, res + o);
    }
  };
  scratch->prepare(nt, stages);
  // on one thread the time steps take kBlockRows rows of every stage at once: the same wavefront
  // (every row a stage reads was finished by the stage before it in this step or an earlier one),
  // a kBlockRows-th of the epilogue calls (the rows' fixed costs were 31% of a 128^2 V-cycle)
  const index_t block = nt == 1 ? std::min<index_t>(kBlockRows, rows) : 1;
  if (block > 1) scratch->threads[0].acc.resize(static_cast<std::size_t>(block * n2));
  run_team(nt, [&](int t, int count) {
    std::vector<T>& acc = scratch->threads[std::size_t(t)].acc;
    std::vector<RowsOf<T>>& stencil = scratch->threads[std::size_t(t)].stencil;
    const index_t lo = rows * t / count, hi = rows * (t + 1) / count;
    for (index_t time = lo; time < hi + lag * (stages - 1); time += block)
      for (int s = 0; s < stages; ++s) {
        const index_t first = t > 0 ? lo + lag * s : lo, last = t + 1 < count ? hi - lag * s : hi;
        const index_t q0 = std::max(time - lag * s, first), q1 = std::min(time + block - lag * s, last);
        if (q0 < q1) run(s, q0, q1, acc.data(), stencil);
      }
    if (count == 1) return;
#ifdef KRONPE_OPENMP
#pragma omp barrier
#pragma omp single
#endif
    for (int s = 1; s < stages; ++s)  // the rows around each block boundary, stage by stage
      for (int k = 1; k < count; ++k) {
        const index_t edge = rows * k / count;
        for (index_t q = edge - lag * s; q < edge + lag * s; ++q) run(s, q, q + 1, acc.data(), stencil);
      }
  });
}

template <typename T>
void thin_plate_diag(const Grid& g, const T* m, T lam, T* out, int threads, bool inverted) {
  const Bands<T> B(g);
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T*, T* dg, index_t o, RowsOf<T>&) {
    r_diag_row(B, i0, i1, dg);
    if (inverted) {
      invert_row_from(g.n[2], m + o, lam, dg, out + o);
    } else {
      for (index_t i = 0; i < g.n[2]; ++i) out[o + i] = m[o + i] + lam * dg[i];
    }
  });
}

template <typename T>
void penalty_diag(const Grid& g, T* out, int threads, SmoothScratch<T>* scratch) {
  std::shared_ptr<SmoothScratch<T>> own;
  scratch = scratch_for(g, scratch, own);
  const Bands<T>& B = scratch->bands;
  for_rows<T>(g, threads, [&](index_t i0, index_t i1, T*, T*, index_t o, RowsOf<T>&) { r_diag_row(B, i0, i1, out + o); },
              scratch);
}

template <typename T>
void inverse_diag(index_t n, const T* m, T lam, const T* rd, T* w, int threads) {
  for_range(n, threads, [&](index_t lo, index_t hi) { invert_row_from(hi - lo, m + lo, lam, rd + lo, w + lo); });
}

namespace {

void check_transfer(const char* what, index_t outer, index_t n, index_t inner) {
  require(outer >= 0 && n >= 1 && inner >= 0, std::string(what) + ": bad shape");
  checked_mul(checked_mul(outer, n, what), inner, what);
}

template <bool Add, typename T>
inline void put(T& dst, T v) {
  if constexpr (Add) dst += v; else dst = v;
}

// One line (inner == 1) of P^T: c[j] = f[2j] + (f[2j - 1] + f[2j + 1]) / 2, terms in range.
template <typename T>
KRONPE_CLONES void restrict_line(index_t n, const T* __restrict f, T* __restrict c) {
  const index_t nc = coarse_length(n);
  c[0] = f[0] + (n > 1 ? T(0.5) * f[1] : T(0));
  index_t j = 1;
  for (; 2 * j + 1 < n; ++j) c[j] = f[2 * j] + T(0.5) * (f[2 * j - 1] + f[2 * j + 1]);
  for (; j < nc; ++j) c[j] = (2 * j < n ? f[2 * j] : T(0)) + T(0.5) * f[2 * j - 1];
}

// One line (inner == 1) of P: f[2j] = c[j], f[2j + 1] = (c[j] + c[j + 1]) / 2 (Add: f +=).
template <bool Add, typename T>
KRONPE_CLONES void prolong_line(index_t n, const T* __restrict c, T* __restrict f) {
  index_t j = 0;
  for (; 2 * j + 1 < n; ++j) {
    put<Add>(f[2 * j], c[j]);
    put<Add>(f[2 * j + 1], T(0.5) * (c[j] + c[j + 1]));
  }
  if (2 * j < n) put<Add>(f[2 * j], c[j]);
}

// Fine node k of a plane (inner > 1): rows of `inner` values, vectorised along the row.
template <typename T>
KRONPE_CLONES void restrict_row(index_t n, index_t inner, const T* __restrict f, index_t j,
                                T* __restrict dst) {
  const index_t k = 2 * j;
  const T* a = f + k * inner;
  const bool lo = k - 1 >= 0, hi = k + 1 < n, mid = k < n;
  for (index_t i = 0; i < inner; ++i) {
    T v = mid ? a[i] : T(0);
    if (lo) v += T(0.5) * a[i - inner];
    if (hi) v += T(0.5) * a[i + inner];
    dst[i] = v;
  }
}

template <bool Add, typename T>
KRONPE_CLONES void prolong_row(index_t inner, const T* __restrict c, index_t k,
                               T* __restrict dst) {
  const T* a = c + (k / 2) * inner;
  if (k % 2 == 0) {
    for (index_t i = 0; i < inner; ++i) put<Add>(dst[i], a[i]);
  } else {
    for (index_t i = 0; i < inner; ++i) put<Add>(dst[i], T(0.5) * (a[i] + a[i + inner]));
  }
}

// Runs line(o) over the outer index (inner == 1) or row(o, k) over (outer, k < out_n), split
// among threads.
template <typename Line, typename Row>
void for_transfer(index_t outer, index_t n, index_t inner, index_t out_n, int threads,
                  Line&& line, Row&& row) {
  run_team(pick_threads(threads, outer * n * inner), [&](int, int) {
    if (inner == 1) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
      for (index_t o = 0; o < outer; ++o) line(o);
    } else {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) collapse(2) nowait
#endif
      for (index_t o = 0; o < outer; ++o)
        for (index_t k = 0; k < out_n; ++k) row(o, k);
    }
  });
}

template <bool Add, typename T>
void prolong_impl(index_t outer, index_t n, index_t inner, const T* c, T* f, int threads) {
  const index_t nc = coarse_length(n);
  for_transfer(
      outer, n, inner, n, threads, [&](index_t o) { prolong_line<Add>(n, c + o * nc, f + o * n); },
      [&](index_t o, index_t k) { prolong_row<Add>(inner, c + o * nc * inner, k, f + (o * n + k) * inner); });
}

}  // namespace

template <typename T>
void restrict_axis(index_t outer, index_t n, index_t inner, const T* f, T* c, int threads) {
  check_transfer("restrict_axis", outer, n, inner);
  const index_t nc = coarse_length(n);
  for_transfer(
      outer, n, inner, nc, threads, [&](index_t o) { restrict_line(n, f + o * n, c + o * nc); },
      [&](index_t o, index_t j) { restrict_row(n, inner, f + o * n * inner, j, c + (o * nc + j) * inner); });
}

template <typename T>
void prolong_axis(index_t outer, index_t n, index_t inner, const T* c, T* f, bool add, int threads) {
  check_transfer("prolong_axis", outer, n, inner);
  if (add) prolong_impl<true>(outer, n, inner, c, f, threads);
  else prolong_impl<false>(outer, n, inner, c, f, threads);
}

namespace {

// Eight partial sums in double, so that the loop vectorises (float: converted four at a time).
template <typename T>
KRONPE_CLONES double dot_block(index_t n, const T* __restrict a, const T* __restrict b) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += double(a[i + k]) * double(b[i + k]);
  double t = 0.0;
  for (; i < n; ++i) t += double(a[i]) * double(b[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

}  // namespace

// Blocks of a dot product: their partial sums are added in block order, so the result does not
// depend on how many threads computed them.
constexpr index_t kDotBlock = index_t(1) << 15;

namespace {

// K sums over [0, n) in blocks of kDotBlock values: block(lo, len, part) writes the K partial
// sums of one block; they are added in block order, so the sums do not depend on the thread count.
template <int K, typename F>
void blocked_sums(index_t n, int threads, double out[K], F&& block) {
  for (int k = 0; k < K; ++k) out[k] = 0.0;
  if (n <= kDotBlock) {
    if (n) block(index_t(0), n, out);
    return;
  }
  const index_t blocks = (n + kDotBlock - 1) / kDotBlock;
  std::vector<double> part(static_cast<std::size_t>(blocks * K));
  run_team(pick_threads(threads, n), [&](int, int) {
#ifdef KRONPE_OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (index_t b = 0; b < blocks; ++b) {
      const index_t lo = b * kDotBlock;
      block(lo, std::min(kDotBlock, n - lo), part.data() + b * K);
    }
  });
  for (index_t b = 0; b < blocks; ++b)
    for (int k = 0; k < K; ++k) out[k] += part[std::size_t(b * K + k)];
}

// x += a p, r -= a q over one block, and x . x after it, summed as dot_block sums
template <typename T>
KRONPE_CLONES double update_norm_block(index_t n, T a, const T* __restrict p, const T* __restrict q,
                                       T* __restrict x, T* __restrict r) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      x[i + k] += a * p[i + k];
      r[i + k] -= a * q[i + k];
      s[k] += double(x[i + k]) * double(x[i + k]);
    }
  double t = 0.0;
  for (; i < n; ++i) {
    x[i] += a * p[i];
    r[i] -= a * q[i];
    t += double(x[i]) * double(x[i]);
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + t;
}

}  // namespace

template <typename T>
double dot(index_t n, const T* a, const T* b, int threads) {
  require(n >= 0, "dot: negative length");
  double s;
  blocked_sums<1>(n, threads, &s, [&](index_t lo, index_t len, double* part) {
    part[0] = dot_block(len, a + lo, b + lo);
  });
  return s;
}

namespace {

// sum f c and sum f^2 w over one block for G ridges at once (one pass over m, c and w: the
// curve is read from memory once per G ridges), f = lam / (m + lam): eight partial sums per sum,
// as dot_block adds them, without fused multiply-adds, so that every ridge's sums are the same
// bits whatever G and the CPU.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
template <int G>
KRONPE_CLONES void gcv_block(index_t n, const double* lam, const double* __restrict m,
                             const double* __restrict c, const double* __restrict w, double* part) {
  double a[G][8] = {}, b[G][8] = {};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int g = 0; g < G; ++g)
      for (int k = 0; k < 8; ++k) {
        const double f = lam[g] / (m[i + k] + lam[g]);
        a[g][k] += f * c[i + k];
        b[g][k] += f * f * w[i + k];
      }
  for (int g = 0; g < G; ++g) {
    double ta = 0.0, tb = 0.0;
    for (index_t j = i; j < n; ++j) {
      const double f = lam[g] / (m[j] + lam[g]);
      ta += f * c[j];
      tb += f * f * w[j];
    }
    part[2 * g] = ((a[g][0] + a[g][1]) + (a[g][2] + a[g][3])) + ((a[g][4] + a[g][5]) + (a[g][6] + a[g][7])) + ta;
    part[2 * g + 1] = ((b[g][0] + b[g][1]) + (b[g][2] + b[g][3])) + ((b[g][4] + b[g][5]) + (b[g][6] + b[g][7])) + tb;
  }
}
#pragma GCC pop_options

}  // namespace

void gcv_scores(index_t r, const double* m, const double* c, const double* w, index_t L,
                const double* ridges, double rss0, double n, double total, double* scores,
                int threads) {
  require(r >= 0 && L >= 0, "gcv_scores: negative length");
  constexpr int G = 4;  // ridges per pass
  for (index_t l0 = 0; l0 < L; l0 += G) {
    const int g = int(std::min<index_t>(G, L - l0));
    double lam[G], s[2 * G];
    for (int k = 0; k < G; ++k) lam[k] = ridges[l0 + std::min(k, g - 1)];  // a short group repeats its last
    auto pass = [&](auto width) {  // one ridge alone (the golden section's steps), or G
      constexpr int W = decltype(width)::value;
      blocked_sums<2 * W>(r, threads, s, [&](index_t lo, index_t len, double* part) {
        gcv_block<W>(len, lam, m + lo, c + lo, w + lo, part);
      });
    };
    if (g == 1) pass(std::integral_constant<int, 1>{});
    else pass(std::integral_constant<int, G>{});
    for (int k = 0; k < g; ++k) {
      const double rss = rss0 + s[2 * k + 1];
      const double dof = std::max(n - (total - s[2 * k]), 1e-300);
      scores[l0 + k] = n * rss / (dof * dof);
    }
  }
}

namespace {

// dots for c(c + 1) / 2 == K pairs: K sums per block, each a dot_block
template <int K, typename T>
void pair_dots(index_t n, int c, const T* const* a, double* S, int threads) {
  double sums[K];
  blocked_sums<K>(n, threads, sums, [&](index_t lo, index_t len, double* part) {
    int k = 0;
    for (int i = 0; i < c; ++i)
      for (int j = 0; j <= i; ++j) part[k++] = dot_block(len, a[i] + lo, a[j] + lo);
  });
  int k = 0;
  for (int i = 0; i < c; ++i)
    for (int j = 0; j <= i; ++j) S[i * c + j] = S[j * c + i] = sums[k++];
}

}  // namespace

template <typename T>
void dots(index_t n, int c, const T* const* a, double* S, int threads) {
  require(n >= 0 && c >= 1, "dots: negative length or no arrays");
  switch (c) {
    case 1: return pair_dots<1>(n, c, a, S, threads);
    case 2: return pair_dots<3>(n, c, a, S, threads);
    case 3: return pair_dots<6>(n, c, a, S, threads);
    case 4: return pair_dots<10>(n, c, a, S, threads);
    default:
      for (int i = 0; i < c; ++i)
        for (int j = 0; j <= i; ++j) S[i * c + j] = S[j * c + i] = dot(n, a[i], a[j], threads);
  }
}

template <typename T>
void dot2(index_t n, const T* a, const T* b, const T* c, const T* d, double out[2], int threads) {
  require(n >= 0, "dot2: negative length");
  // one block of the four arrays (128 kB of float32 each) stays in cache between the two sums
  blocked_sums<2>(n, threads, out, [&](index_t lo, index_t len, double* part) {
    part[0] = dot_block(len, a + lo, b + lo);
    part[1] = dot_block(len, c + lo, d + lo);
  });
}

template <typename T>
double cg_update_norm(index_t n, T alpha, const T* p, const T* q, T* x, T* r, int threads) {
  require(n >= 0, "cg_update_norm: negative length");
  double s;
  blocked_sums<1>(n, threads, &s, [&](index_t lo, index_t len, double* part) {
    part[0] = update_norm_block(len, alpha, p + lo, q + lo, x + lo, r + lo);
  });
  return s;
}

index_t set_nodes_per_extra_thread(index_t nodes) {
  require(nodes >= kMinNodesPerThread, "set_nodes_per_extra_thread: nodes must be at least 8192");
  return g_nodes_per_extra_thread.exchange(nodes);
}

void for_range(index_t n, int threads, const std::function<void(index_t, index_t)>& f) {
  run_team(pick_threads(threads, n), [&](int t, int count) {
    f(n * index_t(t) / count, n * index_t(t + 1) / count);
  });
}

#define KRONPE_SMOOTH_INSTANTIATE(T)                                                            \
  template void thin_plate_apply<T>(const Grid&, const T*, const T*, T, T*, int, SmoothScratch<T>*); \
  template void thin_plate_residual<T>(const Grid&, const T*, const T*, const T*, T, T*, int,        \
                                       SmoothScratch<T>*);                                           \
  template void thin_plate_cheb_start<T>(const Grid&, const T*, const T*, const T*, T, T, T*,  \
                                         T*, int);                                              \
  template void thin_plate_cheb_step<T>(const Grid&, const T*, T*, T*, const T*, T, T, T, T*,  \
                                        int);                                                   \
  template void thin_plate_diag<T>(const Grid&, const T*, T, T*, int, bool);                         \
  template void penalty_diag<T>(const Grid&, T*, int, SmoothScratch<T>*);                                          \
  template void inverse_diag<T>(index_t, const T*, T, const T*, T*, int);                       \
  template void thin_plate_smooth<T>(const Grid&, T*, const T*, const T*, const T*, T, T, bool, \
                                     int, const T*, const T*, T*, T*, T*, T*, int,               \
                                     SmoothScratch<T>*, T*, const T*, T, const T*);               \
  template std::shared_ptr<SmoothScratch<T>> smooth_scratch<T>(const Grid&);                     \
  template void restrict_axis<T>(index_t, index_t, index_t, const T*, T*, int);                \
  template void prolong_axis<T>(index_t, index_t, index_t, const T*, T*, bool, int);              \
  template double dot<T>(index_t, const T*, const T*, int);                                     \
  template void dots<T>(index_t, int, const T* const*, double*, int);                          \
  template void dot2<T>(index_t, const T*, const T*, const T*, const T*, double[2], int);       \
  template double cg_update_norm<T>(index_t, T, const T*, const T*, T*, T*, int);

KRONPE_SMOOTH_INSTANTIATE(float)
KRONPE_SMOOTH_INSTANTIATE(double)

}  // namespace kronpe::smooth
