// kronpe C++ core: blending-matrix kernels on the CPU (see kronpe/blend.h for the conventions).
#include "kronpe/simd.h"
#include "kronpe/blend.h"
#include "kronpe/avx512.h"
#include "kronpe/threads.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#ifdef KRONPE_OPENMP
#include <omp.h>
#endif

// The weight loops are KRONPE_CLONES (kronpe/common.h); CMakeLists.txt turns floating-point
// contraction off for this file, so that every clone gives the bits of the baseline one.

namespace kronpe::blend {
namespace {

// a + b modulo 2^64: factors' corner indices are formed before they are checked, and a base near
// the int64 limits must not overflow (signed overflow is undefined).
inline index_t wrapping_add(index_t a, index_t b) {
  return static_cast<index_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

int resolve_threads(int threads) {
#ifdef KRONPE_OPENMP
  return threads > 0 ? threads : kernel_threads();
#else
  (void)threads;
  return 1;
#endif
}

// Threads for a kernel of `work` multiply-adds: the caller's count when given (> 0), else at
// most -threads (< 0: a cap, kronpe.torch passes torch.get_num_threads() so) or kronpe's default
// (0, kronpe/threads.h), reduced so that each thread gets at least kMinWorkPerThread (small
// products run serially: on a busy machine fork/join and barriers cost more than they save).
// The results never depend on the count. 2^18 (was 2^20): the blend suite's 2d-512-25pct products
// (65536 points, 4 corners, 3 channels: 786k) ran on one thread; caches cold, one thread / two,
// stored gather 0.87 / 0.52 ms, stored scatter 1.50 / 0.78, on the fly 2.2 / 1.23 and 2.7 / 1.44.
constexpr index_t kMinWorkPerThread = index_t(1) << 18;
int pick_threads(int threads, index_t work) {
  const int cap = threads < 0 ? -checked_threads(-threads) : checked_threads(threads);
  if (cap > 0) return cap;
  const index_t by_work = std::max<index_t>(1, work / kMinWorkPerThread);
  return int(std::min<index_t>(cap < 0 ? -cap : resolve_threads(0), by_work));
}

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

inline bool bad_index(index_t idx, index_t size) {
  return static_cast<std::uint64_t>(idx) >= static_cast<std::uint64_t>(size);
}


// Sorts a slab's items [first, last) of perm stably by key (key[item] in [lo, lo + L)): nothing
// to do when they are in order already (e.g. points that were sorted before), a counting sort
// when the slab's key range is small next to its item count, a stable comparison sort otherwise.
void sort_slab(index_t* first, index_t* last, const index_t* key, index_t lo, index_t L,
               std::vector<index_t>& count, std::vector<index_t>& tmp) {
  const index_t n = last - first;
  bool sorted = true;
  for (index_t e = 1; e < n && sorted; ++e) sorted = key[first[e - 1]] <= key[first[e]];
  if (sorted) return;
  if (L > 8 * n + 256) {
    std::stable_sort(first, last, [key](index_t a, index_t b) { return key[a] < key[b]; });
    return;
  }
  count.assign(size_t(L) + 1, 0);
  for (index_t e = 0; e < n; ++e) ++count[size_t(key[first[e]] - lo + 1)];
  for (index_t k = 0; k < L; ++k) count[size_t(k + 1)] += count[size_t(k)];
  tmp.assign(first, last);
  for (index_t e = 0; e < n; ++e) first[count[size_t(key[tmp[size_t(e)]] - lo)]++] = tmp[size_t(e)];
}

// The points in grid order: perm lists the P items sorted stably by key (the flat index of the
// first corner of their cell, i.e. their smallest index), ptr (NS + 1) the offsets of the
// slabs of nodes [s L, (s + 1) L) in that order. The order is the same whatever the number of
// threads (only the chunking of the work depends on it): the items are bucketed by slab
// (stable), then each slab is sorted by key (stable).
template <typename KeyOf>
void sort_by_cell(index_t P, TransposeLayout lay, KeyOf key_of, index_t* perm, index_t* ptr,
                  int threads) {
  const index_t NS = lay.slabs, L = lay.slab;
  const int nt = int(std::max<index_t>(1, std::min<index_t>(resolve_threads(threads), P)));
  std::vector<index_t> key(static_cast<size_t>(P));
  std::vector<index_t> hist(size_t(nt) * size_t(NS) + 1, 0);
  int bad = 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(| : bad)
  for (int c = 0; c < nt; ++c) {
    const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
    index_t* h = hist.data() + size_t(c) * size_t(NS);
    for (index_t p = p0; p < p1; ++p) {
      const index_t k = key_of(p);
      const index_t s = k < 0 ? index_t(-1) : k / L;
      if (bad_index(s, NS)) {
        bad = 1;
        key[p] = 0;
        continue;
      }
      key[p] = k;
      ++h[s];
    }
  }
  require(!bad, "blend_transpose: an index lies outside the grid");
  // offsets: slab-major, then chunk order (= item order)
  index_t run = 0;
  for (index_t s = 0; s < NS; ++s) {
    ptr[s] = run;
    for (int c = 0; c < nt; ++c) {
      index_t& h = hist[size_t(c) * size_t(NS) + size_t(s)];
      const index_t n = h;
      h = run;
      run += n;
    }
  }
  ptr[NS] = run;
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static, 1)
    for (int c = 0; c < nt; ++c) {
      const index_t p0 = P * c / nt, p1 = P * (c + 1) / nt;
      index_t* h = hist.data() + size_t(c) * size_t(NS);
      for (index_t p = p0; p < p1; ++p) perm[h[key[p] / L]++] = p;
    }
    std::vector<index_t> count, tmp;
#pragma omp for schedule(dynamic, 1)
    for (index_t s = 0; s < NS; ++s)
      sort_slab(perm + ptr[s], perm + ptr[s + 1], key.data(), s * L, L, count, tmp);
  }
}

// A (rows, cols) matrix whose element (r, c) lies at data[r * cols + c].
template <typename M>
bool packed(const M& m) {
  return (m.cols <= 1 || m.stride_c == 1) && (m.rows <= 1 || m.stride_r == m.cols);
}

// Runs body(s, e, n) over the positions [e, e + n) of the plan, slab by slab in two phases (even
// slabs, then odd slabs), each slab in blocks of at most kBlock positions. First, `out` is zeroed:
// an even slab s zeroes the rows [s L, (s + 2) L) that only it writes in the first phase, just
// before it adds to them (the rows are then in cache; the even slabs' ranges cover the grid).
template <typename T, typename Body>
void for_slabs(TransposeLayout lay, const index_t* ptr, int threads, MatrixView<T> out,
               Body body) {
  const int nt = resolve_threads(threads);
  for (index_t phase = 0; phase < 2; ++phase) {
    const index_t count = (lay.slabs - phase + 1) / 2;
    const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
    {
      clock.started();
#pragma omp for schedule(dynamic, 1) nowait
      for (index_t k = 0; k < count; ++k) {
        const index_t s = phase + 2 * k;
        if (phase == 0) {
          const index_t r1 = std::min(out.rows, (s + 2) * lay.slab);
          if (packed(out))
            std::fill(out.data + s * lay.slab * out.cols, out.data + r1 * out.cols, T(0));
          else
            for (index_t r = s * lay.slab; r < r1; ++r)
              for (index_t c = 0; c < out.cols; ++c) out(r, c) = T(0);
        }
        for (index_t e = ptr[s]; e < ptr[s + 1]; e += kBlock)
          body(s, e, std::min(kBlock, ptr[s + 1] - e));
      }
      clock.finished();
    }
  }
}

// out(row(k), c) += weight(k) * values(p, c) for the nnz entries of point p: channel by channel
// (a node's contributions still arrive in point order), the value converted once.
template <typename T, typename Row, typename Weight>
inline void scatter_point(const MatrixView<T>& out, const MatrixView<const T>& values, index_t p,
                          index_t nnz, Row row, Weight weight) {
  for (index_t c = 0; c < out.cols; ++c) {
    const double v = double(values(p, c));
    for (index_t k = 0; k < nnz; ++k) out(row(k), c) += T(weight(k) * v);
  }
}

// Fetches the rows rows[e], e in [from, min(from + kBlock, P)), of m ahead of their use: in plan
// order the values at the points (the P side of a transpose) lie anywhere in memory.
template <typename T>
inline void fetch_rows(const MatrixView<T>& m, const index_t* rows, index_t from, index_t P) {
  for (index_t e = from; e < std::min(from + kBlock, P); ++e) __builtin_prefetch(&m(rows[e], 0));
}

// ---- the packed path: grid values, results and stored rows as dense row-major arrays ----------
//
// The common case (every BlendingMatrix product): C channels of a grid node or a point lie next
// to each other, rows follow each other, and a point has 2, 4 or 8 corners. The kernels below are
// compiled for each corner count and for 1-4 channels (any count otherwise), so that the corner
// and channel loops unroll; they sum in the order of the generic loops (same bits).

// Bytes ahead of a point's last corner that the packed kernels fetch. In plan order the last
// corner (the largest index) never decreases and is the only one not visited a grid row or a
// grid plane earlier: its stream is where the misses are (the others hit the caches), and it runs
// through the grid's memory in order, rows and planes included.
constexpr index_t kAheadBytes = 1024;
// Points ahead whose row on the P side (through rows: anywhere in memory) the kernels fetch.
constexpr index_t kAheadRows = 16;

// Whether one of a point's NC indices ib lies outside [lo, lo + width): the stored kernels check
// each point before they touch its rows (the index loads then overlap the work on the points
// before, where a separate pass over the block waited on their misses).
template <int NC>
inline bool outside_row(const index_t* ib, index_t lo, std::uint64_t width) {
  std::uint64_t top = 0;  // the largest idx - lo, those below lo wrapped around to the top
  for (int k = 0; k < NC; ++k)
    top = std::max(top, static_cast<std::uint64_t>(ib[k]) - static_cast<std::uint64_t>(lo));
  return top >= width;
}

// Where the packed kernels find a point's NC grid rows ib[k] and weights wb[k] (row<NC>(b)), and
// whether one of its rows lies outside [lo, lo + width) (outside<NC>(b, row, lo, width)):
// stored rows: point b's rows idx[b * NC + k] with the weights w[b * NC + k], read in place;
struct StoredRows {
  const index_t* idx;
  const double* w;
  struct Row {
    const index_t* ib;
    const double* wb;
  };
  template <int NC>
  Row row(index_t b) const {
    return {idx + b * NC, w + b * NC};
  }
  template <int NC>
  bool outside(index_t, const Row& r, index_t lo, std::uint64_t width) const {
    return outside_row<NC>(r.ib, lo, width);
  }
};
// factors (compute_factors, packed): point b's rows base[b] + off[c], its weights the products
// of its D = log2(NC) pairs (pairs + 2 D b) formed as corners<D> forms them (the same bits); a
// point's rows lie in [base, base + span].
struct FactorRows {
  const index_t* base;
  const double* pairs;
  index_t off[8];  // the corners' offsets, by value: the kernels keep them in registers
  index_t span;
  FactorRows(const index_t* b, const double* p, const index_t* offsets, int corners, index_t s)
      : base(b), pairs(p), off{}, span(s) {
    for (int c = 0; c < corners && c < 8; ++c) off[c] = offsets[c];
  }
  template <int NC>
  struct Row {
    index_t ib[NC];
    double wb[NC];
  };
  template <int NC>
  Row<NC> row(index_t b) const {
    constexpr int D = NC == 2 ? 1 : (NC == 4 ? 2 : 3);
    static_assert(NC == 1 << D, "FactorRows: 2, 4 or 8 corners");
    Row<NC> r;
    const index_t bi = base[b];
    for (int c = 0; c < NC; ++c) r.ib[c] = wrapping_add(bi, off[c]);  // checked by outside()
    const double* p = pairs + 2 * D * b;
    if constexpr (D == 1) {
      r.wb[0] = p[0];
      r.wb[1] = p[1];
    } else {
      double xy[4];  // corner 2 bx + by of the first two axes: x_bx * y_by
      for (int k = 0; k < 4; ++k) xy[k] = p[k >> 1] * p[2 + (k & 1)];
      if constexpr (D == 2) {
        for (int k = 0; k < 4; ++k) r.wb[k] = xy[k];
      } else {
        for (int k = 0; k < 4; ++k) {
          r.wb[2 * k] = xy[k] * p[4];
          r.wb[2 * k + 1] = xy[k] * p[5];
        }
      }
    }
    return r;
  }
  template <int NC>
  bool outside(index_t b, const Row<NC>&, index_t lo, std::uint64_t width) const {
    // base - lo in [0, width - span): the rows base .. base + span in [lo, lo + width)
    const std::uint64_t rel = static_cast<std::uint64_t>(base[b]) - static_cast<std::uint64_t>(lo);
    return rel >= width || width - rel <= static_cast<std::uint64_t>(span);
  }
};

// n points, rows and weights from src (StoredRows, FactorRows); point b's result goes to row
// rows[b] of out (row b without rows; rows[n, n + ahead) may be read, to fetch them ahead). Each
// channel sums in double, corner 0 first. With Check, false at the first point with a row outside
// [lo, hi) (src.outside), before its rows are read.
// The fetch ahead follows corner NC - 1 (a BlendingMatrix's largest; other orders only lose it).
template <typename T, int NC, int CC, bool Check, typename Src>
KRONPE_CLONES bool gather_packed(const T* grid, index_t C, Src src, index_t n, T* out,
                                 const index_t* rows, index_t ahead, index_t lo, index_t hi) {
  const index_t ch = CC > 0 ? index_t(CC) : C;
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(out + rows[b + kAheadRows] * ch, 1);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, std::uint64_t(hi - lo))) return false;
    const T* g[NC];
    for (int k = 0; k < NC; ++k) g[k] = grid + ib[k] * ch;
    __builtin_prefetch(reinterpret_cast<const char*>(g[NC - 1]) + kAheadBytes);
    T* o = out + (rows ? rows[b] : b) * ch;
    if constexpr (CC > 0) {
      double acc[CC];
      for (int c = 0; c < CC; ++c) acc[c] = 0.0;
      for (int k = 0; k < NC; ++k)
        for (int c = 0; c < CC; ++c) acc[c] += wb[k] * double(g[k][c]);
      for (int c = 0; c < CC; ++c) o[c] = T(acc[c]);
    } else {
      for (index_t c = 0; c < ch; ++c) {
        double acc = 0.0;
        for (int k = 0; k < NC; ++k) acc += wb[k] * double(g[k][c]);
        o[c] = T(acc);
      }
    }
  }
  return true;
}

// The transpose of gather_packed: grid row ib[k] += wb[k] * values row rows[b] (row b without
// rows; rows[n, n + ahead) may be read), point after point, each product rounded to T before it
// is added. With Check, false at the first point with a row outside [lo, hi), before it writes.
template <typename T, int NC, int CC, bool Check, typename Src>
KRONPE_CLONES bool scatter_packed(T* grid, index_t C, Src src, index_t n, const T* values,
                                  const index_t* rows, index_t ahead, index_t lo, index_t hi) {
  const index_t ch = CC > 0 ? index_t(CC) : C;
  const std::uint64_t width = static_cast<std::uint64_t>(hi - lo);
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(values + rows[b + kAheadRows] * ch);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, width)) return false;
    T* g[NC];
    for (int k = 0; k < NC; ++k) g[k] = grid + ib[k] * ch;
    __builtin_prefetch(reinterpret_cast<const char*>(g[NC - 1]) + kAheadBytes, 1);
    const T* v = values + (rows ? rows[b] : b) * ch;
    for (index_t c = 0; c < ch; ++c) {
      const double vc = double(v[c]);
      for (int k = 0; k < NC; ++k) g[k][c] += T(wb[k] * vc);
    }
  }
  return true;
}

#if KRONPE_AVX512
KRONPE_AVX512_BEGIN("avx512f,avx512dq,avx512vl")
// gather_packed for 2-4 channels with AVX-512: a grid row's channels are the lanes of one vector
// (masked loads and stores: nothing beyond the row is touched), so a corner costs a load, a
// conversion and a multiply-add instead of one of each per channel. Per channel, the same
// operations in the same order (same bits). (The transpose's version was 2x slower: neighbouring
// points add to the same nodes, and a masked store does not forward to the next masked load.)
template <typename T, int CC>
inline __m256d load_row(const T* p) {
  constexpr __mmask8 m = __mmask8((1u << CC) - 1u);
  if constexpr (std::is_same_v<T, float>) return _mm256_cvtps_pd(_mm_maskz_loadu_ps(m, p));
  else return _mm256_maskz_loadu_pd(m, p);
}
template <typename T, int CC>
inline void store_row(T* p, __m256d v) {
  constexpr __mmask8 m = __mmask8((1u << CC) - 1u);
  if constexpr (std::is_same_v<T, float>) _mm_mask_storeu_ps(p, m, _mm256_cvtpd_ps(v));
  else _mm256_mask_storeu_pd(p, m, v);
}

template <typename T, int NC, int CC, bool Check, typename Src>
bool gather_rows_avx512(const T* grid, index_t, Src src, index_t n, T* out, const index_t* rows,
                        index_t ahead, index_t lo, index_t hi) {
  for (index_t b = 0; b < n; ++b) {
    if (rows && b + kAheadRows < n + ahead) __builtin_prefetch(out + rows[b + kAheadRows] * CC, 1);
    const auto rw = src.template row<NC>(b);
    const auto& ib = rw.ib;
    const auto& wb = rw.wb;
    if constexpr (Check)
      if (src.template outside<NC>(b, rw, lo, std::uint64_t(hi - lo))) return false;
    __builtin_prefetch(reinterpret_cast<const char*>(grid + ib[NC - 1] * CC) + kAheadBytes);
    __m256d acc = _mm256_setzero_pd();
    for (int k = 0; k < NC; ++k)
      acc = _mm256_add_pd(acc, _mm256_mul_pd(_mm256_set1_pd(wb[k]), load_row<T, CC>(grid + ib[k] * CC)));
    store_row<T, CC>(out + (rows ? rows[b] : b) * CC, acc);
  }
  return true;
}

KRONPE_AVX512_END
#endif

template <typename T, typename Src>
using GatherFn = bool (*)(const T*, index_t, Src, index_t, T*, const index_t*, index_t, index_t,
                          index_t);
template <typename T, typename Src>
using ScatterFn = bool (*)(T*, index_t, Src, index_t, const T*, const index_t*, index_t, index_t,
                           index_t);

// Calls f(NC, CC) (std::integral_constant) for nc corners and C channels; false when nc has no
// compiled kernel (then the generic loops run).
template <typename F>
bool with_sizes(index_t nc, index_t C, F&& f) {
  auto channels = [&](auto NC) {
    switch (C) {
      case 1: f(NC, std::integral_constant<int, 1>{}); break;
      case 2: f(NC, std::integral_constant<int, 2>{}); break;
      case 3: f(NC, std::integral_constant<int, 3>{}); break;
      case 4: f(NC, std::integral_constant<int, 4>{}); break;
      default: f(NC, std::integral_constant<int, 0>{}); break;
    }
    return true;
  };
  switch (nc) {
    case 2: return channels(std::integral_constant<int, 2>{});
    case 4: return channels(std::integral_constant<int, 4>{});
    case 8: return channels(std::integral_constant<int, 8>{});
    default: return false;
  }
}

// The packed kernels for nc corners and C channels, or null.
// (check: the kernels that check every point's indices)
template <typename T, typename Src>
GatherFn<T, Src> gather_kernel(index_t nc, index_t C, bool check) {
  GatherFn<T, Src> f = nullptr;
  with_sizes(nc, C, [&](auto NC, auto CC) {
    f = check ? &gather_packed<T, NC(), CC(), true, Src> : &gather_packed<T, NC(), CC(), false, Src>;
#if KRONPE_AVX512
    if constexpr (CC() >= 2)
      if (g_simd.load(std::memory_order_relaxed) >= 2)
        f = check ? &gather_rows_avx512<T, NC(), CC(), true, Src>
                  : &gather_rows_avx512<T, NC(), CC(), false, Src>;
#endif
  });
  return f;
}
template <typename T, typename Src>
ScatterFn<T, Src> scatter_kernel(index_t nc, index_t C, bool check) {
  ScatterFn<T, Src> f = nullptr;
  with_sizes(nc, C, [&](auto NC, auto CC) {
    f = check ? &scatter_packed<T, NC(), CC(), true, Src>
              : &scatter_packed<T, NC(), CC(), false, Src>;
  });
  return f;
}

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

void require_shape(index_t rows, index_t cols, const char* what, index_t want_rows,
                   index_t want_cols) {
  require(rows == want_rows && cols == want_cols,
          std::string(what) + ": expected shape (" + std::to_string(want_rows) + ", " +
              std::to_string(want_cols) + "), got (" + std::to_string(rows) + ", " +
              std::to_string(cols) + ")");
}

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

int set_simd(int level) {
  require(level >= 0, "set_simd: the level must be >= 0");
#if KRONPE_AVX512
  return g_simd.exchange(std::min(level, cpu_simd()));
#else
  return 0;
#endif
}

TransposeLayout transpose_layout(index_t grid_size, index_t span) {
  require(grid_size >= 0 && span >= 0, "blend_transpose: negative grid size or span");
  TransposeLayout lay;
  if (grid_size == 0) return lay;
  lay.slab = std::max<index_t>(span + 1, (grid_size + kTargetSlabs - 1) / kTargetSlabs);
  lay.slabs = (grid_size + lay.slab - 1) / lay.slab;
  return lay;
}

template <typename Q>
void plan_fly(const WeightFunction& wf, MatrixView<const Q> points, TransposeLayout lay,
              index_t* perm, index_t* ptr, int threads) {
  threads = pick_threads(threads, saturating_mul(points.rows, wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  sort_by_cell(
      points.rows, lay,
      [&](index_t p) { return wf.base_index(points.data + p * points.stride_r, points.stride_c); },
      perm, ptr, threads);
}

void plan_stored(MatrixView<const index_t> indices, TransposeLayout lay, index_t* perm,
                 index_t* ptr, int threads) {
  threads = pick_threads(threads, saturating_mul(indices.rows, indices.cols));
  const index_t nnz = indices.cols;
  sort_by_cell(
      indices.rows, lay,
      [&](index_t p) {
        index_t lo = nnz > 0 ? indices(p, 0) : 0;
        for (index_t k = 1; k < nnz; ++k) lo = std::min(lo, indices(p, k));
        return lo;
      },
      perm, ptr, threads);
}

namespace {
// Scratch of one thread: the bases and corner weights of a block of points.
struct BlockScratch {
  explicit BlockScratch(index_t corners)
      : base(static_cast<size_t>(kBlock)), w(static_cast<size_t>(kBlock * corners)),
        idx(static_cast<size_t>(kBlock * corners)) {}
  std::vector<index_t> base;
  std::vector<double> w;
  std::vector<index_t> idx;  // the packed kernels' grid rows (n, corners)
};

// Runs fill(p0, n, base, w, idx) then body(p0, n, base, w, idx) for every block of kBlock
// consecutive positions [p0, p0 + n) of [0, P), in parallel: fill gives the block's bases, corner
// weights and corner indices (from the points, or from factors). Blocks are handed out
// dynamically (on a shared machine a thread that loses its core does not hold the others up);
// the results never depend on who computes a point.
template <typename Fill, typename Body>
void for_blocks(index_t nc, index_t P, int threads, Fill fill, Body body) {
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  const int nt = resolve_threads(threads);
  const TeamClock clock(nt);
#pragma omp parallel num_threads(nt)
  {
    clock.started();
    BlockScratch sc(nc);
#pragma omp for schedule(dynamic, 16) nowait
    for (index_t blk = 0; blk < nblocks; ++blk) {
      const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
      fill(p0, n, sc.base.data(), sc.w.data(), sc.idx.data());
      body(p0, n, sc.base.data(), sc.w.data(), sc.idx.data());
    }
    clock.finished();
  }
}

// Whether corner indices base + [0, span] of n bases lie in [lo, hi).
inline bool bases_outside(const index_t* base, index_t n, index_t span, index_t lo, index_t hi) {
  bool out = false;
  for (index_t b = 0; b < n; ++b) out |= base[b] < lo || base[b] > hi - 1 - span;
  return out;
}

// out (P, C) = B grid: the blocks' weights from fill(p, rows_or_null, start, n, base, w, idx)
// (block positions [start, start + n)), point p0 + b of them giving row rows[p0 + b] of out (row
// p0 + b without rows). With check, every corner must lie in [0, G) (else false).
template <typename T, typename Fill>
bool gather_blocks(const WeightFunction& wf, index_t P, Fill fill, MatrixView<const T> grid,
                   MatrixView<T> out, int threads, const index_t* rows, bool check) {
  const index_t C = grid.cols, nc = wf.corners(), G = grid.rows, span = wf.span();
  const index_t* off = wf.corner_offsets().data();
  const GatherFn<T, StoredRows> fast =
      packed(grid) && packed(out) ? gather_kernel<T, StoredRows>(nc, C, check) : nullptr;
  int bad = 0;
  for_blocks(nc, P, threads, fill, [&](index_t p0, index_t n, const index_t* base,
                                       const double* w, const index_t* idx) {
    if (check && !fast && bases_outside(base, n, span, 0, G)) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    // points in their own order (a first product; factors come in a plan's order): their
    // corners lie anywhere, fetch them ahead
    if (!rows && !check)
      for (index_t b = 0; b < n * nc; ++b) __builtin_prefetch(&grid(idx[b], 0));
    if (fast) {
      if (!fast(grid.data, C, StoredRows{idx, w}, n, rows ? out.data : out.data + p0 * C,
                rows ? rows + p0 : nullptr, P - p0 - n, 0, G)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const double* wb = w + b * nc;
      const index_t p = rows ? rows[p0 + b] : p0 + b;
      for (index_t c = 0; c < C; ++c) {
        double acc = 0.0;
        for (index_t k = 0; k < nc; ++k) acc += wb[k] * double(grid(base[b] + off[k], c));
        out(p, c) = T(acc);
      }
    }
  });
  return !bad;
}

// out (G, C) = B^T values: the plan's positions [e, e + n) get their weights from
// fill(rows_or_null, e, n, base, w, idx) (rows: perm + e unless sorted), their values from the
// rows perm[e + b] of values. With check, every corner must lie in its slab's range (else false).
template <typename T, typename Fill>
bool scatter_blocks(const WeightFunction& wf, index_t P, Fill fill, MatrixView<const T> values,
                    MatrixView<T> out, int threads, TransposeLayout lay, const index_t* perm,
                    const index_t* ptr, bool sorted, bool check) {
  const index_t C = values.cols, nc = wf.corners(), G = out.rows, span = wf.span();
  const index_t* off = wf.corner_offsets().data();
  const int nt = resolve_threads(threads);
  // per-thread scratch, indexed by the OpenMP thread number
  std::vector<BlockScratch> scratch(static_cast<size_t>(nt), BlockScratch(nc));
  const ScatterFn<T, StoredRows> fast =
      packed(values) && packed(out) ? scatter_kernel<T, StoredRows>(nc, C, check) : nullptr;
  int bad = 0;
  for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
    if (!fast) fetch_rows(values, perm, e + kBlock, P);  // the next block's
#ifdef KRONPE_OPENMP
    BlockScratch& sc = scratch[size_t(omp_get_thread_num())];
#else
    BlockScratch& sc = scratch[0];
#endif
    fill(sorted ? nullptr : perm + e, e, n, sc.base.data(), sc.w.data(),
         fast ? sc.idx.data() : nullptr);
    const index_t lo = s * lay.slab, hi = std::min(G, (s + 2) * lay.slab);
    if (fast) {
      if (!fast(out.data, C, StoredRows{sc.idx.data(), sc.w.data()}, n, values.data, perm + e,
                P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    if (check && bases_outside(sc.base.data(), n, span, lo, hi)) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const index_t base = sc.base[size_t(b)];
      const double* wb = sc.w.data() + b * nc;
      scatter_point(out, values, perm[e + b], nc, [&](index_t k) { return base + off[k]; },
                    [&](index_t k) { return wb[k]; });
    }
  });
  return !bad;
}

// out (P, C) = B grid with a packed kernel: the block [p0, p0 + n) of rows from src_at(p0), its
// results to rows rows[p0 + b] of out (p0 + b without rows). False when a row lies outside [0, G).
template <typename T, typename Src, typename SrcAt>
bool gather_rows_parallel(GatherFn<T, Src> fast, SrcAt src_at, index_t P, int threads,
                          const T* grid, index_t C, index_t G, T* out, const index_t* rows) {
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  int bad = 0;
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(dynamic, 16) \
    reduction(| : bad)
  for (index_t blk = 0; blk < nblocks; ++blk) {
    const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
    if (!fast(grid, C, src_at(p0), n, rows ? out : out + p0 * C, rows ? rows + p0 : nullptr,
              P - p0 - n, 0, G))
      bad = 1;
  }
  return !bad;
}

// The transpose's plan: the given one, or one computed into own_perm / own_ptr by plan(perm, ptr).
template <typename Plan>
void transpose_plan(index_t P, TransposeLayout lay, const index_t*& perm, const index_t*& ptr,
                    bool sorted, std::vector<index_t>& own_perm, std::vector<index_t>& own_ptr,
                    Plan plan) {
  if (perm != nullptr && ptr != nullptr) {  // the slabs' offsets must cut [0, P) in order
    bool ok = ptr[0] == 0 && ptr[lay.slabs] == P;
    for (index_t s = 0; s < lay.slabs; ++s) ok &= ptr[s] <= ptr[s + 1];
    require(ok, "blend_transpose: the plan's slab offsets must rise from 0 to the point count");
    return;
  }
  require(!sorted, "blend_transpose: points in plan order need their plan");
  own_perm.resize(size_t(P));
  own_ptr.resize(size_t(lay.slabs + 1));
  plan(own_perm.data(), own_ptr.data());
  perm = own_perm.data();
  ptr = own_ptr.data();
}

void require_factors(const WeightFunction& wf, const MatrixView<const index_t>& base,
                     const MatrixView<const double>& pairs, const char* what) {
  require_shape(base.rows, base.cols, what, pairs.rows, 1);
  require_shape(pairs.rows, pairs.cols, what, base.rows, 2 * index_t(wf.dims()));
}
}  // namespace

template <typename Q>
void compute_weights(const WeightFunction& wf, MatrixView<const Q> points,
                     MatrixView<index_t> indices, MatrixView<double> weights, int threads) {
  const index_t P = points.rows, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(indices.rows, indices.cols, "blend: indices", P, nc);
  require_shape(weights.rows, weights.cols, "blend: weights", P, nc);
  for_blocks(
      nc, P, threads,
      [&](index_t p0, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, nullptr, p0, n, base, w, idx);
      },
      [&](index_t p0, index_t n, const index_t*, const double* w, const index_t* idx) {
        for (index_t b = 0; b < n; ++b)
          for (index_t k = 0; k < nc; ++k) {
            indices(p0 + b, k) = idx[b * nc + k];
            weights(p0 + b, k) = w[b * nc + k];
          }
      });
}

template <typename Q>
void compute_factors(const WeightFunction& wf, MatrixView<const Q> points, const index_t* rows,
                     MatrixView<index_t> base, MatrixView<double> pairs, int threads) {
  const index_t P = points.rows;
  const int D = wf.dims();
  threads = pick_threads(threads, saturating_mul(P, 4 * index_t(D)));
  require(points.cols == D, "blend: points must have one column per grid axis");
  require_shape(base.rows, base.cols, "blend: factor bases", P, 1);
  require_shape(pairs.rows, pairs.cols, "blend: factor pairs", P, 2 * index_t(D));
  const index_t nblocks = (P + kBlock - 1) / kBlock;
  const int nt = resolve_threads(threads);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
  for (index_t blk = 0; blk < nblocks; ++blk) {
    const index_t p0 = blk * kBlock, n = std::min(kBlock, P - p0);
    index_t j[kBlock];
    double a0[kBlock], a1[kBlock];
    for (index_t b = 0; b < n; ++b) base(p0 + b, 0) = 0;
    for (int i = 0; i < D; ++i) {
      wf.axis_block<Q>(i, points, rows ? rows + p0 : nullptr, p0, n, j, a0, a1);
      const index_t st = wf.strides()[size_t(i)];
      for (index_t b = 0; b < n; ++b) {
        base(p0 + b, 0) += j[b] * st;
        pairs(p0 + b, 2 * i) = a0[b];
        pairs(p0 + b, 2 * i + 1) = a1[b];
      }
    }
  }
}

template <typename T, typename Q>
void blend_fly(const WeightFunction& wf, MatrixView<const Q> points, MatrixView<const T> grid,
               MatrixView<T> out, int threads, const index_t* rows) {
  const index_t P = points.rows, C = grid.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  gather_blocks<T>(
      wf, P,
      [&](index_t p0, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, nullptr, p0, n, base, w, idx);
      },
      grid, out, threads, rows, false);
}

template <typename T>
void blend_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                    MatrixView<const double> pairs, MatrixView<const T> grid, MatrixView<T> out,
                    int threads, const index_t* rows) {
  const index_t P = base.rows, C = grid.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + 1));
  require_factors(wf, base, pairs, "blend: factors");
  require_shape(grid.rows, grid.cols, "blend: grid values", wf.grid_size(), C);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  const GatherFn<T, FactorRows> fused =
      packed(base) && packed(pairs) && packed(grid) && packed(out)
          ? gather_kernel<T, FactorRows>(nc, C, true)
          : nullptr;
  if (fused) {  // the corner weights formed in registers, nothing written between
    const index_t D2 = 2 * index_t(wf.dims()), span = wf.span();
    const index_t* off = wf.corner_offsets().data();
    const auto at = [&](index_t p0) {
      return FactorRows(base.data + p0, pairs.data + p0 * D2, off, int(nc), span);
    };
    require(gather_rows_parallel<T, FactorRows>(fused, at, P, threads, grid.data, C,
                                                wf.grid_size(), out.data, rows),
            "blend: a factor's corner lies outside the grid");
    return;
  }
  const bool ok = gather_blocks<T>(
      wf, P,
      [&](index_t p0, index_t n, index_t* b, double* w, index_t* idx) {
        wf.block_factored(base, pairs, nullptr, p0, n, b, w, idx);
      },
      grid, out, threads, rows, true);
  require(ok, "blend: a factor's corner lies outside the grid");
}

template <typename T, typename Q>
void blend_transpose_fly(const WeightFunction& wf, MatrixView<const Q> points,
                         MatrixView<const T> values, MatrixView<T> out, int threads,
                         const index_t* perm, const index_t* ptr, bool sorted) {
  const index_t P = points.rows, C = values.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + wf.dims()));
  require(points.cols == wf.dims(), "blend: points must have one column per grid axis");
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require_shape(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  const TransposeLayout lay = transpose_layout(wf.grid_size(), wf.span());
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr,
                 [&](index_t* pp, index_t* sp) { plan_fly(wf, points, lay, pp, sp, threads); });
  scatter_blocks<T>(
      wf, P,
      [&](const index_t* rows, index_t e, index_t n, index_t* base, double* w, index_t* idx) {
        wf.block(points, rows, e, n, base, w, idx);
      },
      values, out, threads, lay, perm, ptr, sorted, false);
}

template <typename T>
void blend_transpose_factored(const WeightFunction& wf, MatrixView<const index_t> base,
                              MatrixView<const double> pairs, MatrixView<const T> values,
                              MatrixView<T> out, int threads, const index_t* perm,
                              const index_t* ptr, bool sorted) {
  const index_t P = base.rows, C = values.cols, nc = wf.corners();
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nc), C + 1));
  require_factors(wf, base, pairs, "blend_transpose: factors");
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require_shape(out.rows, out.cols, "blend_transpose: output", wf.grid_size(), C);
  const TransposeLayout lay = transpose_layout(wf.grid_size(), wf.span());
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr, [&](index_t* pp, index_t* sp) {
    sort_by_cell(P, lay, [&](index_t p) { return base(p, 0); }, pp, sp,
                 pick_threads(threads, P));
  });
  const ScatterFn<T, FactorRows> fused =
      sorted && packed(base) && packed(pairs) && packed(values) && packed(out)
          ? scatter_kernel<T, FactorRows>(nc, C, true)
          : nullptr;
  bool ok = true;
  if (fused) {  // factors in plan order: read as streams, the corner weights in registers
    const index_t D2 = 2 * index_t(wf.dims()), span = wf.span(), G = out.rows;
    const index_t* off = wf.corner_offsets().data();
    int bad = 0;
    for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
      const index_t lo = s * lay.slab, hi = std::min(G, (s + 2) * lay.slab);
      if (!fused(out.data, C, FactorRows(base.data + e, pairs.data + e * D2, off, int(nc), span), n,
                 values.data, perm + e, P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
    });
    ok = !bad;
  } else {
    ok = scatter_blocks<T>(
        wf, P,
        [&](const index_t* rows, index_t e, index_t n, index_t* b, double* w, index_t* idx) {
          wf.block_factored(base, pairs, rows, e, n, b, w, idx);
        },
        values, out, threads, lay, perm, ptr, sorted, true);
  }
  require(ok, "blend_transpose: a factor's corner lies outside the grid or its slab");
}

template <typename T>
void blend_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                  MatrixView<const T> grid, MatrixView<T> out, int threads, const index_t* rows) {
  const index_t P = indices.rows, nnz = indices.cols, C = grid.cols, G = grid.rows;
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nnz), C));
  require_shape(weights.rows, weights.cols, "blend: weights", P, nnz);
  require_shape(out.rows, out.cols, "blend: output", P, C);
  const int nt = resolve_threads(threads);
  int bad = 0;
  const GatherFn<T, StoredRows> fast =
      packed(indices) && packed(weights) && packed(grid) && packed(out)
          ? gather_kernel<T, StoredRows>(nnz, C, true)
          : nullptr;
  if (fast) {
    const auto at = [&](index_t p0) {
      return StoredRows{indices.data + p0 * nnz, weights.data + p0 * nnz};
    };
    require(gather_rows_parallel<T, StoredRows>(fast, at, P, threads, grid.data, C, G, out.data, rows),
            "blend: an index lies outside the grid");
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(dynamic, kBlock * 16) reduction(| : bad)
  for (index_t p = 0; p < P; ++p) {
    for (index_t k = 0; k < nnz; ++k) bad |= bad_index(indices(p, k), G) ? 1 : 0;
    if (bad) continue;
    const index_t o = rows ? rows[p] : p;
    for (index_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (index_t k = 0; k < nnz; ++k) acc += weights(p, k) * double(grid(indices(p, k), c));
      out(o, c) = T(acc);
    }
  }
  require(!bad, "blend: an index lies outside the grid");
}

template <typename T>
void blend_transpose_stored(MatrixView<const index_t> indices, MatrixView<const double> weights,
                            MatrixView<const T> values, MatrixView<T> out, index_t span,
                            int threads, const index_t* perm, const index_t* ptr, bool sorted) {
  const index_t P = indices.rows, nnz = indices.cols, C = values.cols, G = out.rows;
  threads = pick_threads(threads, saturating_mul(saturating_mul(P, nnz), C));
  require_shape(weights.rows, weights.cols, "blend_transpose: weights", P, nnz);
  require_shape(values.rows, values.cols, "blend_transpose: values", P, C);
  require(out.cols == C, "blend_transpose: output must have as many channels as values");
  const TransposeLayout lay = transpose_layout(G, span);
  std::vector<index_t> own_perm, own_ptr;
  transpose_plan(P, lay, perm, ptr, sorted, own_perm, own_ptr,
                 [&](index_t* pp, index_t* sp) { plan_stored(indices, lay, pp, sp, threads); });
  const index_t L = lay.slab;
  int bad = 0;
  const ScatterFn<T, StoredRows> fast =
      packed(indices) && packed(weights) && packed(values) && packed(out)
          ? scatter_kernel<T, StoredRows>(nnz, C, true)
          : nullptr;
  const int nt = resolve_threads(threads);
  // rows of indices and weights gathered into plan order (packed path, points not sorted)
  std::vector<BlockScratch> scratch(static_cast<size_t>(fast && !sorted ? nt : 0),
                                    BlockScratch(nnz));
  // a row whose entries leave [s L, (s + 2) L) would race with the neighbouring slab: refused
  for_slabs(lay, ptr, threads, out, [&](index_t s, index_t e, index_t n) {
    if (!fast) fetch_rows(values, perm, e + kBlock, P);  // the next block's
    const index_t lo = s * L, hi = std::min(G, (s + 2) * L);
    const index_t d0 = sorted ? e : 0;
    const index_t* rows = sorted ? nullptr : perm + e;  // indices rows, else d0 + b
    if (fast) {
      const index_t* idx = indices.data + d0 * nnz;
      const double* w = weights.data + d0 * nnz;
      if (rows) {
#ifdef KRONPE_OPENMP
        BlockScratch& sc = scratch[size_t(omp_get_thread_num())];
#else
        BlockScratch& sc = scratch[0];
#endif
        for (index_t b = 0; b < n; ++b)
          for (index_t k = 0; k < nnz; ++k) {
            sc.idx[size_t(b * nnz + k)] = indices(rows[b], k);
            sc.w[size_t(b * nnz + k)] = weights(rows[b], k);
          }
        idx = sc.idx.data();
        w = sc.w.data();
      }
      if (!fast(out.data, C, StoredRows{idx, w}, n, values.data, perm + e, P - e - n, lo, hi)) {
#pragma omp atomic write
        bad = 1;
      }
      return;
    }
    bool outside = false;
    for (index_t b = 0; b < n; ++b)
      for (index_t k = 0; k < nnz; ++k) {
        const index_t row = indices(rows ? rows[b] : d0 + b, k);
        outside |= row < lo || row >= hi;
      }
    if (outside) {
#pragma omp atomic write
      bad = 1;
      return;
    }
    for (index_t b = 0; b < n; ++b) {
      const index_t d = rows ? rows[b] : d0 + b;
      scatter_point(out, values, perm[e + b], nnz, [&](index_t k) { return indices(d, k); },
                    [&](index_t k) { return weights(d, k); });
    }
  });
  require(!bad, "blend_transpose: an index lies outside the grid or beyond the declared span");
}

#define KRONPE_BLEND_Q(Q)                                                                      \
  template void WeightFunction::block<Q>(const MatrixView<const Q>&, const index_t*, index_t,   \
                                         index_t, index_t*, double*, index_t*) const;           \
  template void plan_fly<Q>(const WeightFunction&, MatrixView<const Q>, TransposeLayout,       \
                            index_t*, index_t*, int);                                          \
  template void compute_weights<Q>(const WeightFunction&, MatrixView<const Q>,                 \
                                   MatrixView<index_t>, MatrixView<double>, int);          \
  template void WeightFunction::axis_block<Q>(int, const MatrixView<const Q>&, const index_t*, \
                                              index_t, index_t, index_t*, double*, double*)    \
      const;                                                                                   \
  template void compute_factors<Q>(const WeightFunction&, MatrixView<const Q>, const index_t*, \
                                   MatrixView<index_t>, MatrixView<double>, int);
#define KRONPE_BLEND_TQ(T, Q)                                                                  \
  template void blend_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,                    \
                                MatrixView<const T>, MatrixView<T>, int, const index_t*);      \
  template void blend_transpose_fly<T, Q>(const WeightFunction&, MatrixView<const Q>,          \
                                          MatrixView<const T>, MatrixView<T>, int,             \
                                          const index_t*, const index_t*, bool);
#define KRONPE_BLEND_T(T)                                                                      \
  template void blend_stored<T>(MatrixView<const index_t>, MatrixView<const double>,           \
                                MatrixView<const T>, MatrixView<T>, int, const index_t*);      \
  template void blend_transpose_stored<T>(MatrixView<const index_t>, MatrixView<const double>, \
                                          MatrixView<const T>, MatrixView<T>, index_t, int,    \
                                          const index_t*, const index_t*, bool);             \
  template void blend_factored<T>(const WeightFunction&, MatrixView<const index_t>,            \
                                  MatrixView<const double>, MatrixView<const T>, MatrixView<T>, \
                                  int, const index_t*);                                        \
  template void blend_transpose_factored<T>(const WeightFunction&, MatrixView<const index_t>,  \
                                            MatrixView<const double>, MatrixView<const T>,     \
                                            MatrixView<T>, int, const index_t*,                \
                                            const index_t*, bool);
KRONPE_BLEND_Q(float)
KRONPE_BLEND_Q(double)
KRONPE_BLEND_TQ(float, float)
KRONPE_BLEND_TQ(float, double)
KRONPE_BLEND_TQ(double, float)
KRONPE_BLEND_TQ(double, double)
KRONPE_BLEND_T(float)
KRONPE_BLEND_T(double)

}  // namespace kronpe::blend
