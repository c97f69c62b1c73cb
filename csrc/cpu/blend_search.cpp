// kronpe C++ core: the blending matrix's weight function on the CPU (kronpe/blend.h): per-axis
// tables, the cell search of a block of coordinates (scalar, or 8 / 4 points at a time with
// AVX-512 / AVX2), the weight pairs and the 2^D corner products; the vector path in force.
#include "kronpe/blend.h"

#include "blend_internal.h"
#include "kronpe/avx512.h"
#include "kronpe/simd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

// The weight loops are KRONPE_CLONES (kronpe/common.h); CMakeLists.txt turns floating-point
// contraction off for this file, so that every clone gives the bits of the baseline one.

namespace kronpe::blend {

using detail::wrapping_add;

namespace {

// Axes of at most this many nodes may search their cells with int lanes (cells_avx512, _avx2).
constexpr index_t kMaxIntCells = index_t(1) << 30;

// The vector cell searches' last group of m < W points: group(x, j, g0, h, dh, dt) on a copy
// padded with lo, its m results copied back; returns group's mask of wrong guesses among them.
// (The full groups' loops stay in cells_avx512 and cells_avx2: through a shared driver the group
// is a call per W points, not inlined across the target regions, 5-10% slower.)
template <int W, typename Group>
int cells_padded(Group&& group, double lo, index_t m, double* x, index_t* j, double* g0, double* h,
                 double* dh, double* dt) {
  double px[W], pg0[W], ph[W], pdh[W], pdt[W];
  index_t pj[W];
  std::fill(px, px + W, lo);
  std::copy(x, x + m, px);
  const int wrong = group(px, pj, pg0, ph, pdh, pdt) & ((1 << m) - 1);
  std::copy(px, px + m, x);
  std::copy(pj, pj + m, j);
  std::copy(pg0, pg0 + m, g0);
  std::copy(ph, ph + m, h);
  std::copy(pdh, pdh + m, dh);
  std::copy(pdt, pdt + m, dt);
  return wrong;
}

#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx512f,avx512dq,avx512vl")
// Pass 1 of Axis::weights on a uniform axis, 8 points at a time: x (n) clamped onto [lo, hi] in
// place (NaN goes to lo), the cell j = (x - lo) inv_h, its row (g[j], g[j + 1], Dh[j], dt[j]) of
// cells4 loaded (one load per point, then a transpose: gathers were slower), the guess checked
// against the nodes, and the cell's entries g0 = g[j], h = g[j + 1] - g0, dh, dt. Points whose
// guess is wrong (within rounding of a node; nodes off the even spacing) get j = -1: the caller
// searches them and overwrites their entries. The scalar pass's operations (same bits). Plain
// stores, a last partial group on a padded copy (masked stores made the pass 2.4x slower on this
// Zen 4). Returns whether some point needs that search.
inline int cells8_avx512(const double* cells4, __m256i vtop, __m512d vlo, __m512d vhi,
                         __m512d vinv, double* x, index_t* j, double* g0, double* h, double* dh,
                         double* dt) {
  const __m256i zero = _mm256_setzero_si256();
  alignas(32) int ci[8];
  __m512d xb = _mm512_loadu_pd(x);
  xb = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(xb, vlo, _CMP_GE_OQ), vlo, xb);  // NaN too
  xb = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(xb, vhi, _CMP_GT_OQ), xb, vhi);
  __m256i c = _mm512_cvttpd_epi32(_mm512_mul_pd(_mm512_sub_pd(xb, vlo), vinv));
  c = _mm256_min_epi32(_mm256_max_epi32(c, zero), vtop);
  _mm256_store_si256(reinterpret_cast<__m256i*>(ci), c);
  // the 8 cells' rows (g0, g1, dh, dt), transposed: z0 = [r0 | r2], z1 = [r1 | r3], ...
  __m256d r[8];
  for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_pd(cells4 + 4 * index_t(ci[l]));
  const __m512d z0 = _mm512_insertf64x4(_mm512_castpd256_pd512(r[0]), r[2], 1);
  const __m512d z1 = _mm512_insertf64x4(_mm512_castpd256_pd512(r[1]), r[3], 1);
  const __m512d z2 = _mm512_insertf64x4(_mm512_castpd256_pd512(r[4]), r[6], 1);
  const __m512d z3 = _mm512_insertf64x4(_mm512_castpd256_pd512(r[5]), r[7], 1);
  const __m512d t0 = _mm512_unpacklo_pd(z0, z1), t1 = _mm512_unpackhi_pd(z0, z1);
  const __m512d t2 = _mm512_unpacklo_pd(z2, z3), t3 = _mm512_unpackhi_pd(z2, z3);
  const __m512d gl = _mm512_shuffle_f64x2(t0, t2, 0x88), gr = _mm512_shuffle_f64x2(t1, t3, 0x88);
  const __mmask8 below = _mm256_cmpgt_epi32_mask(c, zero) & _mm512_cmp_pd_mask(xb, gl, _CMP_LT_OQ);
  const __mmask8 above = _mm256_cmpgt_epi32_mask(vtop, c) & _mm512_cmp_pd_mask(xb, gr, _CMP_GE_OQ);
  const __mmask8 off = __mmask8(below | above);
  _mm512_storeu_pd(x, xb);
  _mm512_storeu_si512(j, _mm512_mask_blend_epi64(off, _mm512_cvtepi32_epi64(c), _mm512_set1_epi64(-1)));
  _mm512_storeu_pd(g0, gl);
  _mm512_storeu_pd(h, _mm512_sub_pd(gr, gl));
  _mm512_storeu_pd(dh, _mm512_shuffle_f64x2(t0, t2, 0xDD));
  _mm512_storeu_pd(dt, _mm512_shuffle_f64x2(t1, t3, 0xDD));
  return off;
}

bool cells_avx512(const double* cells4, int top, double lo, double hi, double inv_h, index_t n,
                  double* x, index_t* j, double* g0, double* h, double* dh, double* dt) {
  const __m512d vlo = _mm512_set1_pd(lo), vhi = _mm512_set1_pd(hi), vinv = _mm512_set1_pd(inv_h);
  const __m256i vtop = _mm256_set1_epi32(top);
  int wrong = 0;
  index_t b = 0;
  for (; b + 8 <= n; b += 8)
    wrong |= cells8_avx512(cells4, vtop, vlo, vhi, vinv, x + b, j + b, g0 + b, h + b, dh + b, dt + b);
  if (b < n)
    wrong |= cells_padded<8>(
        [&](double* px, index_t* pj, double* pg0, double* ph, double* pdh, double* pdt) {
          return cells8_avx512(cells4, vtop, vlo, vhi, vinv, px, pj, pg0, ph, pdh, pdt);
        },
        lo, n - b, x + b, j + b, g0 + b, h + b, dh + b, dt + b);
  return wrong != 0;
}
KRONPE_AVX512_END

KRONPE_AVX512_BEGIN("avx2")
// cells_avx512 on AVX2 machines, 4 points at a time: the same steps (a 4 x 4 transpose of the
// cells' rows), the same bits. Plain stores (AVX2's masked stores are microcoded on AMD's cores:
// as slow as the scalar loop); the lanes of wrong guesses are overwritten by the caller's search,
// and a last partial group runs on a padded copy.
inline int cells4_avx2(const double* cells4, __m128i vtop, __m256d vlo, __m256d vhi, __m256d vinv,
                       double* x, index_t* j, double* g0, double* h, double* dh, double* dt) {
  const __m128i zero = _mm_setzero_si128();
  alignas(16) int ci[4];
  __m256d xb = _mm256_loadu_pd(x);
  xb = _mm256_blendv_pd(vlo, xb, _mm256_cmp_pd(xb, vlo, _CMP_GE_OQ));  // NaN too
  xb = _mm256_blendv_pd(xb, vhi, _mm256_cmp_pd(xb, vhi, _CMP_GT_OQ));
  __m128i c = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_sub_pd(xb, vlo), vinv));
  c = _mm_min_epi32(_mm_max_epi32(c, zero), vtop);
  _mm_store_si128(reinterpret_cast<__m128i*>(ci), c);
  const __m256d r0 = _mm256_loadu_pd(cells4 + 4 * index_t(ci[0])), r1 = _mm256_loadu_pd(cells4 + 4 * index_t(ci[1]));
  const __m256d r2 = _mm256_loadu_pd(cells4 + 4 * index_t(ci[2])), r3 = _mm256_loadu_pd(cells4 + 4 * index_t(ci[3]));
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  const __m256d gl = _mm256_permute2f128_pd(t0, t2, 0x20), gr = _mm256_permute2f128_pd(t1, t3, 0x20);
  const __m256d pos = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(c, zero)));
  const __m256d inner = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpgt_epi32(vtop, c)));
  const __m256d off = _mm256_or_pd(_mm256_and_pd(pos, _mm256_cmp_pd(xb, gl, _CMP_LT_OQ)),
                                   _mm256_and_pd(inner, _mm256_cmp_pd(xb, gr, _CMP_GE_OQ)));
  _mm256_storeu_pd(x, xb);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(j),
                      _mm256_or_si256(_mm256_cvtepi32_epi64(c), _mm256_castpd_si256(off)));  // -1
  _mm256_storeu_pd(g0, gl);
  _mm256_storeu_pd(h, _mm256_sub_pd(gr, gl));
  _mm256_storeu_pd(dh, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dt, _mm256_permute2f128_pd(t1, t3, 0x31));
  return _mm256_movemask_pd(off);
}

bool cells_avx2(const double* cells4, int top, double lo, double hi, double inv_h, index_t n,
                double* x, index_t* j, double* g0, double* h, double* dh, double* dt) {
  const __m256d vlo = _mm256_set1_pd(lo), vhi = _mm256_set1_pd(hi), vinv = _mm256_set1_pd(inv_h);
  const __m128i vtop = _mm_set1_epi32(top);
  int wrong = 0;
  index_t b = 0;
  for (; b + 4 <= n; b += 4)
    wrong |= cells4_avx2(cells4, vtop, vlo, vhi, vinv, x + b, j + b, g0 + b, h + b, dh + b, dt + b);
  if (b < n)
    wrong |= cells_padded<4>(
        [&](double* px, index_t* pj, double* pg0, double* ph, double* pdh, double* pdt) {
          return cells4_avx2(cells4, vtop, vlo, vhi, vinv, px, pj, pg0, ph, pdh, pdt);
        },
        lo, n - b, x + b, j + b, g0 + b, h + b, dh + b, dt + b);
  return wrong != 0;
}
KRONPE_AVX512_END

// The blend kernels' vector paths: 2 AVX-512 (cells_avx512, gather_rows_avx512), 1 AVX2
// (cells_avx2), 0 neither. From the CPU at load; set_simd lowers it for the tests' comparisons.
int cpu_simd() {
  if (cpu_has_avx512(true)) return 2;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && simd_cap() >= 1 ? 1 : 0;
}
std::atomic<int> g_simd{cpu_simd()};
#endif

}  // namespace

WeightFunction::WeightFunction(const std::vector<AxisSpec>& axes, bool normalize)
    : normalize_(normalize) {
  const int D = int(axes.size());
  require(D >= 1 && D <= kMaxDims,
          "blend: the number of axes must be in [1, " + std::to_string(kMaxDims) + "], got " +
              std::to_string(D));
  axes_.resize(size_t(D));
  strides_.assign(size_t(D), 1);
  for (int i = 0; i < D; ++i) {
    const AxisSpec& s = axes[size_t(i)];
    require(s.M >= 2, "blend: every axis needs at least 2 grid nodes, axis " + std::to_string(i) +
                          " has " + std::to_string(s.M));
    require(int(s.kind) >= 0 && int(s.kind) <= 4, "blend: unknown weight kind");
    require(std::isfinite(s.param), "blend: the weight parameter must be finite");
    Axis& a = axes_[size_t(i)];
    a.nodes.assign(s.nodes, s.nodes + s.M);
    for (index_t k = 0; k < s.M; ++k)
      require(std::isfinite(a.nodes[size_t(k)]), "blend: grid nodes must be finite");
    for (index_t k = 0; k + 1 < s.M; ++k)
      require(a.nodes[size_t(k)] < a.nodes[size_t(k + 1)],
              "blend: grid nodes must be strictly increasing along axis " + std::to_string(i));
    a.kind = s.kind;
    a.param = s.param;
    a.lo = a.nodes.front();
    a.hi = a.nodes.back();
    const double h = (a.hi - a.lo) / double(s.M - 1);
    a.inv_h = 1.0 / h;
    double dev = 0.0;
    for (index_t k = 0; k < s.M; ++k)
      dev = std::max(dev, std::fabs(a.nodes[size_t(k)] - (a.lo + double(k) * h)));
    a.uniform = dev <= h;  // the cell guess is then off by at most a couple of cells
    a.D0 = distance(a.kind, a.param, 0.0);
    a.Dh.resize(size_t(s.M - 1));
    a.det.resize(size_t(s.M - 1));
    a.singular.resize(size_t(s.M - 1));
    a.cell_dt.resize(size_t(s.M - 1));
    for (index_t k = 0; k + 1 < s.M; ++k) {
      const double hk = a.nodes[size_t(k + 1)] - a.nodes[size_t(k)];
      const double Dh = distance(a.kind, a.param, hk);
      const double det = a.D0 * a.D0 - Dh * Dh;
      a.Dh[size_t(k)] = Dh;
      a.det[size_t(k)] = det;
      a.singular[size_t(k)] =
          a.kind == Kernel::linear || !(det > kSingularRcond * a.D0 * a.D0) ? 1 : 0;
      a.cell_dt[size_t(k)] = a.singular[size_t(k)] ? 0.0 : det;
    }
    a.cells4.resize(size_t(4 * (s.M - 1)));
    for (index_t k = 0; k + 1 < s.M; ++k) {
      double* row = a.cells4.data() + 4 * k;
      row[0] = a.nodes[size_t(k)];
      row[1] = a.nodes[size_t(k + 1)];
      row[2] = a.Dh[size_t(k)];
      row[3] = a.cell_dt[size_t(k)];
    }
  }
  for (int i = D - 2; i >= 0; --i)
    strides_[size_t(i)] =
        checked_mul(strides_[size_t(i + 1)], axes[size_t(i + 1)].M, "blend: grid size");
  grid_size_ = checked_mul(strides_[0], axes[0].M, "blend: grid size");
  span_ = 0;
  for (int i = 0; i < D; ++i) span_ += strides_[size_t(i)];
  const index_t nc = index_t(1) << D;
  corner_offsets_.assign(size_t(nc), 0);
  for (index_t c = 0; c < nc; ++c)
    for (int i = 0; i < D; ++i)
      if ((c >> (D - 1 - i)) & 1) corner_offsets_[size_t(c)] += strides_[size_t(i)];
}

index_t WeightFunction::Axis::cell(double q) const {
  return math::cell(nodes.data(), index_t(nodes.size()), lo, hi, inv_h, uniform, q);
}

WeightFunction::AxisTable WeightFunction::axis_table(int i) const {
  const Axis& a = axes_[size_t(i)];
  return {a.nodes.data(), a.Dh.data(), a.det.data(), a.singular.data(), index_t(a.nodes.size()),
          a.kind, a.param, a.lo, a.hi, a.inv_h, a.D0, a.uniform};
}

double distance(Kernel kind, double param, double d) { return math::dist(kind, param, d); }
template <Kernel K, bool Normalize, typename Q>
KRONPE_CLONES void WeightFunction::Axis::weights(const Q* q, index_t stride, const index_t* rows, index_t start,
                                   index_t n, index_t* j, double* w0, double* w1) const {
  if (n > kBlock) throw BackendError("blend: internal error, block larger than kBlock");
  double x[kBlock], g0[kBlock], h[kBlock], dh[kBlock], dt[kBlock];
  const double* g = nodes.data();
  const index_t M = index_t(nodes.size()), last = M - 2;
  if (rows)
    for (index_t b = 0; b < n; ++b) x[b] = double(q[rows[b] * stride]);
  else
    for (index_t b = 0; b < n; ++b) x[b] = double(q[(start + b) * stride]);
  // pass 1: clamp, cell and the cell's entries. Uniform nodes: the cell guessed from the
  // coordinate is checked with two loads (math::cell walks or bisects only when it is wrong);
  // with AVX-512 or AVX2 8 or 4 points at a time (cells_avx512, cells_avx2), the wrong guesses
  // searched after it.
  const auto set_cell = [&](index_t b, index_t jj) {
    j[b] = jj;
    g0[b] = g[jj];
    h[b] = g[jj + 1] - g0[b];
    dh[b] = Dh[size_t(jj)];
    dt[b] = cell_dt[size_t(jj)];
  };
  bool scalar = true;
#if KRONPE_AVX512
  const int simd = g_simd.load(std::memory_order_relaxed);
  if (simd > 0 && uniform && M <= kMaxIntCells) {
    scalar = false;
    if ((simd == 2 ? cells_avx512 : cells_avx2)(cells4.data(), int(last), lo, hi, inv_h, n, x, j, g0,
                                                 h, dh, dt))
      for (index_t b = 0; b < n; ++b)
        if (j[b] < 0) set_cell(b, math::cell(g, M, lo, hi, inv_h, uniform, x[b]));
  }
#endif
  for (index_t b = 0; scalar && b < n; ++b) {
    double xb = x[b];
    xb = !(xb >= lo) ? lo : xb;  // NaN too
    xb = xb > hi ? hi : xb;
    index_t jj = 0;
    if (uniform) {
      jj = static_cast<index_t>((xb - lo) * inv_h);
      jj = jj < 0 ? 0 : (jj > last ? last : jj);
    }
    if (!uniform || (jj > 0 && xb < g[jj]) || (jj < last && xb >= g[jj + 1]))
      jj = math::cell(g, M, lo, hi, inv_h, uniform, xb);
    x[b] = xb;
    set_cell(b, jj);
  }
  // pass 2 (branch-free, vectorised): beta (as math::locate), projections, weights, fallbacks
#pragma omp simd
  for (index_t b = 0; b < n; ++b) {
    const double beta = (x[b] - g0[b]) / h[b];
    math::pair<K, Normalize>(param, D0, dh[b], dt[b], beta, h[b], w0[b], w1[b]);
  }
}

template <typename Q>
void WeightFunction::Axis::weights(bool normalize, const Q* q, index_t stride,
                                   const index_t* rows, index_t start, index_t n, index_t* j,
                                   double* w0, double* w1) const {
#define KRONPE_AXIS_CASE(K)                                                                 \
  case K:                                                                                   \
    if (normalize) weights<K, true, Q>(q, stride, rows, start, n, j, w0, w1);               \
    else weights<K, false, Q>(q, stride, rows, start, n, j, w0, w1);                        \
    return;
  switch (kind) {
    KRONPE_AXIS_CASE(Kernel::linear)
    KRONPE_AXIS_CASE(Kernel::gaussian)
    KRONPE_AXIS_CASE(Kernel::bspline3)
    KRONPE_AXIS_CASE(Kernel::tri)
    KRONPE_AXIS_CASE(Kernel::tri_sq)
  }
#undef KRONPE_AXIS_CASE
}

void WeightFunction::axis(int i, const double* q, index_t n, index_t* j, double* w0,
                          double* w1) const {
  for (index_t s = 0; s < n; s += kBlock)  // the axis kernel works on blocks of kBlock
    axes_[size_t(i)].weights<double>(normalize_, q + s, 1, nullptr, 0, std::min(kBlock, n - s),
                                     j + s, w0 + s, w1 + s);
}

namespace {
// Axes up to which block() keeps every axis's cells and weight pairs, then forms the corners in
// one pass with the corner and axis loops unrolled (corners<D>).
constexpr int kSmallDims = 3;

// The 2^D corner weights and the base index of n points from their per-axis cells j[i] and pairs
// (a0[i], a1[i]): corner c takes a1 along axis i where bit D - 1 - i of c is set, the product
// formed axis 0 first (block's general loop: the same products in the same order, the same bits);
// with idx, the corners' flat indices base + off[c] too.
template <int D>
KRONPE_CLONES void corners(index_t n, const index_t* st, const index_t* off,
                           const index_t (*j)[kBlock], const double (*a0)[kBlock],
                           const double (*a1)[kBlock], index_t* base, double* w, index_t* idx) {
  constexpr int nc = 1 << D;
  for (index_t b = 0; b < n; ++b) {
    index_t bi = 0;
    for (int i = 0; i < D; ++i) bi += j[i][b] * st[i];
    base[b] = bi;
    if (idx)
      for (int c = 0; c < nc; ++c) idx[b * nc + c] = bi + off[c];
    for (int c = 0; c < nc; ++c) {
      double v = (c >> (D - 1)) & 1 ? a1[0][b] : a0[0][b];
      for (int i = 1; i < D; ++i) v *= (c >> (D - 1 - i)) & 1 ? a1[i][b] : a0[i][b];
      w[b * nc + c] = v;
    }
  }
}
}  // namespace

template <typename Q>
void WeightFunction::axis_block(int i, const MatrixView<const Q>& points, const index_t* rows,
                                index_t start, index_t n, index_t* j, double* a0,
                                double* a1) const {
  axes_[size_t(i)].weights<Q>(normalize_, points.data + i * points.stride_c, points.stride_r, rows,
                              start, n, j, a0, a1);
}

namespace {
// corners() from factors: point b's base index fbase(r, 0) and pairs pairs(r, 2 i + bit) of row
// r = rows[b] (start + b without rows); corner c's product formed axis 0 first, as corners<D>
// and block()'s general loop form it (the same bits). D <= 0: the axis count at run time.
template <int D>
KRONPE_CLONES void corners_factored(int dims, index_t n, const index_t* off,
                                    const MatrixView<const index_t>& fbase,
                                    const MatrixView<const double>& pairs, const index_t* rows,
                                    index_t start, index_t* base, double* w, index_t* idx) {
  const int nd = D > 0 ? D : dims;
  const index_t nc = index_t(1) << nd;
  const index_t ps = pairs.stride_c;
  for (index_t b = 0; b < n; ++b) {
    const index_t r = rows ? rows[b] : start + b;
    const index_t bi = fbase(r, 0);
    base[b] = bi;
    if (idx)  // checked by the callers (outside_row, bases_outside)
      for (index_t c = 0; c < nc; ++c) idx[b * nc + c] = wrapping_add(bi, off[c]);
    const double* pr = &pairs(r, 0);
    for (index_t c = 0; c < nc; ++c) {
      double v = pr[((c >> (nd - 1)) & 1) * ps];
      for (int i = 1; i < nd; ++i) v *= pr[(2 * i + ((c >> (nd - 1 - i)) & 1)) * ps];
      w[b * nc + c] = v;
    }
  }
}
}  // namespace

void WeightFunction::block_factored(MatrixView<const index_t> fbase,
                                    MatrixView<const double> pairs, const index_t* rows,
                                    index_t start, index_t n, index_t* base, double* w,
                                    index_t* idx) const {
  const int D = dims();
  const index_t* off = corner_offsets_.data();
  if (D == 1) corners_factored<1>(D, n, off, fbase, pairs, rows, start, base, w, idx);
  else if (D == 2) corners_factored<2>(D, n, off, fbase, pairs, rows, start, base, w, idx);
  else if (D == 3) corners_factored<3>(D, n, off, fbase, pairs, rows, start, base, w, idx);
  else corners_factored<0>(D, n, off, fbase, pairs, rows, start, base, w, idx);
}

template <typename Q>
void WeightFunction::block(const MatrixView<const Q>& points, const index_t* rows, index_t start,
                           index_t n, index_t* base, double* w, index_t* idx) const {
  const int D = dims();
  const index_t nc = corners();
  if (!rows && points.stride_c == 1 && points.stride_r == D) {
    // points in memory order (a plan's sorted copy): the next block's coordinates are fetched
    // ahead (the first axis's strided loads of them otherwise wait on the cache misses)
    const char* next = reinterpret_cast<const char*>(points.data + (start + n) * D);
    const index_t bytes = std::min(n, points.rows - start - n) * D * index_t(sizeof(Q));
    for (index_t o = 0; o < bytes; o += 64) __builtin_prefetch(next + o);
  }
  if (D <= kSmallDims) {
    index_t j[kSmallDims][kBlock];
    double a0[kSmallDims][kBlock], a1[kSmallDims][kBlock];
    for (int i = 0; i < D; ++i) axis_block<Q>(i, points, rows, start, n, j[i], a0[i], a1[i]);
    const index_t *st = strides_.data(), *off = corner_offsets_.data();
    if (D == 1) kronpe::blend::corners<1>(n, st, off, j, a0, a1, base, w, idx);
    else if (D == 2) kronpe::blend::corners<2>(n, st, off, j, a0, a1, base, w, idx);
    else kronpe::blend::corners<3>(n, st, off, j, a0, a1, base, w, idx);
    return;
  }
  index_t j[kBlock];
  double a0[kBlock], a1[kBlock];
  for (index_t b = 0; b < n; ++b) {
    base[b] = 0;
    w[b * nc] = 1.0;
  }
  index_t done = 1;  // corners filled so far
  for (int i = 0; i < D; ++i) {
    axis_block<Q>(i, points, rows, start, n, j, a0, a1);
    const index_t st = strides_[size_t(i)];
    for (index_t b = 0; b < n; ++b) {
      base[b] += j[b] * st;
      double* wb = w + b * nc;
      // corner c of the next axis count: 2c + bit (axis 0 ends up the most significant bit)
      for (index_t k = done - 1; k >= 0; --k) {
        const double wk = wb[k];
        wb[2 * k + 1] = wk * a1[b];
        wb[2 * k] = wk * a0[b];
      }
    }
    done *= 2;
  }
  if (idx)
    for (index_t b = 0; b < n; ++b)
      for (index_t k = 0; k < nc; ++k) idx[b * nc + k] = base[b] + corner_offsets_[size_t(k)];
}

namespace detail {

int simd_path() {
#if KRONPE_AVX512
  return g_simd.load(std::memory_order_relaxed);
#else
  return 0;
#endif
}

}  // namespace detail

int set_simd(int level) {
  require(level >= 0, "set_simd: the level must be >= 0");
#if KRONPE_AVX512
  return g_simd.exchange(std::min(level, cpu_simd()));
#else
  return 0;
#endif
}

#define KRONPE_WEIGHTS_Q(Q)                                                                    \
  template void WeightFunction::block<Q>(const MatrixView<const Q>&, const index_t*, index_t,   \
                                         index_t, index_t*, double*, index_t*) const;           \
  template void WeightFunction::axis_block<Q>(int, const MatrixView<const Q>&, const index_t*, \
                                              index_t, index_t, index_t*, double*, double*)    \
      const;
KRONPE_WEIGHTS_Q(float)
KRONPE_WEIGHTS_Q(double)

}  // namespace kronpe::blend
